//! The capture layer: the bottom of the dispatcher, a proxy backend. While a capture hook is
//! installed on a thread, every op call that reaches the backend (after autocast, vmap and
//! autograd did their part) is handed to it instead of running a kernel; the compiler's tracer
//! installs one to record calls into an IR graph (see `tensorplay-compiler`'s `capture`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use tensorplay_ir::Result;
use tensorplay_ir::graph::SymGuard;

use crate::symint::SymInt;

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
    /// The traced code read a size of fake tensor `t` as a plain integer (`dim: None` for the
    /// whole shape): the size is now baked into whatever the code computes from it, so the
    /// tracer guards it. Batched tensors are reported as their innermost physical tensor.
    fn on_size_read(&self, _t: &Tensor, _dim: Option<usize>) {}
    /// The traced code turned a symbolic size into a plain fact (see [`SymInt`]): the graph is
    /// valid only while `guard` holds.
    fn on_sym_guard(&self, _guard: SymGuard) {}
    /// Dim `dim` of fake tensor `t` as a symbolic size, when the tracer knows one (`None`: the
    /// size is read as a plain, guarded integer instead).
    fn sym_size(&self, _t: &Tensor, _dim: usize) -> Option<SymInt> {
        None
    }
    /// `to` is a new handle standing for the same value as fake tensor `from` (a `detach()`, or
    /// the re-wrapped output autograd attaches its grad_fn to): the tracer maps it to `from`'s
    /// graph value.
    fn on_alias(&self, _from: &Tensor, _to: &Tensor) {}
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

/// Reports a size read of fake tensor `t` to the installed hook, if any (called by `Tensor`'s
/// size accessors; real tensors never get here).
#[cold]
pub(crate) fn note_size_read(t: &Tensor, dim: Option<usize>) {
    let Some(hook) = current() else { return };
    match t.batch_info() {
        // A batched tensor's logical sizes are its physical sizes minus the batch dim: guard the
        // whole physical shape.
        Some(info) => note_physical(&*hook, &info.physical),
        None => hook.on_size_read(t, dim),
    }
}

/// Reports that `to` is a new handle for fake tensor `from`'s value to the installed hook.
#[cold]
pub(crate) fn note_alias(from: &Tensor, to: &Tensor) {
    if let Some(hook) = current() {
        hook.on_alias(from, to);
    }
}

fn note_physical(hook: &dyn CaptureHook, t: &Tensor) {
    match t.batch_info() {
        Some(info) => note_physical(hook, &info.physical),
        None => hook.on_size_read(t, None),
    }
}

/// Reports a guard on symbolic sizes to the installed hook, if any.
pub(crate) fn note_sym_guard(g: SymGuard) {
    if let Some(hook) = current() {
        hook.on_sym_guard(g);
    }
}

/// Dim `dim` of fake tensor `t` as the installed hook sees it (`None` without a hook or when it
/// has no symbolic size for it).
pub(crate) fn sym_size(t: &Tensor, dim: usize) -> Option<SymInt> {
    let hook = current()?;
    if t.is_batched() {
        return None;
    }
    hook.sym_size(t, dim)
}
