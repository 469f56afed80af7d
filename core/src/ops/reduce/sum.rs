//! The summing reductions: `sum`, `mean` and `prod` (integers and bool accumulate in i64,
//! floats in f64), their derivatives, and the sum-based `Tensor` methods (`sum_to_shape`...).

use half::{bf16, f16};
use tensorplay_ir::{DType, Error, OpClass, ReduceOp, Result};

use super::args::{dims_args, dims_value, keep_shape, mask_dims};
use crate::dispatch::call1;
use crate::element::Element;
use crate::kernels::reduce::{reduced_shape, reducer, sum_f32_slice};
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::symint::SymInt;
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
    lower: Lower::Reduce(ReduceOp::Sum),
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
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
    lower: Lower::Reduce(ReduceOp::Mean),
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

/// `prod(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor`: integers and bool give
/// i64 (wrapping); floats keep their dtype and accumulate in f64.
pub static PROD: OpDef = OpDef {
    name: "prod",
    schema: "prod(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: prod_meta,
        fill: prod_fill,
    },
    derivative: Some(prod_grad),
    saved: Saved::Inputs,
    lower: Lower::Reduce(ReduceOp::Prod),
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

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
pub(crate) fn expand_reduced_grad(
    g: &Tensor,
    x: &Tensor,
    mask: &[bool],
    keepdim: bool,
) -> Result<Tensor> {
    if x.is_fake() && crate::capture::is_installed() {
        // A traced backward (compiled training): broadcast against zeros shaped like `x` rather
        // than reshape/expand to `x`'s sizes, so the recorded graph reads and bakes no size and
        // serves other sizes (same values; a -0.0 gradient element becomes +0.0).
        let mut g = g.clone();
        if !keepdim {
            for (d, _) in mask.iter().enumerate().filter(|(_, m)| **m) {
                g = g.unsqueeze(d as i64)?;
            }
        }
        return g.add(&Tensor::zeros_like(x));
    }
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
    Ok(vec![Some(expand_reduced_grad(
        &c.grad(0)?,
        x,
        &mask,
        keepdim,
    )?)])
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
    Ok(vec![OutSpec::new(
        &reduced_shape(x.shape(), &mask, keepdim),
        x.dtype(),
    )])
}

fn mean_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = dims_args(a)?;
    sum_into(a.op, a.tensor(0)?, &mask, &outs[0], true)
}

fn mean_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim) = dims_args(c.args)?;
    if x.is_fake() && crate::capture::is_installed() {
        // A traced backward (compiled training): the count is a tensor computed from `x`'s
        // symbolic sizes (a sum of ones, in f64 so it is exact), not a number baked in, so the
        // graph serves other sizes. Same value as eager: `g / n` in `g`'s dtype.
        let reduced: Vec<SymInt> = x
            .sym_shape()
            .into_iter()
            .zip(&mask)
            .filter(|(_, m)| **m)
            .map(|(s, _)| s)
            .collect();
        if reduced.iter().any(|s| s.is_symbolic()) {
            let g = c.grad(0)?;
            // Half grads divide in f32 (as eager's scalar division does): a count above 2048
            // is not exact in f16.
            let at = match g.dtype() {
                DType::F16 | DType::BF16 => DType::F32,
                d => d,
            };
            let count = Tensor::ones_sym(&reduced, DType::F64)?
                .sum_all()?
                .to_dtype(at)?;
            let g = g.to_dtype(at)?.div(&count)?.to_dtype(g.dtype())?;
            return Ok(vec![Some(expand_reduced_grad(&g, x, &mask, keepdim)?)]);
        }
    }
    let n: usize = x
        .shape()
        .iter()
        .zip(&mask)
        .filter(|(_, m)| **m)
        .map(|(s, _)| *s)
        .product();
    let g = c.grad(0)?.div_scalar(n as f64)?;
    Ok(vec![Some(expand_reduced_grad(&g, x, &mask, keepdim)?)])
}

// ---- prod ---------------------------------------------------------------------------------------

fn prod_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    let (mask, keepdim) = dims_args(a)?;
    Ok(vec![OutSpec::new(
        &reduced_shape(x.shape(), &mask, keepdim),
        sum_dtype(x.dtype()),
    )])
}

/// Independent f64 accumulators of the slice loops below, so the compiler can vectorize them
/// instead of waiting on one add (or multiply) per element.
const F64_LANES: usize = 8;

/// Sum of `f(x)` over `xs` in f64 with [`F64_LANES`] interleaved partial sums (a fixed order, so
/// deterministic).
#[inline]
pub(super) fn lane_sum<T: Element>(xs: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut lanes = [0f64; F64_LANES];
    let mut it = xs.chunks_exact(F64_LANES);
    for c in &mut it {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    let tail: f64 = it.remainder().iter().map(|&v| f(v)).sum();
    lanes.iter().sum::<f64>() + tail
}

/// Product of `xs` in f64 with [`F64_LANES`] interleaved partial products.
#[inline]
fn lane_product<T: Element>(xs: &[T]) -> f64 {
    let mut lanes = [1f64; F64_LANES];
    let mut it = xs.chunks_exact(F64_LANES);
    for c in &mut it {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l *= v.to_f64();
        }
    }
    let tail: f64 = it.remainder().iter().map(|v| v.to_f64()).product();
    lanes.iter().product::<f64>() * tail
}

/// Product of a floating `x` (element type `T`) over `mask`, accumulated in f64.
fn float_prod<T: Element>(op: &str, x: &Tensor, mask: &[bool], out: &Tensor) -> Result<()> {
    reducer(
        || 1f64,
        |acc, v: T, _| acc * v.to_f64(),
        |acc, xs: &[T], _| acc * lane_product(xs),
        |a, b| a * b,
        |acc, _| T::from_f64(acc),
    )
    .run(op, x, mask, out)
}

fn prod_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = dims_args(a)?;
    let (op, x, out) = (a.op, a.tensor(0)?, &outs[0]);
    match x.dtype() {
        DType::F32 => float_prod::<f32>(op, x, &mask, out),
        DType::F64 => float_prod::<f64>(op, x, &mask, out),
        DType::F16 => float_prod::<f16>(op, x, &mask, out),
        DType::BF16 => float_prod::<bf16>(op, x, &mask, out),
        DType::I32 | DType::I64 | DType::Bool => {
            let xi = x.to_dtype(DType::I64)?;
            reducer(
                || 1i64,
                |acc: i64, v: i64, _| acc.wrapping_mul(v),
                |acc: i64, xs: &[i64], _| xs.iter().fold(acc, |p, &v| p.wrapping_mul(v)),
                i64::wrapping_mul,
                |acc, _| acc,
            )
            .run(op, &xi, &mask, out)
        }
    }
}

/// Gradient of prod: `prod / x` without zeros; with exactly one zero in a reduced group the zero
/// gets the product of the others and the rest get 0; with two or more zeros everything gets 0.
/// Built from differentiable ops, so it is itself differentiable (exactly so away from zeros).
fn prod_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim) = dims_args(c.args)?;
    let dims = mask_dims(&mask);
    let g = keep_shape(&c.grad(0)?, x, &mask, keepdim)?;
    let dt = x.dtype();
    let zero = x.eq_scalar(0.0)?.to_dtype(dt)?;
    let zeros = zero.sum(&dims, true)?;
    // x with its zeros replaced by ones, and the product of those.
    let nonzero = x.add(&zero)?;
    let p = nonzero.prod(&dims, true)?;
    let no_zero = zeros.eq_scalar(0.0)?.to_dtype(dt)?;
    let one_zero = zeros.eq_scalar(1.0)?.to_dtype(dt)?;
    let factor = no_zero.div(&nonzero)?.add(&one_zero.mul(&zero)?)?;
    Ok(vec![Some(g.mul(&p)?.mul(&factor)?)])
}

impl Tensor {
    /// Sum over `dims` (negative dims count from the end; empty = all dims).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(x.sum(&[0], false)?.to_vec::<i64>()?, vec![4, 6]);
    /// assert_eq!(x.sum(&[-1], true)?.shape(), &[2, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
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
    /// use tensorplay_core::{Tensor, DType};
    /// let g = Tensor::ones(&[4, 2, 3], DType::F32);
    /// assert_eq!(g.sum_to_shape(&[2, 1])?.to_vec::<f32>()?, vec![12.0, 12.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
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
                    "cannot reduce {} (rank {rank}) to {} of the larger rank {}",
                    tensorplay_ir::shape::fmt_shape(self.shape()),
                    tensorplay_ir::shape::fmt_shape(shape),
                    shape.len()
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

    /// [`Tensor::sum_to_shape`] to `like`'s shape, as derivatives of broadcasting ops use it:
    /// the sizes are read without guarding them (and no size is baked into the ops it records),
    /// so a compiled backward stays valid at other sizes. Sound because which dims to reduce
    /// depends only on which dims have size 1, and a compiled graph's guards fix that for its
    /// inputs (size-1 dims are static), hence for every broadcast derived from them.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let g = Tensor::ones(&[4, 2, 3], DType::F32);
    /// let like = Tensor::ones(&[2, 1], DType::F32);
    /// assert_eq!(g.sum_to_shape_of(&like)?.to_vec::<f32>()?, vec![12.0, 12.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn sum_to_shape_of(&self, like: &Tensor) -> Result<Tensor> {
        let (have, want) = (self.shape_untracked(), like.shape_untracked());
        if have == want {
            return Ok(self.clone());
        }
        if want.len() > have.len() {
            return self.sum_to_shape(like.shape());
        }
        let lead = have.len() - want.len();
        let mut broadcast = Vec::new();
        for (i, &s) in want.iter().enumerate() {
            let d = have[lead + i];
            if s == 1 && d != 1 {
                broadcast.push((lead + i) as i64);
            } else if s != d {
                // Not a broadcast: the tracked version reports the error.
                return self.sum_to_shape(like.shape());
            }
        }
        let mut t = self.clone();
        if !broadcast.is_empty() {
            t = t.sum(&broadcast, true)?;
        }
        if lead > 0 {
            t = t.sum(&(0..lead as i64).collect::<Vec<_>>(), false)?;
        }
        Ok(t)
    }
}

impl Tensor {
    /// Product over `dims` (empty = all dims); integers and bool give i64 (wrapping).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(x.prod(&[1], false)?.to_vec::<i64>()?, vec![2, 12]);
    /// assert_eq!(x.prod_all()?.item::<i64>()?, 24);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn prod(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        call1(&PROD, &[self.into(), dims_value(dims), keepdim.into()])
    }

    /// Product of all elements (a 0-d tensor; 1 for an empty tensor).
    pub fn prod_all(&self) -> Result<Tensor> {
        call1(&PROD, &[self.into(), Value::None, false.into()])
    }
}
