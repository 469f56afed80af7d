//! Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay,
//! PyTorch's `torch.optim.SGD`.

use tensorplay_ir::{Error, Result};
use tensorplay_runtime::Tensor;

use super::fused::{Update, mul_add};
use super::groups::{Algorithm, Core, Hyper, check_nonneg};

/// [`Sgd`]'s hyper-parameters, with PyTorch's defaults (`lr` 1e-3, everything else off).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdOptions {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: no momentum buffer).
    pub momentum: f64,
    /// Dampening of the gradient in the momentum buffer (from the second step on).
    pub dampening: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl Default for SgdOptions {
    fn default() -> SgdOptions {
        SgdOptions {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

impl Hyper for SgdOptions {
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn momentum(&self) -> Option<f64> {
        Some(self.momentum)
    }
    fn set_momentum(&mut self, m: f64) -> bool {
        self.momentum = m;
        true
    }
    fn validate(&self, op: &str) -> Result<()> {
        check_nonneg(op, "lr", self.lr)?;
        check_nonneg(op, "momentum", self.momentum)?;
        check_nonneg(op, "weight_decay", self.weight_decay)?;
        if self.dampening.is_nan() {
            return Err(Error::argument(op, "dampening", "a number", "NaN"));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::argument(
                op,
                "nesterov",
                "momentum > 0 and dampening 0 (Nesterov momentum needs both)",
                format!(
                    "momentum {} and dampening {}",
                    self.momentum, self.dampening
                ),
            ));
        }
        Ok(())
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("lr", self.lr),
            ("momentum", self.momentum),
            ("dampening", self.dampening),
            ("weight_decay", self.weight_decay),
            ("nesterov", f64::from(u8::from(self.nesterov))),
        ]
    }
    fn set_scalar(&mut self, name: &str, v: f64) -> bool {
        match name {
            "lr" => self.lr = v,
            "momentum" => self.momentum = v,
            "dampening" => self.dampening = v,
            "weight_decay" => self.weight_decay = v,
            "nesterov" => self.nesterov = v != 0.0,
            _ => return false,
        }
        true
    }
}

const WEIGHT_DECAY: u32 = 1;
const MOMENTUM: u32 = 2;
const NESTEROV: u32 = 4;

pub(crate) struct SgdRule;

impl Algorithm for SgdRule {
    type Options = SgdOptions;
    const NAME: &'static str = "Sgd";
    const OP: &'static str = "Sgd::new";
    const KEEPS_STEP: bool = false;

    fn variant(o: &SgdOptions) -> u32 {
        let mut v = 0;
        if o.weight_decay != 0.0 {
            v |= WEIGHT_DECAY;
        }
        if o.momentum != 0.0 {
            v |= MOMENTUM;
            if o.nesterov {
                v |= NESTEROV;
            }
        }
        v
    }

    fn buffers(variant: u32) -> Vec<&'static str> {
        if variant & MOMENTUM != 0 {
            vec!["momentum_buffer"]
        } else {
            vec![]
        }
    }

    /// `(p, [buf], g, neg_lr, weight_decay, momentum, grad_scale)` where `grad_scale` is 1 on
    /// the buffer's first step (PyTorch starts it as a copy of the gradient) and
    /// `1 − dampening` afterwards. The operations are PyTorch's, in its order.
    fn update(variant: u32) -> (Update, usize) {
        let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let mom = variant & MOMENTUM != 0;
            let (p, rest) = (&xs[0], &xs[1..]);
            let (buf, rest) = if mom {
                (Some(&rest[0]), &rest[1..])
            } else {
                (None, rest)
            };
            let (g, neg_lr, wd, m, c) = (&rest[0], &rest[1], &rest[2], &rest[3], &rest[4]);
            let mut g = g.clone();
            // `x.add(y, alpha=a)` is `mul_add(a, y, x)`, as PyTorch computes it.
            if variant & WEIGHT_DECAY != 0 {
                g = mul_add(wd, p, &g)?;
            }
            let mut out = Vec::with_capacity(2);
            let d = match buf {
                Some(buf) => {
                    let buf = mul_add(c, &g, &buf.mul(m)?)?;
                    let d = if variant & NESTEROV != 0 {
                        mul_add(m, &buf, &g)?
                    } else {
                        buf.clone()
                    };
                    out.push(buf);
                    d
                }
                None => g,
            };
            out.insert(0, mul_add(neg_lr, &d, p)?);
            Ok(out)
        };
        (Box::new(f), 4)
    }

    fn scalars(o: &SgdOptions, _step: u64, fresh: bool) -> Vec<f64> {
        let c = if fresh { 1.0 } else { 1.0 - o.dampening };
        vec![-o.lr, o.weight_decay, o.momentum, c]
    }
}

/// Stochastic gradient descent, PyTorch's `SGD` step by step (per parameter, in this order):
/// `g += weight_decay·p`; with momentum `buf = g` on the first step and
/// `buf = momentum·buf + (1 − dampening)·g` afterwards, then `g = g + momentum·buf` (Nesterov)
/// or `g = buf`; finally `p −= lr·g`. Parameters without a gradient are skipped.
///
/// [`Sgd::step`] updates every parameter with one launch of a compiled in-place kernel;
/// [`Sgd::step_eager`] runs the same operations op by op (see the [module docs](super)).
///
/// ```
/// use tensorplay_compiler::optim::{Optimizer, Sgd, SgdOptions};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[4], DType::F32).requires_grad_(true)?;
/// w.mul_scalar(3.0)?.sum_all()?.backward()?; // grad = 3
/// let opts = SgdOptions { lr: 0.1, momentum: 0.9, nesterov: true, ..Default::default() };
/// let mut opt = Sgd::with_options(vec![w.clone()], opts)?;
/// opt.step()?; // buf = 3; g = 3 + 0.9·3; w = 1 − 0.1·5.7
/// assert!((w.detach().to_vec::<f32>()?[0] - 0.43).abs() < 1e-6);
/// // Nesterov momentum needs a momentum and no dampening, as in PyTorch.
/// let bad = SgdOptions { nesterov: true, ..Default::default() };
/// assert!(Sgd::with_options(vec![w.clone()], bad).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct Sgd {
    pub(crate) core: Core<SgdRule>,
}

impl Sgd {
    /// SGD over `params` (leaves that require grad) with learning rate `lr` and `momentum`
    /// (no dampening, weight decay or Nesterov momentum).
    pub fn new(params: Vec<Tensor>, lr: f64, momentum: f64) -> Result<Sgd> {
        let o = SgdOptions {
            lr,
            momentum,
            ..SgdOptions::default()
        };
        Sgd::with_options(params, o)
    }

    /// SGD over `params` with all of [`SgdOptions`]; PyTorch's argument checks apply.
    pub fn with_options(params: Vec<Tensor>, options: SgdOptions) -> Result<Sgd> {
        Ok(Sgd {
            core: Core::new(params, options)?,
        })
    }

    /// Adds a parameter group with its own options (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, params: Vec<Tensor>, options: SgdOptions) -> Result<()> {
        self.core.add_group(params, options)
    }

    /// Group `group`'s options.
    pub fn options(&self, group: usize) -> Option<&SgdOptions> {
        self.core.groups.get(group).map(|g| &g.options)
    }
}

super::impl_optimizer!(Sgd);
