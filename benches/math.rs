//! Bulk math kernels vs the inline CLIF math, per op, on one L1-resident
//! 4096-element f32 tile (16 KiB in, 16 KiB out), single-threaded:
//!
//! - `inline`: the inline `f32x4` code of `math::emit_unary` / `emit_pow`
//!   (CLIF `sqrt` / `fdiv` for sqrt and div) in a JIT'd loop
//!   (`math::bulk::InlineLoop`) — what fused kernels run without bulk kernels;
//! - `avx512`, `avx2`: the bulk kernels of that level (`math::bulk::unary_at` /
//!   `binary_at`), where the host supports it.
//!
//! Both give the same bits (see `compiler/tests/math_bulk.rs`). Throughput is
//! in elements, so criterion's "elem/s" compares directly; ns/element is the
//! time divided by 4096.
//!
//! ```text
//! cargo bench --bench math
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tensorplay::compiler::codegen::cpu::math::MathFn;
use tensorplay::compiler::codegen::cpu::math::bulk::{
    self, BinaryFn, BulkOp, InlineLoop, Level, UnaryFn,
};

/// Elements per tile.
const N: usize = 4096;

/// Every op with a bulk kernel.
const OPS: [BulkOp; 11] = [
    BulkOp::Math(MathFn::Exp),
    BulkOp::Math(MathFn::Log),
    BulkOp::Math(MathFn::Tanh),
    BulkOp::Math(MathFn::Sigmoid),
    BulkOp::Math(MathFn::Silu),
    BulkOp::Math(MathFn::GeluTanh),
    BulkOp::Math(MathFn::Erf),
    BulkOp::Math(MathFn::GeluErf),
    BulkOp::Sqrt,
    BulkOp::Div,
    BulkOp::Pow,
];

/// Inputs in each op's interesting range (no NaN/inf: the timing of the
/// branch-free code does not depend on the values anyway).
fn inputs(op: BulkOp) -> (Vec<f32>, Vec<f32>) {
    let (lo, hi) = match op {
        BulkOp::Math(MathFn::Log) | BulkOp::Sqrt => (1e-3, 100.0),
        BulkOp::Math(MathFn::Exp) => (-80.0, 80.0),
        BulkOp::Pow => (0.1, 10.0),
        _ => (-8.0, 8.0),
    };
    let a: Vec<f32> = (0..N)
        .map(|i| lo + (hi - lo) * ((i * 2_654_435_761) % N) as f32 / N as f32)
        .collect();
    let b: Vec<f32> = (0..N)
        .map(|i| 0.5 + 3.0 * ((i * 40_503) % N) as f32 / N as f32)
        .collect();
    (a, b)
}

/// One kernel of either arity.
#[derive(Clone, Copy)]
enum Kernel {
    U(UnaryFn),
    B(BinaryFn),
}

fn run(k: Kernel, a: &[f32], b: &[f32], out: &mut [f32]) {
    // SAFETY: every slice holds N elements; `out` overlaps neither input.
    unsafe {
        match k {
            Kernel::U(f) => f(a.as_ptr(), out.as_mut_ptr(), N),
            Kernel::B(f) => f(a.as_ptr(), b.as_ptr(), out.as_mut_ptr(), N),
        }
    }
}

fn math(c: &mut Criterion) {
    let mut g = c.benchmark_group("math_tile4096");
    g.throughput(Throughput::Elements(N as u64))
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for op in OPS {
        let (a, b) = inputs(op);
        let mut out = vec![0.0f32; N];
        let inline = InlineLoop::compile(op).expect("inline loop");
        let mut kernels = vec![(
            "inline",
            match op.arity() {
                1 => Kernel::U(inline.unary().expect("unary")),
                _ => Kernel::B(inline.binary().expect("binary")),
            },
        )];
        for (name, level) in [("avx512", Level::Avx512), ("avx2", Level::Avx2)] {
            let k = match op.arity() {
                1 => bulk::unary_at(op, level).map(Kernel::U),
                _ => bulk::binary_at(op, level).map(Kernel::B),
            };
            if let Some(k) = k {
                kernels.push((name, k));
            }
        }
        for (name, k) in kernels {
            g.bench_function(BenchmarkId::new(op.name(), name), |bch| {
                bch.iter(|| run(k, black_box(&a), black_box(&b), &mut out))
            });
        }
    }
    g.finish();
}

/// No plots and fewer bootstrap resamples: the analysis stays a small part of the run.
fn config() -> Criterion {
    Criterion::default().without_plots().nresamples(20_000)
}

criterion_group! {
    name = benches;
    config = config();
    targets = math
}
criterion_main!(benches);
