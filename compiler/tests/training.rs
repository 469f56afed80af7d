//! Compiled training (AOT autograd): forward and backward captured together, split and compiled;
//! gradients through the compiled backward equal eager ones.

use tensorplay_compiler::{CompiledFn, compile};
use tensorplay_runtime::library;
use tensorplay_runtime::{DType, Result, Tensor, autograd};

fn leaf(shape: &[usize], seed: u64) -> Result<Tensor> {
    Tensor::randn_seeded(shape, DType::F32, seed)?.requires_grad_(true)
}

/// Gradients of `f(inputs)[0]` (summed) with respect to `inputs`, through `run`.
/// Output values and, per input, its gradient (when it has one).
type ValuesAndGrads = (Vec<f32>, Vec<Option<Vec<f32>>>);

fn grads(
    run: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
) -> Result<ValuesAndGrads> {
    let out = run(inputs)?;
    let loss = out[0].sum_all()?;
    let g = autograd::grad(std::slice::from_ref(&loss), inputs, &[None], false)?;
    Ok((
        out[0].to_vec::<f32>()?,
        g.into_iter()
            .map(|g| g.map(|g| g.to_vec::<f32>()).transpose())
            .collect::<Result<_>>()?,
    ))
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: compiled {x} vs eager {y}"
        );
    }
}

/// The compiled call's output and gradients equal eager's (to 1e-5) on `inputs`.
fn compiled_agrees_with_eager(
    f: &CompiledFn,
    body: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
) -> Result<()> {
    let (yc, gc) = grads(&|x| f.call(x), inputs)?;
    let (ye, ge) = grads(body, inputs)?;
    assert_close(&yc, &ye, 1e-5, "output");
    for (c, e) in gc.iter().zip(&ge) {
        assert_close(c.as_ref().unwrap(), e.as_ref().unwrap(), 1e-5, "grad");
    }
    Ok(())
}

fn mlp(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let h = xs[0].matmul(&xs[1])?.add(&xs[2])?.tanh()?;
    Ok(vec![h.mul(&h)?.sum(&[1], false)?])
}

#[test]
fn compiled_backward_matches_eager_and_fuses() -> Result<()> {
    let f = compile(mlp);
    let inputs = [leaf(&[8, 5], 1)?, leaf(&[5, 6], 2)?, leaf(&[6], 3)?];
    let (yc, gc) = grads(&|x| f.call(x), &inputs)?;
    let (ye, ge) = grads(&mlp, &inputs)?;
    assert_close(&yc, &ye, 1e-5, "output");
    for (i, (c, e)) in gc.iter().zip(&ge).enumerate() {
        assert_close(
            c.as_ref().unwrap(),
            e.as_ref().unwrap(),
            1e-4,
            &format!("grad {i}"),
        );
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    let t = f.latest_training().expect("a compiled training graph");
    assert!(t.backward().num_kernels() >= 1, "{}", t.explain());
    let out = f.call(&inputs)?;
    assert_eq!(out[0].grad_fn_name(), Some("compiled_backward"));
    Ok(())
}

#[test]
fn elementwise_training_serves_a_second_size_without_recompiling() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let a = xs[0].mul(&xs[1])?.sigmoid()?;
        Ok(vec![a.mul(&xs[0].exp()?)?.add_scalar(0.5)?])
    };
    let f = compile(body);
    for n in [16usize, 37] {
        let inputs = [leaf(&[n], 10 + n as u64)?, leaf(&[n], 20 + n as u64)?];
        compiled_agrees_with_eager(&f, &body, &inputs)?;
    }
    assert_eq!(f.num_compiled(), 1);
    let t = f.latest_training().unwrap();
    // The whole backward chain is elementwise: one fused kernel.
    assert_eq!(t.backward().num_kernels(), 1, "{}", t.explain());
    Ok(())
}

#[test]
fn matmul_view_and_mean_backwards_serve_other_batch_sizes_without_recompiling() -> Result<()> {
    // An MLP-shaped loss whose backward used to bake the batch size (matmul's plan, view's
    // reshape to the input's sizes, mean's element count): it now reads symbolic sizes only.
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let h = xs[0].matmul(&xs[1])?.relu()?; // [b, 4]
        let s = h.sym_shape();
        let flat = h.view_sym(&[s[0] * s[1]])?; // [4b]
        let v = xs[2].matmul(&xs[1].t()?)?.sum(&[0], false)?; // 1-D @ 2-D: [3]
        Ok(vec![
            flat.square()?.mean(&[], false)?.add(&v.mean(&[], false)?)?,
        ])
    };
    let f = compile(body);
    for b in [5usize, 9, 2] {
        let inputs = [
            leaf(&[b, 3], 30 + b as u64)?,
            leaf(&[3, 4], 31)?,
            leaf(&[4], 32)?,
        ];
        compiled_agrees_with_eager(&f, &body, &inputs)?;
    }
    assert_eq!(f.num_compiled(), 1, "recompiled for another batch size");
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    Ok(())
}

#[test]
fn only_inputs_that_require_grad_get_gradients() -> Result<()> {
    let f = compile(mlp);
    let x = Tensor::randn_seeded(&[4, 3], DType::F32, 5)?;
    let w = leaf(&[3, 2], 6)?;
    let b = Tensor::randn_seeded(&[2], DType::F32, 7)?;
    let loss = f.call(&[x.clone(), w.clone(), b.clone()])?[0].sum_all()?;
    loss.backward()?;
    let eager = mlp(&[x.clone(), w.detach().requires_grad_(true)?, b])?;
    let _ = eager;
    assert!(w.grad().is_some());
    assert!(x.grad().is_none());
    Ok(())
}

#[test]
fn custom_ops_opaque_with_formula_and_traced_through() -> Result<()> {
    // Opaque: its own autograd formula (deliberately scaled, so the test sees it is used).
    let opaque = library::custom_op("train_test::cube")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul(&x)?.mul(&x) })?;
    opaque.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    opaque.register_autograd(
        |ctx, g| {
            let x = &ctx.saved_tensors()[0];
            assert_eq!(ctx.needs_input_grad(), &[true]);
            Ok(vec![
                g[0].as_ref()
                    .map(|g| g.mul(&x.mul(x)?.mul_scalar(3.0)?))
                    .transpose()?,
            ])
        },
        Some(Box::new(|ctx, inputs, _| {
            let x = inputs[0].tensors().next().cloned().expect("x is a tensor");
            ctx.save_for_backward(&[&x]);
            Ok(())
        })),
    )?;
    // Traced through: no formula, its builtin ops are differentiated.
    let gelu = library::custom_op("train_test::gelu_like")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul(&x.mul_scalar(1.702)?.sigmoid()?) })?;
    let (o, g) = (opaque.clone(), gelu.clone());
    let body = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let a = g.call1(&[xs[0].clone().into()])?;
        let b = o.call1(&[a.into()])?;
        Ok(vec![b.mul(&xs[1])?])
    };
    let f = compile(body.clone());
    let inputs = [leaf(&[6], 30)?, leaf(&[6], 31)?];
    let (yc, gc) = grads(&|x| f.call(x), &inputs)?;
    let (ye, ge) = grads(&body, &inputs)?;
    assert_close(&yc, &ye, 1e-5, "output");
    for (c, e) in gc.iter().zip(&ge) {
        assert_close(c.as_ref().unwrap(), e.as_ref().unwrap(), 1e-5, "grad");
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    let text = f.latest_training().unwrap().explain();
    assert!(text.contains("train_test::cube"), "{text}");
    assert!(!text.contains("train_test::gelu_like"), "{text}");
    Ok(())
}

/// A transcendental value the forward stores anyway (it feeds a matrix product) is saved, not
/// evaluated again in the backward; a cheap one (a square, whose backward keeps its operand
/// anyway) is still recomputed there.
#[test]
fn a_stored_transcendental_value_is_saved_and_a_cheap_one_recomputed() -> Result<()> {
    let recomputed = |act: fn(&Tensor) -> Result<Tensor>| -> Result<String> {
        let f = compile(move |xs: &[Tensor]| {
            let h = act(&xs[0].matmul(&xs[1])?)?;
            Ok(vec![h.matmul(&xs[2])?.sum_all()?])
        });
        let inputs = [leaf(&[4, 3], 43)?, leaf(&[3, 5], 44)?, leaf(&[5, 2], 45)?];
        f.call(&inputs)?[0].backward()?;
        let body = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let h = act(&xs[0].matmul(&xs[1])?)?;
            Ok(vec![h.matmul(&xs[2])?])
        };
        let g = compile(body);
        compiled_agrees_with_eager(&g, &body, &inputs)?;
        let text = f.latest_training().unwrap().explain();
        let n = text
            .split(" elementwise value(s) recomputed")
            .next()
            .and_then(|head| head.rsplit(' ').next())
            .unwrap_or("?")
            .to_string();
        Ok(n)
    };
    assert_eq!(recomputed(|x| x.gelu("tanh"))?, "0");
    assert_eq!(recomputed(|x| x.mul(x))?, "1");
    Ok(())
}

#[test]
fn explain_shows_both_halves_and_what_is_saved() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        let h = xs[0].matmul(&xs[1])?.tanh()?;
        Ok(vec![h.mul(&xs[2])?.sum_all()?])
    });
    let (x, w, s) = (leaf(&[4, 3], 40)?, leaf(&[3, 5], 41)?, leaf(&[5], 42)?);
    f.call(&[x, w, s])?[0].backward()?;
    let text = f.latest_training().unwrap().explain();
    println!("{text}");
    assert!(text.contains("== forward =="), "{text}");
    assert!(text.contains("== backward =="), "{text}");
    assert!(text.contains("saved value(s)"), "{text}");
    Ok(())
}

#[test]
fn a_graph_that_cannot_be_split_runs_interpreted_and_says_why() -> Result<()> {
    let opaque = library::custom_op("train_test::abs_cpu")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.abs() })?;
    opaque.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let o = opaque.clone();
    let body = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![o.call1(&[xs[0].exp()?.into()])?.mul(&xs[0])?])
    };
    let f = compile(body.clone());
    let x = leaf(&[5], 50)?;
    let (yc, gc) = grads(&|xs| f.call(xs), std::slice::from_ref(&x))?;
    let (ye, ge) = grads(&body, std::slice::from_ref(&x))?;
    assert_close(&yc, &ye, 1e-6, "output");
    assert_close(
        gc[0].as_ref().unwrap(),
        ge[0].as_ref().unwrap(),
        1e-6,
        "grad",
    );
    let why = f.training_fallbacks();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("train_test::abs_cpu") && why[0].contains("register_autograd"),
        "{why:?}"
    );
    Ok(())
}

#[test]
fn double_backward_through_a_compiled_backward_is_an_error() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[0])?.sum_all()?]));
    let x = leaf(&[3], 60)?;
    let y = f.call(std::slice::from_ref(&x))?;
    let e = autograd::grad(&y, std::slice::from_ref(&x), &[None], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("double backward"), "{e}");
    Ok(())
}

#[test]
fn a_saved_input_modified_in_place_is_caught() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?.sum_all()?]));
    let (x, w) = (leaf(&[3], 70)?, Tensor::randn_seeded(&[3], DType::F32, 71)?);
    let y = f.call(&[x, w.clone()])?;
    w.mul_scalar_(2.0)?;
    let e = y[0].backward().unwrap_err().to_string();
    assert!(e.contains("modified by an in-place operation"), "{e}");
    Ok(())
}

/// The first example of docs/guide/training.md.
#[test]
fn the_training_guide_example_runs() -> Result<()> {
    use tensorplay_compiler::optim::Adam;
    fn loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (x, y, w, b) = (&xs[0], &xs[1], &xs[2], &xs[3]);
        let d = x.matmul(w)?.add(b)?.tanh()?.sub(y)?;
        Ok(vec![d.mul(&d)?.mean_all()?])
    }
    let w = Tensor::randn_seeded(&[8, 4], DType::F32, 0)?.requires_grad_(true)?;
    let b = Tensor::zeros(&[4], DType::F32).requires_grad_(true)?;
    let (x, y) = (
        Tensor::randn_seeded(&[32, 8], DType::F32, 1)?,
        Tensor::zeros(&[32, 4], DType::F32),
    );
    let f = compile(loss);
    let mut opt = Adam::new(vec![w.clone(), b.clone()], 1e-2, (0.9, 0.999), 1e-8)?;
    let mut first = None;
    let mut last = 0.0;
    for _ in 0..10 {
        let l = f
            .call(&[x.clone(), y.clone(), w.clone(), b.clone()])?
            .swap_remove(0);
        assert_eq!(l.grad_fn_name(), Some("compiled_backward"));
        l.backward()?;
        opt.step()?;
        opt.zero_grad();
        last = l.item::<f32>()?;
        first.get_or_insert(last);
    }
    assert!(last < first.unwrap());
    assert!(
        f.latest_training()
            .unwrap()
            .explain()
            .contains("== backward ==")
    );
    Ok(())
}

/// Issue 31 item 11: an opaque custom op (fake kernel + autograd formula) inside compiled
/// training keeps one graph across batch sizes, as builtin ops do.
#[test]
fn an_opaque_custom_op_keeps_one_training_graph_across_batch_sizes() -> Result<()> {
    let op = library::custom_op("train_test::cube_sym")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul(&x)?.mul(&x) })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    op.register_autograd(
        |ctx, g| {
            let x = &ctx.saved_tensors()[0];
            Ok(vec![
                g[0].as_ref()
                    .map(|g| g.mul(&x.mul(x)?.mul_scalar(3.0)?))
                    .transpose()?,
            ])
        },
        Some(Box::new(|ctx, inputs, _| {
            let x = inputs[0].tensors().next().cloned().expect("x is a tensor");
            ctx.save_for_backward(&[&x]);
            Ok(())
        })),
    )?;
    let o = op.clone();
    let body = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let h = xs[0].matmul(&xs[1])?; // [b, 4]
        let c = o.call1(&[h.into()])?;
        Ok(vec![c.mean(&[], false)?])
    };
    let f = compile(body.clone());
    for b in [16usize, 32, 64, 16] {
        let inputs = [leaf(&[b, 3], 60 + b as u64)?, leaf(&[3, 4], 61)?];
        compiled_agrees_with_eager(&f, &body, &inputs)?;
    }
    assert_eq!(f.num_compiled(), 1, "recompiled for another batch size");
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    Ok(())
}

/// A projection chunked into three pieces, as a transformer's `qkv`: the compiled backward joins
/// the pieces' slice gradients into one `cat` (no zero-filled slice gradients, no adds) and
/// agrees with eager autograd, which sums the slice gradients.
#[test]
fn a_chunked_projections_gradient_is_one_cat() -> Result<()> {
    fn body(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        let p = xs[0].matmul(&xs[1])?.chunk(3, -1)?;
        let y = p[0].mul(&p[1])?.add(&p[2].tanh()?)?;
        Ok(vec![y.sum(&[2], false)?])
    }
    let f = compile(body);
    let inputs = [leaf(&[4, 6, 5], 1)?, leaf(&[5, 9], 2)?];
    compiled_agrees_with_eager(&f, &body, &inputs)?;
    let t = f.latest_training().expect("a compiled training graph");
    let plan = t.explain();
    assert!(plan.contains("tp::cat(["), "{plan}");
    assert!(!plan.contains("slice_backward"), "{plan}");
    Ok(())
}

/// A linear layer `x @ wᵀ`: the compiled backward computes the weight's gradient as the
/// product `dyᵀ @ x`, which writes it in row order, instead of transposing `xᵀ @ dy` (a view
/// every consumer would have to copy), and agrees with eager autograd.
#[test]
fn a_linear_weights_gradient_is_written_in_row_order() -> Result<()> {
    fn body(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        let y = xs[0].matmul(&xs[1].t()?)?;
        Ok(vec![y.tanh()?.sum(&[2], false)?])
    }
    let f = compile(body);
    let inputs = [leaf(&[4, 6, 5], 3)?, leaf(&[7, 5], 4)?];
    compiled_agrees_with_eager(&f, &body, &inputs)?;
    let out = f.call(&inputs)?;
    let loss = out[0].sum_all()?;
    let g = autograd::grad(&[loss], &inputs[1..], &[None], false)?;
    let gw = g[0].as_ref().expect("the weight's gradient");
    assert_eq!(gw.shape(), &[7, 5]);
    assert!(gw.is_contiguous(), "strides {:?}", gw.strides());
    Ok(())
}
