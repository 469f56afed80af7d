//! The dispatcher: every op call, builtin or custom, enters here as one [`OpHandle`] and passes
//! one ordered list of layers, each behind the [`Layer`] trait:
//!
//! ```text
//!   call / call_bound ──► autocast ─► vmap ─► autograd ─► backend
//!                         (cast)      (batch   (record     capture hook if installed
//!                                      rule)    backward)  (proxy: records the call),
//!                                                          else the selected kernel
//! ```
//!
//! A layer either passes the call down ([`Next`]), possibly with changed arguments (autocast's
//! casts), or handles it and re-dispatches other calls from the top (vmap's batching rules). No
//! layer asks whether an op is builtin or custom: it asks the handle for a fact (`op.rs` is the
//! only place that matches on the kind). The state the layers consult (autocast region, vmap
//! levels, grad mode, capture hook) is thread-local. Because capture is the bottom, a captured
//! graph holds the casts, batched (physical) ops and per-example calls of the layers above.
//! `TP_LOGS=dispatch` prints every layer each call enters; [`trace_layers`] records them.

mod autocast;
mod autograd;
mod backend;
mod capture;
mod layer;
mod op;
mod trace;
mod vmap;

use std::sync::Arc;

use tensorplay_ir::{Device, Error, Result};

pub use layer::{Layer, Next};
pub use op::OpHandle;
pub use trace::{LayerEvent, log_enabled, trace_layers};

use crate::library::bind::bind;
use crate::library::registry::Operator;
use crate::ops::OpDef;
use crate::tensor::Tensor;
use crate::value::Value;

/// The layers, top first. Invariant: autocast casts before vmap batches (so batched calls see
/// cast inputs), autograd records on the physical (unbatched) tensors, and the backend — capture
/// while a hook is installed — is last, so capture sees what every layer above did.
static LAYERS: [&dyn Layer; 4] = [
    &autocast::Autocast,
    &vmap::Vmap,
    &autograd::Autograd,
    &backend::Backend,
];

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

/// Calls a registered operator (builtin or custom) with positional and keyword arguments, which
/// are first bound to its schema (arity, types, defaults).
pub fn call_operator(
    op: &Arc<Operator>,
    args: &[Value],
    kwargs: &[(String, Value)],
) -> Result<Vec<Tensor>> {
    let bound = bind(op.qualname(), op.schema(), args, kwargs)?;
    call_bound(op, &bound)
}

/// Calls a registered operator with arguments already bound to its schema (one value per
/// parameter, in order, keyword-only ones included) — how graphs and tools replay recorded calls.
pub fn call_bound(op: &Arc<Operator>, bound: &[Value]) -> Result<Vec<Tensor>> {
    if bound.len() != op.schema().params.len() {
        return Err(Error::argument(
            op.qualname(),
            "args",
            format!(
                "{} bound arguments (one per parameter)",
                op.schema().params.len()
            ),
            format!("{}", bound.len()),
        ));
    }
    call_op(OpHandle::of(op), bound)
}

/// The device all tensor arguments share (0-d wrapped scalars adapt to any device).
pub(crate) fn common_device(op: &str, args: &[Value]) -> Result<Device> {
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

/// Runs builtin `op`'s kernel (or its meta rule, for fake and meta tensors) on `args`, skipping
/// every layer above the backend — what a capture hook calls to learn output metadata.
pub fn backend(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    OpHandle::Builtin(op).run_kernel(args)
}

/// Picks and runs the kernel for `args` and checks what it did (see `library::backend`). Skips
/// every layer above the backend (a capture hook calls it for opaque nodes).
pub fn custom_backend(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    OpHandle::Custom(op).run_kernel(args)
}
