//! The fused attention kernel with dropout off and on, at the transformer example's attention
//! shape (`[16, 4, 32, 16]`, causal, f32): forward alone and forward+backward, alternating the
//! two settings round by round (so machine load hits both alike), printing the median of the
//! rounds' milliseconds per call and the on/off ratio, one JSON line per measurement.
//!
//!     cargo bench -p tensorplay-runtime --bench attention_dropout   # threads: TP_NUM_THREADS

use std::time::Instant;

use tensorplay_runtime::{DType, Result, Tensor, autograd, nn};

/// Calls per timed batch and alternating rounds.
const CALLS: usize = 200;
const ROUNDS: usize = 7;

/// Milliseconds per call of `f` over one batch of [`CALLS`].
fn per_call_ms(f: &mut impl FnMut() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..CALLS {
        f()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / CALLS as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let shape = [16, 4, 32, 16];
    let q = Tensor::randn_seeded(&shape, DType::F32, 1)?.requires_grad_(true)?;
    let k = Tensor::randn_seeded(&shape, DType::F32, 2)?.requires_grad_(true)?;
    let v = Tensor::randn_seeded(&shape, DType::F32, 3)?.requires_grad_(true)?;
    let go = Tensor::ones(&shape, DType::F32);
    let sdpa = |p: f64| nn::scaled_dot_product_attention(&q, &k, &v, None, p, true, None);
    for (what, backward) in [("forward", false), ("forward_backward", true)] {
        let run = |p: f64| -> Result<()> {
            if backward {
                let y = sdpa(p)?;
                let leaves = [q.clone(), k.clone(), v.clone()];
                drop(autograd::grad(&[y], &leaves, &[Some(go.clone())], false)?);
            } else {
                let _off = autograd::no_grad();
                drop(sdpa(p)?);
            }
            Ok(())
        };
        let (mut off, mut on) = (Vec::new(), Vec::new());
        run(0.0)?;
        run(0.1)?;
        for _ in 0..ROUNDS {
            off.push(per_call_ms(&mut || run(0.0))?);
            on.push(per_call_ms(&mut || run(0.1))?);
        }
        let (off, on) = (median(off), median(on));
        println!(
            "{{\"bench\": \"attention_dropout\", \"shape\": [16, 4, 32, 16], \"causal\": true, \
             \"what\": \"{what}\", \"dropout_off_ms\": {off:.4}, \"dropout_0.1_ms\": {on:.4}, \
             \"ratio\": {:.3}}}",
            on / off
        );
    }
    Ok(())
}
