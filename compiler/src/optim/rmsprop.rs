//! RMSprop (centered, with momentum and weight decay), PyTorch's `torch.optim.RMSprop`.

use tensorplay_ir::Result;
use tensorplay_runtime::Tensor;

use super::adam::lerp;
use super::fused::{Update, mul_add};
use super::groups::{Algorithm, Core, Hyper, check_nonneg};

/// [`RMSprop`]'s hyper-parameters, with PyTorch's defaults (`lr` 0.01, `alpha` 0.99,
/// `eps` 1e-8, the rest off).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RMSpropOptions {
    /// Learning rate.
    pub lr: f64,
    /// Smoothing constant of the squared-gradient average.
    pub alpha: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Momentum factor (0: no momentum buffer).
    pub momentum: f64,
    /// Normalize by the estimated variance (subtract the squared gradient average).
    pub centered: bool,
}

impl Default for RMSpropOptions {
    fn default() -> RMSpropOptions {
        RMSpropOptions {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
        }
    }
}

impl Hyper for RMSpropOptions {
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
        check_nonneg(op, "eps", self.eps)?;
        check_nonneg(op, "momentum", self.momentum)?;
        check_nonneg(op, "weight_decay", self.weight_decay)?;
        check_nonneg(op, "alpha", self.alpha)
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("lr", self.lr),
            ("alpha", self.alpha),
            ("eps", self.eps),
            ("weight_decay", self.weight_decay),
            ("momentum", self.momentum),
            ("centered", f64::from(u8::from(self.centered))),
        ]
    }
    fn set_scalar(&mut self, name: &str, v: f64) -> bool {
        match name {
            "lr" => self.lr = v,
            "alpha" => self.alpha = v,
            "eps" => self.eps = v,
            "weight_decay" => self.weight_decay = v,
            "momentum" => self.momentum = v,
            "centered" => self.centered = v != 0.0,
            _ => return false,
        }
        true
    }
}

const WEIGHT_DECAY: u32 = 1;
const CENTERED: u32 = 2;
const MOMENTUM: u32 = 4;
/// `1 − alpha ≥ 0.5`: PyTorch's `lerp` takes its other branch.
const LERP_FROM_END: u32 = 8;

pub(crate) struct RMSpropRule;

impl Algorithm for RMSpropRule {
    type Options = RMSpropOptions;
    const NAME: &'static str = "RMSprop";
    const OP: &'static str = "RMSprop::new";
    const KEEPS_STEP: bool = true;

    fn variant(o: &RMSpropOptions) -> u32 {
        let mut v = 0;
        if o.weight_decay != 0.0 {
            v |= WEIGHT_DECAY;
        }
        if o.centered {
            v |= CENTERED;
        }
        if o.momentum > 0.0 {
            v |= MOMENTUM;
        }
        if 1.0 - o.alpha >= 0.5 {
            v |= LERP_FROM_END;
        }
        v
    }

    fn buffers(variant: u32) -> Vec<&'static str> {
        let mut b = vec!["square_avg"];
        if variant & CENTERED != 0 {
            b.push("grad_avg");
        }
        if variant & MOMENTUM != 0 {
            b.push("momentum_buffer");
        }
        b
    }

    /// `(p, sq, [grad_avg], [buf], g, wd, alpha, 1 − alpha, eps, momentum, −lr)`: PyTorch's
    /// single-tensor RMSprop, operation by operation.
    fn update(variant: u32) -> (Update, usize) {
        let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let (centered, mom) = (variant & CENTERED != 0, variant & MOMENTUM != 0);
            let (p, sq) = (&xs[0], &xs[1]);
            let mut at = 2;
            let ga = centered.then(|| {
                at += 1;
                &xs[at - 1]
            });
            let buf = mom.then(|| {
                at += 1;
                &xs[at - 1]
            });
            let s = &xs[at..];
            let (g, wd, alpha, w, eps, m, neg_lr) =
                (&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6]);
            let mut g = g.clone();
            if variant & WEIGHT_DECAY != 0 {
                g = mul_add(wd, p, &g)?;
            }
            let sq = mul_add(&w.mul(&g)?, &g, &sq.mul(alpha)?)?;
            let mut out = vec![Tensor::scalar(0.0f32), sq.clone()];
            let avg = match ga {
                Some(ga) => {
                    let ga = lerp(ga, &g, w, variant & LERP_FROM_END != 0)?;
                    let avg = mul_add(&ga.mul_scalar(-1.0)?, &ga, &sq)?.sqrt()?;
                    out.push(ga);
                    avg
                }
                None => sq.sqrt()?,
            }
            .add(eps)?;
            out[0] = match buf {
                Some(buf) => {
                    let buf = buf.mul(m)?.add(&g.div(&avg)?)?;
                    let p = mul_add(neg_lr, &buf, p)?;
                    out.push(buf);
                    p
                }
                None => p.add(&neg_lr.mul(&g)?.div(&avg)?)?,
            };
            Ok(out)
        };
        (Box::new(f), 6)
    }

    fn scalars(o: &RMSpropOptions, _step: u64, _fresh: bool) -> Vec<f64> {
        vec![
            o.weight_decay,
            o.alpha,
            1.0 - o.alpha,
            o.eps,
            o.momentum,
            -o.lr,
        ]
    }
}

/// RMSprop, PyTorch's `RMSprop` step by step: per parameter, `g += weight_decay·p`;
/// `sq = alpha·sq + (1 − alpha)·g·g`; centered: `ga = lerp(ga, g, 1 − alpha)` and
/// `avg = sqrt(sq − ga·ga) + eps`, otherwise `avg = sqrt(sq) + eps`; with momentum
/// `buf = momentum·buf + g/avg; p −= lr·buf`, otherwise `p −= lr·g/avg`. Parameters without a
/// gradient are skipped (their step count does not advance).
///
/// ```
/// use tensorplay_compiler::optim::{Optimizer, RMSprop, RMSpropOptions};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
/// let mut opt = RMSprop::with_options(vec![w.clone()], RMSpropOptions { lr: 0.01, ..Default::default() })?;
/// w.sum_all()?.backward()?;
/// opt.step()?; // sq = 0.01, p −= 0.01 · 1 / 0.1
/// assert!((w.detach().to_vec::<f32>()?[0] - 0.9).abs() < 1e-6);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct RMSprop {
    pub(crate) core: Core<RMSpropRule>,
}

impl RMSprop {
    /// RMSprop over `params` with all of [`RMSpropOptions`]; PyTorch's argument checks apply.
    pub fn with_options(params: Vec<Tensor>, options: RMSpropOptions) -> Result<RMSprop> {
        Ok(RMSprop {
            core: Core::new(params, options)?,
        })
    }

    /// RMSprop over `params` with learning rate `lr` and PyTorch's other defaults.
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<RMSprop> {
        RMSprop::with_options(
            params,
            RMSpropOptions {
                lr,
                ..RMSpropOptions::default()
            },
        )
    }

    /// Adds a parameter group with its own options (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, params: Vec<Tensor>, options: RMSpropOptions) -> Result<()> {
        self.core.add_group(params, options)
    }

    /// Group `group`'s options.
    pub fn options(&self, group: usize) -> Option<&RMSpropOptions> {
        self.core.groups.get(group).map(|g| &g.options)
    }
}

super::impl_optimizer!(RMSprop);
