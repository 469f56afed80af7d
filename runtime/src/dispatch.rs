//! The dispatcher (`tensorplay-core`'s `dispatch`, re-exported) and its entry points for
//! registry operators: a call bound to an [`Operator`]'s schema enters the same layers as a
//! builtin op's.

use std::sync::Arc;

pub use tensorplay_core::dispatch::*;
use tensorplay_ir::{Error, Result};

use crate::library::bind::bind;
use crate::library::registry::Operator;
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// Runs `f` with the dispatcher's handle for a registry entry: its op-table entry when it is
/// builtin, else the operator itself.
pub(crate) fn with_handle<R>(op: &Arc<Operator>, f: impl FnOnce(OpHandle<'_>) -> R) -> R {
    match op.builtin() {
        Some(def) => f(OpHandle::Builtin(def)),
        None => {
            let custom: Arc<dyn CustomOperator> = op.clone();
            f(OpHandle::Custom(&custom))
        }
    }
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
    with_handle(op, |h| call_op(h, bound))
}

/// Picks and runs the kernel for `args` and checks what it did (see `library::backend`). Skips
/// every layer above the backend (a capture hook calls it for opaque nodes).
pub fn custom_backend(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    crate::library::backend::run(op, args)
}
