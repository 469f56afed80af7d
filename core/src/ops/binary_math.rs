//! More binary math (issue 12): `atan2`, `hypot`, `copysign`, `fmod`, `fmax`, `fmin`,
//! `floor_divide` and the ternary `lerp`, with broadcasting and PyTorch's dtype rules
//! (`atan2` and `copysign` compute integers in f32; `hypot` and `lerp` are floating only;
//! `fmod`, `fmax`, `fmin` and `floor_divide` keep integer dtypes).
//!
//! The libm functions (`atan2`, `hypot`, `fmod`, `copysign`) compute in f64 and round once, in
//! eager kernels and compiled code alike (`ScalarOp::Libm2`); the others are expressions over
//! the same IEEE operations eager runs, so compiled results are bit-identical to eager.

use half::{bf16, f16};
use tensorplay_ir::graph::Attr;
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, LibmFn2, OpClass, Result, ScalarExpr, ScalarOp};

use super::binary::{
    BinaryMath, BinaryOut, as_dtype, binary_dtype_rule, binary_fill, binary_meta, grad_for,
    no_int_zero_divisor, result_type,
};
use super::binary_decl::binary_decl;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::{map2, map3};
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};

type E = ScalarExpr;

fn op<const N: usize>(o: ScalarOp, args: [E; N]) -> E {
    E::op(o, args)
}

fn lit(v: f64) -> E {
    E::lit(v)
}

/// Declares a binary op over a [`BinaryMath`] type through [`binary_decl!`]: the math type, the
/// `OpDef` and the tensor and scalar methods.
macro_rules! binary_math_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident, $smethod:ident,
     out = $out:ident, bool_ok = $bool_ok:expr, f32 = $f32:expr, f64 = $f64:expr,
     int = $int:expr, bool = $bool:expr, meta = $meta:expr, fill = $fill:expr,
     lower = $lower:expr, rule = $rule:expr, float_only = $fo:expr,
     grad = $grad:expr, saved = $saved:ident) => {
        binary_decl! {
            $STATIC, $Math, $name, out = $out, bool_ok = $bool_ok, bulk = None,
            f32 = $f32, f64 = $f64, int = $int, bool = $bool,
            meta = $meta, fill = $fill, grad = $grad, saved = $saved,
            lower = Pointwise { expr: $lower, dtype: $rule, float_only: $fo },
            autocast = AutocastPolicy::Keep,
            methods = #[doc = concat!("Elementwise `", $name, "` with broadcasting.")]
                $(#[$attr])* $method,
                #[doc = concat!("`", $name, "(self, s)` for a Rust scalar `s`.")] $smethod
        }
    };
}

fn operands<'a>(c: &'a GradCtx) -> Result<(&'a Tensor, &'a Tensor, Tensor)> {
    Ok((c.args.tensor(0)?, c.args.tensor(1)?, c.grad(0)?))
}

fn no_bool(_: bool, _: bool) -> bool {
    false
}

fn unused_int(a: i64, _: i64) -> i64 {
    a
}

/// The libm function `f` of two operands as one scalar op.
fn libm2(f: LibmFn2) -> E {
    op(ScalarOp::Libm2(f), [E::arg(0), E::arg(1)])
}

/// The shared meta rule with the promoted dtype required to be floating (`hypot`).
fn float_binary_meta<M: BinaryMath>(a: Args) -> Result<Vec<OutSpec>> {
    let spec = binary_meta::<M>(a)?;
    if !spec[0].dtype.is_float() {
        return Err(Error::dtype(
            M::NAME,
            format!(
                "expected floating point operands, got {} and {}",
                a.tensor(0)?.dtype(),
                a.tensor(1)?.dtype()
            ),
        ));
    }
    Ok(spec)
}

binary_math_op! {
    /// `atan2(self, other)`: the angle of the point `(other, self)`, in `[-pi, pi]`;
    /// integers compute in f32.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let y = Tensor::from_vec(vec![1.0f64, -0.0], &[2])?;
    /// let x = Tensor::from_vec(vec![0.0f64, -1.0], &[2])?;
    /// assert_eq!(y.atan2(&x)?.to_vec::<f64>()?, vec![std::f64::consts::FRAC_PI_2, -std::f64::consts::PI]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    ATAN2, Atan2, "atan2", atan2, atan2_scalar, out = Float, bool_ok = true,
    f32 = |a: f32, b: f32| LibmFn2::Atan2.eval(a as f64, b as f64) as f32,
    f64 = |a: f64, b: f64| LibmFn2::Atan2.eval(a, b), int = unused_int, bool = no_bool,
    meta = binary_meta::<Atan2>, fill = binary_fill::<Atan2>,
    lower = |_: &[&Attr]| Ok(libm2(LibmFn2::Atan2)),
    rule = binary_dtype_rule(BinaryOut::Float, true), float_only = false,
    // d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2)
    grad = Some(|c| {
        let (y, x, g) = operands(c)?;
        let r2 = x.mul(x)?.add(&y.mul(y)?)?;
        let gy = if y.requires_grad() { grad_for(&g.mul(x)?.div(&r2)?, y)? } else { None };
        let gx = if x.requires_grad() {
            grad_for(&g.mul(y)?.div(&r2)?.neg()?, x)?
        } else {
            None
        };
        Ok(vec![gy, gx])
    }), saved = Inputs
}

binary_math_op! {
    /// `sqrt(self^2 + other^2)` without overflow or underflow in the squares; floating
    /// operands only. `hypot(±inf, NaN) = inf`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![3.0f32, 1e30], &[2])?;
    /// let b = Tensor::from_vec(vec![4.0f32, 1e30], &[2])?;
    /// assert_eq!(a.hypot(&b)?.to_vec::<f32>()?, vec![5.0, 1.4142135e30]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    HYPOT, Hypot, "hypot", hypot, hypot_scalar, out = Promote, bool_ok = false,
    f32 = |a: f32, b: f32| LibmFn2::Hypot.eval(a as f64, b as f64) as f32,
    f64 = |a: f64, b: f64| LibmFn2::Hypot.eval(a, b), int = unused_int, bool = no_bool,
    meta = float_binary_meta::<Hypot>, fill = binary_fill::<Hypot>,
    lower = |_: &[&Attr]| Ok(libm2(LibmFn2::Hypot)),
    rule = DTypeRule::Promote, float_only = false,
    // d/da = a / out, d/db = b / out
    grad = Some(|c| {
        let (a, b, g) = operands(c)?;
        let o = &c.outputs[0];
        let ga = if a.requires_grad() { grad_for(&g.mul(a)?.div(o)?, a)? } else { None };
        let gb = if b.requires_grad() { grad_for(&g.mul(b)?.div(o)?, b)? } else { None };
        Ok(vec![ga, gb])
    }), saved = All
}

binary_math_op! {
    /// The magnitude of `self` with the sign of `other` (including the sign of `-0.0` and of a
    /// NaN); integers compute in f32.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.0], &[3])?;
    /// let b = Tensor::from_vec(vec![-0.0f32, 1.0, -1.0], &[3])?;
    /// assert_eq!(a.copysign(&b)?.to_vec::<f32>()?, vec![-1.5, 2.0, -3.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    COPYSIGN, Copysign, "copysign", copysign, copysign_scalar, out = Float, bool_ok = true,
    f32 = f32::copysign, f64 = f64::copysign, int = unused_int, bool = no_bool,
    meta = binary_meta::<Copysign>, fill = binary_fill::<Copysign>,
    lower = |_: &[&Attr]| Ok(libm2(LibmFn2::Copysign)),
    rule = binary_dtype_rule(BinaryOut::Float, true), float_only = false,
    // d/da = out / a (0 where a == 0); zero for `other` (PyTorch's rule).
    grad = Some(|c| {
        let (a, b, g) = operands(c)?;
        let ratio = c.outputs[0].div(a)?;
        let z = Tensor::zeros(&[], ratio.dtype());
        let ratio = Tensor::where_cond(&a.eq_scalar(0)?, &z, &ratio)?;
        let gb = if b.requires_grad() { Some(Tensor::zeros_like(b)) } else { None };
        Ok(vec![grad_for(&g.mul(&ratio)?, a)?, gb])
    }), saved = All
}

/// C's truncated remainder on integers; the caller has ruled out `b == 0`.
fn int_fmod(a: i64, b: i64) -> i64 {
    a.wrapping_rem(b)
}

binary_math_op! {
    /// C's `fmod`: the remainder of truncated division, with the sign of `self` (unlike
    /// [`Tensor::remainder`]); floats: a zero divisor gives NaN; integers: a zero divisor is an
    /// error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![-7i64, 7], &[2])?;
    /// assert_eq!(a.fmod_scalar(3)?.to_vec::<i64>()?, vec![-1, 1]);
    /// assert!(a.fmod_scalar(0).is_err());
    /// let x = Tensor::from_vec(vec![-7.5f32], &[1])?;
    /// assert_eq!(x.fmod_scalar(2.0)?.to_vec::<f32>()?, vec![-1.5]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    FMOD, Fmod, "fmod", fmod, fmod_scalar, out = Promote, bool_ok = false,
    f32 = |a: f32, b: f32| a % b, f64 = |a: f64, b: f64| a % b, int = int_fmod, bool = no_bool,
    meta = binary_meta::<Fmod>,
    fill = |a, outs| {
        no_int_zero_divisor(a, outs[0].dtype(), "fmod", "division")?;
        binary_fill::<Fmod>(a, outs)
    },
    lower = |_: &[&Attr]| Ok(libm2(LibmFn2::Fmod)),
    // Integer fmod can fail (division by zero), which only eager reports.
    rule = DTypeRule::PromoteNoBool, float_only = true,
    // d/da = 1, d/db = -trunc(a / b)
    grad = Some(|c| {
        let (a, b, g) = operands(c)?;
        let gb = if b.requires_grad() {
            grad_for(&g.mul(&a.div(b)?.trunc()?)?.neg()?, b)?
        } else {
            None
        };
        Ok(vec![grad_for(&g, a)?, gb])
    }), saved = Inputs
}

/// `fmax`/`fmin` as an expression: a NaN operand loses to the other one; otherwise
/// `maximum`/`minimum`.
fn fextremum_expr(m: ScalarOp) -> E {
    let (a, b) = (E::arg(0), E::arg(1));
    op(
        ScalarOp::Where,
        [
            op(ScalarOp::Ne, [a.clone(), a.clone()]),
            b.clone(),
            op(
                ScalarOp::Where,
                [
                    op(ScalarOp::Ne, [b.clone(), b.clone()]),
                    a.clone(),
                    op(m, [a, b]),
                ],
            ),
        ],
    )
}

/// Gradient of fmax (`larger`) or fmin: to `self` where it wins or `other` is NaN, half to
/// each on a tie (`0.0` vs `-0.0` too), else to `other` (PyTorch's rule).
fn fextremum_grad(c: &GradCtx, larger: bool) -> Result<Vec<Option<Tensor>>> {
    let (a, b, g) = operands(c)?;
    let wins = if larger { a.gt(b)? } else { a.lt(b)? };
    let to_a = wins.logical_or(&b.isnan()?)?;
    let tie = a.eq(b)?;
    let z = Tensor::zeros(&[], g.dtype());
    let half = g.mul_scalar(0.5)?;
    let ga = if a.requires_grad() {
        let shared = Tensor::where_cond(&tie, &half, &z)?;
        grad_for(&Tensor::where_cond(&to_a, &g, &shared)?, a)?
    } else {
        None
    };
    let gb = if b.requires_grad() {
        let rest = Tensor::where_cond(&tie, &half, &g)?;
        grad_for(&Tensor::where_cond(&to_a, &z, &rest)?, b)?
    } else {
        None
    };
    Ok(vec![ga, gb])
}

/// `a > b ? a : b` with NaN losing (C's `fmax`), written as the compiled expression computes it.
macro_rules! fmax_body {
    ($a:expr, $b:expr, $cmp:tt) => {{
        let (a, b) = ($a, $b);
        #[allow(clippy::eq_op, reason = "x != x is the NaN test")]
        let (a_nan, b_nan) = (a != a, b != b);
        if a_nan {
            b
        } else if b_nan {
            a
        } else if a $cmp b {
            a
        } else {
            b
        }
    }};
}

binary_math_op! {
    /// Elementwise maximum where a NaN loses to a number (C's `fmax`); NaN only when both are.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![f32::NAN, 1.0, f32::NAN], &[3])?;
    /// let b = Tensor::from_vec(vec![2.0f32, f32::NAN, f32::NAN], &[3])?;
    /// let m = a.fmax(&b)?.to_vec::<f32>()?;
    /// assert_eq!((m[0], m[1]), (2.0, 1.0));
    /// assert!(m[2].is_nan());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    FMAX, Fmax, "fmax", fmax, fmax_scalar, out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| fmax_body!(a, b, >), f64 = |a: f64, b: f64| fmax_body!(a, b, >),
    int = |a: i64, b: i64| a.max(b), bool = |a: bool, b: bool| a | b,
    meta = binary_meta::<Fmax>, fill = binary_fill::<Fmax>,
    lower = |_: &[&Attr]| Ok(fextremum_expr(ScalarOp::Maximum)),
    rule = DTypeRule::Promote, float_only = false,
    grad = Some(|c| fextremum_grad(c, true)), saved = Inputs
}

binary_math_op! {
    /// Elementwise minimum where a NaN loses to a number (C's `fmin`).
    FMIN, Fmin, "fmin", fmin, fmin_scalar, out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| fmax_body!(a, b, <), f64 = |a: f64, b: f64| fmax_body!(a, b, <),
    int = |a: i64, b: i64| a.min(b), bool = |a: bool, b: bool| a & b,
    meta = binary_meta::<Fmin>, fill = binary_fill::<Fmin>,
    lower = |_: &[&Attr]| Ok(fextremum_expr(ScalarOp::Minimum)),
    rule = DTypeRule::Promote, float_only = false,
    grad = Some(|c| fextremum_grad(c, false)), saved = Inputs
}

/// Python's floor division on integers (wrapping for `MIN / -1`); the caller has ruled out
/// `b == 0`.
fn int_floor_div(a: i64, b: i64) -> i64 {
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// Floor division of floats, PyTorch's algorithm: `(a - fmod(a, b)) / b`, moved down by one
/// when the remainder's sign differs from the divisor's, then floored and rounded up when the
/// quotient was more than half below; an exact zero quotient keeps the sign of `a / b`; a zero
/// divisor gives `a / b`.
macro_rules! floor_div_body {
    ($a:expr, $b:expr, $t:ty) => {{
        let (a, b): ($t, $t) = ($a, $b);
        let q = a / b;
        let m = a % b;
        let d0 = (a - m) / b;
        let dm1 = d0 - 1.0;
        let div = if m != 0.0 {
            if b < 0.0 {
                if m < 0.0 { d0 } else { dm1 }
            } else if m < 0.0 {
                dm1
            } else {
                d0
            }
        } else {
            d0
        };
        let fl = div.floor();
        let fl = if div - fl > 0.5 { fl + 1.0 } else { fl };
        let res = if div != 0.0 {
            fl
        } else {
            (0.0 as $t).copysign(q)
        };
        if b == 0.0 { q } else { res }
    }};
}

/// The compiled form of [`floor_div_body`]: the same operations in the same order.
fn floor_divide_lowering(_: &[&Attr]) -> Result<E> {
    use ScalarOp::*;
    let (a, b) = (E::arg(0), E::arg(1));
    let q = op(Div, [a.clone(), b.clone()]);
    let m = op(Libm2(LibmFn2::Fmod), [a.clone(), b.clone()]);
    let d0 = op(Div, [op(Sub, [a, m.clone()]), b.clone()]);
    let dm1 = op(Sub, [d0.clone(), lit(1.0)]);
    let m_neg = || op(Lt, [m.clone(), lit(0.0)]);
    let wrong_sign = op(
        Where,
        [
            op(Lt, [b.clone(), lit(0.0)]),
            op(Where, [m_neg(), d0.clone(), dm1.clone()]),
            op(Where, [m_neg(), dm1, d0.clone()]),
        ],
    );
    let div = op(Where, [op(Ne, [m.clone(), lit(0.0)]), wrong_sign, d0]);
    let fl = op(Floor, [div.clone()]);
    let fl = op(
        Where,
        [
            op(Gt, [op(Sub, [div.clone(), fl.clone()]), lit(0.5)]),
            op(Add, [fl.clone(), lit(1.0)]),
            fl,
        ],
    );
    let zero = op(Libm2(LibmFn2::Copysign), [lit(0.0), q.clone()]);
    let res = op(Where, [op(Ne, [div, lit(0.0)]), fl, zero]);
    Ok(op(Where, [op(Eq, [b, lit(0.0)]), q, res]))
}

binary_math_op! {
    /// Division rounded toward -inf (Python's `//`): integers keep their dtype (a zero divisor
    /// is an error); floats follow PyTorch's algorithm (a zero divisor gives `a / b`).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![-7i64, 7], &[2])?;
    /// assert_eq!(a.floor_divide_scalar(2)?.to_vec::<i64>()?, vec![-4, 3]);
    /// let x = Tensor::from_vec(vec![-7.0f32, 1.0], &[2])?;
    /// assert_eq!(x.floor_divide_scalar(2.0)?.to_vec::<f32>()?, vec![-4.0, 0.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    FLOOR_DIVIDE, FloorDivide, "floor_divide", floor_divide, floor_divide_scalar,
    out = Promote, bool_ok = false,
    f32 = |a: f32, b: f32| floor_div_body!(a, b, f32),
    f64 = |a: f64, b: f64| floor_div_body!(a, b, f64), int = int_floor_div, bool = no_bool,
    meta = binary_meta::<FloorDivide>,
    fill = |a, outs| {
        no_int_zero_divisor(a, outs[0].dtype(), "floor_divide", "division")?;
        binary_fill::<FloorDivide>(a, outs)
    },
    lower = floor_divide_lowering,
    rule = DTypeRule::PromoteNoBool, float_only = true,
    grad = None, saved = Nothing
}

// ---- lerp --------------------------------------------------------------------------------------

/// `lerp`'s meta rule: the three shapes broadcast; `self` and `end` share a floating dtype;
/// `weight` has it too unless it is a wrapped Rust scalar (PyTorch's rule).
fn lerp_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (s, e, w) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let shape = broadcast_shapes("lerp", s.shape(), e.shape())?;
    let shape = broadcast_shapes("lerp", &shape, w.shape())?;
    if !s.dtype().is_float() {
        return Err(Error::dtype(
            "lerp",
            format!("expected a floating point tensor, got {}", s.dtype()),
        ));
    }
    if e.dtype() != s.dtype() {
        return Err(Error::argument(
            "lerp",
            "end",
            format!("dtype {}", s.dtype()),
            e.dtype().to_string(),
        ));
    }
    if !w.is_wrapped_number() && w.dtype() != s.dtype() {
        return Err(Error::argument(
            "lerp",
            "weight",
            format!("dtype {}", s.dtype()),
            w.dtype().to_string(),
        ));
    }
    Ok(vec![OutSpec::new(&shape, result_type(s, w))])
}

/// PyTorch's two forms, each one fused multiply-add: `|w| < 0.5 ? fma(w, e - s, s) :
/// fma(w - 1, e - s, e)` — exact at both ends.
macro_rules! lerp_body {
    ($s:expr, $e:expr, $w:expr) => {{
        let (s, e, w) = ($s, $e, $w);
        if w.abs() < 0.5 {
            w.mul_add(e - s, s)
        } else {
            (w - 1.0).mul_add(e - s, e)
        }
    }};
}

fn lerp_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    let d = out.dtype();
    let (s, e, w) = (
        as_dtype(a.tensor(0)?, d)?,
        as_dtype(a.tensor(1)?, d)?,
        a.tensor(2)?,
    );
    let op = a.op;
    if d.is_half() && w.is_wrapped_number() && !w.is_fake() {
        // A Rust-scalar weight stays in f32 (the half types' compute type), as in PyTorch.
        let w = w.item::<f64>()? as f32;
        return match d {
            DType::F16 => map2::<f16, f16, f16>(op, out, &s, &e, |s, e| {
                f16::from_f32(lerp_body!(s.to_f32(), e.to_f32(), w))
            }),
            _ => map2::<bf16, bf16, bf16>(op, out, &s, &e, |s, e| {
                bf16::from_f32(lerp_body!(s.to_f32(), e.to_f32(), w))
            }),
        };
    }
    let w = as_dtype(w, d)?;
    match d {
        DType::F32 => {
            map3::<f32, f32, f32, f32>(op, out, &s, &e, &w, |s, e, w| lerp_body!(s, e, w))
        }
        DType::F64 => {
            map3::<f64, f64, f64, f64>(op, out, &s, &e, &w, |s, e, w| lerp_body!(s, e, w))
        }
        DType::F16 => map3::<f16, f16, f16, f16>(op, out, &s, &e, &w, |s, e, w| {
            f16::from_f32(lerp_body!(s.to_f32(), e.to_f32(), w.to_f32()))
        }),
        DType::BF16 => map3::<bf16, bf16, bf16, bf16>(op, out, &s, &e, &w, |s, e, w| {
            bf16::from_f32(lerp_body!(s.to_f32(), e.to_f32(), w.to_f32()))
        }),
        other => Err(Error::dtype(
            "lerp",
            format!("expected a floating point tensor, got {other}"),
        )),
    }
}

fn lerp_lowering(_: &[&Attr]) -> Result<E> {
    use ScalarOp::*;
    let (s, e, w) = (E::arg(0), E::arg(1), E::arg(2));
    let diff = op(Sub, [e.clone(), s.clone()]);
    Ok(op(
        Where,
        [
            op(Lt, [op(Abs, [w.clone()]), lit(0.5)]),
            op(Add, [s, op(Mul, [w.clone(), diff.clone()])]),
            op(Sub, [e, op(Mul, [diff, op(Sub, [lit(1.0), w])])]),
        ],
    ))
}

/// d/ds = 1 - w, d/de = w, d/dw = e - s.
fn lerp_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (s, e, w) = (c.args.tensor(0)?, c.args.tensor(1)?, c.args.tensor(2)?);
    let g = c.grad(0)?;
    let gs = if s.requires_grad() {
        grad_for(&g.mul(&w.neg()?.add_scalar(1.0)?)?, s)?
    } else {
        None
    };
    let ge = if e.requires_grad() {
        grad_for(&g.mul(w)?, e)?
    } else {
        None
    };
    let gw = if w.requires_grad() {
        grad_for(&g.mul(&e.sub(s)?)?, w)?
    } else {
        None
    };
    Ok(vec![gs, ge, gw])
}

/// `lerp(Tensor self, Tensor end, Tensor weight) -> Tensor`
pub static LERP: OpDef = OpDef {
    name: "lerp",
    schema: "lerp(Tensor self, Tensor end, Tensor weight) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: lerp_meta,
        fill: lerp_fill,
    },
    derivative: Some(lerp_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(lerp_lowering, DTypeRule::Promote)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Linear interpolation `self + weight * (end - self)`, computed as PyTorch does (from the
    /// nearer end, so `weight = 0` gives `self` and `weight = 1` gives `end` exactly). Floating
    /// tensors of one dtype; broadcasting.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let s = Tensor::from_vec(vec![0.0f32, 10.0], &[2])?;
    /// let e = Tensor::from_vec(vec![1.0f32, 20.0], &[2])?;
    /// let w = Tensor::from_vec(vec![0.25f32, 1.0], &[2])?;
    /// assert_eq!(s.lerp(&e, &w)?.to_vec::<f32>()?, vec![0.25, 20.0]);
    /// assert_eq!(s.lerp_scalar(&e, 0.5)?.to_vec::<f32>()?, vec![0.5, 15.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn lerp(&self, end: &Tensor, weight: &Tensor) -> Result<Tensor> {
        call1(&LERP, &[self.into(), end.into(), weight.into()])
    }

    /// [`Tensor::lerp`] with a Rust scalar weight.
    pub fn lerp_scalar(&self, end: &Tensor, weight: impl Into<Scalar>) -> Result<Tensor> {
        self.lerp(end, &Tensor::wrapped_scalar(weight.into()))
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &ATAN2,
    &HYPOT,
    &COPYSIGN,
    &FMOD,
    &FMAX,
    &FMIN,
    &FLOOR_DIVIDE,
    &LERP,
];
