//! Per-parameter optimizer state, and the state of a whole optimizer as named tensors and
//! named scalars (what a checkpoint saves, e.g. to safetensors).

use tensorplay_runtime::Tensor;

/// The state of one parameter, as PyTorch keeps it: its own step count (a parameter without a
/// gradient in a step is skipped and its count does not advance) and its named buffers
/// (`momentum_buffer`; `exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`; `square_avg`, `grad_avg`).
#[derive(Clone, Debug, Default)]
pub struct ParamState {
    /// The steps this parameter took.
    pub step: u64,
    /// The buffers by PyTorch's names, each shaped like the parameter.
    pub buffers: Vec<(String, Tensor)>,
}

impl ParamState {
    /// The buffer named `name`.
    pub fn buffer(&self, name: &str) -> Option<&Tensor> {
        self.buffers.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// An optimizer's state as named tensors and named numbers, with PyTorch's numbering:
/// parameters are numbered across the groups in order (`0..`), and
///
/// - `tensors` holds `state.{i}.{buffer}` for every parameter `i` that has taken a step
///   (`state.3.exp_avg`);
/// - `scalars` holds `state.{i}.step` (optimizers that count steps: Adam, AdamW, RMSprop) and
///   every group's options as `param_groups.{g}.{option}` (`param_groups.0.lr`,
///   `param_groups.0.betas.0`; booleans are 0 or 1).
///
/// Like PyTorch's `state_dict()`, the export holds the optimizer's live buffers (no copy): save
/// it (or copy the tensors) before the next step changes them.
/// [`Optimizer::load_state_dict`](super::Optimizer::load_state_dict) restores it into an
/// optimizer built over the same parameter shapes: it copies the tensors (the optimizer never
/// shares memory with the state it loaded) and refuses unknown names, missing options and
/// shape or dtype mismatches with an error listing them.
///
/// ```
/// use tensorplay_compiler::optim::{Adam, Optimizer};
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::ones(&[3], DType::F32).requires_grad_(true)?;
/// w.sum_all()?.backward()?;
/// let mut opt = Adam::new(vec![w.clone()], 0.1, (0.9, 0.999), 1e-8)?;
/// opt.step()?;
/// let s = opt.state_dict();
/// assert_eq!(s.scalar("state.0.step"), Some(1.0));
/// assert_eq!(s.tensor("state.0.exp_avg").unwrap().shape(), &[3]);
/// assert_eq!(s.scalar("param_groups.0.lr"), Some(0.1));
/// let mut again = Adam::new(vec![w.clone()], 0.5, (0.9, 0.999), 1e-8)?;
/// again.load_state_dict(&s)?;
/// assert_eq!(again.lr(), 0.1);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// Per-parameter buffers, `state.{i}.{buffer}`.
    pub tensors: Vec<(String, Tensor)>,
    /// Step counts `state.{i}.step` and group options `param_groups.{g}.{option}`.
    pub scalars: Vec<(String, f64)>,
}

impl OptimizerState {
    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The number named `name`.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}
