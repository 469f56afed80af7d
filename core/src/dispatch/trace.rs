//! Layer traces: which layers a call entered, for `TP_LOGS=dispatch` (printed to stderr) and for
//! tests ([`trace_layers`]). Off by default; the check is made once per call, where it enters.

use std::cell::RefCell;
use std::sync::OnceLock;

use super::op::OpHandle;

/// One layer entered by one call: the layer's name and the op's registry name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerEvent {
    pub layer: &'static str,
    pub op: String,
}

thread_local! {
    /// The events of the innermost active `trace_layers` on this thread.
    static RECORDING: RefCell<Option<Vec<LayerEvent>>> = const { RefCell::new(None) };
}

/// True when `TP_LOGS` (read once) names `dispatch` — explicitly: `all` leaves it out, since it
/// prints a line per layer of every op call.
pub fn log_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| tensorplay_kernel::log::named("dispatch"))
}

/// Whether a call entering the stack now is traced.
pub(super) fn active() -> bool {
    log_enabled() || RECORDING.with(|r| r.borrow().is_some())
}

#[cold]
pub(super) fn note(layer: &'static str, op: OpHandle<'_>) {
    let op = op.qualname().into_owned();
    if log_enabled() {
        eprintln!("[tp:dispatch] {layer:<8} {op}");
    }
    RECORDING.with(|r| {
        if let Some(events) = r.borrow_mut().as_mut() {
            events.push(LayerEvent { layer, op });
        }
    });
}

/// Restores the enclosing recording when dropped (also when `f` panics).
struct Restore(Option<Vec<LayerEvent>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let prev = self.0.take();
        RECORDING.with(|r| *r.borrow_mut() = prev);
    }
}

/// Runs `f` and returns, with its result, every layer each op call on this thread entered, in
/// order (nested calls — a batching rule's re-dispatch, a kernel's own ops — included).
///
/// ```
/// use tensorplay_core::{DType, Tensor, dispatch};
/// let x = Tensor::ones(&[2], DType::F32);
/// let (y, events) = dispatch::trace_layers(|| x.add(&x));
/// y?;
/// let layers: Vec<&str> = events.iter().map(|e| e.layer).collect();
/// assert_eq!(layers, dispatch::layer_names());
/// assert!(events.iter().all(|e| e.op == "tp::add"));
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn trace_layers<R>(f: impl FnOnce() -> R) -> (R, Vec<LayerEvent>) {
    let prev = RECORDING.with(|r| r.borrow_mut().replace(Vec::new()));
    let restore = Restore(prev);
    let out = f();
    let events = RECORDING
        .with(|r| r.borrow_mut().take())
        .unwrap_or_default();
    drop(restore);
    (out, events)
}
