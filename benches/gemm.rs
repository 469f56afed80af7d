//! Matrix products at the shapes models train with: GFLOPS of `Tensor::matmul` (the eager path
//! that `linear`, attention and compiled graphs' products share), printed one JSON line per
//! shape, for `scripts/bench/gemm.py` to set beside PyTorch's.
//!
//! ```text
//! cargo build --release --bench gemm && TP_NUM_THREADS=1 target/release/deps/gemm-<hash> [filter]
//! python3 scripts/bench/gemm.py --torch-python /path/to/venv/bin/python   # both, alternating
//! ```
//!
//! Each shape is `batch x (m x k) · (k x n)`; `lhs^T`/`rhs^T` mark an operand read through a
//! transposed view of a contiguous tensor, as `linear` reads its weight and a backward reads
//! its saved input. Five rounds of at least 0.2 s each; the median round's GFLOPS is printed.

use std::time::{Duration, Instant};

use tensorplay::{DType, Result, Tensor};

/// One product: name, batch, m, k, n, lhs transposed, rhs transposed.
type Shape = (&'static str, usize, usize, usize, usize, bool, bool);

/// The transformer example's products (batch 16, context 32: 512 tokens; dim 64, 4 heads of
/// 16), their backward products, and MLP squares.
const SHAPES: &[Shape] = &[
    ("qkv 512x64.(192x64)^T", 1, 512, 64, 192, false, true),
    ("mlp-up 512x64.(256x64)^T", 1, 512, 64, 256, false, true),
    ("mlp-down 512x256.(64x256)^T", 1, 512, 256, 64, false, true),
    ("proj 512x64.(64x64)^T", 1, 512, 64, 64, false, true),
    ("q.k^T 64x[32x16.(32x16)^T]", 64, 32, 16, 32, false, true),
    ("att.v 64x[32x32.32x16]", 64, 32, 32, 16, false, false),
    ("dW qkv (512x192)^T.512x64", 1, 192, 512, 64, true, false),
    ("dX qkv 512x192.192x64", 1, 512, 192, 64, false, false),
    ("dW mlp-up (512x256)^T.512x64", 1, 256, 512, 64, true, false),
    ("dX mlp-down 512x64.64x256", 1, 512, 64, 256, false, false),
    ("d(att) 64x[32x16.(32x16)^T]", 64, 32, 16, 32, false, true),
    ("dV 64x[(32x32)^T.32x16]", 64, 32, 32, 16, true, false),
    ("square 512", 1, 512, 512, 512, false, false),
    ("square 1024", 1, 1024, 1024, 1024, false, false),
    ("square 2048", 1, 2048, 2048, 2048, false, false),
    ("square 4096", 1, 4096, 4096, 4096, false, false),
];

/// A `batch x rows x cols` operand, or the transposed view of a `batch x cols x rows` one.
fn operand(batch: usize, rows: usize, cols: usize, transposed: bool, seed: u64) -> Result<Tensor> {
    let dims = |a: usize, b: usize| {
        if batch == 1 {
            vec![a, b]
        } else {
            vec![batch, a, b]
        }
    };
    if transposed {
        Tensor::randn_seeded(&dims(cols, rows), DType::F32, seed)?.transpose(-1, -2)
    } else {
        Tensor::randn_seeded(&dims(rows, cols), DType::F32, seed)
    }
}

/// The median round's GFLOPS of `x.matmul(y)`.
fn measure(x: &Tensor, y: &Tensor, flops: f64) -> Result<f64> {
    x.matmul(y)?;
    let mut rates = Vec::new();
    for _ in 0..5 {
        let (t0, mut reps) = (Instant::now(), 0u32);
        while reps == 0 || t0.elapsed() < Duration::from_millis(200) {
            std::hint::black_box(x.matmul(y)?);
            reps += 1;
        }
        rates.push(flops * f64::from(reps) / t0.elapsed().as_secs_f64() / 1e9);
    }
    rates.sort_by(f64::total_cmp);
    Ok(rates[2])
}

fn main() -> Result<()> {
    let filter = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    for &(name, b, m, k, n, ta, tb) in SHAPES {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let x = operand(b, m, k, ta, 1)?;
        let y = operand(b, k, n, tb, 2)?;
        let gflops = measure(&x, &y, 2.0 * (b * m * n * k) as f64)?;
        println!(
            "{{\"shape\": \"{name}\", \"threads\": {}, \"gflops\": {gflops:.1}}}",
            tensorplay::parallel::num_threads()
        );
    }
    Ok(())
}
