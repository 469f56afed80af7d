//! Compiled training: a two-layer MLP fit to synthetic data, trained eagerly and compiled —
//! `compile(loss)` captures the forward and backward together (the loss's gradient history runs
//! a compiled backward) and `optim::Adam` updates every parameter with one fused kernel. Prints
//! the loss every few steps and the step times.
//!
//! `cargo run --release --example train_mlp` (`TP_NUM_THREADS=1` for single-thread numbers).

use std::time::{Duration, Instant};

use tensorplay::compiler::compile;
use tensorplay::compiler::optim::Adam;
use tensorplay::{DType, Result, Tensor};

/// Mean squared error of `gelu(x @ w1 + b1) @ w2 + b2` against `y`; inputs `x, y, w1, b1, w2, b2`.
fn loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y, w1, b1, w2, b2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let h = x.matmul(w1)?.add(b1)?.gelu("tanh")?;
    let d = h.matmul(w2)?.add(b2)?.sub(y)?;
    Ok(vec![d.mul(&d)?.mean_all()?])
}

fn params(dim: usize, hidden: usize, out: usize) -> Result<Vec<Tensor>> {
    let p = |shape: &[usize], scale: f64, seed: u64| -> Result<Tensor> {
        Tensor::randn_seeded(shape, DType::F32, seed)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    };
    Ok(vec![
        p(&[dim, hidden], (1.0 / dim as f64).sqrt(), 1)?,
        p(&[hidden], 0.0, 2)?,
        p(&[hidden, out], (1.0 / hidden as f64).sqrt(), 3)?,
        p(&[out], 0.0, 4)?,
    ])
}

/// Trains `steps` steps; returns the losses and the median step time (after a warm-up step).
fn train(
    compiled: bool,
    x: &Tensor,
    y: &Tensor,
    steps: usize,
    dims: (usize, usize, usize),
) -> Result<(Vec<f32>, Duration)> {
    let ps = params(dims.0, dims.1, dims.2)?;
    let mut opt = Adam::new(ps.clone(), 3e-3, (0.9, 0.999), 1e-8)?;
    let f = compile(loss);
    let mut losses = Vec::new();
    let mut times = Vec::new();
    for _ in 0..steps {
        let t0 = Instant::now();
        let mut ins = vec![x.clone(), y.clone()];
        ins.extend(ps.iter().cloned());
        let l = if compiled { f.call(&ins)? } else { loss(&ins)? }.swap_remove(0);
        l.backward()?;
        if compiled {
            opt.step()?;
        } else {
            opt.step_eager()?;
        }
        opt.zero_grad();
        times.push(t0.elapsed());
        losses.push(l.item::<f32>()?);
    }
    if compiled && let Some(t) = f.latest_training() {
        println!(
            "compiled: forward {} kernel(s), backward {} kernel(s), {} tensor(s) saved",
            t.forward().num_kernels(),
            t.backward().num_kernels(),
            t.num_saved()
        );
    }
    let mut warm = times[1..].to_vec();
    warm.sort();
    Ok((losses, warm[warm.len() / 2]))
}

fn main() -> Result<()> {
    let (batch, dim, hidden, out) = (64, 32, 256, 8);
    // Synthetic regression: y = tanh(x @ a) for a fixed random a.
    let x = Tensor::randn_seeded(&[batch, dim], DType::F32, 10)?;
    let a = Tensor::randn_seeded(&[dim, out], DType::F32, 11)?.mul_scalar(0.3)?;
    let y = x.matmul(&a)?.tanh()?;
    let steps = 60;
    let (eager, t_eager) = train(false, &x, &y, steps, (dim, hidden, out))?;
    let (comp, t_comp) = train(true, &x, &y, steps, (dim, hidden, out))?;
    for step in (0..steps).step_by(10).chain([steps - 1]) {
        println!(
            "step {step:>3}: loss eager {:.6}  compiled {:.6}",
            eager[step], comp[step]
        );
    }
    let worst = eager
        .iter()
        .zip(&comp)
        .map(|(e, c)| (e - c).abs() / (1.0 + e.abs()))
        .fold(0.0f32, f32::max);
    println!("largest relative loss difference eager vs compiled: {worst:.2e}");
    println!(
        "step time (forward + backward + Adam, batch {batch}, hidden {hidden}, {} threads): eager \
         {:.3} ms, compiled {:.3} ms ({:.2}x)",
        tensorplay::parallel::num_threads(),
        t_eager.as_secs_f64() * 1e3,
        t_comp.as_secs_f64() * 1e3,
        t_eager.as_secs_f64() / t_comp.as_secs_f64()
    );
    assert!(comp[steps - 1] < comp[0], "the loss goes down");
    Ok(())
}
