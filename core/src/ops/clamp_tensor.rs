//! `clamp` with tensor bounds (PyTorch's `clamp.Tensor`): `min(max(x, lo), hi)` elementwise,
//! the three operands broadcast and promote together. A NaN bound gives NaN, a NaN input stays
//! NaN, and `lo > hi` gives `hi` (as PyTorch's CPU kernel). Bool results are a dtype error.

use half::{bf16, f16};
use tensorplay_ir::graph::Attr;
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, OpClass, Result, ScalarExpr, ScalarOp};

use super::binary::{as_dtype, grad_for};
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::map3;
use crate::tensor::Tensor;
use crate::value::Args;

fn clamp_tensor_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, lo, hi) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let shape = broadcast_shapes("clamp_tensor", x.shape(), lo.shape())?;
    let shape = broadcast_shapes("clamp_tensor", &shape, hi.shape())?;
    let dtype = super::binary::result_type_of(&[x, lo, hi]);
    if dtype == DType::Bool {
        return Err(Error::dtype(
            "clamp_tensor",
            "bool tensors are not supported",
        ));
    }
    Ok(vec![OutSpec::new(&shape, dtype)])
}

/// `x < lo ? lo : x`, then `hi < v ? hi : v`; a NaN bound wins.
macro_rules! clamp3 {
    ($x:expr, $lo:expr, $hi:expr) => {{
        let (x, lo, hi) = ($x, $lo, $hi);
        #[allow(clippy::eq_op, reason = "v != v is the NaN test")]
        let (lo_nan, hi_nan) = (lo != lo, hi != hi);
        let v = if x < lo { lo } else { x };
        let v = if hi < v { hi } else { v };
        if lo_nan {
            lo
        } else if hi_nan {
            hi
        } else {
            v
        }
    }};
}

fn clamp_tensor_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    let d = out.dtype();
    let (x, lo, hi) = (
        as_dtype(a.tensor(0)?, d)?,
        as_dtype(a.tensor(1)?, d)?,
        as_dtype(a.tensor(2)?, d)?,
    );
    let op = a.op;
    match d {
        DType::F32 => map3::<f32, f32, f32, f32>(op, out, &x, &lo, &hi, |x, l, h| clamp3!(x, l, h)),
        DType::F64 => map3::<f64, f64, f64, f64>(op, out, &x, &lo, &hi, |x, l, h| clamp3!(x, l, h)),
        DType::F16 => map3::<f16, f16, f16, f16>(op, out, &x, &lo, &hi, |x, l, h| {
            f16::from_f32(clamp3!(x.to_f32(), l.to_f32(), h.to_f32()))
        }),
        DType::BF16 => map3::<bf16, bf16, bf16, bf16>(op, out, &x, &lo, &hi, |x, l, h| {
            bf16::from_f32(clamp3!(x.to_f32(), l.to_f32(), h.to_f32()))
        }),
        DType::I32 => map3::<i32, i32, i32, i32>(op, out, &x, &lo, &hi, |x, l, h| clamp3!(x, l, h)),
        DType::I64 => map3::<i64, i64, i64, i64>(op, out, &x, &lo, &hi, |x, l, h| clamp3!(x, l, h)),
        DType::Bool => Err(Error::dtype(
            "clamp_tensor",
            "bool tensors are not supported",
        )),
    }
}

/// The same comparisons and selects as [`clamp3`].
fn clamp_tensor_lowering(_: &[&Attr]) -> Result<ScalarExpr> {
    use ScalarOp::*;
    let (x, lo, hi) = (ScalarExpr::arg(0), ScalarExpr::arg(1), ScalarExpr::arg(2));
    let v = ScalarExpr::op(
        Where,
        [ScalarExpr::op(Lt, [x.clone(), lo.clone()]), lo.clone(), x],
    );
    let v = ScalarExpr::op(
        Where,
        [ScalarExpr::op(Lt, [hi.clone(), v.clone()]), hi.clone(), v],
    );
    let v = ScalarExpr::op(Where, [ScalarExpr::op(Ne, [hi.clone(), hi.clone()]), hi, v]);
    Ok(ScalarExpr::op(
        Where,
        [ScalarExpr::op(Ne, [lo.clone(), lo.clone()]), lo, v],
    ))
}

/// The gradient (PyTorch 2.15's rule) goes to `max` wherever `lo > hi` makes the result `hi`;
/// otherwise to `min` below it, to `max` above it, half to `self` and half to the bound that
/// `x` equals when it equals only one, and to `self` everywhere else.
fn clamp_tensor_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, lo, hi) = (c.args.tensor(0)?, c.args.tensor(1)?, c.args.tensor(2)?);
    let g = c.grad(0)?;
    let z = Tensor::zeros(&[], g.dtype());
    let half = g.mul_scalar(0.5)?;
    // min > max: the result is max. Else below min: min; above max: max; equal to exactly one
    // bound: half to self, half to that bound; otherwise (inside, equal to both, NaN): self.
    let crossed = lo.gt(hi)?;
    let kept = crossed.logical_not()?;
    let to_lo = kept.logical_and(&x.lt(lo)?)?;
    let to_hi = crossed.logical_or(&x.gt(hi)?)?;
    let tie_lo = kept.logical_and(&x.eq(lo)?)?.logical_and(&x.ne(hi)?)?;
    let tie_hi = kept.logical_and(&x.eq(hi)?)?.logical_and(&x.ne(lo)?)?;
    let to_x = to_lo
        .logical_or(&to_hi)?
        .logical_or(&tie_lo)?
        .logical_or(&tie_hi)?
        .logical_not()?;
    let part = |whole: &Tensor, tie: &Tensor, t: &Tensor| -> Result<Option<Tensor>> {
        if !t.requires_grad() {
            return Ok(None);
        }
        let shared = Tensor::where_cond(tie, &half, &z)?;
        grad_for(&Tensor::where_cond(whole, &g, &shared)?, t)
    };
    let ties = tie_lo.logical_or(&tie_hi)?;
    Ok(vec![
        part(&to_x, &ties, x)?,
        part(&to_lo, &tie_lo, lo)?,
        part(&to_hi, &tie_hi, hi)?,
    ])
}

/// `clamp_tensor(Tensor self, Tensor min, Tensor max) -> Tensor`
pub static CLAMP_TENSOR: OpDef = OpDef {
    name: "clamp_tensor",
    schema: "clamp_tensor(Tensor self, Tensor min, Tensor max) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: clamp_tensor_meta,
        fill: clamp_tensor_fill,
    },
    derivative: Some(clamp_tensor_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(clamp_tensor_lowering, DTypeRule::Promote)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Bounds every element to `[min, max]` given as tensors (PyTorch's `clamp(x, min_t,
    /// max_t)`): all three broadcast, the result has their promoted dtype; a NaN bound gives
    /// NaN, a NaN element stays NaN, and where `min > max` the result is `max`. Bool results
    /// are a dtype error. For one-sided bounds pass `-inf`/`inf` (or the integer extremes).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-2.0f32, 0.5, 3.0], &[3])?;
    /// let lo = Tensor::from_vec(vec![-1.0f32, 1.0, 0.0], &[3])?;
    /// let hi = Tensor::from_vec(vec![1.0f32], &[1])?;
    /// assert_eq!(x.clamp_tensor(&lo, &hi)?.to_vec::<f32>()?, vec![-1.0, 1.0, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn clamp_tensor(&self, min: &Tensor, max: &Tensor) -> Result<Tensor> {
        call1(&CLAMP_TENSOR, &[self.into(), min.into(), max.into()])
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&CLAMP_TENSOR];
