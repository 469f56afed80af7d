//! Compiled == eager for a small CNN block built from the convolution, pooling and
//! normalization functions (`nn::conv2d`, `conv_transpose2d`, `max_pool2d`, `avg_pool2d`,
//! `adaptive_avg_pool2d`, `batch_norm` in eval mode, `group_norm`): the convolution and pooling
//! ops run as barriers (their eager kernels), the normalizations' arithmetic compiles; forward
//! values and gradients through compiled training.

use tensorplay_compiler::compile;
use tensorplay_runtime::nn;
use tensorplay_runtime::{DType, Result, Tensor, autograd};

fn close(a: &Tensor, b: &Tensor, tol: f64) -> Result<bool> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Ok(false);
    }
    let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
    Ok(a.iter()
        .zip(&b)
        .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs())))
}

/// conv → batch_norm (eval) → relu → max_pool → conv (groups, "same") → group_norm → avg_pool
/// → adaptive_avg_pool → linear.
fn program(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, w1, b1, w2, fc, rm, rv) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5], &xs[6]);
    let y = nn::conv2d(x, w1, Some(b1), &[1], 1, &[1], 1)?; // [2, 4, 8, 8]
    let y = nn::batch_norm(&y, Some(rm), Some(rv), None, None, false, 0.1, 1e-5)?.relu()?;
    let y = nn::max_pool2d(&y, &[2], &[], &[0], &[1], false)?; // [2, 4, 4, 4]
    let y = nn::conv2d(&y, w2, None, &[1], nn::ConvPadding::Same, &[1], 2)?;
    let y = nn::group_norm(&y, 2, None, None, 1e-5)?;
    let y = nn::avg_pool2d(&y, &[3], &[1], &[1], false, false, None)?;
    let y = nn::adaptive_avg_pool2d(&y, &[2])?.reshape(&[2, 16])?;
    let out = nn::linear(&y, fc, None)?;
    Ok(vec![out.mul(&out)?.sum_all()?])
}

fn inputs() -> Result<Vec<Tensor>> {
    let r = |s: &[usize], seed| Tensor::randn_seeded(s, DType::F64, seed);
    Ok(vec![
        r(&[2, 3, 8, 8], 1)?.requires_grad_(true)?,
        r(&[4, 3, 3, 3], 2)?.requires_grad_(true)?,
        r(&[4], 3)?.requires_grad_(true)?,
        r(&[4, 2, 3, 3], 4)?.requires_grad_(true)?,
        r(&[5, 16], 5)?.requires_grad_(true)?,
        r(&[4], 6)?,
        r(&[4], 7)?.abs()?.add_scalar(0.5)?,
    ])
}

#[test]
fn a_cnn_block_compiles_like_eager() -> Result<()> {
    let xs = inputs()?;
    let want = program(&xs)?.remove(0);
    let grads = autograd::grad(std::slice::from_ref(&want), &xs[..5], &[None], false)?;
    let f = compile(program);
    let got = f.call(&xs)?.remove(0);
    assert!(close(&got, &want, 1e-12)?, "{got:?} vs {want:?}");
    let cgrads = autograd::grad(std::slice::from_ref(&got), &xs[..5], &[None], false)?;
    for (i, (c, e)) in cgrads.iter().zip(&grads).enumerate() {
        let (c, e) = (c.as_ref().unwrap(), e.as_ref().unwrap());
        assert!(close(c, e, 1e-10)?, "gradient {i}");
    }
    // The compiled function serves a second call with new values.
    let xs2: Vec<Tensor> = xs
        .iter()
        .map(|t| t.mul_scalar(0.5).map(|t| t.detach()))
        .collect::<Result<_>>()?;
    let want2 = program(&xs2)?.remove(0);
    assert!(close(&f.call(&xs2)?.remove(0), &want2, 1e-12)?);
    Ok(())
}

#[test]
fn batch_norm_training_under_compile_updates_the_running_stats_like_eager() -> Result<()> {
    let step = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = nn::batch_norm(
            &xs[0],
            Some(&xs[1]),
            Some(&xs[2]),
            None,
            None,
            true,
            0.1,
            1e-5,
        )?;
        Ok(vec![y])
    };
    let x = Tensor::randn_seeded(&[4, 3, 5], DType::F64, 1)?;
    let stats = || -> Result<(Tensor, Tensor)> {
        Ok((
            Tensor::zeros(&[3], DType::F64),
            Tensor::ones(&[3], DType::F64),
        ))
    };
    let (rm, rv) = stats()?;
    let want = step(&[x.clone(), rm.clone(), rv.clone()])?.remove(0);
    let (crm, crv) = stats()?;
    let f = compile(step);
    let got = f.call(&[x, crm.clone(), crv.clone()])?.remove(0);
    assert!(close(&got, &want, 1e-12)?);
    assert!(
        close(&crm, &rm, 1e-15)? && close(&crv, &rv, 1e-15)?,
        "{crm:?} vs {rm:?}"
    );
    Ok(())
}

/// pad (reflect, then constant with a crop) → bilinear upsample → replicate pad → nearest
/// downsample → area resize: index tables built from the sizes, captured as constants.
fn resize_program(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    use nn::{InterpolateMode as I, PadMode as P};
    let y = nn::pad(&xs[0], &[1, 2, 2, 1], P::Reflect, 0.0)?; // [2, 3, 9, 11]
    let y = nn::pad(&y, &[-1, 1], P::Constant, 0.25)?;
    let y = nn::interpolate(&y, None, Some(&[1.5, 0.75]), I::Bilinear, Some(false), None)?;
    let y = nn::pad(&y, &[2, 0, 0, 3], P::Replicate, 0.0)?.mul(&xs[1])?;
    let y = nn::interpolate(&y, Some(&[7, 5]), None, I::Nearest, None, None)?;
    let y = nn::interpolate(&y, Some(&[3]), None, I::Area, None, None)?;
    Ok(vec![y.mul(&y)?.sum_all()?, y])
}

#[test]
fn pad_and_interpolate_compile_like_eager_with_gradients() -> Result<()> {
    let x = Tensor::randn_seeded(&[2, 3, 6, 8], DType::F64, 11)?.requires_grad_(true)?;
    let s = Tensor::randn_seeded(&[1, 3, 1, 1], DType::F64, 12)?.requires_grad_(true)?;
    let xs = [x, s];
    let want = resize_program(&xs)?;
    assert_eq!(want[1].shape(), &[2, 3, 3, 3]);
    let grads = autograd::grad(&want[..1], &xs, &[None], false)?;
    let f = compile(resize_program);
    let got = f.call(&xs)?;
    assert!(
        close(&got[1], &want[1], 1e-12)?,
        "{:?} vs {:?}",
        got[1],
        want[1]
    );
    let cgrads = autograd::grad(&got[..1], &xs, &[None], false)?;
    for (i, (c, e)) in cgrads.iter().zip(&grads).enumerate() {
        let (c, e) = (c.as_ref().unwrap(), e.as_ref().unwrap());
        assert!(close(c, e, 1e-10)?, "gradient {i}");
    }
    // Another input size recompiles (the index tables follow the sizes) and still agrees.
    let x2 = Tensor::randn_seeded(&[1, 3, 5, 7], DType::F64, 13)?;
    let (w, g) = (
        resize_program(&[x2.clone(), xs[1].clone()])?,
        f.call(&[x2, xs[1].clone()])?,
    );
    assert!(close(&g[1], &w[1], 1e-12)?);
    Ok(())
}

/// conv_transpose2d (stride 2, output_padding, groups) → relu → conv_transpose2d: the
/// transposed convolution runs as a barrier like conv2d, forward and backward.
fn upsample_program(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = nn::conv_transpose2d(&xs[0], &xs[1], Some(&xs[2]), &[2], &[1], &[1], 2, &[1])?;
    let y = nn::conv_transpose2d(&y.relu()?, &xs[3], None, &[1, 2], &[0], &[0], 1, &[2, 1])?;
    Ok(vec![y.mul(&y)?.sum_all()?, y])
}

#[test]
fn conv_transpose2d_compiles_like_eager_with_gradients() -> Result<()> {
    let r = |s: &[usize], seed| Tensor::randn_seeded(s, DType::F64, seed)?.requires_grad_(true);
    let xs = [
        r(&[2, 4, 3, 5], 21)?,
        r(&[4, 3, 3, 3], 22)?,
        r(&[6], 23)?,
        r(&[6, 2, 2, 3], 24)?,
    ];
    let want = upsample_program(&xs)?;
    // [2, 6, 6, 10] after the first, [2, 2, 8, 21] after the second.
    assert_eq!(want[1].shape(), &[2, 2, 8, 21]);
    let grads = autograd::grad(&want[..1], &xs, &[None], false)?;
    let f = compile(upsample_program);
    let got = f.call(&xs)?;
    assert!(close(&got[1], &want[1], 1e-12)?);
    let cgrads = autograd::grad(&got[..1], &xs, &[None], false)?;
    for (i, (c, e)) in cgrads.iter().zip(&grads).enumerate() {
        let (c, e) = (c.as_ref().unwrap(), e.as_ref().unwrap());
        assert!(close(c, e, 1e-10)?, "gradient {i}");
    }
    // Another input size still agrees.
    let x2 = Tensor::randn_seeded(&[1, 4, 4, 2], DType::F64, 25)?;
    let mut xs2 = xs.to_vec();
    xs2[0] = x2;
    assert!(close(
        &f.call(&xs2)?[1],
        &upsample_program(&xs2)?[1],
        1e-12
    )?);
    Ok(())
}
