//! Thread-local grad mode and its RAII guards.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// True when ops on this thread record autograd history.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Restores the previous grad mode when dropped.
#[must_use = "grad mode is restored when the guard is dropped"]
pub struct GradModeGuard {
    prev: bool,
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.prev));
    }
}

fn set_grad_enabled(enabled: bool) -> GradModeGuard {
    let prev = GRAD_ENABLED.with(|g| g.replace(enabled));
    GradModeGuard { prev }
}

/// Disables gradient tracking on this thread until the guard drops.
///
/// ```
/// use tensorplay_core::{Tensor, DType, autograd::no_grad};
/// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
/// let y = {
///     let _g = no_grad();
///     (&w * 2.0)?
/// };
/// assert!(!y.requires_grad());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn no_grad() -> GradModeGuard {
    set_grad_enabled(false)
}

/// Enables gradient tracking on this thread until the guard drops (inside a `no_grad` region).
pub fn enable_grad() -> GradModeGuard {
    set_grad_enabled(true)
}
