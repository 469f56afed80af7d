//! Dtype conversion and copies.

use tensorplay_ir::{OpClass, Result};

use super::lowering::expr;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::element::cast;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::Args;
use crate::with_dtype;

/// `to.dtype(Tensor self, ScalarType dtype) -> Tensor`: a converted copy (PyTorch cast rules).
pub static TO_DTYPE: OpDef = OpDef {
    name: "to_dtype",
    schema: "to_dtype(Tensor self, ScalarType dtype) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: to_dtype_meta,
        fill: to_dtype_fill,
    },
    derivative: Some(to_dtype_grad),
    saved: Saved::Nothing,
    lower: Lower::Pointwise(Pointwise::op(expr::cast, DTypeRule::Cast)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `clone(Tensor self) -> Tensor`: a contiguous copy with the same dtype.
pub static CLONE: OpDef = OpDef {
    name: "clone",
    schema: "clone(Tensor self) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: clone_meta,
        fill: clone_fill,
    },
    derivative: Some(clone_grad),
    saved: Saved::Nothing,
    lower: Lower::Pointwise(Pointwise::op(expr::cast, DTypeRule::Cast)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every conversion op.
pub static OPS: &[&OpDef] = &[&TO_DTYPE, &CLONE];

fn to_dtype_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    Ok(vec![OutSpec::new(x.shape(), a.dtype(1)?)])
}

/// Copies `src` into `dst` elementwise (broadcasting `src`), converting dtypes.
pub(crate) fn copy_convert(op: &str, dst: &Tensor, src: &Tensor) -> Result<()> {
    with_dtype!(src.dtype(), S => {
        with_dtype!(dst.dtype(), D => {
            map1::<S, D>(op, dst, src, cast::<S, D>)
        })
    })
}

fn to_dtype_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    copy_convert(a.op, &outs[0], a.tensor(0)?)
}

fn to_dtype_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    if !x.dtype().is_float() {
        return Ok(vec![None]);
    }
    Ok(vec![Some(c.grad(0)?.to_dtype(x.dtype())?)])
}

fn clone_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

fn clone_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    with_dtype!(x.dtype(), T => map1::<T, T>(a.op, &outs[0], x, |v| v))
}

fn clone_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    Ok(vec![Some(c.grad(0)?)])
}
