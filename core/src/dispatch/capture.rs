//! The capture backend: while a capture hook is installed on the thread, the backend layer hands
//! every call to it instead of running a kernel (a proxy backend; the compiler's tracer records
//! the call and returns fake outputs). Because it sits below autocast, vmap and autograd, a
//! captured graph holds the casts, batched ops and per-example calls those layers made. The hook
//! itself and its installation live in `crate::capture`.

use tensorplay_ir::Result;

use super::op::OpHandle;
use crate::capture;
use crate::tensor::Tensor;
use crate::value::Value;

/// Records the call with the installed hook; `None` when no hook is installed.
pub(super) fn try_record(op: OpHandle<'_>, args: &[Value]) -> Option<Result<Vec<Tensor>>> {
    if !capture::is_installed() {
        return None;
    }
    let hook = capture::current()?;
    Some(op.capture(&*hook, args))
}
