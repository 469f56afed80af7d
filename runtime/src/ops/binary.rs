//! Binary arithmetic ops with broadcasting and PyTorch type promotion. Each op is a zero-sized
//! type implementing [`BinaryMath`], so the scalar function inlines into the loop.

use half::{bf16, f16};
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::{GradCtx, Kernel, OpDef, OutSpec, Saved};
use crate::dispatch::call1;
use crate::kernels::map::map2;
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
    fn f32(a: f32, b: f32) -> f32;
    fn f64(a: f64, b: f64) -> f64;
    /// Integer semantics (wrapping); i32 computes through i64 and truncates.
    fn int(a: i64, b: i64) -> i64;
    fn bool(a: bool, b: bool) -> bool {
        Self::int(a as i64, b as i64) != 0
    }
}

/// The dtype two operands compute in, honouring wrapped Rust scalars (which only raise the
/// category) — PyTorch's `result_type`.
pub fn result_type(a: &Tensor, b: &Tensor) -> DType {
    match (a.is_wrapped_number(), b.is_wrapped_number()) {
        (true, false) => DType::promote_with_scalar(b.dtype(), a.dtype().category()),
        (false, true) => DType::promote_with_scalar(a.dtype(), b.dtype().category()),
        _ => DType::promote(a.dtype(), b.dtype()),
    }
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
    let x = as_dtype(a.tensor(0)?, out.dtype())?;
    let y = as_dtype(a.tensor(1)?, out.dtype())?;
    let op = a.op;
    match out.dtype() {
        DType::F32 => map2::<f32, f32, f32>(op, out, &x, &y, M::f32),
        DType::F64 => map2::<f64, f64, f64>(op, out, &x, &y, M::f64),
        DType::F16 => map2::<f16, f16, f16>(op, out, &x, &y, |p, q| {
            f16::from_f32(M::f32(p.to_f32(), q.to_f32()))
        }),
        DType::BF16 => map2::<bf16, bf16, bf16>(op, out, &x, &y, |p, q| {
            bf16::from_f32(M::f32(p.to_f32(), q.to_f32()))
        }),
        DType::I32 => map2::<i32, i32, i32>(op, out, &x, &y, |p, q| {
            M::int(p as i64, q as i64) as i32
        }),
        DType::I64 => map2::<i64, i64, i64>(op, out, &x, &y, M::int),
        DType::Bool => map2::<bool, bool, bool>(op, out, &x, &y, M::bool),
    }
}

/// Declares a binary op: its math type and its `OpDef` static.
macro_rules! binary_op {
    ($STATIC:ident, $Math:ident, $name:literal, out = $out:ident, bool_ok = $bool_ok:expr,
     f32 = $f32:expr, f64 = $f64:expr, int = $int:expr, bool = $bool:expr,
     grad = $grad:expr, saved = $saved:ident) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl BinaryMath for $Math {
            const NAME: &'static str = $name;
            const OUT: BinaryOut = BinaryOut::$out;
            const BOOL_OK: bool = $bool_ok;
            #[inline(always)]
            fn f32(a: f32, b: f32) -> f32 {
                ($f32)(a, b)
            }
            #[inline(always)]
            fn f64(a: f64, b: f64) -> f64 {
                ($f64)(a, b)
            }
            #[inline(always)]
            fn int(a: i64, b: i64) -> i64 {
                ($int)(a, b)
            }
            #[inline(always)]
            fn bool(a: bool, b: bool) -> bool {
                ($bool)(a, b)
            }
        }
        #[doc = concat!("`", $name, "(Tensor self, Tensor other) -> Tensor`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor self, Tensor other) -> Tensor"),
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: binary_meta::<$Math>,
                fill: binary_fill::<$Math>,
            },
            derivative: $grad,
            saved: Saved::$saved,
        };
    };
}


/// Reduces a broadcast gradient back to the shape of operand `t`, or `None` when `t` needs none.
pub fn grad_for(g: &Tensor, t: &Tensor) -> Result<Option<Tensor>> {
    if !t.requires_grad() {
        return Ok(None);
    }
    Ok(Some(g.sum_to_shape(t.shape())?))
}

fn operands<'a>(c: &'a GradCtx) -> Result<(&'a Tensor, &'a Tensor, Tensor)> {
    Ok((c.args.tensor(0)?, c.args.tensor(1)?, c.grad(0)?))
}

fn no_bool(_: bool, _: bool) -> bool {
    false
}

binary_op!(ADD, Add, "add", out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| a + b, f64 = |a: f64, b: f64| a + b,
    int = i64::wrapping_add, bool = |a: bool, b: bool| a | b,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        Ok(vec![grad_for(&g, x)?, grad_for(&g, y)?])
    }), saved = Nothing);

binary_op!(SUB, Sub, "sub", out = Promote, bool_ok = false,
    f32 = |a: f32, b: f32| a - b, f64 = |a: f64, b: f64| a - b,
    int = i64::wrapping_sub, bool = no_bool,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        Ok(vec![grad_for(&g, x)?, grad_for(&g.neg()?, y)?])
    }), saved = Nothing);

binary_op!(MUL, Mul, "mul", out = Promote, bool_ok = true,
    f32 = |a: f32, b: f32| a * b, f64 = |a: f64, b: f64| a * b,
    int = i64::wrapping_mul, bool = |a: bool, b: bool| a & b,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        let gx = if x.requires_grad() { grad_for(&g.mul(y)?, x)? } else { None };
        let gy = if y.requires_grad() { grad_for(&g.mul(x)?, y)? } else { None };
        Ok(vec![gx, gy])
    }), saved = Inputs);

binary_op!(DIV, Div, "div", out = Float, bool_ok = true,
    f32 = |a: f32, b: f32| a / b, f64 = |a: f64, b: f64| a / b,
    // Unused: true division computes integers in f32.
    int = |a: i64, _b: i64| a, bool = no_bool,
    grad = Some(|c| {
        let (x, y, g) = operands(c)?;
        let gx = if x.requires_grad() { grad_for(&g.div(y)?, x)? } else { None };
        let gy = if y.requires_grad() {
            // d(x/y)/dy = -x / y^2 = -out / y
            let out = &c.outputs[0];
            grad_for(&g.mul(out)?.div(y)?.neg()?, y)?
        } else {
            None
        };
        Ok(vec![gx, gy])
    }), saved = All);

/// Every binary op of this family.
pub static OPS: &[&OpDef] = &[&ADD, &SUB, &MUL, &DIV];

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
}
