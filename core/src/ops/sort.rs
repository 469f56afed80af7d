//! Sorting along one dim: `sort` (values and the permutation that gives them). `argsort` and
//! `topk` are composites over it. Like the scans, a sort moves values across a whole lane, so
//! the compiler runs it as a barrier ("has no scalar lowering").
//!
//! The sort is stable (equal values keep their order). NaN sorts as larger than every number, as
//! in PyTorch: last ascending, first descending. `-0.0` and `0.0` are equal.

use std::cmp::Ordering;

use tensorplay_ir::shape::normalize_dim;
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call;
use crate::element::Element;
use crate::tensor::Tensor;
use crate::value::Args;
use crate::with_dtype;

/// `sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)`
pub static SORT: OpDef = OpDef {
    name: "sort",
    schema: "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: sort_meta,
        fill: sort_fill,
    },
    derivative: Some(sort_grad),
    saved: Saved::Outputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&SORT];

/// `(dim, descending)` of a sort call, with the schema's defaults.
fn sort_args(a: Args, x: &Tensor) -> Result<(usize, bool)> {
    let dim = match a.values.get(1) {
        None => -1,
        Some(_) => a.int(1)?,
    };
    let descending = match a.values.get(2) {
        None => false,
        Some(_) => a.bool(2)?,
    };
    Ok((normalize_dim(a.op, dim, x.rank())?, descending))
}

fn sort_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    sort_args(a, x)?;
    Ok(vec![
        OutSpec::new(x.shape(), x.dtype()),
        OutSpec::new(x.shape(), DType::I64),
    ])
}

/// Total order with NaN above every number (and equal to other NaNs).
fn nan_last<T: Element>(a: T, b: T) -> Ordering {
    match T::DTYPE {
        DType::I32 | DType::I64 => a.to_i64().cmp(&b.to_i64()),
        DType::Bool => a.to_bool().cmp(&b.to_bool()),
        _ => {
            let (x, y) = (a.to_f64(), b.to_f64());
            match (x.is_nan(), y.is_nan()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            }
        }
    }
}

fn sort_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let (dim, descending) = sort_args(a, x)?;
    if x.numel() == 0 {
        return Ok(());
    }
    let (n, inner) = if x.rank() == 0 {
        (1, 1)
    } else {
        (
            x.shape()[dim],
            x.shape()[dim + 1..].iter().product::<usize>(),
        )
    };
    with_dtype!(x.dtype(), T => {
        let xs = x.to_vec::<T>()?;
        let mut values = vec![xs[0]; xs.len()];
        let mut indices = vec![0i64; xs.len()];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for o in 0..xs.len() / (n * inner) {
            for j in 0..inner {
                let at = |i: usize| (o * n + i) * inner + j;
                order.clear();
                order.extend(0..n);
                // `sort_by` is stable; descending reverses the comparison, not the result, so
                // equal values keep their original order either way.
                order.sort_by(|&p, &q| {
                    let c = nan_last(xs[at(p)], xs[at(q)]);
                    if descending { c.reverse() } else { c }
                });
                for (i, &src) in order.iter().enumerate() {
                    values[at(i)] = xs[at(src)];
                    indices[at(i)] = src as i64;
                }
            }
        }
        let shape = x.shape();
        super::cast::copy_convert(a.op, &outs[0], &Tensor::from_vec(values, shape)?)?;
        super::cast::copy_convert(a.op, &outs[1], &Tensor::from_vec(indices, shape)?)
    })
}

/// The values' gradient goes back to where each value came from (the indices are a
/// permutation along `dim`, so the scatter writes every position once).
fn sort_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (dim, _) = sort_args(c.args, x)?;
    let g = c.grad(0)?;
    let gx = Tensor::zeros_like(&g).scatter(dim as i64, &c.outputs[1], &g)?;
    Ok(vec![Some(gx)])
}

impl Tensor {
    /// Sorts along `dim` (stable; NaN counts as the largest value): `(values, indices)` with
    /// `values = self.gather(dim, indices)`.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, f32::NAN, 1.0, 3.0], &[4])?;
    /// let (v, i) = x.sort(0, false)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![2, 0, 3, 1]);
    /// assert!(v.to_vec::<f32>()?[3].is_nan());
    /// let (_, i) = x.sort(0, true)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 0, 3, 2]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn sort(&self, dim: i64, descending: bool) -> Result<(Tensor, Tensor)> {
        let mut out = call(&SORT, &[self.into(), dim.into(), descending.into()])?;
        let indices = out.pop();
        match (out.pop(), indices) {
            (Some(v), Some(i)) => Ok((v, i)),
            _ => Err(Error::unsupported("sort", "expected two outputs")),
        }
    }

    /// The indices that sort `self` along `dim` (stable).
    pub fn argsort(&self, dim: i64, descending: bool) -> Result<Tensor> {
        Ok(self.sort(dim, descending)?.1)
    }

    /// The `k` largest (or smallest) values along `dim`, in sorted order, and their indices.
    /// `k` larger than the dim is an argument error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 2.0, 4.0], &[4])?;
    /// let (v, i) = x.topk(2, 0, true)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![5.0, 4.0], vec![1, 3]));
    /// assert!(x.topk(5, 0, true).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn topk(&self, k: usize, dim: i64, largest: bool) -> Result<(Tensor, Tensor)> {
        if self.dtype() == DType::Bool {
            return Err(Error::dtype(
                "topk",
                "bool tensors are not supported (PyTorch has no bool topk either)",
            ));
        }
        let d = normalize_dim("topk", dim, self.rank())?;
        let n = self.shape().get(d).copied().unwrap_or(1);
        if k > n {
            return Err(Error::argument(
                "topk",
                "k",
                format!("at most the size of dim {dim} ({n})"),
                k.to_string(),
            ));
        }
        let (v, i) = self.sort(dim, largest)?;
        if self.rank() == 0 {
            return Ok((v, i));
        }
        Ok((v.narrow(d as i64, 0, k)?, i.narrow(d as i64, 0, k)?))
    }
}
