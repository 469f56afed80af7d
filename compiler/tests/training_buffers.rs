//! Compiled training of functions that update buffers (inputs that do not require grad) in
//! place: the updates are functionalized, the call writes the new values back once, and the
//! graph still compiles; an in-place update that cannot be functionalized falls back to the
//! interpreter with a reason naming it.

use tensorplay_compiler::compile;
use tensorplay_runtime::autograd::{self, no_grad};
use tensorplay_runtime::nn;
use tensorplay_runtime::{DType, Result, Tensor};

/// `loss = sum(x * w + buf')` where `buf' = 0.9 * buf + 0.1 * x` (detached), updated in place
/// under `no_grad` before it is read.
fn step(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, w, buf) = (&xs[0], &xs[1], &xs[2]);
    {
        let _g = no_grad();
        buf.mul_scalar_(0.9)?;
        buf.add_(&x.detach().mul_scalar(0.1)?)?;
    }
    Ok(vec![x.mul(w)?.add(buf)?.sum_all()?])
}

fn inputs(seed: u64) -> Result<Vec<Tensor>> {
    Ok(vec![
        Tensor::randn_seeded(&[6], DType::F32, seed)?.requires_grad_(true)?,
        Tensor::randn_seeded(&[6], DType::F32, seed + 1)?.requires_grad_(true)?,
        Tensor::randn_seeded(&[6], DType::F32, seed + 2)?,
    ])
}

fn close(a: &Tensor, b: &Tensor) -> Result<bool> {
    let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
    Ok(a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + y.abs())))
}

#[test]
fn buffer_updates_compile_and_land_in_the_inputs_once_per_call() -> Result<()> {
    let f = compile(step);
    let (e, c) = (inputs(1)?, inputs(1)?);
    for call in 0..3 {
        let before = c[2].version();
        let le = step(&e)?.remove(0);
        let lc = f.call(&c)?.remove(0);
        assert!(close(&lc, &le)?, "call {call}: {lc:?} vs {le:?}");
        assert!(
            close(&c[2], &e[2])?,
            "call {call}: {:?} vs {:?}",
            c[2],
            e[2]
        );
        assert_eq!(c[2].version(), before + 1, "call {call}: one write-back");
        le.backward()?;
        lc.backward()?;
        for i in 0..2 {
            let (ge, gc) = (e[i].grad().unwrap(), c[i].grad().unwrap());
            assert!(close(&gc, &ge)?, "call {call}: gradient {i}");
        }
    }
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    assert_eq!(f.num_compiled(), 1);
    let t = f.latest_training().expect("a training graph");
    assert!(t.explain().contains("forward"));
    Ok(())
}

/// Gradients of `f(xs)[0]` for the first `n` inputs, with the output values.
fn value_and_grads(
    f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    xs: &[Tensor],
    n: usize,
) -> Result<(Tensor, Vec<Tensor>)> {
    let y = f(xs)?.remove(0);
    let g = autograd::grad(std::slice::from_ref(&y), &xs[..n], &[None], false)?;
    Ok((y, g.into_iter().map(|g| g.expect("a gradient")).collect()))
}

/// Updates the input that requires grad under `no_grad`, and multiplies by a detached copy of
/// `x`: the interpreter that replays it must build eager's backward edges — none for the
/// update, none through the detached handle.
fn updates_and_detaches(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    {
        let _g = no_grad();
        xs[1].add_scalar_(1.0)?;
    }
    let d = xs[0].detach().mul(&xs[0])?;
    Ok(vec![d.mul(&xs[1])?.sum_all()?])
}

#[test]
fn updating_an_input_that_requires_grad_is_refused_and_interpreted_like_eager() -> Result<()> {
    let f = compile(updates_and_detaches);
    let (e, c) = (inputs(10)?, inputs(10)?);
    let (ye, ge) = value_and_grads(&updates_and_detaches, &e[..2], 2)?;
    let (yc, gc) = value_and_grads(&|xs| f.call(xs), &c[..2], 2)?;
    assert!(close(&yc, &ye)?, "{yc:?} vs {ye:?}");
    for i in 0..2 {
        assert!(
            close(&gc[i], &ge[i])?,
            "gradient {i}: {:?} vs {:?}",
            gc[i],
            ge[i]
        );
    }
    assert!(close(&c[1], &e[1])?, "the update landed once");
    // The gradient of `x.detach() * x * w` is `x * w`, not `2 x * w`.
    assert!(close(&ge[0], &e[0].detach().mul(&e[1])?)?);
    let why = f.training_fallbacks();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("mutates input 1, which requires grad"),
        "{why:?}"
    );
    Ok(())
}

/// Batch norm in training mode, then an in-place update of an intermediate: compiled training
/// refuses the graph, and the interpreter replays batch norm's running-statistics update (a
/// `copy_` of a value computed from detached batch statistics under `no_grad`) like eager.
fn batch_norm_then_intermediate_update(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, rm, rv) = (&xs[0], &xs[1], &xs[2]);
    let y = nn::batch_norm(x, Some(rm), Some(rv), None, None, true, 0.1, 1e-5)?;
    let z = y.mul_scalar(2.0)?;
    {
        let _g = no_grad();
        z.add_scalar_(1.0)?;
    }
    Ok(vec![z.mul(&y)?.sum_all()?])
}

#[test]
fn the_interpreter_replays_batch_norm_training_like_eager() -> Result<()> {
    let make = || -> Result<Vec<Tensor>> {
        Ok(vec![
            Tensor::randn_seeded(&[4, 3], DType::F32, 40)?.requires_grad_(true)?,
            Tensor::zeros(&[3], DType::F32),
            Tensor::ones(&[3], DType::F32),
        ])
    };
    let (e, c) = (make()?, make()?);
    let f = compile(batch_norm_then_intermediate_update);
    for call in 0..2 {
        let (ye, ge) = value_and_grads(&batch_norm_then_intermediate_update, &e, 1)?;
        let (yc, gc) = value_and_grads(&|xs| f.call(xs), &c, 1)?;
        assert!(close(&yc, &ye)?, "call {call}: {yc:?} vs {ye:?}");
        assert!(close(&gc[0], &ge[0])?, "call {call}: gradient");
        assert!(
            close(&c[1], &e[1])? && close(&c[2], &e[2])?,
            "call {call}: running stats"
        );
    }
    let why = f.training_fallbacks();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("an intermediate value or a view"),
        "{why:?}"
    );
    Ok(())
}

#[test]
fn updating_a_buffer_the_backward_reads_is_refused() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        let y = xs[0].mul(&xs[2])?.sum_all()?;
        {
            let _g = no_grad();
            xs[2].add_scalar_(1.0)?;
        }
        Ok(vec![y])
    });
    let xs = inputs(20)?;
    let _ = f.call(&xs);
    let why = f.training_fallbacks();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("input 2 is updated in place and the backward reads it"),
        "{why:?}"
    );
    Ok(())
}

#[test]
fn updating_an_intermediate_in_place_is_still_refused() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        let y = xs[0].mul_scalar(2.0)?;
        {
            let _g = no_grad();
            y.add_scalar_(1.0)?;
        }
        Ok(vec![y.mul(&xs[1])?.sum_all()?])
    });
    let xs = inputs(30)?;
    let _ = f.call(&xs[..2]);
    let why = f.training_fallbacks();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].contains("an intermediate value or a view"),
        "{why:?}"
    );
    Ok(())
}
