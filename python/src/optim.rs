//! `tensorplay.optim`'s native half: the Rust optimizers (`Sgd`, `Adam`, `AdamW`, fused
//! in-place updates) and learning-rate schedulers behind one class each. The Python classes in
//! `tensorplay/optim/` keep PyTorch's `param_groups` dictionaries and push their numbers in
//! here before every step (and read the scheduler's rates back after one).

use std::collections::HashMap;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tensorplay::Tensor;
use tensorplay::optim::{
    Adam, AdamOptions, AdamW, AnnealStrategy, ChainedScheduler, CosineAnnealingLR, LRScheduler,
    LinearLR, OneCycleLR, OneCycleOptions, Optimizer, OptimizerState, SchedulerState, SequentialLR,
    Sgd, SgdOptions, StepLR,
};

use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// A group's hyper-parameters by PyTorch's names (booleans as 0/1, Adam's `betas` as
/// `betas.0`/`betas.1`).
type Options = HashMap<String, f64>;

/// An optimizer state in flat names: `(tensors, numbers)`.
type FlatState = (Vec<(String, Py<PyTensor>)>, Vec<(String, f64)>);

/// One scheduler state of a pre-order walk: `(last_epoch, step_count, base_lrs, last_lr,
/// number of nested states that follow)`; the Python side builds PyTorch's nested dicts.
type StateNode = (i64, u64, Vec<f64>, Vec<f64>, usize);

fn flatten_state(s: &SchedulerState, out: &mut Vec<StateNode>) {
    out.push((
        s.last_epoch,
        s.step_count,
        s.base_lrs.clone(),
        s.last_lr.clone(),
        s.nested.len(),
    ));
    for n in &s.nested {
        flatten_state(n, out);
    }
}

/// Rebuilds the state tree from [`flatten_state`]'s walk, starting at `nodes[*at]`.
fn unflatten_state(nodes: &[StateNode], at: &mut usize, depth: usize) -> PyResult<SchedulerState> {
    let bad = |why: &str| PyValueError::new_err(format!("lr_scheduler.load_state_dict: {why}"));
    if depth > 64 {
        return Err(bad("scheduler states nest deeper than 64 levels"));
    }
    let (last_epoch, step_count, base_lrs, last_lr, n) = nodes
        .get(*at)
        .cloned()
        .ok_or_else(|| bad("the state list ends before its nested states do"))?;
    *at += 1;
    let nested = (0..n)
        .map(|_| unflatten_state(nodes, at, depth + 1))
        .collect::<PyResult<_>>()?;
    Ok(SchedulerState {
        last_epoch,
        step_count,
        base_lrs,
        last_lr,
        nested,
    })
}

fn opt_value(o: &Options, name: &str, default: f64) -> f64 {
    o.get(name).copied().unwrap_or(default)
}

fn sgd_options(o: &Options) -> SgdOptions {
    let d = SgdOptions::default();
    SgdOptions {
        lr: opt_value(o, "lr", d.lr),
        momentum: opt_value(o, "momentum", d.momentum),
        dampening: opt_value(o, "dampening", d.dampening),
        weight_decay: opt_value(o, "weight_decay", d.weight_decay),
        nesterov: opt_value(o, "nesterov", 0.0) != 0.0,
    }
}

fn adam_options(o: &Options, adamw: bool) -> AdamOptions {
    let d = if adamw {
        AdamOptions::adamw()
    } else {
        AdamOptions::default()
    };
    AdamOptions {
        lr: opt_value(o, "lr", d.lr),
        betas: (
            opt_value(o, "betas.0", d.betas.0),
            opt_value(o, "betas.1", d.betas.1),
        ),
        eps: opt_value(o, "eps", d.eps),
        weight_decay: opt_value(o, "weight_decay", d.weight_decay),
        amsgrad: opt_value(o, "amsgrad", 0.0) != 0.0,
    }
}

fn tensors(params: &[PyRef<'_, PyTensor>]) -> Vec<Tensor> {
    params.iter().map(|p| p.t.clone()).collect()
}

/// One of the Rust optimizers.
enum Kind {
    Sgd(Sgd),
    Adam(Adam),
    AdamW(AdamW),
}

impl Kind {
    fn dyn_mut(&mut self) -> &mut dyn Optimizer {
        match self {
            Kind::Sgd(o) => o,
            Kind::Adam(o) => o,
            Kind::AdamW(o) => o,
        }
    }
    fn dyn_ref(&self) -> &dyn Optimizer {
        match self {
            Kind::Sgd(o) => o,
            Kind::Adam(o) => o,
            Kind::AdamW(o) => o,
        }
    }
}

/// A Rust optimizer over the parameters of its groups (`_C._Optimizer(kind, params, options)`,
/// `kind` one of `"SGD"`, `"Adam"`, `"AdamW"`).
#[pyclass(name = "_Optimizer", module = "tensorplay._C", unsendable)]
pub struct PyOptimizer {
    kind: Kind,
}

#[pymethods]
impl PyOptimizer {
    #[new]
    fn new(kind: &str, params: Vec<PyRef<'_, PyTensor>>, options: Options) -> PyResult<Self> {
        let p = tensors(&params);
        let kind = match kind {
            "SGD" => Kind::Sgd(Sgd::with_options(p, sgd_options(&options)).py_err()?),
            "Adam" => Kind::Adam(Adam::with_options(p, adam_options(&options, false)).py_err()?),
            "AdamW" => Kind::AdamW(AdamW::with_options(p, adam_options(&options, true)).py_err()?),
            other => {
                return Err(PyValueError::new_err(format!(
                    "_Optimizer: kind must be SGD, Adam or AdamW, got {other:?}"
                )));
            }
        };
        Ok(PyOptimizer { kind })
    }

    /// Adds a group (PyTorch's `add_param_group`).
    fn add_param_group(
        &mut self,
        params: Vec<PyRef<'_, PyTensor>>,
        options: Options,
    ) -> PyResult<()> {
        let p = tensors(&params);
        match &mut self.kind {
            Kind::Sgd(o) => o.add_param_group(p, sgd_options(&options)),
            Kind::Adam(o) => o.add_param_group(p, adam_options(&options, false)),
            Kind::AdamW(o) => o.add_param_group(p, adam_options(&options, true)),
        }
        .py_err()
    }

    /// Replaces group `group`'s options (validated as the constructor does; on an error the
    /// group keeps its old options). The learning rate is set directly; any other changed
    /// option goes through the state export and import, so that every option the Rust side
    /// knows is set by name (rare: a schedule changes only the rate and momentum).
    fn set_group_options(&mut self, group: usize, options: Options) -> PyResult<()> {
        // The constructor's checks first, for their message (on an empty parameter list).
        let checked = match &self.kind {
            Kind::Sgd(_) => Sgd::with_options(Vec::new(), sgd_options(&options)).map(drop),
            Kind::Adam(_) => {
                Adam::with_options(Vec::new(), adam_options(&options, false)).map(drop)
            }
            Kind::AdamW(_) => {
                AdamW::with_options(Vec::new(), adam_options(&options, true)).map(drop)
            }
        };
        checked.map_err(|e| PyValueError::new_err(e.to_string()))?;
        let opt = self.kind.dyn_mut();
        if group >= opt.num_groups() {
            return Err(PyValueError::new_err(format!(
                "set_group_options: group {group} out of range ({} groups)",
                opt.num_groups()
            )));
        }
        if let Some(&lr) = options.get("lr")
            && opt.group_lr(group) != Some(lr)
        {
            opt.set_group_lr(group, lr).py_err()?;
        }
        let mut state = opt.state_dict();
        let prefix = format!("param_groups.{group}.");
        let mut changed = false;
        for (name, v) in state.scalars.iter_mut() {
            if let Some(key) = name.strip_prefix(&prefix)
                && let Some(&new) = options.get(key)
                && new.to_bits() != v.to_bits()
            {
                *v = new;
                changed = true;
            }
        }
        if changed {
            opt.load_state_dict(&state)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        Ok(())
    }

    /// One step. `negate[g]`: group `g` maximizes — its gradients are negated (exactly) for the
    /// update and restored afterwards. Runs with the GIL released.
    fn step(&mut self, py: Python<'_>, negate: Vec<bool>) -> PyResult<()> {
        let flipped: Vec<Tensor> = {
            let opt = self.kind.dyn_ref();
            (0..opt.num_groups())
                .filter(|&g| negate.get(g).copied().unwrap_or(false))
                .flat_map(|g| opt.group_params(g).unwrap_or(&[]).to_vec())
                .filter_map(|p| p.grad())
                .collect()
        };
        let kind = &mut self.kind;
        py.detach(move || {
            let flip = |gs: &[Tensor]| -> tensorplay::Result<()> {
                for g in gs {
                    g.copy_(&g.mul_scalar(-1.0)?)?;
                }
                Ok(())
            };
            flip(&flipped)?;
            let r = kind.dyn_mut().step();
            flip(&flipped)?;
            r
        })
        .py_err()
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&self) {
        self.kind.dyn_ref().zero_grad();
    }

    /// Every group's learning rate.
    fn lrs(&self) -> Vec<f64> {
        self.kind.dyn_ref().lrs()
    }

    /// Every group's momentum (Adam's `beta1`).
    fn momenta(&self) -> Vec<Option<f64>> {
        let o = self.kind.dyn_ref();
        (0..o.num_groups()).map(|g| o.group_momentum(g)).collect()
    }

    /// Every group's `initial_lr` (set by the first scheduler).
    fn initial_lrs(&self) -> Vec<Option<f64>> {
        let o = self.kind.dyn_ref();
        (0..o.num_groups()).map(|g| o.group_initial_lr(g)).collect()
    }

    /// Sets group `group`'s `initial_lr`.
    fn set_group_initial_lr(&mut self, group: usize, lr: f64) -> PyResult<()> {
        self.kind.dyn_mut().set_group_initial_lr(group, lr).py_err()
    }

    /// The state as `(tensors, scalars)`: flat names (`state.3.exp_avg`,
    /// `param_groups.0.lr`) to tensors and numbers.
    fn state_dict(&self, py: Python<'_>) -> PyResult<FlatState> {
        let s = self.kind.dyn_ref().state_dict();
        let ts = s
            .tensors
            .into_iter()
            .map(|(n, t)| Ok((n, PyTensor::wrap(py, t)?)))
            .collect::<PyResult<_>>()?;
        Ok((ts, s.scalars))
    }

    /// Restores [`PyOptimizer::state_dict`]'s output (copying the tensors); a mismatch leaves
    /// the optimizer unchanged.
    fn load_state_dict(
        &mut self,
        tensors: Vec<(String, PyRef<'_, PyTensor>)>,
        scalars: Vec<(String, f64)>,
    ) -> PyResult<()> {
        let state = OptimizerState {
            tensors: tensors.into_iter().map(|(n, t)| (n, t.t.clone())).collect(),
            scalars,
        };
        // A state that does not fit is a bad value (PyTorch: `ValueError`).
        self.kind
            .dyn_mut()
            .load_state_dict(&state)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The compiled update kernels.
    #[getter]
    fn num_compiled(&self) -> usize {
        match &self.kind {
            Kind::Sgd(o) => o.num_compiled(),
            Kind::Adam(o) => o.num_compiled(),
            Kind::AdamW(o) => o.num_compiled(),
        }
    }
}

fn anneal(name: &str) -> PyResult<AnnealStrategy> {
    match name {
        "cos" => Ok(AnnealStrategy::Cos),
        "linear" => Ok(AnnealStrategy::Linear),
        other => Err(PyValueError::new_err(format!(
            "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {other:?}"
        ))),
    }
}

/// A Rust learning-rate scheduler (`_C._Scheduler.<kind>(optimizer, ...)`). Building one takes
/// its first step on the optimizer, as in PyTorch. `SequentialLR` and `ChainedScheduler` take
/// the schedulers they run (which can then no longer be stepped on their own).
#[pyclass(name = "_Scheduler", module = "tensorplay._C", unsendable)]
pub struct PyScheduler {
    s: Option<Box<dyn LRScheduler>>,
}

impl PyScheduler {
    fn get(&mut self) -> PyResult<&mut Box<dyn LRScheduler>> {
        self.s.as_mut().ok_or_else(|| {
            PyRuntimeError::new_err(
                "lr_scheduler: this scheduler was handed to a SequentialLR or ChainedScheduler \
                 and is stepped by it",
            )
        })
    }
    fn wrap(s: impl LRScheduler + 'static) -> PyScheduler {
        PyScheduler {
            s: Some(Box::new(s)),
        }
    }
    fn take_all(schedulers: &[Bound<'_, PyScheduler>]) -> PyResult<Vec<Box<dyn LRScheduler>>> {
        let mut out = Vec::with_capacity(schedulers.len());
        for s in schedulers {
            out.push(s.borrow_mut().s.take().ok_or_else(|| {
                PyValueError::new_err("lr_scheduler: a scheduler can be handed over only once")
            })?);
        }
        Ok(out)
    }
}

#[pymethods]
impl PyScheduler {
    #[staticmethod]
    fn step_lr(opt: &mut PyOptimizer, step_size: i64, gamma: f64) -> PyResult<PyScheduler> {
        Ok(Self::wrap(
            StepLR::new(opt.kind.dyn_mut(), step_size, gamma).py_err()?,
        ))
    }

    #[staticmethod]
    fn linear_lr(
        opt: &mut PyOptimizer,
        start_factor: f64,
        end_factor: f64,
        total_iters: i64,
    ) -> PyResult<PyScheduler> {
        let s = LinearLR::new(opt.kind.dyn_mut(), start_factor, end_factor, total_iters);
        Ok(Self::wrap(s.py_err()?))
    }

    #[staticmethod]
    fn cosine_annealing_lr(
        opt: &mut PyOptimizer,
        t_max: i64,
        eta_min: f64,
    ) -> PyResult<PyScheduler> {
        let s = CosineAnnealingLR::new(opt.kind.dyn_mut(), t_max, eta_min);
        Ok(Self::wrap(s.py_err()?))
    }

    #[staticmethod]
    #[allow(clippy::too_many_arguments)]
    fn one_cycle_lr(
        opt: &mut PyOptimizer,
        max_lr: Vec<f64>,
        total_steps: i64,
        pct_start: f64,
        anneal_strategy: &str,
        cycle_momentum: bool,
        base_momentum: f64,
        max_momentum: f64,
        div_factor: f64,
        final_div_factor: f64,
        three_phase: bool,
    ) -> PyResult<PyScheduler> {
        let o = OneCycleOptions {
            pct_start,
            anneal_strategy: anneal(anneal_strategy)?,
            cycle_momentum,
            base_momentum,
            max_momentum,
            div_factor,
            final_div_factor,
            three_phase,
        };
        let s = OneCycleLR::new(opt.kind.dyn_mut(), &max_lr, total_steps, o);
        Ok(Self::wrap(s.py_err()?))
    }

    #[staticmethod]
    fn sequential_lr(
        opt: &mut PyOptimizer,
        schedulers: Vec<Bound<'_, PyScheduler>>,
        milestones: Vec<i64>,
    ) -> PyResult<PyScheduler> {
        if milestones.len() + 1 != schedulers.len() {
            // Checked before the schedulers are taken, so a bad call leaves them usable.
            return Err(PyValueError::new_err(format!(
                "SequentialLR: expected {} milestones (one less than the schedulers), got {}",
                schedulers.len().saturating_sub(1),
                milestones.len()
            )));
        }
        let all = Self::take_all(&schedulers)?;
        let s = SequentialLR::new(opt.kind.dyn_mut(), all, milestones);
        Ok(Self::wrap(s.py_err()?))
    }

    #[staticmethod]
    fn chained(
        opt: &PyOptimizer,
        schedulers: Vec<Bound<'_, PyScheduler>>,
    ) -> PyResult<PyScheduler> {
        let all = Self::take_all(&schedulers)?;
        Ok(Self::wrap(ChainedScheduler::new(opt.kind.dyn_ref(), all)))
    }

    /// One step: sets the optimizer's learning rates.
    fn step(&mut self, opt: &mut PyOptimizer) -> PyResult<()> {
        self.get()?.step(opt.kind.dyn_mut()).py_err()
    }

    /// Jumps to `epoch` (the closed form where there is one).
    fn step_to(&mut self, opt: &mut PyOptimizer, epoch: i64) -> PyResult<()> {
        self.get()?.step_to(opt.kind.dyn_mut(), epoch).py_err()
    }

    /// The rates the last step set.
    fn last_lr(&mut self) -> PyResult<Vec<f64>> {
        Ok(self.get()?.last_lr())
    }

    /// The step count.
    fn last_epoch(&mut self) -> PyResult<i64> {
        Ok(self.get()?.last_epoch())
    }

    /// Each group's `initial_lr` when the scheduler was built.
    fn base_lrs(&mut self) -> PyResult<Vec<f64>> {
        Ok(self.get()?.base_lrs())
    }

    /// The progress as a pre-order list of [`StateNode`]s (this scheduler first).
    fn state(&mut self) -> PyResult<Vec<StateNode>> {
        let mut out = Vec::new();
        flatten_state(&self.get()?.state(), &mut out);
        Ok(out)
    }

    /// Restores [`PyScheduler::state`]'s output; a state that does not fit (other group or
    /// nested-scheduler counts) is a `ValueError` and changes nothing.
    fn load_state(&mut self, nodes: Vec<StateNode>) -> PyResult<()> {
        let mut at = 0;
        let state = unflatten_state(&nodes, &mut at, 0)?;
        if at != nodes.len() {
            return Err(PyValueError::new_err(format!(
                "lr_scheduler.load_state_dict: {} scheduler states left over after the tree",
                nodes.len() - at
            )));
        }
        self.get()?
            .load_state(&state)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }
}
