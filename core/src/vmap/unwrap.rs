//! A call's arguments unwrapped at one `vmap` level: the physical tensors of the arguments
//! batched there, and where their batch dims are — what batching rules and the per-example
//! fallback work on.

use tensorplay_ir::{Error, Result};

use super::batched;
use super::level::{Level, level_position};
use crate::tensor::Tensor;
use crate::value::Value;

/// The batch dims of one argument after unwrapping at a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgDims {
    /// Not a tensor, or a tensor not batched at this level.
    Unbatched,
    /// A tensor (or present optional tensor) with its batch dim.
    Tensor(usize),
    /// A tensor list with at least one batched member: each member's batch dim.
    List(Vec<Option<usize>>),
}

/// A call's arguments unwrapped at one level: physical tensors plus where their batch dims are.
pub(crate) struct Unwrapped {
    pub(crate) values: Vec<Value>,
    pub(crate) dims: Vec<ArgDims>,
}

impl Unwrapped {
    /// Argument `i` as a tensor with its batch dim (`None` when unbatched or absent).
    pub(crate) fn tensor(&self, i: usize) -> Option<(&Tensor, Option<usize>)> {
        let t = match self.values.get(i)? {
            Value::Tensor(t) | Value::OptionalTensor(Some(t)) => t,
            _ => return None,
        };
        let d = match self.dims[i] {
            ArgDims::Tensor(d) => Some(d),
            _ => None,
        };
        Some((t, d))
    }

    /// Argument `i` as an int, if given as one.
    pub(crate) fn int(&self, i: usize) -> Option<i64> {
        match self.values.get(i) {
            Some(Value::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// Argument `i` as an int list, if given as one.
    pub(crate) fn ints(&self, i: usize) -> Option<&[i64]> {
        match self.values.get(i) {
            Some(Value::IntList(v)) => Some(v),
            _ => None,
        }
    }
}

/// The innermost active level among the batched tensors of `args`.
pub(crate) fn current_level(op: &str, args: &[Value]) -> Result<Level> {
    let mut best: Option<(usize, Level)> = None;
    for t in args.iter().flat_map(Value::tensors) {
        if let Some(info) = t.batch_info() {
            let found = level_position(info.level).ok_or_else(|| batched::escaped(op))?;
            if best.is_none_or(|(p, _)| found.0 > p) {
                best = Some(found);
            }
        }
    }
    best.map(|(_, l)| l)
        .ok_or_else(|| Error::unsupported(op, "vmap layer reached without a batched argument"))
}

/// The physical tensor and batch dim of `t` if it is batched at `level`.
fn peel(t: &Tensor, level: u64) -> Option<(Tensor, usize)> {
    t.batch_info()
        .filter(|i| i.level == level)
        .map(|i| (i.physical.clone(), i.bdim))
}

/// Unwraps every tensor batched at `level` (tensors batched at outer levels stay as they are).
pub(crate) fn unwrap_args(args: &[Value], level: u64) -> Unwrapped {
    let mut values = Vec::with_capacity(args.len());
    let mut dims = Vec::with_capacity(args.len());
    for v in args {
        let (value, d) = match v {
            Value::Tensor(t) => match peel(t, level) {
                Some((p, b)) => (Value::Tensor(p), ArgDims::Tensor(b)),
                None => (v.clone(), ArgDims::Unbatched),
            },
            Value::OptionalTensor(Some(t)) => match peel(t, level) {
                Some((p, b)) => (Value::OptionalTensor(Some(p)), ArgDims::Tensor(b)),
                None => (v.clone(), ArgDims::Unbatched),
            },
            Value::TensorList(ts) => {
                let peeled: Vec<Option<(Tensor, usize)>> =
                    ts.iter().map(|t| peel(t, level)).collect();
                if peeled.iter().all(Option::is_none) {
                    (v.clone(), ArgDims::Unbatched)
                } else {
                    let members = ts
                        .iter()
                        .zip(&peeled)
                        .map(|(t, p)| p.as_ref().map_or_else(|| t.clone(), |(p, _)| p.clone()))
                        .collect();
                    (
                        Value::TensorList(members),
                        ArgDims::List(peeled.iter().map(|p| p.as_ref().map(|(_, b)| *b)).collect()),
                    )
                }
            }
            other => (other.clone(), ArgDims::Unbatched),
        };
        values.push(value);
        dims.push(d);
    }
    Unwrapped { values, dims }
}
