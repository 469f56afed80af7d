//! The process-wide cache of compiled CPU kernels, keyed by ([`KernelSpec`], [`LoopLayout`]).
//!
//! Sizes and strides are kernel arguments, so a region compiles once per dtype signature and
//! loop layout and is then reused for every size: the second launch of a kernel at another size
//! finds the same `Arc<CompiledKernel>`. Scalar constants are kernel arguments too
//! ([`Inst::Param`](super::kernel::Inst::Param)), so graphs differing only in a constant's value
//! share one kernel.
//!
//! The cache is bounded by the bytes of machine code it holds ([`CompiledKernel::code_bytes`]):
//! `TP_KERNEL_CACHE_MB` (read once; default [`DEFAULT_LIMIT_MB`]) or [`set_limit_bytes`]. Past
//! the bound the least recently used kernels are evicted. A kernel's code is freed when nothing
//! holds it any more: evicted from the cache and no compiled graph (or other caller) keeping
//! its `Arc` — so an evicted kernel still in use stays valid, and is freed when the last graph
//! using it drops.
//!
//! Compiles run outside the cache lock: other threads keep hitting while one compiles, and
//! threads that miss on the same key wait for that one compile instead of compiling again.
//!
//! ```
//! use tensorplay_compiler::codegen::cache;
//! use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind};
//! use tensorplay_ir::{DType, ScalarOp};
//! use tensorplay_runtime::Tensor;
//! use std::sync::Arc;
//!
//! let spec = KernelSpec { rank: 1, inputs: vec![DType::F64], outputs: vec![DType::F64],
//!     insts: vec![
//!         Inst::Load { input: 0 },
//!         Inst::Op { op: ScalarOp::Neg, args: vec![0], compute: DType::F64, out: DType::F64 },
//!         Inst::Store { output: 0, value: 1 },
//!     ],
//!     kind: LoopKind::Pointwise };
//! let small = Tensor::from_vec(vec![1.0f64, 2.0], &[2])?;
//! let large = Tensor::from_vec(vec![3.0f64; 100], &[100])?;
//! let (o1, o2) = (Tensor::zeros(&[2], DType::F64), Tensor::zeros(&[100], DType::F64));
//! let k1 = cache::launch(&spec, &[&small], &[&o1])?;
//! let k2 = cache::launch(&spec, &[&large], &[&o2])?;
//! assert!(Arc::ptr_eq(&k1, &k2)); // one artifact for both sizes
//! assert_eq!(o1.to_vec::<f64>()?, vec![-1.0, -2.0]);
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tensorplay_ir::Result;
use tensorplay_runtime::Tensor;

use super::cpu::{CompiledKernel, ScalarArgs, compile_tiered, plan};
use super::kernel::{KernelSpec, LoopLayout, LoweredRegion};

/// The cache bound when `TP_KERNEL_CACHE_MB` is unset (or not a number), in MiB of machine code.
pub const DEFAULT_LIMIT_MB: usize = 64;

/// Counters of the cache since the process started (or the last [`clear`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a compiled kernel (or waited for another thread compiling it).
    pub hits: u64,
    /// Lookups that compiled one.
    pub misses: u64,
    /// Kernels currently held.
    pub entries: usize,
    /// Machine-code bytes of the held kernels.
    pub bytes: usize,
    /// Kernels dropped to stay within the bound.
    pub evictions: u64,
    /// Total time spent compiling the held kernels and the ones cleared or evicted since.
    pub compile_time: Duration,
}

/// One compile, shared by every thread that misses on its key while it runs.
type Slot = OnceLock<Result<Arc<CompiledKernel>>>;

struct Entry {
    slot: Arc<Slot>,
    /// The cache's clock at the last lookup (least recently used goes first).
    used: u64,
    /// Code bytes, once compiled and counted (0 while compiling).
    bytes: usize,
}

struct Cache {
    map: HashMap<KernelSpec, HashMap<LoopLayout, Entry>>,
    stats: CacheStats,
    clock: u64,
    limit: usize,
}

fn env_limit() -> usize {
    std::env::var("TP_KERNEL_CACHE_MB")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_LIMIT_MB)
        .saturating_mul(1 << 20)
}

fn cache() -> MutexGuard<'static, Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let m = CACHE.get_or_init(|| {
        Mutex::new(Cache {
            map: HashMap::new(),
            stats: CacheStats::default(),
            clock: 0,
            limit: env_limit(),
        })
    });
    // A panic while holding the lock cannot leave the map half-updated (every update is a
    // single insert, remove or counter change), so a poisoned lock is safe to reuse.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cache {
    /// Removes least recently used compiled kernels (never `keep`) until the held code fits
    /// the limit; returns them, to be dropped after the lock is released.
    fn evict(&mut self, keep: &Arc<Slot>) -> Vec<Arc<Slot>> {
        let mut gone = Vec::new();
        while self.stats.bytes > self.limit {
            let victim = self
                .map
                .iter()
                .flat_map(|(s, m)| m.iter().map(move |(l, e)| (s, l, e)))
                .filter(|(_, _, e)| e.bytes > 0 && !Arc::ptr_eq(&e.slot, keep))
                .min_by_key(|(_, _, e)| e.used)
                .map(|(s, l, _)| (s.clone(), l.clone()));
            let Some((spec, layout)) = victim else { break };
            if let Some(e) = self.remove(&spec, &layout) {
                self.stats.evictions += 1;
                gone.push(e.slot);
            }
        }
        gone
    }

    fn remove(&mut self, spec: &KernelSpec, layout: &LoopLayout) -> Option<Entry> {
        let m = self.map.get_mut(spec)?;
        let e = m.remove(layout)?;
        if m.is_empty() {
            self.map.remove(spec);
        }
        if e.bytes > 0 {
            self.stats.bytes -= e.bytes;
            self.stats.entries -= 1;
        }
        Some(e)
    }
}

/// The compiled kernel for `spec` and `layout`, compiling it on first use (tiered: see
/// [`compile_tiered`]; the size bound counts the first tier's code).
///
/// ```
/// use tensorplay_compiler::codegen::cache;
/// use tensorplay_compiler::codegen::kernel::{Inst, KernelSpec, LoopKind, LoopLayout, StrideClass};
/// use tensorplay_ir::{DType, ScalarOp};
/// let spec = KernelSpec { rank: 2, inputs: vec![DType::I32], outputs: vec![DType::I32],
///     insts: vec![
///         Inst::Load { input: 0 },
///         Inst::Op { op: ScalarOp::Abs, args: vec![0], compute: DType::I32, out: DType::I32 },
///         Inst::Store { output: 0, value: 1 },
///     ],
///     kind: LoopKind::Pointwise };
/// let layout = LoopLayout { dims: 2, reduced: 0, kept_inner: false, in_place: false, classes: vec![StrideClass::Strided, StrideClass::Unit] };
/// let a = cache::get_or_compile(&spec, &layout)?;
/// let b = cache::get_or_compile(&spec, &layout)?;
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn get_or_compile(spec: &KernelSpec, layout: &LoopLayout) -> Result<Arc<CompiledKernel>> {
    let slot = {
        let mut c = cache();
        c.clock += 1;
        let now = c.clock;
        if let Some(e) = c.map.get_mut(spec).and_then(|m| m.get_mut(layout)) {
            e.used = now;
            let slot = Arc::clone(&e.slot);
            c.stats.hits += 1;
            if let Some(Ok(k)) = slot.get() {
                return Ok(Arc::clone(k));
            }
            slot
        } else {
            let slot = Arc::new(Slot::new());
            c.stats.misses += 1;
            c.map.entry(spec.clone()).or_default().insert(
                layout.clone(),
                Entry {
                    slot: Arc::clone(&slot),
                    used: now,
                    bytes: 0,
                },
            );
            slot
        }
    };
    // Outside the lock: the first thread here compiles, the others wait for its result.
    let mut compiled_here = false;
    let result = slot
        .get_or_init(|| {
            compiled_here = true;
            compile_tiered(spec, layout).map(Arc::new)
        })
        .clone();
    if compiled_here {
        let evicted = {
            let mut c = cache();
            let ours = c
                .map
                .get(spec)
                .and_then(|m| m.get(layout))
                .is_some_and(|e| Arc::ptr_eq(&e.slot, &slot));
            match &result {
                // A clear() during the compile dropped the entry: hand the kernel out uncached.
                Ok(_) if !ours => Vec::new(),
                Ok(k) => {
                    let bytes = k.code_bytes().max(1);
                    if let Some(e) = c.map.get_mut(spec).and_then(|m| m.get_mut(layout)) {
                        e.bytes = bytes;
                    }
                    c.stats.bytes += bytes;
                    c.stats.entries += 1;
                    c.stats.compile_time += k.compile_time();
                    c.evict(&slot)
                }
                // A failed compile is not cached: the next lookup tries again.
                Err(_) => {
                    if ours {
                        c.remove(spec, layout);
                    }
                    Vec::new()
                }
            }
        };
        drop(evicted);
    }
    result
}

/// Sets the bound on the machine code the cache holds, in bytes (evicting at once if it is now
/// over). The initial bound is `TP_KERNEL_CACHE_MB` MiB, or [`DEFAULT_LIMIT_MB`].
///
/// ```
/// use tensorplay_compiler::codegen::cache;
/// let before = cache::limit_bytes();
/// cache::set_limit_bytes(1 << 30);
/// assert_eq!(cache::limit_bytes(), 1 << 30);
/// cache::set_limit_bytes(before);
/// ```
pub fn set_limit_bytes(bytes: usize) {
    let evicted = {
        let mut c = cache();
        c.limit = bytes;
        c.evict(&Arc::new(Slot::new()))
    };
    drop(evicted);
}

/// The current bound, in bytes of machine code.
pub fn limit_bytes() -> usize {
    cache().limit
}

/// The compiled kernel that serves `spec` on these tensors (planning their loop layout first).
pub fn kernel_for(
    spec: &KernelSpec,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
) -> Result<Arc<CompiledKernel>> {
    let p = plan(spec, inputs, outputs, None)?;
    get_or_compile(spec, p.layout())
}

/// Plans, fetches (or compiles) and runs the kernel for `spec` on these tensors; returns the
/// kernel it used. See [`CompiledKernel::launch`] for the rules the tensors must follow.
pub fn launch(
    spec: &KernelSpec,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
) -> Result<Arc<CompiledKernel>> {
    let args = ScalarArgs::new(&spec.param_dtypes(), &[])?;
    let p = plan(spec, inputs, outputs, None)?;
    let k = get_or_compile(spec, p.layout())?;
    k.launch_plan(&p, &args)?;
    Ok(k)
}

/// [`launch`] for a lowered region: passes its scalar arguments ([`LoweredRegion::params`]).
pub fn launch_lowered(
    lowered: &LoweredRegion,
    inputs: &[&Tensor],
    outputs: &[&Tensor],
) -> Result<Arc<CompiledKernel>> {
    let spec = &lowered.spec;
    let args = ScalarArgs::new(&spec.param_dtypes(), &lowered.params)?;
    let p = plan(spec, inputs, outputs, None)?;
    let k = get_or_compile(spec, p.layout())?;
    k.launch_plan(&p, &args)?;
    Ok(k)
}

/// [`launch`] with an explicit iteration shape (see [`super::cpu::plan`]).
pub fn launch_with_shape(
    spec: &KernelSpec,
    iter_shape: &[usize],
    inputs: &[&Tensor],
    outputs: &[&Tensor],
) -> Result<Arc<CompiledKernel>> {
    let args = ScalarArgs::new(&spec.param_dtypes(), &[])?;
    let p = plan(spec, inputs, outputs, Some(iter_shape))?;
    let k = get_or_compile(spec, p.layout())?;
    k.launch_plan(&p, &args)?;
    Ok(k)
}

/// The cache's counters.
///
/// ```
/// let s = tensorplay_compiler::codegen::cache::stats();
/// assert!(s.entries as u64 <= s.misses);
/// ```
pub fn stats() -> CacheStats {
    cache().stats
}

/// Drops every cached kernel (their code is freed once no launch or compiled graph holds them)
/// and resets the counters (the bound stays).
pub fn clear() {
    let gone = {
        let mut c = cache();
        c.stats = CacheStats::default();
        std::mem::take(&mut c.map)
    };
    drop(gone);
}

/// Whether a compiled kernel for `spec` and `layout` is cached (without compiling it).
pub fn contains(spec: &KernelSpec, layout: &LoopLayout) -> bool {
    cache()
        .map
        .get(spec)
        .and_then(|m| m.get(layout))
        .is_some_and(|e| e.bytes > 0)
}
