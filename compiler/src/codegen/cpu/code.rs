//! The machine code a compiled kernel owns (a Cranelift JIT module or an assembled mapping),
//! and the count of it ([`live_kernels`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use cranelift_jit::JITModule;
use memmap2::Mmap;

/// Compiled kernels whose code is still mapped (for leak checks).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Number of compiled kernels whose machine code is currently allocated. Dropping a
/// [`CompiledKernel`] frees its code and decrements this.
///
/// ```
/// use tensorplay_compiler::codegen::cpu::live_kernels;
/// let _ = live_kernels(); // a count, shared by every thread of the process
/// ```
pub fn live_kernels() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The granularity in which the JIT maps code.
pub(super) const PAGE: usize = 4096;

/// Owns a JIT module; dropping it frees the module's code and data. `counted`: whether it is
/// one of the [`live_kernels`] (a kernel's first code; not the optimised code it tiers up to).
pub(super) struct JitCode {
    module: Option<JITModule>,
    counted: bool,
}

impl JitCode {
    /// Code that owns `module` from now on (freeing it on every path) and counts in
    /// [`live_kernels`].
    pub(super) fn counted(module: JITModule) -> JitCode {
        LIVE.fetch_add(1, Ordering::Relaxed);
        JitCode {
            module: Some(module),
            counted: true,
        }
    }

    /// The module this code owns.
    pub(super) fn module(&mut self) -> &mut JITModule {
        self.module
            .as_mut()
            .expect("a JIT module is owned from its construction to its drop")
    }

    /// Stops counting this code in [`live_kernels`] (it backs a kernel counted already).
    pub(super) fn uncount(&mut self) {
        if std::mem::replace(&mut self.counted, false) && self.module.is_some() {
            LIVE.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The machine code a [`CompiledKernel`](super::CompiledKernel) owns: a Cranelift module or an
/// assembled kernel ([`wide_asm`](super::wide_asm)). Both count in [`live_kernels`] while they
/// exist (a kernel's optimised second tier does not: it backs the same kernel).
pub(super) enum Code {
    /// Held for its `Drop` (frees the module).
    Jit(#[allow(dead_code)] Box<JitCode>),
    /// Held for its `Drop` (unmaps the code).
    Wide(#[allow(dead_code)] WideCode),
}

/// Counts one piece of mapped kernel code in [`live_kernels`] for as long as it lives.
struct LiveCode(());

impl LiveCode {
    fn new() -> LiveCode {
        LIVE.fetch_add(1, Ordering::Relaxed);
        LiveCode(())
    }
}

impl Drop for LiveCode {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the only pointer into this module is the owning `CompiledKernel`'s entry
            // (or its tier-up's), which is being dropped with it; no call can be running
            // (launch borrows the kernel for the duration of every call).
            unsafe { module.free_memory() };
            if self.counted {
                LIVE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// Executable machine code of one assembled kernel.
pub(super) struct WideCode {
    /// The mapping holding the code (read + execute).
    pub(super) map: Mmap,
    /// f32 lanes per vector (8 or 16).
    pub(super) lanes: usize,
    /// How the kernel is organised, for `TP_LOGS=clif`: stages, scratch slots, tile length.
    pub(super) summary: String,
    /// Counts the mapping in `live_kernels` while it exists.
    _live: LiveCode,
}

impl WideCode {
    /// Executable code in `map`, `lanes` f32 lanes wide, counted in [`live_kernels`] while it
    /// lives.
    pub(super) fn new(map: Mmap, lanes: usize, summary: String) -> WideCode {
        WideCode {
            map,
            lanes,
            summary,
            _live: LiveCode::new(),
        }
    }
}
