//! The fused in-place update engine shared by the optimizers and gradient clipping.
//!
//! An update is a pointwise function of `written` tensors (a parameter and its state, or a
//! gradient), `read` tensors (the gradient) and 0-d scalar inputs (learning rate, bias
//! corrections, hyper-parameters) that returns the new values of the written tensors. Its
//! element does not depend on the tensor's shape, so [`Fused`] captures it once per dtype as a
//! graph over flat 1-D views with a dynamic length — one fused region — and takes that region's
//! kernel ([`sole_pointwise_kernel`](crate::executor::CompiledGraph)). A step launches the kernel
//! once for every operand set of a dtype ([`CompiledKernel::launch_group`]: the elements of the
//! whole list are split across the pool together), writing the new values **over the inputs'
//! memory**: the launch sees outputs that are exactly their inputs' elements and runs the
//! kernel's [in-place](crate::codegen::kernel::LoopLayout::in_place) variant, which reads an
//! element's inputs before it writes its outputs. Scalars are kernel *inputs*, not constants, so
//! a learning-rate schedule or per-parameter step counts never recompile anything.
//!
//! A strided tensor a set only reads (a gradient) is copied dense first. Sets whose written
//! tensors are not contiguous, and sets writing memory that a set earlier in the
//! same launch writes (tied weights), are updated op by op or in a launch of their own;
//! `fused = false` runs the same update op by op through the dispatcher (the reference).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tensorplay_ir::{DType, Device, Result, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::no_grad;

use crate::capture::{CaptureOptions, capture};
use crate::codegen::cache;
use crate::codegen::cpu::{self, CompiledKernel};
use crate::codegen::kernel::LoopLayout;
use crate::executor::{CompiledGraph, SoleKernel};

/// `c + a·b` rounded once, as PyTorch's CPU kernels compute `add(.., alpha)`, `lerp` and
/// `addcmul` (with a fused multiply-add, in the vectorized and the scalar loops alike): for
/// `f32`, `f16` and `bf16` the product is exact in `f64` and the sum is rounded from there (a
/// second rounding can differ from a true FMA only when the `f64` sum lies exactly halfway
/// between two values of the dtype, which practically never happens); `f64` operands are
/// multiplied and added without fusing.
pub(crate) fn mul_add(a: &Tensor, b: &Tensor, c: &Tensor) -> Result<Tensor> {
    let dtype = c.dtype();
    if dtype == DType::F64 {
        return c.add(&a.mul(b)?);
    }
    let wide = |t: &Tensor| t.to_dtype(DType::F64);
    wide(a)?.mul(&wide(b)?)?.add(&wide(c)?)?.to_dtype(dtype)
}

/// An update: `(written.., read.., scalars..)` to the new values of the written tensors.
pub(crate) type Update = Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync>;

/// One operand set of an update: the tensors it overwrites (same shape each), the tensors it
/// only reads (same shape) and its scalar inputs (converted to the written tensors' dtype).
pub(crate) struct Set {
    pub written: Vec<Tensor>,
    pub read: Vec<Tensor>,
    pub scalars: Vec<f64>,
}

/// An update and its kernels: the captured update per dtype, and the compiled kernel per dtype
/// and loop layout (flat operands of two or more elements share one layout; one-element
/// operands have another).
pub(crate) struct Fused {
    update: Update,
    written: usize,
    read: usize,
    scalars: usize,
    sole: HashMap<DType, SoleKernel>,
    compiled: HashMap<(DType, LoopLayout), Arc<CompiledKernel>>,
}

/// One launch of a kernel over many sets: each set's kernel inputs and outputs, and the byte
/// spans the launch writes (a set overlapping one already in the launch goes to a later
/// launch: the sets of a launch run concurrently).
struct Launch {
    dtype: DType,
    layout: LoopLayout,
    sets: Vec<(Vec<Tensor>, Vec<Tensor>)>,
    spans: BTreeMap<usize, usize>,
}

impl Launch {
    fn overlaps(&self, (lo, hi): (usize, usize)) -> bool {
        self.spans
            .range(..hi)
            .next_back()
            .is_some_and(|(_, &end)| end > lo)
    }
}

/// The bytes a contiguous tensor's elements occupy.
fn span(t: &Tensor) -> Result<(usize, usize)> {
    let lo = t.data_ptr_raw()? as usize;
    Ok((lo, lo + t.numel() * t.dtype().size()))
}

/// 0-d tensors of one set's scalars, shared by the sets of a step with the same values.
#[derive(Default)]
struct ScalarCache(HashMap<(DType, Vec<u64>), Vec<Tensor>>);

impl ScalarCache {
    fn get(&mut self, dtype: DType, values: &[f64]) -> Result<Vec<Tensor>> {
        let key = (dtype, values.iter().map(|v| v.to_bits()).collect());
        if let Some(t) = self.0.get(&key) {
            return Ok(t.clone());
        }
        let t = values
            .iter()
            .map(|&c| Tensor::scalar(c).to_dtype(dtype))
            .collect::<Result<Vec<_>>>()?;
        self.0.insert(key, t.clone());
        Ok(t)
    }
}

impl Fused {
    pub(crate) fn new(update: Update, written: usize, read: usize, scalars: usize) -> Fused {
        Fused {
            update,
            written,
            read,
            scalars,
            sole: HashMap::new(),
            compiled: HashMap::new(),
        }
    }

    /// The compiled kernels (one per dtype and loop layout).
    pub(crate) fn num_compiled(&self) -> usize {
        self.compiled.len()
    }

    /// The update for `dtype` as one pointwise kernel (captured and lowered on first use).
    fn sole(&mut self, dtype: DType) -> Result<&SoleKernel> {
        let update = &self.update;
        let (tensors, scalars) = (self.written + self.read, self.scalars);
        Ok(match self.sole.entry(dtype) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let mut metas = vec![TensorMeta::new(&[2], dtype, Device::Cpu); tensors];
                metas.extend(vec![TensorMeta::new(&[], dtype, Device::Cpu); scalars]);
                let g = capture(update, &metas, CaptureOptions { dynamic: true })?;
                e.insert(CompiledGraph::new(&g)?.sole_pointwise_kernel()?)
            }
        })
    }

    fn compiled(&mut self, dtype: DType, layout: &LoopLayout) -> Result<Arc<CompiledKernel>> {
        let key = (dtype, layout.clone());
        if let Some(k) = self.compiled.get(&key) {
            return Ok(k.clone());
        }
        let spec = &self.sole(dtype)?.spec;
        let k = cache::get_or_compile(spec, layout)?;
        self.compiled.insert(key, k.clone());
        Ok(k)
    }

    /// One update of every set. Fused: one in-place launch per dtype (and layout), op by op
    /// where a set's tensors are not contiguous; `fused = false`: op by op throughout.
    pub(crate) fn run(&mut self, fused: bool, sets: &[Set]) -> Result<()> {
        let _g = no_grad();
        let mut cache = ScalarCache::default();
        let mut launches: Vec<Launch> = Vec::new();
        for set in sets {
            let Some(first) = set.written.first() else {
                continue;
            };
            let (dtype, n) = (first.dtype(), first.numel());
            if n == 0 {
                continue;
            }
            let scalars = cache.get(dtype, &set.scalars)?;
            // A strided tensor that is only read is copied dense for the kernel (one pass);
            // a strided tensor that is written must be updated where it lies: op by op.
            let read = set
                .read
                .iter()
                .map(|t| if fused { t.contiguous() } else { Ok(t.clone()) })
                .collect::<Result<Vec<_>>>()?;
            let strided = set.written.iter().any(|t| !t.is_contiguous());
            if !fused || strided {
                let mut xs: Vec<Tensor> = set.written.iter().chain(&read).cloned().collect();
                xs.extend(scalars);
                let new = (self.update)(&xs)?;
                for (dest, t) in set.written.iter().zip(&new) {
                    dest.copy_(t)?;
                }
                continue;
            }
            // The graph's inputs as flat views: output j is written over input j.
            let mut flat = Vec::with_capacity(self.written + self.read + self.scalars);
            for t in &set.written {
                flat.push(t.reshape(&[n])?);
            }
            for t in &read {
                flat.push(t.reshape(&[n])?);
            }
            flat.extend(scalars);
            let sole = self.sole(dtype)?;
            let ins: Vec<Tensor> = sole.inputs.iter().map(|&i| flat[i].clone()).collect();
            let outs: Vec<Tensor> = sole.outputs.iter().map(|&o| flat[o].clone()).collect();
            let layout = {
                let (ir, or): (Vec<&Tensor>, Vec<&Tensor>) =
                    (ins.iter().collect(), outs.iter().collect());
                cpu::plan(&sole.spec, &ir, &or, None)?.layout().clone()
            };
            let spans = flat[..self.written]
                .iter()
                .map(span)
                .collect::<Result<Vec<_>>>()?;
            let at = launches
                .iter()
                .rposition(|l| l.dtype == dtype && l.layout == layout);
            let at = match at {
                Some(i) if !spans.iter().any(|&s| launches[i].overlaps(s)) => i,
                _ => {
                    launches.push(Launch {
                        dtype,
                        layout,
                        sets: Vec::new(),
                        spans: BTreeMap::new(),
                    });
                    launches.len() - 1
                }
            };
            for (lo, hi) in spans {
                launches[at].spans.insert(lo, hi);
            }
            launches[at].sets.push((ins, outs));
        }
        for l in &launches {
            self.launch(l)?;
        }
        Ok(())
    }

    fn launch(&mut self, l: &Launch) -> Result<()> {
        let kernel = self.compiled(l.dtype, &l.layout)?;
        let params = self.sole(l.dtype)?.params.clone();
        let refs: Vec<(Vec<&Tensor>, Vec<&Tensor>)> = l
            .sets
            .iter()
            .map(|(i, o)| (i.iter().collect(), o.iter().collect()))
            .collect();
        let sets: Vec<(&[&Tensor], &[&Tensor])> = refs
            .iter()
            .map(|(i, o)| (i.as_slice(), o.as_slice()))
            .collect();
        kernel.launch_group(&sets, &params)?;
        for (_, outs) in &l.sets {
            for t in outs {
                t.storage().bump_version();
            }
        }
        Ok(())
    }
}
