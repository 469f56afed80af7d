//! Reductions over one or more dims (with `keepdim`), built on the reduction driver in
//! `kernels::reduce`. Integer and bool sums accumulate in i64 (PyTorch); float sums accumulate in
//! f64 per block so long reductions stay accurate.

use half::{bf16, f16};
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::{GradCtx, Kernel, OpDef, OutSpec, Saved};
use crate::dispatch::call1;

use crate::kernels::reduce::{reduced_mask, reduced_shape, reducer, sum_f32_slice};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `sum(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor`
pub static SUM: OpDef = OpDef {
    name: "sum",
    schema: "sum(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: sum_meta,
        fill: sum_fill,
    },
    derivative: Some(sum_grad),
    saved: Saved::Nothing,
};

/// `mean(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor` (floating input only).
pub static MEAN: OpDef = OpDef {
    name: "mean",
    schema: "mean(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: mean_meta,
        fill: mean_fill,
    },
    derivative: Some(mean_grad),
    saved: Saved::Nothing,
};

/// Every reduction op of this family.
pub static OPS: &[&OpDef] = &[&SUM, &MEAN];

/// The reduced dims and keepdim flag of a `(self, dim, keepdim)` reduction call.
pub(crate) fn dims_args(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    let x = a.tensor(0)?;
    let mask = reduced_mask(a.op, a.opt_ints(1)?, x.rank())?;
    let keepdim = match a.values.get(2) {
        None => false,
        Some(_) => a.bool(2)?,
    };
    Ok((mask, keepdim))
}

fn sum_dtype(d: DType) -> DType {
    if d.is_float() { d } else { DType::I64 }
}

fn sum_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    let (mask, keepdim) = dims_args(a)?;
    Ok(vec![OutSpec::new(
        &reduced_shape(x.shape(), &mask, keepdim),
        sum_dtype(x.dtype()),
    )])
}

/// Sums `x` over `mask` into `out`, dividing by the reduced count when `mean`.
fn sum_into(op: &str, x: &Tensor, mask: &[bool], out: &Tensor, mean: bool) -> Result<()> {
    let scale = move |n: usize| if mean { 1.0 / n as f64 } else { 1.0 };
    macro_rules! float_sum {
        ($T:ty) => {
            reducer(
                || 0f64,
                |acc, v: $T, _| acc + v.to_f64(),
                |acc, xs: &[$T], _| acc + xs.iter().map(|v| v.to_f64()).sum::<f64>(),
                |a, b| a + b,
                |acc, n| <$T>::from_f64(acc * scale(n)),
            )
            .run(op, x, mask, out)
        };
    }
    match x.dtype() {
        DType::F32 => reducer(
            || 0f64,
            |acc, v: f32, _| acc + v as f64,
            |acc, xs: &[f32], _| acc + sum_f32_slice(xs),
            |a, b| a + b,
            |acc, n| (acc * scale(n)) as f32,
        )
        .run(op, x, mask, out),
        DType::F64 => reducer(
            || 0f64,
            |acc, v: f64, _| acc + v,
            |acc, xs: &[f64], _| acc + xs.iter().sum::<f64>(),
            |a, b| a + b,
            |acc, n| acc * scale(n),
        )
        .run(op, x, mask, out),
        DType::F16 => float_sum!(f16),
        DType::BF16 => float_sum!(bf16),
        DType::I32 | DType::I64 | DType::Bool => {
            let xi = x.to_dtype(DType::I64)?;
            reducer(
                || 0i64,
                |acc: i64, v: i64, _| acc.wrapping_add(v),
                |acc: i64, xs: &[i64], _| xs.iter().fold(acc, |a, &v| a.wrapping_add(v)),
                i64::wrapping_add,
                |acc, _| acc,
            )
            .run(op, &xi, mask, out)
        }
    }
}

fn sum_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = dims_args(a)?;
    sum_into(a.op, a.tensor(0)?, &mask, &outs[0], false)
}

/// Expands a reduced gradient back over the reduced dims of `x`.
pub(crate) fn expand_reduced_grad(g: &Tensor, x: &Tensor, mask: &[bool], keepdim: bool) -> Result<Tensor> {
    let g = if keepdim {
        g.clone()
    } else {
        g.reshape(&reduced_shape(x.shape(), mask, true))?
    };
    g.expand(x.shape())
}

fn sum_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim) = dims_args(c.args)?;
    Ok(vec![Some(expand_reduced_grad(&c.grad(0)?, x, &mask, keepdim)?)])
}

fn mean_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            a.op,
            format!("input dtype must be floating point, got {}", x.dtype()),
        ));
    }
    let (mask, keepdim) = dims_args(a)?;
    Ok(vec![OutSpec::new(&reduced_shape(x.shape(), &mask, keepdim), x.dtype())])
}

fn mean_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = dims_args(a)?;
    sum_into(a.op, a.tensor(0)?, &mask, &outs[0], true)
}

fn mean_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim) = dims_args(c.args)?;
    let n: usize = x.shape().iter().zip(&mask).filter(|(_, m)| **m).map(|(s, _)| *s).product();
    let g = c.grad(0)?.div_scalar(n as f64)?;
    Ok(vec![Some(expand_reduced_grad(&g, x, &mask, keepdim)?)])
}

/// The `dims` argument as a boxed value.
fn dims_value(dims: &[i64]) -> Value {
    Value::IntList(dims.to_vec())
}

impl Tensor {
    /// Sum over `dims` (negative dims count from the end; empty = all dims).
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(x.sum(&[0], false)?.to_vec::<i64>()?, vec![4, 6]);
    /// assert_eq!(x.sum(&[-1], true)?.shape(), &[2, 1]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn sum(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        call1(&SUM, &[self.into(), dims_value(dims), keepdim.into()])
    }

    /// Sum of all elements (a 0-d tensor).
    pub fn sum_all(&self) -> Result<Tensor> {
        call1(&SUM, &[self.into(), Value::None, false.into()])
    }

    /// Mean over `dims` (empty = all dims); floating input only.
    pub fn mean(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        call1(&MEAN, &[self.into(), dims_value(dims), keepdim.into()])
    }

    /// Mean of all elements.
    pub fn mean_all(&self) -> Result<Tensor> {
        call1(&MEAN, &[self.into(), Value::None, false.into()])
    }

    /// Sums a broadcast result back down to `shape` (the gradient of broadcasting).
    ///
    /// ```
    /// use tensorplay_runtime::{Tensor, DType};
    /// let g = Tensor::ones(&[4, 2, 3], DType::F32);
    /// assert_eq!(g.sum_to_shape(&[2, 1])?.to_vec::<f32>()?, vec![12.0, 12.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let rank = self.rank();
        if shape.len() > rank {
            return Err(Error::shape(
                "sum_to_shape",
                format!(
                    "cannot reduce {} to the larger rank {}",
                    tensorplay_ir::shape::fmt_shape(self.shape()),
                    tensorplay_ir::shape::fmt_shape(shape)
                ),
            ));
        }
        let lead = rank - shape.len();
        let mut dims: Vec<i64> = (0..lead as i64).collect();
        for (i, &s) in shape.iter().enumerate() {
            let d = self.shape()[lead + i];
            if s == 1 && d != 1 {
                dims.push((lead + i) as i64);
            } else if s != d {
                return Err(Error::shape(
                    "sum_to_shape",
                    format!(
                        "{} does not broadcast to {}",
                        tensorplay_ir::shape::fmt_shape(shape),
                        tensorplay_ir::shape::fmt_shape(self.shape())
                    ),
                ));
            }
        }
        let summed = if dims.is_empty() {
            self.clone()
        } else {
            self.sum(&dims, true)?
        };
        summed.reshape(shape)
    }
}
