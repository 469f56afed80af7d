//! Fused optimizer steps: SGD with momentum and Adam, updating every parameter and its state
//! in place with one compiled pointwise kernel launched once over the whole parameter list.
//!
//! The update of one element does not depend on the parameter's shape, so each optimizer
//! captures its update once per dtype as a graph over flat 1-D views with a dynamic length — a
//! single fused region — and takes that region's kernel
//! ([`sole_pointwise_kernel`](crate::executor::CompiledGraph)). A step then launches the kernel
//! once for all parameters of a dtype ([`CompiledKernel::launch_group`]: the work of the whole
//! list is split across the pool together), reading each parameter, its gradient and its
//! state and writing the new parameter and state **over the same memory**: the launch sees
//! outputs that are exactly their inputs' elements and runs the kernel's
//! [in-place](crate::codegen::kernel::LoopLayout::in_place) variant, which reads an element's
//! inputs before it writes its outputs. No scratch buffer, no spare state, no copy.
//! Step-dependent scalars (Adam's bias corrections) are 0-d tensor inputs, so the kernel is
//! compiled once. Parameters (or state) that are not contiguous, and parameters sharing memory
//! with one updated earlier in the same launch (tied weights), are updated op by op or in a
//! launch of their own. `step_eager` runs the same update op by op through the dispatcher (the
//! reference).
//!
//! ```
//! use tensorplay_compiler::optim::Sgd;
//! use tensorplay_runtime::{DType, Tensor};
//! let w = Tensor::ones(&[4], DType::F32).requires_grad_(true)?;
//! w.mul_scalar(3.0)?.sum_all()?.backward()?; // grad = 3
//! let mut opt = Sgd::new(vec![w.clone()], 0.1, 0.9)?;
//! opt.step()?;
//! assert_eq!(w.detach().to_vec::<f32>()?, vec![0.7; 4]);
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tensorplay_ir::{DType, Device, Error, Result, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::no_grad;

use crate::capture::{CaptureOptions, capture};
use crate::codegen::cache;
use crate::codegen::cpu::{self, CompiledKernel};
use crate::codegen::kernel::LoopLayout;
use crate::executor::{CompiledGraph, SoleKernel};

/// An update: `(param, grad, state.., scalars..)` to `(new param, new state..)`.
type Update = fn(&Hyper, &[Tensor]) -> Result<Vec<Tensor>>;

/// Hyper-parameters baked into an update kernel as scalar constants (kernel arguments).
#[derive(Clone, Copy, Debug)]
struct Hyper {
    lr: f64,
    momentum: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
}

/// The update of one optimizer and its kernels: the captured update per dtype, and the
/// compiled kernel per dtype and loop layout (flat parameters of two or more elements share
/// one layout; one-element parameters have another).
struct Kernels {
    update: Update,
    hyper: Hyper,
    /// State tensors per parameter and 0-d scalar inputs per step.
    states: usize,
    scalars: usize,
    sole: HashMap<DType, SoleKernel>,
    compiled: HashMap<(DType, LoopLayout), Arc<CompiledKernel>>,
}

impl Kernels {
    fn new(update: Update, hyper: Hyper, states: usize, scalars: usize) -> Kernels {
        Kernels {
            update,
            hyper,
            states,
            scalars,
            sole: HashMap::new(),
            compiled: HashMap::new(),
        }
    }

    /// The update for `dtype` as one pointwise kernel (captured and lowered on first use).
    fn sole(&mut self, dtype: DType) -> Result<&SoleKernel> {
        let (update, hyper) = (self.update, self.hyper);
        let (tensors, scalars) = (2 + self.states, self.scalars);
        Ok(match self.sole.entry(dtype) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let mut metas = vec![TensorMeta::new(&[2], dtype, Device::Cpu); tensors];
                metas.extend(vec![TensorMeta::new(&[], dtype, Device::Cpu); scalars]);
                let g = capture(
                    |xs| update(&hyper, xs),
                    &metas,
                    CaptureOptions { dynamic: true },
                )?;
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
}

/// `state` buffers (zeros) shaped like each parameter.
fn zeros_like_all(params: &[Tensor]) -> Vec<Tensor> {
    params
        .iter()
        .map(|p| Tensor::zeros(p.shape(), p.dtype()))
        .collect()
}

fn check_params(op: &str, params: &[Tensor]) -> Result<()> {
    for (i, p) in params.iter().enumerate() {
        if !p.dtype().is_float() || p.is_fake() || p.device() != Device::Cpu {
            return Err(Error::argument(
                op,
                format!("params[{i}]"),
                "a real floating-point CPU tensor",
                format!("{p:?}"),
            ));
        }
    }
    Ok(())
}

/// One launch of a kernel over many parameters: each set's kernel inputs and outputs, and the
/// byte spans of the parameters it writes (a parameter overlapping one already in the launch
/// goes to a later launch: the sets of a launch run concurrently).
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

/// One step of `k`'s update over every parameter that has a gradient: `state[i]` are parameter
/// `i`'s state tensors, `scalars` the step's 0-d inputs (converted to each parameter's dtype).
/// Fused: one in-place launch per dtype (and layout), op by op where a parameter or its state
/// is not contiguous; `fused = false`: op by op throughout.
fn step_all(
    k: &mut Kernels,
    fused: bool,
    params: &[Tensor],
    state: &[Vec<Tensor>],
    scalars: &[f64],
) -> Result<()> {
    let _g = no_grad();
    let mut by_dtype: Vec<(DType, Vec<Tensor>)> = Vec::new();
    let mut launches: Vec<Launch> = Vec::new();
    for (p, st) in params.iter().zip(state) {
        let Some(g) = p.grad() else { continue };
        let p = p.detach();
        let dtype = p.dtype();
        let scalars = match by_dtype.iter().find(|(d, _)| *d == dtype) {
            Some((_, s)) => s.clone(),
            None => {
                let s = scalars
                    .iter()
                    .map(|&c| Tensor::scalar(c).to_dtype(dtype))
                    .collect::<Result<Vec<_>>>()?;
                by_dtype.push((dtype, s.clone()));
                s
            }
        };
        let n = p.numel();
        if n == 0 {
            continue;
        }
        if !fused || !p.is_contiguous() || st.iter().any(|t| !t.is_contiguous()) {
            let mut xs = vec![p.clone(), g];
            xs.extend(st.iter().cloned());
            xs.extend(scalars);
            let new = (k.update)(&k.hyper, &xs)?;
            for (dest, t) in std::iter::once(&p).chain(st).zip(&new) {
                dest.copy_(t)?;
            }
            continue;
        }
        // The graph's inputs as flat views: the new parameter and state are written over
        // the first and the state ones (graph output 0 -> input 0, output j -> input j + 1).
        let mut flat = vec![p.reshape(&[n])?, g.contiguous()?.reshape(&[n])?];
        for t in st {
            flat.push(t.reshape(&[n])?);
        }
        flat.extend(scalars);
        let sole = k.sole(dtype)?;
        let ins: Vec<Tensor> = sole.inputs.iter().map(|&i| flat[i].clone()).collect();
        let outs: Vec<Tensor> = sole
            .outputs
            .iter()
            .map(|&o| flat[if o == 0 { 0 } else { o + 1 }].clone())
            .collect();
        let layout = {
            let (ir, or): (Vec<&Tensor>, Vec<&Tensor>) =
                (ins.iter().collect(), outs.iter().collect());
            cpu::plan(&sole.spec, &ir, &or, None)?.layout().clone()
        };
        let sp = span(&flat[0])?;
        let at = launches
            .iter()
            .rposition(|l| l.dtype == dtype && l.layout == layout);
        let at = match at {
            Some(i) if !launches[i].overlaps(sp) => i,
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
        launches[at].spans.insert(sp.0, sp.1);
        launches[at].sets.push((ins, outs));
    }
    for l in &launches {
        let kernel = k.compiled(l.dtype, &l.layout)?;
        let params = k.sole(l.dtype)?.params.clone();
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
    }
    Ok(())
}

/// Stochastic gradient descent with momentum: `buf = momentum·buf + grad; p -= lr·buf`.
pub struct Sgd {
    params: Vec<Tensor>,
    /// The momentum buffer of each parameter (`[buf]`).
    bufs: Vec<Vec<Tensor>>,
    kernels: Kernels,
}

fn sgd_update(h: &Hyper, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (p, g, buf) = (&xs[0], &xs[1], &xs[2]);
    let buf = buf.mul_scalar(h.momentum)?.add(g)?;
    let p = p.sub(&buf.mul_scalar(h.lr)?)?;
    Ok(vec![p, buf])
}

impl Sgd {
    /// SGD over `params` (leaves that require grad) with learning rate `lr` and `momentum`.
    pub fn new(params: Vec<Tensor>, lr: f64, momentum: f64) -> Result<Sgd> {
        check_params("Sgd::new", &params)?;
        let hyper = Hyper {
            lr,
            momentum,
            beta1: 0.0,
            beta2: 0.0,
            eps: 0.0,
        };
        Ok(Sgd {
            bufs: zeros_like_all(&params)
                .into_iter()
                .map(|b| vec![b])
                .collect(),
            params,
            kernels: Kernels::new(sgd_update, hyper, 1, 0),
        })
    }

    /// Updates every parameter that has a gradient, in place, with one launch of the fused
    /// kernel over all of them.
    pub fn step(&mut self) -> Result<()> {
        step_all(&mut self.kernels, true, &self.params, &self.bufs, &[])
    }

    /// The same update op by op through the dispatcher (the reference for [`Sgd::step`]).
    pub fn step_eager(&mut self) -> Result<()> {
        step_all(&mut self.kernels, false, &self.params, &self.bufs, &[])
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// The compiled update kernels (one per dtype and loop layout: parameters of two or more
    /// elements share one, one-element parameters have their own).
    pub fn num_compiled(&self) -> usize {
        self.kernels.compiled.len()
    }
}

/// Adam: `m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
/// p −= lr/(1−β1ᵗ) · m / (sqrt(v/(1−β2ᵗ)) + eps)`.
pub struct Adam {
    params: Vec<Tensor>,
    /// `[m, v]` per parameter.
    state: Vec<Vec<Tensor>>,
    t: u32,
    kernels: Kernels,
}

fn adam_update(h: &Hyper, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (p, g, m, v, c1, c2) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4], &xs[5]);
    let m = m.mul_scalar(h.beta1)?.add(&g.mul_scalar(1.0 - h.beta1)?)?;
    let v = v
        .mul_scalar(h.beta2)?
        .add(&g.mul(g)?.mul_scalar(1.0 - h.beta2)?)?;
    let denom = v.mul(c2)?.sqrt()?.add_scalar(h.eps)?;
    let p = p.sub(&m.mul(c1)?.div(&denom)?)?;
    Ok(vec![p, m, v])
}

impl Adam {
    /// Adam over `params` with learning rate `lr`, `betas` and `eps`.
    pub fn new(params: Vec<Tensor>, lr: f64, betas: (f64, f64), eps: f64) -> Result<Adam> {
        check_params("Adam::new", &params)?;
        let state = zeros_like_all(&params)
            .into_iter()
            .zip(zeros_like_all(&params))
            .map(|(m, v)| vec![m, v])
            .collect();
        let hyper = Hyper {
            lr,
            momentum: 0.0,
            beta1: betas.0,
            beta2: betas.1,
            eps,
        };
        Ok(Adam {
            state,
            params,
            t: 0,
            kernels: Kernels::new(adam_update, hyper, 2, 2),
        })
    }

    /// Updates every parameter that has a gradient, in place, with one launch of the fused
    /// kernel over all of them.
    pub fn step(&mut self) -> Result<()> {
        self.run(true)
    }

    /// The same update op by op through the dispatcher (the reference for [`Adam::step`]).
    pub fn step_eager(&mut self) -> Result<()> {
        self.run(false)
    }

    fn run(&mut self, fused: bool) -> Result<()> {
        self.t += 1;
        let h = self.kernels.hyper;
        let c1 = h.lr / (1.0 - h.beta1.powi(self.t as i32));
        let c2 = 1.0 / (1.0 - h.beta2.powi(self.t as i32));
        step_all(
            &mut self.kernels,
            fused,
            &self.params,
            &self.state,
            &[c1, c2],
        )
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// The compiled update kernels (one per dtype and loop layout, as for [`Sgd`]).
    pub fn num_compiled(&self) -> usize {
        self.kernels.compiled.len()
    }
}
