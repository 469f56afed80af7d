//! What every optimizer shares: parameter groups with their own options, per-parameter state
//! created on the parameter's first step (as PyTorch does), the update kernels per variant, and
//! the state export and import.

use std::collections::HashMap;
use std::fmt::Debug;

use tensorplay_ir::{Device, Error, Result};
use tensorplay_runtime::Tensor;

use super::fused::{Fused, Set, Update};
use super::state::{OptimizerState, ParamState};

/// One parameter group: its parameters and its own options (learning rate and the rest).
#[derive(Clone, Debug)]
pub struct ParamGroup<O> {
    /// The group's parameters (leaves that require grad).
    pub params: Vec<Tensor>,
    /// The group's hyper-parameters.
    pub options: O,
    /// The learning rate the group had when the first scheduler was attached to it (PyTorch's
    /// `initial_lr`; `OneCycleLR` sets its own); schedulers start from it.
    pub initial_lr: Option<f64>,
}

/// The options of one optimizer, as the common code sees them.
pub(crate) trait Hyper: Clone + Debug {
    fn lr(&self) -> f64;
    fn set_lr(&mut self, lr: f64);
    /// SGD's and RMSprop's `momentum`, Adam's `beta1` (what `OneCycleLR` cycles).
    fn momentum(&self) -> Option<f64>;
    fn set_momentum(&mut self, m: f64) -> bool;
    /// PyTorch's argument checks; `op` names the constructor.
    fn validate(&self, op: &str) -> Result<()>;
    /// The options as named numbers (booleans 0/1), for the state export.
    fn scalars(&self) -> Vec<(&'static str, f64)>;
    /// Sets the option `name` from the state export; false for an unknown name.
    fn set_scalar(&mut self, name: &str, v: f64) -> bool;
}

/// One optimizer's update rule.
pub(crate) trait Algorithm {
    type Options: Hyper;
    /// The optimizer's name (`"Adam"`), for error messages.
    const NAME: &'static str;
    /// The constructor's name in error messages (`"Adam::new"`).
    const OP: &'static str;
    /// Whether PyTorch keeps a `step` count in the parameter's state.
    const KEEPS_STEP: bool;
    /// Which update graph a group's options need (flags: weight decay, momentum, ...).
    fn variant(o: &Self::Options) -> u32;
    /// The state buffers the variant keeps, in the update's order.
    fn buffers(variant: u32) -> Vec<&'static str>;
    /// The update of a variant: `(param, buffers.., grad, scalars..)` to
    /// `(param, buffers..)`, and its number of scalars.
    fn update(variant: u32) -> (Update, usize);
    /// The scalar inputs of one parameter's step (`step` is its count including this step;
    /// `fresh` says its momentum buffer was created in this step).
    fn scalars(o: &Self::Options, step: u64, fresh: bool) -> Vec<f64>;
}

/// Groups, per-parameter state and kernels of an optimizer with update rule `A`.
pub(crate) struct Core<A: Algorithm> {
    pub groups: Vec<ParamGroup<A::Options>>,
    /// `state[g][i]`: parameter `i` of group `g` (`None` until its first step).
    pub state: Vec<Vec<Option<ParamState>>>,
    kernels: HashMap<u32, Fused>,
}

pub(crate) fn check_params(op: &str, params: &[Tensor]) -> Result<()> {
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

/// Checks a non-negative finite hyper-parameter, as PyTorch's `Invalid ... value` checks.
pub(crate) fn check_nonneg(op: &str, name: &str, v: f64) -> Result<()> {
    if v.is_nan() || v < 0.0 {
        return Err(Error::argument(op, name, "a number >= 0", v.to_string()));
    }
    Ok(())
}

impl<A: Algorithm> Core<A> {
    pub fn new(params: Vec<Tensor>, options: A::Options) -> Result<Core<A>> {
        let mut core = Core {
            groups: Vec::new(),
            state: Vec::new(),
            kernels: HashMap::new(),
        };
        core.add_group(params, options)?;
        Ok(core)
    }

    pub fn add_group(&mut self, params: Vec<Tensor>, options: A::Options) -> Result<()> {
        check_params(A::OP, &params)?;
        options.validate(A::OP)?;
        self.state.push(vec![None; params.len()]);
        self.groups.push(ParamGroup {
            params,
            options,
            initial_lr: None,
        });
        Ok(())
    }

    fn group(&self, group: usize) -> Result<&ParamGroup<A::Options>> {
        self.groups.get(group).ok_or_else(|| {
            Error::argument(
                A::NAME,
                "group",
                format!("a group index below {}", self.groups.len()),
                group.to_string(),
            )
        })
    }

    pub fn set_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        check_nonneg(&format!("{}::set_lr", A::NAME), "lr", lr)?;
        self.group(group)?;
        self.groups[group].options.set_lr(lr);
        Ok(())
    }

    pub fn set_initial_lr(&mut self, group: usize, lr: f64) -> Result<()> {
        check_nonneg(&format!("{}::set_initial_lr", A::NAME), "lr", lr)?;
        self.group(group)?;
        self.groups[group].initial_lr = Some(lr);
        Ok(())
    }

    pub fn set_momentum(&mut self, group: usize, m: f64) -> Result<()> {
        let op = format!("{}::set_momentum", A::NAME);
        check_nonneg(&op, "momentum", m)?;
        self.group(group)?;
        let mut o = self.groups[group].options.clone();
        if !o.set_momentum(m) {
            return Err(Error::argument(
                op,
                "momentum",
                "an optimizer with a momentum or beta1",
                A::NAME,
            ));
        }
        o.validate(&op)?;
        self.groups[group].options = o;
        Ok(())
    }

    pub fn zero_grad(&self) {
        for g in &self.groups {
            for p in &g.params {
                p.zero_grad();
            }
        }
    }

    /// One step of every parameter that has a gradient (the others are skipped: their state,
    /// step count included, does not change). `fused`: one in-place launch per variant and
    /// dtype; otherwise op by op.
    pub fn step(&mut self, fused: bool) -> Result<()> {
        let mut sets: Vec<(u32, Set)> = Vec::new();
        for (group, states) in self.groups.iter().zip(self.state.iter_mut()) {
            let o = &group.options;
            let variant = A::variant(o);
            let names = A::buffers(variant);
            for (p, st) in group.params.iter().zip(states.iter_mut()) {
                let Some(grad) = p.grad() else { continue };
                let st = st.get_or_insert_with(ParamState::default);
                let mut fresh = false;
                let mut written = vec![p.detach()];
                for name in &names {
                    written.push(match st.buffer(name) {
                        Some(b) => b.clone(),
                        None => {
                            fresh = true;
                            let b = Tensor::zeros(p.shape(), p.dtype());
                            st.buffers.push((name.to_string(), b.clone()));
                            b
                        }
                    });
                }
                st.step += 1;
                let scalars = A::scalars(o, st.step, fresh);
                sets.push((
                    variant,
                    Set {
                        written,
                        read: vec![grad],
                        scalars,
                    },
                ));
            }
        }
        let mut variants: Vec<u32> = sets.iter().map(|(v, _)| *v).collect();
        variants.sort_unstable();
        variants.dedup();
        for v in variants {
            let batch: Vec<Set> = sets
                .iter_mut()
                .filter(|(w, _)| *w == v)
                .map(|(_, s)| std::mem::replace(s, empty_set()))
                .collect();
            let k = self.kernels.entry(v).or_insert_with(|| {
                let (update, scalars) = A::update(v);
                Fused::new(update, 1 + A::buffers(v).len(), 1, scalars)
            });
            k.run(fused, &batch)?;
        }
        Ok(())
    }

    pub fn num_compiled(&self) -> usize {
        self.kernels.values().map(Fused::num_compiled).sum()
    }

    pub fn state_dict(&self) -> OptimizerState {
        let mut out = OptimizerState::default();
        let mut index = 0;
        for (g, (group, states)) in self.groups.iter().zip(&self.state).enumerate() {
            for (name, v) in group.options.scalars() {
                out.scalars.push((format!("param_groups.{g}.{name}"), v));
            }
            for st in states {
                if let Some(st) = st {
                    if A::KEEPS_STEP {
                        out.scalars
                            .push((format!("state.{index}.step"), st.step as f64));
                    }
                    for (name, t) in &st.buffers {
                        out.tensors
                            .push((format!("state.{index}.{name}"), t.clone()));
                    }
                }
                index += 1;
            }
        }
        out
    }

    /// Restores [`Core::state_dict`]'s output (see [`OptimizerState`]).
    pub fn load_state_dict(&mut self, s: &OptimizerState) -> Result<()> {
        let op = format!("{}::load_state_dict", A::NAME);
        let mut problems: Vec<String> = Vec::new();
        let mut used_scalars = vec![false; s.scalars.len()];
        let mut used_tensors = vec![false; s.tensors.len()];
        let mut scalar = |key: &str| -> Option<f64> {
            let i = s.scalars.iter().position(|(n, _)| n == key)?;
            used_scalars[i] = true;
            Some(s.scalars[i].1)
        };
        let mut options = Vec::with_capacity(self.groups.len());
        for (g, group) in self.groups.iter().enumerate() {
            let mut o = group.options.clone();
            for (name, _) in group.options.scalars() {
                let key = format!("param_groups.{g}.{name}");
                match scalar(&key) {
                    Some(v) => {
                        o.set_scalar(name, v);
                    }
                    None => problems.push(format!("missing {key}")),
                }
            }
            if let Err(e) = o.validate(&op) {
                problems.push(e.to_string());
            }
            options.push(o);
        }
        let known = A::buffers(u32::MAX);
        let mut state = Vec::with_capacity(self.groups.len());
        let mut index = 0;
        for group in &self.groups {
            let mut states = Vec::with_capacity(group.params.len());
            for p in &group.params {
                let prefix = format!("state.{index}.");
                index += 1;
                let mut st = ParamState::default();
                let mut any = false;
                if A::KEEPS_STEP
                    && let Some(v) = scalar(&format!("{prefix}step"))
                {
                    if v.fract() != 0.0 || v < 0.0 {
                        problems.push(format!("{prefix}step is {v}, not a step count"));
                    }
                    st.step = v as u64;
                    any = true;
                }
                for (k, (name, t)) in s.tensors.iter().enumerate() {
                    let Some(buffer) = name.strip_prefix(&prefix) else {
                        continue;
                    };
                    if !known.contains(&buffer) {
                        continue;
                    }
                    used_tensors[k] = true;
                    if t.shape() != p.shape() || t.dtype() != p.dtype() {
                        problems.push(format!(
                            "{name} is {:?} {}, the parameter {:?} {}",
                            t.shape(),
                            t.dtype(),
                            p.shape(),
                            p.dtype()
                        ));
                        continue;
                    }
                    let copy = Tensor::zeros(p.shape(), p.dtype());
                    copy.copy_(&t.detach())?;
                    st.buffers.push((buffer.to_string(), copy));
                    any = true;
                }
                states.push(any.then_some(st));
            }
            state.push(states);
        }
        for (k, (name, _)) in s.scalars.iter().enumerate() {
            if !used_scalars[k] {
                problems.push(format!("unexpected {name}"));
            }
        }
        for (k, (name, _)) in s.tensors.iter().enumerate() {
            if !used_tensors[k] {
                problems.push(format!("unexpected {name}"));
            }
        }
        if !problems.is_empty() {
            return Err(Error::argument(
                op,
                "state",
                format!("the state of this {} (same groups and shapes)", A::NAME),
                problems.join("; "),
            ));
        }
        for (g, o) in options.into_iter().enumerate() {
            self.groups[g].options = o;
        }
        self.state = state;
        Ok(())
    }
}

fn empty_set() -> Set {
    Set {
        written: Vec::new(),
        read: Vec::new(),
        scalars: Vec::new(),
    }
}
