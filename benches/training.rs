//! Training-step benchmark: forward + backward + Adam update of a two-layer MLP
//! (`gelu(x @ w1 + b1) @ w2 + b2`, mean squared error), eager against compiled (compiled
//! forward + compiled backward + the fused optimizer), at two model sizes: hidden 128 and hidden
//! 512, batch 64, 128 features in and out.
//!
//! ```text
//! TP_NUM_THREADS=1 cargo bench --bench training
//! ```
//!
//! Before measuring, it prints per size the backward's kernel count against the number of ops
//! eager's backward dispatches (the nodes of the captured backward graph). Medians and ratios go
//! into docs/PERFORMANCE.md ("Compiled training").

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use tensorplay::compiler::optim::Adam;
use tensorplay::compiler::{CompiledFn, compile};
use tensorplay::ir::graph::NodeKind;
use tensorplay::{DType, Result, Tensor};

const BATCH: usize = 64;
const FEATURES: usize = 128;

fn loss(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y, w1, b1, w2, b2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let h = x.matmul(w1)?.add(b1)?.gelu("tanh")?;
    let d = h.matmul(w2)?.add(b2)?.sub(y)?;
    Ok(vec![d.mul(&d)?.mean_all()?])
}

struct Model {
    inputs: Vec<Tensor>,
    params: Vec<Tensor>,
    opt: Adam,
}

fn model(hidden: usize) -> Result<Model> {
    let p = |shape: &[usize], scale: f64, seed: u64| -> Result<Tensor> {
        Tensor::randn_seeded(shape, DType::F32, seed)?
            .mul_scalar(scale)?
            .requires_grad_(true)
    };
    let params = vec![
        p(&[FEATURES, hidden], (1.0 / FEATURES as f64).sqrt(), 1)?,
        p(&[hidden], 0.1, 2)?,
        p(&[hidden, FEATURES], (1.0 / hidden as f64).sqrt(), 3)?,
        p(&[FEATURES], 0.1, 4)?,
    ];
    let x = Tensor::randn_seeded(&[BATCH, FEATURES], DType::F32, 5)?;
    let y = Tensor::randn_seeded(&[BATCH, FEATURES], DType::F32, 6)?;
    let mut inputs = vec![x, y];
    inputs.extend(params.iter().cloned());
    let opt = Adam::new(params.clone(), 1e-4, (0.9, 0.999), 1e-8)?;
    Ok(Model {
        inputs,
        params,
        opt,
    })
}

fn step(m: &mut Model, f: Option<&CompiledFn>) -> Result<f32> {
    let l = match f {
        Some(f) => f.call(&m.inputs)?,
        None => loss(&m.inputs)?,
    }
    .swap_remove(0);
    l.backward()?;
    match f {
        Some(_) => m.opt.step()?,
        None => m.opt.step_eager()?,
    }
    m.opt.zero_grad();
    let _ = &m.params;
    l.item::<f32>()
}

fn report_kernels(hidden: usize, f: &CompiledFn) {
    let Some(t) = f.latest_training() else { return };
    let g = t.backward().graph();
    let ops = g
        .node_ids()
        .into_iter()
        .filter(|&n| g.node(n).is_some_and(|x| matches!(x.kind, NodeKind::Op(_))))
        .count();
    let barriers = t.backward().plan().node_steps.len();
    eprintln!(
        "training/hidden{hidden}: backward {} kernel(s) + {barriers} dispatcher step(s) (barriers \
         and views) for {ops} ops eager dispatches; forward {} kernel(s); {} saved",
        t.backward().num_kernels(),
        t.forward().num_kernels(),
        t.num_saved()
    );
}

fn bench(c: &mut Criterion) {
    let threads = tensorplay::parallel::num_threads();
    let mut group = c.benchmark_group("training_step");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for hidden in [128usize, 512] {
        let mut eager = model(hidden).expect("model");
        let mut compiled = model(hidden).expect("model");
        let f = compile(loss);
        step(&mut compiled, Some(&f)).expect("compiled step");
        report_kernels(hidden, &f);
        group.bench_function(
            BenchmarkId::new(format!("eager/{threads}T"), format!("hidden{hidden}")),
            |b| b.iter(|| black_box(step(&mut eager, None).expect("eager step"))),
        );
        group.bench_function(
            BenchmarkId::new(format!("compiled/{threads}T"), format!("hidden{hidden}")),
            |b| b.iter(|| black_box(step(&mut compiled, Some(&f)).expect("compiled step"))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
