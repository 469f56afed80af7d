//! The arguments and shapes every reduction shares: the `dims`/`keepdim` arguments as a mask,
//! optional flags and dims, reduced sizes, the keepdim reshape of results and gradients, and the
//! check that a reduction without an identity has something to reduce.

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

use crate::kernels::reduce::{reduced_mask, reduced_shape};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// The reduced dims and keepdim flag of a `(self, dim, keepdim)` reduction call.
pub(crate) fn dims_args(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    dims_args_at(a, 2)
}

/// Like [`dims_args`], with `keepdim` at argument `keep_at`.
pub(super) fn dims_args_at(
    a: Args,
    keep_at: usize,
) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    let x = a.tensor(0)?;
    let mask = reduced_mask(a.op, a.opt_ints(1)?, x.rank())?;
    Ok((mask, opt_bool(a, keep_at)?))
}

/// Argument `i` as a bool defaulting to false when absent.
pub(super) fn opt_bool(a: Args, i: usize) -> Result<bool> {
    match a.values.get(i) {
        None => Ok(false),
        Some(_) => a.bool(i),
    }
}

/// Argument `i` as an optional int (`None` or absent gives `None`).
pub(super) fn opt_int(a: Args, i: usize) -> Result<Option<i64>> {
    match a.values.get(i) {
        None | Some(Value::None) => Ok(None),
        Some(_) => a.int(i).map(Some),
    }
}

/// Mask of a reduction over the single dim `dim` (no dims for a 0-d tensor).
pub(super) fn single_dim_mask(
    op: &str,
    dim: i64,
    rank: usize,
) -> Result<smallvec::SmallVec<[bool; 6]>> {
    reduced_mask(op, Some(&[dim]), rank)
}

/// Number of elements each output of a reduction over `mask` combines.
pub(super) fn reduced_len(x: &Tensor, mask: &[bool]) -> usize {
    x.shape()
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m)
        .map(|(s, _)| *s)
        .product()
}

/// The reduced dims of `mask` as a `dims` argument (empty only for a 0-d tensor, where it means
/// "all dims" and is equivalent).
pub(super) fn mask_dims(mask: &[bool]) -> Vec<i64> {
    mask.iter()
        .enumerate()
        .filter(|(_, m)| **m)
        .map(|(i, _)| i as i64)
        .collect()
}

/// `t` (a reduction result or its gradient) reshaped to the keepdim shape, so it broadcasts
/// against the input.
pub(super) fn keep_shape(t: &Tensor, x: &Tensor, mask: &[bool], keepdim: bool) -> Result<Tensor> {
    if keepdim {
        Ok(t.clone())
    } else {
        t.reshape(&reduced_shape(x.shape(), mask, true))
    }
}

/// Rejects reductions without an identity over a zero-size dim.
pub(super) fn check_nonempty(op: &str, x: &Tensor, mask: &[bool]) -> Result<()> {
    if let Some(d) = x.shape().iter().zip(mask).position(|(&s, &m)| m && s == 0) {
        return Err(Error::shape(
            op,
            format!(
                "cannot reduce over dim {d} of size 0 (input shape {}): the reduction has no identity",
                fmt_shape(x.shape())
            ),
        ));
    }
    Ok(())
}

/// The `dims` argument as a boxed value.
pub(super) fn dims_value(dims: &[i64]) -> Value {
    Value::IntList(dims.to_vec())
}
