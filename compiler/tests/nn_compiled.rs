//! Compiled == eager for programs built from the transformer ops: the indexing primitives
//! (barriers, with their reasons in the plan), the composites (whose elementwise parts fuse) and
//! the `nn` functions — forward values, and gradients through compiled training; attention
//! dropout, which draws a fresh seed per compiled call.

use tensorplay_compiler::compile;
use tensorplay_runtime::nn::{self, Reduction};
use tensorplay_runtime::{DType, Result, Tensor, autograd, manual_seed};

fn close(a: &Tensor, b: &Tensor, tol: f64) -> Result<bool> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Ok(false);
    }
    let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
    Ok(a.iter().zip(&b).all(|(x, y)| {
        (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * (1.0 + y.abs())
    }))
}

/// A tiny transformer-style program over every new op: embedding, a causal attention block with
/// layer_norm, an rms_norm'd MLP, logsumexp, norm, cumsum, flip, masked_fill, scatter_add and
/// the losses.
fn program(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (ids, targets, table, w, g) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4]);
    let x = nn::embedding(ids, table)?; // [2, 4, 8]
    let a = nn::layer_norm(&x, &[8], Some(g), None, 1e-5)?;
    let qkv = nn::linear(&a, w, None)?.chunk(3, -1)?;
    let y = nn::scaled_dot_product_attention(&qkv[0], &qkv[1], &qkv[2], None, 0.0, true, None)?;
    let x = x.add(&y)?;
    let m = nn::rms_norm(&x, &[8], None, None)?.gelu("tanh")?;
    let logits = m.reshape(&[8, 8])?;
    let ce = nn::cross_entropy(&logits, &targets.reshape(&[8])?, 3, 0.1, Reduction::Mean)?;
    let extra = logits
        .logsumexp(&[1], false)?
        .cumsum(0, None)?
        .flip(&[0])?
        .mul(&logits.norm(2.0, &[1], false)?)?;
    let mask = logits.gt_scalar(0.5)?;
    let filled = logits.masked_fill(&mask, 0.5)?.tril(0)?;
    let idx = targets.reshape(&[8, 1])?.clamp_max(7)?;
    let scattered = filled.scatter_add(1, &idx, &logits.narrow(1, 0, 1)?)?;
    let mse = nn::mse_loss(&scattered, &logits, Reduction::Mean)?;
    Ok(vec![ce.add(&extra.mean_all()?)?.add(&mse)?])
}

fn inputs() -> Result<Vec<Tensor>> {
    let ids = Tensor::from_vec(vec![0i64, 5, 2, 5, 1, 1, 4, 3], &[2, 4])?;
    let targets = Tensor::from_vec(vec![1i64, 3, 0, 7, 2, 3, 5, 6], &[2, 4])?;
    Ok(vec![
        ids,
        targets,
        Tensor::randn_seeded(&[6, 8], DType::F64, 1)?.requires_grad_(true)?,
        Tensor::randn_seeded(&[24, 8], DType::F64, 2)?
            .mul_scalar(0.3)?
            .requires_grad_(true)?,
        Tensor::randn_seeded(&[8], DType::F64, 3)?.requires_grad_(true)?,
    ])
}

#[test]
fn the_transformer_ops_compile_like_eager() -> Result<()> {
    let xs = inputs()?;
    let want = program(&xs)?.remove(0);
    let grads = autograd::grad(std::slice::from_ref(&want), &xs[2..], &[None], false)?;
    let f = compile(program);
    let got = f.call(&xs)?.remove(0);
    assert_eq!(got.grad_fn_name(), Some("compiled_backward"));
    assert!(close(&got, &want, 1e-12)?, "{got:?} vs {want:?}");
    let cgrads = autograd::grad(std::slice::from_ref(&got), &xs[2..], &[None], false)?;
    for (i, (c, e)) in cgrads.iter().zip(&grads).enumerate() {
        let (c, e) = (c.as_ref().unwrap(), e.as_ref().unwrap());
        assert!(close(c, e, 1e-12)?, "gradient {i}: {c:?} vs {e:?}");
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    // The primitives are barriers that say why; the composites' elementwise ops fuse.
    let t = f.latest_training().unwrap();
    let text = t.explain();
    for reason in [
        "opaque op tp::gather",
        "opaque op tp::scatter_add",
        "opaque op tp::flip",
        "tp::cumsum has no scalar lowering",
    ] {
        assert!(text.contains(reason), "{reason} missing from:\n{text}");
    }
    Ok(())
}

#[test]
fn inference_compiles_and_serves_a_second_batch() -> Result<()> {
    let f = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let (x, w, b) = (&xs[0], &xs[1], &xs[2]);
        let h = nn::layer_norm(x, &[4], Some(w), Some(b), 1e-5)?;
        let y = nn::scaled_dot_product_attention(&h, &h, &h, None, 0.0, true, None)?;
        Ok(vec![y.logsumexp(&[-1], true)?.sub(&y)?])
    };
    let c = compile(f);
    for batch in [2usize, 3] {
        let xs = vec![
            Tensor::randn_seeded(&[batch, 5, 4], DType::F32, batch as u64)?,
            Tensor::randn_seeded(&[4], DType::F32, 7)?,
            Tensor::randn_seeded(&[4], DType::F32, 8)?,
        ];
        let (e, g) = (f(&xs)?.remove(0), c.call(&xs)?.remove(0));
        // f32 transcendentals are within a few ulp of eager's (the numerics contract).
        assert!(close(&g, &e, 1e-5)?, "batch {batch}");
    }
    // layer_norm's centering, scaling and shifting fuse: far fewer kernels than ops.
    let g = c.latest().unwrap();
    assert!(
        g.num_kernels() < g.graph().to_string().lines().count() / 2,
        "{}",
        g.explain()
    );
    Ok(())
}

/// Masks built from the sizes — `tril` and a causal attention — follow the input sizes under
/// capture: a sequence whose masks have more than 64 elements compiles (they are graph
/// computations, not constants of the example's sizes), and other lengths and batch sizes reuse
/// the graph.
#[test]
fn causal_and_triangular_masks_follow_the_sequence_length_without_recompiling() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let q = &xs[0];
        let y = nn::scaled_dot_product_attention(q, q, q, None, 0.0, true, None)?;
        Ok(vec![y.add(&q.tril(-1)?)?])
    };
    let f = compile(body);
    for (b, l) in [(2usize, 12usize), (3, 20), (2, 9)] {
        let q = Tensor::randn_seeded(&[b, l, 16], DType::F32, l as u64)?;
        let want = body(std::slice::from_ref(&q))?;
        let got = f.call(&[q])?;
        assert!(close(&got[0], &want[0], 1e-5)?, "batch {b}, length {l}");
    }
    assert_eq!(f.num_compiled(), 1, "recompiled for another length");
    Ok(())
}

/// Issue 12's second batch under compile: `cumprod` (a barrier with its reason), `diagonal`
/// (a view, also of a computed tensor), `nansum`, `embedding_padded` and the class-weighted
/// cross-entropy — forward values and gradients through compiled training equal eager's; the
/// elementwise ops around them still fuse.
#[test]
fn cumprod_diagonal_nansum_and_weighted_losses_compile_like_eager() -> Result<()> {
    let program = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let (x, table, w, ids, t) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4]);
        let scan = x.mul_scalar(0.5)?.cumprod(1, None)?.tanh()?; // [4, 5]
        let diag = x.matmul(&x.t()?)?.diagonal(1, 0, 1)?.exp()?; // [3]
        let nan = x.div(&x.gt_scalar(0.0)?.to_dtype(DType::F64)?)?; // inf and NaN (0/0)
        let masked = nan.masked_fill(&nan.isinf()?, 0.0)?.nansum(&[0], false)?; // [5]
        let e = nn::embedding_padded(ids, table, Some(0))?.sum(&[-1], false)?; // [4]
        let ce = nn::cross_entropy_weighted(&scan, t, Some(w), -100, 0.1, Reduction::Mean)?;
        Ok(vec![
            ce.add(&diag.sum_all()?)?
                .add(&masked.mul(&scan.select(0, 1)?)?.sum_all()?)?
                .add(&e.mul(&scan.select(1, 2)?)?.sum_all()?)?,
        ])
    };
    let xs = vec![
        // A zero in the data: cumprod's gradient must be exact there.
        Tensor::randn_seeded(&[4, 5], DType::F64, 21)?
            .masked_fill(
                &Tensor::from_vec(vec![false, false, true, false, false], &[5])?,
                0.0,
            )?
            .requires_grad_(true)?,
        Tensor::randn_seeded(&[3, 2], DType::F64, 22)?.requires_grad_(true)?,
        Tensor::from_vec(vec![0.5, 2.0, 1.0, 1.5, 0.25], &[5])?.requires_grad_(true)?,
        Tensor::from_vec(vec![0i64, 2, 1, 0], &[4])?,
        Tensor::from_vec(vec![4i64, 0, 2, 1], &[4])?,
    ];
    let inputs = &xs[..3];
    let want = program(&xs)?.remove(0);
    let grads = autograd::grad(std::slice::from_ref(&want), inputs, &[None], false)?;
    let f = compile(program);
    let got = f.call(&xs)?.remove(0);
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    assert_eq!(got.grad_fn_name(), Some("compiled_backward"));
    assert!(close(&got, &want, 1e-12)?, "{got:?} vs {want:?}");
    let cgrads = autograd::grad(std::slice::from_ref(&got), inputs, &[None], false)?;
    for (i, (c, e)) in cgrads.iter().zip(&grads).enumerate() {
        let (c, e) = (c.as_ref().unwrap(), e.as_ref().unwrap());
        assert!(close(c, e, 1e-12)?, "gradient {i}: {c:?} vs {e:?}");
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    let text = f.latest_training().unwrap().explain();
    assert!(
        text.contains("tp::cumprod has no scalar lowering"),
        "cumprod's barrier reason missing from:\n{text}"
    );
    // Inference too, with a second batch of the same shapes.
    let g = compile(program);
    let detached: Vec<Tensor> = xs.iter().map(|t| t.detach()).collect();
    let a = g.call(&detached)?.remove(0);
    assert!(close(&a, &program(&detached)?.remove(0), 1e-12)?);
    Ok(())
}

/// Attention dropout under compile: the fused op is an opaque barrier that draws its seed when
/// it runs (the seed is an output the backward reads, not a constant of the capture), so every
/// compiled call draws a fresh mask from the global generator, and under the same `manual_seed`
/// a compiled training step equals eager's (forward and gradients).
#[test]
fn attention_dropout_draws_per_call_and_matches_eager_under_manual_seed() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let qkv = nn::linear(&xs[0], &xs[1], None)?.chunk(3, -1)?;
        let y = nn::scaled_dot_product_attention(&qkv[0], &qkv[1], &qkv[2], None, 0.5, true, None)?;
        Ok(vec![y.mul(&y)?.sum_all()?.add(&y.sum_all()?)?, y])
    };
    let xs = vec![
        Tensor::randn_seeded(&[2, 6, 8], DType::F64, 1)?,
        Tensor::randn_seeded(&[24, 8], DType::F64, 2)?
            .mul_scalar(0.4)?
            .requires_grad_(true)?,
    ];
    let f = compile(body);
    let w = std::slice::from_ref(&xs[1]);
    for seed in [11, 12] {
        manual_seed(seed);
        let want = body(&xs)?;
        let gw = autograd::grad(&want[..1], w, &[None], false)?
            .remove(0)
            .unwrap();
        manual_seed(seed);
        let got = f.call(&xs)?;
        assert_eq!(got[0].grad_fn_name(), Some("compiled_backward"));
        assert!(close(&got[1], &want[1], 1e-12)?, "seed {seed}: forward");
        let gc = autograd::grad(&got[..1], w, &[None], false)?
            .remove(0)
            .unwrap();
        assert!(close(&gc, &gw, 1e-12)?, "seed {seed}: {gc:?} vs {gw:?}");
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    // Without reseeding, successive compiled calls draw other masks.
    let (a, b) = (f.call(&xs)?.remove(1), f.call(&xs)?.remove(1));
    assert!(
        !close(&a, &b, 0.0)?,
        "two compiled calls applied the same mask"
    );
    assert_eq!(f.num_compiled(), 1);
    // Inference (no input requires grad): the same, through the forward-only graph.
    let xs: Vec<Tensor> = xs.iter().map(|t| t.detach()).collect();
    let g = compile(body);
    manual_seed(5);
    let want = body(&xs)?.remove(1);
    manual_seed(5);
    assert!(close(&g.call(&xs)?.remove(1), &want, 1e-12)?);
    let (a, b) = (g.call(&xs)?.remove(1), g.call(&xs)?.remove(1));
    assert!(
        !close(&a, &b, 0.0)?,
        "two compiled inference calls applied the same mask"
    );
    Ok(())
}
