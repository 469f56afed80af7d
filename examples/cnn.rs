//! A small CNN trained on a synthetic image task that ships with the example (no download):
//! 16×16 grey images holding one of four shapes — a horizontal bar, a vertical bar, a diagonal
//! or a square ring — at a random place, under noise. The model is a struct of layers with
//! `#[derive(Module)]` (conv → group norm → ReLU → max pool, twice, then a global average pool
//! and a linear classifier), trained with Adam eagerly and through `compile` (the parameters and
//! buffers are graph inputs, via `functional_call_with_buffers`). Group norm rather than batch
//! norm: compiled training does not yet split a graph that updates a batch norm's running
//! statistics in place (see docs/guide/modules.md); eagerly `BatchNorm2d` trains as in PyTorch.
//! Prints loss, accuracy (on held-out images, in evaluation mode) and the median step time,
//! then saves the eager model as safetensors and loads it back.
//!
//! `cargo run --release --example cnn` (`STEPS=n` to change the 150 steps). A progress bar
//! shows while stdout is a terminal.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tensorplay::compiler::compile;
use tensorplay::compiler::optim::Adam;
use tensorplay::nn::{
    AdaptiveAvgPool2d, Conv2d, ConvOptions, Flatten, Forward, GroupNorm, Linear, MaxPool2d, Module,
    ReLU, functional_call_with_buffers,
};
use tensorplay::{DType, Result, Tensor, manual_seed, nn};

#[path = "common/progress.rs"]
mod progress;

const SIDE: usize = 16;
const CLASSES: usize = 4;
const BATCH: usize = 32;

/// conv(1→8) → gn → relu → pool → conv(8→16) → gn → relu → pool → gap → linear(16→4).
#[derive(Module)]
struct Cnn {
    conv1: Conv2d,
    gn1: GroupNorm,
    conv2: Conv2d,
    gn2: GroupNorm,
    relu: ReLU,
    pool: MaxPool2d,
    gap: AdaptiveAvgPool2d,
    flatten: Flatten,
    head: Linear,
}

impl Cnn {
    fn new(seed: u64) -> Result<Cnn> {
        manual_seed(seed);
        let same = || ConvOptions {
            padding: 1.into(),
            ..ConvOptions::default()
        };
        Ok(Cnn {
            conv1: Conv2d::new(1, 8, [3, 3], same())?,
            gn1: GroupNorm::new(4, 8)?,
            conv2: Conv2d::new(8, 16, [3, 3], same())?,
            gn2: GroupNorm::new(4, 16)?,
            relu: ReLU,
            pool: MaxPool2d::new(&[2]),
            gap: AdaptiveAvgPool2d::new(&[1, 1]),
            flatten: Flatten::new(),
            head: Linear::new(16, CLASSES, true)?,
        })
    }

    /// Class scores `[N, 4]` for images `[N, 1, 16, 16]`.
    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.pool.forward(
            &self
                .relu
                .forward(&self.gn1.forward(&self.conv1.forward(x)?)?)?,
        )?;
        let h = self.pool.forward(
            &self
                .relu
                .forward(&self.gn2.forward(&self.conv2.forward(&h)?)?)?,
        )?;
        self.head
            .forward(&self.flatten.forward(&self.gap.forward(&h)?)?)
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        nn::cross_entropy(&self.logits(x)?, y, -100, 0.0, nn::Reduction::Mean)
    }
}

/// A tiny deterministic generator (xorshift) for the data set.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn noise(&mut self) -> f32 {
        (self.next() % 1000) as f32 / 1000.0 - 0.5
    }
}

/// `n` images `[n, 1, 16, 16]` and their classes `[n]`, drawn from `seed`.
fn images(n: usize, seed: u64) -> Result<(Tensor, Tensor)> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut px, mut labels) = (Vec::with_capacity(n * SIDE * SIDE), Vec::with_capacity(n));
    for _ in 0..n {
        let class = rng.below(CLASSES);
        let mut img = [0.0f32; SIDE * SIDE];
        let (r, c) = (2 + rng.below(SIDE - 9), 2 + rng.below(SIDE - 9));
        for k in 0..6 {
            let cells: &[(usize, usize)] = match class {
                0 => &[(r + 3, c + k)],
                1 => &[(r + k, c + 3)],
                2 => &[(r + k, c + k)],
                _ => &[(r, c + k), (r + 5, c + k), (r + k, c), (r + k, c + 5)],
            };
            for &(i, j) in cells {
                img[i * SIDE + j] = 1.0;
            }
        }
        px.extend(img.iter().map(|&v| v + 0.3 * rng.noise()));
        labels.push(class as i64);
    }
    Ok((
        Tensor::from_vec(px, &[n, 1, SIDE, SIDE])?,
        Tensor::from_vec(labels, &[n])?,
    ))
}

/// The share of `x`'s images the model classifies right (evaluation mode).
fn accuracy(model: &mut Cnn, x: &Tensor, y: &Tensor) -> Result<f64> {
    model.eval();
    let pred = model.logits(x)?.argmax(Some(1), false)?;
    model.train();
    let right = pred.eq(y)?.to_dtype(DType::F32)?.sum_all()?.item::<f32>()?;
    Ok(right as f64 / y.numel() as f64)
}

/// Trains a fresh model `steps` steps; returns it, the losses and the median step time.
fn train(compiled: bool, steps: usize) -> Result<(Cnn, Vec<f32>, Duration)> {
    let model = Arc::new(Mutex::new(Cnn::new(0)?));
    let (params, buffers) = {
        let m = model.lock().expect("not poisoned");
        let buffers: Vec<Tensor> = m.named_buffers().into_iter().map(|(_, b)| b).collect();
        (m.parameters(), buffers)
    };
    let (np, nb) = (params.len(), buffers.len());
    let shared = model.clone();
    // The compiled loss takes the batch, the parameters and the buffers (none in this model) as
    // inputs: an optimizer step changes what it computes.
    let f = compile(move |xs: &[Tensor]| {
        let mut m = shared.lock().expect("not poisoned");
        let (ps, bs) = xs[2..].split_at(np);
        let loss = functional_call_with_buffers(&mut *m, ps, bs, |m| m.loss(&xs[0], &xs[1]))?;
        Ok(vec![loss])
    });
    let mut opt = Adam::new(params.clone(), 1e-2, (0.9, 0.999), 1e-8)?;
    let (mut losses, mut times) = (Vec::new(), Vec::new());
    let bar = progress::bar(if compiled { "compiled" } else { "eager" }, 0, steps);
    for step in 0..steps {
        let (x, y) = images(BATCH, step as u64)?;
        let t0 = Instant::now();
        let l = if compiled {
            let mut ins = vec![x, y];
            ins.extend(params.iter().cloned());
            ins.extend(buffers.iter().cloned());
            debug_assert_eq!(ins.len(), 2 + np + nb);
            f.call(&ins)?.swap_remove(0)
        } else {
            model.lock().expect("not poisoned").loss(&x, &y)?
        };
        l.backward()?;
        if compiled {
            opt.step()?;
        } else {
            opt.step_eager()?;
        }
        opt.zero_grad();
        times.push(t0.elapsed());
        losses.push(l.item::<f32>()?);
        progress::step(&bar, losses[step], times[step]);
        if step % 25 == 0 || step + 1 == steps {
            bar.suspend(|| {
                println!(
                    "{} step {step:>4}: loss {:.4}",
                    if compiled { "compiled" } else { "eager   " },
                    losses[step]
                )
            });
        }
    }
    bar.finish_and_clear();
    if compiled {
        println!(
            "compiled: {} graph(s), {} fallback(s)",
            f.num_compiled(),
            f.training_fallbacks().len()
        );
    }
    drop(f);
    let model = Arc::try_unwrap(model)
        .ok()
        .expect("the compiled function is gone")
        .into_inner()
        .expect("not poisoned");
    let mut warm = times[1..].to_vec();
    warm.sort();
    Ok((model, losses, warm[warm.len() / 2]))
}

fn main() -> Result<()> {
    let steps: usize = std::env::var("STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150)
        .max(2);
    let (test_x, test_y) = images(512, 1_000_000)?;
    let mut results = Vec::new();
    for compiled in [false, true] {
        let (mut model, losses, t) = train(compiled, steps)?;
        let acc = accuracy(&mut model, &test_x, &test_y)?;
        let name = if compiled { "compiled" } else { "eager" };
        println!(
            "{name}: final loss {:.4}, held-out accuracy {:.1} %, step {:.2} ms",
            losses[losses.len() - 1],
            acc * 100.0,
            t.as_secs_f64() * 1e3
        );
        results.push((model, losses, acc));
    }
    // Save the eager model and load the file into a fresh one: the same predictions.
    let path =
        std::env::temp_dir().join(format!("tensorplay-cnn-{}.safetensors", std::process::id()));
    let (trained, _, acc) = &mut results[0];
    trained.save_safetensors(&path)?;
    let mut restored = Cnn::new(7)?;
    restored.load_safetensors(&path, true)?;
    std::fs::remove_file(&path).ok();
    let restored_acc = accuracy(&mut restored, &test_x, &test_y)?;
    println!(
        "checkpoint: {} tensors saved and loaded; accuracy {:.1} % after loading",
        trained.state_dict().len(),
        restored_acc * 100.0
    );
    assert_eq!(
        restored_acc, *acc,
        "the loaded model predicts as the saved one"
    );
    for (_, losses, acc) in &results {
        let (head, tail) = (losses[0], losses[losses.len() - 1]);
        assert!(tail < head, "the loss goes down: {head} -> {tail}");
        if steps >= 100 {
            assert!(*acc > 0.6, "accuracy {acc}");
        }
    }
    Ok(())
}
