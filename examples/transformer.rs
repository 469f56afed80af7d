//! A small decoder-only transformer (GPT-style) trained as a character-level language model on
//! a bundled text, eagerly and compiled. The model is a struct of `tensorplay::nn` modules with
//! `#[derive(Module)]` (`common/gpt.rs`): token and position `Embedding`s, pre-norm blocks of
//! causal multi-head attention (`nn::scaled_dot_product_attention`) and a GELU MLP, a final
//! `LayerNorm` and a `Linear` head, trained on the mean next-character `cross_entropy` with
//! `optim::Adam`. `compile` captures forward and backward together, with the parameters as
//! graph inputs (`functional_call`). Prints the loss every few steps and the step times; the
//! loss falls from ~ln(vocab) as the model learns the text.
//!
//! Halfway through, each run saves a checkpoint (the model's state dict and Adam's state, as
//! safetensors) to a temporary directory; a fresh model and optimizer then resume from it and
//! train the remaining steps, and their losses must equal the uninterrupted run's bit for bit.
//!
//! `cargo run --release --example transformer` (`STEPS=N` to change the number of steps;
//! `PROFILE=eager` or `PROFILE=compiled` to train one way only, without the checkpoint, e.g.
//! under a profiler). A progress bar shows while stdout is a terminal.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorplay::Result;

#[path = "common/gpt.rs"]
mod gpt;
#[path = "common/progress.rs"]
mod progress;

use gpt::{Config, Gpt, Trainer, batch, setup, steps_from_env};

/// The batch size of every step.
const BATCH: usize = 16;

/// Trains `t` on the sampler's steps `steps` (of `total`); after `save_at` steps, if given,
/// writes a checkpoint to `dir`. Returns the losses and the step times (forward, backward and
/// Adam; the checkpoint is not timed).
fn train_steps(
    t: &mut Trainer,
    data: &[i64],
    c: Config,
    steps: Range<usize>,
    total: usize,
    save: Option<(usize, &Path)>,
) -> Result<(Vec<f32>, Vec<Duration>)> {
    let label = if t.compiled().is_some() {
        "compiled"
    } else {
        "eager"
    };
    let bar = progress::bar(label, steps.start, total);
    let (mut losses, mut times) = (Vec::new(), Vec::new());
    for step in steps {
        if let Some((at, dir)) = save
            && step == at
        {
            t.save(dir)?;
        }
        let (ids, targets) = batch(data, step, BATCH, c.context)?;
        let t0 = Instant::now();
        let l = t.step(ids, targets)?;
        times.push(t0.elapsed());
        losses.push(l.item::<f32>()?);
        progress::step(&bar, losses[losses.len() - 1], times[times.len() - 1]);
    }
    bar.finish_and_clear();
    Ok((losses, times))
}

/// The median step time after the first (warm-up) step.
fn median_warm(times: &[Duration]) -> Duration {
    let mut warm = times[1..].to_vec();
    warm.sort();
    warm[warm.len() / 2]
}

/// Trains a fresh model `steps` steps, saving a checkpoint to `checkpoint` (when given) after
/// half of them; returns the losses and the median step time.
fn train(
    compiled: bool,
    data: &[i64],
    c: Config,
    steps: usize,
    checkpoint: Option<&Path>,
) -> Result<(Vec<f32>, Duration)> {
    let mut t = Trainer::new(Gpt::new(c, 0)?, compiled)?;
    let save = checkpoint.map(|dir| (steps / 2, dir));
    let (losses, times) = train_steps(&mut t, data, c, 0..steps, steps, save)?;
    if let Some(f) = t.compiled()
        && let Some(g) = f.latest_training()
    {
        println!(
            "compiled: forward {} kernel(s), backward {} kernel(s), {} tensor(s) saved, {} \
             fallback(s)",
            g.forward().num_kernels(),
            g.backward().num_kernels(),
            g.num_saved(),
            f.training_fallbacks().len()
        );
    }
    Ok((losses, median_warm(&times)))
}

/// A fresh model and optimizer (other initial weights) restored from the checkpoint in `dir`,
/// trained from step `from` to `steps`: their losses.
fn resume(
    compiled: bool,
    data: &[i64],
    c: Config,
    steps: usize,
    from: usize,
    dir: &Path,
) -> Result<Vec<f32>> {
    let mut t = Trainer::new(Gpt::new(c, 1000)?, compiled)?;
    t.load(dir)?;
    Ok(train_steps(&mut t, data, c, from..steps, steps, None)?.0)
}

/// Removes the checkpoint directory when dropped (also on an error).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn main() -> Result<()> {
    let (data, c) = setup();
    let steps = steps_from_env(300);
    println!(
        "decoder-only transformer: vocab {}, context {}, dim {}, {} heads, {} layers; {steps} \
         steps of batch {BATCH}",
        c.vocab, c.context, c.dim, c.heads, c.layers
    );
    // `PROFILE=eager` or `PROFILE=compiled` trains only that way (for a profiler to attach).
    if let Ok(mode) = std::env::var("PROFILE") {
        let (_, t) = train(mode == "compiled", &data, c, steps, None)?;
        println!("{mode} step time: {:.3} ms", t.as_secs_f64() * 1e3);
        return Ok(());
    }
    let dir = TempDir(
        std::env::temp_dir().join(format!("tensorplay-transformer-{}", std::process::id())),
    );
    let (eager_dir, comp_dir) = (dir.0.join("eager"), dir.0.join("compiled"));
    let (eager, t_eager) = train(false, &data, c, steps, Some(&eager_dir))?;
    let (comp, t_comp) = train(true, &data, c, steps, Some(&comp_dir))?;
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
    // Resume each run from its checkpoint: the same losses, bit for bit.
    let from = steps / 2;
    let resumed_eager = resume(false, &data, c, steps, from, &eager_dir)?;
    let resumed_comp = resume(true, &data, c, steps, from, &comp_dir)?;
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    let (eager_same, comp_same) = (
        same(&eager[from..], &resumed_eager),
        same(&comp[from..], &resumed_comp),
    );
    let verdict = |s: bool| if s { "identical" } else { "DIFFERENT" };
    println!(
        "checkpoint after step {from}, resumed by a fresh model and optimizer for {} steps: \
         losses eager {}, compiled {} (final {:.4} / {:.4})",
        steps - from,
        verdict(eager_same),
        verdict(comp_same),
        resumed_eager[resumed_eager.len() - 1],
        resumed_comp[resumed_comp.len() - 1]
    );
    let tail =
        |l: &[f32]| l[l.len() - l.len().min(10)..].iter().sum::<f32>() / l.len().min(10) as f32;
    assert!(tail(&eager) < 0.75 * eager[0], "eager loss goes down");
    assert!(tail(&comp) < 0.75 * comp[0], "compiled loss goes down");
    assert!(
        eager_same,
        "the resumed eager run repeats the uninterrupted one"
    );
    assert!(
        comp_same,
        "the resumed compiled run repeats the uninterrupted one"
    );
    Ok(())
}
