//! The ops added through the op table alone (issue 8): `log1p`, `expm1`, `remainder`,
//! `leaky_relu`, `softplus` — eager values (PyTorch semantics), dtype rules and errors, autograd,
//! vmap (by their class-derived rule, no per-example fallback) and autocast (their declared
//! policy). Compiled runs are in `compiler/tests/regression.rs` and `fuzz.rs`.

use tensorplay_runtime::autocast::autocast;
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::vmap::{fallback_calls, vmap};
use tensorplay_runtime::{DType, Result, Tensor};

fn t64(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn log1p_and_expm1_values() -> Result<()> {
    let x = Tensor::from_vec(
        vec![0.0f32, -0.0, 1e-8, -1.0, -2.0, 3.0, f32::INFINITY],
        &[7],
    )?;
    let y = f32s(&x.log1p()?);
    assert_eq!(y[0].to_bits(), 0f32.to_bits());
    assert_eq!(y[1].to_bits(), (-0f32).to_bits());
    assert_eq!(y[2], 1e-8);
    assert_eq!(y[3], f32::NEG_INFINITY);
    assert!(y[4].is_nan());
    assert!((y[5] as f64 - 3f64.ln_1p()).abs() < 3e-7);
    assert_eq!(y[6], f32::INFINITY);
    let e = f32s(&x.expm1()?);
    assert_eq!(e[2], 1e-8);
    assert!((e[3] as f64 - (-1f64).exp_m1()).abs() < 1e-7);
    assert_eq!(e[6], f32::INFINITY);
    assert_eq!(
        f32s(&Tensor::from_vec(vec![f32::NEG_INFINITY], &[1])?.expm1()?),
        [-1.0]
    );
    // Integers and bool compute in f32, like exp and log.
    let i = Tensor::from_vec(vec![0i64, 1], &[2])?;
    assert_eq!(i.log1p()?.dtype(), DType::F32);
    let ie = f32s(&i.expm1()?);
    assert_eq!(ie[0], 0.0);
    assert!((ie[1] as f64 - 1f64.exp_m1()).abs() < 3e-7);
    Ok(())
}

#[test]
fn remainder_takes_the_divisor_sign() -> Result<()> {
    let a = t64(&[5.5, -5.5, 5.5, -5.5, 3.0, 0.0, 1.0]);
    let b = t64(&[2.0, 2.0, -2.0, -2.0, 3.0, 2.0, 0.0]);
    let r = a.remainder(&b)?.to_vec::<f64>()?;
    assert_eq!(&r[..6], &[1.5, 0.5, -0.5, -1.5, 0.0, 0.0]);
    assert!(r[6].is_nan(), "float remainder by zero is NaN");
    // Integers: Python's modulo, result dtype promoted as for sub.
    let ia = Tensor::from_vec(vec![7i32, -7, 7, -7, i32::MIN], &[5])?;
    let ib = Tensor::from_vec(vec![3i32, 3, -3, -3, -1], &[5])?;
    let ir = ia.remainder(&ib)?;
    assert_eq!(ir.dtype(), DType::I32);
    assert_eq!(ir.to_vec::<i32>()?, vec![1, 2, -2, -1, 0]);
    assert_eq!(ia.remainder_scalar(2.5)?.dtype(), DType::F32);
    // Integer division by zero is an error naming the op and the argument.
    let err = ia
        .remainder(&Tensor::from_vec(vec![1i32, 0, 1, 1, 1], &[5])?)
        .unwrap_err()
        .to_string();
    assert!(err.contains("remainder") && err.contains("other"), "{err}");
    // Two bools are rejected, like sub.
    let bools = Tensor::from_vec(vec![true], &[1])?;
    assert!(bools.remainder(&bools).is_err());
    // Broadcasting.
    let m = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    assert_eq!(
        f32s(&m.remainder(&Tensor::from_vec(vec![4.0f32, -4.0, 2.5], &[3])?)?),
        vec![1.0, -2.0, 0.5, 0.0, -3.0, 1.0]
    );
    Ok(())
}

#[test]
fn leaky_relu_and_softplus_values() -> Result<()> {
    let x = Tensor::from_vec(vec![-2.0f32, -0.0, 0.0, 3.0, f32::NAN], &[5])?;
    let l = f32s(&x.leaky_relu(0.01)?);
    assert_eq!(&l[..4], &[-2.0 * 0.01, -0.0, 0.0, 3.0]);
    assert!(l[4].is_nan());
    let s = x.softplus(1.0, 20.0)?.to_vec::<f32>()?;
    let near = |got: f32, want: f64| ((got as f64 - want) / want).abs() < 3e-7;
    assert!(near(s[0], (-2f64).exp().ln_1p()), "{}", s[0]);
    assert!(near(s[3], 3f64.exp().ln_1p()), "{}", s[3]);
    assert!(s[4].is_nan());
    // Above the threshold (beta x > threshold) softplus is x itself.
    let big = t64(&[25.0, 11.0]);
    assert_eq!(big.softplus(1.0, 20.0)?.to_vec::<f64>()?[0], 25.0);
    assert_eq!(big.softplus(2.0, 20.0)?.to_vec::<f64>()?[1], 11.0);
    let small = (22f64).exp().ln_1p() / 2.0;
    assert_eq!(t64(&[11.0]).softplus(2.0, 30.0)?.to_vec::<f64>()?[0], small);
    // f16/bf16 compute in f32 and round once.
    let h = x.to_dtype(DType::BF16)?;
    assert_eq!(h.leaky_relu(0.01)?.dtype(), DType::BF16);
    assert_eq!(h.softplus(1.0, 20.0)?.dtype(), DType::BF16);
    // Floating inputs only, as in PyTorch; the error names the op.
    let i = Tensor::from_vec(vec![1i64], &[1])?;
    for e in [
        i.leaky_relu(0.1).unwrap_err(),
        i.softplus(1.0, 20.0).unwrap_err(),
    ] {
        let m = e.to_string();
        assert!(m.contains("leaky_relu") || m.contains("softplus"), "{m}");
    }
    Ok(())
}

#[test]
fn gradients_match_finite_differences() -> Result<()> {
    let x = t64(&[0.7, -1.3, 2.1, -0.4]).requires_grad_(true)?;
    let p = t64(&[0.9, 1.7, 0.6, 0.45]).requires_grad_(true)?;
    let o = GradcheckOptions::default;
    gradcheck(|v| v[0].log1p(), std::slice::from_ref(&p), o())?;
    gradcheck(|v| v[0].expm1(), std::slice::from_ref(&x), o())?;
    gradcheck(|v| v[0].leaky_relu(0.2), std::slice::from_ref(&x), o())?;
    gradcheck(|v| v[0].softplus(1.5, 2.0), std::slice::from_ref(&x), o())?;
    gradcheck(|v| v[0].remainder(&v[1]), &[x.clone(), p.clone()], o())?;
    // Above the threshold the gradient is 1.
    let big = t64(&[30.0]).requires_grad_(true)?;
    let g = tensorplay_runtime::autograd::grad(
        &[big.softplus(1.0, 20.0)?.sum_all()?],
        std::slice::from_ref(&big),
        &[None],
        false,
    )?;
    assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>()?, vec![1.0]);
    Ok(())
}

#[test]
fn vmap_uses_the_elementwise_rule() -> Result<()> {
    let x = Tensor::randn_seeded(&[3, 4], DType::F64, 7)?;
    let y = Tensor::randn_seeded(&[4], DType::F64, 8)?
        .abs()?
        .add_scalar(0.5)?;
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let (x, y) = (&xs[0], &xs[1]);
        Ok(vec![
            x.abs()?.log1p()?,
            x.expm1()?,
            x.remainder(y)?,
            x.leaky_relu(0.3)?,
            x.softplus(2.0, 1.0)?,
        ])
    };
    let before = fallback_calls();
    let got = vmap(&f, vec![Some(0), None], vec![0])(&[x.clone(), y.clone()])?;
    assert_eq!(fallback_calls(), before, "no per-example fallback");
    for b in 0..3 {
        let want = f(&[x.select(0, b)?, y.clone()])?;
        for (g, w) in got.iter().zip(&want) {
            assert!(g.select(0, b)?.allclose(w, 0.0, 0.0)?);
        }
    }
    Ok(())
}

#[test]
fn autocast_follows_the_declared_policy() -> Result<()> {
    let x = Tensor::ones(&[2], DType::BF16);
    let _g = autocast("cpu", DType::BF16)?;
    // f32 policy: half inputs widen (range-sensitive math).
    assert_eq!(x.log1p()?.dtype(), DType::F32);
    assert_eq!(x.expm1()?.dtype(), DType::F32);
    assert_eq!(x.softplus(1.0, 20.0)?.dtype(), DType::F32);
    // Keep: runs in the input dtype.
    assert_eq!(x.leaky_relu(0.1)?.dtype(), DType::BF16);
    assert_eq!(x.remainder(&x)?.dtype(), DType::BF16);
    Ok(())
}
