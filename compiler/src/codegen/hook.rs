//! A per-thread stand-in for the CPU kernels of fused regions: while a [`RegionHook`] is
//! installed on a thread, every region a compiled graph runs there is offered to it first, with
//! the launch geometry the CPU launcher planned. Verification tools use it to run the regions of
//! real programs through another backend (the CUDA host emulation) and compare with eager.

use std::cell::RefCell;
use std::rc::Rc;

use tensorplay_ir::Result;

use crate::codegen::cpu::{LaunchPlan, ScalarArgs};
use crate::codegen::kernel::KernelSpec;

/// Runs fused regions instead of the CPU kernels.
pub trait RegionHook {
    /// Runs `spec` over `plan` (operand pointers, loop sizes and strides) with scalar arguments
    /// `params`; `Ok(false)` leaves the region to the CPU kernel.
    fn run(&self, spec: &KernelSpec, plan: &LaunchPlan, params: &ScalarArgs) -> Result<bool>;
}

thread_local! {
    static HOOK: RefCell<Option<Rc<dyn RegionHook>>> = const { RefCell::new(None) };
}

/// Runs `f` with `hook` installed on this thread (the previous hook comes back afterwards, also
/// when `f` panics).
pub fn with_region_hook<R>(hook: Rc<dyn RegionHook>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Rc<dyn RegionHook>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            HOOK.with(|h| *h.borrow_mut() = prev);
        }
    }
    let prev = HOOK.with(|h| h.borrow_mut().replace(hook));
    let _restore = Restore(prev);
    f()
}

/// The hook installed on this thread, if any.
pub fn current() -> Option<Rc<dyn RegionHook>> {
    HOOK.with(|h| h.borrow().clone())
}
