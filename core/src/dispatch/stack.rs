//! The stack: the [`Layer`] trait, the ordered list of layers, and the entry points every op
//! call goes through. Each layer is a unit type named here and implemented in its own file
//! (`autocast.rs`, `vmap.rs`, `autograd.rs`, `backend.rs`), so the list names the layers without
//! this file depending on what they do — and layers re-dispatch through [`call_op`] from the
//! top.

use tensorplay_ir::{Error, Result};

use super::op::OpHandle;
use super::trace;
use crate::ops::OpDef;
use crate::tensor::Tensor;
use crate::value::Value;

/// Casts floating inputs inside an autocast region (`autocast.rs`).
pub(super) struct Autocast;
/// Sends calls with batched arguments to a batching rule (`vmap.rs`).
pub(super) struct Vmap;
/// Records a backward node when an input requires grad (`autograd.rs`).
pub(super) struct Autograd;
/// The capture hook while one is installed, else the kernel (`backend.rs`).
pub(super) struct Backend;

/// One step of the dispatcher. A layer either handles the call itself (possibly re-dispatching
/// other calls from the top) or passes it, perhaps with changed arguments, to `next`.
pub trait Layer: Sync {
    /// The name traces print (`TP_LOGS=dispatch`).
    fn name(&self) -> &'static str;
    /// Handles one call of `op`.
    fn call(&self, op: OpHandle<'_>, args: &[Value], next: Next) -> Result<Vec<Tensor>>;
}

/// The layers below the current one (an index into the ordered list).
#[derive(Clone, Copy)]
pub struct Next {
    pub(super) at: usize,
    /// Whether this call is traced (decided once, where the call entered the stack).
    pub(super) traced: bool,
}

impl Next {
    /// Passes the call to the next layer down.
    pub fn call(self, op: OpHandle<'_>, args: &[Value]) -> Result<Vec<Tensor>> {
        let Some(layer) = LAYERS.get(self.at) else {
            // The backend layer is last and never passes a call on.
            return Err(Error::unsupported(
                op.name(),
                "dispatch: a call was passed below the backend layer",
            ));
        };
        if self.traced {
            trace::note(layer.name(), op);
        }
        layer.call(
            op,
            args,
            Next {
                at: self.at + 1,
                traced: self.traced,
            },
        )
    }
}

/// The layers, top first. Invariant: autocast casts before vmap batches (so batched calls see
/// cast inputs), autograd records on the physical (unbatched) tensors, and the backend — capture
/// while a hook is installed — is last, so capture sees what every layer above did.
static LAYERS: [&dyn Layer; 4] = [&Autocast, &Vmap, &Autograd, &Backend];

/// The names of the layers, top first.
pub fn layer_names() -> Vec<&'static str> {
    LAYERS.iter().map(|l| l.name()).collect()
}

/// Calls `op` with boxed `args` (in schema order; bound, for a custom op) through every layer.
pub fn call_op(op: OpHandle<'_>, args: &[Value]) -> Result<Vec<Tensor>> {
    Next {
        at: 0,
        traced: trace::active(),
    }
    .call(op, args)
}

/// Calls builtin `op` with boxed `args` (already in schema order), returning its outputs.
pub fn call(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    call_op(OpHandle::Builtin(op), args)
}

/// Calls a builtin op with exactly one output.
pub fn call1(op: &'static OpDef, args: &[Value]) -> Result<Tensor> {
    let mut outs = call(op, args)?;
    debug_assert_eq!(outs.len(), 1, "{} returns one tensor", op.name);
    Ok(outs.swap_remove(0))
}

/// Runs builtin `op`'s kernel (or its meta rule, for fake and meta tensors) on `args`, skipping
/// every layer above the backend — what a capture hook calls to learn output metadata.
pub fn backend(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    OpHandle::Builtin(op).run_kernel(args)
}
