//! Compiler benchmarks: the anchor workloads W1–W6 (float32, see `shared/anchors/cpu-anchors.md`)
//! at N = 2^16, 2^20 and 2^24, each three ways, side by side in one run:
//!
//! - `eager`: TensorPlay eager ops, one dispatcher call (and one fresh output) per op;
//! - `compiled`: `compile(..)` of the same closure, warmed up once, then `call` per iteration
//!   (inputs preallocated, outputs fresh per call, as the executor makes them);
//! - `hand_fused`: a hand-written fused Rust loop into a preallocated output — the anchors' "C
//!   loop" analogue: plain Rust, compiled for AVX-512 (else AVX2 + FMA) when the CPU has it (the
//!   anchors' C was `-march=native`), reductions with several accumulators, a vectorizable `exp`
//!   for the transcendental workloads, split across a rayon pool of TensorPlay's thread count;
//! - `hand_fused_4lane`: the same loop built for the baseline target (SSE2, 4 f32 lanes, no FMA),
//!   i.e. at the vector width Cranelift emits — it separates vector width from code quality.
//!
//! Also: plain-store copy and triad bandwidth at 2^24 (the physical limit), the compile latency
//! of single fused kernels (optimised, and the first tier a compiled graph waits for) and of a
//! 20-node elementwise graph, and the per-call overhead of a
//! compiled graph on 16 elements, and (`constants_as_args`) W1's and W3's kernels with their
//! scalar constants as kernel arguments (what the compiler emits) against the same kernels with
//! the constants inlined as immediates, and (`mlp_layer`) `gelu(x @ w + b)` at three sizes,
//! eager against compiled (the product and its bias/activation region fused as a matmul
//! epilogue; `TP_MATMUL_EPILOGUE=0` runs them as two steps, for the A/B).
//!
//! Throughput is the anchors' "min bytes moved" per element. Every benchmark id carries the
//! thread count (`/1T`, `/2T`): TensorPlay's pool size is read once from `TP_NUM_THREADS`, so run
//! the bench once per thread count:
//!
//! ```text
//! TP_NUM_THREADS=1 cargo bench --bench fusion
//! TP_NUM_THREADS=2 cargo bench --bench fusion
//! ```
//!
//! Medians and ratios go into docs/PERFORMANCE.md ("Compiler").

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use rayon::prelude::*;
use tensorplay::compiler::capture::{CaptureOptions, capture};
use tensorplay::compiler::codegen::kernel::{Inst, KernelSpec, Lit, lower};
use tensorplay::compiler::codegen::{cache, cpu};
use tensorplay::compiler::{compile, tp_compile};
use tensorplay::ir::{Device, TensorMeta};
use tensorplay::{DType, Result, Tensor};

#[path = "common/workloads.rs"]
mod workloads;
use workloads::{w1, w2, w3, w4, w5, w6};

/// Columns of the 2-d workloads (W3, W5).
const COLS: usize = 1024;
/// log2 of the sizes every workload runs at.
const SIZES: [u32; 3] = [16, 20, 24];

// ---------------------------------------------------------------------------------------------
// The hand-fused loops.

/// Defines each loop twice: `$base` for the baseline x86-64 target (SSE2: 4 f32 lanes, no FMA —
/// the vector width Cranelift emits), and `$name`, which runs the same body compiled for the widest
/// vectors the CPU has — AVX-512 (16 lanes) or AVX2 + FMA (8 lanes): the Rust counterpart of the
/// anchors' `-march=native` C loop.
macro_rules! multiversion {
    ($($(#[doc = $doc:literal])* fn $name:ident / $base:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block)*) => {$(
        $(#[doc = $doc])*
        /// (Baseline target.)
        #[inline(always)]
        fn $base($($arg: $ty),*) $(-> $ret)? $body

        $(#[doc = $doc])*
        /// (Widest vectors the CPU supports.)
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? { $base($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { $base($($arg),*) }
                if std::is_x86_feature_detected!("avx512f") && wide_avx512() {
                    // SAFETY: the CPU has the features `avx512` was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU has the features `avx2` was compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $base($($arg),*)
        }
    )*};
}

/// Whether the hand loops may use AVX-512: not under `TP_BULK_ISA=avx2`, the switch that caps the
/// compiler's bulk kernels at AVX2 (so one AVX-512 host measures both paths against matching loops).
fn wide_avx512() -> bool {
    cpu::math::bulk::level_cap() == cpu::math::bulk::Level::Avx512
}

/// `e^x` for f32 with branch-free, vectorizable code (range reduction to `r` in ±ln2/2, a
/// degree-6 Taylor polynomial, the exponent built from bits): ~1 ulp on `[-87, 88]`.
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let x = x.clamp(-87.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let k = t - MAGIC;
    let ki = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let r = x - k * 0.693_145_75 - k * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    f32::from_bits(((ki + 127) << 23) as u32) * p
}

/// `tanh(y) = 1 - 2/(e^{2y}+1)` (absolute error ~1e-7).
#[inline(always)]
fn tanh_approx(y: f32) -> f32 {
    1.0 - 2.0 / (exp_approx(2.0 * y) + 1.0)
}

multiversion! {
    /// W1 on a chunk.
    fn hand_w1 / hand_w1_4lane(d: &mut [f32], x: &[f32]) {
        for (d, &x) in d.iter_mut().zip(x) {
            *d = 0.5 * x * (1.0 + tanh_approx(0.797_884_6 * (x + 0.044715 * x * x * x)));
        }
    }
    /// W2 on a chunk.
    fn hand_w2 / hand_w2_4lane(d: &mut [f32], a: &[f32], b: &[f32]) {
        for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
            *d = a / (1.0 + exp_approx(-a)) * b;
        }
    }
    /// W3 on whole rows.
    fn hand_w3 / hand_w3_4lane(d: &mut [f32], x: &[f32], bias: &[f32], r: &[f32]) {
        for ((d, x), r) in d.chunks_exact_mut(COLS).zip(x.chunks_exact(COLS)).zip(r.chunks_exact(COLS)) {
            for (((d, &x), &b), &r) in d.iter_mut().zip(x).zip(bias).zip(r) {
                let s = x + b;
                *d = if s > 0.0 { s } else { 0.0 } + r;
            }
        }
    }
    /// W4 partial sum of a chunk (32 accumulators).
    fn hand_w4 / hand_w4_4lane(x: &[f32], w: &[f32]) -> f32 {
        let mut acc = [0f32; 32];
        let (xc, wc) = (x.chunks_exact(32), w.chunks_exact(32));
        let tail: f32 = xc.remainder().iter().zip(wc.remainder()).map(|(a, b)| a * b).sum();
        for (xb, wb) in xc.zip(wc) {
            for ((a, &x), &w) in acc.iter_mut().zip(xb).zip(wb) {
                *a += x * w;
            }
        }
        acc.iter().sum::<f32>() + tail
    }
    /// W5 on whole rows: max, `e^(x-max)` stored and summed, scale by `1/sum`.
    fn hand_w5 / hand_w5_4lane(d: &mut [f32], x: &[f32]) {
        for (d, row) in d.chunks_exact_mut(COLS).zip(x.chunks_exact(COLS)) {
            let mut m = [f32::NEG_INFINITY; 16];
            for blk in row.chunks_exact(16) {
                for (m, &v) in m.iter_mut().zip(blk) {
                    *m = if v > *m { v } else { *m };
                }
            }
            let mx = m.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let mut s = [0f32; 16];
            for (db, xb) in d.chunks_exact_mut(16).zip(row.chunks_exact(16)) {
                for ((d, &x), s) in db.iter_mut().zip(xb).zip(s.iter_mut()) {
                    let e = exp_approx(x - mx);
                    *d = e;
                    *s += e;
                }
            }
            let inv = 1.0 / s.iter().sum::<f32>();
            for v in d {
                *v *= inv;
            }
        }
    }
    /// W6 on a chunk.
    fn hand_w6 / hand_w6_4lane(d: &mut [f32], x: &[f32]) {
        for (d, &x) in d.iter_mut().zip(x) {
            *d = ((((x * 1.1 + 0.3) * x - 0.7) / (x * x + 1.0)) + x).abs().sqrt();
        }
    }
    /// Copy with plain stores (`+ 0.0` keeps LLVM from turning the loop into `memcpy`, whose
    /// non-temporal stores would measure something else).
    fn hand_copy / hand_copy_4lane(d: &mut [f32], s: &[f32]) {
        for (d, &s) in d.iter_mut().zip(s) {
            *d = s + 0.0;
        }
    }
    /// STREAM triad `a = b + 3c`.
    fn hand_triad / hand_triad_4lane(d: &mut [f32], b: &[f32], c: &[f32]) {
        for ((d, &b), &c) in d.iter_mut().zip(b).zip(c) {
            *d = b + 3.0 * c;
        }
    }
}

/// W3's loop: `(out, x, bias, r)`.
type W3Fn = fn(&mut [f32], &[f32], &[f32], &[f32]);

/// Runs a hand loop over the data, split into one chunk per thread (chunks a multiple of `align`
/// elements), on `pool`; one thread calls it directly.
struct Hand {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl Hand {
    fn chunk(&self, n: usize, align: usize) -> usize {
        n.div_ceil(self.threads).next_multiple_of(align)
    }

    fn map1(&self, d: &mut [f32], x: &[f32], align: usize, f: fn(&mut [f32], &[f32])) {
        if self.threads == 1 {
            return f(d, x);
        }
        let c = self.chunk(d.len(), align);
        self.pool.install(|| {
            d.par_chunks_mut(c)
                .zip(x.par_chunks(c))
                .for_each(|(d, x)| f(d, x))
        });
    }

    fn map2(&self, d: &mut [f32], a: &[f32], b: &[f32], f: fn(&mut [f32], &[f32], &[f32])) {
        if self.threads == 1 {
            return f(d, a, b);
        }
        let c = self.chunk(d.len(), 1);
        self.pool.install(|| {
            d.par_chunks_mut(c)
                .zip(a.par_chunks(c))
                .zip(b.par_chunks(c))
                .for_each(|((d, a), b)| f(d, a, b))
        });
    }

    fn w3(&self, d: &mut [f32], x: &[f32], bias: &[f32], r: &[f32], f: W3Fn) {
        if self.threads == 1 {
            return f(d, x, bias, r);
        }
        let c = self.chunk(d.len(), COLS);
        self.pool.install(|| {
            d.par_chunks_mut(c)
                .zip(x.par_chunks(c))
                .zip(r.par_chunks(c))
                .for_each(|((d, x), r)| f(d, x, bias, r))
        });
    }

    fn w4(&self, x: &[f32], w: &[f32], f: fn(&[f32], &[f32]) -> f32) -> f32 {
        if self.threads == 1 {
            return f(x, w);
        }
        let c = self.chunk(x.len(), 1);
        self.pool.install(|| {
            x.par_chunks(c)
                .zip(w.par_chunks(c))
                .map(|(x, w)| f(x, w))
                .sum()
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The benchmarks.

fn threads_id() -> String {
    format!("{}T", tensorplay::parallel::num_threads())
}

fn hand_pool() -> Hand {
    let threads = tensorplay::parallel::num_threads();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool");
    Hand { pool, threads }
}

fn vec_of(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().expect("f32 data")
}

/// Fails the run when a hand loop or the compiled graph disagrees with eager (a benchmark of
/// wrong code measures nothing).
fn check(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0f32, f32::max);
    assert!(
        worst <= tol,
        "{what}: max relative error {worst:e} > {tol:e}"
    );
}

fn configure(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, log: u32) {
    if log >= 24 {
        g.sample_size(10).sampling_mode(SamplingMode::Flat);
        g.warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(1500));
    } else {
        g.sample_size(20);
        g.warm_up_time(Duration::from_millis(150))
            .measurement_time(Duration::from_millis(600));
    }
}

type Workload = fn(&[Tensor]) -> Result<Vec<Tensor>>;

fn workloads(c: &mut Criterion) {
    let hand = hand_pool();
    let tid = threads_id();
    let hand_isa = if !cfg!(target_arch = "x86_64") {
        "baseline"
    } else if std::is_x86_feature_detected!("avx512f") && wide_avx512() {
        "avx512"
    } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        "avx2"
    } else {
        "baseline"
    };
    eprintln!(
        "fusion bench: bulk kernels {:?} (TP_BULK_ISA caps, TP_BULK_MATH=0 disables), hand loops {hand_isa}",
        cpu::math::bulk::level()
    );
    let list: [(&str, Workload, u64); 6] = [
        ("W1_gelu_tanh", w1, 8),
        ("W2_silu_mul", w2, 12),
        ("W3_bias_relu_add", w3, 12),
        ("W4_weighted_sum", w4, 8),
        ("W5_softmax", w5, 8),
        ("W6_chain10", w6, 8),
    ];
    for log in SIZES {
        let n = 1usize << log;
        for (wi, &(name, f, bytes)) in list.iter().enumerate() {
            let inputs: Vec<Tensor> = match wi {
                0 | 5 => vec![Tensor::randn_seeded(&[n], DType::F32, 1).unwrap()],
                1 => vec![
                    Tensor::randn_seeded(&[n], DType::F32, 1).unwrap(),
                    Tensor::randn_seeded(&[n], DType::F32, 2).unwrap(),
                ],
                2 => vec![
                    Tensor::randn_seeded(&[n / COLS, COLS], DType::F32, 1).unwrap(),
                    Tensor::randn_seeded(&[COLS], DType::F32, 2).unwrap(),
                    Tensor::randn_seeded(&[n / COLS, COLS], DType::F32, 3).unwrap(),
                ],
                3 => vec![
                    Tensor::rand_seeded(&[n], DType::F32, 1).unwrap(),
                    Tensor::rand_seeded(&[n], DType::F32, 2).unwrap(),
                ],
                _ => vec![Tensor::randn_seeded(&[n / COLS, COLS], DType::F32, 1).unwrap()],
            };
            let data: Vec<Vec<f32>> = inputs.iter().map(vec_of).collect();
            let mut dst = vec![0f32; n];
            let compiled = compile(f);

            // Warm up (capture + compile) and check all three agree.
            let want = vec_of(&f(&inputs).unwrap()[0]);
            let got = vec_of(&compiled.call(&inputs).unwrap()[0]);
            // `wide`: the AVX2 build of the loop; otherwise the 4-lane baseline build.
            let run_hand = |dst: &mut Vec<f32>, wide: bool| -> f32 {
                let d = &data;
                match (wi, wide) {
                    (0, true) => hand.map1(dst, &d[0], 1, hand_w1),
                    (0, false) => hand.map1(dst, &d[0], 1, hand_w1_4lane),
                    (1, true) => hand.map2(dst, &d[0], &d[1], hand_w2),
                    (1, false) => hand.map2(dst, &d[0], &d[1], hand_w2_4lane),
                    (2, true) => hand.w3(dst, &d[0], &d[1], &d[2], hand_w3),
                    (2, false) => hand.w3(dst, &d[0], &d[1], &d[2], hand_w3_4lane),
                    (3, true) => return hand.w4(&d[0], &d[1], hand_w4),
                    (3, false) => return hand.w4(&d[0], &d[1], hand_w4_4lane),
                    (4, true) => hand.map1(dst, &d[0], COLS, hand_w5),
                    (4, false) => hand.map1(dst, &d[0], COLS, hand_w5_4lane),
                    (_, true) => hand.map1(dst, &d[0], 1, hand_w6),
                    (_, false) => hand.map1(dst, &d[0], 1, hand_w6_4lane),
                }
                0.0
            };
            // Sums may reassociate: a tolerance that grows with the length.
            let tol = if wi == 3 {
                1e-6 * (n as f32).sqrt()
            } else {
                1e-5
            };
            check(&format!("{name} compiled"), &got, &want, tol);
            for wide in [true, false] {
                let sum = run_hand(&mut dst, wide);
                let hand_out = if wi == 3 { vec![sum] } else { dst.clone() };
                check(
                    &format!("{name} hand (wide: {wide})"),
                    &hand_out,
                    &want,
                    tol,
                );
            }

            let mut g = c.benchmark_group(format!("{name}_2^{log}"));
            configure(&mut g, log);
            g.throughput(Throughput::Bytes(bytes * n as u64));
            g.bench_function(BenchmarkId::new("eager", &tid), |b| {
                b.iter(|| black_box(f(&inputs).unwrap()))
            });
            g.bench_function(BenchmarkId::new("compiled", &tid), |b| {
                b.iter(|| black_box(compiled.call(&inputs).unwrap()))
            });
            g.bench_function(BenchmarkId::new("hand_fused", &tid), |b| {
                b.iter(|| black_box(run_hand(&mut dst, true)))
            });
            g.bench_function(BenchmarkId::new("hand_fused_4lane", &tid), |b| {
                b.iter(|| black_box(run_hand(&mut dst, false)))
            });
            g.finish();
            assert_eq!(compiled.num_compiled(), 1, "{name}: the bench recompiled");
        }
    }

    // The physical limit: plain-store copy and triad at 2^24.
    let n = 1usize << 24;
    let b = vec_of(&Tensor::rand_seeded(&[n], DType::F32, 1).unwrap());
    let cc = vec_of(&Tensor::rand_seeded(&[n], DType::F32, 2).unwrap());
    let mut dst = vec![0f32; n];
    let mut g = c.benchmark_group("bandwidth_2^24");
    configure(&mut g, 24);
    g.throughput(Throughput::Bytes(8 * n as u64));
    g.bench_function(BenchmarkId::new("copy", &tid), |bench| {
        bench.iter(|| hand.map1(black_box(&mut dst), &b, 1, hand_copy))
    });
    g.throughput(Throughput::Bytes(12 * n as u64));
    g.bench_function(BenchmarkId::new("triad", &tid), |bench| {
        bench.iter(|| hand.map2(black_box(&mut dst), &b, &cc, hand_triad))
    });
    g.finish();
}

/// A 20-op elementwise graph over two inputs (transcendentals included).
fn graph20(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y) = (&xs[0], &xs[1]);
    let a = x.mul(y)?.add_scalar(0.5)?.tanh()?; // 3
    let b = y.sub(x)?.abs()?.sqrt()?.mul_scalar(2.0)?; // 4
    let c = a.add(&b)?.exp()?.neg()?.sigmoid()?; // 4
    let d = c.mul(x)?.sub_scalar(0.25)?.relu()?.add(y)?; // 4
    let e = d.div(&b.add_scalar(1.0)?)?.square()?.mul(&a)?.add(x)?; // 5
    Ok(vec![e])
}

fn compile_latency(c: &mut Criterion) {
    let tid = threads_id();
    let mut g = c.benchmark_group("compile_latency");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));

    // One fused kernel: code generation (assembled, or Cranelift IR construction, compilation
    // and JIT linking), no cache.
    /// (name, workload, input shape, inputs of that shape, output shape)
    type Kernel = (&'static str, Workload, Vec<usize>, usize, Vec<usize>);
    let kernels: [Kernel; 4] = [
        ("kernel_W1_gelu_tanh", w1, vec![4096], 1, vec![4096]),
        ("kernel_W4_weighted_sum", w4, vec![4096], 2, vec![]),
        ("kernel_W5_softmax", w5, vec![4, COLS], 1, vec![4, COLS]),
        ("kernel_W6_chain10", w6, vec![4096], 1, vec![4096]),
    ];
    for (name, f, shape, nin, out_shape) in kernels {
        let metas = vec![TensorMeta::new(&shape, DType::F32, Device::Cpu); nin];
        let graph = capture(f, &metas, CaptureOptions { dynamic: true }).unwrap();
        let compiled = tp_compile(&graph).unwrap();
        assert_eq!(compiled.num_kernels(), 1, "{name}: one region");
        let lowered = lower(compiled.graph(), &compiled.plan().regions[0]).unwrap();
        let xs: Vec<Tensor> = (0..nin as u64)
            .map(|k| Tensor::randn_seeded(&shape, DType::F32, 1 + k).unwrap())
            .collect();
        let inputs: Vec<&Tensor> = xs.iter().collect();
        let out = Tensor::zeros(&out_shape, DType::F32);
        let layout = cpu::plan(&lowered.spec, &inputs, &[&out], Some(&shape))
            .unwrap()
            .layout()
            .clone();
        g.bench_function(BenchmarkId::new(name, &tid), |b| {
            b.iter(|| black_box(cpu::compile(&lowered.spec, &layout).unwrap()))
        });
        // What a compiled graph waits for: the first tier (the same for assembled kernels).
        g.bench_function(BenchmarkId::new(format!("{name}_first_tier"), &tid), |b| {
            b.iter(|| black_box(cpu::compile_tiered(&lowered.spec, &layout).unwrap()))
        });
    }

    // A 20-node elementwise graph from scratch: capture, passes, kernel compile, first run.
    let metas = [
        TensorMeta::new(&[1024], DType::F32, Device::Cpu),
        TensorMeta::new(&[1024], DType::F32, Device::Cpu),
    ];
    let xs = [
        Tensor::randn_seeded(&[1024], DType::F32, 1).unwrap(),
        Tensor::rand_seeded(&[1024], DType::F32, 2).unwrap(),
    ];
    let graph = capture(graph20, &metas, CaptureOptions { dynamic: true }).unwrap();
    let ops = graph
        .to_string()
        .lines()
        .filter(|l| l.contains("tp::"))
        .count();
    assert!(ops >= 20, "graph20 has {ops} op nodes");
    let run_once = || {
        let graph = capture(graph20, &metas, CaptureOptions { dynamic: true }).unwrap();
        let compiled = tp_compile(&graph).unwrap();
        black_box(compiled.run(&xs).unwrap())
    };
    g.bench_function(BenchmarkId::new("graph20_cold", &tid), |b| {
        b.iter_batched(cache::clear, |()| run_once(), BatchSize::PerIteration)
    });
    // The same with the kernel cached: capture + passes + shape inference + first run only.
    run_once();
    g.bench_function(BenchmarkId::new("graph20_kernel_cached", &tid), |b| {
        b.iter(run_once)
    });
    g.finish();
}

fn call_overhead(c: &mut Criterion) {
    let tid = threads_id();
    let x = Tensor::randn_seeded(&[16], DType::F32, 1).unwrap();
    let y = Tensor::randn_seeded(&[16], DType::F32, 2).unwrap();
    let xs = [x.clone()];
    let xy = [x.clone(), y.clone()];
    let add = compile(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?]));
    let chain = compile(w6);
    add.call(&xy).unwrap();
    chain.call(&xs).unwrap();
    let chain_graph = chain.latest().unwrap();

    let mut g = c.benchmark_group("call_overhead_16");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    g.bench_function(BenchmarkId::new("compiled_add", &tid), |b| {
        b.iter(|| black_box(add.call(&xy).unwrap()))
    });
    g.bench_function(BenchmarkId::new("compiled_W6_chain10", &tid), |b| {
        b.iter(|| black_box(chain.call(&xs).unwrap()))
    });
    g.bench_function(BenchmarkId::new("graph_run_W6_chain10", &tid), |b| {
        b.iter(|| black_box(chain_graph.run(&xs).unwrap()))
    });
    g.bench_function(BenchmarkId::new("eager_add", &tid), |b| {
        b.iter(|| black_box(x.add(&y).unwrap()))
    });
    g.bench_function(BenchmarkId::new("eager_W6_chain10", &tid), |b| {
        b.iter(|| black_box(w6(&xs).unwrap()))
    });
    g.finish();
}

/// An MLP layer, `gelu(x @ w + b)`: the product and its epilogue.
fn mlp_layer(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].matmul(&xs[1])?.add(&xs[2])?.gelu("tanh")?])
}

fn mlp_layers(c: &mut Criterion) {
    let tid = threads_id();
    // (rows, in, out): the quickstart's first layer; a batch of 1024; a wide output in DRAM.
    for (m, k, n) in [(64, 128, 512), (1024, 128, 512), (2048, 64, 4096)] {
        let xs = [
            Tensor::randn_seeded(&[m, k], DType::F32, 1).unwrap(),
            Tensor::randn_seeded(&[k, n], DType::F32, 2)
                .unwrap()
                .mul_scalar(0.1)
                .unwrap(),
            Tensor::randn_seeded(&[n], DType::F32, 3).unwrap(),
        ];
        let compiled = compile(mlp_layer);
        let want = vec_of(&mlp_layer(&xs).unwrap()[0]);
        check(
            "mlp layer",
            &vec_of(&compiled.call(&xs).unwrap()[0]),
            &want,
            1e-4,
        );
        let mut g = c.benchmark_group(format!("mlp_layer_{m}x{k}x{n}"));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        g.bench_function(BenchmarkId::new("eager", &tid), |b| {
            b.iter(|| black_box(mlp_layer(&xs).unwrap()))
        });
        g.bench_function(BenchmarkId::new("compiled", &tid), |b| {
            b.iter(|| black_box(compiled.call(&xs).unwrap()))
        });
        g.finish();
    }
}

/// The spec with every scalar argument replaced by its value as an immediate constant (how
/// kernels were compiled before constants became arguments).
fn inline_params(spec: &KernelSpec, values: &[Lit]) -> KernelSpec {
    let mut s = spec.clone();
    for inst in &mut s.insts {
        if let Inst::Param { index, dtype } = *inst {
            *inst = Inst::Const {
                value: values[index],
                dtype,
            };
        }
    }
    s
}

/// Kernel time with constants as arguments vs inlined, W1 and W3, 1-D/2-D at 2^16 and 2^20.
fn constants_as_args(c: &mut Criterion) {
    let tid = threads_id();
    let list: [(&str, Workload); 2] = [("W1_gelu_tanh", w1), ("W3_bias_relu_add", w3)];
    for log in [16u32, 20] {
        let n = 1usize << log;
        for (name, f) in list {
            let inputs: Vec<Tensor> = if name.starts_with("W1") {
                vec![Tensor::randn_seeded(&[n], DType::F32, 1).unwrap()]
            } else {
                vec![
                    Tensor::randn_seeded(&[n / COLS, COLS], DType::F32, 1).unwrap(),
                    Tensor::randn_seeded(&[COLS], DType::F32, 2).unwrap(),
                    Tensor::randn_seeded(&[n / COLS, COLS], DType::F32, 3).unwrap(),
                ]
            };
            let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
            let graph = capture(f, &metas, CaptureOptions { dynamic: true }).unwrap();
            let compiled = tp_compile(&graph).unwrap();
            let lowered = lower(compiled.graph(), &compiled.plan().regions[0]).unwrap();
            let inlined = inline_params(&lowered.spec, &lowered.params);
            let ins: Vec<&Tensor> = inputs.iter().collect();
            let shape = inputs[0].shape().to_vec();
            let (o1, o2) = (
                Tensor::zeros(&shape, DType::F32),
                Tensor::zeros(&shape, DType::F32),
            );
            let layout = cpu::plan(&lowered.spec, &ins, &[&o1], None)
                .unwrap()
                .layout()
                .clone();
            let k_args = cpu::compile(&lowered.spec, &layout).unwrap();
            let k_inl = cpu::compile(&inlined, &layout).unwrap();
            k_args
                .launch_with_params(&ins, &[&o1], &lowered.params)
                .unwrap();
            k_inl.launch(&ins, &[&o2]).unwrap();
            assert_eq!(vec_of(&o1), vec_of(&o2), "{name}: the same results");
            let mut g = c.benchmark_group(format!("constants_as_args_{name}_2^{log}"));
            configure(&mut g, log);
            g.throughput(Throughput::Elements(n as u64));
            g.bench_function(BenchmarkId::new("args", &tid), |b| {
                b.iter(|| {
                    k_args
                        .launch_with_params(&ins, &[&o1], &lowered.params)
                        .unwrap()
                })
            });
            g.bench_function(BenchmarkId::new("inlined", &tid), |b| {
                b.iter(|| k_inl.launch(&ins, &[&o2]).unwrap())
            });
            g.finish();
        }
    }
}

/// No plots and fewer bootstrap resamples: the analysis stays a small part of the run.
fn config() -> Criterion {
    Criterion::default().without_plots().nresamples(20_000)
}

criterion_group! {
    name = benches;
    config = config();
    targets = call_overhead, compile_latency, constants_as_args, mlp_layers, workloads
}
criterion_main!(benches);
