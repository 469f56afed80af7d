//! The capture layer: the first dispatcher layer. While a capture hook is installed on a thread,
//! every op call is handed to it instead of running; the compiler's tracer installs one to record
//! calls into an IR graph (see `tensorplay-compiler`'s `capture`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tensorplay_ir::Result;

use crate::library::registry::Operator;
use crate::ops::OpDef;
use crate::tensor::Tensor;
use crate::value::Value;

/// Receives every op call made on this thread while installed.
pub trait CaptureHook {
    /// A builtin op call (arguments in schema order).
    fn on_builtin(&self, op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>>;
    /// A custom op call (arguments bound to the schema).
    fn on_custom(&self, op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>>;
}

thread_local! {
    static HOOK: RefCell<Option<Rc<dyn CaptureHook>>> = const { RefCell::new(None) };
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
        let prev = self.prev.take();
        HOOK.with(|h| *h.borrow_mut() = prev);
    }
}

/// Installs `hook` on this thread until the guard drops.
pub fn install(hook: Rc<dyn CaptureHook>) -> HookGuard {
    let prev = HOOK.with(|h| h.borrow_mut().replace(hook));
    HookGuard { prev }
}

/// Removes the hook until the guard drops (the hook uses this to run ops for real — e.g. on fake
/// tensors to learn output metadata — without recording them).
pub fn suspend() -> HookGuard {
    let prev = HOOK.with(|h| h.borrow_mut().take());
    HookGuard { prev }
}
