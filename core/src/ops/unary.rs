//! Unary elementwise ops. Each op is a zero-sized type implementing [`UnaryMath`]; the generic
//! meta/fill functions are instantiated per op, so the scalar function inlines into the loop.
//!
//! Dtype rules (PyTorch's): floating ops on integer or bool input compute in f32; f16/bf16
//! compute in f32 and round once per element; sign-preserving ops keep integer dtypes; rounding
//! ops copy integers unchanged.
//!
//! An op with an attribute (`gelu`'s `approximate`) gets one math type per attribute value and a
//! small meta/fill pair that validates the attribute and dispatches to the generic functions, so
//! every variant still runs its own monomorphized loop.

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

use half::{bf16, f16};
use tensorplay_ir::{DType, Error, OpClass, Result};
use tensorplay_math::MathFn;
use tensorplay_math::bulk::{self, BulkOp};

use super::lowering::expr;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::{map1, map1_buffered};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// What a unary op does with integer inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntRule {
    /// Convert to f32 and compute there (exp, sin, ...).
    Promote,
    /// Compute with [`UnaryMath::int`] in the input dtype (neg, abs, sign, relu, square).
    Map,
    /// Copy unchanged (floor, ceil, round of an integer).
    Identity,
}

/// What a unary op does with bool inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoolRule {
    /// A dtype error (neg, relu, floor...).
    Reject,
    /// Treated like an integer under the op's [`IntRule`]: f32 for `Promote`, otherwise computed
    /// on 0/1 and stored back as bool.
    AsInt,
    /// Converted to i64 first, so the result is i64 (square, like PyTorch's `pow(x, 2)`).
    ToI64,
}

/// The scalar definition of a unary op.
pub trait UnaryMath: 'static {
    const NAME: &'static str;
    const INT: IntRule;
    const BOOL: BoolRule = BoolRule::AsInt;
    /// The math-library function this op's f32 form is (its `f32` is then
    /// `MathFn::eval_f32`): f32, f16 and bf16 tensors run the library's vectorized buffer
    /// kernel, which returns the same bits as `f32` and as the compiler's fused code.
    const BULK: Option<MathFn> = None;
    fn f32(x: f32) -> f32;
    fn f64(x: f64) -> f64;
    /// Integer semantics (wrapping); only used when `INT == IntRule::Map`.
    fn int(x: i64) -> i64 {
        x
    }
}

fn out_dtype<M: UnaryMath>(d: DType) -> Result<DType> {
    if d == DType::Bool {
        match M::BOOL {
            BoolRule::Reject => {
                return Err(Error::dtype(M::NAME, "bool tensors are not supported"));
            }
            BoolRule::ToI64 => return Ok(DType::I64),
            BoolRule::AsInt => {}
        }
    }
    Ok(match (d.is_float(), M::INT) {
        (true, _) => d,
        (false, IntRule::Promote) => DType::F32,
        (false, _) => d,
    })
}

/// Meta rule shared by every unary op.
pub fn unary_meta<M: UnaryMath>(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    Ok(vec![OutSpec::new(x.shape(), out_dtype::<M>(x.dtype())?)])
}

/// Fill shared by every unary op.
pub fn unary_fill<M: UnaryMath>(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    let x = a.tensor(0)?;
    let x = if x.dtype() != out.dtype() {
        x.to_dtype(out.dtype())?
    } else {
        x.clone()
    };
    let op = a.op;
    // An op whose f32 form is a math-library function runs the library's buffer kernel (in stack
    // tiles for f16/bf16 and strided runs): the same bits as the per-element `M::f32` below.
    if let Some(k) = M::BULK.map(BulkOp::Math).and_then(bulk::eager_unary) {
        match out.dtype() {
            DType::F32 => return map1_buffered::<f32, f32>(op, out, &x, k, |v| v, |v| v),
            DType::F16 => return map1_buffered(op, out, &x, k, f16::to_f32, f16::from_f32),
            DType::BF16 => return map1_buffered(op, out, &x, k, bf16::to_f32, bf16::from_f32),
            _ => {}
        }
    }
    match out.dtype() {
        DType::F32 => map1::<f32, f32>(op, out, &x, M::f32),
        DType::F64 => map1::<f64, f64>(op, out, &x, M::f64),
        DType::F16 => map1::<f16, f16>(op, out, &x, |v| f16::from_f32(M::f32(v.to_f32()))),
        DType::BF16 => map1::<bf16, bf16>(op, out, &x, |v| bf16::from_f32(M::f32(v.to_f32()))),
        DType::I32 => match M::INT {
            IntRule::Map => map1::<i32, i32>(op, out, &x, |v| M::int(v as i64) as i32),
            _ => map1::<i32, i32>(op, out, &x, |v| v),
        },
        DType::I64 => match M::INT {
            IntRule::Map => map1::<i64, i64>(op, out, &x, M::int),
            _ => map1::<i64, i64>(op, out, &x, |v| v),
        },
        DType::Bool => match M::INT {
            IntRule::Map => map1::<bool, bool>(op, out, &x, |v| M::int(v as i64) != 0),
            _ => map1::<bool, bool>(op, out, &x, |v| v),
        },
    }
}

/// The compiler's dtype rule of a unary op with eager's integer and bool rules (so the two
/// cannot disagree).
pub const fn dtype_rule(int: IntRule, b: BoolRule) -> DTypeRule {
    match (int, b) {
        (IntRule::Promote, _) => DTypeRule::Float,
        (_, BoolRule::Reject) => DTypeRule::NoBool,
        (_, BoolRule::ToI64) => DTypeRule::BoolToI64,
        (_, BoolRule::AsInt) => DTypeRule::Same,
    }
}

/// `AutocastPolicy::Keep` unless a policy is named.
macro_rules! autocast_policy {
    () => {
        AutocastPolicy::Keep
    };
    ($ac:ident) => {
        AutocastPolicy::$ac
    };
}

/// Declares the zero-sized math type of a unary op.
/// `None`, or the [`MathFn`] a unary op's f32 form is.
macro_rules! bulk_math {
    () => {
        None
    };
    ($f:ident) => {
        Some(MathFn::$f)
    };
}

/// Declares the zero-sized math type of a unary op. `bulk = F` says its f32 form is the math
/// library's `F` (the f32 expression must then be `MathFn::F.eval_f32`).
macro_rules! unary_math {
    ($Math:ident, $name:literal, int = $rule:ident, bool = $bool:ident,
     f32 = $f32:expr, f64 = $f64:expr, int_fn = $int:expr $(, bulk = $bulk:ident)?) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl UnaryMath for $Math {
            const NAME: &'static str = $name;
            const INT: IntRule = IntRule::$rule;
            const BOOL: BoolRule = BoolRule::$bool;
            const BULK: Option<MathFn> = bulk_math!($($bulk)?);
            #[inline(always)]
            fn f32(x: f32) -> f32 {
                ($f32)(x)
            }
            #[inline(always)]
            fn f64(x: f64) -> f64 {
                ($f64)(x)
            }
            #[inline(always)]
            fn int(x: i64) -> i64 {
                ($int)(x)
            }
        }
    };
}

/// Declares a unary op: its math type, its `OpDef` static, its derivative and its method.
/// Attributes written before the static name (doc comments with examples) go on the method.
macro_rules! unary_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident,
     int = $rule:ident, bool = $bool:ident,
     f32 = $f32:expr, f64 = $f64:expr, int_fn = $int:expr, grad = $grad:expr, saved = $saved:ident
     $(, autocast = $ac:ident)? $(, bulk = $bulk:ident)?) => {
        unary_math!(
            $Math, $name, int = $rule, bool = $bool, f32 = $f32, f64 = $f64, int_fn = $int
            $(, bulk = $bulk)?
        );
        #[doc = concat!("`", $name, "(Tensor self) -> Tensor`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: unary_meta::<$Math>,
                fill: unary_fill::<$Math>,
            },
            derivative: $grad,
            saved: Saved::$saved,
            lower: Lower::Pointwise(Pointwise::op(
                expr::$method,
                dtype_rule(IntRule::$rule, BoolRule::$bool),
            )),
            autocast: autocast_policy!($($ac)?),
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

/// The input of a unary call and the gradient of its output.
fn x_and_grad<'a>(c: &'a GradCtx) -> Result<(&'a Tensor, Tensor)> {
    Ok((c.args.tensor(0)?, c.grad(0)?))
}

/// `grad * f(x)` for derivatives that depend on the input only.
fn grad_times(
    c: &GradCtx,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = x_and_grad(c)?;
    Ok(vec![Some(g.mul(&f(x)?)?)])
}

/// `grad * f(out)` for derivatives that are cheapest in terms of the output.
fn grad_times_out(
    c: &GradCtx,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Option<Tensor>>> {
    let g = c.grad(0)?;
    Ok(vec![Some(g.mul(&f(&c.outputs[0])?)?)])
}

/// The zero gradient of piecewise-constant ops (sign, floor, ceil, round).
fn zero_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    Ok(vec![Some(Tensor::zeros_like(c.args.tensor(0)?))])
}

fn id(x: i64) -> i64 {
    x
}

/// Numerically careful sigmoid: `exp` only ever sees `-|x|`, so nothing overflows and tiny
/// results for very negative `x` keep their precision (no `1 - 1` cancellation).
macro_rules! sigmoid_body {
    ($x:expr) => {{
        let x = $x;
        let e = (-x.abs()).exp();
        let r = 1.0 / (1.0 + e);
        if x >= 0.0 { r } else { e * r }
    }};
}

unary_op! {
    NEG, Neg, "neg", neg, int = Map, bool = Reject,
    f32 = |x: f32| -x, f64 = |x: f64| -x, int_fn = |x: i64| x.wrapping_neg(),
    grad = Some(|c| Ok(vec![Some(c.grad(0)?.neg()?)])), saved = Nothing
}

unary_op! {
    ABS, Abs, "abs", abs, int = Map, bool = AsInt,
    f32 = f32::abs, f64 = f64::abs, int_fn = |x: i64| x.wrapping_abs(),
    grad = Some(|c| grad_times(c, |x| x.sign())), saved = Inputs
}

unary_op! {
    EXP, Exp, "exp", exp, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Exp.eval_f32(x), f64 = f64::exp, int_fn = id,
    grad = Some(|c| grad_times_out(c, |o| Ok(o.clone()))), saved = Outputs, autocast = F32,
    bulk = Exp
}

unary_op! {
    SIGN, Sign, "sign", sign, int = Map, bool = AsInt,
    // `x + 0.0` turns -0.0 into 0.0 (PyTorch: sign(-0.0) = 0.0) and keeps NaN (a documented
    // deviation: PyTorch returns 0, which hides the NaN).
    f32 = |x: f32| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x + 0.0 },
    f64 = |x: f64| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x + 0.0 },
    int_fn = i64::signum,
    grad = Some(zero_grad), saved = Nothing
}

unary_op! {
    RELU, Relu, "relu", relu, int = Map, bool = Reject,
    // PyTorch's `clamp_min(x, 0)`: NaN propagates and -0.0 stays -0.0 (only x < 0 becomes 0).
    f32 = |x: f32| if x < 0.0 { 0.0 } else { x },
    f64 = |x: f64| if x < 0.0 { 0.0 } else { x },
    int_fn = |x: i64| x.max(0),
    grad = Some(|c| {
        let g = c.grad(0)?;
        let mask = c.outputs[0].gt_scalar(0.0)?;
        Ok(vec![Some(g.mul(&mask.to_dtype(g.dtype())?)?)])
    }), saved = Outputs
}

unary_op! {
    /// `log(0) = -inf`, `log(x < 0) = NaN`; integer input computes in f32.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let x = Tensor::from_vec(vec![1i64, 0, -1], &[3])?;
    /// let y = x.log()?;
    /// assert_eq!(y.dtype(), DType::F32);
    /// let v = y.to_vec::<f32>()?;
    /// assert_eq!((v[0], v[1]), (0.0, f32::NEG_INFINITY));
    /// assert!(v[2].is_nan());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    LOG, Log, "log", log, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Log.eval_f32(x), f64 = f64::ln, int_fn = id,
    grad = Some(|c| {
        let (x, g) = x_and_grad(c)?;
        Ok(vec![Some(g.div(x)?)])
    }), saved = Inputs, autocast = F32, bulk = Log
}

unary_op! {
    /// `log(1 + x)`, accurate for small `x`: `log1p(-1) = -inf`, `log1p(x < -1) = NaN`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1e-10f64, -1.0], &[2])?;
    /// assert_eq!(x.log1p()?.to_vec::<f64>()?, vec![1e-10f64.ln_1p(), f64::NEG_INFINITY]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    LOG1P, Log1p, "log1p", log1p, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Log1p.eval_f32(x), f64 = f64::ln_1p, int_fn = id,
    grad = Some(|c| {
        let (x, g) = x_and_grad(c)?;
        Ok(vec![Some(g.div(&x.add_scalar(1.0)?)?)])
    }), saved = Inputs, autocast = F32, bulk = Log1p
}

unary_op! {
    /// `exp(x) - 1`, accurate for small `x`: `expm1(-inf) = -1`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1e-10f64, f64::NEG_INFINITY], &[2])?;
    /// assert_eq!(x.expm1()?.to_vec::<f64>()?, vec![1e-10f64.exp_m1(), -1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    EXPM1, Expm1, "expm1", expm1, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Expm1.eval_f32(x), f64 = f64::exp_m1, int_fn = id,
    grad = Some(|c| grad_times_out(c, |o| o.add_scalar(1.0))), saved = Outputs, autocast = F32,
    bulk = Expm1
}

unary_op! {
    /// `sqrt(-0.0) = -0.0`, `sqrt(x < 0) = NaN`.
    SQRT, Sqrt, "sqrt", sqrt, int = Promote, bool = AsInt,
    f32 = f32::sqrt, f64 = f64::sqrt, int_fn = id,
    grad = Some(|c| {
        let g = c.grad(0)?;
        Ok(vec![Some(g.div(&c.outputs[0].mul_scalar(2.0)?)?)])
    }), saved = Outputs
}

unary_op! {
    /// `1 / sqrt(x)`: `rsqrt(0) = inf`, `rsqrt(-0.0) = -inf`.
    RSQRT, Rsqrt, "rsqrt", rsqrt, int = Promote, bool = AsInt,
    f32 = |x: f32| 1.0 / x.sqrt(), f64 = |x: f64| 1.0 / x.sqrt(), int_fn = id,
    grad = Some(|c| grad_times_out(c, |o| o.mul(o)?.mul(o)?.mul_scalar(-0.5))), saved = Outputs
}

unary_op! {
    /// `1 / x`: `reciprocal(±0) = ±inf`; integer input computes in f32.
    RECIPROCAL, Reciprocal, "reciprocal", reciprocal, int = Promote, bool = AsInt,
    f32 = |x: f32| 1.0 / x, f64 = |x: f64| 1.0 / x, int_fn = id,
    grad = Some(|c| grad_times_out(c, |o| o.mul(o)?.neg())), saved = Outputs
}

unary_op! {
    SIN, Sin, "sin", sin, int = Promote, bool = AsInt,
    f32 = f32::sin, f64 = f64::sin, int_fn = id,
    grad = Some(|c| grad_times(c, Tensor::cos)), saved = Inputs
}

unary_op! {
    COS, Cos, "cos", cos, int = Promote, bool = AsInt,
    f32 = f32::cos, f64 = f64::cos, int_fn = id,
    grad = Some(|c| grad_times(c, |x| x.sin()?.neg())), saved = Inputs
}

unary_op! {
    /// `tanh(±inf) = ±1`.
    TANH, Tanh, "tanh", tanh, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Tanh.eval_f32(x), f64 = f64::tanh, int_fn = id,
    // 1 - out^2 as (1 - out)(1 + out): no cancellation where |out| is near 1 (within an ulp
    // or two of PyTorch's fused 1 - out·out, where out·out rounded first loses hundreds)
    grad = Some(|c| grad_times_out(c, |o| o.neg()?.add_scalar(1.0)?.mul(&o.add_scalar(1.0)?))),
    saved = Outputs,
    bulk = Tanh
}

unary_op! {
    /// `1 / (1 + exp(-x))`, computed without overflow: `sigmoid(-1000) = 0`, `sigmoid(1000) = 1`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-1000.0f32, 0.0, 1000.0], &[3])?;
    /// assert_eq!(x.sigmoid()?.to_vec::<f32>()?, vec![0.0, 0.5, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    SIGMOID, Sigmoid, "sigmoid", sigmoid, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Sigmoid.eval_f32(x), f64 = |x: f64| sigmoid_body!(x), int_fn = id,
    // out * (1 - out)
    grad = Some(|c| grad_times_out(c, |o| o.mul(&o.neg()?.add_scalar(1.0)?))), saved = Outputs,
    bulk = Sigmoid
}

/// silu in f64 as PyTorch computes it, `x / (1 + exp(-x))`, except where `exp(-x)` overflows
/// (below about -709.8, where PyTorch's quotient is -0.0 although `x * exp(x)` is still
/// representable): there `exp(x)` is scaled by 2^64 until the last multiply, to round once.
pub(crate) fn silu_f64(x: f64) -> f64 {
    let d = 1.0 + (-x).exp();
    if d.is_finite() {
        x / d
    } else if x >= -1024.0 {
        x * exp_scaled(x, 0.0) * TWO_M64
    } else {
        // -0.0 (or NaN for -inf, as the quotient gives).
        x * x.exp()
    }
}

/// `64 ln 2` in two parts; the high part is a multiple of 2^-43, so adding it to an f64 of
/// magnitude in [512, 1024) (a multiple of 2^-43 too) is exact.
const LN2_X64_HI: f64 = 44.361_419_555_836_505;
/// `64 ln 2 - LN2_X64_HI`.
const LN2_X64_LO: f64 = -5.621_237_396_739_37e-15;
/// 2^-64, undoing [`exp_scaled`].
const TWO_M64: f64 = 1.0 / (1u128 << 64) as f64;

/// `exp(y + t) * 2^64` for `y` in [-1024, -512] and `|t| < 1e-12`: the scale keeps results that
/// end up subnormal at full precision until the caller's final multiply by [`TWO_M64`].
fn exp_scaled(y: f64, t: f64) -> f64 {
    let e = (y + LN2_X64_HI).exp();
    e.mul_add(t + LN2_X64_LO, e)
}

unary_op! {
    /// `x * sigmoid(x)`. `silu(-inf)` is NaN, as PyTorch's `x / (1 + exp(-x))` gives; far
    /// out where `exp(-x)` overflows the result is `x * exp(x)` rounded once (PyTorch gives
    /// -0.0 there). f32 is the math library's approximation (≤ 1.8 ulp), f64 the quotient.
    SILU, Silu, "silu", silu, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Silu.eval_f32(x), f64 = silu_f64, int_fn = id,
    // s * (1 + x * (1 - s)) with s = sigmoid(x)
    grad = Some(|c| grad_times(c, |x| {
        let s = x.sigmoid()?;
        s.mul(&x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?)
    })), saved = Inputs, bulk = Silu
}

unary_op! {
    /// The error function: f32 is the math library's approximation (≤ 1.8 ulp), f64 libm's
    /// (about 1 ulp).
    ERF, Erf, "erf", erf, int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::Erf.eval_f32(x), f64 = libm::erf, int_fn = id,
    // 2/sqrt(pi) * exp(-x^2)
    grad = Some(|c| grad_times(c, |x| x.mul(x)?.neg()?.exp()?.mul_scalar(FRAC_2_SQRT_PI))),
    saved = Inputs, bulk = Erf
}

unary_op! {
    /// Round toward -inf; integers are copied unchanged.
    FLOOR, Floor, "floor", floor, int = Identity, bool = Reject,
    f32 = f32::floor, f64 = f64::floor, int_fn = id,
    grad = Some(zero_grad), saved = Nothing
}

unary_op! {
    /// Round toward +inf; integers are copied unchanged.
    CEIL, Ceil, "ceil", ceil, int = Identity, bool = Reject,
    f32 = f32::ceil, f64 = f64::ceil, int_fn = id,
    grad = Some(zero_grad), saved = Nothing
}

unary_op! {
    /// Round half to even, like PyTorch: `round(0.5) = 0`, `round(1.5) = 2`, `round(-2.5) = -2`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.5f64, 1.5, -2.5, 2.6], &[4])?;
    /// assert_eq!(x.round()?.to_vec::<f64>()?, vec![0.0, 2.0, -2.0, 3.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    ROUND, Round, "round", round, int = Identity, bool = Reject,
    f32 = f32::round_ties_even, f64 = f64::round_ties_even, int_fn = id,
    grad = Some(zero_grad), saved = Nothing
}

unary_op! {
    /// `x * x`; integers wrap and keep their dtype, bool becomes i64 (PyTorch's `pow(x, 2)`).
    SQUARE, Square, "square", square, int = Map, bool = ToI64,
    f32 = |x: f32| x * x, f64 = |x: f64| x * x, int_fn = |x: i64| x.wrapping_mul(x),
    grad = Some(|c| grad_times(c, |x| x.mul_scalar(2.0))), saved = Inputs
}

// ---- gelu: one op, two math types selected by `approximate` -------------------------------------

/// `1 / sqrt 2 - FRAC_1_SQRT_2`: the rounding error of the f64 constant.
const FRAC_1_SQRT_2_LO: f64 = -4.833_646_656_726_457e-17;

/// Exact gelu in f64: `0.5 * x * (1 + erf(x / sqrt 2)) == 0.5 * x * erfc(-x / sqrt 2)`; the erfc
/// form keeps full relative precision for very negative x, where `1 + erf` cancels.
#[inline(always)]
fn gelu_erf(x: f64) -> f64 {
    if x < -36.0 {
        return tensorplay_math::shims::gelu_erf_far_tail(x);
    }
    let z = -x * FRAC_1_SQRT_2;
    let mut e = libm::erfc(z);
    if z > 1.0 {
        // erfc(z) ~ exp(-z^2) turns the rounding error of z into 2 z^2 ulps (1300 at x = -35):
        // add the first-order term of the part `zl` of `-x / sqrt 2` that z lost.
        let zl = (-x).mul_add(FRAC_1_SQRT_2, -z) + (-x) * FRAC_1_SQRT_2_LO;
        e -= FRAC_2_SQRT_PI * (-z * z).exp() * zl;
    }
    0.5 * x * e
}

/// Tanh-approximated gelu in f64: the math library's (`2u` in double-double, within 4 ulp of the
/// exact function; `x exp(2u)` rounded once where `exp(-2u)` overflows), which the compiler's
/// f64 shim calls too, so compiled f64 code agrees bit for bit.
#[inline(always)]
fn gelu_tanh(x: f64) -> f64 {
    tensorplay_math::shims::gelu_tanh_f64(x)
}

// f32 (and f16/bf16) gelu is the math library's approximation (≤ 2.1 ulp over all f32; its far
// tails are evaluated with extra precision, since erfc and exp are steep there), the same bits
// as compiled code; f64 uses the careful forms above.
unary_math! {
    GeluErf, "gelu", int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::GeluErf.eval_f32(x), f64 = gelu_erf, int_fn = id, bulk = GeluErf
}

unary_math! {
    GeluTanh, "gelu", int = Promote, bool = AsInt,
    f32 = |x: f32| MathFn::GeluTanh.eval_f32(x), f64 = gelu_tanh, int_fn = id, bulk = GeluTanh
}

/// What [`Tensor::gelu`] accepts: a [`GeluApproximate`] or the seed's string (`"none"`,
/// `"tanh"`; anything else is an argument error).
pub trait IntoGeluApproximate {
    fn into_gelu_approximate(self) -> Result<GeluApproximate>;
}

impl IntoGeluApproximate for GeluApproximate {
    fn into_gelu_approximate(self) -> Result<GeluApproximate> {
        Ok(self)
    }
}

impl IntoGeluApproximate for &str {
    fn into_gelu_approximate(self) -> Result<GeluApproximate> {
        GeluApproximate::parse(self)
    }
}

/// Which form of gelu a call asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluApproximate {
    /// The exact form `0.5 * x * (1 + erf(x / sqrt 2))` (`approximate="none"`).
    None,
    /// The tanh form `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
    Tanh,
}

impl GeluApproximate {
    /// Parses the `approximate` argument (`"none"` or `"tanh"`), naming `gelu` on errors.
    pub fn parse(s: &str) -> Result<GeluApproximate> {
        match s {
            "none" => Ok(GeluApproximate::None),
            "tanh" => Ok(GeluApproximate::Tanh),
            other => Err(Error::argument(
                "gelu",
                "approximate",
                "\"none\" or \"tanh\"",
                format!("{other:?}"),
            )),
        }
    }

    /// The seed's spelling (`"none"`, `"tanh"`).
    pub fn as_str(self) -> &'static str {
        match self {
            GeluApproximate::None => "none",
            GeluApproximate::Tanh => "tanh",
        }
    }

    /// The `approximate` argument of a gelu call (absent means `"none"`).
    fn of(a: Args) -> Result<GeluApproximate> {
        match a.values.get(1) {
            None | Some(Value::None) => Ok(GeluApproximate::None),
            Some(_) => GeluApproximate::parse(a.str(1)?),
        }
    }
}

fn gelu_meta(a: Args) -> Result<Vec<OutSpec>> {
    match GeluApproximate::of(a)? {
        GeluApproximate::None => unary_meta::<GeluErf>(a),
        GeluApproximate::Tanh => unary_meta::<GeluTanh>(a),
    }
}

fn gelu_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    match GeluApproximate::of(a)? {
        GeluApproximate::None => unary_fill::<GeluErf>(a, outs),
        GeluApproximate::Tanh => unary_fill::<GeluTanh>(a, outs),
    }
}

/// `gelu_backward(grad, x, approximate)`: one elementwise op (see `ops::gelu_backward`).
fn gelu_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let form = GeluApproximate::of(c.args)?;
    let (x, g) = x_and_grad(c)?;
    let args = [
        Value::Tensor(g),
        Value::Tensor(x.clone()),
        Value::Str(form.as_str().into()),
    ];
    Ok(vec![Some(call1(
        &super::gelu_backward::GELU_BACKWARD,
        &args,
    )?)])
}

/// `gelu(Tensor self, *, str approximate="none") -> Tensor`
pub static GELU: OpDef = OpDef {
    name: "gelu",
    schema: "gelu(Tensor self, *, str approximate=\"none\") -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: gelu_meta,
        fill: gelu_fill,
    },
    derivative: Some(gelu_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(expr::gelu, DTypeRule::Float)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Gaussian error linear unit; `approximate` is [`GeluApproximate::None`] (erf form) or
    /// [`GeluApproximate::Tanh`], or the seed's `"none"`/`"tanh"`; any other string is an
    /// argument error.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, ops::GeluApproximate};
    /// let x = Tensor::from_vec(vec![-1.0f64, 0.0, 2.0], &[3])?;
    /// let exact = x.gelu(GeluApproximate::None)?.to_vec::<f64>()?;
    /// let approx = x.gelu("tanh")?.to_vec::<f64>()?;
    /// assert_eq!(x.gelu(GeluApproximate::Tanh)?.to_vec::<f64>()?, approx);
    /// assert!((exact[2] - 1.954_499_736_103_642).abs() < 1e-12);
    /// assert!((approx[2] - exact[2]).abs() < 1e-3);
    /// assert!(x.gelu("fast").is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn gelu(&self, approximate: impl IntoGeluApproximate) -> Result<Tensor> {
        let approximate = approximate.into_gelu_approximate()?;
        call1(&GELU, &[self.into(), approximate.as_str().into()])
    }
}

/// Every unary op of this family.
pub static OPS: &[&OpDef] = &[
    &NEG,
    &ABS,
    &EXP,
    &SIGN,
    &RELU,
    &LOG,
    &LOG1P,
    &EXPM1,
    &SQRT,
    &RSQRT,
    &RECIPROCAL,
    &SIN,
    &COS,
    &TANH,
    &SIGMOID,
    &GELU,
    &SILU,
    &ERF,
    &FLOOR,
    &CEIL,
    &ROUND,
    &SQUARE,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// `|got - want|` in units of the last place of `want` (subnormal spacing down there).
    fn ulps(got: f64, want: f64) -> f64 {
        let a = want.abs();
        (got - want).abs() / (f64::from_bits(a.to_bits() + 1) - a)
    }

    // References below: the exact functions evaluated to 60 digits and rounded once.

    #[test]
    fn silu_tail_is_not_flushed_to_zero() {
        let silu_f32 = Silu::f32;
        assert_eq!(silu_f32(-100.0), -3.72e-42);
        assert_eq!(silu_f32(-95.5), -3.198_02e-40);
        assert!(ulps(silu_f64(-720.0), -1.463_206_177_745_47e-310) <= 1.0);
        assert!(ulps(silu_f64(-745.5), -1.275e-321) <= 1.0);
        assert!(ulps(silu_f64(-750.0), -1.5e-323) <= 1.0);
        // Far enough out, -0.0; NaN for -inf, as before.
        assert_eq!(silu_f64(-800.0).to_bits(), (-0.0f64).to_bits());
        assert!(silu_f64(f64::NEG_INFINITY).is_nan());
        assert!(silu_f32(f32::NEG_INFINITY).is_nan());
        // Within the library's bound where exp(-x) is finite.
        let want = -3.0 / (1.0 + 3f64.exp());
        assert!(ulps(silu_f32(-3.0) as f64, want) <= 2.0 * (1u64 << 29) as f64);
    }

    #[test]
    fn gelu_erf_tail_keeps_full_precision() {
        // Eager's former `0.5 x erfc(-x / sqrt 2)` gave -1.3668749089613828e-262 (1400 ulps).
        assert!(ulps(gelu_erf(-34.7), -1.366_874_908_961_576e-262) <= 2.0);
        assert!(ulps(gelu_erf(-20.5), -2.206_758_018_052_147e-92) <= 2.0);
        assert!(ulps(gelu_erf(-37.75), -1.419_762_775_486_36e-310) <= 1.0);
        assert!(ulps(gelu_erf(-38.25), -7.9548e-319) <= 1.0);
        assert!(gelu_erf(f64::NEG_INFINITY).is_nan());
        assert_eq!(gelu_erf(-40.0).to_bits(), (-0.0f64).to_bits());
        // Huge negative inputs: -0.0, not the NaN of squaring x into inf (PyTorch gives -0.0).
        for x in [-1e300, -f64::MAX, -1.5e154, -1e10, -41.0] {
            assert_eq!(gelu_erf(x).to_bits(), (-0.0f64).to_bits(), "gelu_erf({x})");
            assert_eq!(
                gelu_tanh(x).to_bits(),
                (-0.0f64).to_bits(),
                "gelu_tanh({x})"
            );
        }
    }

    #[test]
    fn gelu_tanh_is_within_4_ulp_near_minus_2() {
        // Reference values from mpmath at 50 digits (exact sqrt(2/pi) and 0.044715).
        for (x, want) in [
            (-2.49, f64::from_bits(0xbf8fad7b889bb679)),
            (-2.47, f64::from_bits(0xbf90a5d2ab646ddc)),
            (-2.5, f64::from_bits(0xbf8ee47fec535d83)),
            (-2.0, f64::from_bits(0xbfa73ef8961cab36)),
            (-1.95, f64::from_bits(0xbfa984dfe78c9689)),
        ] {
            assert!(
                ulps(gelu_tanh(x), want) <= 4.0,
                "gelu_tanh({x}) = {:e}",
                gelu_tanh(x)
            );
        }
    }

    #[test]
    fn gelu_tanh_tail_is_not_flushed_to_zero() {
        assert!(ulps(gelu_tanh(-21.5), -2.8e-322) <= 1.0);
        assert_eq!(gelu_tanh(-25.0).to_bits(), (-0.0f64).to_bits());
        assert!(gelu_tanh(f64::NEG_INFINITY).is_nan());
        assert_eq!(gelu_tanh(f64::INFINITY), f64::INFINITY);
    }
}
