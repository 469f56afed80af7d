//! The convolution kernels' entry points: operands converted to the compute dtype, the
//! batch split over the pool, the products of [`super::products`] run, results rounded back.

use rayon::prelude::*;
use tensorplay_ir::{DType, Result};

use super::geometry::{Geometry, geometry, output_mask, output_mask_at, transposed_geometry};
use super::im2col::Real;
use super::products::{
    Base, Split, channel_sums, forward_images, grad_input_images, grad_weight_images,
};
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::Args;

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
pub(super) fn elements<'t, F: Real>(op: &str, t: &'t Tensor) -> Result<&'t [F]> {
    let p = t.data_ptr(op)? as *const F;
    // SAFETY: `t` is contiguous with `numel` elements of `F`, alive while borrowed; these
    // kernels never write through a tensor they read.
    Ok(unsafe { std::slice::from_raw_parts(p, t.numel()) })
}

/// A fresh output's elements, writable.
#[allow(clippy::mut_from_ref)]
pub(super) fn elements_mut<'t, F: Real>(op: &str, t: &'t Tensor) -> Result<&'t mut [F]> {
    let p = t.data_ptr(op)? as *mut F;
    // SAFETY: `t` is a fresh contiguous output (or scratch) of `numel` elements of `F` that
    // nothing else reads or writes during the kernel.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, t.numel()) })
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
    let split = Split::new(g);
    let direct = super::direct::chosen(g);
    split.for_chunks(g.n, |imgs| {
        // SAFETY: chunks are disjoint image ranges of the fresh contiguous output, each
        // written by its own task only.
        unsafe { forward_chunk(g, &split, direct, (xs, ws, bs), po, imgs) };
        Ok(())
    })
}

/// The forward of images `imgs` into `out` (`[N, O, L]`), by the direct kernel when `direct`.
///
/// # Safety
/// As [`forward_images`]; `direct` only where [`super::direct::applies`].
pub(super) unsafe fn forward_chunk<F: Real>(
    g: &Geometry,
    split: &Split,
    direct: bool,
    operands: (&[F], &[F], Option<&[F]>),
    out: Base<F>,
    imgs: std::ops::Range<usize>,
) {
    // SAFETY: forwarded contract.
    unsafe {
        if direct {
            super::direct::forward_direct_images(g, split, operands, out, imgs)
        } else {
            forward_images(g, split, operands, out, imgs)
        }
    }
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

/// `grad_input[i, grp] = col2im(W_grp^T · grad[i, grp])`.
fn grad_input<F: Real>(op: &str, g: &Geometry, gos: &[F], ws: &[F], gi: &Tensor) -> Result<()> {
    let pi = Base(elements_mut::<F>(op, gi)?.as_mut_ptr());
    let split = Split::new(g);
    split.for_chunks(g.n, |imgs| {
        // SAFETY: chunks are disjoint image ranges of the fresh contiguous input gradient,
        // each written by its own task only.
        unsafe { grad_input_images(g, &split, (gos, ws), pi, imgs) };
        Ok(())
    })
}

/// `grad_weight[grp] = sum_i grad[i, grp] · im2col(x[i, grp])^T`, each chunk of the batch
/// accumulating its own partial sum.
fn grad_weight<F: Real>(op: &str, g: &Geometry, gos: &[F], xs: &[F], gw: &Tensor) -> Result<()> {
    let split = Split::new(g);
    let wn = g.o * g.k();
    let run = |imgs| -> Vec<F> {
        let mut acc = vec![F::default(); wn];
        grad_weight_images(g, &split, (gos, xs), &mut acc, imgs);
        acc
    };
    let parts: Vec<Vec<F>> = if split.chunks > 1 {
        parallel::pool().install(|| {
            (0..split.chunks)
                .into_par_iter()
                .map(|c| run(split.chunk(g.n, c)))
                .collect()
        })
    } else if matches!(split.par, gemm::Parallelism::None) {
        vec![run(0..g.n)]
    } else {
        parallel::pool().install(|| vec![run(0..g.n)])
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
