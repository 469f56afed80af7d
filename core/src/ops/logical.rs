//! Logical ops (and, or, xor, not) and the selection ops `where` and `clamp`.
//!
//! Logical ops accept any dtypes and return bool: a value is true when it is nonzero (NaN is
//! true, ±0 false). `where` picks between two broadcast operands by a bool condition; `clamp`
//! bounds a tensor by optional Rust scalars with PyTorch's result-type rule.

use half::{bf16, f16};
use tensorplay_ir::dtype::Category;
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::binary::{as_dtype, result_type};
use super::lowering::expr;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::element::Element;
use crate::kernels::map::{map1, map2, map3};
use crate::tensor::Tensor;
use crate::value::{Args, Scalar, Value};
use crate::with_dtype;

// ---- and / or / xor / not ------------------------------------------------------------------------

/// The scalar definition of a binary logical op on truth values.
pub trait LogicalMath: 'static {
    const NAME: &'static str;
    fn apply(a: bool, b: bool) -> bool;
}

/// Meta rule shared by the binary logical ops: broadcast shape, bool dtype, any input dtypes.
pub fn logical_meta<M: LogicalMath>(a: Args) -> Result<Vec<OutSpec>> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let shape = broadcast_shapes(M::NAME, x.shape(), y.shape())?;
    Ok(vec![OutSpec::new(&shape, DType::Bool)])
}

/// Fill shared by the binary logical ops: operands become truth values (`!= 0`), then combine.
pub fn logical_fill<M: LogicalMath>(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = as_dtype(a.tensor(0)?, DType::Bool)?;
    let y = as_dtype(a.tensor(1)?, DType::Bool)?;
    map2::<bool, bool, bool>(a.op, &outs[0], &x, &y, M::apply)
}

macro_rules! logical_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident, |$a:ident, $b:ident| $e:expr) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl LogicalMath for $Math {
            const NAME: &'static str = $name;
            #[inline(always)]
            fn apply($a: bool, $b: bool) -> bool {
                $e
            }
        }
        #[doc = concat!("`", $name, "(Tensor self, Tensor other) -> Tensor` (bool result)")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self, Tensor other) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: logical_meta::<$Math>,
                fill: logical_fill::<$Math>,
            },
            derivative: None,
            saved: Saved::Nothing,
            lower: Lower::Pointwise(Pointwise::op(expr::$method, DTypeRule::Logical)),
            autocast: AutocastPolicy::Keep,
            vmap: VmapRule::Derived,
        };
        impl Tensor {
            #[doc = concat!("Elementwise `", $name, "` of truth values (nonzero and NaN are true), ")]
            #[doc = "with broadcasting; any dtypes, bool result."]
            $(#[$attr])*
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                call1(&$STATIC, &[self.into(), other.into()])
            }
        }
    };
}

logical_op! {
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![0.0f32, f32::NAN, -0.0, 2.0], &[4])?;
    /// let b = Tensor::from_vec(vec![1i64, 1, 1, 0], &[4])?;
    /// assert_eq!(a.logical_and(&b)?.to_vec::<bool>()?, vec![false, true, false, false]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    LOGICAL_AND, LogicalAnd, "logical_and", logical_and, |a, b| a & b
}
logical_op! {
    LOGICAL_OR, LogicalOr, "logical_or", logical_or, |a, b| a | b
}
logical_op! {
    LOGICAL_XOR, LogicalXor, "logical_xor", logical_xor, |a, b| a ^ b
}

/// `logical_not(Tensor self) -> Tensor` (bool result; true where `self == 0`).
pub static LOGICAL_NOT: OpDef = OpDef {
    name: "logical_not",
    schema: "logical_not(Tensor self) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: |a| Ok(vec![OutSpec::new(a.tensor(0)?.shape(), DType::Bool)]),
        fill: |a, outs| {
            let x = a.tensor(0)?;
            with_dtype!(x.dtype(), T => map1::<T, bool>(a.op, &outs[0], x, |v| !v.to_bool()))
        },
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::Pointwise(Pointwise::op(expr::logical_not, DTypeRule::Logical)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

// ---- where ---------------------------------------------------------------------------------------

fn where_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (cond, x, y) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    if cond.dtype() != DType::Bool {
        return Err(Error::dtype(
            "where",
            format!("condition must be a bool tensor, got {}", cond.dtype()),
        ));
    }
    let xy = broadcast_shapes("where", x.shape(), y.shape())?;
    let shape = broadcast_shapes("where", cond.shape(), &xy)?;
    let dtype = result_type(x, y);
    for (arg, t) in [("self", x), ("other", y)] {
        check_f32_scalar_branch(arg, t, dtype)?;
    }
    Ok(vec![OutSpec::new(&shape, dtype)])
}

/// A Rust float scalar branch of `where` must fit an f32 result (PyTorch converts it checked:
/// `where(c, f32_tensor, 1e39)` raises; half results take it unchecked, as there).
fn check_f32_scalar_branch(arg: &str, t: &Tensor, dtype: DType) -> Result<()> {
    if dtype != DType::F32 || !t.is_wrapped_number() || t.is_fake() || t.dtype() != DType::F64 {
        return Ok(());
    }
    let v = t.item::<f64>()?;
    if v.is_finite() && v.abs() > f32::MAX as f64 {
        return Err(Error::argument(
            "where",
            arg,
            "a scalar that f32 can hold (the result dtype)",
            v.to_string(),
        ));
    }
    Ok(())
}

fn where_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    let cond = a.tensor(0)?;
    let x = as_dtype(a.tensor(1)?, out.dtype())?;
    let y = as_dtype(a.tensor(2)?, out.dtype())?;
    with_dtype!(out.dtype(), T => map3::<bool, T, T, T>(a.op, out, cond, &x, &y, |c, p, q| {
        if c { p } else { q }
    }))
}

/// The gradient flows to `self` where the condition holds and to `other` elsewhere, each reduced
/// back to its operand's shape.
fn where_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (cond, x, y) = (c.args.tensor(0)?, c.args.tensor(1)?, c.args.tensor(2)?);
    let g = c.grad(0)?;
    let z = Tensor::zeros(&[], g.dtype());
    let gx = if x.requires_grad() {
        Some(Tensor::where_cond(cond, &g, &z)?.sum_to_shape_of(x)?)
    } else {
        None
    };
    let gy = if y.requires_grad() {
        Some(Tensor::where_cond(cond, &z, &g)?.sum_to_shape_of(y)?)
    } else {
        None
    };
    Ok(vec![None, gx, gy])
}

/// `where(Tensor condition, Tensor self, Tensor other) -> Tensor`
pub static WHERE: OpDef = OpDef {
    name: "where",
    schema: "where(Tensor condition, Tensor self, Tensor other) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: where_meta,
        fill: where_fill,
    },
    derivative: Some(where_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(expr::where_, DTypeRule::Where)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

// ---- clamp ---------------------------------------------------------------------------------------

/// An optional Scalar argument (`None` or absent gives `None`).
fn opt_scalar(a: Args, i: usize) -> Result<Option<Scalar>> {
    match a.values.get(i) {
        None | Some(Value::None) => Ok(None),
        Some(_) => a.scalar(i).map(Some),
    }
}

fn scalar_category(s: Scalar) -> Category {
    match s {
        Scalar::Bool(_) => Category::Bool,
        Scalar::Int(_) => Category::Integer,
        Scalar::Float(_) => Category::Floating,
    }
}

/// The validated bounds of a clamp call and its result dtype.
fn clamp_args(a: Args) -> Result<(Option<Scalar>, Option<Scalar>, DType)> {
    let x = a.tensor(0)?;
    let (lo, hi) = (opt_scalar(a, 1)?, opt_scalar(a, 2)?);
    if lo.is_none() && hi.is_none() {
        return Err(Error::argument(
            "clamp",
            "min, max",
            "at least one of min and max",
            "neither",
        ));
    }
    if x.dtype() == DType::Bool {
        return Err(Error::dtype("clamp", "bool tensors are not supported"));
    }
    let dtype = [lo, hi].into_iter().flatten().fold(x.dtype(), |d, s| {
        DType::promote_with_scalar(d, scalar_category(s))
    });
    // PyTorch converts the bounds to the result dtype with its overflow check: an f16 clamp to
    // ±1e5, or an i32 clamp to 2^40, is an error (not a clamp to ±inf or a wrapped bound).
    for (name, bound) in [("min", lo), ("max", hi)] {
        if let Some(s) = bound {
            super::cast::check_scalar_fits("clamp", name, s, dtype)?;
        }
    }
    Ok((lo, hi, dtype))
}

fn clamp_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (_, _, dtype) = clamp_args(a)?;
    Ok(vec![OutSpec::new(a.tensor(0)?.shape(), dtype)])
}

/// Float clamp: a NaN input stays NaN, a NaN bound makes every element NaN, and `min > max`
/// gives `max` everywhere (the max bound is applied last).
#[inline(always)]
fn clamp_float(v: f32, lo: f32, hi: f32, lo_nan: bool, hi_nan: bool) -> f32 {
    let v = if v < lo || lo_nan { lo } else { v };
    if v > hi || hi_nan { hi } else { v }
}

#[inline(always)]
fn clamp_double(v: f64, lo: f64, hi: f64, lo_nan: bool, hi_nan: bool) -> f64 {
    let v = if v < lo || lo_nan { lo } else { v };
    if v > hi || hi_nan { hi } else { v }
}

fn clamp_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (lo, hi, dtype) = clamp_args(a)?;
    let out = &outs[0];
    let x = as_dtype(a.tensor(0)?, dtype)?;
    let op = a.op;
    let flo = lo.map_or(f64::NEG_INFINITY, Scalar::to_f64);
    let fhi = hi.map_or(f64::INFINITY, Scalar::to_f64);
    let (lo_nan, hi_nan) = (flo.is_nan(), fhi.is_nan());
    let (lo32, hi32) = (flo as f32, fhi as f32);
    // Integer results only come with bool/int bounds, already checked to fit the dtype.
    let int_bound = |s: Option<Scalar>, default: i64| match s {
        Some(Scalar::Int(i)) => i,
        Some(Scalar::Bool(b)) => b as i64,
        Some(Scalar::Float(f)) => f as i64,
        None => default,
    };
    let (ilo, ihi) = (int_bound(lo, i64::MIN), int_bound(hi, i64::MAX));
    match dtype {
        DType::F32 => map1::<f32, f32>(op, out, &x, |v| clamp_float(v, lo32, hi32, lo_nan, hi_nan)),
        DType::F64 => map1::<f64, f64>(op, out, &x, |v| clamp_double(v, flo, fhi, lo_nan, hi_nan)),
        DType::F16 => map1::<f16, f16>(op, out, &x, |v| {
            f16::from_f32(clamp_float(v.to_f32(), lo32, hi32, lo_nan, hi_nan))
        }),
        DType::BF16 => map1::<bf16, bf16>(op, out, &x, |v| {
            bf16::from_f32(clamp_float(v.to_f32(), lo32, hi32, lo_nan, hi_nan))
        }),
        DType::I32 => {
            let fit = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
            let (l, h) = (fit(ilo), fit(ihi));
            map1::<i32, i32>(op, out, &x, |v| v.max(l).min(h))
        }
        DType::I64 => map1::<i64, i64>(op, out, &x, |v| v.max(ilo).min(ihi)),
        DType::Bool => Err(Error::dtype("clamp", "bool tensors are not supported")),
    }
}

/// The gradient passes where `min < x < max` (present bounds only; PyTorch 2.15: 0 at a bound)
/// and is 0 elsewhere.
fn clamp_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    if !x.requires_grad() {
        return Ok(vec![None]);
    }
    let (lo, hi) = (opt_scalar(c.args, 1)?, opt_scalar(c.args, 2)?);
    let g = c.grad(0)?;
    let mask = match (lo, hi) {
        (Some(l), Some(h)) => x.gt_scalar(l)?.logical_and(&x.lt_scalar(h)?)?,
        (Some(l), None) => x.gt_scalar(l)?,
        (None, Some(h)) => x.lt_scalar(h)?,
        (None, None) => {
            return Err(Error::argument(
                "clamp",
                "min, max",
                "at least one of min and max",
                "neither",
            ));
        }
    };
    Ok(vec![Some(Tensor::where_cond(
        &mask,
        &g,
        &Tensor::zeros(&[], g.dtype()),
    )?)])
}

/// `clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor`
pub static CLAMP: OpDef = OpDef {
    name: "clamp",
    schema: "clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: clamp_meta,
        fill: clamp_fill,
    },
    derivative: Some(clamp_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(expr::clamp, DTypeRule::Clamp)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &LOGICAL_AND,
    &LOGICAL_OR,
    &LOGICAL_XOR,
    &LOGICAL_NOT,
    &WHERE,
    &CLAMP,
];

fn bound_value(s: Option<Scalar>) -> Value {
    s.map_or(Value::None, Value::from)
}

impl Tensor {
    /// Elementwise logical not: true where the element is zero (`-0.0` included; NaN is nonzero).
    pub fn logical_not(&self) -> Result<Tensor> {
        call1(&LOGICAL_NOT, &[self.into()])
    }

    /// Elementwise `if condition { a } else { b }` with broadcasting across all three; the
    /// condition must be bool, the result dtype is `a` and `b` promoted.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let c = Tensor::from_vec(vec![true, false, true], &[3])?;
    /// let a = Tensor::from_vec(vec![1i64, 2, 3], &[3])?;
    /// let b = Tensor::scalar(0.5f32);
    /// let w = Tensor::where_cond(&c, &a, &b)?;
    /// assert_eq!(w.to_vec::<f32>()?, vec![1.0, 0.5, 3.0]);
    /// assert!(Tensor::where_cond(&a, &a, &b).is_err()); // non-bool condition
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn where_cond(condition: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        call1(&WHERE, &[condition.into(), a.into(), b.into()])
    }

    /// `where(condition, a, b)` with a Rust scalar `b` (PyTorch's `where(c, x, scalar)`): the
    /// scalar only raises `a`'s category, as in arithmetic.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let c = Tensor::from_vec(vec![true, false], &[2])?;
    /// let a = Tensor::from_vec(vec![1i32, 2], &[2])?;
    /// assert_eq!(Tensor::where_tensor_scalar(&c, &a, 7)?.to_vec::<i32>()?, vec![1, 7]);
    /// assert_eq!(Tensor::where_tensor_scalar(&c, &a, 0.5)?.dtype(), DType::F32);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn where_tensor_scalar(
        condition: &Tensor,
        a: &Tensor,
        b: impl Into<Scalar>,
    ) -> Result<Tensor> {
        Tensor::where_cond(condition, a, &Tensor::wrapped_scalar(b.into()))
    }

    /// `where(condition, a, b)` with a Rust scalar `a`.
    pub fn where_scalar_tensor(
        condition: &Tensor,
        a: impl Into<Scalar>,
        b: &Tensor,
    ) -> Result<Tensor> {
        Tensor::where_cond(condition, &Tensor::wrapped_scalar(a.into()), b)
    }

    /// `where(condition, a, b)` with two Rust scalars (PyTorch's `where(c, 2.5, 1)`): the result
    /// has the condition's shape and the scalars' category in its default dtype — f32 when either
    /// is a float, i64 for integers, bool for two bools.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let c = Tensor::from_vec(vec![true, false], &[2])?;
    /// let w = Tensor::where_scalar(&c, 2.5, 1)?;
    /// assert_eq!(w.dtype(), DType::F32);
    /// assert_eq!(w.to_vec::<f32>()?, vec![2.5, 1.0]);
    /// assert_eq!(Tensor::where_scalar(&c, 3, 4)?.to_vec::<i64>()?, vec![3, 4]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn where_scalar(
        condition: &Tensor,
        a: impl Into<Scalar>,
        b: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let (a, b) = (a.into(), b.into());
        let default = |s: Scalar| match s {
            Scalar::Float(_) => DType::F32,
            Scalar::Int(_) => DType::I64,
            Scalar::Bool(_) => DType::Bool,
        };
        let dtype = DType::promote(default(a), default(b));
        Tensor::where_cond(
            condition,
            &Tensor::try_full(&[], a, dtype)?,
            &Tensor::try_full(&[], b, dtype)?,
        )
    }

    /// Bounds every element to `[min, max]` (either may be `None`, not both). The result dtype is
    /// that of the tensor and the bounds as Rust scalars (an integer tensor with a float bound
    /// becomes f32). NaN elements stay NaN; if `min > max` every element becomes `max`.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let x = Tensor::from_vec(vec![-2.0f32, 0.5, f32::NAN, 7.0], &[4])?;
    /// let y = x.clamp(Some(0.0), Some(1.0))?.to_vec::<f32>()?;
    /// assert_eq!((y[0], y[1], y[3]), (0.0, 0.5, 1.0));
    /// assert!(y[2].is_nan());
    /// let i = Tensor::from_vec(vec![-5i64, 5], &[2])?;
    /// assert_eq!(i.clamp(Some(0), None)?.to_vec::<i64>()?, vec![0, 5]);
    /// assert_eq!(i.clamp_max(0.5)?.dtype(), DType::F32);
    /// assert!(x.clamp::<f64>(None, None).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn clamp<S: Into<Scalar>>(&self, min: Option<S>, max: Option<S>) -> Result<Tensor> {
        let (min, max) = (min.map(Into::into), max.map(Into::into));
        call1(&CLAMP, &[self.into(), bound_value(min), bound_value(max)])
    }

    /// `clamp(min, None)`: bounds from below.
    pub fn clamp_min(&self, min: impl Into<Scalar>) -> Result<Tensor> {
        call1(
            &CLAMP,
            &[self.into(), bound_value(Some(min.into())), Value::None],
        )
    }

    /// `clamp(None, max)`: bounds from above.
    pub fn clamp_max(&self, max: impl Into<Scalar>) -> Result<Tensor> {
        call1(
            &CLAMP,
            &[self.into(), Value::None, bound_value(Some(max.into()))],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_scalar_rules() {
        assert_eq!(
            clamp_float(f32::NAN, 0.0, 1.0, false, false).to_bits(),
            f32::NAN.to_bits()
        );
        assert_eq!(clamp_float(5.0, 3.0, 1.0, false, false), 1.0);
        assert_eq!(clamp_float(-5.0, 3.0, 1.0, false, false), 1.0);
        assert!(clamp_double(0.5, f64::NAN, 1.0, true, false).is_nan());
    }
}
