//! The README's main job: a small MLP block built eagerly, with a custom op for the loss, run
//! forward and backward, printing what it did.

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
        Tensor::randn(shape, DType::F32)?.mul_scalar(scale)?.requires_grad_(true)
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

    println!("MLP block: x {:?} -> y {:?} (hidden {hidden}, gelu-tanh, residual)", x.shape(), y.shape());
    println!("loss = {:.6}", loss.item::<f64>()?);
    for (name, p) in [("w1", &w1), ("b1", &b1), ("w2", &w2), ("b2", &b2)] {
        let g = p.grad().expect("every parameter gets a gradient");
        let norm = g.mul(&g)?.sum_all()?.item::<f64>()?.sqrt();
        println!("grad {name}: shape {:?}, L2 norm {norm:.6}", g.shape());
    }
    println!("forward {:.2} ms, backward {:.2} ms (eager, {} threads)", forward.as_secs_f64() * 1e3, backward.as_secs_f64() * 1e3, tensorplay::parallel::num_threads());
    Ok(())
}
