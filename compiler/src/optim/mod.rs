//! Optimizers, learning-rate schedulers and gradient clipping with PyTorch's formulas, fused:
//! every step updates all parameters and their state in place with one launch of a compiled
//! pointwise kernel.
//!
//! - [`Sgd`] (momentum, dampening, Nesterov, weight decay), [`Adam`] (weight decay, AMSGrad),
//!   [`AdamW`] (decoupled weight decay) and [`RMSprop`] (centered, momentum, weight decay),
//!   each with an options struct holding PyTorch's defaults ([`SgdOptions`], [`AdamOptions`],
//!   [`RMSpropOptions`]) and parameter groups with their own options (`add_param_group`);
//! - per-parameter state as PyTorch keeps it ([`ParamState`]: Adam's and RMSprop's step count
//!   is per parameter; a parameter whose `.grad` is `None` is skipped and its count does not
//!   advance), exported and restored as named tensors and numbers ([`OptimizerState`]);
//! - the [`Optimizer`] trait (step, zero_grad, groups, learning rates) that the schedulers in
//!   [`lr_scheduler`] drive: [`StepLR`], [`CosineAnnealingLR`], [`LinearLR`], [`OneCycleLR`],
//!   [`SequentialLR`] and [`ChainedScheduler`];
//! - [`clip_grad_norm_`] and [`clip_grad_value_`].
//!
//! **Fused and eager.** Each optimizer's update is a pointwise function of the parameter, its
//! state buffers, its gradient and a few 0-d scalar inputs (learning rate, bias corrections,
//! hyper-parameters — inputs, not constants, so a schedule never recompiles). It is captured
//! once per dtype as a graph over flat 1-D operands with a dynamic length — one fused region —
//! and that region's kernel is launched **once per step for the whole parameter list**
//! (`CompiledKernel::launch_group`: the elements of all parameters are split across the
//! thread pool together) and **in place** (the kernel reads an element's parameter, gradient
//! and state before it writes the new parameter and state over the same memory; no scratch
//! buffer, no copy). Groups whose options need different operations (weight decay on or off,
//! AMSGrad, Nesterov, ...) get a kernel each. Parameters or state that are not contiguous are
//! updated op by op; parameters sharing memory (the same tensor listed twice, tied weights) go
//! to separate, consecutive launches. `step_eager()` runs the same operations op by op through
//! the dispatcher (the reference); both follow PyTorch's single-tensor implementation operation
//! by operation, in f32 for f32 parameters, and `tests/optim_parity.rs` replays trajectories
//! recorded from PyTorch with both.
//!
//! ```
//! use tensorplay_compiler::optim::{Optimizer, Sgd};
//! use tensorplay_runtime::{DType, Tensor};
//! let w = Tensor::ones(&[4], DType::F32).requires_grad_(true)?;
//! w.mul_scalar(3.0)?.sum_all()?.backward()?; // grad = 3
//! let mut opt = Sgd::new(vec![w.clone()], 0.1, 0.9)?;
//! opt.step()?;
//! assert_eq!(w.detach().to_vec::<f32>()?, vec![0.7; 4]);
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

use tensorplay_ir::Result;
use tensorplay_runtime::Tensor;

mod adam;
mod clip;
mod fused;
mod groups;
pub mod lr_scheduler;
mod rmsprop;
mod sgd;
mod state;

pub use adam::{Adam, AdamOptions, AdamW};
pub use clip::{clip_grad_norm_, clip_grad_norm_eager, clip_grad_value_};
pub use groups::ParamGroup;
pub use lr_scheduler::{
    AnnealStrategy, ChainedScheduler, CosineAnnealingLR, LRScheduler, LinearLR, OneCycleLR,
    OneCycleOptions, SchedulerState, SequentialLR, StepLR,
};
pub use rmsprop::{RMSprop, RMSpropOptions};
pub use sgd::{Sgd, SgdOptions};
pub use state::{OptimizerState, ParamState};

/// What every optimizer does, and what the [schedulers](lr_scheduler) drive. Groups are
/// numbered in the order they were added (group 0 comes from the constructor).
///
/// ```
/// use tensorplay_compiler::optim::{Adam, AdamOptions, Optimizer};
/// use tensorplay_runtime::{DType, Tensor};
/// let (w, b) = (Tensor::ones(&[3, 2], DType::F32), Tensor::zeros(&[2], DType::F32));
/// let (w, b) = (w.requires_grad_(true)?, b.requires_grad_(true)?);
/// let mut opt = Adam::new(vec![w.clone()], 1e-3, (0.9, 0.999), 1e-8)?;
/// // Biases in their own group, with their own learning rate and no weight decay.
/// opt.add_param_group(vec![b.clone()], AdamOptions { lr: 1e-2, ..Default::default() })?;
/// assert_eq!(opt.lrs(), vec![1e-3, 1e-2]);
/// opt.set_group_lr(1, 5e-3)?;
/// opt.set_lr(1e-4)?; // every group
/// assert_eq!(opt.lrs(), vec![1e-4, 1e-4]);
/// assert!(opt.set_group_lr(2, 1.0).is_err()); // no group 2
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub trait Optimizer {
    /// Updates every parameter that has a gradient, in place, with one launch of the fused
    /// kernel per kind of update (and dtype). Parameters whose `.grad` is `None` are skipped.
    fn step(&mut self) -> Result<()>;
    /// The same update op by op through the dispatcher (the reference for
    /// [`Optimizer::step`]).
    fn step_eager(&mut self) -> Result<()>;
    /// Clears every parameter's gradient (sets it to `None`).
    fn zero_grad(&self);
    /// The number of parameter groups.
    fn num_groups(&self) -> usize;
    /// Group `group`'s parameters.
    fn group_params(&self, group: usize) -> Option<&[Tensor]>;
    /// Group `group`'s learning rate.
    fn group_lr(&self, group: usize) -> Option<f64>;
    /// Sets group `group`'s learning rate (an error for a missing group or a negative rate).
    fn set_group_lr(&mut self, group: usize, lr: f64) -> Result<()>;
    /// Group `group`'s `initial_lr` (set by the first scheduler attached; see
    /// [`ParamGroup::initial_lr`]).
    fn group_initial_lr(&self, group: usize) -> Option<f64>;
    /// Sets group `group`'s `initial_lr`.
    fn set_group_initial_lr(&mut self, group: usize, lr: f64) -> Result<()>;
    /// Group `group`'s momentum (Adam's and AdamW's `beta1`), what [`OneCycleLR`] cycles.
    fn group_momentum(&self, group: usize) -> Option<f64>;
    /// Sets group `group`'s momentum (Adam's `beta1`).
    fn set_group_momentum(&mut self, group: usize, momentum: f64) -> Result<()>;
    /// The state as named tensors and numbers ([`OptimizerState`]).
    fn state_dict(&self) -> OptimizerState;
    /// Restores a state from [`Optimizer::state_dict`] of an optimizer of the same kind over
    /// parameters of the same shapes (copying its tensors); mismatches are an error listing
    /// them, and leave this optimizer unchanged.
    fn load_state_dict(&mut self, state: &OptimizerState) -> Result<()>;

    /// Every group's learning rate, in group order.
    fn lrs(&self) -> Vec<f64> {
        (0..self.num_groups())
            .filter_map(|g| self.group_lr(g))
            .collect()
    }
    /// Group 0's learning rate.
    fn lr(&self) -> f64 {
        self.group_lr(0).unwrap_or(f64::NAN)
    }
    /// Sets every group's learning rate.
    fn set_lr(&mut self, lr: f64) -> Result<()> {
        for g in 0..self.num_groups() {
            self.set_group_lr(g, lr)?;
        }
        Ok(())
    }
}

/// Implements [`Optimizer`] (and `num_compiled`) for a struct whose `core` field is a
/// `groups::Core`.
macro_rules! impl_optimizer {
    ($t:ty) => {
        impl $crate::optim::Optimizer for $t {
            fn step(&mut self) -> tensorplay_ir::Result<()> {
                self.core.step(true)
            }
            fn step_eager(&mut self) -> tensorplay_ir::Result<()> {
                self.core.step(false)
            }
            fn zero_grad(&self) {
                self.core.zero_grad()
            }
            fn num_groups(&self) -> usize {
                self.core.groups.len()
            }
            fn group_params(&self, group: usize) -> Option<&[Tensor]> {
                self.core.groups.get(group).map(|g| g.params.as_slice())
            }
            fn group_lr(&self, group: usize) -> Option<f64> {
                use $crate::optim::groups::Hyper;
                self.core.groups.get(group).map(|g| g.options.lr())
            }
            fn set_group_lr(&mut self, group: usize, lr: f64) -> tensorplay_ir::Result<()> {
                self.core.set_lr(group, lr)
            }
            fn group_initial_lr(&self, group: usize) -> Option<f64> {
                self.core.groups.get(group).and_then(|g| g.initial_lr)
            }
            fn set_group_initial_lr(&mut self, group: usize, lr: f64) -> tensorplay_ir::Result<()> {
                self.core.set_initial_lr(group, lr)
            }
            fn group_momentum(&self, group: usize) -> Option<f64> {
                use $crate::optim::groups::Hyper;
                self.core
                    .groups
                    .get(group)
                    .and_then(|g| g.options.momentum())
            }
            fn set_group_momentum(&mut self, group: usize, m: f64) -> tensorplay_ir::Result<()> {
                self.core.set_momentum(group, m)
            }
            fn state_dict(&self) -> $crate::optim::OptimizerState {
                self.core.state_dict()
            }
            fn load_state_dict(
                &mut self,
                state: &$crate::optim::OptimizerState,
            ) -> tensorplay_ir::Result<()> {
                self.core.load_state_dict(state)
            }
        }

        impl $t {
            /// Updates every parameter that has a gradient with the fused kernel (as
            /// [`Optimizer::step`](crate::optim::Optimizer::step); callable without the trait
            /// in scope).
            pub fn step(&mut self) -> tensorplay_ir::Result<()> {
                self.core.step(true)
            }
            /// The same update op by op (as
            /// [`Optimizer::step_eager`](crate::optim::Optimizer::step_eager)).
            pub fn step_eager(&mut self) -> tensorplay_ir::Result<()> {
                self.core.step(false)
            }
            /// Clears every parameter's gradient.
            pub fn zero_grad(&self) {
                self.core.zero_grad()
            }
            /// The compiled update kernels (one per kind of update, dtype and loop layout:
            /// parameters of two or more elements share one, one-element parameters have
            /// their own).
            pub fn num_compiled(&self) -> usize {
                self.core.num_compiled()
            }
            /// Parameter `index`'s state (numbered across the groups, as in
            /// [`OptimizerState`](crate::optim::OptimizerState)); `None` before its first step.
            pub fn param_state(&self, index: usize) -> Option<&$crate::optim::ParamState> {
                self.core.state.iter().flatten().nth(index)?.as_ref()
            }
        }
    };
}
pub(crate) use impl_optimizer;
