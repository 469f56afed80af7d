//! Product epilogues: a 2-D matrix product or a convolution whose result feeds only the
//! pointwise region right after it (the `matmul → + bias → activation` of an MLP layer, the
//! `conv2d → + bias → batch norm (eval) → relu` of a CNN layer) runs together with that region.
//!
//! A matmul:
//! the product's rows are split into one panel per pool thread, and each thread computes its
//! panel (its own `gemm` call) and runs the region's kernel over the same rows right after. The
//! product and its epilogue cost one pool dispatch instead of two (the product's own split, then
//! the region's), and each thread's epilogue reads rows it has just written.
//!
//! Panels are not cut smaller to stay in cache: every panel is a `gemm` call that repacks the
//! right operand (the `gemm` crate has no per-block callback to run an epilogue in), and measured
//! on this project's machines that repacking costs what the cache saves (`docs/PERFORMANCE.md`,
//! "Matmul epilogues").
//!
//! A convolution ([`ConvImages`]): its images are split into the chunks its eager kernel
//! uses (one per pool thread), and each thread computes its chunk and runs the region's kernel
//! over the chunk's elements (whole images: leading-dim rows of the region's `[N, C, H, W]`
//! iteration) right after.
//!
//! Which step pairs qualify is decided by the executor when a graph is compiled
//! (`CompiledGraph::explain` lists them; `TP_MATMUL_EPILOGUE=0` / `TP_CONV_EPILOGUE=0` turn
//! fusion off), and the executor calls [`run`]: the dependency goes one way, this module knows
//! nothing of the executor. Whether a call can take the fused path is decided per call
//! ([`RowPanels::new`]: 2-D `f32`/`f64` CPU operands; [`ConvImages::new`]: `f32`/`f64` CPU
//! operands). A call that cannot runs the product through the dispatcher and the region after
//! it, as without fusion.

use rayon::prelude::*;
use tensorplay_ir::Result;
use tensorplay_runtime::ops::conv::ConvImages;
use tensorplay_runtime::ops::linalg::RowPanels;
use tensorplay_runtime::parallel;

use crate::codegen::cpu::{CompiledKernel, LaunchPlan, ScalarArgs};

/// Fewest rows of a thread's panel (smaller products stay on one thread).
const MIN_THREAD_ROWS: usize = 16;

/// Rows per panel for `panels`' product on `threads` threads: one panel per thread when the
/// product is worth splitting, else the whole product on the calling thread.
fn panel_rows(panels: &RowPanels, threads: usize) -> usize {
    let m = panels.rows();
    let parallel = threads > 1 && panels.worth_splitting();
    let rows = if parallel {
        m.div_ceil(threads).max(MIN_THREAD_ROWS)
    } else {
        m
    };
    rows.clamp(1, m.max(1))
}

/// A product an epilogue region follows.
pub(crate) enum Product {
    /// A matmul, by panels of rows.
    Rows(RowPanels),
    /// A conv2d, by chunks of images.
    Images(ConvImages),
}

/// Computes `product` and runs `kernel` over each piece of it right after: `plan` is the
/// region's pointwise plan over the whole iteration (made from tensors the caller still
/// borrows, the product's output among its inputs, of the product's shape).
pub(crate) fn run(
    product: &Product,
    kernel: &CompiledKernel,
    plan: &LaunchPlan,
    params: &ScalarArgs,
) -> Result<()> {
    match product {
        Product::Rows(p) => run_rows(p, kernel, plan, params),
        Product::Images(c) => {
            let len = c.image_len();
            // SAFETY: the caller keeps the product's output to this call; each chunk's
            // launch reads and writes only that chunk's images (elements), of the region's
            // operands as of the output.
            unsafe {
                c.run_chunks(|imgs| {
                    kernel.launch_plan_range(plan, params, imgs.start * len..imgs.end * len)
                })
            }
        }
    }
}

/// [`run`] for a matmul: one panel of rows per thread.
fn run_rows(
    product: &RowPanels,
    kernel: &CompiledKernel,
    plan: &LaunchPlan,
    params: &ScalarArgs,
) -> Result<()> {
    let m = product.rows();
    let row_len = plan.range().checked_div(m).unwrap_or(0);
    let threads = parallel::num_threads();
    let rows = panel_rows(product, threads);
    let panels = m.div_ceil(rows);
    let panel = |p: usize| -> Result<()> {
        let (r0, r1) = (p * rows, ((p + 1) * rows).min(m));
        // SAFETY: panels are disjoint row ranges, each computed by one call, and the region
        // reads a panel's rows only here, after they are computed.
        unsafe { product.compute(r0..r1) };
        kernel.launch_plan_range(plan, params, r0 * row_len..r1 * row_len)
    };
    if panels > 1 && threads > 1 {
        parallel::pool().install(|| (0..panels).into_par_iter().try_for_each(panel))
    } else {
        (0..panels).try_for_each(panel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorplay_ir::DType;
    use tensorplay_runtime::Tensor;

    fn panels(m: usize, k: usize, n: usize) -> RowPanels {
        let x = Tensor::zeros(&[m, k], DType::F32);
        let y = Tensor::zeros(&[k, n], DType::F32);
        let out = Tensor::zeros(&[m, n], DType::F32);
        RowPanels::new(&x, &y, &out).expect("a 2-D f32 product")
    }

    #[test]
    fn one_panel_per_thread_when_the_product_is_worth_splitting() {
        // The quickstart's first product: the whole of it on one thread, a half each on two.
        assert_eq!(panel_rows(&panels(64, 128, 512), 1), 64);
        assert_eq!(panel_rows(&panels(64, 128, 512), 2), 32);
        assert_eq!(panel_rows(&panels(1030, 8, 129), 4), 258);
        // Never fewer than 16 rows a thread, and tiny products stay on the calling thread.
        assert_eq!(panel_rows(&panels(40, 512, 512), 8), 16);
        assert_eq!(panel_rows(&panels(8, 4, 4), 2), 8);
    }
}
