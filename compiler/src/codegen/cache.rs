//! The process-wide cache of compiled CPU kernels, keyed by ([`KernelSpec`], [`LoopLayout`]).
//!
//! Sizes and strides are kernel arguments, so a region compiles once per dtype signature and
//! loop layout and is then reused for every size: the second launch of a kernel at another size
//! finds the same `Arc<CompiledKernel>`. Compiling happens under the cache lock (a kernel
//! compiles in well under a millisecond), so concurrent requests for the same key compile once.
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

use super::cpu::{CompiledKernel, compile, plan};
use super::kernel::{KernelSpec, LoopLayout};

/// Counters of the cache since the process started (or the last [`clear`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a compiled kernel.
    pub hits: u64,
    /// Lookups that compiled one.
    pub misses: u64,
    /// Kernels currently held.
    pub entries: usize,
    /// Total time spent compiling the held kernels and the ones cleared since.
    pub compile_time: Duration,
}

#[derive(Default)]
struct Cache {
    map: HashMap<KernelSpec, HashMap<LoopLayout, Arc<CompiledKernel>>>,
    stats: CacheStats,
}

fn cache() -> MutexGuard<'static, Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let m = CACHE.get_or_init(|| Mutex::new(Cache::default()));
    // A panic while holding the lock cannot leave the map half-updated (inserts are single
    // operations), so a poisoned lock is safe to reuse.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The compiled kernel for `spec` and `layout`, compiling it on first use.
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
/// let layout = LoopLayout { dims: 2, reduced: 0, kept_inner: false, classes: vec![StrideClass::Strided, StrideClass::Unit] };
/// let a = cache::get_or_compile(&spec, &layout)?;
/// let b = cache::get_or_compile(&spec, &layout)?;
/// assert!(std::sync::Arc::ptr_eq(&a, &b));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn get_or_compile(spec: &KernelSpec, layout: &LoopLayout) -> Result<Arc<CompiledKernel>> {
    let mut c = cache();
    if let Some(k) = c.map.get(spec).and_then(|m| m.get(layout)) {
        let k = Arc::clone(k);
        c.stats.hits += 1;
        return Ok(k);
    }
    let k = Arc::new(compile(spec, layout)?);
    c.stats.misses += 1;
    c.stats.compile_time += k.compile_time();
    c.map
        .entry(spec.clone())
        .or_default()
        .insert(layout.clone(), Arc::clone(&k));
    c.stats.entries += 1;
    Ok(k)
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
    let p = plan(spec, inputs, outputs, None)?;
    let k = get_or_compile(spec, p.layout())?;
    k.launch_plan(&p)?;
    Ok(k)
}

/// [`launch`] with an explicit iteration shape (see [`super::cpu::plan`]).
pub fn launch_with_shape(
    spec: &KernelSpec,
    iter_shape: &[usize],
    inputs: &[&Tensor],
    outputs: &[&Tensor],
) -> Result<Arc<CompiledKernel>> {
    let p = plan(spec, inputs, outputs, Some(iter_shape))?;
    let k = get_or_compile(spec, p.layout())?;
    k.launch_plan(&p)?;
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

/// Drops every cached kernel (their code is freed once no launch holds them) and resets the hit
/// and miss counters.
pub fn clear() {
    let mut c = cache();
    c.map.clear();
    c.stats = CacheStats::default();
}

/// Whether a kernel for `spec` and `layout` is cached (without compiling it).
pub fn contains(spec: &KernelSpec, layout: &LoopLayout) -> bool {
    cache()
        .map
        .get(spec)
        .is_some_and(|m| m.contains_key(layout))
}
