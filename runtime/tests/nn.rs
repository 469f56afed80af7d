//! `tensorplay_runtime::nn`: linear, embedding, layer_norm, rms_norm, dropout, the losses and
//! scaled_dot_product_attention, checked against direct f64 computations, on their errors, and
//! for gradients against finite differences.

use tensorplay_runtime::nn::{self, Reduction};
use tensorplay_runtime::{DType, Result, Tensor, vmap};

#[path = "common/grad.rs"]
mod grad;
use grad::check_grad;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + y.abs()))
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn linear_and_embedding() -> Result<()> {
    let (x, w, b) = (randn(&[2, 3, 4], 0), randn(&[5, 4], 1), randn(&[5], 2));
    let y = nn::linear(&x, &w, Some(&b))?;
    assert_eq!(y.shape(), &[2, 3, 5]);
    let (xv, wv, bv, yv) = (
        x.to_vec::<f64>()?,
        w.to_vec::<f64>()?,
        b.to_vec::<f64>()?,
        y.to_vec::<f64>()?,
    );
    for r in 0..6 {
        for o in 0..5 {
            let want: f64 = (0..4).map(|i| xv[r * 4 + i] * wv[o * 4 + i]).sum::<f64>() + bv[o];
            assert!((yv[r * 5 + o] - want).abs() < 1e-12);
        }
    }
    check_grad(
        |t| nn::linear(&t[0], &t[1], Some(&t[2])),
        &[x.clone(), w.clone(), b],
    );
    assert!(err(nn::linear(&x, &randn(&[2, 2, 4], 3), None)).contains("linear"));

    let table = randn(&[6, 3], 4);
    let ids = i64s(&[5, 0, 5, 2], &[2, 2]);
    let e = nn::embedding(&ids, &table)?;
    assert_eq!(e.shape(), &[2, 2, 3]);
    assert_eq!(
        e.select(0, 0)?.select(0, 0)?.to_vec::<f64>()?,
        table.select(0, 5)?.to_vec::<f64>()?
    );
    // The repeated id 5 gets both rows' gradients.
    let t = table.clone().requires_grad_(true)?;
    nn::embedding(&ids, &t)?.sum_all()?.backward()?;
    let g = t.grad().unwrap().to_vec::<f64>()?;
    assert_eq!(&g[15..18], &[2.0, 2.0, 2.0]);
    assert_eq!(&g[3..6], &[0.0, 0.0, 0.0]);
    check_grad(|t| nn::embedding(&ids, &t[0]), std::slice::from_ref(&table));
    let msg = err(nn::embedding(&i64s(&[6], &[1]), &table));
    assert!(msg.contains("index 6") && msg.contains("[0, 6)"), "{msg}");
    let msg = err(nn::embedding(&Tensor::zeros(&[1], DType::F32), &table));
    assert!(msg.contains("embedding") && msg.contains("input"), "{msg}");
    Ok(())
}

#[test]
fn layer_norm_matches_the_formula() -> Result<()> {
    let x = randn(&[3, 2, 4], 5);
    let (w, b) = (randn(&[2, 4], 6), randn(&[2, 4], 7));
    let y = nn::layer_norm(&x, &[2, 4], Some(&w), Some(&b), 1e-5)?.to_vec::<f64>()?;
    let (xv, wv, bv) = (x.to_vec::<f64>()?, w.to_vec::<f64>()?, b.to_vec::<f64>()?);
    let mut want = vec![0.0; 24];
    for r in 0..3 {
        let row = &xv[r * 8..r * 8 + 8];
        let mean = row.iter().sum::<f64>() / 8.0;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 8.0;
        for i in 0..8 {
            want[r * 8 + i] = (row[i] - mean) / (var + 1e-5).sqrt() * wv[i] + bv[i];
        }
    }
    assert!(close(&y, &want, 1e-12));
    check_grad(
        |t| nn::layer_norm(&t[0], &[4], Some(&t[1]), Some(&t[2]), 1e-5),
        &[x.clone(), randn(&[4], 8), randn(&[4], 9)],
    );
    // f16 computes in f32 and keeps its dtype; a constant row normalizes to 0, not NaN.
    let h = Tensor::full(&[2, 4], 3.0, DType::F16);
    let y = nn::layer_norm(&h, &[4], None, None, 1e-5)?;
    assert_eq!(y.dtype(), DType::F16);
    assert_eq!(y.to_vec_f64()?, vec![0.0; 8]);
    let msg = err(nn::layer_norm(&x, &[2, 3], None, None, 1e-5));
    assert!(
        msg.contains("layer_norm") && msg.contains("normalized_shape"),
        "{msg}"
    );
    let msg = err(nn::layer_norm(&x, &[4], Some(&randn(&[3], 0)), None, 1e-5));
    assert!(msg.contains("weight") && msg.contains("[4]"), "{msg}");
    Ok(())
}

#[test]
fn rms_norm_matches_the_formula() -> Result<()> {
    let x = randn(&[3, 4], 10);
    let w = randn(&[4], 11);
    let y = nn::rms_norm(&x, &[4], Some(&w), Some(1e-6))?.to_vec::<f64>()?;
    let (xv, wv) = (x.to_vec::<f64>()?, w.to_vec::<f64>()?);
    let mut want = vec![0.0; 12];
    for r in 0..3 {
        let ms = xv[r * 4..r * 4 + 4].iter().map(|v| v * v).sum::<f64>() / 4.0;
        for i in 0..4 {
            want[r * 4 + i] = xv[r * 4 + i] / (ms + 1e-6).sqrt() * wv[i];
        }
    }
    assert!(close(&y, &want, 1e-12));
    check_grad(|t| nn::rms_norm(&t[0], &[4], Some(&t[1]), None), &[x, w]);
    // The default eps keeps a zero row finite.
    let z = nn::rms_norm(&Tensor::zeros(&[1, 4], DType::F32), &[4], None, None)?;
    assert_eq!(z.to_vec::<f32>()?, vec![0.0; 4]);
    Ok(())
}

#[test]
fn dropout_is_seeded_and_scaled() -> Result<()> {
    let x = randn(&[64, 64], 12);
    let a = nn::dropout(&x, 0.5, true, 3)?;
    assert!(a.equal(&nn::dropout(&x, 0.5, true, 3)?)?);
    assert!(!a.equal(&nn::dropout(&x, 0.5, true, 4)?)?);
    let (xv, av) = (x.to_vec::<f64>()?, a.to_vec::<f64>()?);
    let kept = av.iter().filter(|&&v| v != 0.0).count();
    assert!((1800..2300).contains(&kept), "{kept}");
    assert!(
        xv.iter()
            .zip(&av)
            .all(|(x, a)| *a == 0.0 || (a - 2.0 * x).abs() < 1e-12)
    );
    assert!(nn::dropout(&x, 0.5, false, 3)?.equal(&x)?);
    assert_eq!(
        nn::dropout(&x, 1.0, true, 3)?
            .abs()?
            .sum_all()?
            .item::<f64>()?,
        0.0
    );
    assert!(err(nn::dropout(&x, -0.1, true, 3)).contains("dropout"));
    // The gradient is the mask, scaled.
    let t = x.clone().requires_grad_(true)?;
    nn::dropout(&t, 0.5, true, 3)?.sum_all()?.backward()?;
    let g = t.grad().unwrap().to_vec::<f64>()?;
    assert!(
        g.iter()
            .zip(&av)
            .all(|(g, a)| if *a == 0.0 { *g == 0.0 } else { *g == 2.0 })
    );
    Ok(())
}

#[test]
fn mse_and_nll_losses() -> Result<()> {
    let (a, b) = (randn(&[3, 2], 13), randn(&[3, 2], 14));
    let d: Vec<f64> = a
        .to_vec::<f64>()?
        .iter()
        .zip(b.to_vec::<f64>()?)
        .map(|(x, y)| (x - y).powi(2))
        .collect();
    let mean = nn::mse_loss(&a, &b, Reduction::Mean)?.item::<f64>()?;
    assert!((mean - d.iter().sum::<f64>() / 6.0).abs() < 1e-12);
    assert_eq!(nn::mse_loss(&a, &b, Reduction::None)?.shape(), &[3, 2]);
    check_grad(
        |t| nn::mse_loss(&t[0], &t[1], Reduction::Sum),
        &[a.clone(), b.clone()],
    );
    assert!(err(nn::mse_loss(&a, &randn(&[2], 0), Reduction::Mean)).contains("mse_loss"));

    let logp = randn(&[4, 3], 15).log_softmax(1)?;
    let lv = logp.to_vec::<f64>()?;
    let t = i64s(&[2, -100, 0, 2], &[4]);
    let mean = nn::nll_loss(&logp, &t, -100, Reduction::Mean)?.item::<f64>()?;
    assert!((mean - -(lv[2] + lv[6] + lv[11]) / 3.0).abs() < 1e-12);
    let none = nn::nll_loss(&logp, &t, -100, Reduction::None)?.to_vec::<f64>()?;
    assert_eq!(none[1], 0.0);
    // Every target ignored: the mean is 0/0 = NaN, as in PyTorch.
    let all = nn::nll_loss(&logp, &i64s(&[-100; 4], &[4]), -100, Reduction::Mean)?;
    assert!(all.item::<f64>()?.is_nan());
    // [N, C, d] input with a [N, d] target; a 1-D input with a 0-d target.
    let spatial = randn(&[2, 3, 5], 16).log_softmax(1)?;
    let st = i64s(&[0, 1, 2, 0, 1, 2, 2, 2, 1, 0], &[2, 5]);
    assert_eq!(
        nn::nll_loss(&spatial, &st, -100, Reduction::None)?.shape(),
        &[2, 5]
    );
    let one = nn::nll_loss(
        &logp.select(0, 0)?,
        &Tensor::scalar(1i64),
        -100,
        Reduction::Mean,
    )?;
    assert_eq!(one.item::<f64>()?, -lv[1]);
    let msg = err(nn::nll_loss(
        &logp,
        &i64s(&[3, 0, 0, 0], &[4]),
        -100,
        Reduction::Mean,
    ));
    assert!(msg.contains("index 3") && msg.contains("[0, 3)"), "{msg}");
    let msg = err(nn::nll_loss(
        &logp,
        &i64s(&[0, 0], &[2]),
        -100,
        Reduction::Mean,
    ));
    assert!(msg.contains("nll_loss") && msg.contains("target"), "{msg}");
    let msg = err(nn::nll_loss(
        &logp,
        &Tensor::zeros(&[4], DType::I32),
        -100,
        Reduction::Mean,
    ));
    assert!(msg.contains("int64"), "{msg}");
    check_grad(
        |x| nn::nll_loss(&x[0], &t, -100, Reduction::Mean),
        &[logp.detach()],
    );
    Ok(())
}

#[test]
fn cross_entropy_with_ignore_index_and_label_smoothing() -> Result<()> {
    let logits = randn(&[5, 4], 17);
    let t = i64s(&[3, 1, 7, 0, 1], &[5]);
    let lv = logits.log_softmax(1)?.to_vec::<f64>()?;
    for eps in [0.0, 0.1] {
        let got = nn::cross_entropy(&logits, &t, 7, eps, Reduction::Mean)?.item::<f64>()?;
        let mut total = 0.0;
        for (r, &c) in [3usize, 1, 7, 0, 1].iter().enumerate() {
            if c == 7 {
                continue;
            }
            let row = &lv[r * 4..r * 4 + 4];
            total += -(1.0 - eps) * row[c] - eps * row.iter().sum::<f64>() / 4.0;
        }
        assert!(
            (got - total / 4.0).abs() < 1e-12,
            "eps {eps}: {got} vs {}",
            total / 4.0
        );
        check_grad(
            |x| nn::cross_entropy(&x[0], &t, 7, eps, Reduction::Sum),
            std::slice::from_ref(&logits),
        );
    }
    // Huge logits stay finite (log_softmax is stable).
    let big = logits.mul_scalar(1e4)?;
    assert!(
        nn::cross_entropy(&big, &t, 7, 0.0, Reduction::Mean)?
            .item::<f64>()?
            .is_finite()
    );
    let msg = err(nn::cross_entropy(&logits, &t, 7, 1.5, Reduction::Mean));
    assert!(msg.contains("label_smoothing"), "{msg}");
    Ok(())
}

/// Attention computed row by row in f64.
fn attention_ref(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    l: usize,
    s: usize,
    e: usize,
    causal: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; l * e];
    for i in 0..l {
        let scores: Vec<f64> = (0..s)
            .map(|j| {
                if causal && j > i {
                    f64::NEG_INFINITY
                } else {
                    (0..e).map(|c| q[i * e + c] * k[j * e + c]).sum::<f64>() / (e as f64).sqrt()
                }
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = w.iter().sum();
        for c in 0..e {
            out[i * e + c] = (0..s).map(|j| w[j] / z * v[j * e + c]).sum();
        }
    }
    out
}

#[test]
fn scaled_dot_product_attention_matches_the_reference() -> Result<()> {
    let (l, e) = (5, 3);
    let (q, k, v) = (
        randn(&[2, l, e], 18),
        randn(&[2, l, e], 19),
        randn(&[2, l, e], 20),
    );
    for causal in [false, true] {
        let y = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, causal, None)?;
        for b in 0..2 {
            let part = |t: &Tensor| t.select(0, b).unwrap().to_vec::<f64>().unwrap();
            let want = attention_ref(&part(&q), &part(&k), &part(&v), l, l, e, causal);
            assert!(close(&part(&y), &want, 1e-12), "causal {causal}");
        }
        check_grad(
            |t| nn::scaled_dot_product_attention(&t[0], &t[1], &t[2], None, 0.0, causal, None),
            &[q.clone(), k.clone(), v.clone()],
        );
    }
    // A bool mask equal to the causal one gives the same result; a float mask adds.
    let causal = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None)?;
    let mask = Tensor::ones(&[l, l], DType::Bool).tril(0)?;
    let masked = nn::scaled_dot_product_attention(&q, &k, &v, Some(&mask), 0.0, false, None)?;
    assert!(close(
        &masked.to_vec::<f64>()?,
        &causal.to_vec::<f64>()?,
        0.0
    ));
    let additive =
        Tensor::zeros(&[l, l], DType::F64).masked_fill(&mask.logical_not()?, f64::NEG_INFINITY)?;
    let added = nn::scaled_dot_product_attention(&q, &k, &v, Some(&additive), 0.0, false, None)?;
    assert!(close(
        &added.to_vec::<f64>()?,
        &causal.to_vec::<f64>()?,
        1e-15
    ));
    let msg = err(nn::scaled_dot_product_attention(
        &q,
        &k,
        &v,
        Some(&mask),
        0.0,
        true,
        None,
    ));
    assert!(
        msg.contains("scaled_dot_product_attention") && msg.contains("is_causal"),
        "{msg}"
    );
    let msg = err(nn::scaled_dot_product_attention(
        &q,
        &randn(&[2, l, 4], 0),
        &v,
        None,
        0.0,
        false,
        None,
    ));
    assert!(msg.contains("key"), "{msg}");
    Ok(())
}

#[test]
fn composites_batch_under_vmap() -> Result<()> {
    let x = randn(&[3, 2, 4], 21);
    let f = vmap::vmap(
        |r: &[Tensor]| Ok(vec![nn::layer_norm(&r[0], &[4], None, None, 1e-5)?]),
        vec![Some(0)],
        vec![0],
    );
    let y = f(std::slice::from_ref(&x))?.remove(0);
    let want = nn::layer_norm(&x, &[4], None, None, 1e-5)?;
    assert!(close(&y.to_vec::<f64>()?, &want.to_vec::<f64>()?, 1e-14));
    let q = randn(&[3, 4, 2], 22);
    let g = vmap::vmap(
        |r: &[Tensor]| {
            Ok(vec![nn::scaled_dot_product_attention(
                &r[0], &r[0], &r[0], None, 0.0, true, None,
            )?])
        },
        vec![Some(0)],
        vec![0],
    );
    let y = g(std::slice::from_ref(&q))?.remove(0);
    let want = nn::scaled_dot_product_attention(&q, &q, &q, None, 0.0, true, None)?;
    assert!(close(&y.to_vec::<f64>()?, &want.to_vec::<f64>()?, 1e-14));
    Ok(())
}

/// A query row its mask blocks entirely attends to nothing: its output is 0 (PyTorch's safe
/// softmax), and no NaN reaches the gradients of q, k or v.
#[test]
fn fully_masked_attention_row_is_zero_with_finite_gradients() -> Result<()> {
    let q = randn(&[3, 4], 21).requires_grad_(true)?;
    let k = randn(&[5, 4], 22).requires_grad_(true)?;
    let v = randn(&[5, 2], 23).requires_grad_(true)?;
    let mut m = vec![true; 15];
    m[5..10].fill(false); // row 1 sees nothing
    let mask = Tensor::from_vec(m, &[3, 5])?;
    let y = nn::scaled_dot_product_attention(&q, &k, &v, Some(&mask), 0.0, false, None)?;
    let out = y.to_vec::<f64>()?;
    assert_eq!(&out[2..4], &[0.0, 0.0]);
    assert!(out.iter().all(|x| x.is_finite()));
    // The other rows are plain attention.
    let plain = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None)?;
    let plain = plain.to_vec::<f64>()?;
    assert!(close(&out[..2], &plain[..2], 1e-12) && close(&out[4..], &plain[4..], 1e-12));
    y.sum_all()?.backward()?;
    for t in [&q, &k, &v] {
        let g = t.grad().unwrap().to_vec::<f64>()?;
        assert!(g.iter().all(|x| x.is_finite()), "{g:?}");
    }
    // The blocked row's query gets no gradient.
    assert_eq!(&q.grad().unwrap().to_vec::<f64>()?[4..8], &[0.0; 4]);
    Ok(())
}

/// f16/bf16 linear, layer_norm, rms_norm and attention are their f32 results rounded once.
#[test]
fn half_nn_functions_compute_in_f32_and_round_once() -> Result<()> {
    for dt in [DType::F16, DType::BF16] {
        let h = |shape: &[usize], seed: u64, scale: f64| -> Result<Tensor> {
            randn(shape, seed).mul_scalar(scale)?.to_dtype(dt)
        };
        let f = |t: &Tensor| t.to_dtype(DType::F32);
        let same = |a: &Tensor, b: &Tensor| -> Result<()> {
            assert_eq!(a.dtype(), dt);
            assert_eq!(a.to_vec_f64()?, b.to_dtype(dt)?.to_vec_f64()?, "{dt}");
            Ok(())
        };
        let (x, w, b) = (h(&[5, 48], 1, 2.0)?, h(&[7, 48], 2, 0.5)?, h(&[7], 3, 1.0)?);
        same(
            &nn::linear(&x, &w, Some(&b))?,
            &nn::linear(&f(&x)?, &f(&w)?, Some(&f(&b)?))?,
        )?;
        let (g, c) = (h(&[48], 4, 1.0)?, h(&[48], 5, 1.0)?);
        same(
            &nn::layer_norm(&x, &[48], Some(&g), Some(&c), 1e-5)?,
            &nn::layer_norm(&f(&x)?, &[48], Some(&f(&g)?), Some(&f(&c)?), 1e-5)?,
        )?;
        same(
            &nn::rms_norm(&x, &[48], Some(&g), Some(1e-6))?,
            &nn::rms_norm(&f(&x)?, &[48], Some(&f(&g)?), Some(1e-6))?,
        )?;
        let (q, k, v) = (
            h(&[2, 6, 16], 6, 1.0)?,
            h(&[2, 7, 16], 7, 1.0)?,
            h(&[2, 7, 8], 8, 1.0)?,
        );
        same(
            &nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None)?,
            &nn::scaled_dot_product_attention(&f(&q)?, &f(&k)?, &f(&v)?, None, 0.0, true, None)?,
        )?;
    }
    Ok(())
}

/// The losses take floating inputs only (PyTorch has no integer kernels for them).
#[test]
fn losses_reject_integer_inputs() {
    let x = i64s(&[1, 2, 3, 4, 5, 6], &[2, 3]);
    let t = i64s(&[0, 2], &[2]);
    let e = err(nn::mse_loss(&x, &x, Reduction::Mean));
    assert!(e.contains("mse_loss") && e.contains("i64"), "{e}");
    let e = err(nn::nll_loss(&x, &t, -100, Reduction::Mean));
    assert!(e.contains("nll_loss") && e.contains("floating"), "{e}");
    let e = err(nn::cross_entropy(&x, &t, -100, 0.0, Reduction::Mean));
    assert!(e.contains("cross_entropy") && e.contains("floating"), "{e}");
}
