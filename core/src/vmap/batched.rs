//! Wrapping and moving batch dims: batched tensors (a [`Tensor`] that shows one example's shape
//! and carries the physical tensor with its batch dim, `Tensor::batched`) linked into autograd,
//! and the batch-dim moves batching rules need.

use tensorplay_ir::{Error, Result};

use crate::autograd::node::{BackwardFn, record};
use crate::tensor::Tensor;

/// Refuses to run: a batched tensor's gradient only exists once `vmap` has returned.
struct BackwardInsideVmap;

impl BackwardFn for BackwardInsideVmap {
    fn apply(&self, _grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        Err(Error::unsupported(
            "backward",
            "cannot compute gradients of a batched tensor inside vmap; return it from the \
             vmapped function and call backward on the (physical) result outside vmap",
        ))
    }
}

/// A batched tensor over `physical` (see `Tensor::batched`); when the physical tensor is part of a backward graph the batched tensor gets a
/// grad_fn too (named after the physical's), so `requires_grad()` answers as for one example and
/// `backward` on it reports that it cannot run inside vmap.
pub(crate) fn wrap(physical: Tensor, bdim: usize, level: u64) -> Tensor {
    if !physical.requires_grad() || !physical.dtype().is_float() {
        return Tensor::batched(physical, bdim, level);
    }
    let name = physical.grad_fn_name().unwrap_or("vmap").to_string();
    let out = Tensor::batched(physical.clone(), bdim, level);
    record(
        &name,
        Box::new(BackwardInsideVmap),
        &[&physical],
        &[],
        vec![out],
    )
    .remove(0)
}

/// The error for a batched tensor whose `vmap` already returned (or runs on another thread).
pub(crate) fn escaped(op: &str) -> Error {
    Error::unsupported(
        op,
        "got a batched tensor whose vmap is not active (it escaped its vmapped function, e.g. \
         through a captured variable, or was sent to another thread)",
    )
}

/// `t` with dim `from` moved to position `to` (a permute view; `t` itself when they are equal).
pub(crate) fn movedim(t: &Tensor, from: usize, to: usize) -> Result<Tensor> {
    if from == to {
        return Ok(t.clone());
    }
    let mut perm: Vec<i64> = (0..t.rank() as i64).filter(|&d| d != from as i64).collect();
    perm.insert(to, from as i64);
    t.permute(&perm)
}

/// `t` with its batch dim `bdim` moved to the front.
pub(crate) fn to_front(t: &Tensor, bdim: usize) -> Result<Tensor> {
    movedim(t, bdim, 0)
}

/// A batch-first physical tensor `t` (`[B, *logical]`) with size-1 dims inserted after the batch
/// dim until its logical rank is `rank`, so it broadcasts against unbatched tensors of that rank.
pub(crate) fn pad_to_rank(t: &Tensor, rank: usize) -> Result<Tensor> {
    let logical = t.rank() - 1;
    if logical >= rank {
        return Ok(t.clone());
    }
    let mut shape: Vec<usize> = Vec::with_capacity(rank + 1);
    shape.push(t.shape()[0]);
    shape.extend(std::iter::repeat_n(1, rank - logical));
    shape.extend_from_slice(&t.shape()[1..]);
    t.reshape(&shape)
}
