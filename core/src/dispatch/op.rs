//! The op handle: the one type every layer receives, builtin or custom. A layer never asks which
//! kind it holds; it asks the handle for a fact (its name, class, device, autocast cast, backward
//! rule) here, or hands the call on through it (`route.rs`: a batching rule, the capture hook, a
//! kernel). These two files are the only places in the dispatcher that tell the kinds apart.

use std::borrow::Cow;
use std::sync::Arc;

use tensorplay_ir::{Device, Error, OpClass, Result};

use super::custom::{CustomAutograd, CustomOperator};
use super::slot::Slot;
use crate::autocast::{self, Cast};
use crate::ops::{DerivativeFn, Kernel, OpDef};
use crate::value::Value;

/// An op on its way through the dispatcher: a builtin op-table entry or a registered custom
/// operator. Cheap to copy (a tag and a pointer).
#[derive(Clone, Copy)]
pub enum OpHandle<'a> {
    /// An entry of the op table (`tp::<name>`).
    Builtin(&'static OpDef),
    /// A custom operator from the registry (arguments bound to its schema).
    Custom(&'a Arc<dyn CustomOperator>),
}

/// How the autograd layer records a call that needs gradients.
pub(crate) enum BackwardRule<'a> {
    /// A builtin op's derivative from the op table.
    Derivative(&'static OpDef, DerivativeFn),
    /// A custom op's `register_autograd` formula.
    Formula(&'a Arc<dyn CustomOperator>, Arc<dyn CustomAutograd>),
}

impl<'a> OpHandle<'a> {
    /// The name errors use: the op-table name of a builtin (`add`), the qualified name of a
    /// custom op (`mylib::foo`).
    pub fn name(self) -> &'a str {
        match self {
            OpHandle::Builtin(def) => def.name,
            OpHandle::Custom(op) => op.qualname(),
        }
    }

    /// The registry name (`tp::add`, `mylib::foo`), as traces print it.
    pub fn qualname(self) -> Cow<'a, str> {
        match self {
            OpHandle::Builtin(def) => Cow::Owned(format!("tp::{}", def.name)),
            OpHandle::Custom(op) => Cow::Borrowed(op.qualname()),
        }
    }

    /// The op's class for the compiler (custom ops are opaque or mutating).
    pub fn class(self) -> OpClass {
        match self {
            OpHandle::Builtin(def) => def.class,
            OpHandle::Custom(op) => op.class(),
        }
    }

    /// The device the call is for. Builtins: the device all tensor arguments share; custom ops
    /// without tensor arguments: their first `Device` argument.
    pub(crate) fn device(self, args: &[Value]) -> Result<Device> {
        match self {
            OpHandle::Builtin(def) => common_device(def.name, args),
            OpHandle::Custom(op) => op.call_device(args),
        }
    }

    /// What autocast does to the floating inputs of a call on `device` (none when autocast is off
    /// there or the op keeps its input dtypes): the builtin's table policy, or the dtype a custom
    /// op registered for the device type.
    pub(crate) fn autocast_cast(self, device: Device) -> Option<Cast> {
        let region = autocast::active_dtype(device)?;
        match self {
            OpHandle::Builtin(def) => autocast::builtin_cast(def, region),
            OpHandle::Custom(op) => {
                Slot::for_device(device).and_then(|slot| op.autocast_dtype(slot).map(Cast::To))
            }
        }
    }

    /// Why a call that requires grad cannot be recorded at all: a builtin in-place kernel (its
    /// input would be overwritten under the graph).
    pub(crate) fn grad_error(self) -> Option<Error> {
        match self {
            OpHandle::Builtin(def) if matches!(def.kernel, Kernel::Mutate { .. }) => {
                Some(Error::Autograd(format!(
                    "{}: in-place operation on a tensor that requires grad (or with an operand \
                     that requires grad) is not supported while grad mode is on; use the \
                     out-of-place op or wrap the update in no_grad()",
                    def.name
                )))
            }
            _ => None,
        }
    }

    /// How a call that requires grad is recorded; `None` when the op records nothing itself (a
    /// non-differentiable builtin, or a custom op whose kernel's own ops record the graph).
    pub(crate) fn backward_rule(self) -> Option<BackwardRule<'a>> {
        match self {
            OpHandle::Builtin(def) => def.derivative.map(|d| BackwardRule::Derivative(def, d)),
            OpHandle::Custom(op) => op.autograd().map(|imp| BackwardRule::Formula(op, imp)),
        }
    }
}

/// The device all tensor arguments share (0-d wrapped scalars adapt to any device).
pub fn common_device(op: &str, args: &[Value]) -> Result<Device> {
    let mut device: Option<Device> = None;
    for t in args.iter().flat_map(Value::tensors) {
        if t.is_wrapped_number() {
            continue;
        }
        match device {
            None => device = Some(t.device()),
            Some(d) if d != t.device() => {
                return Err(Error::device(
                    op,
                    format!(
                        "expected all tensors on one device, got {d} and {}",
                        t.device()
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(device.unwrap_or(Device::Cpu))
}
