//! The pooling kernels: one plane per task, computing in f32 (f32, f16, bf16) or f64.

use rayon::prelude::*;
use tensorplay_ir::{DType, Result};

use super::{Geometry, adaptive, divisor_override, output_size, window};
use crate::element::Element;
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::Args;

/// The float types the pooling kernels compute in.
trait Real:
    Element
    + Default
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::AddAssign
    + std::ops::Div<Output = Self>
{
    fn is_nan(self) -> bool;
}
impl Real for f32 {
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
}
impl Real for f64 {
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
}

fn compute_dtype(d: DType) -> DType {
    if d.is_half() { DType::F32 } else { d }
}

/// `t` contiguous in `dtype`.
fn operand(t: &Tensor, dtype: DType) -> Result<Tensor> {
    t.to_dtype(dtype)?.contiguous()
}

/// A contiguous tensor's elements.
fn elements<'t, T: Element>(op: &str, t: &'t Tensor) -> Result<&'t [T]> {
    let p = t.data_ptr(op)? as *const T;
    // SAFETY: `t` is contiguous with `numel` elements of `T`, alive while borrowed, and not
    // written during the kernel.
    Ok(unsafe { std::slice::from_raw_parts(p, t.numel()) })
}

/// A fresh output's elements, writable.
#[allow(clippy::mut_from_ref)]
fn elements_mut<'t, T: Element>(op: &str, t: &'t Tensor) -> Result<&'t mut [T]> {
    let p = t.data_ptr(op)? as *mut T;
    // SAFETY: `t` is a fresh contiguous output (or scratch) of `numel` elements of `T` that
    // nothing else reads or writes during the kernel.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, t.numel()) })
}

/// Runs `f(input plane, output plane)` for every plane, on the pool when big enough.
fn planes<A: Sync, B: Send>(
    inp: &[A],
    out: &mut [B],
    (isz, osz): (usize, usize),
    work: usize,
    f: impl Fn(&[A], &mut [B]) + Send + Sync,
) {
    if isz == 0 || osz == 0 {
        return;
    }
    let run = |(i, o): (&[A], &mut [B])| f(i, o);
    if parallel::num_threads() > 1 && work >= 1 << 16 {
        parallel::pool().install(|| {
            inp.par_chunks(isz)
                .zip(out.par_chunks_mut(osz))
                .for_each(run)
        });
    } else {
        inp.chunks(isz).zip(out.chunks_mut(osz)).for_each(run);
    }
}

/// Computes into `out` (in the compute dtype: directly, or through a scratch rounded once).
fn with_compute(
    op: &str,
    out: &Tensor,
    f: impl FnOnce(&Tensor, DType) -> Result<()>,
) -> Result<()> {
    let compute = compute_dtype(out.dtype());
    if compute == out.dtype() {
        return f(out, compute);
    }
    let tmp = Tensor::empty(out.shape(), compute);
    f(&tmp, compute)?;
    super::super::cast::copy_convert(op, out, &tmp)
}

/// The start of output row/column `o`'s window (may be negative: padding).
fn start(o: usize, s: usize, p: usize) -> isize {
    (o * s) as isize - p as isize
}

pub(super) fn max_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = window(a.op, a, 0, 1, true, 5)?;
    let x = a.tensor(0)?;
    let idx = elements_mut::<i64>(a.op, &outs[1])?;
    with_compute(a.op, &outs[0], |out, dt| {
        let x = operand(x, dt)?;
        match dt {
            DType::F64 => max_planes::<f64>(a.op, &g, &x, out, idx),
            _ => max_planes::<f32>(a.op, &g, &x, out, idx),
        }
    })
}

fn max_planes<F: Real>(
    op: &str,
    g: &Geometry,
    x: &Tensor,
    out: &Tensor,
    idx: &mut [i64],
) -> Result<()> {
    let xs = elements::<F>(op, x)?;
    let os = elements_mut::<F>(op, out)?;
    let (isz, osz) = (g.h * g.w, g.oh * g.ow);
    let mut pairs: Vec<(&mut [F], &mut [i64])> =
        os.chunks_mut(osz).zip(idx.chunks_mut(osz)).collect();
    let work = xs.len() * g.kh * g.kw / (g.sh * g.sw).max(1);
    let run = |(plane, o): (&[F], &mut (&mut [F], &mut [i64]))| {
        for oy in 0..g.oh {
            let y0 = start(oy, g.sh, g.ph);
            for ox in 0..g.ow {
                let x0 = start(ox, g.sw, g.pw);
                let (mut best, mut at) = (F::from_f64(f64::NEG_INFINITY), -1i64);
                for ky in 0..g.kh {
                    let iy = y0 + (ky * g.dh) as isize;
                    if iy < 0 || iy >= g.h as isize {
                        continue;
                    }
                    for kx in 0..g.kw {
                        let ixx = x0 + (kx * g.dw) as isize;
                        if ixx < 0 || ixx >= g.w as isize {
                            continue;
                        }
                        let flat = iy as usize * g.w + ixx as usize;
                        let v = plane[flat];
                        if at < 0 || v > best || v.is_nan() {
                            (best, at) = (v, flat as i64);
                            if v.is_nan() {
                                break;
                            }
                        }
                    }
                    if best.is_nan() {
                        break;
                    }
                }
                o.0[oy * g.ow + ox] = best;
                o.1[oy * g.ow + ox] = at.max(0);
            }
        }
    };
    if parallel::num_threads() > 1 && work >= 1 << 16 {
        parallel::pool().install(|| xs.par_chunks(isz).zip(pairs.par_iter_mut()).for_each(run));
    } else {
        xs.chunks(isz).zip(pairs.iter_mut()).for_each(run);
    }
    Ok(())
}

pub(super) fn max_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (go, idx) = (a.tensor(0)?, a.tensor(2)?.contiguous()?);
    let ids = elements::<i64>(a.op, &idx)?;
    let gx = &outs[0];
    let s = gx.shape();
    let isz = s[s.len() - 2] * s[s.len() - 1];
    let osz = go.shape()[go.rank() - 2] * go.shape()[go.rank() - 1];
    // Indices out of the plane (not from the forward) are an error, not a wild write.
    if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= isz) {
        return Err(tensorplay_ir::Error::argument(
            a.op,
            "indices",
            format!("positions in [0, {isz})"),
            bad.to_string(),
        ));
    }
    with_compute(a.op, gx, |out, dt| {
        let go = operand(go, dt)?;
        match dt {
            DType::F64 => scatter_planes::<f64>(a.op, &go, ids, out, (isz, osz)),
            _ => scatter_planes::<f32>(a.op, &go, ids, out, (isz, osz)),
        }
    })
}

fn scatter_planes<F: Real>(
    op: &str,
    go: &Tensor,
    ids: &[i64],
    out: &Tensor,
    (isz, osz): (usize, usize),
) -> Result<()> {
    let gs = elements::<F>(op, go)?;
    let os = elements_mut::<F>(op, out)?;
    let pairs: Vec<(&[F], &[i64])> = gs.chunks(osz.max(1)).zip(ids.chunks(osz.max(1))).collect();
    planes(&pairs, os, (1, isz), gs.len(), |p, o| {
        o.fill(F::default());
        let (g, ix) = p[0];
        for (&v, &i) in g.iter().zip(ix) {
            o[i as usize] += v;
        }
    });
    Ok(())
}

/// The window of output `(oy, ox)` of an average pooling clipped to the input, and its divisor.
fn avg_window(
    g: &Geometry,
    oy: usize,
    ox: usize,
    include_pad: bool,
    div: Option<i64>,
) -> ([usize; 4], f64) {
    let (y0, x0) = (start(oy, g.sh, g.ph), start(ox, g.sw, g.pw));
    let y1 = (y0 + g.kh as isize).min((g.h + g.ph) as isize);
    let x1 = (x0 + g.kw as isize).min((g.w + g.pw) as isize);
    let padded = ((y1 - y0) * (x1 - x0)) as f64;
    let (ya, xa) = (y0.max(0) as usize, x0.max(0) as usize);
    let (yb, xb) = (y1.min(g.h as isize) as usize, x1.min(g.w as isize) as usize);
    let d = match div {
        Some(d) => d as f64,
        None if include_pad => padded,
        None => (yb.saturating_sub(ya) * xb.saturating_sub(xa)) as f64,
    };
    ([ya, yb.max(ya), xa, xb.max(xa)], d)
}

pub(super) fn avg_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = window(a.op, a, 0, 1, false, 4)?;
    let include_pad = a.values.get(5).map_or(Ok(true), |_| a.bool(5))?;
    let div = divisor_override(a, 6)?;
    let x = a.tensor(0)?;
    with_compute(a.op, &outs[0], |out, dt| {
        let x = operand(x, dt)?;
        match dt {
            DType::F64 => avg_planes::<f64>(a.op, &g, &x, out, include_pad, div),
            _ => avg_planes::<f32>(a.op, &g, &x, out, include_pad, div),
        }
    })
}

fn avg_planes<F: Real>(
    op: &str,
    g: &Geometry,
    x: &Tensor,
    out: &Tensor,
    pad: bool,
    div: Option<i64>,
) -> Result<()> {
    let xs = elements::<F>(op, x)?;
    let os = elements_mut::<F>(op, out)?;
    let work = xs.len() * g.kh * g.kw / (g.sh * g.sw).max(1);
    planes(xs, os, (g.h * g.w, g.oh * g.ow), work, |plane, o| {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let ([ya, yb, xa, xb], d) = avg_window(g, oy, ox, pad, div);
                let mut sum = F::default();
                for iy in ya..yb {
                    for v in &plane[iy * g.w + xa..iy * g.w + xb] {
                        sum += *v;
                    }
                }
                o[oy * g.ow + ox] = sum / F::from_f64(d);
            }
        }
    });
    Ok(())
}

pub(super) fn avg_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let g = window(a.op, a, 1, 2, false, 5)?;
    let include_pad = a.bool(6)?;
    let div = divisor_override(a, 7)?;
    let go = a.tensor(0)?;
    with_compute(a.op, &outs[0], |out, dt| {
        let go = operand(go, dt)?;
        match dt {
            DType::F64 => avg_back_planes::<f64>(a.op, &g, &go, out, include_pad, div),
            _ => avg_back_planes::<f32>(a.op, &g, &go, out, include_pad, div),
        }
    })
}

fn avg_back_planes<F: Real>(
    op: &str,
    g: &Geometry,
    go: &Tensor,
    out: &Tensor,
    pad: bool,
    div: Option<i64>,
) -> Result<()> {
    let gs = elements::<F>(op, go)?;
    let os = elements_mut::<F>(op, out)?;
    let work = os.len() * g.kh * g.kw / (g.sh * g.sw).max(1);
    planes(gs, os, (g.oh * g.ow, g.h * g.w), work, |gp, o| {
        o.fill(F::default());
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let ([ya, yb, xa, xb], d) = avg_window(g, oy, ox, pad, div);
                let v = gp[oy * g.ow + ox] / F::from_f64(d);
                for iy in ya..yb {
                    for t in &mut o[iy * g.w + xa..iy * g.w + xb] {
                        *t += v;
                    }
                }
            }
        }
    });
    Ok(())
}

/// Adaptive window `[floor(i * n / m), ceil((i + 1) * n / m))` of output `i` of `m` over `n`.
fn adaptive_range(i: usize, m: usize, n: usize) -> (usize, usize) {
    (i * n / m, ((i + 1) * n).div_ceil(m))
}

pub(super) fn adaptive_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let g = adaptive(a.op, x, output_size(a)?)?;
    with_compute(a.op, &outs[0], |out, dt| {
        let x = operand(x, dt)?;
        match dt {
            DType::F64 => adaptive_planes::<f64>(a.op, &g, &x, out),
            _ => adaptive_planes::<f32>(a.op, &g, &x, out),
        }
    })
}

fn adaptive_planes<F: Real>(op: &str, g: &Geometry, x: &Tensor, out: &Tensor) -> Result<()> {
    let xs = elements::<F>(op, x)?;
    let os = elements_mut::<F>(op, out)?;
    planes(xs, os, (g.h * g.w, g.oh * g.ow), xs.len(), |plane, o| {
        for oy in 0..g.oh {
            let (ya, yb) = adaptive_range(oy, g.oh, g.h);
            for ox in 0..g.ow {
                let (xa, xb) = adaptive_range(ox, g.ow, g.w);
                let mut sum = F::default();
                for iy in ya..yb {
                    for v in &plane[iy * g.w + xa..iy * g.w + xb] {
                        sum += *v;
                    }
                }
                // Divided by the window's height, then its width (PyTorch's order).
                o[oy * g.ow + ox] =
                    sum / F::from_f64((yb - ya) as f64) / F::from_f64((xb - xa) as f64);
            }
        }
    });
    Ok(())
}

pub(super) fn adaptive_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (go, x) = (a.tensor(0)?, a.tensor(1)?);
    let s = go.shape();
    let g = adaptive(a.op, x, [s[s.len() - 2], s[s.len() - 1]])?;
    with_compute(a.op, &outs[0], |out, dt| {
        let go = operand(go, dt)?;
        match dt {
            DType::F64 => adaptive_back_planes::<f64>(a.op, &g, &go, out),
            _ => adaptive_back_planes::<f32>(a.op, &g, &go, out),
        }
    })
}

fn adaptive_back_planes<F: Real>(op: &str, g: &Geometry, go: &Tensor, out: &Tensor) -> Result<()> {
    let gs = elements::<F>(op, go)?;
    let os = elements_mut::<F>(op, out)?;
    planes(gs, os, (g.oh * g.ow, g.h * g.w), os.len(), |gp, o| {
        o.fill(F::default());
        for oy in 0..g.oh {
            let (ya, yb) = adaptive_range(oy, g.oh, g.h);
            for ox in 0..g.ow {
                let (xa, xb) = adaptive_range(ox, g.ow, g.w);
                let v = gp[oy * g.ow + ox]
                    / F::from_f64((yb - ya) as f64)
                    / F::from_f64((xb - xa) as f64);
                for iy in ya..yb {
                    for t in &mut o[iy * g.w + xa..iy * g.w + xb] {
                        *t += v;
                    }
                }
            }
        }
    });
    Ok(())
}
