//! `nn::conv2d` forward and forward+backward at ResNet-18 layer shapes, one JSON line per
//! shape with the median milliseconds of each. `scripts/bench/conv.py` alternates this with a
//! PyTorch twin (same shapes, same timing rule) and prints the comparison.
//!
//!     cargo bench -p tensorplay-runtime --bench conv        # threads: TP_NUM_THREADS

use std::time::Instant;

use tensorplay_runtime::{DType, Result, Tensor, autograd, nn};

/// `(name, batch, channels, size, out_channels, kernel, stride, padding)`.
type Shape = (
    &'static str,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
);

const SHAPES: &[Shape] = &[
    ("resnet18_layer1_64x56x56", 8, 64, 56, 64, 3, 1, 1),
    ("resnet18_layer3_256x14x14", 8, 256, 14, 256, 3, 1, 1),
];

/// Median milliseconds of `f` over 5 timed runs after one warm-up.
fn median_ms(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(f64::total_cmp);
    Ok(t[2])
}

fn main() -> Result<()> {
    for &(name, n, c, s, o, k, stride, pad) in SHAPES {
        let x = Tensor::randn_seeded(&[n, c, s, s], DType::F32, 1)?.requires_grad_(true)?;
        let w = Tensor::randn_seeded(&[o, c, k, k], DType::F32, 2)?.requires_grad_(true)?;
        let b = Tensor::randn_seeded(&[o], DType::F32, 3)?.requires_grad_(true)?;
        let conv = || nn::conv2d(&x, &w, Some(&b), &[stride], pad, &[1], 1);
        let fwd = median_ms(|| {
            let _off = autograd::no_grad();
            conv().map(drop)
        })?;
        let go = Tensor::ones(conv()?.shape(), DType::F32);
        let fwd_bwd = median_ms(|| {
            let y = conv()?;
            let g = autograd::grad(
                &[y],
                &[x.clone(), w.clone(), b.clone()],
                &[Some(go.clone())],
                false,
            )?;
            drop(g);
            Ok(())
        })?;
        println!("{{\"shape\":\"{name}\",\"fwd_ms\":{fwd:.3},\"fwd_bwd_ms\":{fwd_bwd:.3}}}");
    }
    Ok(())
}
