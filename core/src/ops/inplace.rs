//! In-place ops: write into argument 0 and bump its storage version. Under grad mode they refuse
//! tensors that require grad (see the dispatcher), so saved tensors can only change through
//! `no_grad` code, which autograd then detects by version.

use tensorplay_ir::shape::{broadcast_shapes, fmt_shape};
use tensorplay_ir::{DType, Device, Error, OpClass, Result};

use super::binary::{Add, BinaryMath, Div, Mul, Sub, binary_fill, result_type};
use super::{AutocastPolicy, Kernel, Lower, OpDef, Saved, VmapRule};
use crate::dispatch::call1;
use crate::tensor::Tensor;
use crate::value::{Args, Scalar, Value};

/// Rejects writes into tensors where several elements share one memory location.
fn check_writable(op: &str, t: &Tensor) -> Result<()> {
    if t.shape()
        .iter()
        .zip(t.strides())
        .any(|(&s, &st)| s > 1 && st == 0)
    {
        return Err(Error::argument(
            op,
            "self",
            "a tensor without overlapping elements",
            format!(
                "an expanded tensor of shape {} with strides {:?}; call contiguous() first",
                fmt_shape(t.shape()),
                t.strides()
            ),
        ));
    }
    Ok(())
}

/// Checks that `value` broadcasts to `target` and its dtype can be written into `target`.
fn check_operand(op: &str, target: &Tensor, value: &Tensor, promote: bool) -> Result<()> {
    check_writable(op, target)?;
    let shape = broadcast_shapes(op, target.shape(), value.shape())?;
    if shape.as_slice() != target.shape() {
        return Err(Error::shape(
            op,
            format!(
                "output with shape {} doesn't match the broadcast shape {}",
                fmt_shape(target.shape()),
                fmt_shape(&shape)
            ),
        ));
    }
    if promote {
        let rt = result_type(target, value);
        if rt.category() > target.dtype().category() {
            return Err(Error::dtype(
                op,
                format!(
                    "result type {rt} can't be cast to the desired output type {}",
                    target.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// Clones `value` when it shares storage with `target`, so the write cannot clobber its own input.
fn unaliased(target: &Tensor, value: &Tensor) -> Result<Tensor> {
    if target.storage().same(value.storage()) && !value.same(target) {
        value.clone_tensor()
    } else {
        Ok(value.clone())
    }
}

fn inplace_check<M: BinaryMath>(a: Args) -> Result<()> {
    check_operand(a.op, a.tensor(0)?, a.tensor(1)?, true)?;
    if M::NAME == "div" && !a.tensor(0)?.dtype().is_float() {
        return Err(Error::dtype(
            a.op,
            format!("true division cannot write into {}", a.tensor(0)?.dtype()),
        ));
    }
    if a.tensor(0)?.dtype() == DType::Bool && !M::BOOL_OK {
        return Err(Error::dtype(a.op, "bool tensors are not supported"));
    }
    Ok(())
}

fn inplace_fill<M: BinaryMath>(a: Args) -> Result<()> {
    let target = a.tensor(0)?;
    let value = unaliased(target, a.tensor(1)?)?;
    let rt = result_type(target, &value);
    let args = [Value::Tensor(target.clone()), Value::Tensor(value)];
    if rt != target.dtype() && rt.is_float() {
        // Like PyTorch, compute in the common dtype and round once into the target (rounding the
        // wider operand to the target dtype first would round twice).
        let tmp = Tensor::try_empty_with(a.op, target.shape(), rt, Device::Cpu, false)?;
        binary_fill::<M>(Args::new(a.op, &args), std::slice::from_ref(&tmp))?;
        return super::cast::copy_convert(a.op, target, &tmp);
    }
    binary_fill::<M>(Args::new(a.op, &args), std::slice::from_ref(target))
}

macro_rules! inplace_binary {
    ($STATIC:ident, $Math:ty, $name:literal, $method:ident, $smethod:ident) => {
        #[doc = concat!("`", $name, "(Tensor(a!) self, Tensor other) -> Tensor(a!)`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: concat!($name, "(Tensor(a!) self, Tensor other) -> Tensor(a!)"),
            class: OpClass::Mutating,
            kernel: Kernel::Mutate {
                check: inplace_check::<$Math>,
                fill: inplace_fill::<$Math>,
            },
            derivative: None,
            saved: Saved::Nothing,
            lower: Lower::None,
            autocast: AutocastPolicy::Keep,
            vmap: VmapRule::Derived,
        };
        impl Tensor {
            #[doc = concat!("In-place `", $name, "` (broadcasting `other` to `self`).")]
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                call1(&$STATIC, &[self.into(), other.into()])
            }
            #[doc = concat!("In-place `", $name, "` with a Rust scalar.")]
            pub fn $smethod(&self, s: impl Into<Scalar>) -> Result<Tensor> {
                self.$method(&Tensor::wrapped_scalar(s.into()))
            }
        }
    };
}

inplace_binary!(ADD_, Add, "add_", add_, add_scalar_);
inplace_binary!(SUB_, Sub, "sub_", sub_, sub_scalar_);
inplace_binary!(MUL_, Mul, "mul_", mul_, mul_scalar_);
inplace_binary!(DIV_, Div, "div_", div_, div_scalar_);

/// `copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)`: broadcasting, converting copy.
pub static COPY_: OpDef = OpDef {
    name: "copy_",
    schema: "copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)",
    class: OpClass::Mutating,
    kernel: Kernel::Mutate {
        check: |a| check_operand(a.op, a.tensor(0)?, a.tensor(1)?, false),
        fill: |a| {
            let target = a.tensor(0)?;
            let src = unaliased(target, a.tensor(1)?)?;
            super::cast::copy_convert(a.op, target, &src)
        },
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)`
pub static FILL_: OpDef = OpDef {
    name: "fill_",
    schema: "fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)",
    class: OpClass::Mutating,
    kernel: Kernel::Mutate {
        check: |a| {
            let t = a.tensor(0)?;
            check_writable(a.op, t)?;
            super::cast::check_scalar_fits(a.op, "value", a.scalar(1)?, t.dtype())
        },
        fill: |a| fill_scalar(a.op, a.tensor(0)?, a.scalar(1)?),
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every in-place op.
pub static OPS: &[&OpDef] = &[&ADD_, &SUB_, &MUL_, &DIV_, &COPY_, &FILL_];

/// Writes `value` (cast to the tensor's dtype) into every element of `t`.
pub(crate) fn fill_scalar(op: &str, t: &Tensor, value: Scalar) -> Result<()> {
    super::cast::check_scalar_fits(op, "value", value, t.dtype())?;
    let v = Tensor::wrapped_scalar(value);
    super::cast::copy_convert(op, t, &v)
}

impl Tensor {
    /// Copies `src` into `self` (broadcasting, converting dtype).
    pub fn copy_(&self, src: &Tensor) -> Result<Tensor> {
        call1(&COPY_, &[self.into(), src.into()])
    }

    /// Sets every element to `value`.
    pub fn fill_(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        call1(&FILL_, &[self.into(), Value::from(value.into())])
    }

    /// Sets every element to zero.
    pub fn zero_(&self) -> Result<Tensor> {
        self.fill_(0.0)
    }
}
