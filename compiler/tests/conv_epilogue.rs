//! Conv epilogues: a conv2d whose output only the following pointwise region reads runs with
//! that region, one chunk of images per pool thread (`compiler/src/epilogue.rs`). Compiled
//! results must match eager (bias, batch norm in eval mode, relu as the epilogue), and the
//! convolutions whose output is also returned or read later must not fuse.
//!
//! Run also as `TP_NUM_THREADS=1` (one chunk on the calling thread) and `TP_CONV_EPILOGUE=0`
//! (fusion off: no `conv epilogue:` line, same values).

use tensorplay_ir::{DType, Result};
use tensorplay_runtime::{Tensor, nn};

#[path = "common/graphs.rs"]
mod graphs;
use graphs::{graph_of, max_rel_diff};

/// Whether fusion is on in this process (`TP_CONV_EPILOGUE=0` turns it off).
fn fusion_on() -> bool {
    std::env::var("TP_CONV_EPILOGUE").map_or(true, |v| v != "0")
}

/// conv → + bias → batch norm (eval) → relu.
fn layer(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, w, b, rm, rv, gamma, beta) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5], &xs[6]);
    let y = nn::conv2d(x, w, None, &[1], 1, &[1], 1)?.add(b)?;
    let y = nn::batch_norm(
        &y,
        Some(rm),
        Some(rv),
        Some(gamma),
        Some(beta),
        false,
        0.1,
        1e-5,
    )?;
    Ok(vec![y.relu()?])
}

fn inputs(
    n: usize,
    c: usize,
    o: usize,
    size: usize,
    dtype: DType,
    seed: u64,
) -> Result<Vec<Tensor>> {
    let r = |s: &[usize], k: u64| Tensor::randn_seeded(s, dtype, seed + k);
    Ok(vec![
        r(&[n, c, size, size], 0)?,
        r(&[o, c, 3, 3], 1)?.mul_scalar(0.3)?,
        r(&[o, 1, 1], 2)?,
        r(&[o], 3)?,
        r(&[o], 4)?.abs()?.add_scalar(0.5)?,
        r(&[o], 5)?,
        r(&[o], 6)?,
    ])
}

#[test]
fn fused_conv_layers_match_eager() -> Result<()> {
    // (images, in, out, size): one image; an odd image count (a longer last chunk on two
    // threads); enough work for the pool; a 56x56 plane (the direct forward kernel).
    for (i, &(n, c, o, size)) in [(1, 3, 4, 5), (5, 4, 6, 7), (8, 16, 32, 14), (2, 8, 8, 56)]
        .iter()
        .enumerate()
    {
        for dtype in [DType::F32, DType::F64] {
            let xs = inputs(n, c, o, size, dtype, 10 * i as u64)?;
            let graph = graph_of(layer, &xs)?;
            let plan = graph.explain();
            assert_eq!(
                plan.matches("conv epilogue:").count(),
                usize::from(fusion_on()),
                "the convolution fuses (unless turned off):\n{plan}"
            );
            let want = layer(&xs)?.remove(0);
            // Twice: the second call reuses the arena's buffer and the kernel.
            for call in 0..2 {
                let got = graph.run(&xs)?.remove(0);
                let d = max_rel_diff(&got, &want)?;
                let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
                assert!(
                    d <= tol,
                    "[{n}, {c}, {size}, {size}] -> {o} channels, {dtype}, call {call}: relative \
                     difference {d}"
                );
            }
        }
    }
    Ok(())
}

/// The convolution's output is also a graph output.
fn returned(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = nn::conv2d(&xs[0], &xs[1], None, &[1], 1, &[1], 1)?;
    Ok(vec![y.add(&xs[2])?.relu()?, y])
}

/// The convolution's output is read again after a barrier.
fn read_later(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = nn::conv2d(&xs[0], &xs[1], None, &[1], 1, &[1], 1)?;
    let a = y.add(&xs[2])?.relu()?;
    let p = nn::max_pool2d(&a, &[2], &[], &[0], &[1], false)?;
    Ok(vec![p.sum_all()?.add(&y.sum_all()?)?])
}

#[test]
fn convolutions_returned_or_read_later_do_not_fuse() -> Result<()> {
    let xs = inputs(4, 3, 4, 8, DType::F32, 99)?;
    type Program = fn(&[Tensor]) -> Result<Vec<Tensor>>;
    for (name, f) in [
        ("returned", returned as Program),
        ("read later", read_later),
    ] {
        let graph = graph_of(f, &xs)?;
        let plan = graph.explain();
        assert!(
            !plan.contains("conv epilogue:"),
            "{name}: must not fuse:\n{plan}"
        );
        let (got, want) = (graph.run(&xs)?, f(&xs)?);
        for (g, w) in got.iter().zip(&want) {
            assert!(max_rel_diff(g, w)? <= 1e-5, "{name}");
        }
    }
    Ok(())
}
