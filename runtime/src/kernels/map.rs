//! Typed elementwise loops over [`Nest`](super::iter::Nest): one, two or three inputs into one
//! output, each with a unit-stride fast path the compiler auto-vectorizes.

use tensorplay_ir::Result;
use tensorplay_ir::shape::broadcast_strides;

use super::iter::{Nest, SendPtr};
use crate::element::Element;
use crate::tensor::Tensor;

fn strides_for(op: &str, t: &Tensor, out: &Tensor) -> Result<smallvec::SmallVec<[isize; 6]>> {
    broadcast_strides(op, t.shape(), t.strides(), out.shape())
}

/// `out[i] = f(a[i])` with `a` broadcast to `out`'s shape. Dtypes must match `A` and `O`.
pub(crate) fn map1<A: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    f: impl Fn(A) -> O + Sync,
) -> Result<()> {
    debug_assert!(a.dtype() == A::DTYPE && out.dtype() == O::DTYPE);
    let sa = strides_for(op, a, out)?;
    let po = SendPtr(out.data_ptr(op)? as *mut O);
    let pa = SendPtr(a.data_ptr(op)? as *mut A);
    let nest = Nest::<2>::new(out.shape(), [out.strides(), &sa]);
    let [io, ia] = nest.inner_strides();
    nest.run(|[oo, oa], len| unsafe {
        if io == 1 && ia == 1 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(x);
            }
        } else {
            for i in 0..len as isize {
                *po.at(oo + i * io) = f(*pa.at(oa + i * ia));
            }
        }
    });
    Ok(())
}

/// `out[i] = f(a[i], b[i])` with broadcasting.
pub(crate) fn map2<A: Element, B: Element, O: Element>(
    op: &str,
    out: &Tensor,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(A, B) -> O + Sync,
) -> Result<()> {
    debug_assert!(a.dtype() == A::DTYPE && b.dtype() == B::DTYPE && out.dtype() == O::DTYPE);
    let sa = strides_for(op, a, out)?;
    let sb = strides_for(op, b, out)?;
    let po = SendPtr(out.data_ptr(op)? as *mut O);
    let pa = SendPtr(a.data_ptr(op)? as *mut A);
    let pb = SendPtr(b.data_ptr(op)? as *mut B);
    let nest = Nest::<3>::new(out.shape(), [out.strides(), &sa, &sb]);
    let [io, ia, ib] = nest.inner_strides();
    nest.run(|[oo, oa, ob], len| unsafe {
        if io == 1 && ia == 1 && ib == 1 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            let y = std::slice::from_raw_parts(pb.at(ob), len);
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = f(x, y);
            }
        } else if io == 1 && ia == 1 && ib == 0 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            let y = *pb.at(ob);
            for (o, &x) in o.iter_mut().zip(x) {
                *o = f(x, y);
            }
        } else if io == 1 && ia == 0 && ib == 1 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = *pa.at(oa);
            let y = std::slice::from_raw_parts(pb.at(ob), len);
            for (o, &y) in o.iter_mut().zip(y) {
                *o = f(x, y);
            }
        } else {
            for i in 0..len as isize {
                *po.at(oo + i * io) = f(*pa.at(oa + i * ia), *pb.at(ob + i * ib));
            }
        }
    });
    Ok(())
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
    debug_assert!(
        a.dtype() == A::DTYPE
            && b.dtype() == B::DTYPE
            && c.dtype() == C::DTYPE
            && out.dtype() == O::DTYPE
    );
    let sa = strides_for(op, a, out)?;
    let sb = strides_for(op, b, out)?;
    let sc = strides_for(op, c, out)?;
    let po = SendPtr(out.data_ptr(op)? as *mut O);
    let pa = SendPtr(a.data_ptr(op)? as *mut A);
    let pb = SendPtr(b.data_ptr(op)? as *mut B);
    let pc = SendPtr(c.data_ptr(op)? as *mut C);
    let nest = Nest::<4>::new(out.shape(), [out.strides(), &sa, &sb, &sc]);
    let [io, ia, ib, ic] = nest.inner_strides();
    nest.run(|[oo, oa, ob, oc], len| unsafe {
        if io == 1 && ia == 1 && ib == 1 && ic == 1 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            let y = std::slice::from_raw_parts(pb.at(ob), len);
            let z = std::slice::from_raw_parts(pc.at(oc), len);
            for (((o, &x), &y), &z) in o.iter_mut().zip(x).zip(y).zip(z) {
                *o = f(x, y, z);
            }
        } else if io == 1 && ia == 1 && ib == 1 && ic == 0 {
            // `where(cond, grad, 0)`: one operand is a broadcast scalar.
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            let y = std::slice::from_raw_parts(pb.at(ob), len);
            let z = *pc.at(oc);
            for ((o, &x), &y) in o.iter_mut().zip(x).zip(y) {
                *o = f(x, y, z);
            }
        } else if io == 1 && ia == 1 && ib == 0 && ic == 1 {
            let o = std::slice::from_raw_parts_mut(po.at(oo), len);
            let x = std::slice::from_raw_parts(pa.at(oa), len);
            let y = *pb.at(ob);
            let z = std::slice::from_raw_parts(pc.at(oc), len);
            for ((o, &x), &z) in o.iter_mut().zip(x).zip(z) {
                *o = f(x, y, z);
            }
        } else {
            for i in 0..len as isize {
                *po.at(oo + i * io) = f(
                    *pa.at(oa + i * ia),
                    *pb.at(ob + i * ib),
                    *pc.at(oc + i * ic),
                );
            }
        }
    });
    Ok(())
}
