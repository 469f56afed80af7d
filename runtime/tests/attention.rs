//! The fused attention kernel behind `nn::scaled_dot_product_attention` on CPU
//! (`ops::attention`): against the decomposed formula (`attention_composite`) over shapes,
//! masks, dtypes and thread counts; rows that see no key; its backward against the decomposed
//! formula's gradients and finite differences; double backward through the recorded path;
//! attention dropout (the dropped fraction, the backward against the decomposed formula with the
//! regenerated mask and finite differences, `p = 0` drawing nothing, `manual_seed`, bad `p`).

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck};
use tensorplay_runtime::dispatch::call;
use tensorplay_runtime::nn;
use tensorplay_runtime::ops::attention::{
    FUSED_ATTENTION, attention_composite, attention_composite_dropout, dropout_keep_mask,
};
use tensorplay_runtime::{DType, Result, Tensor, Value, manual_seed};

/// Serializes the tests that draw from (or reseed) the global generator.
static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn generator() -> std::sync::MutexGuard<'static, ()> {
    GENERATOR.lock().unwrap_or_else(|e| e.into_inner())
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F64, seed).unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (
        a.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        b.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f64::max)
}

/// The fused forward and the gradients of `sum(out * w)` against the decomposed formula's.
fn check_against_composite(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    tol: f64,
) -> Result<()> {
    let leaves: Vec<Tensor> = [q, k, v]
        .iter()
        .map(|t| t.detach().requires_grad_(true).unwrap())
        .collect();
    let scale = 1.0 / (q.size(-1)? as f64).sqrt();
    let fused = nn::scaled_dot_product_attention(
        &leaves[0], &leaves[1], &leaves[2], mask, 0.0, causal, None,
    )?;
    let plain = attention_composite(&leaves[0], &leaves[1], &leaves[2], mask, causal, scale)?;
    assert!(
        max_diff(&fused, &plain) <= tol,
        "forward: {}",
        max_diff(&fused, &plain)
    );
    let w = Tensor::randn_seeded(fused.shape(), fused.dtype(), 99)?;
    let gf = autograd::grad(&[fused.mul(&w)?.sum_all()?], &leaves, &[None], false)?;
    let gp = autograd::grad(&[plain.mul(&w)?.sum_all()?], &leaves, &[None], false)?;
    for (i, (a, b)) in gf.iter().zip(&gp).enumerate() {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert!(max_diff(a, b) <= tol, "grad {i}: {}", max_diff(a, b));
    }
    Ok(())
}

#[test]
fn matches_the_decomposed_formula_over_shapes_and_masks() -> Result<()> {
    // (batch, L, S, E, Ev): square, more keys than queries, fewer, a value width of its own,
    // a size big enough for the thread pool, and sizes that cross the kernel's 16-row query
    // blocks and 16-lane column chunks unevenly.
    for (n, (b, l, s, e, ev)) in [
        (2, 5, 5, 4, 4),
        (3, 3, 7, 8, 5),
        (1, 9, 4, 16, 16),
        (2, 1, 1, 3, 2),
        (8, 64, 64, 32, 32),
        (1, 37, 41, 20, 17),
        (1, 40, 19, 33, 24),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 10 * n as u64;
        let (q, k, v) = (
            randn(&[b, 2, l, e], seed),
            randn(&[b, 2, s, e], seed + 1),
            randn(&[b, 2, s, ev], seed + 2),
        );
        for causal in [false, true] {
            check_against_composite(&q, &k, &v, None, causal, 1e-12)?;
        }
        let keep = randn(&[l, s], seed + 3).gt_scalar(-0.5)?;
        check_against_composite(&q, &k, &v, Some(&keep), false, 1e-12)?;
        let add = randn(&[2, 1, s], seed + 4);
        check_against_composite(&q, &k, &v, Some(&add), false, 1e-12)?;
        let (q32, k32, v32) = (
            q.to_dtype(DType::F32)?,
            k.to_dtype(DType::F32)?,
            v.to_dtype(DType::F32)?,
        );
        check_against_composite(&q32, &k32, &v32, None, true, 2e-5)?;
    }
    Ok(())
}

#[test]
fn batch_dims_broadcast() -> Result<()> {
    let q = randn(&[3, 2, 4, 5], 1);
    let k = randn(&[1, 2, 6, 5], 2);
    let v = randn(&[3, 1, 6, 3], 3);
    let y = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, false, None)?;
    assert_eq!(y.shape(), &[3, 2, 4, 3]);
    let want = attention_composite(&q, &k, &v, None, false, 1.0 / 5f64.sqrt())?;
    assert!(max_diff(&y, &want) <= 1e-12);
    check_against_composite(&q, &k, &v, None, true, 1e-12)
}

#[test]
fn a_row_that_sees_no_key_is_zero_with_zero_gradients() -> Result<()> {
    let (q, k, v) = (
        randn(&[1, 3, 4], 1),
        randn(&[1, 3, 4], 2),
        randn(&[1, 3, 4], 3),
    );
    let keep = Tensor::from_vec(
        vec![true, true, false, false, false, false, true, false, true],
        &[3, 3],
    )?;
    let leaves: Vec<Tensor> = [&q, &k, &v]
        .iter()
        .map(|t| t.detach().requires_grad_(true).unwrap())
        .collect();
    let y = nn::scaled_dot_product_attention(
        &leaves[0],
        &leaves[1],
        &leaves[2],
        Some(&keep),
        0.0,
        false,
        None,
    )?;
    let rows = y.to_vec::<f64>()?;
    assert!(rows[4..8].iter().all(|&x| x == 0.0), "{rows:?}");
    assert!(rows.iter().all(|x| x.is_finite()));
    let g = autograd::grad(&[y.sum_all()?], &leaves, &[None], false)?;
    let dq = g[0].as_ref().unwrap().to_vec::<f64>()?;
    assert!(dq[4..8].iter().all(|&x| x == 0.0), "{dq:?}");
    assert!(g.iter().all(|t| {
        t.as_ref()
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .all(|x| x.is_finite())
    }));
    Ok(())
}

#[test]
fn half_inputs_are_computed_in_f32_and_rounded_once() -> Result<()> {
    let (q, k, v) = (
        randn(&[2, 6, 8], 4),
        randn(&[2, 6, 8], 5),
        randn(&[2, 6, 8], 6),
    );
    for dtype in [DType::F16, DType::BF16] {
        let [qh, kh, vh] = [&q, &k, &v].map(|t| t.to_dtype(dtype).unwrap());
        let y = nn::scaled_dot_product_attention(&qh, &kh, &vh, None, 0.0, true, None)?;
        assert_eq!(y.dtype(), dtype);
        // The f32 computation of the same (rounded) inputs, rounded once.
        let [q32, k32, v32] = [&qh, &kh, &vh].map(|t| t.to_dtype(DType::F32).unwrap());
        let want = nn::scaled_dot_product_attention(&q32, &k32, &v32, None, 0.0, true, None)?
            .to_dtype(dtype)?;
        assert_eq!(
            y.to_dtype(DType::F32)?.to_vec::<f32>()?,
            want.to_dtype(DType::F32)?.to_vec::<f32>()?
        );
    }
    Ok(())
}

#[test]
fn gradients_pass_gradcheck_including_a_float_mask_and_the_logsumexp() -> Result<()> {
    let inputs: Vec<Tensor> = [
        randn(&[2, 3, 4], 7),
        randn(&[2, 5, 4], 8),
        randn(&[2, 5, 2], 9),
        randn(&[3, 5], 10),
    ]
    .into_iter()
    .map(|t| t.requires_grad_(true).unwrap())
    .collect();
    // The float mask that requires grad takes the decomposed path.
    gradcheck(
        |t| nn::scaled_dot_product_attention(&t[0], &t[1], &t[2], Some(&t[3]), 0.0, false, None),
        &inputs,
        GradcheckOptions::default(),
    )?;
    // Both outputs of the op itself, the log-sum-exp included.
    gradcheck(
        |t| {
            let outs = call(
                &FUSED_ATTENTION,
                &[
                    Value::Tensor(t[0].clone()),
                    Value::Tensor(t[1].clone()),
                    Value::Tensor(t[2].clone()),
                    Value::None,
                    Value::Float(0.0),
                    Value::Bool(true),
                    Value::None,
                ],
            )?;
            outs[0].sum_all()?.add(&outs[1].mul_scalar(0.7)?.sum_all()?)
        },
        &inputs[..3],
        GradcheckOptions::default(),
    )?;
    Ok(())
}

#[test]
fn double_backward_goes_through_the_decomposed_formula() -> Result<()> {
    let q = randn(&[1, 3, 2], 11).requires_grad_(true)?;
    let (k, v) = (randn(&[1, 3, 2], 12), randn(&[1, 3, 2], 13));
    let y = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.0, true, None)?;
    let g = autograd::grad(
        &[y.mul(&y)?.sum_all()?],
        std::slice::from_ref(&q),
        &[None],
        true,
    )?
    .remove(0)
    .unwrap();
    assert!(g.requires_grad());
    let gg = autograd::grad(&[g.sum_all()?], std::slice::from_ref(&q), &[None], false)?
        .remove(0)
        .unwrap();
    let plain = {
        let y = attention_composite(&q, &k, &v, None, true, 1.0 / 2f64.sqrt())?;
        let g = autograd::grad(
            &[y.mul(&y)?.sum_all()?],
            std::slice::from_ref(&q),
            &[None],
            true,
        )?
        .remove(0)
        .unwrap();
        autograd::grad(&[g.sum_all()?], std::slice::from_ref(&q), &[None], false)?
            .remove(0)
            .unwrap()
    };
    assert!(max_diff(&gg, &plain) <= 1e-12);
    Ok(())
}

#[test]
fn bad_inputs_name_the_argument() -> Result<()> {
    let q = randn(&[2, 3, 4], 1);
    let call_with = |k: &Tensor, v: &Tensor, m: Option<&Tensor>| {
        nn::scaled_dot_product_attention(&q, k, v, m, 0.0, false, None)
            .expect_err("expected an error")
            .to_string()
    };
    let msg = call_with(&randn(&[2, 5, 4], 2), &randn(&[2, 6, 4], 3), None);
    assert!(msg.contains("value") && msg.contains("5 rows"), "{msg}");
    let msg = call_with(&randn(&[3, 5, 4], 2), &randn(&[3, 5, 4], 3), None);
    assert!(msg.contains("broadcast") || msg.contains("[2]"), "{msg}");
    let mask = Tensor::ones(&[4, 5], DType::Bool);
    let msg = call_with(&randn(&[2, 5, 4], 2), &randn(&[2, 5, 4], 3), Some(&mask));
    assert!(msg.contains("attn_mask"), "{msg}");
    let msg = call_with(
        &randn(&[2, 5, 4], 2),
        &randn(&[2, 5, 4], 3),
        Some(&randn(&[3, 5], 4).to_dtype(DType::I64)?),
    );
    assert!(msg.contains("attn_mask"), "{msg}");
    Ok(())
}

#[test]
fn heads_split_from_a_packed_projection_are_read_where_they_lie() -> Result<()> {
    // A `[B, T, 3·H·E]` projection split into query, key and value and viewed as
    // `[B, H, T, E]`: rows of E contiguous elements, 3·H·E apart (no copy in the kernel).
    let (b, t, h, e) = (2, 19, 3, 5);
    let qkv = randn(&[b, t, 3 * h * e], 21);
    let parts = qkv.chunk(3, -1)?;
    let heads = |x: &Tensor| x.reshape(&[b, t, h, e])?.transpose(1, 2);
    let (q, k, v) = (heads(&parts[0])?, heads(&parts[1])?, heads(&parts[2])?);
    assert!(!q.is_contiguous());
    for causal in [false, true] {
        check_against_composite(&q, &k, &v, None, causal, 1e-12)?;
    }
    let keep = randn(&[t, t], 22).gt_scalar(-0.5)?;
    check_against_composite(&q, &k, &v, Some(&keep), false, 1e-12)
}

/// The fused op called directly: output, log-sum-exp and the dropout seed.
fn fused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    p: f64,
    causal: bool,
) -> Result<Vec<Tensor>> {
    call(
        &FUSED_ATTENTION,
        &[
            Value::Tensor(q.clone()),
            Value::Tensor(k.clone()),
            Value::Tensor(v.clone()),
            Value::OptionalTensor(mask.cloned()),
            Value::Float(p),
            Value::Bool(causal),
            Value::None,
        ],
    )
}

/// With `v` the identity the output rows are the (dropped) probabilities themselves: about `p`
/// of them are zero, and the others are the undropped probabilities times `1 / (1 - p)`; the
/// log-sum-exp is the undropped one.
#[test]
fn dropout_zeroes_about_p_of_the_probabilities_and_scales_the_rest() -> Result<()> {
    let _g = generator();
    let (b, h, l) = (4, 2, 32);
    let q = randn(&[b, h, l, 8], 1);
    let k = randn(&[b, h, l, 8], 2);
    let v = Tensor::eye(l, l, DType::F64)?;
    let plain = fused(&q, &k, &v, None, 0.0, false)?;
    for p in [0.1, 0.5, 0.8] {
        let outs = fused(&q, &k, &v, None, p, false)?;
        assert_eq!(outs[1].to_vec::<f64>()?, plain[1].to_vec::<f64>()?);
        let (got, want) = (outs[0].to_vec::<f64>()?, plain[0].to_vec::<f64>()?);
        let dropped = got.iter().filter(|&&x| x == 0.0).count() as f64 / got.len() as f64;
        assert!((dropped - p).abs() < 0.03, "p {p}: dropped {dropped}");
        for (x, y) in got.iter().zip(&want) {
            assert!(
                *x == 0.0 || (x - y / (1.0 - p)).abs() <= 1e-14,
                "{x} vs {y}"
            );
        }
    }
    Ok(())
}

/// The fused forward and backward against the decomposed formula run with the keep mask
/// regenerated from the fused call's seed: plain, causal, with a bool and a float mask, with
/// key/value broadcast over the heads (each head its own mask), and halves.
#[test]
fn dropout_backward_matches_the_decomposed_formula_with_the_same_mask() -> Result<()> {
    let _g = generator();
    let bool_mask = randn(&[7, 9], 5).gt_scalar(-0.8)?;
    let float_mask = randn(&[2, 1, 7, 9], 6);
    /// Query shape, key/value shape, mask, causal.
    type Case<'a> = (Vec<usize>, Vec<usize>, Option<&'a Tensor>, bool);
    let cases: [Case; 5] = [
        (vec![2, 3, 7, 5], vec![2, 3, 9, 5], None, false),
        (vec![2, 3, 9, 5], vec![2, 3, 9, 5], None, true),
        (vec![2, 3, 7, 5], vec![2, 3, 9, 5], Some(&bool_mask), false),
        (vec![2, 3, 7, 5], vec![2, 3, 9, 5], Some(&float_mask), false),
        (vec![2, 3, 7, 5], vec![2, 1, 9, 5], None, false),
    ];
    for (i, (qs, ks, mask, causal)) in cases.iter().enumerate() {
        let leaves: Vec<Tensor> = [randn(qs, 10), randn(ks, 11), randn(ks, 12)]
            .into_iter()
            .map(|t| t.requires_grad_(true).unwrap())
            .collect();
        let p = 0.4;
        let outs = fused(&leaves[0], &leaves[1], &leaves[2], *mask, p, *causal)?;
        let seed = outs[2].item::<i64>()? as u64;
        let batch = &outs[0].shape()[..2];
        let keep = dropout_keep_mask(batch, qs[2], ks[2], p, seed)?;
        let scale = 1.0 / 5f64.sqrt();
        let (q, k, v) = (&leaves[0], &leaves[1], &leaves[2]);
        let plain = attention_composite_dropout(q, k, v, *mask, *causal, scale, Some((&keep, p)))?;
        assert!(max_diff(&outs[0], &plain) <= 1e-12, "case {i}: forward");
        let w = randn(plain.shape(), 13);
        let gf = autograd::grad(&[outs[0].mul(&w)?.sum_all()?], &leaves, &[None], false)?;
        let gp = autograd::grad(&[plain.mul(&w)?.sum_all()?], &leaves, &[None], false)?;
        for (j, (a, b)) in gf.iter().zip(&gp).enumerate() {
            let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
            assert!(
                max_diff(a, b) <= 1e-12,
                "case {i}, grad {j}: {}",
                max_diff(a, b)
            );
        }
    }
    // The f32 and bf16 kernels apply the same decisions (they depend on the seed only).
    let (q, k, v) = (
        randn(&[2, 6, 4], 20),
        randn(&[2, 6, 4], 21),
        randn(&[2, 6, 4], 22),
    );
    manual_seed(77);
    let want = nn::scaled_dot_product_attention(&q, &k, &v, None, 0.5, true, None)?;
    let zeros = |t: &Tensor| -> Vec<bool> {
        let v = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        v.iter().map(|&x| x == 0.0).collect()
    };
    assert!(
        zeros(&want).iter().any(|&z| z),
        "no row fully dropped: pick another seed"
    );
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 5e-2)] {
        manual_seed(77);
        let f = |t: &Tensor| t.to_dtype(dtype).unwrap();
        let got = nn::scaled_dot_product_attention(&f(&q), &f(&k), &f(&v), None, 0.5, true, None)?;
        assert_eq!(zeros(&got), zeros(&want), "{dtype}");
        assert!(
            max_diff(&got, &want) <= tol,
            "{dtype}: {}",
            max_diff(&got, &want)
        );
    }
    Ok(())
}

/// Finite differences through the fused op with dropout (each evaluation reseeds, so every one
/// applies the same mask), causal and not, the log-sum-exp's gradient included.
#[test]
fn dropout_gradients_pass_gradcheck() -> Result<()> {
    let _g = generator();
    let inputs = vec![
        randn(&[2, 4, 3], 30).requires_grad_(true)?,
        randn(&[2, 5, 3], 31).requires_grad_(true)?,
        randn(&[2, 5, 2], 32).requires_grad_(true)?,
    ];
    for causal in [false, true] {
        gradcheck(
            |t| {
                manual_seed(123);
                nn::scaled_dot_product_attention(&t[0], &t[1], &t[2], None, 0.3, causal, None)
            },
            &inputs,
            GradcheckOptions::default(),
        )?;
        gradcheck(
            |t| {
                manual_seed(321);
                let outs = fused(&t[0], &t[1], &t[2], None, 0.6, causal)?;
                outs[0].sum_all()?.add(&outs[1].mul_scalar(0.7)?.sum_all()?)
            },
            &inputs,
            GradcheckOptions::default(),
        )?;
    }
    Ok(())
}

/// `create_graph` differentiates the decomposed formula with the materialized mask: the first
/// gradients equal the fused backward's, and the second ones the decomposed formula's.
#[test]
fn dropout_double_backward_uses_the_same_mask() -> Result<()> {
    let _g = generator();
    let q = randn(&[2, 4, 3], 40).requires_grad_(true)?;
    let (k, v) = (randn(&[2, 4, 3], 41), randn(&[2, 4, 3], 42));
    let outs = fused(&q, &k, &v, None, 0.5, true)?;
    let loss = outs[0].mul(&outs[0])?.sum_all()?;
    let g1 = autograd::grad(
        std::slice::from_ref(&loss),
        std::slice::from_ref(&q),
        &[None],
        true,
    )?
    .remove(0)
    .unwrap();
    let fused_g = autograd::grad(&[loss], std::slice::from_ref(&q), &[None], false)?
        .remove(0)
        .unwrap();
    let keep = dropout_keep_mask(&[2], 4, 4, 0.5, outs[2].item::<i64>()? as u64)?;
    let scale = 1.0 / 3f64.sqrt();
    let y = attention_composite_dropout(&q, &k, &v, None, true, scale, Some((&keep, 0.5)))?;
    let p1 = autograd::grad(
        &[y.mul(&y)?.sum_all()?],
        std::slice::from_ref(&q),
        &[None],
        true,
    )?
    .remove(0)
    .unwrap();
    assert!(
        max_diff(&g1, &fused_g) <= 1e-12,
        "{}",
        max_diff(&g1, &fused_g)
    );
    let gg = autograd::grad(&[g1.sum_all()?], std::slice::from_ref(&q), &[None], false)?;
    let pp = autograd::grad(&[p1.sum_all()?], std::slice::from_ref(&q), &[None], false)?;
    assert!(max_diff(gg[0].as_ref().unwrap(), pp[0].as_ref().unwrap()) <= 1e-12);
    Ok(())
}

/// `dropout_p = 0` is the plain kernel: the generator is not touched and the seed output is 0.
/// With dropout, `manual_seed` reproduces the masks (and gradients); successive calls differ.
#[test]
fn dropout_draws_from_the_global_generator_only_when_p_is_positive() -> Result<()> {
    let _g = generator();
    let q = randn(&[3, 2, 8, 4], 50).requires_grad_(true)?;
    manual_seed(9);
    let outs = fused(&q, &q, &q, None, 0.0, true)?;
    assert_eq!(outs[2].item::<i64>()?, 0);
    let after = Tensor::rand(&[4], DType::F64)?.to_vec::<f64>()?;
    manual_seed(9);
    assert_eq!(Tensor::rand(&[4], DType::F64)?.to_vec::<f64>()?, after);
    let run = || -> Result<(Vec<f64>, Vec<f64>)> {
        let y = nn::scaled_dot_product_attention(&q, &q, &q, None, 0.5, true, None)?;
        let g = autograd::grad(&[y.sum_all()?], std::slice::from_ref(&q), &[None], false)?;
        Ok((y.to_vec::<f64>()?, g[0].as_ref().unwrap().to_vec::<f64>()?))
    };
    manual_seed(4);
    let (a, ga) = run()?;
    let (b, _) = run()?;
    manual_seed(4);
    let (c, gc) = run()?;
    assert_eq!((&a, &ga), (&c, &gc));
    assert_ne!(a, b, "two calls drew the same mask");
    Ok(())
}

/// `dropout_p` outside `[0, 1]` (or NaN) is an error naming the op, the argument, the range and
/// the value; `p = 1` drops everything (zeros, zero gradients), as PyTorch.
#[test]
fn dropout_p_is_checked_and_one_drops_everything() -> Result<()> {
    let _g = generator();
    let q = randn(&[2, 3, 4], 60).requires_grad_(true)?;
    for p in [-0.1, 1.5, f64::NAN] {
        let msg = nn::scaled_dot_product_attention(&q, &q, &q, None, p, false, None)
            .expect_err("a bad dropout_p")
            .to_string();
        assert!(
            msg.contains("scaled_dot_product_attention")
                && msg.contains("dropout_p")
                && msg.contains("[0, 1]")
                && msg.contains(&p.to_string()),
            "{msg}"
        );
        let msg = fused(&q, &q, &q, None, p, false)
            .expect_err("a bad dropout_p")
            .to_string();
        assert!(
            msg.contains("_fused_attention") && msg.contains("dropout_p"),
            "{msg}"
        );
    }
    let y = nn::scaled_dot_product_attention(&q, &q, &q, None, 1.0, true, None)?;
    assert!(y.to_vec::<f64>()?.iter().all(|&x| x == 0.0));
    y.sum_all()?.backward()?;
    assert!(q.grad().unwrap().to_vec::<f64>()?.iter().all(|&x| x == 0.0));
    Ok(())
}
