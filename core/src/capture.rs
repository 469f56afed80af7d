//! The capture layer: the bottom of the dispatcher, a proxy backend. While a capture hook is
//! installed on a thread, every op call that reaches the backend (after autocast, vmap and
//! autograd did their part) is handed to it instead of running a kernel; the compiler's tracer
//! installs one to record calls into an IR graph (see `tensorplay-compiler`'s `capture`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tensorplay_ir::Result;

use crate::dispatch::CustomOperator;
use crate::ops::OpDef;
use crate::tensor::Tensor;
pub use crate::tensor::TraceHook;
use crate::value::Value;

/// Receives every op call made on this thread while installed — and, as a
/// [`TraceHook`](crate::tensor::TraceHook), what the tensors it traces report (size reads,
/// symbolic sizes, aliases, guards on symbolic sizes).
pub trait CaptureHook: TraceHook {
    /// A builtin op call (arguments in schema order).
    fn on_builtin(&self, op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>>;
    /// A custom op call (arguments bound to the schema).
    fn on_custom(&self, op: &Arc<dyn CustomOperator>, args: &[Value]) -> Result<Vec<Tensor>>;
}

thread_local! {
    static HOOK: RefCell<Option<Rc<dyn CaptureHook>>> = const { RefCell::new(None) };
}

/// True when a hook is installed on this thread (the dispatcher's cheap check).
pub(crate) fn is_installed() -> bool {
    HOOK.with(|h| h.borrow().is_some())
}

/// The hook installed on this thread, if any.
pub(crate) fn current() -> Option<Rc<dyn CaptureHook>> {
    HOOK.with(|h| h.borrow().clone())
}

/// Restores the previous hook when dropped.
#[must_use = "the hook is uninstalled when the guard drops"]
pub struct HookGuard {
    prev: Option<Rc<dyn CaptureHook>>,
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        set(self.prev.take());
    }
}

/// Makes `hook` this thread's capture hook and tracer (`None`: neither), returning the previous
/// hook.
fn set(hook: Option<Rc<dyn CaptureHook>>) -> Option<Rc<dyn CaptureHook>> {
    let tracer = hook.clone().map(|h| h as Rc<dyn TraceHook>);
    crate::tensor::set_tracer(tracer);
    HOOK.with(|h| std::mem::replace(&mut *h.borrow_mut(), hook))
}

/// Installs `hook` on this thread until the guard drops.
pub fn install(hook: Rc<dyn CaptureHook>) -> HookGuard {
    HookGuard {
        prev: set(Some(hook)),
    }
}

/// Removes the hook until the guard drops (the hook uses this to run ops for real — e.g. on fake
/// tensors to learn output metadata — without recording them).
pub fn suspend() -> HookGuard {
    HookGuard { prev: set(None) }
}
