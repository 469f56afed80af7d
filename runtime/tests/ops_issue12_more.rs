//! Issue 12 item 1, second batch: `nansum`, `cumprod`, `diagonal`, `nn::embedding_padded`,
//! `nn::nll_loss_weighted`/`cross_entropy_weighted`, `randint_seeded` and `bernoulli_seeded` —
//! values against hand-computed expectations, special values, empty/0-d/non-contiguous inputs,
//! gradients, vmap and argument errors. Compiled runs are in `compiler/tests/nn_compiled.rs`.

#[path = "common/grad.rs"]
mod grad;

use grad::check_grad;
use tensorplay_runtime::nn::{self, Reduction};
use tensorplay_runtime::vmap::{fallback_calls, vmap};
use tensorplay_runtime::{DType, Result, Tensor, autograd};

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

fn grad_of(f: impl Fn(&Tensor) -> Result<Tensor>, x: &Tensor) -> Result<Tensor> {
    let x = x.clone().requires_grad_(true)?;
    let y = f(&x)?;
    let g = autograd::grad(&[y], std::slice::from_ref(&x), &[None], false)?;
    Ok(g[0].clone().unwrap())
}

// ---------------------------------------------------------------- nansum

#[test]
fn nansum_values_special_values_and_shapes() -> Result<()> {
    let nan = f64::NAN;
    let x = Tensor::from_vec(vec![1.0, nan, 3.0, nan, nan, -0.5], &[2, 3])?;
    assert_eq!(x.nansum(&[], false)?.item::<f64>()?, 3.5);
    assert_eq!(f64s(&x.nansum(&[1], false)?), vec![4.0, -0.5]);
    assert_eq!(f64s(&x.nansum(&[0], false)?), vec![1.0, 0.0, 2.5]);
    assert_eq!(x.nansum(&[1], true)?.shape(), &[2, 1]);
    // All-NaN → 0; inf still propagates, inf + -inf → NaN.
    let y = Tensor::from_vec(
        vec![nan, nan, f64::INFINITY, nan, f64::INFINITY, -f64::INFINITY],
        &[3, 2],
    )?;
    let s = f64s(&y.nansum(&[1], false)?);
    assert_eq!(s[0], 0.0);
    assert_eq!(s[1], f64::INFINITY);
    assert!(s[2].is_nan());
    // NaN counts as +0: -0 + NaN gives +0 (as in PyTorch).
    let z = Tensor::from_vec(vec![-0.0f32, f32::NAN], &[2])?;
    assert_eq!(
        z.nansum(&[], false)?.item::<f32>()?.to_bits(),
        0f32.to_bits()
    );
    // Empty → 0; 0-d → itself (NaN → 0).
    assert_eq!(
        Tensor::zeros(&[0, 3], DType::F32)
            .nansum(&[], false)?
            .item::<f32>()?,
        0.0
    );
    assert_eq!(
        f64s(&Tensor::zeros(&[0, 3], DType::F32).nansum(&[0], false)?),
        vec![0.0; 3]
    );
    assert_eq!(
        Tensor::full(&[], nan, DType::F64)
            .nansum(&[], false)?
            .item::<f64>()?,
        0.0
    );
    // Non-contiguous.
    let t = x.t()?;
    assert_eq!(f64s(&t.nansum(&[0], false)?), vec![4.0, -0.5]);
    // Integers and bools sum as `sum` does (i64).
    let i = Tensor::from_vec(vec![1i32, 2, 3], &[3])?;
    assert_eq!(i.nansum(&[], false)?.to_vec::<i64>()?, vec![6]);
    // dtype=
    let h = Tensor::from_vec(vec![1.5f32, f32::NAN, 2.25], &[3])?;
    let d = h.nansum_dtype(&[], false, DType::F64)?;
    assert_eq!(d.dtype(), DType::F64);
    assert_eq!(d.item::<f64>()?, 3.75);
    let e = err(h.nansum_dtype(&[], false, DType::I64));
    assert!(e.contains("nansum") && e.contains("dtype"), "{e}");
    // Bad dim names the reduction.
    assert!(x.nansum(&[2], false).is_err());
    Ok(())
}

#[test]
fn nansum_gradient_is_zero_at_nan() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0, f64::NAN, 3.0, f64::NAN], &[2, 2])?;
    let g = grad_of(|x| x.nansum(&[1], false)?.mul_scalar(2.0)?.sum_all(), &x)?;
    assert_eq!(f64s(&g), vec![2.0, 0.0, 2.0, 0.0]);
    check_grad(
        |xs| xs[0].nansum(&[0], true),
        &[Tensor::randn_seeded(&[3, 2], DType::F64, 1)?],
    );
    Ok(())
}

// ---------------------------------------------------------------- cumprod

#[test]
fn cumprod_values_dtypes_and_shapes() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 0.0, 6.0], &[2, 3])?;
    assert_eq!(
        f64s(&x.cumprod(1, None)?),
        vec![1.0, 2.0, 6.0, 4.0, 0.0, 0.0]
    );
    assert_eq!(
        f64s(&x.cumprod(0, None)?),
        vec![1.0, 2.0, 3.0, 4.0, 0.0, 18.0]
    );
    assert_eq!(f64s(&x.cumprod(-1, None)?), f64s(&x.cumprod(1, None)?));
    // Non-contiguous input.
    assert_eq!(
        f64s(&x.t()?.cumprod(0, None)?),
        vec![1.0, 4.0, 2.0, 0.0, 6.0, 0.0]
    );
    // NaN / inf / ±0 propagate forward: 0·inf = NaN, the sign of zero follows the product.
    let s = Tensor::from_vec(vec![-2.0f64, 0.0, f64::INFINITY, 1.0], &[4])?;
    let c = f64s(&s.cumprod(0, None)?);
    assert_eq!(c[0], -2.0);
    assert_eq!(c[1].to_bits(), (-0.0f64).to_bits());
    assert!(c[2].is_nan() && c[3].is_nan());
    let n = Tensor::from_vec(vec![2.0f64, f64::NAN, 0.0], &[3])?;
    assert!(f64s(&n.cumprod(0, None)?)[1..].iter().all(|v| v.is_nan()));
    // Integers and bools → i64 (wrapping), dtype= converts the input first.
    let i = Tensor::from_vec(vec![2i32, 3, 4], &[3])?;
    let ic = i.cumprod(0, None)?;
    assert_eq!(ic.dtype(), DType::I64);
    assert_eq!(ic.to_vec::<i64>()?, vec![2, 6, 24]);
    let b = Tensor::from_vec(vec![true, true, false], &[3])?;
    assert_eq!(b.cumprod(0, None)?.to_vec::<i64>()?, vec![1, 1, 0]);
    let big = Tensor::from_vec(vec![1i64 << 40, 1 << 40], &[2])?;
    assert_eq!(big.cumprod(0, None)?.to_vec::<i64>()?, vec![1 << 40, 0]); // wraps
    let f = i.cumprod(0, Some(DType::F32))?;
    assert_eq!(f.dtype(), DType::F32);
    assert_eq!(f.to_vec::<f32>()?, vec![2.0, 6.0, 24.0]);
    let tr = Tensor::from_vec(vec![1.5f32, 2.5], &[2])?.cumprod(0, Some(DType::I64))?;
    assert_eq!(tr.to_vec::<i64>()?, vec![1, 2]); // truncated before multiplying
    // Empty and 0-d.
    let e = Tensor::zeros(&[2, 0], DType::F32).cumprod(1, None)?;
    assert_eq!(e.shape(), &[2, 0]);
    let z = Tensor::full(&[], 5.0, DType::F64).cumprod(0, None)?;
    assert_eq!((z.shape().len(), z.item::<f64>()?), (0, 5.0));
    // Bad dim names the op.
    let msg = err(x.cumprod(2, None));
    assert!(msg.contains("cumprod"), "{msg}");
    Ok(())
}

/// The gradient by brute force: `d out[i] / d x[j] = prod_{k <= i, k != j} x[k]` (i >= j).
fn cumprod_grad_1d(x: &[f64], g: &[f64]) -> Vec<f64> {
    (0..x.len())
        .map(|j| {
            (j..x.len())
                .map(|i| {
                    let p: f64 = (0..=i).filter(|&k| k != j).map(|k| x[k]).product();
                    g[i] * p
                })
                .sum()
        })
        .collect()
}

#[test]
fn cumprod_gradient_is_exact_with_zeros() -> Result<()> {
    let g = [1.0, -2.0, 0.5, 3.0, 1.5];
    for x in [
        vec![2.0, 0.0, 3.0, 4.0, 0.5],
        vec![0.0, 0.0, 3.0, 4.0, 0.5],
        vec![2.0, 3.0, 4.0, 0.5, 0.0],
        vec![0.0, 2.0, 0.0, 1.0, 0.0],
        vec![1.5, -2.0, 3.0, 0.25, -1.0],
    ] {
        let t = Tensor::from_vec(x.clone(), &[5])?;
        let gt = Tensor::from_vec(g.to_vec(), &[5])?;
        let got = grad_of(|x| x.cumprod(0, None)?.mul(&gt)?.sum_all(), &t)?;
        let want = cumprod_grad_1d(&x, &g);
        for (a, b) in f64s(&got).iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                "{x:?}: {:?} vs {want:?}",
                f64s(&got)
            );
        }
    }
    // Finite differences along each dim, with a zero in the data, non-contiguous, and a double
    // backward through the (differentiable) gradient formula.
    let x = Tensor::from_vec(
        vec![
            0.7, 0.0, -1.3, 2.1, 0.4, -0.9, 1.1, 0.0, 0.6, -0.5, 1.7, 0.8,
        ],
        &[3, 4],
    )?;
    check_grad(|xs| xs[0].cumprod(1, None), std::slice::from_ref(&x));
    check_grad(|xs| xs[0].cumprod(0, None), std::slice::from_ref(&x));
    check_grad(|xs| xs[0].t()?.cumprod(1, None), std::slice::from_ref(&x));
    // Double backward through the (differentiable) gradient formula: for x = [a, b],
    // h = sum(x · d sum(cumprod x)/dx) = a + 2ab, so dh/dx = [1 + 2b, 2a].
    let ab = Tensor::from_vec(vec![0.0, 3.0], &[2])?.requires_grad_(true)?;
    let y = ab.cumprod(0, None)?.sum_all()?;
    let g = autograd::grad(&[y], std::slice::from_ref(&ab), &[None], true)?[0]
        .clone()
        .unwrap();
    let h = g.mul(&ab)?.sum_all()?;
    let gg = autograd::grad(&[h], std::slice::from_ref(&ab), &[None], false)?;
    assert_eq!(f64s(gg[0].as_ref().unwrap()), vec![7.0, 0.0]);
    // 0-d and empty.
    let z = grad_of(
        |x| x.cumprod(0, None)?.mul_scalar(3.0),
        &Tensor::full(&[], 2.0, DType::F64),
    )?;
    assert_eq!(z.item::<f64>()?, 3.0);
    let e = grad_of(
        |x| x.cumprod(1, None)?.sum_all(),
        &Tensor::zeros(&[2, 0], DType::F64),
    )?;
    assert_eq!(e.shape(), &[2, 0]);
    // dtype= gives the gradient in the input's dtype.
    let h = grad_of(
        |x| x.cumprod(0, Some(DType::F64))?.sum_all(),
        &Tensor::from_vec(vec![2.0f32, 3.0], &[2])?,
    )?;
    assert_eq!(
        (h.dtype(), h.to_vec::<f32>()?),
        (DType::F32, vec![4.0, 2.0])
    );
    Ok(())
}

#[test]
fn cumprod_and_diagonal_batch_under_vmap_without_fallback() -> Result<()> {
    let x = Tensor::randn_seeded(&[3, 4, 5], DType::F64, 4)?;
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![
            xs[0].cumprod(1, None)?,
            xs[0].cumprod(-2, None)?,
            xs[0].diagonal(1, 0, 1)?,
            xs[0].diagonal(-1, -1, 0)?,
        ])
    };
    let before = fallback_calls();
    let got = vmap(&f, vec![Some(0)], vec![0])(std::slice::from_ref(&x))?;
    assert_eq!(fallback_calls(), before, "no per-example fallback");
    for b in 0..3 {
        let want = f(&[x.select(0, b)?])?;
        for (g, w) in got.iter().zip(&want) {
            assert!(g.select(0, b)?.allclose(w, 0.0, 0.0)?);
        }
    }
    // A batch dim that is not the first one.
    let got = vmap(&f, vec![Some(2)], vec![0])(std::slice::from_ref(&x))?;
    for b in 0..5 {
        let want = f(&[x.select(2, b)?])?;
        for (g, w) in got.iter().zip(&want) {
            assert!(g.select(0, b)?.allclose(w, 0.0, 0.0)?);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- diagonal

#[test]
fn diagonal_values_offsets_and_dims() -> Result<()> {
    // [[0, 1, 2], [3, 4, 5]]
    let x = Tensor::from_vec((0..6).map(|v| v as f64).collect(), &[2, 3])?;
    assert_eq!(f64s(&x.diagonal(0, 0, 1)?), vec![0.0, 4.0]);
    assert_eq!(f64s(&x.diagonal(1, 0, 1)?), vec![1.0, 5.0]);
    assert_eq!(f64s(&x.diagonal(2, 0, 1)?), vec![2.0]);
    assert_eq!(f64s(&x.diagonal(-1, 0, 1)?), vec![3.0]);
    assert_eq!(x.diagonal(3, 0, 1)?.shape(), &[0]);
    assert_eq!(x.diagonal(-2, 0, 1)?.shape(), &[0]);
    assert_eq!(x.diagonal(i64::MAX, 0, 1)?.shape(), &[0]);
    assert_eq!(x.diagonal(i64::MIN, 0, 1)?.shape(), &[0]);
    // Swapped dims transpose the plane: offset 1 is then below the main diagonal of x.
    assert_eq!(f64s(&x.diagonal(1, 1, 0)?), vec![3.0]);
    assert_eq!(f64s(&x.diagonal(0, -1, -2)?), vec![0.0, 4.0]);
    // Rank 3: the two dims are removed and the diagonal is appended last.
    let y = Tensor::from_vec((0..24).map(|v| v as f64).collect(), &[2, 3, 4])?;
    let d = y.diagonal(0, 0, 2)?; // [3, 2]: d[j][i] = y[i][j][i]
    assert_eq!(d.shape(), &[3, 2]);
    assert_eq!(f64s(&d), vec![0.0, 13.0, 4.0, 17.0, 8.0, 21.0]);
    let d = y.diagonal(1, 1, 2)?; // [2, 3]: y[i][j][j + 1]
    assert_eq!(f64s(&d), vec![1.0, 6.0, 11.0, 13.0, 18.0, 23.0]);
    // Non-contiguous input, NaN/±0 carried as they are.
    let t = x.t()?; // [[0, 3], [1, 4], [2, 5]]
    assert_eq!(f64s(&t.diagonal(0, 0, 1)?), vec![0.0, 4.0]);
    assert_eq!(f64s(&t.diagonal(-1, 0, 1)?), vec![1.0, 5.0]);
    let s = Tensor::from_vec(vec![f64::NAN, 1.0, 2.0, -0.0], &[2, 2])?;
    let sd = f64s(&s.diagonal(0, 0, 1)?);
    assert!(sd[0].is_nan());
    assert_eq!(sd[1].to_bits(), (-0.0f64).to_bits());
    // Empty planes.
    assert_eq!(
        Tensor::zeros(&[0, 3], DType::F32)
            .diagonal(0, 0, 1)?
            .shape(),
        &[0]
    );
    assert_eq!(
        Tensor::zeros(&[2, 0, 3], DType::F32)
            .diagonal(0, 0, 2)?
            .shape(),
        &[0, 2]
    );
    // Integer dtypes keep their dtype.
    let i = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    assert_eq!(i.diagonal(0, 0, 1)?.to_vec::<i64>()?, vec![1, 4]);
    Ok(())
}

#[test]
fn diagonal_is_a_view() -> Result<()> {
    let x = Tensor::zeros(&[3, 3], DType::F32);
    let d = x.diagonal(1, 0, 1)?;
    assert!(!d.is_contiguous());
    d.fill_(7.0)?;
    assert_eq!(
        x.to_vec::<f32>()?,
        vec![0.0, 7.0, 0.0, 0.0, 0.0, 7.0, 0.0, 0.0, 0.0]
    );
    // A diagonal of a diagonal of a transposed view.
    let y = Tensor::from_vec((0..27).map(|v| v as f32).collect(), &[3, 3, 3])?;
    let dd = y
        .permute(&[2, 0, 1])?
        .diagonal(0, 0, 1)?
        .diagonal(0, 0, 1)?;
    assert_eq!(dd.to_vec::<f32>()?, vec![0.0, 13.0, 26.0]);
    Ok(())
}

#[test]
fn diagonal_gradient() -> Result<()> {
    let x = Tensor::randn_seeded(&[3, 4], DType::F64, 2)?;
    let g = grad_of(|x| x.diagonal(1, 0, 1)?.mul_scalar(2.0)?.sum_all(), &x)?;
    let mut want = vec![0.0; 12];
    for i in 0..3 {
        want[i * 4 + i + 1] = 2.0;
    }
    assert_eq!(f64s(&g), want);
    check_grad(|xs| xs[0].diagonal(0, 0, 1), std::slice::from_ref(&x));
    check_grad(|xs| xs[0].diagonal(-1, 1, 0), std::slice::from_ref(&x));
    let y = Tensor::randn_seeded(&[2, 3, 4], DType::F64, 3)?;
    check_grad(|xs| xs[0].diagonal(1, 2, 0), std::slice::from_ref(&y));
    check_grad(
        |xs| xs[0].transpose(0, 2)?.diagonal(0, 0, 1),
        std::slice::from_ref(&y),
    );
    // An empty diagonal gives a zero gradient; double backward goes through diagonal_backward.
    let e = grad_of(|x| x.diagonal(5, 0, 1)?.sum_all(), &x)?;
    assert_eq!(f64s(&e), vec![0.0; 12]);
    // Double backward through diagonal_backward: h = sum(x · d sum(diag(x)²)/dx) = 2·sum(diag²),
    // so dh/dx = 4·diag(x) on the diagonal.
    let xl = x.detach().requires_grad_(true)?;
    let y = xl
        .diagonal(0, 0, 1)?
        .mul(&xl.diagonal(0, 0, 1)?)?
        .sum_all()?;
    let g = autograd::grad(&[y], std::slice::from_ref(&xl), &[None], true)?[0]
        .clone()
        .unwrap();
    let h = g.mul(&xl)?.sum_all()?;
    let gg = autograd::grad(&[h], std::slice::from_ref(&xl), &[None], false)?[0]
        .clone()
        .unwrap();
    let xv = f64s(&x);
    let mut want = vec![0.0; 12];
    for i in 0..3 {
        want[i * 4 + i] = 4.0 * xv[i * 4 + i];
    }
    assert_eq!(f64s(&gg), want);
    Ok(())
}

#[test]
fn diagonal_errors_name_the_argument() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let e = err(x.diagonal(0, 0, 0));
    assert!(e.contains("diagonal") && e.contains("dim2"), "{e}");
    let e = err(x.diagonal(0, 0, 2));
    assert!(e.contains("diagonal"), "{e}");
    let e = err(Tensor::zeros(&[3], DType::F32).diagonal(0, 0, 1));
    assert!(
        e.contains("diagonal") && e.contains("self") && e.contains("[3]"),
        "{e}"
    );
    let e = err(Tensor::zeros(&[], DType::F32).diagonal(0, 0, 1));
    assert!(
        e.contains("diagonal") && e.contains("at least 2 dims"),
        "{e}"
    );
}

// ---------------------------------------------------------------- nn

#[test]
fn embedding_padding_idx_gets_no_gradient() -> Result<()> {
    let w = Tensor::from_vec((0..8).map(|v| v as f64).collect(), &[4, 2])?;
    let ids = Tensor::from_vec(vec![1i64, 3, 1, 0, 3], &[5])?;
    for pad in [3i64, -1] {
        let wl = w
            .detach()
            .contiguous()?
            .mul_scalar(1.0)?
            .requires_grad_(true)?;
        let e = nn::embedding_padded(&ids, &wl, Some(pad))?;
        // The forward still reads the padding row.
        assert_eq!(
            f64s(&e),
            vec![2.0, 3.0, 6.0, 7.0, 2.0, 3.0, 0.0, 1.0, 6.0, 7.0]
        );
        e.sum_all()?.backward()?;
        assert_eq!(
            f64s(&wl.grad().unwrap()),
            vec![1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0],
            "padding_idx {pad}"
        );
    }
    // None is plain embedding; 0-d ids and empty ids; int32 ids.
    assert_eq!(
        f64s(&nn::embedding_padded(&ids, &w, None)?),
        f64s(&nn::embedding(&ids, &w)?)
    );
    let z = nn::embedding_padded(&Tensor::from_vec(vec![2i32], &[])?, &w, Some(2))?;
    assert_eq!((z.shape(), f64s(&z)), (&[2usize][..], vec![4.0, 5.0]));
    let empty = nn::embedding_padded(&Tensor::zeros(&[0, 3], DType::I64), &w, Some(0))?;
    assert_eq!(empty.shape(), &[0, 3, 2]);
    // Gradcheck of the other rows (a non-contiguous weight; padding row 2 is not picked, since
    // finite differences do see the padding row's value).
    let wt = Tensor::randn_seeded(&[2, 4], DType::F64, 5)?;
    check_grad(
        |xs| nn::embedding_padded(&ids, &xs[0].t()?, Some(2)),
        std::slice::from_ref(&wt),
    );
    Ok(())
}

#[test]
fn embedding_padding_idx_out_of_range_is_an_error() {
    let w = Tensor::zeros(&[4, 2], DType::F32);
    let ids = Tensor::from_vec(vec![0i64], &[1]).unwrap();
    for pad in [4i64, -5] {
        let e = err(nn::embedding_padded(&ids, &w, Some(pad)));
        assert!(
            e.contains("embedding") && e.contains("padding_idx") && e.contains(&pad.to_string()),
            "{e}"
        );
    }
}

#[test]
fn nll_loss_with_class_weights() -> Result<()> {
    // log-probabilities [3, 3]
    let logp = Tensor::from_vec(
        vec![-1.0, -2.0, -3.0, -0.5, -1.5, -2.5, -0.1, -0.2, -0.3],
        &[3, 3],
    )?;
    let t = Tensor::from_vec(vec![2i64, 0, -100], &[3])?;
    let w = Tensor::from_vec(vec![2.0, 1.0, 0.5], &[3])?;
    let none = nn::nll_loss_weighted(&logp, &t, Some(&w), -100, Reduction::None)?;
    assert_eq!(f64s(&none), vec![1.5, 1.0, 0.0]);
    let sum = nn::nll_loss_weighted(&logp, &t, Some(&w), -100, Reduction::Sum)?;
    assert_eq!(sum.item::<f64>()?, 2.5);
    // Mean divides by the weights of the non-ignored targets: 2.5 / (0.5 + 2).
    let mean = nn::nll_loss_weighted(&logp, &t, Some(&w), -100, Reduction::Mean)?;
    assert_eq!(mean.item::<f64>()?, 1.0);
    // Unit weights = the unweighted loss; None = the unweighted loss.
    let ones = Tensor::ones(&[3], DType::F64);
    for r in [Reduction::None, Reduction::Sum, Reduction::Mean] {
        let a = nn::nll_loss_weighted(&logp, &t, Some(&ones), -100, r)?;
        let b = nn::nll_loss(&logp, &t, -100, r)?;
        assert_eq!(f64s(&a), f64s(&b));
        assert_eq!(
            f64s(&nn::nll_loss_weighted(&logp, &t, None, -100, r)?),
            f64s(&b)
        );
    }
    // All ignored (or zero weights) → NaN mean; [C] input with a 0-d target; [N, C, d] input.
    let all = Tensor::from_vec(vec![-100i64; 3], &[3])?;
    assert!(
        nn::nll_loss_weighted(&logp, &all, Some(&w), -100, Reduction::Mean)?
            .item::<f64>()?
            .is_nan()
    );
    let one = nn::nll_loss_weighted(
        &logp.select(0, 0)?,
        &Tensor::from_vec(vec![1i64], &[])?,
        Some(&w),
        -100,
        Reduction::Mean,
    )?;
    assert_eq!(one.item::<f64>()?, 2.0);
    let x3 = logp.reshape(&[1, 3, 3])?; // classes along dim 1
    let t3 = Tensor::from_vec(vec![0i64, 1, 2], &[1, 3])?;
    let l3 = nn::nll_loss_weighted(&x3, &t3, Some(&w), -100, Reduction::Mean)?;
    // -(2·-1 + 1·-1.5 + 0.5·-0.3) / 3.5
    assert!((l3.item::<f64>()? - 3.65 / 3.5).abs() < 1e-15);
    // Gradients w.r.t. the input and the weights (a non-contiguous input).
    check_grad(
        |xs| nn::nll_loss_weighted(&xs[0].t()?, &t, Some(&xs[1]), -100, Reduction::Mean),
        &[logp.t()?.contiguous()?, w.clone()],
    );
    Ok(())
}

#[test]
fn cross_entropy_with_class_weights() -> Result<()> {
    let x = Tensor::randn_seeded(&[4, 3], DType::F64, 9)?;
    let t = Tensor::from_vec(vec![2i64, 0, 1, 0], &[4])?;
    let w = Tensor::from_vec(vec![0.5, 2.0, 1.5], &[3])?;
    let logp = x.log_softmax(1)?;
    let lp = f64s(&logp);
    let tv = [2usize, 0, 1, 0];
    let wv = [0.5, 2.0, 1.5];
    for eps in [0.0, 0.2] {
        // By hand: (1-ε)·w[t]·nll + ε/C·Σ_c w[c]·(-logp_c); mean over Σ w[t].
        let per: Vec<f64> = (0..4)
            .map(|n| {
                let smooth: f64 = (0..3).map(|c| -wv[c] * lp[n * 3 + c]).sum();
                (1.0 - eps) * wv[tv[n]] * -lp[n * 3 + tv[n]] + eps / 3.0 * smooth
            })
            .collect();
        let wsum: f64 = tv.iter().map(|&c| wv[c]).sum();
        let want = per.iter().sum::<f64>() / wsum;
        let got = nn::cross_entropy_weighted(&x, &t, Some(&w), -100, eps, Reduction::Mean)?;
        assert!((got.item::<f64>()? - want).abs() < 1e-12, "ε {eps}");
        let none = f64s(&nn::cross_entropy_weighted(
            &x,
            &t,
            Some(&w),
            -100,
            eps,
            Reduction::None,
        )?);
        for (a, b) in none.iter().zip(&per) {
            assert!((a - b).abs() < 1e-12);
        }
        // Unit weights match the unweighted loss.
        let ones = Tensor::ones(&[3], DType::F64);
        let a = nn::cross_entropy_weighted(&x, &t, Some(&ones), -100, eps, Reduction::Mean)?;
        let b = nn::cross_entropy(&x, &t, -100, eps, Reduction::Mean)?;
        assert!((a.item::<f64>()? - b.item::<f64>()?).abs() < 1e-14);
    }
    // An ignored target adds nothing and its weight is not counted.
    let ti = Tensor::from_vec(vec![2i64, 0, 7, 0], &[4])?;
    let full = nn::cross_entropy_weighted(&x, &ti, Some(&w), 7, 0.1, Reduction::Sum)?;
    let part = nn::cross_entropy_weighted(
        &x.narrow(0, 0, 2)?,
        &ti.narrow(0, 0, 2)?,
        Some(&w),
        7,
        0.1,
        Reduction::Sum,
    )?
    .add(&nn::cross_entropy_weighted(
        &x.narrow(0, 3, 1)?,
        &ti.narrow(0, 3, 1)?,
        Some(&w),
        7,
        0.1,
        Reduction::Sum,
    )?)?;
    assert!((full.item::<f64>()? - part.item::<f64>()?).abs() < 1e-12);
    // NaN logits propagate.
    let xn = x.masked_fill(&Tensor::from_vec(vec![true, false, false], &[3])?, f64::NAN)?;
    assert!(
        nn::cross_entropy_weighted(&xn, &t, Some(&w), -100, 0.0, Reduction::Mean)?
            .item::<f64>()?
            .is_nan()
    );
    check_grad(
        |xs| nn::cross_entropy_weighted(&xs[0], &t, Some(&xs[1]), -100, 0.1, Reduction::Mean),
        &[x.clone(), w.clone()],
    );
    Ok(())
}

#[test]
fn class_weight_errors_name_the_argument() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let t = Tensor::from_vec(vec![0i64, 1], &[2]).unwrap();
    let bad = Tensor::ones(&[2], DType::F32);
    let e = err(nn::nll_loss_weighted(
        &x,
        &t,
        Some(&bad),
        -100,
        Reduction::Mean,
    ));
    assert!(
        e.contains("nll_loss") && e.contains("weight") && e.contains("[3]") && e.contains("[2]"),
        "{e}"
    );
    let e = err(nn::cross_entropy_weighted(
        &x,
        &t,
        Some(&bad),
        -100,
        0.0,
        Reduction::Mean,
    ));
    assert!(e.contains("cross_entropy") && e.contains("weight"), "{e}");
    let e = err(nn::cross_entropy_weighted(
        &x,
        &t,
        Some(&Tensor::ones(&[3, 1], DType::F32)),
        -100,
        0.0,
        Reduction::Mean,
    ));
    assert!(e.contains("weight") && e.contains("[3, 1]"), "{e}");
    let e = err(nn::nll_loss_weighted(
        &x,
        &t,
        Some(&Tensor::ones(&[3], DType::I64)),
        -100,
        Reduction::Mean,
    ));
    assert!(e.contains("weight") && e.contains("floating"), "{e}");
}

// ---------------------------------------------------------------- randint / bernoulli

#[test]
fn randint_is_seeded_in_range_and_covers_it() -> Result<()> {
    let a = Tensor::randint_seeded(-2, 3, &[4, 500], DType::I64, 11)?;
    assert_eq!((a.shape(), a.dtype()), (&[4usize, 500][..], DType::I64));
    let v = a.to_vec::<i64>()?;
    assert_eq!(
        v,
        Tensor::randint_seeded(-2, 3, &[4, 500], DType::I64, 11)?.to_vec::<i64>()?
    );
    assert_ne!(
        v,
        Tensor::randint_seeded(-2, 3, &[4, 500], DType::I64, 12)?.to_vec::<i64>()?
    );
    for k in -2..3 {
        let c = v.iter().filter(|&&x| x == k).count();
        assert!((300..500).contains(&c), "value {k}: {c} of 2000");
    }
    // Other dtypes, extreme ranges, empty and 0-d shapes.
    let f = Tensor::randint_seeded(0, 10, &[50], DType::F32, 1)?;
    assert!(
        f.to_vec::<f32>()?
            .iter()
            .all(|&x| x.fract() == 0.0 && (0.0..10.0).contains(&x))
    );
    let b = Tensor::randint_seeded(0, 2, &[50], DType::Bool, 1)?.to_vec::<bool>()?;
    assert!(b.contains(&true) && b.contains(&false));
    let i = Tensor::randint_seeded(i32::MIN as i64, i32::MAX as i64 + 1, &[10], DType::I32, 3)?;
    assert_eq!(i.dtype(), DType::I32);
    let wide =
        Tensor::randint_seeded(i64::MIN, i64::MAX, &[100], DType::I64, 3)?.to_vec::<i64>()?;
    assert!(wide.iter().any(|&x| x < 0) && wide.iter().any(|&x| x > 0));
    assert_eq!(
        Tensor::randint_seeded(5, 6, &[3], DType::I64, 0)?.to_vec::<i64>()?,
        vec![5; 3]
    );
    assert_eq!(
        Tensor::randint_seeded(0, 4, &[0, 2], DType::I64, 0)?.shape(),
        &[0, 2]
    );
    assert_eq!(
        Tensor::randint_seeded(0, 4, &[], DType::I64, 0)?.shape(),
        &[] as &[usize]
    );
    Ok(())
}

#[test]
fn randint_errors_name_the_argument() {
    let e = err(Tensor::randint_seeded(3, 3, &[2], DType::I64, 0));
    assert!(
        e.contains("randint") && e.contains("high") && e.contains('3'),
        "{e}"
    );
    let e = err(Tensor::randint_seeded(3, -1, &[2], DType::I64, 0));
    assert!(e.contains("randint") && e.contains("high"), "{e}");
    let e = err(Tensor::randint_seeded(0, 3, &[2], DType::Bool, 0));
    assert!(e.contains("randint") && e.contains("bool"), "{e}");
    let e = err(Tensor::randint_seeded(0, 1 << 40, &[2], DType::I32, 0));
    assert!(e.contains("randint") && e.contains("i32"), "{e}");
}

#[test]
fn bernoulli_is_seeded_and_follows_the_probabilities() -> Result<()> {
    let p = Tensor::from_vec(vec![0.0f64, 1.0, 0.25, 0.75], &[4, 1])?.expand(&[4, 2000])?;
    let x = p.bernoulli_seeded(5)?; // non-contiguous (expanded) probabilities
    assert_eq!((x.shape(), x.dtype()), (&[4usize, 2000][..], DType::F64));
    assert_eq!(f64s(&x), f64s(&p.bernoulli_seeded(5)?));
    let rows = f64s(&x.sum(&[1], false)?);
    assert_eq!(rows[0], 0.0);
    assert_eq!(rows[1], 2000.0);
    assert!((400.0..600.0).contains(&rows[2]), "{rows:?}");
    assert!((1400.0..1600.0).contains(&rows[3]), "{rows:?}");
    assert!(f64s(&x).iter().all(|&v| v == 0.0 || v == 1.0));
    // Keeps the dtype; empty and 0-d; no gradient flows to p.
    let h = Tensor::full(&[], 1.0, DType::F32).bernoulli_seeded(0)?;
    assert_eq!((h.dtype(), h.item::<f32>()?), (DType::F32, 1.0));
    assert_eq!(
        Tensor::zeros(&[0], DType::F32).bernoulli_seeded(0)?.shape(),
        &[0]
    );
    let pl = Tensor::full(&[3], 0.5, DType::F64).requires_grad_(true)?;
    assert!(!pl.bernoulli_seeded(1)?.requires_grad());
    // The scalar form.
    let s = Tensor::bernoulli_p_seeded(&[3000], 0.5, DType::F32, 2)?;
    assert_eq!(s.dtype(), DType::F32);
    let ones = s.sum_all()?.item::<f32>()?;
    assert!((1350.0..1650.0).contains(&ones), "{ones}");
    assert_eq!(
        Tensor::bernoulli_p_seeded(&[3], 1.0, DType::I64, 2)?.to_vec::<i64>()?,
        vec![1; 3]
    );
    Ok(())
}

#[test]
fn bernoulli_errors_name_the_argument() {
    for bad in [-0.1, 1.5, f64::NAN] {
        let e = err(Tensor::from_vec(vec![0.5, bad], &[2])
            .unwrap()
            .bernoulli_seeded(0));
        assert!(
            e.contains("bernoulli") && e.contains("p") && e.contains("[0, 1]"),
            "{e}"
        );
        let e = err(Tensor::bernoulli_p_seeded(&[2], bad, DType::F32, 0));
        assert!(e.contains("bernoulli") && e.contains("[0, 1]"), "{e}");
    }
    let e = err(Tensor::from_vec(vec![1i64], &[1])
        .unwrap()
        .bernoulli_seeded(0));
    assert!(e.contains("bernoulli") && e.contains("floating"), "{e}");
}
