//! Tiered compilation of Cranelift kernels.
//!
//! Most of a Cranelift kernel's compile time is register allocation; the single-pass allocator
//! takes about half the time of the backtracking one and gives slower code (1.3–2.8x on the
//! anchor workloads). So a kernel the compiled graphs need is first built in the *fast* tier
//! ([`super::compile_tiered`]) and, once it is launched a second time, rebuilt in the
//! *optimised* tier on one background thread; launches switch to the optimised code when it is
//! ready. A kernel launched once never pays for the optimizer. Both tiers compile the same IR,
//! so their results are the same bits. `TP_JIT_TIERS=0` compiles every kernel optimised at once.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::codegen::cpu::args::KernelFn;
use crate::codegen::cpu::code::Code;
use crate::codegen::cpu::jit::compile_optimized_code;
use crate::codegen::cpu::types::CodegenOptions;
use crate::codegen::kernel::{KernelSpec, LoopLayout};
use crate::passes::logging;

/// Whether kernels are tiered (`TP_JIT_TIERS=0` turns it off; read once).
pub(super) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TP_JIT_TIERS").map_or(true, |v| v != "0"))
}

/// A fast-tier kernel's way to its optimised code: what to compile, how often it was launched,
/// and the optimised code once the background thread has built it.
pub(super) struct TierUp {
    spec: KernelSpec,
    layout: LoopLayout,
    options: CodegenOptions,
    launches: AtomicU32,
    /// The optimised code (kept alive with the kernel) and its entry point.
    optimized: OnceLock<(Code, usize)>,
}

// SAFETY: the optimised code is written once (`OnceLock`) and only read afterwards; like a
// `CompiledKernel`'s own code, it is immutable, reentrant machine code, and the JIT module that
// holds it is touched again only by its `Drop`.
unsafe impl Send for TierUp {}
// SAFETY: see `Send`.
unsafe impl Sync for TierUp {}

impl TierUp {
    pub(super) fn new(spec: &KernelSpec, layout: &LoopLayout, options: CodegenOptions) -> TierUp {
        TierUp {
            spec: spec.clone(),
            layout: layout.clone(),
            options,
            launches: AtomicU32::new(0),
            optimized: OnceLock::new(),
        }
    }

    /// Whether the optimised code is ready.
    pub(super) fn is_done(&self) -> bool {
        self.optimized.get().is_some()
    }

    /// The optimised entry point when it is ready; otherwise counts this launch and, on the
    /// second one, asks the background thread for the optimised code.
    pub(super) fn entry_for_launch(self: &Arc<Self>) -> Option<KernelFn> {
        if let Some(&(_, entry)) = self.optimized.get() {
            // SAFETY: `entry` is the finalized entry of a kernel compiled for this spec and
            // layout with the signature `fn(*const KernelArgs)`; its code lives in `optimized`
            // as long as `self`, which the launching kernel holds.
            return Some(unsafe { std::mem::transmute::<usize, KernelFn>(entry) });
        }
        if self.launches.fetch_add(1, Ordering::Relaxed) == 1 {
            request(Arc::downgrade(self));
        }
        None
    }

    /// Builds the optimised code (on the background thread).
    fn compile(&self) {
        match compile_optimized_code(&self.spec, &self.layout, &self.options) {
            Ok((entry, code)) => {
                let _ = self.optimized.set((code, entry as usize));
            }
            // The fast code stays; it computes the same results.
            Err(e) => logging::log("fallback", || {
                format!("a kernel stays in the fast tier: its optimised compile failed: {e}")
            }),
        }
    }
}

/// Queues `kernel` for its optimised compile on the background thread (started on first use).
/// A kernel dropped before its turn is skipped; if the thread cannot be started, kernels stay
/// in the fast tier.
fn request(kernel: Weak<TierUp>) {
    static QUEUE: OnceLock<Option<Mutex<Sender<Weak<TierUp>>>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Weak<TierUp>>();
        std::thread::Builder::new()
            .name("tp-jit-tier-up".into())
            .spawn(move || {
                for job in rx {
                    if let Some(k) = job.upgrade() {
                        k.compile();
                    }
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    if let Some(tx) = queue {
        let _ = tx.lock().map(|tx| tx.send(kernel));
    }
}
