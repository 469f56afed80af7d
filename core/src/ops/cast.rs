//! Dtype conversion and copies.

use tensorplay_ir::{DType, Error, OpClass, Result};

use super::lowering::expr;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::element::cast;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};
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

/// The largest finite value of a floating dtype, as f64.
fn float_max(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 65504.0,
        DType::BF16 => f32::from_bits(0x7F7F_0000) as f64,
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

/// PyTorch's checked scalar conversion (`Scalar::to<T>()`): a Rust scalar that `dtype` cannot
/// hold is an argument error of `op`'s `arg`, not a silent inf, saturation or wrap. Floats
/// accept ±inf, NaN and every value whose magnitude is at most their largest finite value
/// (`65504.0` for f16: `65505.0` is an error, as in PyTorch, although it would round to
/// 65504); integers accept integers within their range
/// and finite floats whose value lies within it (`1.5` truncates to 1); NaN and ±inf are errors
/// for integers; bool accepts everything (nonzero is true).
///
/// ```
/// use tensorplay_core::{Tensor, DType};
/// assert!(Tensor::try_full(&[2], 70000.0, DType::F16).is_err());
/// assert!(Tensor::try_full(&[2], f64::INFINITY, DType::F16).is_ok());
/// assert!(Tensor::try_full(&[2], 1i64 << 40, DType::I32).is_err());
/// assert!(Tensor::try_full(&[2], f64::NAN, DType::I64).is_err());
/// ```
pub(crate) fn check_scalar_fits(op: &str, arg: &str, s: Scalar, dtype: DType) -> Result<()> {
    let fits = match (s, dtype) {
        (Scalar::Bool(_), _) | (_, DType::Bool) | (_, DType::F64) => true,
        (Scalar::Float(f), d) if d.is_float() => !f.is_finite() || f.abs() <= float_max(d),
        (Scalar::Int(i), d) if d.is_float() => (i as f64).abs() <= float_max(d),
        (Scalar::Float(f), DType::I32) => {
            f.is_finite() && f >= i32::MIN as f64 && f <= i32::MAX as f64
        }
        // 2^63 as f64 is above i64::MAX: `<` (i64::MAX as f64 rounds up to 2^63).
        (Scalar::Float(f), _) => f.is_finite() && f >= i64::MIN as f64 && f < i64::MAX as f64,
        (Scalar::Int(i), DType::I32) => i32::try_from(i).is_ok(),
        (Scalar::Int(_), _) => true,
    };
    if fits {
        return Ok(());
    }
    let range = match dtype {
        DType::I32 => "an integer-valued scalar within i32's range".to_string(),
        DType::I64 => "a finite scalar within i64's range".to_string(),
        d => format!(
            "a scalar within {d}'s range (|x| <= {}, or ±inf, NaN)",
            float_max(d)
        ),
    };
    let got = match s {
        Scalar::Float(f) => format!("{f:e} (overflows {dtype})"),
        Scalar::Int(i) => format!("{i} (overflows {dtype})"),
        Scalar::Bool(b) => b.to_string(),
    };
    Err(Error::argument(op, arg, range, got))
}
