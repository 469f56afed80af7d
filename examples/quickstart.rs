//! The README's main job: a small MLP block built eagerly, with a custom op for the loss, run
//! forward and backward; then the same block compiled with `tensorplay::compiler::compile`,
//! checked against eager and timed. Prints what it did.

use std::time::Instant;

use tensorplay::library::custom_op;
use tensorplay::{DType, Result, Tensor};

/// One MLP block: `gelu(x @ w1 + b1) @ w2 + b2 + x` (a residual feed-forward layer).
fn mlp_block(x: &Tensor, w1: &Tensor, b1: &Tensor, w2: &Tensor, b2: &Tensor) -> Result<Tensor> {
    let h = x.matmul(w1)?.add(b1)?.gelu("tanh")?;
    h.matmul(w2)?.add(b2)?.add(x)
}

fn main() -> Result<()> {
    let (batch, dim, hidden) = (64, 128, 512);
    tensorplay::manual_seed(0);
    let x = Tensor::randn(&[batch, dim], DType::F32)?;
    let param = |shape: &[usize], scale: f64| -> Result<Tensor> {
        Tensor::randn(shape, DType::F32)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    };
    let w1 = param(&[dim, hidden], (1.0 / dim as f64).sqrt())?;
    let b1 = param(&[hidden], 0.0)?;
    let w2 = param(&[hidden, dim], (1.0 / hidden as f64).sqrt())?;
    let b2 = param(&[dim], 0.0)?;

    // The seed's custom op: a weighted sum, used here as a per-feature weighted loss.
    let weighted_sum = custom_op("quickstart::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    println!("registered custom op: {}", weighted_sum.schema());

    let feature_weights = Tensor::rand(&[dim], DType::F32)?.div_scalar(batch as f64)?;
    let start = Instant::now();
    let y = mlp_block(&x, &w1, &b1, &w2, &b2)?;
    let loss = weighted_sum.call1(&[y.mul(&y)?.into(), feature_weights.into()])?;
    let forward = start.elapsed();
    let start = Instant::now();
    loss.backward()?;
    let backward = start.elapsed();

    println!(
        "MLP block: x {:?} -> y {:?} (hidden {hidden}, gelu-tanh, residual)",
        x.shape(),
        y.shape()
    );
    println!("loss = {:.6}", loss.item::<f64>()?);
    for (name, p) in [("w1", &w1), ("b1", &b1), ("w2", &w2), ("b2", &b2)] {
        let g = p.grad().expect("every parameter gets a gradient");
        let norm = g.mul(&g)?.sum_all()?.item::<f64>()?.sqrt();
        println!("grad {name}: shape {:?}, L2 norm {norm:.6}", g.shape());
    }
    println!(
        "forward {:.2} ms, backward {:.2} ms (eager, {} threads)",
        forward.as_secs_f64() * 1e3,
        backward.as_secs_f64() * 1e3,
        tensorplay::parallel::num_threads()
    );

    // Compile the block (inference: parameters detached), check it against eager, time both.
    let compiled = tensorplay::compiler::compile(|xs: &[Tensor]| {
        Ok(vec![mlp_block(&xs[0], &xs[1], &xs[2], &xs[3], &xs[4])?])
    });
    let inputs: Vec<Tensor> = [&x, &w1, &b1, &w2, &b2]
        .iter()
        .map(|t| t.detach())
        .collect();
    let eager_out = mlp_block(&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4])?;
    let compiled_out = compiled.call(&inputs)?.remove(0);
    let max_diff = eager_out
        .sub(&compiled_out)?
        .abs()?
        .amax(&[], false)?
        .item::<f64>()?;
    println!(
        "\ncompiled plan:\n{}",
        compiled.latest().expect("compiled once").explain()
    );
    println!("compiled == eager: max |difference| = {max_diff:.2e}");
    if !compiled_out.allclose(&eager_out, 1e-4, 1e-5)? {
        return Err(tensorplay::Error::compile(
            tensorplay::CompileKind::Launch,
            format!("compiled output differs from eager (max |difference| {max_diff:e})"),
        ));
    }
    let iters = 50;
    let time = |f: &dyn Fn() -> Result<Tensor>| -> Result<f64> {
        f()?;
        let start = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    };
    let t_eager = time(&|| mlp_block(&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4]))?;
    let t_compiled = time(&|| Ok(compiled.call(&inputs)?.remove(0)))?;
    println!(
        "forward: eager {:.3} ms, compiled {:.3} ms per call ({:.2}x)",
        t_eager * 1e3,
        t_compiled * 1e3,
        t_eager / t_compiled
    );
    Ok(())
}
