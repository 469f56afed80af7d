//! Fused optimizer steps: SGD with momentum and Adam, updating every parameter and its state
//! with one compiled pointwise kernel.
//!
//! The update of one element does not depend on the parameter's shape, so each optimizer
//! captures its update once per dtype as a graph over flat 1-D views with a dynamic length (a
//! single fused region) and launches that one kernel for every parameter of the list. The
//! kernel reads the parameter, its gradient and the current state and writes the new state
//! straight into the optimizer's spare state buffers ([`CompiledGraph::run_into`]; current and
//! spare swap after the step), and the new parameter into a scratch buffer copied into the
//! parameter's storage — a kernel never writes an operand it reads, since a staged kernel may
//! read an input again after writing an output. Step-dependent scalars (Adam's bias
//! corrections) are 0-d tensor inputs, so the kernel is compiled once. `step_eager` runs the
//! same update op by op through the dispatcher (the reference, and the path for parameters that
//! are not contiguous).
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

use std::collections::HashMap;
use std::sync::Arc;

use tensorplay_ir::{CompileKind, DType, Device, Error, Result, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::no_grad;

use crate::capture::{CaptureOptions, capture};
use crate::executor::CompiledGraph;

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

/// The update kernels of one optimizer, by dtype and by whether the parameter has one element
/// (size-1 dims are static in a dynamic graph).
struct Kernels {
    update: Update,
    hyper: Hyper,
    /// Input count and how many of them (from the end) are 0-d scalars.
    arity: usize,
    scalars: usize,
    compiled: HashMap<(DType, bool), Arc<CompiledGraph>>,
}

impl Kernels {
    fn get(&mut self, dtype: DType, single: bool) -> Result<Arc<CompiledGraph>> {
        if let Some(k) = self.compiled.get(&(dtype, single)) {
            return Ok(k.clone());
        }
        let n = if single { 1 } else { 2 };
        let mut metas = vec![TensorMeta::new(&[n], dtype, Device::Cpu); self.arity - self.scalars];
        metas.extend(vec![TensorMeta::new(&[], dtype, Device::Cpu); self.scalars]);
        let (update, hyper) = (self.update, self.hyper);
        let g = capture(
            |xs| update(&hyper, xs),
            &metas,
            CaptureOptions { dynamic: true },
        )?;
        let k = Arc::new(CompiledGraph::new(&g)?);
        if k.num_kernels() != 1 || k.plan().steps.len() != 1 {
            return Err(Error::compile(
                CompileKind::Launch,
                format!(
                    "optimizer update did not fuse into one kernel:\n{}",
                    k.explain()
                ),
            ));
        }
        self.compiled.insert((dtype, single), k.clone());
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

/// One parameter's flat operands as 1-D views, or `None` when one is not contiguous (the
/// parameter is then updated eagerly).
fn flat(ts: &[&Tensor]) -> Result<Option<Vec<Tensor>>> {
    if ts.iter().any(|t| !t.is_contiguous()) {
        return Ok(None);
    }
    let n = ts[0].numel();
    Ok(Some(
        ts.iter()
            .map(|t| t.reshape(&[n]))
            .collect::<Result<Vec<_>>>()?,
    ))
}

/// Runs `update` on one parameter `p` with gradient `g`, state `cur` and spare buffers
/// `spare` (same shapes): fused, writing the new state into `spare` (then `true`: swap them),
/// or op by op with the results copied into `p` and `cur` (`false`). `scalars` are the 0-d
/// inputs after the tensors.
fn apply(
    kernels: &mut Kernels,
    fused: bool,
    p: &Tensor,
    g: &Tensor,
    cur: &[Tensor],
    spare: &[Tensor],
    scalars: &[Tensor],
) -> Result<bool> {
    let _g = no_grad();
    let p = p.detach();
    let mut operands: Vec<&Tensor> = vec![&p];
    operands.extend(cur);
    operands.extend(spare);
    if fused && let Some(views) = flat(&operands)? {
        let n = p.numel();
        let mut xs = vec![views[0].clone(), g.contiguous()?.reshape(&[n])?];
        xs.extend(views[1..=cur.len()].iter().cloned());
        xs.extend(scalars.iter().cloned());
        let new_p = Tensor::empty(&[n], p.dtype());
        let mut dests = vec![new_p.clone()];
        dests.extend(views[1 + cur.len()..].iter().cloned());
        let k = kernels.get(p.dtype(), n == 1)?;
        k.run_into(&xs, &dests)?;
        views[0].copy_(&new_p)?;
        return Ok(true);
    }
    let mut xs = vec![p.clone(), g.clone()];
    xs.extend(cur.iter().cloned());
    xs.extend(scalars.iter().cloned());
    let new = (kernels.update)(&kernels.hyper, &xs)?;
    for (dest, t) in std::iter::once(&p).chain(cur).zip(&new) {
        dest.copy_(t)?;
    }
    Ok(false)
}

/// Stochastic gradient descent with momentum: `buf = momentum·buf + grad; p -= lr·buf`.
pub struct Sgd {
    params: Vec<Tensor>,
    /// Momentum buffers: current and spare, per parameter.
    bufs: Vec<[Tensor; 2]>,
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
        Ok(Sgd {
            bufs: zeros_like_all(&params)
                .into_iter()
                .zip(zeros_like_all(&params))
                .map(|(a, b)| [a, b])
                .collect(),
            params,
            kernels: Kernels {
                update: sgd_update,
                hyper: Hyper {
                    lr,
                    momentum,
                    beta1: 0.0,
                    beta2: 0.0,
                    eps: 0.0,
                },
                arity: 3,
                scalars: 0,
                compiled: HashMap::new(),
            },
        })
    }

    /// Updates every parameter that has a gradient, in place, with the fused kernel.
    pub fn step(&mut self) -> Result<()> {
        self.run(true)
    }

    /// The same update op by op through the dispatcher (the reference for [`Sgd::step`]).
    pub fn step_eager(&mut self) -> Result<()> {
        self.run(false)
    }

    fn run(&mut self, fused: bool) -> Result<()> {
        for (p, buf) in self.params.iter().zip(&mut self.bufs) {
            let Some(g) = p.grad() else { continue };
            let [cur, spare] = &*buf;
            let (cur, spare) = (cur.clone(), spare.clone());
            if apply(&mut self.kernels, fused, p, &g, &[cur], &[spare], &[])? {
                buf.swap(0, 1);
            }
        }
        Ok(())
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// The compiled update kernels (one per dtype and size class), for `explain()`.
    pub fn num_compiled(&self) -> usize {
        self.kernels.compiled.len()
    }
}

/// Adam: `m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
/// p −= lr/(1−β1ᵗ) · m / (sqrt(v/(1−β2ᵗ)) + eps)`.
pub struct Adam {
    params: Vec<Tensor>,
    /// `[m, v]` current and spare, per parameter.
    state: Vec<[[Tensor; 2]; 2]>,
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
        let zeros = || zeros_like_all(&params);
        let state = zeros()
            .into_iter()
            .zip(zeros())
            .zip(zeros().into_iter().zip(zeros()))
            .map(|((m, v), (m2, v2))| [[m, v], [m2, v2]])
            .collect();
        Ok(Adam {
            state,
            params,
            t: 0,
            kernels: Kernels {
                update: adam_update,
                hyper: Hyper {
                    lr,
                    momentum: 0.0,
                    beta1: betas.0,
                    beta2: betas.1,
                    eps,
                },
                arity: 6,
                scalars: 2,
                compiled: HashMap::new(),
            },
        })
    }

    /// Updates every parameter that has a gradient, in place, with the fused kernel.
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
        for (p, st) in self.params.iter().zip(&mut self.state) {
            let Some(g) = p.grad() else { continue };
            let scalars = [
                Tensor::scalar(c1).to_dtype(p.dtype())?,
                Tensor::scalar(c2).to_dtype(p.dtype())?,
            ];
            let [cur, spare] = st.clone();
            if apply(&mut self.kernels, fused, p, &g, &cur, &spare, &scalars)? {
                st.swap(0, 1);
            }
        }
        Ok(())
    }

    /// Clears every parameter's gradient.
    pub fn zero_grad(&self) {
        for p in &self.params {
            p.zero_grad();
        }
    }

    /// The compiled update kernels (one per dtype and size class).
    pub fn num_compiled(&self) -> usize {
        self.kernels.compiled.len()
    }
}
