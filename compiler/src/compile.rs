//! The front door: [`tp_compile`] for graphs, [`compile`] for closures (capture on first call,
//! re-capture when inputs fail the guards, like `torch.compile`).

use std::sync::Arc;

use parking_lot::Mutex;
use tensorplay_ir::{Graph, Result, TensorMeta};
use tensorplay_runtime::Tensor;

use crate::capture::{CaptureOptions, capture};
use crate::executor::CompiledGraph;

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
}

impl CompiledFn {
    /// Runs the compiled closure: the first call captures and compiles; later calls reuse the
    /// compiled graph when the inputs pass its guards (same rank, dtype, device and size-1 dims —
    /// other sizes are dynamic), and re-capture otherwise.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let found = self
            .entries
            .lock()
            .iter()
            .rev()
            .find(|g| g.accepts(inputs))
            .cloned();
        match found {
            // The guards were just checked: run without checking them again.
            Some(g) => g.run_accepted(inputs),
            None => {
                let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
                let f = self.f.clone();
                let g = capture(|xs| f(xs), &metas, self.opts)?;
                let compiled = Arc::new(CompiledGraph::new(&g)?);
                self.entries.lock().push(compiled.clone());
                compiled.run(inputs)
            }
        }
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
    }
}
