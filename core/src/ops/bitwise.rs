//! Bitwise ops on integer and bool tensors (floating operands are a dtype error, as in
//! PyTorch): `bitwise_and`, `bitwise_or`, `bitwise_xor`, `bitwise_not` (bool: logical) and the
//! shifts `bitwise_left_shift`, `bitwise_right_shift` (integers; a shift by a negative amount or
//! by the bit width or more gives 0, or the sign fill for `>>`, as PyTorch's kernels do).

use tensorplay_ir::graph::Attr;
use tensorplay_ir::{DType, Error, OpClass, Result, ScalarExpr, ScalarOp};

use super::binary::{BinaryMath, BinaryOut, binary_fill, binary_meta};
use super::binary_decl::binary_decl;
use super::{AutocastPolicy, DTypeRule, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule};
use crate::dispatch::call1;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::{Args, Scalar};

/// The shared binary meta rule, refusing floating results.
fn int_meta<M: BinaryMath>(a: Args) -> Result<Vec<OutSpec>> {
    let spec = binary_meta::<M>(a)?;
    if spec[0].dtype.is_float() {
        return Err(Error::dtype(
            M::NAME,
            format!(
                "expected integer or bool operands, got {} and {}",
                a.tensor(0)?.dtype(),
                a.tensor(1)?.dtype()
            ),
        ));
    }
    Ok(spec)
}

/// `a << b` with PyTorch's out-of-range rule (i32 computes through i64 and truncates, which
/// gives the same bits: amounts of 32..63 shift every bit of an i32 out).
fn shl(a: i64, b: i64) -> i64 {
    if (b as u64) < 64 {
        ((a as u64) << b) as i64
    } else {
        0
    }
}

/// Arithmetic `a >> b`; out-of-range amounts fill with the sign bit.
fn shr(a: i64, b: i64) -> i64 {
    a >> (if (b as u64) < 64 { b } else { 63 })
}

fn unused_float<T>(a: T, _: T) -> T {
    a
}

/// Declares a bitwise binary op, its tensor method and its Rust-scalar method, through
/// [`binary_decl!`].
macro_rules! bitwise_op {
    ($(#[$attr:meta])* $STATIC:ident, $Math:ident, $name:literal, $method:ident, $smethod:ident,
     bool_ok = $bool_ok:expr, int = $int:expr, bool = $bool:expr, scalar = $sop:ident,
     rule = $rule:ident) => {
        binary_decl! {
            $STATIC, $Math, $name, out = Promote, bool_ok = $bool_ok, bulk = None,
            f32 = unused_float, f64 = unused_float, int = $int, bool = $bool,
            meta = int_meta::<$Math>, fill = binary_fill::<$Math>, grad = None, saved = Nothing,
            lower = Pointwise::op(
                |_: &[&Attr]| Ok(ScalarExpr::unary(ScalarOp::$sop)),
                DTypeRule::$rule,
            ),
            autocast = AutocastPolicy::Keep,
            methods = $(#[$attr])* $method,
                #[doc = concat!("`", $name, "(self, s)` for a Rust integer or bool `s`.")] $smethod
        }
    };
}

bitwise_op! {
    /// Elementwise `self & other` on integers (logical and on bools), with broadcasting.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![12i32, -1], &[2])?;
    /// assert_eq!(a.bitwise_and_scalar(10)?.to_vec::<i32>()?, vec![8, 10]);
    /// assert!(Tensor::from_vec(vec![1.0f32], &[1])?.bitwise_and_scalar(1).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    BITWISE_AND, BitwiseAnd, "bitwise_and", bitwise_and, bitwise_and_scalar, bool_ok = true,
    int = |a: i64, b: i64| a & b, bool = |a: bool, b: bool| a & b, scalar = BitAnd,
    rule = Promote
}

bitwise_op! {
    /// Elementwise `self | other` on integers (logical or on bools).
    BITWISE_OR, BitwiseOr, "bitwise_or", bitwise_or, bitwise_or_scalar, bool_ok = true,
    int = |a: i64, b: i64| a | b, bool = |a: bool, b: bool| a | b, scalar = BitOr,
    rule = Promote
}

bitwise_op! {
    /// Elementwise `self ^ other` on integers (logical xor on bools).
    BITWISE_XOR, BitwiseXor, "bitwise_xor", bitwise_xor, bitwise_xor_scalar, bool_ok = true,
    int = |a: i64, b: i64| a ^ b, bool = |a: bool, b: bool| a ^ b, scalar = BitXor,
    rule = Promote
}

bitwise_op! {
    /// Elementwise `self << other` on integers: bits shifted out are lost (wrapping); a negative
    /// amount or one of the bit width or more gives 0. Bool operands are an error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1i64, -3, 5], &[3])?;
    /// let s = Tensor::from_vec(vec![4i64, 1, 64], &[3])?;
    /// assert_eq!(a.bitwise_left_shift(&s)?.to_vec::<i64>()?, vec![16, -6, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    BITWISE_LEFT_SHIFT, BitwiseLeftShift, "bitwise_left_shift", bitwise_left_shift,
    bitwise_left_shift_scalar, bool_ok = false, int = shl, bool = |a: bool, _| a,
    scalar = Shl, rule = PromoteNoBool
}

bitwise_op! {
    /// Elementwise arithmetic `self >> other` on integers; a negative amount or one of the bit
    /// width or more fills with the sign bit. Bool operands are an error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![-16i32, 16, -1], &[3])?;
    /// assert_eq!(a.bitwise_right_shift_scalar(2)?.to_vec::<i32>()?, vec![-4, 4, -1]);
    /// assert_eq!(a.bitwise_right_shift_scalar(40)?.to_vec::<i32>()?, vec![-1, 0, -1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    BITWISE_RIGHT_SHIFT, BitwiseRightShift, "bitwise_right_shift", bitwise_right_shift,
    bitwise_right_shift_scalar, bool_ok = false, int = shr, bool = |a: bool, _| a,
    scalar = Shr, rule = PromoteNoBool
}

fn bitwise_not_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if x.dtype().is_float() {
        return Err(Error::dtype(
            "bitwise_not",
            format!("expected an integer or bool tensor, got {}", x.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

fn bitwise_not_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (out, x, op) = (&outs[0], a.tensor(0)?, a.op);
    match x.dtype() {
        DType::I32 => map1::<i32, i32>(op, out, x, |v| !v),
        DType::I64 => map1::<i64, i64>(op, out, x, |v| !v),
        DType::Bool => map1::<bool, bool>(op, out, x, |v| !v),
        d => Err(Error::dtype(
            "bitwise_not",
            format!("expected an integer or bool tensor, got {d}"),
        )),
    }
}

/// `bitwise_not(Tensor self) -> Tensor`
pub static BITWISE_NOT: OpDef = OpDef {
    name: "bitwise_not",
    schema: "bitwise_not(Tensor self) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: bitwise_not_meta,
        fill: bitwise_not_fill,
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::Pointwise(Pointwise::op(
        |_: &[&Attr]| Ok(ScalarExpr::unary(ScalarOp::BitNot)),
        DTypeRule::Same,
    )),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// Elementwise `!x` on integers (two's complement) and bools (logical not).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![0i64, 5, -1], &[3])?;
    /// assert_eq!(a.bitwise_not()?.to_vec::<i64>()?, vec![-1, -6, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn bitwise_not(&self) -> Result<Tensor> {
        call1(&BITWISE_NOT, &[self.into()])
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &BITWISE_AND,
    &BITWISE_OR,
    &BITWISE_XOR,
    &BITWISE_NOT,
    &BITWISE_LEFT_SHIFT,
    &BITWISE_RIGHT_SHIFT,
];
