//! Where a call goes when a layer hands it on through its handle: to a batching rule (the vmap
//! layer), to the capture hook or to a kernel (the backend layer) — the builtin op's from the op
//! table, the custom op's from its registrations. With `op.rs`, the only place that tells the
//! two kinds apart.

use tensorplay_ir::Result;

use super::backend::run_builtin;
use super::op::OpHandle;
use crate::capture::CaptureHook;
use crate::tensor::Tensor;
use crate::value::Value;
use crate::vmap;

impl OpHandle<'_> {
    /// Runs the op's batching rule on batched `args` (the table's rule for a builtin, the
    /// `register_vmap` rule or the per-example fallback for a custom op).
    pub(super) fn batch(self, args: &[Value]) -> Result<Vec<Tensor>> {
        match self {
            OpHandle::Builtin(def) => vmap::dispatch_builtin(def, args),
            OpHandle::Custom(op) => vmap::dispatch_custom(op, args),
        }
    }

    /// Hands the call to a capture hook (the proxy backend).
    pub(super) fn capture(self, hook: &dyn CaptureHook, args: &[Value]) -> Result<Vec<Tensor>> {
        match self {
            OpHandle::Builtin(def) => hook.on_builtin(def, args),
            OpHandle::Custom(op) => hook.on_custom(op, args),
        }
    }

    /// Runs the kernel the call selects: the op table's kernel (or meta rule, for fake tensors),
    /// or the custom op's registered kernel for the device (see `library::backend`).
    pub(crate) fn run_kernel(self, args: &[Value]) -> Result<Vec<Tensor>> {
        match self {
            OpHandle::Builtin(def) => run_builtin(def, args),
            OpHandle::Custom(op) => op.run_kernel(args),
        }
    }
}
