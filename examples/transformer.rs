//! A small decoder-only transformer (GPT-style) trained as a character-level language model on
//! a bundled text, eagerly and compiled: token + position embeddings, pre-norm blocks of causal
//! multi-head attention (`nn::scaled_dot_product_attention`) and a GELU MLP, `layer_norm`, and
//! `cross_entropy` over the next character. `compile(loss)` captures forward and backward
//! together; `optim::Adam` updates the parameters. Prints the loss every few steps and the step
//! times; the loss falls from ~ln(vocab) as the model learns the text.
//!
//! `cargo run --release --example transformer` (`STEPS=N` to change the number of steps;
//! `PROFILE=eager` or `PROFILE=compiled` to train one way only, e.g. under a profiler).

use std::time::{Duration, Instant};

use tensorplay::compiler::compile;
use tensorplay::compiler::optim::Adam;
use tensorplay::{Result, Tensor};

#[path = "common/gpt.rs"]
mod gpt;

use gpt::{Config, batch, loss, params, setup, steps_from_env};

/// Trains `steps` steps; returns the losses and the median step time (after a warm-up step).
fn train(compiled: bool, data: &[i64], c: Config, steps: usize) -> Result<(Vec<f32>, Duration)> {
    let ps = params(c)?;
    let mut opt = Adam::new(ps.clone(), 3e-3, (0.9, 0.99), 1e-8)?;
    let f = compile(move |xs: &[Tensor]| loss(xs, c));
    let (mut losses, mut times) = (Vec::new(), Vec::new());
    for step in 0..steps {
        let (ids, targets) = batch(data, step, 16, c.context)?;
        let t0 = Instant::now();
        let mut ins = vec![ids, targets];
        ins.extend(ps.iter().cloned());
        let l = if compiled {
            f.call(&ins)?
        } else {
            loss(&ins, c)?
        }
        .swap_remove(0);
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
            "compiled: forward {} kernel(s), backward {} kernel(s), {} tensor(s) saved, {} \
             fallback(s)",
            t.forward().num_kernels(),
            t.backward().num_kernels(),
            t.num_saved(),
            f.training_fallbacks().len()
        );
    }
    let mut warm = times[1..].to_vec();
    warm.sort();
    Ok((losses, warm[warm.len() / 2]))
}

fn main() -> Result<()> {
    let (data, c) = setup();
    let steps = steps_from_env(300);
    println!(
        "decoder-only transformer: vocab {}, context {}, dim {}, {} heads, {} layers; {steps} \
         steps of batch 16",
        c.vocab, c.context, c.dim, c.heads, c.layers
    );
    // `PROFILE=eager` or `PROFILE=compiled` trains only that way (for a profiler to attach).
    if let Ok(mode) = std::env::var("PROFILE") {
        let (_, t) = train(mode == "compiled", &data, c, steps)?;
        println!("{mode} step time: {:.3} ms", t.as_secs_f64() * 1e3);
        return Ok(());
    }
    let (eager, t_eager) = train(false, &data, c, steps)?;
    let (comp, t_comp) = train(true, &data, c, steps)?;
    for step in (0..steps).step_by((steps / 10).max(1)).chain([steps - 1]) {
        println!(
            "step {step:>4}: loss eager {:.4}  compiled {:.4}",
            eager[step], comp[step]
        );
    }
    println!(
        "step time (forward + backward + Adam, {} threads): eager {:.2} ms, compiled {:.2} ms \
         ({:.2}x)",
        tensorplay::parallel::num_threads(),
        t_eager.as_secs_f64() * 1e3,
        t_comp.as_secs_f64() * 1e3,
        t_eager.as_secs_f64() / t_comp.as_secs_f64()
    );
    let tail =
        |l: &[f32]| l[l.len() - l.len().min(10)..].iter().sum::<f32>() / l.len().min(10) as f32;
    assert!(tail(&eager) < 0.75 * eager[0], "eager loss goes down");
    assert!(tail(&comp) < 0.75 * comp[0], "compiled loss goes down");
    Ok(())
}
