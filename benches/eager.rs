//! Eager-mode benchmarks: per-op dispatch overhead on a 1-element tensor, and large elementwise and
//! reduction throughput next to plain-Rust bandwidth references measured in the same run.
//!
//! Run: `cargo bench --bench eager`. Ratios (eager / reference) go into docs/PERFORMANCE.md.
//! `eager_math_2^20` (the anchor workloads W1 and W2 as eager op chains, and single
//! transcendental ops, next to the compiled W1/W2 of the same run) is the one to run on one
//! thread: `TP_NUM_THREADS=1 cargo bench --bench eager -- eager_math`; `TP_BULK_ISA=avx2` runs
//! the AVX2 kernels on an AVX-512 host.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use tensorplay::compiler::codegen::cpu::math::bulk;
use tensorplay::compiler::compile;
use tensorplay::{DType, Result, Tensor};

#[path = "common/workloads.rs"]
mod workloads;
use workloads::{w1, w2};

const LARGE: usize = 1 << 24;

fn dispatch_overhead(c: &mut Criterion) {
    let a = Tensor::ones(&[1], DType::F32);
    let b = Tensor::ones(&[1], DType::F32);
    let mut g = c.benchmark_group("dispatch");
    g.bench_function("add_1elem", |bench| {
        bench.iter(|| black_box(a.add(&b).unwrap()))
    });
    g.bench_function("exp_1elem", |bench| {
        bench.iter(|| black_box(a.exp().unwrap()))
    });
    g.bench_function("sum_1elem", |bench| {
        bench.iter(|| black_box(a.sum_all().unwrap()))
    });
    g.bench_function("mul_scalar_1elem", |bench| {
        bench.iter(|| black_box(a.mul_scalar(2.0).unwrap()))
    });
    g.finish();
}

/// `dst[i] = a[i] + b[i]` over preallocated buffers, chunked across the given number of threads.
fn reference_add(dst: &mut [f32], a: &[f32], b: &[f32], threads: usize) {
    let chunk = dst.len().div_ceil(threads);
    dst.par_chunks_mut(chunk)
        .zip(a.par_chunks(chunk))
        .zip(b.par_chunks(chunk))
        .for_each(|((d, a), b)| {
            for ((d, a), b) in d.iter_mut().zip(a).zip(b) {
                *d = a + b;
            }
        });
}

fn reference_copy(dst: &mut [f32], src: &[f32], threads: usize) {
    let chunk = dst.len().div_ceil(threads);
    dst.par_chunks_mut(chunk)
        .zip(src.par_chunks(chunk))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

fn reference_sum(x: &[f32], threads: usize) -> f64 {
    let chunk = x.len().div_ceil(threads);
    x.par_chunks(chunk)
        .map(|c| {
            let mut lanes = [0f32; 16];
            for block in c.chunks_exact(16) {
                for (l, v) in lanes.iter_mut().zip(block) {
                    *l += v;
                }
            }
            lanes.iter().map(|&v| v as f64).sum::<f64>()
        })
        .sum()
}

fn throughput(c: &mut Criterion) {
    let threads = tensorplay::parallel::num_threads();
    let a = Tensor::rand_seeded(&[LARGE], DType::F32, 1).unwrap();
    let b = Tensor::rand_seeded(&[LARGE], DType::F32, 2).unwrap();
    let av = a.to_vec::<f32>().unwrap();
    let bv = b.to_vec::<f32>().unwrap();
    let mut dst = vec![0f32; LARGE];
    // The references run on a pool of the same size as TensorPlay's.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();

    let mut g = c.benchmark_group("elementwise_2^24");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((LARGE * 12) as u64));
    g.bench_function(BenchmarkId::new("eager_add", threads), |bench| {
        bench.iter(|| black_box(a.add(&b).unwrap()))
    });
    g.bench_function(BenchmarkId::new("eager_mul", threads), |bench| {
        bench.iter(|| black_box(a.mul(&b).unwrap()))
    });
    g.bench_function(
        BenchmarkId::new("reference_add_preallocated", threads),
        |bench| {
            bench.iter(|| pool.install(|| reference_add(black_box(&mut dst), &av, &bv, threads)))
        },
    );
    g.finish();

    let mut g = c.benchmark_group("copy_2^24");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((LARGE * 8) as u64));
    g.bench_function(BenchmarkId::new("reference_copy", threads), |bench| {
        bench.iter(|| pool.install(|| reference_copy(black_box(&mut dst), &av, threads)))
    });
    g.finish();

    // In-place ops write into their own input: the aliasing fast path of `kernels/raw.rs`.
    let mut g = c.benchmark_group("inplace_2^24");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((LARGE * 12) as u64));
    let acc = a.clone_tensor().unwrap();
    g.bench_function(BenchmarkId::new("eager_add_", threads), |bench| {
        bench.iter(|| black_box(acc.add_(&b).unwrap()))
    });
    g.finish();

    // What zero-filling `Tensor::empty` costs over an uninitialised buffer (both reuse the
    // caching allocator's buffer, so this is the memset alone).
    let mut g = c.benchmark_group("alloc_2^24");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((LARGE * 4) as u64));
    g.bench_function("empty_zeroed", |bench| {
        bench.iter(|| black_box(Tensor::empty(&[LARGE], DType::F32)))
    });
    g.bench_function("empty_uninit", |bench| {
        // SAFETY: the tensor is dropped unread.
        bench.iter(|| black_box(unsafe { Tensor::try_empty_uninit(&[LARGE], DType::F32) }))
    });
    g.finish();

    let mut g = c.benchmark_group("reduction_2^24");
    g.sample_size(20);
    g.throughput(Throughput::Bytes((LARGE * 4) as u64));
    g.bench_function(BenchmarkId::new("eager_sum", threads), |bench| {
        bench.iter(|| black_box(a.sum_all().unwrap()))
    });
    g.bench_function(BenchmarkId::new("reference_sum", threads), |bench| {
        bench.iter(|| black_box(pool.install(|| reference_sum(&av, threads))))
    });
    g.finish();
}

/// Eager transcendental math at 2^20 f32 (L2/L3-resident): the anchor workloads W1 and W2 as
/// eager op chains (bytes as the anchors count them: 8N and 12N) next to their compiled forms,
/// and single ops (8N bytes).
fn eager_math(c: &mut Criterion) {
    const N: usize = 1 << 20;
    let threads = tensorplay::parallel::num_threads();
    println!(
        "eager math bench: eager kernels at {:?}, TP_BULK_ISA cap {:?}, {threads} thread(s)",
        bulk::eager_level(),
        bulk::level_cap()
    );
    let x = Tensor::randn_seeded(&[N], DType::F32, 1).unwrap();
    let b = Tensor::randn_seeded(&[N], DType::F32, 2).unwrap();
    let mut g = c.benchmark_group("eager_math_2^20");
    g.sample_size(30);
    type Workload = fn(&[Tensor]) -> Result<Vec<Tensor>>;
    let workloads: [(&str, Workload, Vec<Tensor>, u64); 2] = [
        ("W1_gelu_tanh", w1, vec![x.clone()], 8),
        ("W2_silu_mul", w2, vec![x.clone(), b.clone()], 12),
    ];
    for (name, f, inputs, bytes) in workloads {
        g.throughput(Throughput::Bytes(bytes * N as u64));
        g.bench_function(
            BenchmarkId::new(format!("eager_{name}"), threads),
            |bench| bench.iter(|| black_box(f(&inputs).unwrap())),
        );
        let compiled = compile(f);
        compiled.call(&inputs).unwrap();
        g.bench_function(
            BenchmarkId::new(format!("compiled_{name}"), threads),
            |bench| bench.iter(|| black_box(compiled.call(&inputs).unwrap())),
        );
    }
    g.throughput(Throughput::Bytes(8 * N as u64));
    type Op = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 5] = [
        ("exp", Tensor::exp),
        ("tanh", Tensor::tanh),
        ("sigmoid", Tensor::sigmoid),
        ("gelu_tanh", |t| t.gelu("tanh")),
        ("pow_3", |t| t.pow_scalar(3.0)),
    ];
    for (name, op) in ops {
        g.bench_function(
            BenchmarkId::new(format!("eager_{name}"), threads),
            |bench| bench.iter(|| black_box(op(&x).unwrap())),
        );
    }
    g.finish();
}

criterion_group!(benches, dispatch_overhead, throughput, eager_math);
criterion_main!(benches);
