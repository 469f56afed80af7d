//! The anchor workloads W1–W6 (float32, 2^20 elements) compiled and called from Rust, timed the
//! way `python/bench/overhead.py` times them from Python (median over alternating rounds of
//! ~0.1 s batches), so the two can run side by side: the Rust half of issue 34 item 9's "W1–W6
//! compiled from Python within 5 % of the same kernels driven from Rust". The closures are the
//! ones of `benches/fusion.rs` (shared through `benches/common/workloads.rs`).
//!
//! Run: `cargo run --release --example workloads_timing [rounds]`.

use std::hint::black_box;
use std::time::Instant;

use tensorplay::compiler::{CompiledFn, compile};
use tensorplay::{DType, Result, Tensor};

#[path = "../benches/common/workloads.rs"]
mod workloads;
use workloads::{w1, w2, w3, w4, w5, w6};

const COLS: usize = 1024;

type Workload = fn(&[Tensor]) -> Result<Vec<Tensor>>;

fn per_call_us(f: &CompiledFn, xs: &[Tensor], calls: usize) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..calls {
        black_box(f.call(xs)?);
    }
    Ok(t0.elapsed().as_secs_f64() / calls as f64 * 1e6)
}

fn main() -> Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(7);
    let n = 1usize << 20;
    let randn = |shape: &[usize], seed| Tensor::randn_seeded(shape, DType::F32, seed);
    let rand = |shape: &[usize], seed| Tensor::rand_seeded(shape, DType::F32, seed);
    let rows = n / COLS;
    let list: Vec<(&str, Workload, Vec<Tensor>)> = vec![
        ("W1_gelu_tanh", w1, vec![randn(&[n], 1)?]),
        ("W2_silu_mul", w2, vec![randn(&[n], 1)?, randn(&[n], 2)?]),
        (
            "W3_bias_relu_add",
            w3,
            vec![
                randn(&[rows, COLS], 1)?,
                randn(&[COLS], 2)?,
                randn(&[rows, COLS], 3)?,
            ],
        ),
        ("W4_weighted_sum", w4, vec![rand(&[n], 1)?, rand(&[n], 2)?]),
        ("W5_softmax", w5, vec![randn(&[rows, COLS], 1)?]),
        ("W6_chain10", w6, vec![randn(&[n], 1)?]),
    ];
    let mut cases = Vec::new();
    for (name, f, xs) in list {
        let c = compile(f);
        c.call(&xs)?; // capture + compile
        // Calls per batch: about 0.1 s.
        let once = per_call_us(&c, &xs, 3)?;
        let calls = ((1e5 / once.max(1.0)) as usize).max(1);
        cases.push((name, c, xs, calls, Vec::new()));
    }
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..cases.len()).collect()
        } else {
            (0..cases.len()).rev().collect()
        };
        for i in order {
            let (_, c, xs, calls, samples) = &mut cases[i];
            samples.push(per_call_us(c, xs, *calls)?);
        }
    }
    let threads = std::env::var("TP_NUM_THREADS").unwrap_or_else(|_| "(default)".into());
    println!("rust compiled W1-W6 at 2^20, TP_NUM_THREADS={threads}, {rounds} rounds");
    println!(
        "{:<28} {:>10} {:>10}  (us per call)",
        "case", "median", "min"
    );
    for (name, _, _, _, mut s) in cases {
        s.sort_by(f64::total_cmp);
        println!(
            "{:<28} {:>10.1} {:>10.1}",
            format!("rust compiled {name} 2^20"),
            s[s.len() / 2],
            s[0]
        );
    }
    Ok(())
}
