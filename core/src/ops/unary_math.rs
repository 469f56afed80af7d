//! More unary math (issue 12): base-2/base-10 logarithms, `exp2`, inverse and hyperbolic
//! trigonometry, `tan`, `trunc` and `frac`.
//!
//! The libm functions ([`LibmFn`]) compute in f64 and round once, in eager kernels and in
//! compiled code alike (`ScalarOp::Libm`), so an f32 result is correctly rounded in practice and
//! compiled == eager bit for bit. Dtype rules are PyTorch's: integer and bool inputs compute in
//! f32; f16/bf16 compute in f32 and round once per element. `trunc` keeps integers; `frac` is
//! floating only (as in PyTorch).

use tensorplay_ir::graph::Attr;
use tensorplay_ir::{Error, LibmFn, OpClass, Result, ScalarExpr, ScalarOp};

use super::unary::{BoolRule, IntRule, UnaryMath, dtype_rule, unary_fill, unary_meta};
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::tensor::Tensor;
use crate::value::Args;

/// `ln 2` and `ln 10`, for the logarithms' derivatives.
const LN_2: f64 = std::f64::consts::LN_2;
const LN_10: f64 = std::f64::consts::LN_10;

/// Declares a unary op over a [`UnaryMath`] type: the math type, the `OpDef` and the method.
macro_rules! math_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident,
     int = $rule:ident, bool = $bool:ident, f32 = $f32:expr, f64 = $f64:expr,
     meta = $meta:expr, lower = $lower:expr, rule = $dtype:expr,
     grad = $grad:expr, saved = $saved:ident, autocast = $ac:ident) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl UnaryMath for $Math {
            const NAME: &'static str = $name;
            const INT: IntRule = IntRule::$rule;
            const BOOL: BoolRule = BoolRule::$bool;
            #[inline(always)]
            fn f32(x: f32) -> f32 {
                ($f32)(x)
            }
            #[inline(always)]
            fn f64(x: f64) -> f64 {
                ($f64)(x)
            }
        }
        #[doc = concat!("`", $name, "(Tensor self) -> Tensor`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: $meta,
                fill: unary_fill::<$Math>,
            },
            derivative: $grad,
            saved: Saved::$saved,
            lower: Lower::Pointwise(Pointwise::op($lower, $dtype)),
            autocast: AutocastPolicy::$ac,
            vmap: VmapRule::Derived,
        };
        impl Tensor {
            #[doc = concat!("Elementwise `", $name, "`.")]
            $(#[$attr])*
            pub fn $method(&self) -> Result<Tensor> {
                call1(&$STATIC, &[self.into()])
            }
        }
    };
}

/// Declares a libm op: f32 through f64 and rounded once, integers and bool in f32.
macro_rules! libm_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident, $f:ident,
     grad = $grad:expr, saved = $saved:ident, autocast = $ac:ident) => {
        math_op! {
            $(#[$attr])*
            $STATIC, $Math, $name, $method, int = Promote, bool = AsInt,
            f32 = |x: f32| LibmFn::$f.eval(x as f64) as f32, f64 = |x: f64| LibmFn::$f.eval(x),
            meta = unary_meta::<$Math>,
            lower = |_: &[&Attr]| Ok(ScalarExpr::unary(ScalarOp::Libm(LibmFn::$f))),
            rule = dtype_rule(IntRule::Promote, BoolRule::AsInt),
            grad = $grad, saved = $saved, autocast = $ac
        }
    };
}

/// The input of a unary call and the gradient of its output.
fn x_and_grad<'a>(c: &'a GradCtx) -> Result<(&'a Tensor, Tensor)> {
    Ok((c.args.tensor(0)?, c.grad(0)?))
}

/// `grad * f(x)`.
fn grad_times(
    c: &GradCtx,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = x_and_grad(c)?;
    Ok(vec![Some(g.mul(&f(x)?)?)])
}

/// `grad / f(x)`.
fn grad_over(
    c: &GradCtx,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = x_and_grad(c)?;
    Ok(vec![Some(g.div(&f(x)?)?)])
}

libm_op! {
    /// Base-2 logarithm: `log2(0) = -inf`, `log2(x < 0) = NaN`; integers compute in f32.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![8.0f32, 0.0, -1.0], &[3])?;
    /// let y = x.log2()?.to_vec::<f32>()?;
    /// assert_eq!((y[0], y[1]), (3.0, f32::NEG_INFINITY));
    /// assert!(y[2].is_nan());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    LOG2, Log2, "log2", log2, Log2,
    grad = Some(|c| grad_over(c, |x| x.mul_scalar(LN_2))), saved = Inputs, autocast = F32
}

libm_op! {
    /// Base-10 logarithm: `log10(0) = -inf`, `log10(x < 0) = NaN`.
    LOG10, Log10, "log10", log10, Log10,
    grad = Some(|c| grad_over(c, |x| x.mul_scalar(LN_10))), saved = Inputs, autocast = F32
}

libm_op! {
    /// `2^x`: `exp2(-inf) = 0`, overflow gives inf.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![3i64, -1], &[2])?;
    /// assert_eq!(x.exp2()?.to_vec::<f32>()?, vec![8.0, 0.5]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    EXP2, Exp2, "exp2", exp2, Exp2,
    grad = Some(|c| {
        let g = c.grad(0)?;
        Ok(vec![Some(g.mul(&c.outputs[0].mul_scalar(LN_2)?)?)])
    }), saved = Outputs, autocast = Keep
}

libm_op! {
    /// Tangent (of the argument in radians; `tan(±0) = ±0`, `tan(±inf) = NaN`).
    TAN, Tan, "tan", tan, Tan,
    // 1 + tan^2
    grad = Some(|c| {
        let g = c.grad(0)?;
        let o = &c.outputs[0];
        Ok(vec![Some(g.mul(&o.mul(o)?.add_scalar(1.0)?)?)])
    }), saved = Outputs, autocast = F32
}

libm_op! {
    /// Arcsine: NaN outside [-1, 1].
    ASIN, Asin, "asin", asin, Asin,
    // 1 / sqrt(1 - x^2)
    grad = Some(|c| grad_times(c, |x| x.mul(x)?.neg()?.add_scalar(1.0)?.rsqrt())),
    saved = Inputs, autocast = F32
}

libm_op! {
    /// Arccosine: NaN outside [-1, 1].
    ACOS, Acos, "acos", acos, Acos,
    // -1 / sqrt(1 - x^2)
    grad = Some(|c| grad_times(c, |x| x.mul(x)?.neg()?.add_scalar(1.0)?.rsqrt()?.neg())),
    saved = Inputs, autocast = F32
}

libm_op! {
    /// Arctangent: `atan(±inf) = ±pi/2`.
    ATAN, Atan, "atan", atan, Atan,
    grad = Some(|c| grad_over(c, |x| x.mul(x)?.add_scalar(1.0))), saved = Inputs, autocast = Keep
}

libm_op! {
    /// Hyperbolic sine (overflows to ±inf past about ±89.4 in f32).
    SINH, Sinh, "sinh", sinh, Sinh,
    grad = Some(|c| grad_times(c, Tensor::cosh)), saved = Inputs, autocast = F32
}

libm_op! {
    /// Hyperbolic cosine: `cosh(±inf) = inf`.
    COSH, Cosh, "cosh", cosh, Cosh,
    grad = Some(|c| grad_times(c, Tensor::sinh)), saved = Inputs, autocast = F32
}

libm_op! {
    /// Inverse hyperbolic sine.
    ASINH, Asinh, "asinh", asinh, Asinh,
    // 1 / sqrt(x^2 + 1)
    grad = Some(|c| grad_times(c, |x| x.mul(x)?.add_scalar(1.0)?.rsqrt())),
    saved = Inputs, autocast = Keep
}

libm_op! {
    /// Inverse hyperbolic cosine: NaN below 1, `acosh(1) = 0`.
    ACOSH, Acosh, "acosh", acosh, Acosh,
    // 1 / sqrt(x^2 - 1)
    grad = Some(|c| grad_times(c, |x| x.mul(x)?.sub_scalar(1.0)?.rsqrt())),
    saved = Inputs, autocast = Keep
}

libm_op! {
    /// Inverse hyperbolic tangent: `atanh(±1) = ±inf`, NaN outside [-1, 1].
    ATANH, Atanh, "atanh", atanh, Atanh,
    // 1 / (1 - x^2)
    grad = Some(|c| grad_over(c, |x| x.mul(x)?.neg()?.add_scalar(1.0))), saved = Inputs,
    autocast = Keep
}

libm_op! {
    /// Normalized sinc, `sin(pi x) / (pi x)` with `sinc(0) = 1` (PyTorch's `sinc`), computed in
    /// f64 and rounded once; integers compute in f32.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 0.5, 1.0], &[3])?;
    /// let y = x.sinc()?.to_vec::<f64>()?;
    /// assert_eq!(y[0], 1.0);
    /// assert!((y[1] - 2.0 / std::f64::consts::PI).abs() < 1e-15);
    /// assert!(y[2].abs() < 1e-15);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    SINC, Sinc, "sinc", sinc, Sinc,
    grad = Some(|c| grad_times(c, sinc_slope)), saved = Inputs, autocast = Keep
}

/// `d sinc / dx = (cos(pi x) - sinc(x)) / x`, 0 at `x = 0` (where sinc has its maximum).
fn sinc_slope(x: &Tensor) -> Result<Tensor> {
    let slope = x
        .mul_scalar(std::f64::consts::PI)?
        .cos()?
        .sub(&x.sinc()?)?
        .div(x)?;
    Tensor::where_cond(&x.eq_scalar(0.0)?, &Tensor::zeros_like(&slope), &slope)
}

/// `trunc(x)` as `where(x < 0, ceil(x), floor(x))`: exact, `-0.0` and NaN kept as eager's
/// `f32::trunc` keeps them; integers pass through floor/ceil unchanged.
fn trunc_expr(x: ScalarExpr) -> ScalarExpr {
    ScalarExpr::op(
        ScalarOp::Where,
        [
            ScalarExpr::op(ScalarOp::Lt, [x.clone(), ScalarExpr::lit(0.0)]),
            ScalarExpr::op(ScalarOp::Ceil, [x.clone()]),
            ScalarExpr::op(ScalarOp::Floor, [x]),
        ],
    )
}

math_op! {
    /// Round toward zero; integers are copied unchanged (bool is a dtype error).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-1.5f32, 2.7, -0.25], &[3])?;
    /// let y = x.trunc()?.to_vec::<f32>()?;
    /// assert_eq!(y, vec![-1.0, 2.0, -0.0]);
    /// assert!(y[2].is_sign_negative());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    TRUNC, Trunc, "trunc", trunc, int = Identity, bool = Reject,
    f32 = f32::trunc, f64 = f64::trunc, meta = unary_meta::<Trunc>,
    lower = |_: &[&Attr]| Ok(trunc_expr(ScalarExpr::arg(0))),
    rule = dtype_rule(IntRule::Identity, BoolRule::Reject),
    grad = Some(|c| Ok(vec![Some(Tensor::zeros_like(c.args.tensor(0)?))])), saved = Nothing,
    autocast = Keep
}

/// `frac`'s meta rule: floating inputs only (PyTorch has no integer `frac`).
fn frac_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            "frac",
            format!("expected a floating point tensor, got {}", x.dtype()),
        ));
    }
    unary_meta::<Frac>(a)
}

math_op! {
    /// `x - trunc(x)`, with the sign of `x`: `frac(-1.25) = -0.25`, `frac(±inf) = NaN`.
    /// Floating tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-1.25f64, 3.5], &[2])?;
    /// assert_eq!(x.frac()?.to_vec::<f64>()?, vec![-0.25, 0.5]);
    /// assert!(Tensor::from_vec(vec![1i64], &[1])?.frac().is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    FRAC, Frac, "frac", frac, int = Identity, bool = Reject,
    f32 = |x: f32| x - x.trunc(), f64 = |x: f64| x - x.trunc(), meta = frac_meta,
    lower = |_: &[&Attr]| {
        let x = ScalarExpr::arg(0);
        Ok(ScalarExpr::op(ScalarOp::Sub, [x.clone(), trunc_expr(x)]))
    },
    rule = DTypeRule::FloatOnly,
    grad = Some(|c| Ok(vec![Some(c.grad(0)?)])), saved = Nothing, autocast = Keep
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &LOG2, &LOG10, &EXP2, &TAN, &ASIN, &ACOS, &ATAN, &SINH, &COSH, &ASINH, &ACOSH, &ATANH, &SINC,
    &TRUNC, &FRAC,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_results_are_the_f64_function_rounded_once() {
        for x in [0.3f32, -0.7, 2.5, 1e-30, 80.0] {
            assert_eq!(Tan::f32(x), (x as f64).tan() as f32);
            assert_eq!(Sinh::f32(x), (x as f64).sinh() as f32);
            assert_eq!(Log2::f32(x.abs()), (x.abs() as f64).log2() as f32);
        }
    }
}
