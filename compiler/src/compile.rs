//! The front door: [`tp_compile`] for graphs, [`compile`] for closures (capture on first call,
//! re-capture when inputs fail the guards, like `torch.compile`).
//!
//! A [`CompiledFn`] keeps at most [`CompiledFn::recompile_limit`] graphs (default
//! [`DEFAULT_RECOMPILE_LIMIT`], like torch's `cache_size_limit`). A guard miss past the limit
//! runs the closure eagerly — same results, no compiling, nothing more kept — and counts it in
//! [`CompiledFn::eager_calls`]. `TP_LOGS=recompiles` prints, for every recompile, which guard
//! of each compiled graph missed and why, and when the limit sends calls to eager.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tensorplay_ir::{Graph, Result, TensorMeta};
use tensorplay_runtime::Tensor;

use crate::capture::{CaptureOptions, capture};
use crate::executor::{Admission, CompiledGraph};
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
    /// Compiled graphs, newest last; the newest whose guards accept the inputs runs.
    entries: Mutex<Vec<Entry>>,
    /// `compile(vmap(f))` per batch-dim pattern and randomness, for calls on batched inputs.
    batched: Mutex<BatchedFns>,
    /// Most graphs kept; misses past it run eagerly.
    limit: usize,
    /// Calls that ran eagerly because the limit was reached.
    eager: AtomicUsize,
    /// Graphs for calls that need gradients (forward + compiled backward), kept apart.
    training: crate::aot::TrainingCache,
}

type BatchedFns = HashMap<(Vec<Option<i64>>, &'static str), Arc<CompiledFn>>;

/// One compiled graph with the autocast state it was captured under (its casts are recorded in
/// the graph, so it serves only calls under the same state).
struct Entry {
    graph: Arc<CompiledGraph>,
    autocast: [Option<tensorplay_runtime::DType>; 2],
}

impl CompiledFn {
    /// Runs the compiled closure: the first call captures and compiles; later calls reuse the
    /// compiled graph when the inputs pass its guards (same rank, dtype, device and size-1 dims —
    /// other sizes are dynamic), and re-capture otherwise — up to the recompile limit, past
    /// which the closure runs eagerly (see the [module docs](self)).
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Some(peeled) = tensorplay_runtime::vmap::peel(inputs)? {
            return self.call_batched(peeled);
        }
        if tensorplay_runtime::autograd::is_grad_enabled()
            && inputs.iter().any(Tensor::requires_grad)
        {
            return self.call_training(inputs);
        }
        let autocast = tensorplay_runtime::autocast::state();
        let (candidates, held) = {
            let entries = self.entries.lock();
            // Inline: no heap allocation on the per-call path.
            let found: smallvec::SmallVec<[Arc<CompiledGraph>; 2]> = entries
                .iter()
                .rev()
                .filter(|e| e.autocast == autocast && e.graph.accepts(inputs))
                .map(|e| e.graph.clone())
                .collect();
            (found, entries.len())
        };
        for g in candidates {
            if let Some(outs) = g.run_hot(inputs) {
                return outs;
            }
            // An error here is the one eager meets on these inputs (see `CompiledGraph::admit`).
            if let Admission::Run(shapes) = g.admit(inputs)? {
                return g.run_admitted(inputs, &shapes);
            }
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
                entries.push(Entry {
                    graph: compiled.clone(),
                    autocast,
                });
            }
        }
        compiled.run(inputs)
    }

    /// A call that needs gradients: a compiled forward + backward pair (see [`crate::aot`]),
    /// found, captured or — past the recompile limit — replaced by an eager run, like
    /// [`CompiledFn::call`].
    fn call_training(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        use crate::aot::TrainingEntry;
        let autocast = tensorplay_runtime::autocast::state();
        let (candidates, held) = {
            let entries = self.training.entries.lock();
            let found: Vec<Arc<TrainingEntry>> = entries
                .iter()
                .rev()
                .filter(|(e, state)| *state == autocast && e.accepts(inputs))
                .map(|(e, _)| e.clone())
                .collect();
            (found, entries.len())
        };
        for e in candidates {
            if let Admission::Run(shapes) = e.admit(inputs)? {
                return e.run_admitted(inputs, &shapes);
            }
        }
        if held >= self.limit {
            self.eager.fetch_add(1, Ordering::Relaxed);
            logging::log("recompiles", || {
                format!(
                    "recompile limit ({}) reached for training graphs: running eagerly",
                    self.limit
                )
            });
            return (self.f)(inputs);
        }
        logging::log("recompiles", || {
            let misses: Vec<String> = self
                .training
                .entries
                .lock()
                .iter()
                .enumerate()
                .map(|(i, (e, _))| {
                    let why = e
                        .guard_failure(inputs)
                        .unwrap_or_else(|| "accepts the inputs".into());
                    format!("  training graph {}: {why}", i + 1)
                })
                .collect();
            format!(
                "compiling training graph {}\n{}",
                held + 1,
                misses.join("\n")
            )
        });
        let (entry, reason) = TrainingEntry::new(&*self.f, inputs, self.opts)?;
        if let Some(r) = reason {
            self.training.fallbacks.lock().push(r);
        }
        let out = match entry.admit(inputs)? {
            Admission::Run(shapes) => entry.run_admitted(inputs, &shapes)?,
            Admission::Miss(why) => {
                return Err(tensorplay_ir::Error::compile(
                    tensorplay_ir::CompileKind::Guard,
                    format!("a freshly captured training graph rejects its own inputs: {why}"),
                ));
            }
        };
        let mut entries = self.training.entries.lock();
        if entries.len() < self.limit {
            entries.push((Arc::new(entry), autocast));
        }
        Ok(out)
    }

    /// The most recently compiled training graph (forward + backward), if any.
    pub fn latest_training(&self) -> Option<Arc<crate::aot::TrainingGraph>> {
        self.training
            .entries
            .lock()
            .iter()
            .rev()
            .find_map(|(e, _)| match &**e {
                crate::aot::TrainingEntry::Compiled(t) => Some(t.clone()),
                crate::aot::TrainingEntry::Interpreted(_) => None,
            })
    }

    /// Why calls that need gradients could not get a compiled backward (one reason per graph
    /// that runs through the interpreter instead; also logged under `TP_LOGS=fallback`).
    pub fn training_fallbacks(&self) -> Vec<String> {
        self.training.fallbacks.lock().clone()
    }

    /// `vmap(compile(f))`: a call on batched inputs runs `compile(vmap(f))` on their physical
    /// tensors (one compiled function per batch-dim pattern), whose outputs are batched again.
    fn call_batched(&self, peeled: tensorplay_runtime::vmap::Peeled) -> Result<Vec<Tensor>> {
        let key = (peeled.in_dims.clone(), peeled.randomness());
        let inner = {
            let mut batched = self.batched.lock();
            batched
                .entry(key.clone())
                .or_insert_with(|| {
                    let f = self.f.clone();
                    let (in_dims, randomness) = key;
                    Arc::new(compile_with(
                        move |xs: &[Tensor]| {
                            tensorplay_runtime::vmap::vmap_with_randomness(
                                |ys: &[Tensor]| f(ys),
                                in_dims.clone(),
                                vec![0],
                                randomness,
                            )(xs)
                        },
                        self.opts,
                    ))
                })
                .clone()
        };
        let outs = inner.call(&peeled.physical)?;
        Ok(peeled.rewrap(outs))
    }

    /// Why each compiled graph rejects `inputs`, one line per graph (for `TP_LOGS=recompiles`).
    fn misses(&self, inputs: &[Tensor]) -> String {
        self.entries
            .lock()
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let why = e
                    .graph
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

    /// How many graphs have been compiled (one per guard miss; a training graph — forward and
    /// backward — counts once).
    pub fn num_compiled(&self) -> usize {
        self.entries.lock().len() + self.training.entries.lock().len()
    }

    /// The most recently compiled graph, if any (for `explain()` and `to_dot()`).
    pub fn latest(&self) -> Option<Arc<CompiledGraph>> {
        self.entries.lock().last().map(|e| e.graph.clone())
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
        batched: Mutex::new(HashMap::new()),
        limit: DEFAULT_RECOMPILE_LIMIT,
        eager: AtomicUsize::new(0),
        training: Default::default(),
    }
}
