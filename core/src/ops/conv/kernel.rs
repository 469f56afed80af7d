//! The convolution kernels: im2col + `gemm` products for the forward and the backward.

use rayon::prelude::*;
use tensorplay_ir::{DType, Result};

use super::geometry::{Geometry, geometry, output_mask, output_mask_at, transposed_geometry};
use super::im2col::{Real, col2im, im2col};
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::Args;

/// Below this many multiply-adds a call runs on the calling thread.
const PAR_MIN_FLOPS: usize = 1 << 18;

/// The dtype the kernels compute in: f32 for halves, else the tensor's own.
fn compute_dtype(d: DType) -> DType {
    if d.is_half() { DType::F32 } else { d }
}

/// `t` contiguous in `dtype`.
fn operand(t: &Tensor, dtype: DType) -> Result<Tensor> {
    t.to_dtype(dtype)?.contiguous()
}

/// A fresh contiguous output in `compute`, or `out` itself when it already has that dtype.
fn scratch(out: &Tensor, compute: DType) -> Tensor {
    if out.dtype() == compute {
        out.clone()
    } else {
        Tensor::empty(out.shape(), compute)
    }
}

/// Copies `tmp` into `out` (rounding once) unless they are the same tensor.
fn finish(op: &str, out: &Tensor, tmp: &Tensor) -> Result<()> {
    if out.dtype() != tmp.dtype() {
        super::super::cast::copy_convert(op, out, tmp)?;
    }
    Ok(())
}

/// A contiguous tensor's elements.
fn elements<'t, F: Real>(op: &str, t: &'t Tensor) -> Result<&'t [F]> {
    let p = t.data_ptr(op)? as *const F;
    // SAFETY: `t` is contiguous with `numel` elements of `F`, alive while borrowed; these
    // kernels never write through a tensor they read.
    Ok(unsafe { std::slice::from_raw_parts(p, t.numel()) })
}

/// A fresh output's elements, writable.
#[allow(clippy::mut_from_ref)]
fn elements_mut<'t, F: Real>(op: &str, t: &'t Tensor) -> Result<&'t mut [F]> {
    let p = t.data_ptr(op)? as *mut F;
    // SAFETY: `t` is a fresh contiguous output (or scratch) of `numel` elements of `F` that
    // nothing else reads or writes during the kernel.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, t.numel()) })
}

/// `dst (+)= lhs · rhs` for row-major strided matrices (`(pointer, row stride, col stride)`).
///
/// # Safety
/// Every addressed element lies in live memory of `F`; `dst` overlaps neither operand.
#[allow(clippy::too_many_arguments)]
unsafe fn product<F: Real>(
    (m, n, k): (usize, usize, usize),
    dst: (*mut F, isize, isize),
    lhs: (*const F, isize, isize),
    rhs: (*const F, isize, isize),
    accumulate: bool,
    par: gemm::Parallelism,
) {
    // SAFETY: forwarded contract; gemm takes column strides first. dst = alpha * dst + beta *
    // lhs * rhs, with alpha read only when `accumulate`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2,
            dst.1,
            accumulate,
            lhs.0,
            lhs.2,
            lhs.1,
            rhs.0,
            rhs.2,
            rhs.1,
            F::from_f64(1.0),
            F::from_f64(1.0),
            false,
            false,
            false,
            par,
        )
    }
}

/// How a batch of images spreads over the pool: one image per task (each product on its
/// thread), or images in turn with each product parallel.
fn plan(g: &Geometry) -> (bool, gemm::Parallelism) {
    let threads = parallel::num_threads();
    let flops = g.n * g.o * g.k() * g.l();
    if threads < 2 || flops < PAR_MIN_FLOPS {
        (false, gemm::Parallelism::None)
    } else if g.n >= threads {
        (true, gemm::Parallelism::None)
    } else {
        (false, gemm::Parallelism::Rayon(threads))
    }
}

/// Runs `f(image)` over the batch as [`plan`] says.
fn for_images(g: &Geometry, f: impl Fn(usize, gemm::Parallelism) + Send + Sync) {
    match plan(g) {
        (true, par) => {
            parallel::pool().install(|| (0..g.n).into_par_iter().for_each(|i| f(i, par)))
        }
        (false, gemm::Parallelism::None) => (0..g.n).for_each(|i| f(i, gemm::Parallelism::None)),
        (false, par) => parallel::pool().install(|| (0..g.n).for_each(|i| f(i, par))),
    }
}

/// A raw base pointer shared by image tasks, each writing its own disjoint block.
#[derive(Clone, Copy)]
struct Base<F>(*mut F);
// SAFETY: tasks write disjoint blocks (see each use).
unsafe impl<F> Send for Base<F> {}
// SAFETY: as above.
unsafe impl<F> Sync for Base<F> {}

impl<F> Base<F> {
    /// The pointer `at` elements past the base (a method, so closures capture the `Send`
    /// wrapper rather than its raw field).
    fn at(self, at: usize) -> *mut F {
        self.0.wrapping_add(at)
    }
}

pub(super) fn forward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, wt) = (a.tensor(0)?, a.tensor(1)?);
    let g = geometry(a.op, x, wt, a)?;
    let compute = compute_dtype(x.dtype());
    let (x, wt) = (operand(x, compute)?, operand(wt, compute)?);
    let bias = a.opt_tensor(2)?.map(|b| operand(b, compute)).transpose()?;
    let out = scratch(&outs[0], compute);
    match compute {
        DType::F64 => forward::<f64>(a.op, &g, &x, &wt, bias.as_ref(), &out)?,
        _ => forward::<f32>(a.op, &g, &x, &wt, bias.as_ref(), &out)?,
    }
    finish(a.op, &outs[0], &out)
}

fn forward<F: Real>(
    op: &str,
    g: &Geometry,
    x: &Tensor,
    wt: &Tensor,
    bias: Option<&Tensor>,
    out: &Tensor,
) -> Result<()> {
    let (xs, ws) = (elements::<F>(op, x)?, elements::<F>(op, wt)?);
    let bs = bias.map(|b| elements::<F>(op, b)).transpose()?;
    let po = Base(elements_mut::<F>(op, out)?.as_mut_ptr());
    let (k, l, og, cg) = (g.k(), g.l(), g.og(), g.cg());
    let img = g.c * g.h * g.w;
    for_images(g, |i, par| {
        let mut col = vec![F::default(); k * l];
        for grp in 0..g.groups {
            let at = i * img + grp * cg * g.h * g.w;
            im2col(g, &xs[at..at + cg * g.h * g.w], &mut col);
            let o_at = (i * g.o + grp * og) * l;
            // SAFETY: image `i`, group `grp` writes only its `og x l` block of the fresh
            // contiguous output; the weight block and `col` are live and read-only here.
            unsafe {
                product(
                    (og, l, k),
                    (po.at(o_at), l as isize, 1),
                    (ws[grp * og * k..].as_ptr(), k as isize, 1),
                    (col.as_ptr(), l as isize, 1),
                    false,
                    par,
                );
            }
        }
        if let Some(bs) = bs {
            // SAFETY: image `i`'s `o x l` block, written by this task only.
            let block = unsafe { std::slice::from_raw_parts_mut(po.at(i * g.o * l), g.o * l) };
            for (row, &b) in block.chunks_mut(l).zip(bs) {
                row.iter_mut().for_each(|v| *v += b);
            }
        }
    });
    Ok(())
}

pub(super) fn backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = geometry(a.op, a.tensor(1)?, a.tensor(2)?, a)?;
    run_backward(
        a,
        outs,
        &g,
        output_mask(a)?,
        backward::<f32>,
        backward::<f64>,
    )
}

/// A backward kernel over `(grad_output, input, weight)` writing the outputs `mask` selects.
type BackwardKernel =
    fn(&str, &Geometry, (&Tensor, &Tensor, &Tensor), &[Tensor], [bool; 3]) -> Result<()>;

/// Runs a conv backward kernel at the compute dtype: operands converted, the outputs `mask`
/// leaves out zero-filled, the results rounded into `outs`.
fn run_backward(
    a: Args,
    outs: &[Tensor],
    g: &Geometry,
    mask: [bool; 3],
    k32: BackwardKernel,
    k64: BackwardKernel,
) -> Result<()> {
    let (go, x, wt) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let compute = compute_dtype(x.dtype());
    let (go, x, wt) = (
        operand(go, compute)?,
        operand(x, compute)?,
        operand(wt, compute)?,
    );
    let tmp: Vec<Tensor> = outs.iter().map(|o| scratch(o, compute)).collect();
    for (m, t) in mask.iter().zip(&tmp) {
        if !m {
            super::super::inplace::fill_scalar(a.op, t, crate::value::Scalar::Int(0))?;
        }
    }
    match compute {
        DType::F64 => k64(a.op, g, (&go, &x, &wt), &tmp, mask)?,
        _ => k32(a.op, g, (&go, &x, &wt), &tmp, mask)?,
    }
    for (o, t) in outs.iter().zip(&tmp) {
        finish(a.op, o, t)?;
    }
    Ok(())
}

fn backward<F: Real>(
    op: &str,
    g: &Geometry,
    (go, x, wt): (&Tensor, &Tensor, &Tensor),
    outs: &[Tensor],
    mask: [bool; 3],
) -> Result<()> {
    let gos = elements::<F>(op, go)?;
    let l = g.l();
    if mask[2] {
        channel_sums(gos, (g.n, g.o, l), elements_mut::<F>(op, &outs[2])?);
    }
    if mask[0] {
        grad_input::<F>(op, g, gos, elements::<F>(op, wt)?, &outs[0])?;
    }
    if mask[1] {
        grad_weight::<F>(op, g, gos, elements::<F>(op, x)?, &outs[1])?;
    }
    Ok(())
}

/// `dst[c] = sum over images and positions of src[i, c, :]`, for `src` `[n, c, l]`
/// (accumulated in f64: the bias gradient).
fn channel_sums<F: Real>(src: &[F], (n, c, l): (usize, usize, usize), dst: &mut [F]) {
    for (ch, v) in dst.iter_mut().enumerate().take(c) {
        let mut acc = 0f64;
        for i in 0..n {
            let at = (i * c + ch) * l;
            acc += src[at..at + l].iter().map(|v| v.to_f64()).sum::<f64>();
        }
        *v = F::from_f64(acc);
    }
}

/// `grad_input[i, grp] = col2im(W_grp^T · grad[i, grp])`.
fn grad_input<F: Real>(op: &str, g: &Geometry, gos: &[F], ws: &[F], gi: &Tensor) -> Result<()> {
    let (k, l, og, cg) = (g.k(), g.l(), g.og(), g.cg());
    let img = g.c * g.h * g.w;
    let pi = Base(elements_mut::<F>(op, gi)?.as_mut_ptr());
    for_images(g, |i, par| {
        let mut col = vec![F::default(); k * l];
        // SAFETY: image `i`'s block of the fresh contiguous input gradient, written by this
        // task only.
        let dst = unsafe { std::slice::from_raw_parts_mut(pi.at(i * img), img) };
        dst.fill(F::default());
        for grp in 0..g.groups {
            let go_at = (i * g.o + grp * og) * l;
            // SAFETY: `col` is this task's `k x l` buffer; the weight block (read transposed:
            // row stride 1, column stride k) and the gradient block are live and read-only.
            unsafe {
                product(
                    (k, l, og),
                    (col.as_mut_ptr(), l as isize, 1),
                    (ws[grp * og * k..].as_ptr(), 1, k as isize),
                    (gos[go_at..].as_ptr(), l as isize, 1),
                    false,
                    par,
                );
            }
            let at = grp * cg * g.h * g.w;
            col2im(g, &col, &mut dst[at..at + cg * g.h * g.w]);
        }
    });
    Ok(())
}

/// `grad_weight[grp] = sum_i grad[i, grp] · im2col(x[i, grp])^T`, the batch split into one
/// chunk per thread, each accumulating its own partial sum.
fn grad_weight<F: Real>(op: &str, g: &Geometry, gos: &[F], xs: &[F], gw: &Tensor) -> Result<()> {
    let (k, l, og, cg) = (g.k(), g.l(), g.og(), g.cg());
    let img = g.c * g.h * g.w;
    let (per_image, par) = plan(g);
    let chunks = if per_image {
        parallel::num_threads().min(g.n)
    } else {
        1
    };
    let wn = g.o * k;
    let run = |chunk: usize| -> Vec<F> {
        let mut acc = vec![F::default(); wn];
        let mut col = vec![F::default(); k * l];
        let (lo, hi) = (chunk * g.n / chunks, (chunk + 1) * g.n / chunks);
        for i in lo..hi {
            for grp in 0..g.groups {
                let at = i * img + grp * cg * g.h * g.w;
                im2col(g, &xs[at..at + cg * g.h * g.w], &mut col);
                let go_at = (i * g.o + grp * og) * l;
                // SAFETY: `acc` is this task's own `o x k` buffer; the gradient block and
                // `col` (read transposed: row stride 1, column stride l) are live.
                unsafe {
                    product(
                        (og, k, l),
                        (acc[grp * og * k..].as_mut_ptr(), k as isize, 1),
                        (gos[go_at..].as_ptr(), l as isize, 1),
                        (col.as_ptr(), 1, l as isize),
                        true,
                        par,
                    );
                }
            }
        }
        acc
    };
    let parts: Vec<Vec<F>> = if chunks > 1 {
        parallel::pool().install(|| (0..chunks).into_par_iter().map(run).collect())
    } else if matches!(par, gemm::Parallelism::None) {
        vec![run(0)]
    } else {
        parallel::pool().install(|| vec![run(0)])
    };
    let dst = elements_mut::<F>(op, gw)?;
    dst.copy_from_slice(&parts[0]);
    for p in &parts[1..] {
        for (d, &v) in dst.iter_mut().zip(p) {
            *d += v;
        }
    }
    Ok(())
}

/// `conv_transpose2d`'s kernel: the input gradient of the convolution `g` describes (whose
/// output is this op's input), plus the bias per output channel.
pub(super) fn transposed_forward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, wt) = (a.tensor(0)?, a.tensor(1)?);
    let g = transposed_geometry(a.op, x, wt, a)?;
    let compute = compute_dtype(x.dtype());
    let (x, wt) = (operand(x, compute)?, operand(wt, compute)?);
    let bias = a.opt_tensor(2)?.map(|b| operand(b, compute)).transpose()?;
    let out = scratch(&outs[0], compute);
    match compute {
        DType::F64 => transposed::<f64>(a.op, &g, &x, &wt, bias.as_ref(), &out)?,
        _ => transposed::<f32>(a.op, &g, &x, &wt, bias.as_ref(), &out)?,
    }
    finish(a.op, &outs[0], &out)
}

fn transposed<F: Real>(
    op: &str,
    g: &Geometry,
    x: &Tensor,
    wt: &Tensor,
    bias: Option<&Tensor>,
    out: &Tensor,
) -> Result<()> {
    grad_input::<F>(op, g, elements::<F>(op, x)?, elements::<F>(op, wt)?, out)?;
    if let Some(b) = bias {
        let bs = elements::<F>(op, b)?;
        let plane = g.h * g.w;
        let dst = elements_mut::<F>(op, out)?;
        for (i, row) in dst.chunks_mut(plane).enumerate() {
            let b = bs[i % g.c];
            row.iter_mut().for_each(|v| *v += b);
        }
    }
    Ok(())
}

/// `conv_transpose2d_backward`'s kernel: the input gradient is the convolution `g`
/// describes applied to `grad_output`, the weight gradient that convolution's weight gradient
/// with the roles of image and gradient swapped, the bias gradient a sum per channel.
pub(super) fn transposed_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = transposed_geometry(a.op, a.tensor(1)?, a.tensor(2)?, a)?;
    let mask = output_mask_at(a, 8)?;
    run_backward(
        a,
        outs,
        &g,
        mask,
        transposed_backward::<f32>,
        transposed_backward::<f64>,
    )
}

fn transposed_backward<F: Real>(
    op: &str,
    g: &Geometry,
    (go, x, wt): (&Tensor, &Tensor, &Tensor),
    outs: &[Tensor],
    mask: [bool; 3],
) -> Result<()> {
    if mask[2] {
        let gos = elements::<F>(op, go)?;
        channel_sums(gos, (g.n, g.c, g.h * g.w), elements_mut::<F>(op, &outs[2])?);
    }
    if mask[0] {
        forward::<F>(op, g, go, wt, None, &outs[0])?;
    }
    if mask[1] {
        let (xs, gos) = (elements::<F>(op, x)?, elements::<F>(op, go)?);
        grad_weight::<F>(op, g, xs, gos, &outs[1])?;
    }
    Ok(())
}
