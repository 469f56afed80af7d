//! The custom-operator seam: what the dispatcher's layers ask of an operator registered through
//! `tensorplay-runtime`'s `library` (its `Operator` implements [`CustomOperator`]). Builtin ops
//! answer the same questions from their `OpDef`; [`super::OpHandle`] is where the two meet.

use std::any::Any;
use std::sync::Arc;

use tensorplay_ir::schema::Schema;
use tensorplay_ir::{DType, Device, OpClass, Result};

use super::Slot;
use crate::autograd::BackwardFn;
use crate::tensor::Tensor;
use crate::value::Value;
use crate::vmap::custom_rule::VmapRule;

/// A registered custom operator as the dispatcher sees it.
pub trait CustomOperator: Send + Sync {
    /// `ns::name` or `ns::name.overload`.
    fn qualname(&self) -> &str;
    /// The parsed schema (calls arrive bound to it: one value per parameter).
    fn schema(&self) -> &Schema;
    /// The op's class for the compiler: opaque, or mutating when it declares mutated arguments.
    fn class(&self) -> OpClass;
    /// The device a call is for: the device its tensor arguments share, else its first `Device`
    /// argument.
    fn call_device(&self, args: &[Value]) -> Result<Device>;
    /// The dtype `register_autocast` gave the op for `slot`, if any.
    fn autocast_dtype(&self, slot: Slot) -> Option<DType>;
    /// The `register_vmap` rule, if any (else vmap runs the op once per example).
    fn vmap_rule(&self) -> Option<VmapRule>;
    /// The `register_autograd` formula, if any (else the kernel's own ops record the graph).
    fn autograd(&self) -> Option<Arc<dyn CustomAutograd>>;
    /// Selects and runs the kernel for `args` (by device; the fake kernel on fake tensors) and
    /// checks what it did (aliasing, undeclared mutation).
    fn run_kernel(&self, args: &[Value]) -> Result<Vec<Tensor>>;
    /// The operator as `Any`, for layers above the dispatcher that know its concrete type.
    fn as_any(&self) -> &dyn Any;
    /// The operator as `Arc<dyn Any>` (see [`CustomOperator::as_any`]).
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// A custom op's autograd formula, as the autograd layer records it.
pub trait CustomAutograd: Send + Sync {
    /// After the forward ran (`args` bound to `op`'s schema, its `outputs`): the backward node
    /// to record and the tensors it saved (checked for in-place modification before it runs).
    fn record(
        self: Arc<Self>,
        op: &dyn CustomOperator,
        args: &[Value],
        outputs: &[Tensor],
    ) -> Result<(Box<dyn BackwardFn>, Vec<Tensor>)>;
}
