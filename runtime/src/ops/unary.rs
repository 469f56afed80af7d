//! Unary elementwise ops. Each op is a zero-sized type implementing [`UnaryMath`]; the generic
//! meta/fill functions are instantiated per op, so the scalar function inlines into the loop.
//!
//! Dtype rules (PyTorch's): floating ops on integer or bool input compute in f32; f16/bf16
//! compute in f32 and round once per element; sign-preserving ops keep integer dtypes.

use half::{bf16, f16};
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::{GradCtx, Kernel, OpDef, OutSpec, Saved};
use crate::dispatch::call1;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::Args;

/// What a unary op does with integer (and bool) inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntRule {
    /// Convert to f32 and compute there (exp, sin, ...).
    Promote,
    /// Compute with [`UnaryMath::int`] in the input dtype (neg, abs, sign, relu).
    Map,
    /// Copy unchanged (floor, ceil, round of an integer).
    Identity,
}

/// The scalar definition of a unary op.
pub trait UnaryMath: 'static {
    const NAME: &'static str;
    const INT: IntRule;
    /// Whether bool input is accepted (under the int rule, computing on 0/1).
    const BOOL_OK: bool = true;
    fn f32(x: f32) -> f32;
    fn f64(x: f64) -> f64;
    /// Integer semantics (wrapping); only used when `INT == IntRule::Map`.
    fn int(x: i64) -> i64 {
        x
    }
}

fn out_dtype<M: UnaryMath>(d: DType) -> Result<DType> {
    if d == DType::Bool && !M::BOOL_OK {
        return Err(Error::dtype(M::NAME, "bool tensors are not supported"));
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

/// Declares a unary op: its math type, its `OpDef` static and its derivative.
macro_rules! unary_op {
    ($STATIC:ident, $Math:ident, $name:literal, $method:ident, int = $rule:ident, bool_ok = $bool_ok:expr,
     f32 = $f32:expr, f64 = $f64:expr, int_fn = $int:expr, grad = $grad:expr, saved = $saved:ident) => {
        #[doc = concat!("Scalar definition of `", $name, "`.")]
        pub struct $Math;
        impl UnaryMath for $Math {
            const NAME: &'static str = $name;
            const INT: IntRule = IntRule::$rule;
            const BOOL_OK: bool = $bool_ok;
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
        };
        impl Tensor {
            #[doc = concat!("Elementwise `", $name, "`.")]
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

fn id(x: i64) -> i64 {
    x
}

unary_op!(NEG, Neg, "neg", neg, int = Map, bool_ok = false,
    f32 = |x: f32| -x, f64 = |x: f64| -x, int_fn = |x: i64| x.wrapping_neg(),
    grad = Some(|c| Ok(vec![Some(c.grad(0)?.neg()?)])), saved = Nothing);

unary_op!(ABS, Abs, "abs", abs, int = Map, bool_ok = true,
    f32 = f32::abs, f64 = f64::abs, int_fn = |x: i64| x.wrapping_abs(),
    grad = Some(|c| {
        let (x, g) = x_and_grad(c)?;
        Ok(vec![Some(g.mul(&x.sign()?)?)])
    }), saved = Inputs);

unary_op!(EXP, Exp, "exp", exp, int = Promote, bool_ok = true,
    f32 = f32::exp, f64 = f64::exp, int_fn = id,
    grad = Some(|c| Ok(vec![Some(c.grad(0)?.mul(&c.outputs[0])?)])), saved = Outputs);

unary_op!(SIGN, Sign, "sign", sign, int = Map, bool_ok = true,
    f32 = |x: f32| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x },
    f64 = |x: f64| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x },
    int_fn = i64::signum,
    grad = Some(|c| Ok(vec![Some(Tensor::zeros_like(c.args.tensor(0)?))])), saved = Nothing);

unary_op!(RELU, Relu, "relu", relu, int = Map, bool_ok = false,
    // NaN propagates (PyTorch: relu(nan) = nan); -0.0 maps to 0.0.
    f32 = |x: f32| if x > 0.0 || x.is_nan() { x } else { 0.0 },
    f64 = |x: f64| if x > 0.0 || x.is_nan() { x } else { 0.0 },
    int_fn = |x: i64| x.max(0),
    grad = Some(|c| {
        let g = c.grad(0)?;
        let mask = c.outputs[0].gt_scalar(0.0)?;
        Ok(vec![Some(g.mul(&mask.to_dtype(g.dtype())?)?)])
    }), saved = Outputs);

/// Every unary op of this family.
pub static OPS: &[&OpDef] = &[&NEG, &ABS, &EXP, &SIGN, &RELU];
