//! Adam (L2 weight decay, AMSGrad) and AdamW (decoupled weight decay), PyTorch's
//! `torch.optim.Adam` and `torch.optim.AdamW`: one update rule, as in PyTorch.

use tensorplay_ir::{Error, Result};
use tensorplay_runtime::Tensor;

use super::fused::{Update, mul_add};
use super::groups::{Algorithm, Core, Hyper, check_nonneg};

/// [`Adam`]'s and [`AdamW`]'s hyper-parameters. `Default` gives PyTorch's `Adam` defaults;
/// [`AdamOptions::adamw`] PyTorch's `AdamW` defaults (`weight_decay` 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamOptions {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment averages.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Adam: L2 penalty added to the gradient; AdamW: decoupled decay `p *= 1 − lr·wd`.
    pub weight_decay: f64,
    /// Normalize by the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
}

impl Default for AdamOptions {
    fn default() -> AdamOptions {
        AdamOptions {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
        }
    }
}

impl AdamOptions {
    /// PyTorch's `AdamW` defaults: Adam's with `weight_decay` 0.01.
    pub fn adamw() -> AdamOptions {
        AdamOptions {
            weight_decay: 1e-2,
            ..AdamOptions::default()
        }
    }
}

impl Hyper for AdamOptions {
    fn lr(&self) -> f64 {
        self.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
    fn momentum(&self) -> Option<f64> {
        Some(self.betas.0)
    }
    fn set_momentum(&mut self, m: f64) -> bool {
        self.betas.0 = m;
        true
    }
    fn validate(&self, op: &str) -> Result<()> {
        check_nonneg(op, "lr", self.lr)?;
        check_nonneg(op, "eps", self.eps)?;
        check_nonneg(op, "weight_decay", self.weight_decay)?;
        for (i, b) in [self.betas.0, self.betas.1].into_iter().enumerate() {
            if !(0.0..1.0).contains(&b) {
                return Err(Error::argument(
                    op,
                    format!("betas.{i}"),
                    "a number in [0, 1)",
                    b.to_string(),
                ));
            }
        }
        Ok(())
    }
    fn scalars(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("lr", self.lr),
            ("betas.0", self.betas.0),
            ("betas.1", self.betas.1),
            ("eps", self.eps),
            ("weight_decay", self.weight_decay),
            ("amsgrad", f64::from(u8::from(self.amsgrad))),
        ]
    }
    fn set_scalar(&mut self, name: &str, v: f64) -> bool {
        match name {
            "lr" => self.lr = v,
            "betas.0" => self.betas.0 = v,
            "betas.1" => self.betas.1 = v,
            "eps" => self.eps = v,
            "weight_decay" => self.weight_decay = v,
            "amsgrad" => self.amsgrad = v != 0.0,
            _ => return false,
        }
        true
    }
}

const WEIGHT_DECAY: u32 = 1;
const AMSGRAD: u32 = 2;
/// `1 − beta1 ≥ 0.5`: PyTorch's `lerp` takes its other branch.
const LERP_FROM_END: u32 = 4;

/// `start + w·(end − start)`, as PyTorch's `lerp` computes it (with a fused multiply-add): from
/// `start` for `w < 0.5`, from `end` (`end + (w − 1)·(end − start)`) otherwise.
pub(crate) fn lerp(start: &Tensor, end: &Tensor, w: &Tensor, from_end: bool) -> Result<Tensor> {
    let d = end.sub(start)?;
    if from_end {
        mul_add(&w.sub_scalar(1.0)?, &d, end)
    } else {
        mul_add(w, &d, start)
    }
}

/// The Adam update rule; `DECOUPLED` is AdamW.
pub(crate) struct AdamRule<const DECOUPLED: bool>;

impl<const DECOUPLED: bool> Algorithm for AdamRule<DECOUPLED> {
    type Options = AdamOptions;
    const NAME: &'static str = if DECOUPLED { "AdamW" } else { "Adam" };
    const OP: &'static str = if DECOUPLED { "AdamW::new" } else { "Adam::new" };
    const KEEPS_STEP: bool = true;

    fn variant(o: &AdamOptions) -> u32 {
        let mut v = 0;
        if o.weight_decay != 0.0 {
            v |= WEIGHT_DECAY;
        }
        if o.amsgrad {
            v |= AMSGRAD;
        }
        if 1.0 - o.betas.0 >= 0.5 {
            v |= LERP_FROM_END;
        }
        v
    }

    fn buffers(variant: u32) -> Vec<&'static str> {
        let mut b = vec!["exp_avg", "exp_avg_sq"];
        if variant & AMSGRAD != 0 {
            b.push("max_exp_avg_sq");
        }
        b
    }

    /// `(p, m, v, [vmax], g, decay, 1 − beta1, beta2, 1 − beta2, sqrt(bc2), eps, −step_size)`:
    /// PyTorch's single-tensor Adam, operation by operation. `decay` is the L2 factor (Adam)
    /// or `1 − lr·wd` (AdamW).
    fn update(variant: u32) -> (Update, usize) {
        let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let ams = variant & AMSGRAD != 0;
            let (p, m, v) = (&xs[0], &xs[1], &xs[2]);
            let vmax = ams.then(|| &xs[3]);
            let s = &xs[if ams { 4 } else { 3 }..];
            let (g, decay, w, beta2, one_m_beta2, bc2_sqrt, eps, neg_step) =
                (&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7]);
            let (mut p, mut g) = (p.clone(), g.clone());
            if variant & WEIGHT_DECAY != 0 {
                if DECOUPLED {
                    p = p.mul(decay)?;
                } else {
                    g = mul_add(decay, &p, &g)?;
                }
            }
            let m = lerp(m, &g, w, variant & LERP_FROM_END != 0)?;
            // `addcmul(v·β2, g, g, value = 1 − β2)`: one rounding of `(1 − β2)·g · g + v·β2`.
            let v = mul_add(&one_m_beta2.mul(&g)?, &g, &v.mul(beta2)?)?;
            let vmax = vmax.map(|x| x.maximum(&v)).transpose()?;
            let denom = vmax
                .as_ref()
                .unwrap_or(&v)
                .sqrt()?
                .div(bc2_sqrt)?
                .add(eps)?;
            let p = p.add(&neg_step.mul(&m)?.div(&denom)?)?;
            let mut out = vec![p, m, v];
            out.extend(vmax);
            Ok(out)
        };
        (Box::new(f), 7)
    }

    fn scalars(o: &AdamOptions, step: u64, _fresh: bool) -> Vec<f64> {
        let (beta1, beta2) = o.betas;
        // PyTorch computes these in Python floats (f64); the step is a whole number.
        let t = step as f64;
        let bc1 = 1.0 - beta1.powf(t);
        let bc2 = 1.0 - beta2.powf(t);
        let decay = if DECOUPLED {
            1.0 - o.lr * o.weight_decay
        } else {
            o.weight_decay
        };
        vec![
            decay,
            1.0 - beta1,
            beta2,
            1.0 - beta2,
            bc2.sqrt(),
            o.eps,
            -(o.lr / bc1),
        ]
    }
}

/// Adam, PyTorch's `Adam` step by step: per parameter, its own step count `t` advances;
/// `g += weight_decay·p`; `m = lerp(m, g, 1 − β1)`; `v = β2·v + (1 − β2)·g·g`; with AMSGrad
/// `vmax = max(vmax, v)` replaces `v` below; `p += −(lr / (1 − β1ᵗ)) · m / (sqrt(v) /
/// sqrt(1 − β2ᵗ) + eps)`. A parameter without a gradient is skipped and its `t` does not
/// advance.
///
/// [`Adam::step`] updates every parameter with one launch of a compiled in-place kernel;
/// [`Adam::step_eager`] runs the same operations op by op (see the [module docs](super)).
///
/// ```
/// use tensorplay_compiler::optim::{Adam, AdamOptions, Optimizer};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[4], DType::F32).requires_grad_(true)?;
/// let opts = AdamOptions { lr: 0.1, amsgrad: true, ..Default::default() };
/// let mut opt = Adam::with_options(vec![w.clone()], opts)?;
/// w.mul_scalar(3.0)?.sum_all()?.backward()?;
/// opt.step()?; // the first step moves every element by about lr
/// assert!((w.detach().to_vec::<f32>()?[0] - 0.9).abs() < 1e-6);
/// assert_eq!(opt.state_dict().scalar("state.0.step"), Some(1.0));
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct Adam {
    pub(crate) core: Core<AdamRule<false>>,
}

/// AdamW: [`Adam`] with decoupled weight decay — `p *= 1 − lr·weight_decay` before the Adam
/// step instead of adding `weight_decay·p` to the gradient (PyTorch's `AdamW`; its default
/// `weight_decay` is 0.01, [`AdamOptions::adamw`]).
///
/// ```
/// use tensorplay_compiler::optim::{AdamOptions, AdamW, Optimizer};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
/// let mut opt = AdamW::with_options(vec![w.clone()], AdamOptions { lr: 0.1, ..AdamOptions::adamw() })?;
/// w.sum_all()?.backward()?;
/// opt.step()?; // w = 1·(1 − 0.1·0.01) − 0.1
/// assert!((w.detach().to_vec::<f32>()?[0] - 0.899).abs() < 1e-6);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct AdamW {
    pub(crate) core: Core<AdamRule<true>>,
}

impl Adam {
    /// Adam over `params` with learning rate `lr`, `betas` and `eps` (no weight decay, no
    /// AMSGrad).
    pub fn new(params: Vec<Tensor>, lr: f64, betas: (f64, f64), eps: f64) -> Result<Adam> {
        let o = AdamOptions {
            lr,
            betas,
            eps,
            ..AdamOptions::default()
        };
        Adam::with_options(params, o)
    }

    /// Adam over `params` with all of [`AdamOptions`]; PyTorch's argument checks apply.
    pub fn with_options(params: Vec<Tensor>, options: AdamOptions) -> Result<Adam> {
        Ok(Adam {
            core: Core::new(params, options)?,
        })
    }

    /// Adds a parameter group with its own options (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, params: Vec<Tensor>, options: AdamOptions) -> Result<()> {
        self.core.add_group(params, options)
    }

    /// Group `group`'s options.
    pub fn options(&self, group: usize) -> Option<&AdamOptions> {
        self.core.groups.get(group).map(|g| &g.options)
    }
}

impl AdamW {
    /// AdamW over `params` with learning rate `lr`, `betas`, `eps` and `weight_decay`.
    pub fn new(
        params: Vec<Tensor>,
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
    ) -> Result<AdamW> {
        let o = AdamOptions {
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad: false,
        };
        AdamW::with_options(params, o)
    }

    /// AdamW over `params` with all of [`AdamOptions`] (`weight_decay` is decoupled).
    pub fn with_options(params: Vec<Tensor>, options: AdamOptions) -> Result<AdamW> {
        Ok(AdamW {
            core: Core::new(params, options)?,
        })
    }

    /// Adds a parameter group with its own options (PyTorch's `add_param_group`).
    pub fn add_param_group(&mut self, params: Vec<Tensor>, options: AdamOptions) -> Result<()> {
        self.core.add_group(params, options)
    }

    /// Group `group`'s options.
    pub fn options(&self, group: usize) -> Option<&AdamOptions> {
        self.core.groups.get(group).map(|g| &g.options)
    }
}

super::impl_optimizer!(Adam);
super::impl_optimizer!(AdamW);
