//! Typed elementwise loops over [`Nest`](super::iter::Nest): one, two or three inputs into one
//! output. The per-run loops (with their slice fast paths and the aliasing rules of in-place ops)
//! live in [`raw`](super::raw); this file only pairs tensors with nest offsets.

use tensorplay_ir::Result;
use tensorplay_ir::shape::broadcast_strides;
use tensorplay_math::bulk::{BinaryFn, UnaryFn};

use super::iter::Nest;
use super::raw::{self, Operand, SendPtr};
use crate::element::Element;
use crate::tensor::Tensor;

fn strides_for(op: &str, t: &Tensor, out: &Tensor) -> Result<smallvec::SmallVec<[isize; 6]>> {
    broadcast_strides(op, t.shape(), t.strides(), out.shape())
}

/// Base address of `t`'s element `[0, .., 0]` as a `T` pointer.
fn base<T: Element>(op: &str, t: &Tensor) -> Result<SendPtr<T>> {
    debug_assert!(t.dtype() == T::DTYPE);
    Ok(SendPtr(t.data_ptr(op)?.cast::<T>()))
}

/// Operand `k` of a run at nest offset `off` with inner stride `stride`.
///
/// # Safety
/// `off` comes from a [`Nest`] built from this operand's (broadcast) strides and its tensor's
/// shape, so the address lies inside the tensor's storage.
#[inline(always)]
unsafe fn operand<T>(p: SendPtr<T>, off: isize, stride: isize) -> Operand<T> {
    Operand {
        // SAFETY: the caller's offset is inside the allocation.
        ptr: unsafe { p.at(off) },
        stride,
    }
}

// SAFETY: (shared by the three maps below) every operand's nest offsets and inner strides come from
// `Nest::new` over the output's shape with strides broadcast to it, so each run's elements lie
// inside its tensor's live storage (the tensors are borrowed for the whole call). Inputs are
// initialised: they are op inputs, and a tensor's data is written before any op sees it (fresh
// outputs are fully written by their kernel before they are returned; `Tensor::empty` zero-fills).
// `Nest::run` hands each flat range of the output to exactly one thread, and an output with
// several elements at one address is rejected before any in-place write (`check_writable`), so no
// two threads write one element. Any overlap between output and inputs is handled by `raw`.

/// The element count when every operand is contiguous with the output's shape and the whole
/// range runs on this thread (what [`Nest::run`] would do after merging the dims into one): the
/// fast path of small eager ops, with no stride broadcasting and no nest to build.
fn flat_run(out: &Tensor, operands: &[&Tensor]) -> Option<usize> {
    let n = out.numel();
    let single = n < super::iter::PAR_MIN_ELEMS || crate::parallel::num_threads() == 1;
    (single
        && out.is_contiguous()
        && operands
            .iter()
            .all(|t| t.shape() == out.shape() && t.is_contiguous()))
    .then_some(n)
}

/// Calls `run` on every run of `out` paired with the same elements of `a` (broadcast to `out`'s
/// shape), splitting the output across the pool as [`Nest::run`] does, or as one run on this
/// thread when [`flat_run`] allows. Each run satisfies the `# Safety` conditions of the `raw`
/// loops (see the comment above `map1`).
fn each_run1<A: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    run: impl Fn(Operand<O>, Operand<A>, usize) + Sync,
) -> Result<()> {
    if let Some(n) = flat_run(out, &[a]) {
        let (po, pa) = (base::<O>(op, out)?, base::<A>(op, a)?);
        if n > 0 {
            // SAFETY: see the comment above `map1`; one run of all `n` contiguous elements.
            let (o, a) = unsafe { (operand(po, 0, 1), operand(pa, 0, 1)) };
            run(o, a, n);
        }
        return Ok(());
    }
    let sa = strides_for(op, a, out)?;
    let (po, pa) = (base::<O>(op, out)?, base::<A>(op, a)?);
    let nest = Nest::<2>::new(out.shape(), [out.strides(), &sa]);
    let [io, ia] = nest.inner_strides();
    nest.run(|[oo, oa], len| {
        // SAFETY: see the comment above `map1`.
        let (o, a) = unsafe { (operand(po, oo, io), operand(pa, oa, ia)) };
        run(o, a, len);
    });
    Ok(())
}

/// `out[i] = f(a[i])` with `a` broadcast to `out`'s shape. Dtypes must match `A` and `O`.
pub(crate) fn map1<A: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    f: impl Fn(A) -> O + Sync,
) -> Result<()> {
    each_run1(op, out, a, |o, a, len| {
        // SAFETY: `each_run1` hands out runs that meet `run1`'s conditions.
        unsafe { raw::run1(o, a, len, &f) }
    })
}

/// `out[i] = store(k(load(a[i])))` with `a` broadcast to `out`'s shape, where `k` is a
/// math-library buffer kernel over f32 (see [`raw::run1_buffered`]). Dtypes must match `A` and
/// `O`.
pub(crate) fn map1_buffered<A: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    k: UnaryFn,
    load: impl Fn(A) -> f32 + Sync,
    store: impl Fn(f32) -> O + Sync,
) -> Result<()> {
    each_run1(op, out, a, |o, a, len| {
        // SAFETY: `each_run1` hands out runs that meet `run1_buffered`'s conditions; `k` is a
        // library kernel.
        unsafe { raw::run1_buffered(o, a, len, k, &load, &store) }
    })
}

/// The binary counterpart of [`each_run1`]: every run of `out` with the same elements of `a`
/// and `b` (broadcast to `out`'s shape).
fn each_run2<A: Element, B: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    b: &Tensor,
    run: impl Fn(Operand<O>, Operand<A>, Operand<B>, usize) + Sync,
) -> Result<()> {
    if let Some(n) = flat_run(out, &[a, b]) {
        let (po, pa, pb) = (base::<O>(op, out)?, base::<A>(op, a)?, base::<B>(op, b)?);
        if n > 0 {
            // SAFETY: see the comment above `map1`; one run of all `n` contiguous elements.
            let (o, a, b) = unsafe { (operand(po, 0, 1), operand(pa, 0, 1), operand(pb, 0, 1)) };
            run(o, a, b, n);
        }
        return Ok(());
    }
    let sa = strides_for(op, a, out)?;
    let sb = strides_for(op, b, out)?;
    let (po, pa, pb) = (base::<O>(op, out)?, base::<A>(op, a)?, base::<B>(op, b)?);
    let nest = Nest::<3>::new(out.shape(), [out.strides(), &sa, &sb]);
    let [io, ia, ib] = nest.inner_strides();
    nest.run(|[oo, oa, ob], len| {
        // SAFETY: see the comment above `map1`.
        let (o, a, b) = unsafe {
            (
                operand(po, oo, io),
                operand(pa, oa, ia),
                operand(pb, ob, ib),
            )
        };
        run(o, a, b, len);
    });
    Ok(())
}

/// `out[i] = f(a[i], b[i])` with broadcasting. `out` may be `a` itself (in-place ops).
pub(crate) fn map2<A: Element, B: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<()> {
    each_run2(op, out, a, b, |o, a, b, len| {
        // SAFETY: `each_run2` hands out runs that meet `run2`'s conditions.
        unsafe { raw::run2(o, a, b, len, &f) }
    })
}

/// `out[i] = k(a[i], b[i])` over f32 values with broadcasting, where `k` is a math-library
/// buffer kernel (see [`raw::run2_buffered`]); `load`/`store` convert from and to the tensors'
/// element type. `out` may be `a` itself.
pub(crate) fn map2_buffered<T: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    b: &Tensor,
    k: BinaryFn,
    load: impl Fn(T) -> f32 + Sync,
    store: impl Fn(f32) -> T + Sync,
) -> Result<()> {
    each_run2(op, out, a, b, |o, a, b, len| {
        // SAFETY: `each_run2` hands out runs that meet `run2_buffered`'s conditions; `k` is a
        // library kernel.
        unsafe { raw::run2_buffered(o, a, b, len, k, &load, &store) }
    })
}

/// `out[i] = f(a[i], b[i], c[i])` with broadcasting (used by `where`).
pub(crate) fn map3<A: Element, B: Element, C: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    f: impl Fn(A, B, C) -> O + Sync,
) -> Result<()> {
    let sa = strides_for(op, a, out)?;
    let sb = strides_for(op, b, out)?;
    let sc = strides_for(op, c, out)?;
    let (po, pa) = (base::<O>(op, out)?, base::<A>(op, a)?);
    let (pb, pc) = (base::<B>(op, b)?, base::<C>(op, c)?);
    let nest = Nest::<4>::new(out.shape(), [out.strides(), &sa, &sb, &sc]);
    let [io, ia, ib, ic] = nest.inner_strides();
    nest.run(|[oo, oa, ob, oc], len| {
        // SAFETY: see the comment above `map1`.
        unsafe {
            raw::run3(
                operand(po, oo, io),
                operand(pa, oa, ia),
                operand(pb, ob, ib),
                operand(pc, oc, ic),
                len,
                &f,
            )
        }
    });
    Ok(())
}
