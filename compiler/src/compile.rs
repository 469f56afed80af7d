//! The front door: [`tp_compile`] for graphs, [`compile`] for closures (capture on first call,
//! re-capture when inputs fail the guards, like `torch.compile`).
//!
//! A [`CompiledFn`] keeps at most [`CompiledFn::recompile_limit`] graphs (default
//! [`DEFAULT_RECOMPILE_LIMIT`], like torch's `cache_size_limit`). A guard miss past the limit
//! runs the closure eagerly — same results, no compiling, nothing more kept — and counts it in
//! [`CompiledFn::eager_calls`]. `TP_LOGS=recompiles` prints, for every recompile, which guard
//! of each compiled graph missed and why, and when the limit sends calls to eager.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tensorplay_ir::{Graph, Result, TensorMeta};
use tensorplay_runtime::Tensor;

use crate::capture::{CaptureOptions, capture};
use crate::executor::CompiledGraph;
use crate::passes::logging;

/// How many graphs a [`CompiledFn`] compiles before further guard misses run eagerly.
pub const DEFAULT_RECOMPILE_LIMIT: usize = 8;

/// Compiles a graph: dead-code elimination, fusion between barriers, buffer planning and
/// lowering; kernels are generated (and cached) on first use.
///
/// ```
/// use tensorplay_compiler::{capture::{capture, CaptureOptions}, tp_compile};
/// use tensorplay_ir::{DType, Device, TensorMeta};
/// use tensorplay_runtime::Tensor;
/// let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
/// let g = capture(|xs| Ok(vec![xs[0].mul(&xs[0])?.add(&xs[0])?]), &[m], CaptureOptions::default())?;
/// let compiled = tp_compile(&g)?;
/// assert_eq!(compiled.num_kernels(), 1);
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?;
/// assert_eq!(compiled.run(&[x])?[0].to_vec::<f32>()?, vec![2.0, 6.0, 12.0, 20.0]);
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn tp_compile(graph: &Graph) -> Result<CompiledGraph> {
    CompiledGraph::new(graph)
}

type UserFn = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A closure compiled on demand: see [`compile`].
pub struct CompiledFn {
    f: Arc<UserFn>,
    opts: CaptureOptions,
    /// Compiled graphs, newest last; the first whose guards accept the inputs runs.
    entries: Mutex<Vec<Arc<CompiledGraph>>>,
    /// Most graphs kept; misses past it run eagerly.
    limit: usize,
    /// Calls that ran eagerly because the limit was reached.
    eager: AtomicUsize,
}

impl CompiledFn {
    /// Runs the compiled closure: the first call captures and compiles; later calls reuse the
    /// compiled graph when the inputs pass its guards (same rank, dtype, device and size-1 dims —
    /// other sizes are dynamic), and re-capture otherwise — up to the recompile limit, past
    /// which the closure runs eagerly (see the [module docs](self)).
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let (found, held) = {
            let entries = self.entries.lock();
            let found = entries.iter().rev().find(|g| g.accepts(inputs)).cloned();
            (found, entries.len())
        };
        if let Some(g) = found {
            // The guards were just checked: run without checking them again.
            return g.run_accepted(inputs);
        }
        if held >= self.limit {
            self.eager.fetch_add(1, Ordering::Relaxed);
            logging::log("recompiles", || {
                format!(
                    "recompile limit ({}) reached: running eagerly\n{}",
                    self.limit,
                    self.misses(inputs)
                )
            });
            return (self.f)(inputs);
        }
        logging::log("recompiles", || {
            if held == 0 {
                "compiling graph 1 (first call)".to_string()
            } else {
                format!(
                    "compiling graph {} (limit {})\n{}",
                    held + 1,
                    self.limit,
                    self.misses(inputs)
                )
            }
        });
        let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
        let f = self.f.clone();
        let g = capture(|xs| f(xs), &metas, self.opts)?;
        let compiled = Arc::new(CompiledGraph::new(&g)?);
        {
            // Another thread may have compiled meanwhile: never keep more than the limit.
            let mut entries = self.entries.lock();
            if entries.len() < self.limit {
                entries.push(compiled.clone());
            }
        }
        compiled.run(inputs)
    }

    /// Why each compiled graph rejects `inputs`, one line per graph (for `TP_LOGS=recompiles`).
    fn misses(&self, inputs: &[Tensor]) -> String {
        self.entries
            .lock()
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let why = g
                    .guard_failure(inputs)
                    .unwrap_or_else(|| "accepts the inputs".into());
                format!("  graph {}: {why}", i + 1)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The same closure with another recompile limit (at least 1): the most graphs it keeps;
    /// a guard miss past it runs the closure eagerly.
    ///
    /// ```
    /// use tensorplay_compiler::compile;
    /// use tensorplay_runtime::{DType, Tensor};
    /// let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].add_scalar(1.0)?])).with_recompile_limit(1);
    /// f.call(&[Tensor::ones(&[3], DType::F32)])?;
    /// // Another dtype misses the guards; past the limit it runs eagerly, with eager's result.
    /// let y = f.call(&[Tensor::ones(&[3], DType::F64)])?;
    /// assert_eq!(y[0].to_vec::<f64>()?, vec![2.0; 3]);
    /// assert_eq!((f.num_compiled(), f.eager_calls()), (1, 1));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn with_recompile_limit(mut self, limit: usize) -> CompiledFn {
        self.limit = limit.max(1);
        self
    }

    /// The most graphs this closure compiles.
    pub fn recompile_limit(&self) -> usize {
        self.limit
    }

    /// How many calls ran eagerly because the recompile limit was reached.
    pub fn eager_calls(&self) -> usize {
        self.eager.load(Ordering::Relaxed)
    }

    /// How many graphs have been compiled (one per guard miss).
    pub fn num_compiled(&self) -> usize {
        self.entries.lock().len()
    }

    /// The most recently compiled graph, if any (for `explain()` and `to_dot()`).
    pub fn latest(&self) -> Option<Arc<CompiledGraph>> {
        self.entries.lock().last().cloned()
    }
}

/// Compiles a closure over tensors. Shapes are dynamic by default (one compiled graph serves
/// every size with the same rank, dtypes and broadcast pattern).
///
/// ```
/// use tensorplay_compiler::compile;
/// use tensorplay_runtime::{Tensor, DType};
/// let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].exp()?.mul(&xs[1])?.sum_all()?]));
/// let a = Tensor::ones(&[1000], DType::F32);
/// let b = Tensor::ones(&[1000], DType::F32);
/// let y = f.call(&[a, b])?;
/// assert!((y[0].item::<f64>()? - 1000.0 * std::f64::consts::E).abs() < 1e-2);
/// let y2 = f.call(&[Tensor::ones(&[7], DType::F32), Tensor::ones(&[7], DType::F32)])?;
/// assert_eq!(f.num_compiled(), 1); // a new size reuses the compiled graph
/// # let _ = y2;
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn compile(f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static) -> CompiledFn {
    compile_with(f, CaptureOptions { dynamic: true })
}

/// [`compile`] with explicit capture options (e.g. static shapes).
pub fn compile_with(
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    opts: CaptureOptions,
) -> CompiledFn {
    CompiledFn {
        f: Arc::new(f),
        opts,
        entries: Mutex::new(Vec::new()),
        limit: DEFAULT_RECOMPILE_LIMIT,
        eager: AtomicUsize::new(0),
    }
}
