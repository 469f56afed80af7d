//! Binary arithmetic ops with broadcasting and PyTorch type promotion. Each op is a zero-sized
//! type implementing [`BinaryMath`], so the scalar function inlines into the loop.

use half::{bf16, f16};
use tensorplay_ir::dtype::Tier;
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, OpClass, Result};
use tensorplay_math::arith::S32;
use tensorplay_math::bulk::{self, BulkOp};
use tensorplay_math::pow;

use super::binary_decl::binary_decl;
use super::lowering::expr;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::{map1, map2, map2_buffered};
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};

/// How the result dtype of a binary op is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOut {
    /// The promoted dtype of the operands (add, mul, maximum...).
    Promote,
    /// Like `Promote`, but integer and bool results become f32 (true division).
    Float,
}

/// The scalar definition of a binary op.
pub trait BinaryMath: 'static {
    const NAME: &'static str;
    const OUT: BinaryOut;
    /// Whether two bool operands are accepted (computed by [`BinaryMath::bool`]).
    const BOOL_OK: bool;
    /// The math-library kernel this op's f32 form is (its `f32` must give the same bits): f32,
    /// f16 and bf16 tensors then run the library's vectorized buffer kernel.
    const BULK: Option<BulkOp> = None;
    fn f32(a: f32, b: f32) -> f32;
    fn f64(a: f64, b: f64) -> f64;
    /// Integer semantics (wrapping); i32 computes through i64 and truncates.
    fn int(a: i64, b: i64) -> i64;
    fn bool(a: bool, b: bool) -> bool {
        Self::int(a as i64, b as i64) != 0
    }
}

/// The promotion tier of an operand: a wrapped Rust scalar, a 0-d tensor or a dimensioned one.
pub fn tier(t: &Tensor) -> Tier {
    if t.is_wrapped_number() {
        Tier::Wrapped
    } else if t.rank() == 0 {
        Tier::ZeroDim
    } else {
        Tier::Dim
    }
}

/// The dtype operands compute in — PyTorch's `result_type`: wrapped Rust scalars only raise the
/// category, 0-d tensors only raise it over dimensioned tensors (`f16[n] + f32 0-d` is f16); see
/// [`DType::result_type`].
pub fn result_type_of(ts: &[&Tensor]) -> DType {
    DType::result_type(ts.iter().map(|t| (t.dtype(), tier(t)))).unwrap_or(DType::F32)
}

/// [`result_type_of`] for two operands.
pub fn result_type(a: &Tensor, b: &Tensor) -> DType {
    result_type_of(&[a, b])
}

/// Meta rule shared by the binary ops.
pub fn binary_meta<M: BinaryMath>(a: Args) -> Result<Vec<OutSpec>> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let shape = broadcast_shapes(M::NAME, x.shape(), y.shape())?;
    let mut dtype = result_type(x, y);
    if dtype == DType::Bool && !M::BOOL_OK {
        return Err(Error::dtype(
            M::NAME,
            "two bool operands are not supported (use logical ops)",
        ));
    }
    if M::OUT == BinaryOut::Float {
        dtype = dtype.to_float();
    }
    Ok(vec![OutSpec::new(&shape, dtype)])
}

/// Converts `t` to `dtype` unless it already has it.
pub(crate) fn as_dtype(t: &Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t.clone())
    } else {
        t.to_dtype(dtype)
    }
}

/// Fill shared by the binary ops: converts operands to the output dtype, then maps.
pub fn binary_fill<M: BinaryMath>(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    if let Some(s) = half_opmath_scalar::<M>(a, out)? {
        let x = a.tensor(0)?;
        let op = a.op;
        return match out.dtype() {
            DType::F16 => map1::<f16, f16>(op, out, x, |p| f16::from_f32(M::f32(p.to_f32(), s))),
            _ => map1::<bf16, bf16>(op, out, x, |p| bf16::from_f32(M::f32(p.to_f32(), s))),
        };
    }
    let x = as_dtype(a.tensor(0)?, out.dtype())?;
    let y = as_dtype(a.tensor(1)?, out.dtype())?;
    let op = a.op;
    if let Some(k) = M::BULK.and_then(bulk::eager_binary) {
        match out.dtype() {
            DType::F32 => return map2_buffered::<f32>(op, out, &x, &y, k, |v| v, |v| v),
            DType::F16 => return map2_buffered(op, out, &x, &y, k, f16::to_f32, f16::from_f32),
            DType::BF16 => {
                return map2_buffered(op, out, &x, &y, k, bf16::to_f32, bf16::from_f32);
            }
            _ => {}
        }
    }
    match out.dtype() {
        DType::F32 => map2::<f32, f32, f32>(op, out, &x, &y, M::f32),
        DType::F64 => map2::<f64, f64, f64>(op, out, &x, &y, M::f64),
        DType::F16 => map2::<f16, f16, f16>(op, out, &x, &y, |p, q| {
            f16::from_f32(M::f32(p.to_f32(), q.to_f32()))
        }),
        DType::BF16 => map2::<bf16, bf16, bf16>(op, out, &x, &y, |p, q| {
            bf16::from_f32(M::f32(p.to_f32(), q.to_f32()))
        }),
        DType::I32 => {
            map2::<i32, i32, i32>(op, out, &x, &y, |p, q| M::int(p as i64, q as i64) as i32)
        }
        DType::I64 => map2::<i64, i64, i64>(op, out, &x, &y, M::int),
        DType::Bool => map2::<bool, bool, bool>(op, out, &x, &y, M::bool),
    }
}

/// A half tensor times, divided or floor-divided by a Rust scalar or a 0-d tensor (the second
/// operand): PyTorch keeps that operand's value in f32 (the half types' compute type) instead of
/// rounding it to f16/bf16 first, so `x / 70000.0` is not `x / inf` and `0 * 2^40` is not
/// `0 * inf`. The operand as f32, when this case applies.
pub(crate) fn half_opmath_scalar<M: BinaryMath>(a: Args, out: &Tensor) -> Result<Option<f32>> {
    if !matches!(M::NAME, "mul" | "div" | "floor_divide") || !out.dtype().is_half() {
        return Ok(None);
    }
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    if x.dtype() != out.dtype() || y.rank() != 0 || y.is_fake() {
        return Ok(None);
    }
    Ok(Some(match y.dtype() {
        DType::F64 => y.item::<f64>()? as f32,
        DType::F32 => y.item::<f32>()?,
        DType::F16 => y.item::<f16>()?.to_f32(),
        DType::BF16 => y.item::<bf16>()?.to_f32(),
        DType::I64 => y.item::<i64>()? as f32,
        DType::I32 => y.item::<i32>()? as f32,
        DType::Bool => y.item::<bool>()? as u8 as f32,
    }))
}

/// The compiler's dtype rule of a binary op with eager's result rule (so the two agree).
pub const fn binary_dtype_rule(out: BinaryOut, bool_ok: bool) -> DTypeRule {
    match (out, bool_ok) {
        (BinaryOut::Float, _) => DTypeRule::PromoteFloat,
        (BinaryOut::Promote, true) => DTypeRule::Promote,
        (BinaryOut::Promote, false) => DTypeRule::PromoteNoBool,
    }
}

/// `AutocastPolicy::Keep` unless a policy is named.
macro_rules! binary_autocast {
    () => {
        AutocastPolicy::Keep
    };
    ($ac:ident) => {
        AutocastPolicy::$ac
    };
}

/// `None`, or the library kernel (`BulkOp` variant) a binary op's f32 form is.
macro_rules! binary_bulk {
    () => {
        None
    };
    ($k:ident) => {
        Some(BulkOp::$k)
    };
}

/// Declares an arithmetic binary op through [`binary_decl!`]: its math type and its `OpDef`
/// static, lowered to `lower` over the operands under eager's dtype rule. `meta = f, fill = g`
/// override the shared meta rule and fill (for ops with extra argument checks or fast paths, such
/// as `pow`).
macro_rules! binary_op {
    ($STATIC:ident, $Math:ident, $name:literal, out = $out:ident, bool_ok = $bool_ok:expr,
     f32 = $f32:expr, f64 = $f64:expr, int = $int:expr, bool = $bool:expr,
     grad = $grad:expr, saved = $saved:ident, lower = $lower:path $(, autocast = $ac:ident)?
     $(, bulk = $bulk:ident)?) => {
        binary_op!(
            $STATIC,
            $Math,
            $name,
            out = $out,
            bool_ok = $bool_ok,
            f32 = $f32,
            f64 = $f64,
            int = $int,
            bool = $bool,
            grad = $grad,
            saved = $saved,
            meta = binary_meta::<$Math>,
            fill = binary_fill::<$Math>,
            lower = $lower
            $(, autocast = $ac)?
            $(, bulk = $bulk)?
        );
    };
    ($STATIC:ident, $Math:ident, $name:literal, out = $out:ident, bool_ok = $bool_ok:expr,
     f32 = $f32:expr, f64 = $f64:expr, int = $int:expr, bool = $bool:expr,
     grad = $grad:expr, saved = $saved:ident, meta = $meta:expr, fill = $fill:expr,
     lower = $lower:path $(, autocast = $ac:ident)? $(, bulk = $bulk:ident)?) => {
        binary_decl! {
            $STATIC, $Math, $name, out = $out, bool_ok = $bool_ok, bulk = binary_bulk!($($bulk)?),
            f32 = $f32, f64 = $f64, int = $int, bool = $bool,
            meta = $meta, fill = $fill, grad = $grad, saved = $saved,
            lower = Pointwise::op($lower, binary_dtype_rule(BinaryOut::$out, $bool_ok)),
            autocast = binary_autocast!($($ac)?)
        }
    };
}

/// Reduces a broadcast gradient back to the shape of operand `t`, or `None` when `t` needs none.
pub fn grad_for(g: &Tensor, t: &Tensor) -> Result<Option<Tensor>> {
    if !t.requires_grad() {
        return Ok(None);
    }
    Ok(Some(g.sum_to_shape_of(t)?))
}

fn operands<'a>(c: &'a GradCtx) -> Result<(&'a Tensor, &'a Tensor, Tensor)> {
    Ok((c.args.tensor(0)?, c.args.tensor(1)?, c.grad(0)?))
}

fn no_bool(_: bool, _: bool) -> bool {
    false
}

binary_op! {
    ADD, Add, "add", out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| a + b, f64 = |a: f64, b: f64| a + b,
    int = i64::wrapping_add, bool = |a: bool, b: bool| a | b,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        Ok(vec![grad_for(&g, x)?, grad_for(&g, y)?])
    }), saved = Nothing, lower = expr::add
}

binary_op! {
    SUB, Sub, "sub", out = Promote, bool_ok = false,
    f32 = |a: f32, b: f32| a - b, f64 = |a: f64, b: f64| a - b,
    int = i64::wrapping_sub, bool = no_bool,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        Ok(vec![grad_for(&g, x)?, grad_for(&g.neg()?, y)?])
    }), saved = Nothing, lower = expr::sub
}

binary_op! {
    MUL, Mul, "mul", out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| a * b, f64 = |a: f64, b: f64| a * b,
    int = i64::wrapping_mul, bool = |a: bool, b: bool| a & b,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        let gx = if x.requires_grad() { grad_for(&g.mul(y)?, x)? } else { None };
        let gy = if y.requires_grad() { grad_for(&g.mul(x)?, y)? } else { None };
        Ok(vec![gx, gy])
    }), saved = Inputs, lower = expr::mul
}

binary_op! {
    DIV, Div, "div", out = Float, bool_ok = true,
    f32 = |a: f32, b: f32| a / b, f64 = |a: f64, b: f64| a / b,
    // Unused: true division computes integers in f32.
    int = |a: i64, _b: i64| a, bool = no_bool,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        let gx = if x.requires_grad() { grad_for(&g.div(y)?, x)? } else { None };
        let gy = if y.requires_grad() {
            // d(x/y)/dy = -x / y^2 = -g·(out / y), in PyTorch's order (out / y first)
            let out = &c.outputs[0];
            grad_for(&g.mul(&out.div(y)?)?.neg()?, y)?
        } else {
            None
        };
        Ok(vec![gx, gy])
    }), saved = All, lower = expr::div
}

/// `base ** exp` on integers: repeated squaring with wrapping. A negative exponent gives 1 for
/// base 1, ±1 for base -1 and 0 otherwise (PyTorch's rule for tensor exponents).
#[inline(always)]
fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp & 1 == 1 {
                    -1
                } else {
                    1
                }
            }
            _ => 0,
        };
    }
    let (mut base, mut e, mut acc) = (base, exp as u64, 1i64);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    acc
}

/// A 0-d zero of `dtype`, for masking gradients with `where`.
fn zero(dtype: DType) -> Tensor {
    Tensor::zeros(&[], dtype)
}

/// `y - 1`, staying a wrapped number when `y` is one (so the derivative's dtype does not widen).
fn minus_one(y: &Tensor) -> Result<Tensor> {
    if y.is_wrapped_number() && !y.is_fake() {
        let s = match y.dtype() {
            DType::F64 => Scalar::Float(y.item::<f64>()? - 1.0),
            _ => Scalar::Int(y.item::<i64>()?.wrapping_sub(1)),
        };
        Ok(Tensor::wrapped_scalar(s))
    } else {
        y.sub_scalar(1)
    }
}

/// `pow`'s meta rule: the shared one, plus PyTorch's refusal of a negative integer Rust scalar
/// exponent on an integer base (a wrapped scalar is a constant, so it can be read here).
fn pow_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    if !x.dtype().is_float() && y.is_wrapped_number() && y.dtype() == DType::I64 && !y.is_fake() {
        let e = y.item::<i64>()?;
        if e < 0 {
            return Err(Error::argument(
                "pow",
                "exponent",
                format!(
                    "a non-negative exponent for a {} base (integers to negative integer powers \
                     are not allowed)",
                    x.dtype()
                ),
                e.to_string(),
            ));
        }
    }
    let out = binary_meta::<Pow>(a)?;
    // PyTorch converts a Rust-scalar exponent to a half or i32 base's dtype with its overflow
    // check (`f16.pow(1e5)` is an error); f32/f64/i64 results take any exponent.
    if y.is_wrapped_number() && !y.is_fake() && !x.is_wrapped_number() {
        let dtype = out[0].dtype;
        if matches!(dtype, DType::F16 | DType::BF16 | DType::I32) {
            let e = match y.dtype() {
                DType::F64 => Scalar::Float(y.item::<f64>()?),
                DType::I64 => Scalar::Int(y.item::<i64>()?),
                _ => Scalar::Bool(y.item::<bool>()?),
            };
            super::cast::check_scalar_fits("pow", "exponent", e, dtype)?;
        }
    }
    Ok(out)
}

fn pow_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, y, g) = operands(c)?;
    let gx = if x.requires_grad() {
        // y * x^(y-1), and 0 where y == 0 (so 0^-1 never turns the zero into NaN).
        let d = y.mul(&x.pow(&minus_one(y)?)?)?;
        let d = Tensor::where_cond(&y.eq_scalar(0)?, &zero(d.dtype()), &d)?;
        grad_for(&g.mul(&d)?, x)?
    } else {
        None
    };
    let gy = if y.requires_grad() {
        // out * ln(x), and 0 where x == 0 and y >= 0 (PyTorch's masking).
        let d = c.outputs[0].mul(&x.log()?)?;
        let mask = x.eq_scalar(0)?.logical_and(&y.ge_scalar(0)?)?;
        let d = Tensor::where_cond(&mask, &zero(d.dtype()), &d)?;
        grad_for(&g.mul(&d)?, y)?
    } else {
        None
    };
    Ok(vec![gx, gy])
}

/// Gradient of maximum (`larger`) or minimum: all of it to the winning operand, half to each on
/// ties, and all to both where a NaN makes neither win (PyTorch's rule).
fn extremum_grad(c: &GradCtx, larger: bool) -> Result<Vec<Option<Tensor>>> {
    let (x, y, g) = operands(c)?;
    let z = zero(g.dtype());
    let tie = x.eq(y)?;
    let half = g.mul_scalar(0.5)?;
    let share = |loses: Tensor| -> Result<Tensor> {
        Tensor::where_cond(&tie, &half, &Tensor::where_cond(&loses, &z, &g)?)
    };
    let gx = if x.requires_grad() {
        grad_for(&share(if larger { x.lt(y)? } else { x.gt(y)? })?, x)?
    } else {
        None
    };
    let gy = if y.requires_grad() {
        grad_for(&share(if larger { x.gt(y)? } else { x.lt(y)? })?, y)?
    } else {
        None
    };
    Ok(vec![gx, gy])
}

binary_op! {
    POW, Pow, "pow", out = Promote, bool_ok = false,
    // f32: the math library's pow (≤ 0.51 ulp; C99 special cases), the compiler's bits too.
    f32 = |a: f32, b: f32| pow::pow_f32(&mut S32, a, b), f64 = f64::powf, int = int_pow,
    bool = no_bool, grad = Some(pow_grad), saved = All, meta = pow_meta, fill = pow_fill,
    lower = expr::pow, autocast = F32, bulk = Pow
}

/// A `pow` by a Rust-scalar exponent that eager kernels and compiled code both replace by
/// cheaper code (declared beside the scalar ops, in `tensorplay-ir`).
pub use tensorplay_ir::PowBy;

/// `map1` of `x^y` by the float replacement `by`, with `by` matched outside the loop (so each
/// arm's loop vectorizes): `$T` the element type, `$C` the compute type (f32 for f32/f16/bf16,
/// f64 for f64), `$load`/`$store` the conversions.
macro_rules! pow_by_float_map {
    ($op:expr, $out:expr, $x:expr, $by:expr, $T:ty, $C:ty, $load:expr, $store:expr) => {{
        let (load, store) = ($load, $store);
        // One monomorphized loop per arm: the body is a closure literal, not a function pointer.
        macro_rules! each {
            (|$v:ident| $body:expr) => {
                map1::<$T, $T>($op, $out, $x, move |e| {
                    let $v: $C = load(e);
                    store($body)
                })
            };
        }
        match $by {
            PowBy::Zero => each!(|_v| 1.0),
            PowBy::One => each!(|v| v),
            PowBy::Two => each!(|v| v * v),
            PowBy::Three => each!(|v| (v * v) * v),
            PowBy::Four => each!(|v| (v * v) * (v * v)),
            PowBy::MinusOne => each!(|v| 1.0 / v),
            PowBy::Half => each!(|v| {
                let s = v.sqrt();
                // `maximum(s, +0)`: NaN-propagating, and `-0` becomes `+0`.
                let m = if s > 0.0 || s.is_nan() { s } else { 0.0 };
                if v == <$C>::NEG_INFINITY {
                    <$C>::INFINITY
                } else {
                    m
                }
            }),
        }
    }};
}

/// `x^y` by the integer replacement `by` (wrapping products; `MinusOne`/`Half` never reach it).
fn pow_by_int(by: PowBy, x: i64) -> i64 {
    match by {
        PowBy::Zero => 1,
        PowBy::One => x,
        PowBy::Two => x.wrapping_mul(x),
        PowBy::Three => x.wrapping_mul(x).wrapping_mul(x),
        PowBy::Four | PowBy::MinusOne | PowBy::Half => {
            let x2 = x.wrapping_mul(x);
            x2.wrapping_mul(x2)
        }
    }
}

/// `pow`'s fill: a Rust-scalar exponent with a [`PowBy`] replacement runs that (the compiled
/// kernels' strength reduction, so eager and compiled `x.pow_scalar(3.0)` agree bit for bit);
/// everything else is the general elementwise `pow`.
fn pow_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (out, y) = (&outs[0], a.tensor(1)?);
    let by = if y.is_wrapped_number() && !y.is_fake() {
        // The exponent in the compute dtype (f32 for the half types, as the compiler sees it).
        let compute = match out.dtype() {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        };
        let e = as_dtype(y, compute)?;
        match out.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => PowBy::of_float(e.item::<f32>()? as f64),
            DType::F64 => PowBy::of_float(e.item::<f64>()?),
            DType::I32 => PowBy::of_int(e.item::<i32>()? as i64),
            DType::I64 => PowBy::of_int(e.item::<i64>()?),
            DType::Bool => None,
        }
    } else {
        None
    };
    let Some(by) = by else {
        return binary_fill::<Pow>(a, outs);
    };
    let x = as_dtype(a.tensor(0)?, out.dtype())?;
    let op = a.op;
    match out.dtype() {
        DType::F32 => pow_by_float_map!(op, out, &x, by, f32, f32, |v: f32| v, |v: f32| v),
        DType::F64 => pow_by_float_map!(op, out, &x, by, f64, f64, |v: f64| v, |v: f64| v),
        DType::F16 => pow_by_float_map!(op, out, &x, by, f16, f32, f16::to_f32, f16::from_f32),
        DType::BF16 => {
            pow_by_float_map!(op, out, &x, by, bf16, f32, bf16::to_f32, bf16::from_f32)
        }
        DType::I32 => map1::<i32, i32>(op, out, &x, |v| pow_by_int(by, v as i64) as i32),
        DType::I64 => map1::<i64, i64>(op, out, &x, |v| pow_by_int(by, v)),
        DType::Bool => binary_fill::<Pow>(a, outs),
    }
}

binary_op! {
    MAXIMUM, Maximum, "maximum", out = Promote, bool_ok = true,
    // NaN-propagating: a NaN in either operand wins.
    f32 = |a: f32, b: f32| if a > b || a.is_nan() { a } else { b },
    f64 = |a: f64, b: f64| if a > b || a.is_nan() { a } else { b },
    int = |a: i64, b: i64| a.max(b), bool = |a: bool, b: bool| a | b,
    grad = Some(|c| extremum_grad(c, true)), saved = Inputs, lower = expr::maximum
}

binary_op! {
    MINIMUM, Minimum, "minimum", out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| if a < b || a.is_nan() { a } else { b },
    f64 = |a: f64, b: f64| if a < b || a.is_nan() { a } else { b },
    int = |a: i64, b: i64| a.min(b), bool = |a: bool, b: bool| a & b,
    grad = Some(|c| extremum_grad(c, false)), saved = Inputs, lower = expr::minimum
}

/// Scalar definition of `remainder`: `a - floor(a / b) * b` for floats (so the result takes
/// the divisor's sign, and a zero divisor gives NaN), Python's modulo for integers.
pub struct Remainder;
impl BinaryMath for Remainder {
    const NAME: &'static str = "remainder";
    const OUT: BinaryOut = BinaryOut::Promote;
    const BOOL_OK: bool = false;
    #[inline(always)]
    fn f32(a: f32, b: f32) -> f32 {
        a - (a / b).floor() * b
    }
    #[inline(always)]
    fn f64(a: f64, b: f64) -> f64 {
        a - (a / b).floor() * b
    }
    /// Python's modulo; the caller has ruled out `b == 0`.
    #[inline(always)]
    fn int(a: i64, b: i64) -> i64 {
        let r = a.wrapping_rem(b);
        if r != 0 && ((r < 0) != (b < 0)) {
            r.wrapping_add(b)
        } else {
            r
        }
    }
}

/// Integer division of any kind by zero is an error (as in PyTorch); floats follow IEEE. The
/// divisor is checked as the op uses it, converted to the result dtype (an i64 `2^32` divisor of
/// an i32 tensor is 0 in i32).
pub(crate) fn no_int_zero_divisor(a: Args, out: DType, name: &str, what: &str) -> Result<()> {
    if out.is_float() {
        return Ok(());
    }
    let y = as_dtype(&as_dtype(a.tensor(1)?, out)?, DType::I64)?;
    if y.to_vec::<i64>()?.contains(&0) {
        return Err(Error::argument(
            name,
            "other",
            format!("no zero divisor (integer {what} by zero)"),
            "a zero element",
        ));
    }
    Ok(())
}

/// Integer remainder by zero is an error (as in PyTorch); floats give NaN.
fn remainder_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    no_int_zero_divisor(a, outs[0].dtype(), "remainder", "remainder")?;
    binary_fill::<Remainder>(a, outs)
}

/// `a - floor(a / b) * b`, the same operations eager runs.
fn remainder_lowering(_: &[&tensorplay_ir::graph::Attr]) -> Result<tensorplay_ir::ScalarExpr> {
    use tensorplay_ir::ScalarExpr as E;
    use tensorplay_ir::ScalarOp as S;
    let (a, b) = (E::arg(0), E::arg(1));
    let q = E::op(S::Floor, [E::op(S::Div, [a.clone(), b.clone()])]);
    Ok(E::op(S::Sub, [a, E::op(S::Mul, [q, b])]))
}

/// `remainder(Tensor self, Tensor other) -> Tensor`
pub static REMAINDER: OpDef = OpDef {
    name: "remainder",
    schema: "remainder(Tensor self, Tensor other) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: binary_meta::<Remainder>,
        fill: remainder_fill,
    },
    // d/da = 1, d/db = -floor(a / b) (piecewise, away from the jumps).
    derivative: Some(|c| {
        let (x, y, g) = operands(c)?;
        let gx = grad_for(&g, x)?;
        let gy = if y.requires_grad() {
            grad_for(&g.mul(&x.div(y)?.floor()?)?.neg()?, y)?
        } else {
            None
        };
        Ok(vec![gx, gy])
    }),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise {
        expr: remainder_lowering,
        dtype: DTypeRule::PromoteNoBool,
        // Integer remainder can fail (division by zero), which only eager reports.
        float_only: true,
    }),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Elementwise remainder with broadcasting, PyTorch's `remainder`: the result has the sign
    /// of the divisor. Floats compute `a - floor(a / b) * b` (a zero divisor gives NaN);
    /// integers use Python's modulo, and a zero divisor is an error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![-3i64, 3, 5], &[3])?;
    /// let b = Tensor::from_vec(vec![2i64, -2, 5], &[3])?;
    /// assert_eq!(a.remainder(&b)?.to_vec::<i64>()?, vec![1, -1, 0]);
    /// assert!(a.remainder(&Tensor::from_vec(vec![0i64], &[1])?).is_err());
    /// let x = Tensor::from_vec(vec![-3.5f32, 1.0], &[2])?;
    /// let r = x.remainder_scalar(2.0)?.to_vec::<f32>()?;
    /// assert_eq!(r, vec![0.5, 1.0]);
    /// assert!(x.remainder_scalar(0.0)?.to_vec::<f32>()?[0].is_nan());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn remainder(&self, other: &Tensor) -> Result<Tensor> {
        call1(&REMAINDER, &[self.into(), other.into()])
    }
    /// `remainder(self, s)` for a Rust scalar `s`.
    pub fn remainder_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        self.remainder(&Tensor::wrapped_scalar(s.into()))
    }
}

/// Every binary op of this family.
pub static OPS: &[&OpDef] = &[&ADD, &SUB, &MUL, &DIV, &POW, &MAXIMUM, &MINIMUM, &REMAINDER];

impl Tensor {
    /// Elementwise `self + other` with broadcasting.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        call1(&ADD, &[self.into(), other.into()])
    }
    /// Elementwise `self - other` with broadcasting.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        call1(&SUB, &[self.into(), other.into()])
    }
    /// Elementwise `self * other` with broadcasting.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        call1(&MUL, &[self.into(), other.into()])
    }
    /// Elementwise true division (integers divide as f32).
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        call1(&DIV, &[self.into(), other.into()])
    }
    /// `self + s` for a Rust scalar `s`.
    pub fn add_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        self.add(&Tensor::wrapped_scalar(s.into()))
    }
    /// `self - s` for a Rust scalar `s`.
    pub fn sub_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        self.sub(&Tensor::wrapped_scalar(s.into()))
    }
    /// `self * s` for a Rust scalar `s`.
    pub fn mul_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        self.mul(&Tensor::wrapped_scalar(s.into()))
    }
    /// `self / s` for a Rust scalar `s`.
    pub fn div_scalar(&self, s: impl Into<Scalar>) -> Result<Tensor> {
        self.div(&Tensor::wrapped_scalar(s.into()))
    }

    /// Elementwise `self ** exponent` with broadcasting.
    ///
    /// Floats follow C's `pow` (`pow(x, 0) = 1` even for NaN, `pow(1, y) = 1`); integers use
    /// exact repeated squaring that wraps on overflow, and a negative integer exponent tensor gives
    /// 1 for base 1, ±1 for base -1 and 0 otherwise.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let b = Tensor::from_vec(vec![2i64, -1, 1, 3], &[4])?;
    /// let e = Tensor::from_vec(vec![10i64, -3, -5, -1], &[4])?;
    /// assert_eq!(b.pow(&e)?.to_vec::<i64>()?, vec![1024, -1, 1, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn pow(&self, exponent: &Tensor) -> Result<Tensor> {
        call1(&POW, &[self.into(), exponent.into()])
    }
    /// `self ** exponent` for a Rust scalar exponent; a negative integer exponent on an integer
    /// tensor is an error, as in PyTorch.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 4.0, 9.0], &[3])?;
    /// assert_eq!(x.pow_scalar(0.5)?.to_vec::<f32>()?, vec![1.0, 2.0, 3.0]);
    /// let i = Tensor::from_vec(vec![2i32, 3], &[2])?;
    /// assert_eq!(i.pow_scalar(3)?.to_vec::<i32>()?, vec![8, 27]);
    /// assert!(i.pow_scalar(-1).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn pow_scalar(&self, exponent: impl Into<Scalar>) -> Result<Tensor> {
        self.pow(&Tensor::wrapped_scalar(exponent.into()))
    }
    /// Elementwise maximum with broadcasting; a NaN in either operand gives NaN.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, f32::NAN, -3.0], &[3])?;
    /// let b = Tensor::from_vec(vec![2.0f32, 0.0, -4.0], &[3])?;
    /// let m = a.maximum(&b)?.to_vec::<f32>()?;
    /// assert_eq!((m[0], m[2]), (2.0, -3.0));
    /// assert!(m[1].is_nan());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        call1(&MAXIMUM, &[self.into(), other.into()])
    }
    /// Elementwise minimum with broadcasting; a NaN in either operand gives NaN.
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        call1(&MINIMUM, &[self.into(), other.into()])
    }
}
