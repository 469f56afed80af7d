//! Learning-rate schedulers with PyTorch's formulas (`torch.optim.lr_scheduler`).
//!
//! A scheduler does not hold its optimizer (the training loop keeps using it): it takes it as
//! `&mut dyn Optimizer` when built and at every [`LRScheduler::step`]. As in PyTorch, building a
//! scheduler records each group's `initial_lr` (the first scheduler attached sets it) and takes
//! the first step (epoch 0) at once, and each `step()` computes the next rates from the
//! optimizer's current ones (PyTorch's chainable form), so schedulers compose:
//! [`ChainedScheduler`] steps several on the same optimizer, [`SequentialLR`] switches from one
//! to the next at milestones (restarting each from its closed form at epoch 0).
//!
//! ```
//! use tensorplay_compiler::optim::{Adam, CosineAnnealingLR, LRScheduler, LinearLR, Optimizer, SequentialLR};
//! use tensorplay_runtime::{DType, Tensor};
//! let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
//! let mut opt = Adam::new(vec![w.clone()], 0.1, (0.9, 0.999), 1e-8)?;
//! // Linear warm-up over 5 steps from lr/10, then a cosine decay over 20.
//! let warmup = LinearLR::new(&mut opt, 0.1, 1.0, 5)?;
//! let cosine = CosineAnnealingLR::new(&mut opt, 20, 0.0)?;
//! let mut sched = SequentialLR::new(&mut opt, vec![Box::new(warmup), Box::new(cosine)], vec![5])?;
//! assert!((opt.lr() - 0.01).abs() < 1e-12);
//! for _ in 0..5 {
//!     // forward, backward, opt.step() ...
//!     sched.step(&mut opt)?;
//! }
//! assert!((opt.lr() - 0.1).abs() < 1e-12); // warm-up done: the cosine starts at lr
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

use std::f64::consts::PI;

use tensorplay_ir::{Error, Result};

use super::Optimizer;

/// A learning-rate scheduler driving an [`Optimizer`]'s groups.
pub trait LRScheduler {
    /// Advances one step (epoch) and sets the optimizer's learning rates.
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()>;
    /// The learning rates the last step set, one per group (PyTorch's `get_last_lr()`).
    fn last_lr(&self) -> Vec<f64>;
    /// The step count (PyTorch's `last_epoch`: 0 right after construction).
    fn last_epoch(&self) -> i64;
    /// Each group's `initial_lr` when the scheduler was built (PyTorch's `base_lrs`).
    fn base_lrs(&self) -> Vec<f64>;
    /// Jumps to `epoch` and sets the rates from the closed form where the scheduler has one
    /// (PyTorch's `step(epoch)` / `_update_lr(epoch)`; [`SequentialLR`] restarts a scheduler
    /// this way at its milestone).
    fn step_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()>;
    /// Takes the constructor's first step again (PyTorch's `_initial_step`, what
    /// [`SequentialLR`] does to its first scheduler).
    fn initial_step(&mut self, opt: &mut dyn Optimizer) -> Result<()>;
    /// Moves the step count back by one (and that of nested schedulers), undoing the first
    /// step a constructor took ([`SequentialLR`]'s `recursive_undo`).
    fn rewind(&mut self);
    /// This scheduler's progress, to resume training from (see [`SchedulerState`]).
    fn state(&self) -> SchedulerState;
    /// Checks that [`LRScheduler::load_state`] would accept `state`: the same number of
    /// groups, and nested states exactly where this scheduler runs others (as many).
    fn check_state(&self, state: &SchedulerState) -> Result<()>;
    /// Restores progress saved by [`LRScheduler::state`] of a scheduler of the same kind and
    /// group count; a state of another shape is an error and changes nothing. The optimizer's
    /// rates are left alone: they come back with the optimizer's own state (PyTorch's
    /// `load_state_dict` of both, in either order).
    ///
    /// ```
    /// use tensorplay_compiler::optim::{LRScheduler, Optimizer, Sgd, StepLR};
    /// use tensorplay_runtime::{DType, Tensor};
    /// let w = Tensor::ones(&[1], DType::F32).requires_grad_(true)?;
    /// let mut opt = Sgd::new(vec![w], 1.0, 0.0)?;
    /// let mut a = StepLR::new(&mut opt, 2, 0.5)?;
    /// for _ in 0..3 {
    ///     a.step(&mut opt)?;
    /// }
    /// // A fresh scheduler (after a restart) picks up where `a` was.
    /// let mut b = StepLR::new(&mut opt, 2, 0.5)?;
    /// b.load_state(&a.state())?;
    /// assert_eq!(b.last_epoch(), 3);
    /// a.step(&mut opt)?;
    /// let after_a = opt.lr();
    /// b.step(&mut opt)?; // the same decision as `a`'s 4th step: a decay at epoch 4
    /// assert_eq!(opt.lr(), after_a * 0.5);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    fn load_state(&mut self, state: &SchedulerState) -> Result<()> {
        self.check_state(state)?;
        self.apply_state(state);
        Ok(())
    }
    /// Sets the progress from a state [`LRScheduler::check_state`] accepted.
    fn apply_state(&mut self, state: &SchedulerState);
}

/// A scheduler's progress: what [`LRScheduler::state`] saves and [`LRScheduler::load_state`]
/// restores. PyTorch's scheduler `state_dict()` without the hyper-parameters (the constructor
/// sets those): `last_epoch`, `_step_count`, `base_lrs`, `_last_lr`, and the states of the
/// schedulers a [`SequentialLR`] or [`ChainedScheduler`] runs (`_schedulers`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchedulerState {
    /// The step count (`last_epoch`).
    pub last_epoch: i64,
    /// Steps taken, the constructor's included (`_step_count`; 0 for the composite ones).
    pub step_count: u64,
    /// Each group's `initial_lr` when the scheduler was built.
    pub base_lrs: Vec<f64>,
    /// The rates the last step set, one per group.
    pub last_lr: Vec<f64>,
    /// The nested schedulers' states, in order (composite schedulers only).
    pub nested: Vec<SchedulerState>,
}

/// The error of a state that does not fit a scheduler.
fn state_mismatch(what: &str, expected: String, got: String) -> Error {
    Error::argument("LRScheduler::load_state", what, expected, got)
}

/// Checks a state's per-group lists against `groups` groups.
fn check_groups(state: &SchedulerState, groups: usize) -> Result<()> {
    for (name, v) in [("base_lrs", &state.base_lrs), ("last_lr", &state.last_lr)] {
        if v.len() != groups {
            return Err(state_mismatch(
                name,
                format!("{groups} values (one per parameter group)"),
                v.len().to_string(),
            ));
        }
    }
    if state.last_epoch < 0 {
        return Err(state_mismatch(
            "last_epoch",
            "a step count >= 0".into(),
            state.last_epoch.to_string(),
        ));
    }
    Ok(())
}

/// Checks a composite scheduler's nested states against its `schedulers`.
fn check_nested(state: &SchedulerState, schedulers: &[Box<dyn LRScheduler>]) -> Result<()> {
    if state.nested.len() != schedulers.len() {
        return Err(state_mismatch(
            "nested",
            format!("{} nested scheduler states", schedulers.len()),
            state.nested.len().to_string(),
        ));
    }
    for (s, n) in schedulers.iter().zip(&state.nested) {
        s.check_state(n)?;
    }
    Ok(())
}

/// The counters every scheduler keeps (PyTorch's `base_lrs`, `last_epoch`, `_step_count`,
/// `_last_lr`, and whether the constructor's step is running).
#[derive(Clone, Debug)]
struct Counters {
    base_lrs: Vec<f64>,
    last_epoch: i64,
    step_count: u64,
    last_lr: Vec<f64>,
    initial: bool,
}

/// One scheduler's formulas: the chainable one (from the optimizer's current rates) and the
/// closed form (from `base_lrs`), where there is one.
trait Rule {
    fn get_lr(&mut self, c: &Counters, opt: &mut dyn Optimizer) -> Result<Vec<f64>>;
    fn closed_form(&self, c: &Counters) -> Option<Vec<f64>>;
}

/// A scheduler: its counters and its rule.
#[derive(Clone, Debug)]
struct Sched<R> {
    c: Counters,
    rule: R,
}

fn group_lrs(opt: &dyn Optimizer) -> Vec<f64> {
    opt.lrs()
}

impl<R: Rule> Sched<R> {
    /// Records `initial_lr` (keeping one an earlier scheduler set) and takes the first step.
    fn new(opt: &mut dyn Optimizer, rule: R) -> Result<Sched<R>> {
        let mut base_lrs = Vec::with_capacity(opt.num_groups());
        for g in 0..opt.num_groups() {
            let lr = match opt.group_initial_lr(g) {
                Some(lr) => lr,
                None => {
                    let lr = opt.group_lr(g).unwrap_or(0.0);
                    opt.set_group_initial_lr(g, lr)?;
                    lr
                }
            };
            base_lrs.push(lr);
        }
        let mut s = Sched {
            c: Counters {
                base_lrs,
                last_epoch: -1,
                step_count: 0,
                last_lr: Vec::new(),
                initial: false,
            },
            rule,
        };
        s.initial_step(opt)?;
        Ok(s)
    }

    fn initial_step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.c.step_count = 0;
        self.c.initial = true;
        let r = self.step(opt);
        self.c.initial = false;
        r
    }

    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.c.step_count += 1;
        self.update(opt, None)
    }

    fn update(&mut self, opt: &mut dyn Optimizer, epoch: Option<i64>) -> Result<()> {
        let values = match epoch {
            None => {
                self.c.last_epoch += 1;
                self.rule.get_lr(&self.c, opt)?
            }
            Some(e) => {
                self.c.last_epoch = e;
                match self.rule.closed_form(&self.c) {
                    Some(v) => v,
                    None => self.rule.get_lr(&self.c, opt)?,
                }
            }
        };
        for (g, lr) in values.into_iter().enumerate() {
            opt.set_group_lr(g, lr)?;
        }
        self.c.last_lr = group_lrs(opt);
        Ok(())
    }
}

/// Implements [`LRScheduler`] for a struct whose `s` field is a [`Sched`].
macro_rules! impl_scheduler {
    ($t:ty) => {
        impl LRScheduler for $t {
            fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
                self.s.step(opt)
            }
            fn last_lr(&self) -> Vec<f64> {
                self.s.c.last_lr.clone()
            }
            fn last_epoch(&self) -> i64 {
                self.s.c.last_epoch
            }
            fn base_lrs(&self) -> Vec<f64> {
                self.s.c.base_lrs.clone()
            }
            fn step_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
                self.s.update(opt, Some(epoch))
            }
            fn initial_step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
                self.s.initial_step(opt)
            }
            fn rewind(&mut self) {
                self.s.c.last_epoch -= 1;
            }
            fn state(&self) -> SchedulerState {
                let c = &self.s.c;
                SchedulerState {
                    last_epoch: c.last_epoch,
                    step_count: c.step_count,
                    base_lrs: c.base_lrs.clone(),
                    last_lr: c.last_lr.clone(),
                    nested: Vec::new(),
                }
            }
            fn check_state(&self, state: &SchedulerState) -> Result<()> {
                check_groups(state, self.s.c.base_lrs.len())?;
                if !state.nested.is_empty() {
                    return Err(state_mismatch(
                        "nested",
                        "no nested scheduler states".into(),
                        state.nested.len().to_string(),
                    ));
                }
                Ok(())
            }
            fn apply_state(&mut self, state: &SchedulerState) {
                let c = &mut self.s.c;
                c.last_epoch = state.last_epoch;
                c.step_count = state.step_count;
                c.base_lrs = state.base_lrs.clone();
                c.last_lr = state.last_lr.clone();
            }
        }
    };
}

fn positive(op: &str, name: &str, v: i64) -> Result<()> {
    if v <= 0 {
        return Err(Error::argument(
            op,
            name,
            "a positive integer",
            v.to_string(),
        ));
    }
    Ok(())
}

/// Multiplies every group's rate by `gamma` every `step_size` steps:
/// `lr = initial_lr · gamma^⌊epoch / step_size⌋` (PyTorch's `StepLR`).
///
/// ```
/// use tensorplay_compiler::optim::{LRScheduler, Optimizer, Sgd, StepLR};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut opt = Sgd::new(vec![Tensor::ones(&[1], DType::F32).requires_grad_(true)?], 1.0, 0.0)?;
/// let mut s = StepLR::new(&mut opt, 2, 0.5)?;
/// let mut lrs = vec![opt.lr()];
/// for _ in 0..4 {
///     s.step(&mut opt)?;
///     lrs.push(opt.lr());
/// }
/// assert_eq!(lrs, vec![1.0, 1.0, 0.5, 0.5, 0.25]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct StepLR {
    s: Sched<StepRule>,
}

#[derive(Clone, Debug)]
struct StepRule {
    step_size: i64,
    gamma: f64,
}

impl Rule for StepRule {
    fn get_lr(&mut self, c: &Counters, opt: &mut dyn Optimizer) -> Result<Vec<f64>> {
        let lrs = group_lrs(opt);
        if c.last_epoch == 0 || c.last_epoch % self.step_size != 0 {
            return Ok(lrs);
        }
        Ok(lrs.into_iter().map(|lr| lr * self.gamma).collect())
    }
    fn closed_form(&self, c: &Counters) -> Option<Vec<f64>> {
        let k = c.last_epoch.div_euclid(self.step_size) as f64;
        Some(c.base_lrs.iter().map(|b| b * self.gamma.powf(k)).collect())
    }
}

impl StepLR {
    /// Decays by `gamma` every `step_size` steps (PyTorch's default `gamma` is 0.1).
    pub fn new(opt: &mut dyn Optimizer, step_size: i64, gamma: f64) -> Result<StepLR> {
        positive("StepLR::new", "step_size", step_size)?;
        Ok(StepLR {
            s: Sched::new(opt, StepRule { step_size, gamma })?,
        })
    }
}

impl_scheduler!(StepLR);

/// Scales the rate linearly from `start_factor·initial_lr` to `end_factor·initial_lr` over
/// `total_iters` steps, then keeps it (PyTorch's `LinearLR`, a warm-up with
/// `start_factor < 1`; PyTorch's defaults are 1/3, 1.0 and 5).
///
/// ```
/// use tensorplay_compiler::optim::{LRScheduler, LinearLR, Optimizer, Sgd};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut opt = Sgd::new(vec![Tensor::ones(&[1], DType::F32).requires_grad_(true)?], 0.1, 0.0)?;
/// let mut s = LinearLR::new(&mut opt, 0.25, 1.0, 3)?;
/// assert!((opt.lr() - 0.025).abs() < 1e-12);
/// for _ in 0..3 {
///     s.step(&mut opt)?;
/// }
/// assert!((opt.lr() - 0.1).abs() < 1e-12);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LinearLR {
    s: Sched<LinearRule>,
}

#[derive(Clone, Debug)]
struct LinearRule {
    start: f64,
    end: f64,
    total: i64,
}

impl Rule for LinearRule {
    fn get_lr(&mut self, c: &Counters, opt: &mut dyn Optimizer) -> Result<Vec<f64>> {
        let lrs = group_lrs(opt);
        if c.last_epoch == 0 {
            return Ok(lrs.into_iter().map(|lr| lr * self.start).collect());
        }
        if c.initial || c.last_epoch > self.total {
            return Ok(lrs);
        }
        let d = self.end - self.start;
        let f = 1.0 + d / (self.total as f64 * self.start + (c.last_epoch - 1) as f64 * d);
        Ok(lrs.into_iter().map(|lr| lr * f).collect())
    }
    fn closed_form(&self, c: &Counters) -> Option<Vec<f64>> {
        let d = self.end - self.start;
        let k = self.total.min(c.last_epoch) as f64;
        let f = self.start + d * k / self.total as f64;
        Some(c.base_lrs.iter().map(|b| b * f).collect())
    }
}

impl LinearLR {
    /// From `start_factor` (in (0, 1]) to `end_factor` (in [0, 1]) over `total_iters` steps.
    pub fn new(
        opt: &mut dyn Optimizer,
        start_factor: f64,
        end_factor: f64,
        total_iters: i64,
    ) -> Result<LinearLR> {
        const OP: &str = "LinearLR::new";
        if !(start_factor > 0.0 && start_factor <= 1.0) {
            return Err(Error::argument(
                OP,
                "start_factor",
                "a number in (0, 1]",
                start_factor.to_string(),
            ));
        }
        if !(0.0..=1.0).contains(&end_factor) {
            return Err(Error::argument(
                OP,
                "end_factor",
                "a number in [0, 1]",
                end_factor.to_string(),
            ));
        }
        positive(OP, "total_iters", total_iters)?;
        let rule = LinearRule {
            start: start_factor,
            end: end_factor,
            total: total_iters,
        };
        Ok(LinearLR {
            s: Sched::new(opt, rule)?,
        })
    }
}

impl_scheduler!(LinearLR);

/// Cosine annealing from `initial_lr` to `eta_min` over `t_max` steps, back up over the next
/// `t_max` and so on (PyTorch's `CosineAnnealingLR`, without restarts):
/// `lr = eta_min + (initial_lr − eta_min)·(1 + cos(π·epoch / t_max))/2`. `step()` uses
/// PyTorch's chainable form (from the current rate), which gives the closed form's values when
/// nothing else changes the rate; [`CosineAnnealingLR::closed_form`] gives the closed form.
///
/// ```
/// use tensorplay_compiler::optim::{CosineAnnealingLR, LRScheduler, Optimizer, Sgd};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut opt = Sgd::new(vec![Tensor::ones(&[1], DType::F32).requires_grad_(true)?], 1.0, 0.0)?;
/// let mut s = CosineAnnealingLR::new(&mut opt, 10, 0.0)?;
/// for _ in 0..5 {
///     s.step(&mut opt)?;
/// }
/// assert!((opt.lr() - 0.5).abs() < 1e-12);
/// assert!((s.closed_form(5)[0] - 0.5).abs() < 1e-12);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CosineAnnealingLR {
    s: Sched<CosineRule>,
}

#[derive(Clone, Debug)]
struct CosineRule {
    t_max: i64,
    eta_min: f64,
}

impl CosineRule {
    fn closed(&self, base: f64, epoch: i64) -> f64 {
        self.eta_min
            + (base - self.eta_min) * (1.0 + (PI * epoch as f64 / self.t_max as f64).cos()) / 2.0
    }
}

impl Rule for CosineRule {
    fn get_lr(&mut self, c: &Counters, opt: &mut dyn Optimizer) -> Result<Vec<f64>> {
        let lrs = group_lrs(opt);
        let (e, t, eta) = (c.last_epoch, self.t_max, self.eta_min);
        if c.initial {
            return Ok(lrs);
        }
        if c.step_count == 1 && e > 0 {
            return Ok(c.base_lrs.iter().map(|&b| self.closed(b, e)).collect());
        }
        if (e - 1 - t).rem_euclid(2 * t) == 0 {
            let up = (1.0 - (PI / t as f64).cos()) / 2.0;
            return Ok(lrs
                .iter()
                .zip(&c.base_lrs)
                .map(|(lr, b)| lr + (b - eta) * up)
                .collect());
        }
        let ratio = (1.0 + (PI * e as f64 / t as f64).cos())
            / (1.0 + (PI * (e - 1) as f64 / t as f64).cos());
        Ok(lrs.into_iter().map(|lr| ratio * (lr - eta) + eta).collect())
    }
    fn closed_form(&self, c: &Counters) -> Option<Vec<f64>> {
        Some(
            c.base_lrs
                .iter()
                .map(|&b| self.closed(b, c.last_epoch))
                .collect(),
        )
    }
}

impl CosineAnnealingLR {
    /// Anneals to `eta_min` over `t_max` steps.
    pub fn new(opt: &mut dyn Optimizer, t_max: i64, eta_min: f64) -> Result<CosineAnnealingLR> {
        positive("CosineAnnealingLR::new", "t_max", t_max)?;
        Ok(CosineAnnealingLR {
            s: Sched::new(opt, CosineRule { t_max, eta_min })?,
        })
    }

    /// The closed form's rates at `epoch`, one per group.
    pub fn closed_form(&self, epoch: i64) -> Vec<f64> {
        self.s
            .c
            .base_lrs
            .iter()
            .map(|&b| self.s.rule.closed(b, epoch))
            .collect()
    }
}

impl_scheduler!(CosineAnnealingLR);

/// How [`OneCycleLR`] moves between two rates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnealStrategy {
    /// `end + (start − end)/2 · (1 + cos(π·pct))` (PyTorch's default).
    Cos,
    /// `start + (end − start)·pct`.
    Linear,
}

impl AnnealStrategy {
    fn anneal(self, start: f64, end: f64, pct: f64) -> f64 {
        match self {
            AnnealStrategy::Cos => end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0),
            AnnealStrategy::Linear => (end - start) * pct + start,
        }
    }
}

/// [`OneCycleLR`]'s options, with PyTorch's defaults (`pct_start` 0.3, cosine annealing,
/// momentum cycled between 0.85 and 0.95, `div_factor` 25, `final_div_factor` 1e4, two
/// phases).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneCycleOptions {
    /// The fraction of the steps spent raising the rate.
    pub pct_start: f64,
    /// How the rate (and momentum) move.
    pub anneal_strategy: AnnealStrategy,
    /// Cycle the momentum (Adam's `beta1`) inversely to the rate.
    pub cycle_momentum: bool,
    /// The momentum at the peak rate.
    pub base_momentum: f64,
    /// The momentum at the start and the end.
    pub max_momentum: f64,
    /// `initial_lr = max_lr / div_factor`.
    pub div_factor: f64,
    /// `min_lr = initial_lr / final_div_factor`.
    pub final_div_factor: f64,
    /// Three phases (up, back down to `initial_lr`, down to `min_lr`) instead of two.
    pub three_phase: bool,
}

impl Default for OneCycleOptions {
    fn default() -> OneCycleOptions {
        OneCycleOptions {
            pct_start: 0.3,
            anneal_strategy: AnnealStrategy::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
        }
    }
}

/// The 1cycle policy (PyTorch's `OneCycleLR`): the rate rises from `max_lr / div_factor` to
/// `max_lr` over the first `pct_start` of `total_steps`, then falls to
/// `initial_lr / final_div_factor`; the momentum (Adam's `beta1`) moves the other way. It
/// sets the groups' `initial_lr` itself; stepping past `total_steps` is an error.
///
/// ```
/// use tensorplay_compiler::optim::{LRScheduler, OneCycleLR, OneCycleOptions, Optimizer, Sgd};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut opt = Sgd::new(vec![Tensor::ones(&[1], DType::F32).requires_grad_(true)?], 0.1, 0.9)?;
/// let mut s = OneCycleLR::new(&mut opt, &[1.0], 10, OneCycleOptions::default())?;
/// assert!((opt.lr() - 0.04).abs() < 1e-12); // max_lr / 25
/// assert_eq!(opt.group_momentum(0), Some(0.95));
/// for _ in 0..2 {
///     s.step(&mut opt)?;
/// }
/// assert!((opt.lr() - 1.0).abs() < 1e-12); // the peak, at step 0.3·10 − 1
/// assert_eq!(opt.group_momentum(0), Some(0.85));
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OneCycleLR {
    s: Sched<OneCycleRule>,
}

/// One phase: where it ends and which rates and momenta it moves between (indices into
/// `[initial_lr, max_lr, min_lr]` and `[max_momentum, base_momentum]`).
#[derive(Clone, Debug)]
struct Phase {
    end_step: f64,
    lr: (usize, usize),
    momentum: (usize, usize),
}

#[derive(Clone, Debug)]
struct OneCycleRule {
    total: i64,
    o: OneCycleOptions,
    phases: Vec<Phase>,
    /// Per group: `[initial_lr, max_lr, min_lr]`.
    lrs: Vec<[f64; 3]>,
}

impl Rule for OneCycleRule {
    fn get_lr(&mut self, c: &Counters, opt: &mut dyn Optimizer) -> Result<Vec<f64>> {
        let step = c.last_epoch;
        if step > self.total {
            return Err(Error::argument(
                "OneCycleLR::step",
                "step",
                format!("at most total_steps = {}", self.total),
                step.to_string(),
            ));
        }
        let momenta = [self.o.max_momentum, self.o.base_momentum];
        let mut out = Vec::with_capacity(self.lrs.len());
        for (g, lrs) in self.lrs.iter().enumerate() {
            let mut start = 0.0;
            for (i, ph) in self.phases.iter().enumerate() {
                if step as f64 <= ph.end_step || i == self.phases.len() - 1 {
                    let pct = (step as f64 - start) / (ph.end_step - start);
                    let a = self.o.anneal_strategy;
                    out.push(a.anneal(lrs[ph.lr.0], lrs[ph.lr.1], pct));
                    if self.o.cycle_momentum {
                        let m = a.anneal(momenta[ph.momentum.0], momenta[ph.momentum.1], pct);
                        opt.set_group_momentum(g, m)?;
                    }
                    break;
                }
                start = ph.end_step;
            }
        }
        Ok(out)
    }
    fn closed_form(&self, _c: &Counters) -> Option<Vec<f64>> {
        None
    }
}

impl OneCycleLR {
    /// The 1cycle policy over `total_steps` steps peaking at `max_lr` (one value for every
    /// group, or one per group).
    pub fn new(
        opt: &mut dyn Optimizer,
        max_lr: &[f64],
        total_steps: i64,
        options: OneCycleOptions,
    ) -> Result<OneCycleLR> {
        const OP: &str = "OneCycleLR::new";
        positive(OP, "total_steps", total_steps)?;
        let o = options;
        if !(0.0..=1.0).contains(&o.pct_start) {
            return Err(Error::argument(
                OP,
                "pct_start",
                "a number in [0, 1]",
                o.pct_start.to_string(),
            ));
        }
        let n = opt.num_groups();
        if max_lr.len() != 1 && max_lr.len() != n {
            return Err(Error::argument(
                OP,
                "max_lr",
                format!("one value or one per group ({n})"),
                format!("{} values", max_lr.len()),
            ));
        }
        let total = total_steps as f64;
        let phases = if o.three_phase {
            vec![
                Phase {
                    end_step: o.pct_start * total - 1.0,
                    lr: (0, 1),
                    momentum: (0, 1),
                },
                Phase {
                    end_step: 2.0 * o.pct_start * total - 2.0,
                    lr: (1, 0),
                    momentum: (1, 0),
                },
                Phase {
                    end_step: total - 1.0,
                    lr: (0, 2),
                    momentum: (0, 0),
                },
            ]
        } else {
            vec![
                Phase {
                    end_step: o.pct_start * total - 1.0,
                    lr: (0, 1),
                    momentum: (0, 1),
                },
                Phase {
                    end_step: total - 1.0,
                    lr: (1, 2),
                    momentum: (1, 0),
                },
            ]
        };
        let mut lrs = Vec::with_capacity(n);
        for g in 0..n {
            let max = max_lr[if max_lr.len() == 1 { 0 } else { g }];
            let initial = max / o.div_factor;
            opt.set_group_initial_lr(g, initial)?;
            lrs.push([initial, max, initial / o.final_div_factor]);
            if o.cycle_momentum {
                opt.set_group_momentum(g, o.max_momentum)?;
            }
        }
        let rule = OneCycleRule {
            total: total_steps,
            o,
            phases,
            lrs,
        };
        Ok(OneCycleLR {
            s: Sched::new(opt, rule)?,
        })
    }
}

impl_scheduler!(OneCycleLR);

/// Runs schedulers one after another: `schedulers[i]` from `milestones[i-1]` on, restarted
/// from its closed form at epoch 0 when its milestone is reached (PyTorch's `SequentialLR`).
/// Build the schedulers on the optimizer first, then hand them over; the constructor undoes
/// their first steps and restores each group's `initial_lr`.
pub struct SequentialLR {
    schedulers: Vec<Box<dyn LRScheduler>>,
    milestones: Vec<i64>,
    last_epoch: i64,
    last_lr: Vec<f64>,
}

impl SequentialLR {
    /// `milestones` has one entry less than `schedulers` (at least one).
    pub fn new(
        opt: &mut dyn Optimizer,
        schedulers: Vec<Box<dyn LRScheduler>>,
        milestones: Vec<i64>,
    ) -> Result<SequentialLR> {
        const OP: &str = "SequentialLR::new";
        if schedulers.is_empty() {
            return Err(Error::argument(OP, "schedulers", "at least one", "none"));
        }
        if milestones.len() + 1 != schedulers.len() {
            return Err(Error::argument(
                OP,
                "milestones",
                format!(
                    "{} milestones (one less than the schedulers)",
                    schedulers.len() - 1
                ),
                milestones.len().to_string(),
            ));
        }
        for g in 0..opt.num_groups() {
            if let Some(lr) = opt.group_initial_lr(g) {
                opt.set_group_lr(g, lr)?;
            }
        }
        let mut s = SequentialLR {
            schedulers,
            milestones,
            last_epoch: 0,
            last_lr: Vec::new(),
        };
        s.rewind();
        let idx = s.index(0);
        s.schedulers[idx].initial_step(opt)?;
        s.last_lr = s.schedulers[idx].last_lr();
        Ok(s)
    }

    /// The scheduler running at `epoch` (Python's `bisect_right(milestones, epoch)`).
    fn index(&self, epoch: i64) -> usize {
        self.milestones.partition_point(|&m| m <= epoch)
    }
}

impl LRScheduler for SequentialLR {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.last_epoch += 1;
        let idx = self.index(self.last_epoch);
        if idx > 0 && self.milestones[idx - 1] == self.last_epoch {
            self.schedulers[idx].step_to(opt, 0)?;
        } else {
            self.schedulers[idx].step(opt)?;
        }
        self.last_lr = self.schedulers[idx].last_lr();
        Ok(())
    }
    fn last_lr(&self) -> Vec<f64> {
        self.last_lr.clone()
    }
    fn last_epoch(&self) -> i64 {
        self.last_epoch
    }
    fn base_lrs(&self) -> Vec<f64> {
        self.schedulers[0].base_lrs()
    }
    fn step_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        self.last_epoch = epoch;
        let idx = self.index(epoch);
        let start = if idx == 0 {
            0
        } else {
            self.milestones[idx - 1]
        };
        self.schedulers[idx].step_to(opt, epoch - start)?;
        self.last_lr = self.schedulers[idx].last_lr();
        Ok(())
    }
    fn initial_step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        self.last_epoch = 0;
        let idx = self.index(0);
        self.schedulers[idx].initial_step(opt)?;
        self.last_lr = self.schedulers[idx].last_lr();
        Ok(())
    }
    fn rewind(&mut self) {
        for s in &mut self.schedulers {
            s.rewind();
        }
    }
    fn state(&self) -> SchedulerState {
        SchedulerState {
            last_epoch: self.last_epoch,
            step_count: 0,
            base_lrs: self.base_lrs(),
            last_lr: self.last_lr.clone(),
            nested: self.schedulers.iter().map(|s| s.state()).collect(),
        }
    }
    fn check_state(&self, state: &SchedulerState) -> Result<()> {
        check_groups(state, self.last_lr.len())?;
        check_nested(state, &self.schedulers)
    }
    fn apply_state(&mut self, state: &SchedulerState) {
        self.last_epoch = state.last_epoch;
        self.last_lr = state.last_lr.clone();
        for (s, n) in self.schedulers.iter_mut().zip(&state.nested) {
            s.apply_state(n);
        }
    }
}

/// Steps several schedulers on the same optimizer at every step, each from the rates the one
/// before it set (PyTorch's `ChainedScheduler`): e.g. a [`LinearLR`] warm-up multiplied into a
/// [`StepLR`] decay.
///
/// ```
/// use tensorplay_compiler::optim::{ChainedScheduler, LRScheduler, LinearLR, Optimizer, Sgd, StepLR};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut opt = Sgd::new(vec![Tensor::ones(&[1], DType::F32).requires_grad_(true)?], 1.0, 0.0)?;
/// let warm = LinearLR::new(&mut opt, 0.5, 1.0, 2)?;
/// let decay = StepLR::new(&mut opt, 2, 0.1)?;
/// let mut s = ChainedScheduler::new(&opt, vec![Box::new(warm), Box::new(decay)]);
/// s.step(&mut opt)?;
/// s.step(&mut opt)?; // warm-up done (×2 in total) and one decay (×0.1)
/// assert!((opt.lr() - 0.1).abs() < 1e-12);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct ChainedScheduler {
    schedulers: Vec<Box<dyn LRScheduler>>,
    last_lr: Vec<f64>,
}

impl ChainedScheduler {
    /// Chains `schedulers`, already built on `opt` (their first steps are kept).
    pub fn new(opt: &dyn Optimizer, schedulers: Vec<Box<dyn LRScheduler>>) -> ChainedScheduler {
        ChainedScheduler {
            schedulers,
            last_lr: opt.lrs(),
        }
    }
}

impl LRScheduler for ChainedScheduler {
    fn step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        for s in &mut self.schedulers {
            s.step(opt)?;
        }
        self.last_lr = opt.lrs();
        Ok(())
    }
    fn last_lr(&self) -> Vec<f64> {
        self.last_lr.clone()
    }
    fn last_epoch(&self) -> i64 {
        self.schedulers.first().map_or(0, |s| s.last_epoch())
    }
    fn base_lrs(&self) -> Vec<f64> {
        self.schedulers
            .first()
            .map_or_else(Vec::new, |s| s.base_lrs())
    }
    fn step_to(&mut self, opt: &mut dyn Optimizer, epoch: i64) -> Result<()> {
        for s in &mut self.schedulers {
            s.step_to(opt, epoch)?;
        }
        self.last_lr = opt.lrs();
        Ok(())
    }
    fn initial_step(&mut self, opt: &mut dyn Optimizer) -> Result<()> {
        for s in &mut self.schedulers {
            s.initial_step(opt)?;
        }
        self.last_lr = opt.lrs();
        Ok(())
    }
    fn rewind(&mut self) {
        for s in &mut self.schedulers {
            s.rewind();
        }
    }
    fn state(&self) -> SchedulerState {
        SchedulerState {
            last_epoch: self.last_epoch(),
            step_count: 0,
            base_lrs: self.base_lrs(),
            last_lr: self.last_lr.clone(),
            nested: self.schedulers.iter().map(|s| s.state()).collect(),
        }
    }
    fn check_state(&self, state: &SchedulerState) -> Result<()> {
        check_nested(state, &self.schedulers)?;
        let groups = self.last_lr.len();
        if state.last_lr.len() != groups {
            return Err(state_mismatch(
                "last_lr",
                format!("{groups} values (one per parameter group)"),
                state.last_lr.len().to_string(),
            ));
        }
        Ok(())
    }
    fn apply_state(&mut self, state: &SchedulerState) {
        self.last_lr = state.last_lr.clone();
        for (s, n) in self.schedulers.iter_mut().zip(&state.nested) {
            s.apply_state(n);
        }
    }
}
