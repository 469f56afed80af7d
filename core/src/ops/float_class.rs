//! Floating-point classification: `isnan`, `isinf`, `isfinite` (bool results) and `nan_to_num`.
//! Integer and bool inputs are never NaN or infinite (PyTorch's rule: `isfinite` is all true,
//! the others all false, `nan_to_num` copies).

use half::{bf16, f16};
use tensorplay_ir::graph::Attr;
use tensorplay_ir::{DType, OpClass, Result, ScalarExpr, ScalarOp};

use super::lowering::attr_f64;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// Same shape, bool dtype.
fn class_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    Ok(vec![OutSpec::new(x.shape(), DType::Bool)])
}

/// Maps a float predicate over argument 0 (halves through f32); non-float inputs give
/// `int_result` everywhere.
fn class_fill(a: Args, out: &Tensor, f: fn(f64) -> bool, int_result: bool) -> Result<()> {
    let x = a.tensor(0)?;
    let op = a.op;
    match x.dtype() {
        DType::F32 => map1::<f32, bool>(op, out, x, |v| f(v as f64)),
        DType::F64 => map1::<f64, bool>(op, out, x, f),
        DType::F16 => map1::<f16, bool>(op, out, x, |v| f(v.to_f64())),
        DType::BF16 => map1::<bf16, bool>(op, out, x, |v| f(v.to_f64())),
        DType::I32 => map1::<i32, bool>(op, out, x, |_| int_result),
        DType::I64 => map1::<i64, bool>(op, out, x, |_| int_result),
        DType::Bool => map1::<bool, bool>(op, out, x, |_| int_result),
    }
}

/// `x != x`.
fn isnan_expr(_: &[&Attr]) -> Result<ScalarExpr> {
    let x = ScalarExpr::arg(0);
    Ok(ScalarExpr::op(ScalarOp::Ne, [x.clone(), x]))
}

/// `|x| == inf` (integers compute in f32, where they are finite).
fn isinf_expr(_: &[&Attr]) -> Result<ScalarExpr> {
    let x = ScalarExpr::arg(0);
    Ok(ScalarExpr::op(
        ScalarOp::Eq,
        [
            ScalarExpr::op(ScalarOp::Abs, [x]),
            ScalarExpr::lit(f64::INFINITY),
        ],
    ))
}

/// `|x| < inf` (false for NaN).
fn isfinite_expr(_: &[&Attr]) -> Result<ScalarExpr> {
    let x = ScalarExpr::arg(0);
    Ok(ScalarExpr::op(
        ScalarOp::Lt,
        [
            ScalarExpr::op(ScalarOp::Abs, [x]),
            ScalarExpr::lit(f64::INFINITY),
        ],
    ))
}

/// Declares a classification op.
macro_rules! class_op {
    ($(#[$attr:meta])* $STATIC:ident, $name:literal, $method:ident, $f:expr, $int:expr,
     $expr:ident) => {
        #[doc = concat!("`", $name, "(Tensor self) -> Tensor`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: class_meta,
                fill: |a, outs| class_fill(a, &outs[0], $f, $int),
            },
            derivative: None,
            saved: Saved::Nothing,
            // Integers and bool compute in f32, where they are finite.
            lower: Lower::Pointwise(Pointwise::op($expr, DTypeRule::Float)),
            autocast: AutocastPolicy::Keep,
            vmap: VmapRule::Derived,
        };
        impl Tensor {
            $(#[$attr])*
            pub fn $method(&self) -> Result<Tensor> {
                call1(&$STATIC, &[self.into()])
            }
        }
    };
}

class_op! {
    /// Elementwise "is NaN" as a bool tensor (all false for integer and bool tensors).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![f32::NAN, 1.0, f32::INFINITY], &[3])?;
    /// assert_eq!(x.isnan()?.to_vec::<bool>()?, vec![true, false, false]);
    /// assert_eq!(x.isinf()?.to_vec::<bool>()?, vec![false, false, true]);
    /// assert_eq!(x.isfinite()?.to_vec::<bool>()?, vec![false, true, false]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    ISNAN, "isnan", isnan, f64::is_nan, false, isnan_expr
}

class_op! {
    /// Elementwise "is ±inf" as a bool tensor (all false for integer and bool tensors).
    ISINF, "isinf", isinf, f64::is_infinite, false, isinf_expr
}

class_op! {
    /// Elementwise "is neither NaN nor ±inf" (all true for integer and bool tensors).
    ISFINITE, "isfinite", isfinite, f64::is_finite, true, isfinite_expr
}

// ---- nan_to_num --------------------------------------------------------------------------------

/// The three replacement values of a `nan_to_num` call in `dtype` (absent infinities become the
/// dtype's largest and lowest finite values).
fn replacements(a: Args, dtype: DType) -> Result<(f64, f64, f64)> {
    let hi = match dtype {
        DType::F64 => f64::MAX,
        DType::F16 => f16::MAX.to_f64(),
        DType::BF16 => bf16::MAX.to_f64(),
        _ => f32::MAX as f64,
    };
    Ok((
        a.opt_float(1)?.unwrap_or(0.0),
        a.opt_float(2)?.unwrap_or(hi),
        a.opt_float(3)?.unwrap_or(-hi),
    ))
}

fn nan_to_num_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    replacements(a, x.dtype())?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

/// `v` with NaN, +inf and -inf replaced.
#[inline(always)]
fn replace<T: PartialEq + Copy>(v: T, nan: T, pos: T, neg: T, inf: T, ninf: T) -> T {
    #[allow(clippy::eq_op, reason = "v != v is the NaN test for a generic float")]
    if v != v {
        nan
    } else if v == inf {
        pos
    } else if v == ninf {
        neg
    } else {
        v
    }
}

fn nan_to_num_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (out, x, op) = (&outs[0], a.tensor(0)?, a.op);
    let (n, p, m) = replacements(a, x.dtype())?;
    match x.dtype() {
        DType::F32 => {
            let (n, p, m) = (n as f32, p as f32, m as f32);
            map1::<f32, f32>(op, out, x, |v| {
                replace(v, n, p, m, f32::INFINITY, f32::NEG_INFINITY)
            })
        }
        DType::F64 => map1::<f64, f64>(op, out, x, |v| {
            replace(v, n, p, m, f64::INFINITY, f64::NEG_INFINITY)
        }),
        // Values reach halves through f32, as compiled code (f32 registers) rounds them.
        DType::F16 => {
            let h = |v: f64| f16::from_f32(v as f32);
            let (n, p, m) = (h(n), h(p), h(m));
            map1::<f16, f16>(op, out, x, |v| {
                replace(v, n, p, m, f16::INFINITY, f16::NEG_INFINITY)
            })
        }
        DType::BF16 => {
            let h = |v: f64| bf16::from_f32(v as f32);
            let (n, p, m) = (h(n), h(p), h(m));
            map1::<bf16, bf16>(op, out, x, |v| {
                replace(v, n, p, m, bf16::INFINITY, bf16::NEG_INFINITY)
            })
        }
        DType::I32 => map1::<i32, i32>(op, out, x, |v| v),
        DType::I64 => map1::<i64, i64>(op, out, x, |v| v),
        DType::Bool => map1::<bool, bool>(op, out, x, |v| v),
    }
}

fn nan_to_num_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    Ok(ScalarExpr::unary(ScalarOp::NanToNum {
        nan: attr_f64("nan_to_num", "nan", attrs.first())?.unwrap_or(0.0),
        posinf: attr_f64("nan_to_num", "posinf", attrs.get(1))?,
        neginf: attr_f64("nan_to_num", "neginf", attrs.get(2))?,
    }))
}

/// `grad` where `x` is finite, else 0 (PyTorch's rule).
fn nan_to_num_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let keep = x.isfinite()?.to_dtype(g.dtype())?;
    Ok(vec![Some(g.mul(&keep)?)])
}

/// `nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor`
pub static NAN_TO_NUM: OpDef = OpDef {
    name: "nan_to_num",
    schema: "nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> \
             Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: nan_to_num_meta,
        fill: nan_to_num_fill,
    },
    derivative: Some(nan_to_num_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(nan_to_num_lowering, DTypeRule::Same)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Replaces NaN by `nan` (default 0), +inf by `posinf` and -inf by `neginf` (defaults: the
    /// dtype's largest and lowest finite values). Integer and bool tensors are copied.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.0], &[4])?;
    /// let y = x.nan_to_num(None, None, Some(-1.0))?.to_vec::<f32>()?;
    /// assert_eq!(y, vec![0.0, f32::MAX, -1.0, 2.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn nan_to_num(
        &self,
        nan: Option<f64>,
        posinf: Option<f64>,
        neginf: Option<f64>,
    ) -> Result<Tensor> {
        let opt = |v: Option<f64>| v.map_or(Value::None, Value::Float);
        call1(
            &NAN_TO_NUM,
            &[self.into(), opt(nan), opt(posinf), opt(neginf)],
        )
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&ISNAN, &ISINF, &ISFINITE, &NAN_TO_NUM];
