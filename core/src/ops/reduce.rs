//! Reductions over one or more dims (with `keepdim`), built on the reduction driver in
//! `kernels::reduce`. Integer and bool sums and products accumulate in i64 (PyTorch); float sums,
//! products and variances accumulate in f64 so long reductions stay accurate.
//!
//! max/min-style reductions treat NaN as larger (and smaller) than every number, so NaN propagates
//! and its first position is the arg-extremum; ties keep the first occurrence. They have no
//! identity, so reducing over a zero-size dim is a shape error.

use half::{bf16, f16};
use tensorplay_ir::shape::{fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, OpClass, ReduceOp, Result};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::{call, call1};
use crate::element::Element;
use crate::kernels::iter::SendPtr;
use crate::kernels::reduce::{reduced_mask, reduced_shape, reducer, sum_f32_slice};
use crate::symint::SymInt;
use crate::tensor::Tensor;
use crate::value::{Args, Value};
use crate::with_dtype;

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

/// `max(Tensor self) -> Tensor`: the largest element (NaN if any element is NaN) as a 0-d tensor.
pub static MAX: OpDef = OpDef {
    name: "max",
    schema: "max(Tensor self) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: full_extremum_meta,
        fill: full_extremum_fill::<true>,
    },
    derivative: Some(full_extremum_grad),
    saved: Saved::All,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `min(Tensor self) -> Tensor`: the smallest element (NaN if any element is NaN) as a 0-d tensor.
pub static MIN: OpDef = OpDef {
    name: "min",
    schema: "min(Tensor self) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: full_extremum_meta,
        fill: full_extremum_fill::<false>,
    },
    derivative: Some(full_extremum_grad),
    saved: Saved::All,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `max_dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)`:
/// the maximum along one dim and the (first) index where it occurs (i64).
pub static MAX_DIM: OpDef = OpDef {
    name: "max_dim",
    schema: "max_dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: extremum_dim_meta,
        fill: extremum_dim_fill::<true>,
    },
    derivative: Some(extremum_dim_grad),
    saved: Saved::Outputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `min_dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)`.
pub static MIN_DIM: OpDef = OpDef {
    name: "min_dim",
    schema: "min_dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: extremum_dim_meta,
        fill: extremum_dim_fill::<false>,
    },
    derivative: Some(extremum_dim_grad),
    saved: Saved::Outputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor`: maximum over several dims.
pub static AMAX: OpDef = OpDef {
    name: "amax",
    schema: "amax(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: amax_meta,
        fill: amax_fill::<true>,
    },
    derivative: Some(amax_grad),
    saved: Saved::All,
    lower: Lower::Reduce(ReduceOp::Amax),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor`: minimum over several dims.
pub static AMIN: OpDef = OpDef {
    name: "amin",
    schema: "amin(Tensor self, int[] dim=[], bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: amax_meta,
        fill: amax_fill::<false>,
    },
    derivative: Some(amax_grad),
    saved: Saved::All,
    lower: Lower::Reduce(ReduceOp::Amin),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor`: i64 index of the first
/// maximum (of the flattened tensor when `dim` is None).
pub static ARGMAX: OpDef = OpDef {
    name: "argmax",
    schema: "argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: arg_meta,
        fill: arg_fill::<true>,
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::ReduceFlattened,
};

/// `argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor`.
pub static ARGMIN: OpDef = OpDef {
    name: "argmin",
    schema: "argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: arg_meta,
        fill: arg_fill::<false>,
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::ReduceFlattened,
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

/// `var(Tensor self, int[]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor`:
/// variance with `sum((x - mean)^2) / max(n - correction, 0)`; correction defaults to 1.
pub static VAR: OpDef = OpDef {
    name: "var",
    schema: "var(Tensor self, int[]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: var_meta,
        fill: var_fill::<false>,
    },
    derivative: Some(var_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

/// `std(Tensor self, int[]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor`:
/// the square root of [`VAR`].
pub static STD: OpDef = OpDef {
    name: "std",
    schema: "std(Tensor self, int[]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: var_meta,
        fill: var_fill::<true>,
    },
    derivative: Some(std_grad),
    saved: Saved::All,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every reduction op of this family.
pub static OPS: &[&OpDef] = &[
    &SUM, &MEAN, &MAX, &MIN, &MAX_DIM, &MIN_DIM, &AMAX, &AMIN, &ARGMAX, &ARGMIN, &PROD, &VAR, &STD,
];

/// The reduced dims and keepdim flag of a `(self, dim, keepdim)` reduction call.
pub(crate) fn dims_args(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    dims_args_at(a, 2)
}

/// Like [`dims_args`], with `keepdim` at argument `keep_at`.
fn dims_args_at(a: Args, keep_at: usize) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    let x = a.tensor(0)?;
    let mask = reduced_mask(a.op, a.opt_ints(1)?, x.rank())?;
    Ok((mask, opt_bool(a, keep_at)?))
}

/// Argument `i` as a bool defaulting to false when absent.
fn opt_bool(a: Args, i: usize) -> Result<bool> {
    match a.values.get(i) {
        None => Ok(false),
        Some(_) => a.bool(i),
    }
}

/// Argument `i` as an optional int (`None` or absent gives `None`).
fn opt_int(a: Args, i: usize) -> Result<Option<i64>> {
    match a.values.get(i) {
        None | Some(Value::None) => Ok(None),
        Some(_) => a.int(i).map(Some),
    }
}

/// Mask of a reduction over the single dim `dim` (no dims for a 0-d tensor).
fn single_dim_mask(op: &str, dim: i64, rank: usize) -> Result<smallvec::SmallVec<[bool; 6]>> {
    reduced_mask(op, Some(&[dim]), rank)
}

/// Number of elements each output of a reduction over `mask` combines.
fn reduced_len(x: &Tensor, mask: &[bool]) -> usize {
    x.shape()
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m)
        .map(|(s, _)| *s)
        .product()
}

/// The reduced dims of `mask` as a `dims` argument (empty only for a 0-d tensor, where it means
/// "all dims" and is equivalent).
fn mask_dims(mask: &[bool]) -> Vec<i64> {
    mask.iter()
        .enumerate()
        .filter(|(_, m)| **m)
        .map(|(i, _)| i as i64)
        .collect()
}

/// `t` (a reduction result or its gradient) reshaped to the keepdim shape, so it broadcasts
/// against the input.
fn keep_shape(t: &Tensor, x: &Tensor, mask: &[bool], keepdim: bool) -> Result<Tensor> {
    if keepdim {
        Ok(t.clone())
    } else {
        t.reshape(&reduced_shape(x.shape(), mask, true))
    }
}

/// Rejects reductions without an identity over a zero-size dim.
fn check_nonempty(op: &str, x: &Tensor, mask: &[bool]) -> Result<()> {
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

// ---- max / min / amax / amin / argmax / argmin -------------------------------------------------

/// The order max/min reductions use: NaN beats every number (so it propagates) and equal values
/// never replace the running extremum (so the first occurrence wins).
pub(crate) trait Extremum: Element {
    /// True when `new` should replace `cur` as the running maximum.
    fn beats_max(new: Self, cur: Self) -> bool;
    /// True when `new` should replace `cur` as the running minimum.
    fn beats_min(new: Self, cur: Self) -> bool;
    /// A value equal to the maximum (`MAX`) or minimum of the non-empty `xs` (NaN if any is
    /// NaN), found with independent lanes so the loop vectorizes.
    fn block_extremum<const MAX: bool>(xs: &[Self]) -> Self;
    /// Whether `v` is the extremum `m` found by [`Extremum::block_extremum`] (NaN matches NaN).
    fn same(v: Self, m: Self) -> bool;
}

/// Lanes of [`Extremum::block_extremum`].
const EXT_LANES: usize = 16;

macro_rules! float_extremum {
    ($($T:ty => $F:ty, $to:expr),*) => {$(
        impl Extremum for $T {
            #[inline(always)]
            fn beats_max(new: Self, cur: Self) -> bool {
                let (n, c) = (($to)(new), ($to)(cur));
                n > c || (n.is_nan() && !c.is_nan())
            }
            #[inline(always)]
            fn beats_min(new: Self, cur: Self) -> bool {
                let (n, c) = (($to)(new), ($to)(cur));
                n < c || (n.is_nan() && !c.is_nan())
            }
            #[inline(always)]
            fn block_extremum<const MAX: bool>(xs: &[Self]) -> Self {
                let first: $F = ($to)(xs[0]);
                let mut lanes = [first; EXT_LANES];
                let mut nan = [false; EXT_LANES];
                let mut it = xs.chunks_exact(EXT_LANES);
                for c in &mut it {
                    for k in 0..EXT_LANES {
                        let v: $F = ($to)(c[k]);
                        let better = if MAX { v > lanes[k] } else { v < lanes[k] };
                        lanes[k] = if better { v } else { lanes[k] };
                        nan[k] |= v.is_nan();
                    }
                }
                let mut m = first;
                let mut any_nan = nan.iter().any(|&b| b);
                for v in lanes.into_iter().chain(it.remainder().iter().map(|&v| ($to)(v))) {
                    let better = if MAX { v > m } else { v < m };
                    m = if better { v } else { m };
                    any_nan |= v.is_nan();
                }
                // Back to `Self`; exact, because `m` is one of the elements (or NaN).
                if any_nan { Self::from_f64(f64::NAN) } else { Self::from_f64(m as f64) }
            }
            #[inline(always)]
            fn same(v: Self, m: Self) -> bool {
                let (v, m) = (($to)(v), ($to)(m));
                v == m || (v.is_nan() && m.is_nan())
            }
        }
    )*};
}
float_extremum!(
    f32 => f32, |v: f32| v,
    f64 => f64, |v: f64| v,
    f16 => f32, f16::to_f32,
    bf16 => f32, bf16::to_f32
);

macro_rules! ordered_extremum {
    ($($T:ty),*) => {$(
        impl Extremum for $T {
            #[inline(always)]
            fn beats_max(new: Self, cur: Self) -> bool {
                new > cur
            }
            #[inline(always)]
            fn beats_min(new: Self, cur: Self) -> bool {
                new < cur
            }
            #[inline(always)]
            fn block_extremum<const MAX: bool>(xs: &[Self]) -> Self {
                let it = xs.iter().copied();
                let m = if MAX { it.max() } else { it.min() };
                m.unwrap_or(xs[0])
            }
            #[inline(always)]
            fn same(v: Self, m: Self) -> bool {
                v == m
            }
        }
    )*};
}
ordered_extremum!(i32, i64, bool);

/// Elements per block of the slice path of max/min: each block's extremum is found with
/// vectorized lanes, and only a block that improves on the running extremum is searched for the
/// first position of its extremum.
const EXT_BLOCK: usize = 1024;

#[inline(always)]
fn beats<T: Extremum, const MAX: bool>(new: T, cur: T) -> bool {
    if MAX {
        T::beats_max(new, cur)
    } else {
        T::beats_min(new, cur)
    }
}

/// Reduces `x` over `mask` to its maximum (`MAX`) or minimum, calling `emit(output, value,
/// index)` per output; `index` is the position of the first extremum in the reduced space
/// (row-major over the reduced dims).
fn extremum_run<T: Extremum, const MAX: bool>(
    op: &str,
    x: &Tensor,
    mask: &[bool],
    emit: impl Fn(usize, T, usize) + Sync,
) -> Result<()> {
    // (value, index, seen): `seen` is false only for an empty chunk of a split reduction.
    type Acc<T> = (T, usize, bool);
    reducer(
        || (T::from_i64(0), 0usize, false),
        |acc: Acc<T>, v: T, i| {
            if !acc.2 || beats::<T, MAX>(v, acc.0) {
                (v, i, true)
            } else {
                acc
            }
        },
        |mut acc: Acc<T>, xs: &[T], i0| {
            for (b, block) in xs.chunks(EXT_BLOCK).enumerate() {
                let m = T::block_extremum::<MAX>(block);
                if !acc.2 || beats::<T, MAX>(m, acc.0) {
                    let j = block.iter().position(|&v| T::same(v, m)).unwrap_or(0);
                    acc = (block[j], i0 + b * EXT_BLOCK + j, true);
                }
            }
            acc
        },
        // `a` covers earlier positions than `b`: `b` wins only when strictly better.
        |a: Acc<T>, b: Acc<T>| {
            if !a.2 || (b.2 && beats::<T, MAX>(b.0, a.0)) {
                b
            } else {
                a
            }
        },
        |acc: Acc<T>, _| acc.0,
    )
    .run_with(op, x, mask, |o, acc, _| emit(o, acc.0, acc.1))
}

/// Writes the extremum values of `x` over `mask` into `values` and/or their indices into
/// `indices` (both contiguous, shaped like the reduction).
fn extremum_into<const MAX: bool>(
    op: &str,
    x: &Tensor,
    mask: &[bool],
    values: Option<&Tensor>,
    indices: Option<&Tensor>,
) -> Result<()> {
    let pi = match indices {
        Some(t) => Some(SendPtr(t.data_ptr(op)? as *mut i64)),
        None => None,
    };
    with_dtype!(x.dtype(), T => {
        let pv = match values {
            Some(t) => Some(SendPtr(t.data_ptr(op)? as *mut T)),
            None => None,
        };
        // SAFETY: `values` and `indices` are fresh contiguous outputs shaped like the reduction,
        // and each flat output index `o` is emitted once, from one thread (`Reducer::run_with`).
        extremum_run::<T, MAX>(op, x, mask, |o, v, i| unsafe {
            if let Some(p) = pv {
                p.at(o as isize).write(v);
            }
            if let Some(p) = pi {
                p.at(o as isize).write(i as i64);
            }
        })
    })
}

fn full_extremum_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if x.numel() == 0 {
        return Err(Error::shape(
            a.op,
            format!(
                "cannot reduce an empty tensor (shape {}) without a dim: the reduction has no \
                 identity; use {}_dim or amax/amin with explicit dims",
                fmt_shape(x.shape()),
                a.op
            ),
        ));
    }
    Ok(vec![OutSpec::new(&[], x.dtype())])
}

fn full_extremum_fill<const MAX: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let mask = reduced_mask(a.op, None, x.rank())?;
    extremum_into::<MAX>(a.op, x, &mask, Some(&outs[0]), None)
}

/// 1 where `x` equals the (broadcast) extremum `v`, NaN matching NaN; 0 elsewhere; in `dt`.
fn extremum_hits(x: &Tensor, v: &Tensor, dt: DType) -> Result<Tensor> {
    let eq = x.eq(v)?.to_dtype(dt)?;
    let both_nan = x.ne(x)?.to_dtype(dt)?.mul(&v.ne(v)?.to_dtype(dt)?)?;
    eq.add(&both_nan)
}

/// Gradient of a value-only max/min over `mask`: split evenly among the tied extremal elements.
fn spread_to_extrema(c: &GradCtx, mask: &[bool], keepdim: bool) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let g = keep_shape(&c.grad(0)?, x, mask, keepdim)?;
    let v = keep_shape(&c.outputs[0], x, mask, keepdim)?;
    let hits = extremum_hits(x, &v, g.dtype())?;
    let count = hits.sum(&mask_dims(mask), true)?;
    Ok(vec![Some(g.div(&count)?.mul(&hits)?)])
}

fn full_extremum_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let mask = reduced_mask(c.args.op, None, x.rank())?;
    spread_to_extrema(c, &mask, false)
}

fn amax_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    let (mask, keepdim) = dims_args(a)?;
    check_nonempty(a.op, x, &mask)?;
    Ok(vec![OutSpec::new(
        &reduced_shape(x.shape(), &mask, keepdim),
        x.dtype(),
    )])
}

fn amax_fill<const MAX: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = dims_args(a)?;
    extremum_into::<MAX>(a.op, a.tensor(0)?, &mask, Some(&outs[0]), None)
}

fn amax_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (mask, keepdim) = dims_args(c.args)?;
    spread_to_extrema(c, &mask, keepdim)
}

/// `(mask, keepdim)` of a `(self, int dim, bool keepdim)` call.
fn one_dim_args(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, bool)> {
    let x = a.tensor(0)?;
    Ok((single_dim_mask(a.op, a.int(1)?, x.rank())?, opt_bool(a, 2)?))
}

fn extremum_dim_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    let (mask, keepdim) = one_dim_args(a)?;
    check_nonempty(a.op, x, &mask)?;
    let shape = reduced_shape(x.shape(), &mask, keepdim);
    Ok(vec![
        OutSpec::new(&shape, x.dtype()),
        OutSpec::new(&shape, DType::I64),
    ])
}

fn extremum_dim_fill<const MAX: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _) = one_dim_args(a)?;
    extremum_into::<MAX>(a.op, a.tensor(0)?, &mask, Some(&outs[0]), Some(&outs[1]))
}

/// Gradient of max_dim/min_dim: all of it to the returned index along `dim`.
fn extremum_dim_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim) = one_dim_args(c.args)?;
    let g = keep_shape(&c.grad(0)?, x, &mask, keepdim)?;
    if x.rank() == 0 {
        return Ok(vec![Some(g)]);
    }
    let d = normalize_dim(c.args.op, c.args.int(1)?, x.rank())?;
    let idx = keep_shape(&c.outputs[1], x, &mask, keepdim)?;
    let n = x.shape()[d];
    let mut pos_shape = vec![1usize; x.rank()];
    pos_shape[d] = n;
    let pos = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?.reshape(&pos_shape)?;
    let hit = pos.eq(&idx)?.to_dtype(g.dtype())?;
    Ok(vec![Some(g.mul(&hit)?)])
}

/// `(mask, keepdim)` of an argmax/argmin call (`dim = None` reduces every dim).
fn arg_dims(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, Option<i64>, bool)> {
    let x = a.tensor(0)?;
    let dim = opt_int(a, 1)?;
    let mask = match dim {
        Some(d) => single_dim_mask(a.op, d, x.rank())?,
        None => reduced_mask(a.op, None, x.rank())?,
    };
    Ok((mask, dim, opt_bool(a, 2)?))
}

fn arg_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if x.dtype() == DType::Bool {
        return Err(Error::dtype(
            a.op,
            "bool tensors are not supported (convert to an integer dtype)",
        ));
    }
    let (mask, dim, keepdim) = arg_dims(a)?;
    check_nonempty(a.op, x, &mask)?;
    let shape = match dim {
        Some(_) => reduced_shape(x.shape(), &mask, keepdim),
        // The flattened index; keepdim keeps every dim as size 1 (PyTorch).
        None if keepdim => std::iter::repeat_n(1, x.rank()).collect(),
        None => Default::default(),
    };
    Ok(vec![OutSpec::new(&shape, DType::I64)])
}

fn arg_fill<const MAX: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _, _) = arg_dims(a)?;
    extremum_into::<MAX>(a.op, a.tensor(0)?, &mask, None, Some(&outs[0]))
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
fn lane_sum<T: Element>(xs: &[T], f: impl Fn(T) -> f64) -> f64 {
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

// ---- var / std ----------------------------------------------------------------------------------

/// `(mask, keepdim, correction)` of a var/std call.
fn var_args(a: Args) -> Result<(smallvec::SmallVec<[bool; 6]>, bool, f64)> {
    let (mask, keepdim) = dims_args_at(a, 3)?;
    Ok((mask, keepdim, a.opt_float(2)?.unwrap_or(1.0)))
}

fn var_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            a.op,
            format!("input dtype must be floating point, got {}", x.dtype()),
        ));
    }
    let (mask, keepdim, _) = var_args(a)?;
    Ok(vec![OutSpec::new(
        &reduced_shape(x.shape(), &mask, keepdim),
        x.dtype(),
    )])
}

/// Running `(count, mean, sum of squared deviations)`, merged with Chan's parallel formula.
type Moments = (f64, f64, f64);

#[inline]
fn merge_moments(a: Moments, b: Moments) -> Moments {
    if a.0 == 0.0 {
        return b;
    }
    if b.0 == 0.0 {
        return a;
    }
    let n = a.0 + b.0;
    let delta = b.1 - a.1;
    (
        n,
        a.1 + delta * (b.0 / n),
        a.2 + b.2 + delta * delta * (a.0 * b.0 / n),
    )
}

/// Variance (or standard deviation when `SQRT`) of `x` (element type `T`) over `mask`.
fn float_var<T: Element, const SQRT: bool>(
    op: &str,
    x: &Tensor,
    mask: &[bool],
    out: &Tensor,
    correction: f64,
) -> Result<()> {
    reducer(
        || (0f64, 0f64, 0f64),
        // Welford's update for strided elements.
        |(n, mean, m2): Moments, v: T, _| {
            let v = v.to_f64();
            let n = n + 1.0;
            let delta = v - mean;
            let mean = mean + delta / n;
            (n, mean, m2 + delta * (v - mean))
        },
        // Two passes over a contiguous run, then merged.
        |acc: Moments, xs: &[T], _| {
            if xs.is_empty() {
                return acc;
            }
            let n = xs.len() as f64;
            let mean = lane_sum(xs, |v| v.to_f64()) / n;
            let m2 = lane_sum(xs, |v| {
                let d = v.to_f64() - mean;
                d * d
            });
            merge_moments(acc, (n, mean, m2))
        },
        merge_moments,
        |(n, _, m2): Moments, _| {
            let var = if n == 0.0 {
                f64::NAN
            } else {
                m2 / (n - correction).max(0.0)
            };
            T::from_f64(if SQRT { var.sqrt() } else { var })
        },
    )
    .run(op, x, mask, out)
}

fn var_fill<const SQRT: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let (mask, _, correction) = var_args(a)?;
    let (op, x, out) = (a.op, a.tensor(0)?, &outs[0]);
    match x.dtype() {
        DType::F32 => float_var::<f32, SQRT>(op, x, &mask, out, correction),
        DType::F64 => float_var::<f64, SQRT>(op, x, &mask, out, correction),
        DType::F16 => float_var::<f16, SQRT>(op, x, &mask, out, correction),
        DType::BF16 => float_var::<bf16, SQRT>(op, x, &mask, out, correction),
        d => Err(Error::dtype(
            op,
            format!("input dtype must be floating point, got {d}"),
        )),
    }
}

/// `g_var * 2 (x - mean) / max(n - correction, 0)` with `g_var` in keepdim shape.
fn var_input_grad(c: &GradCtx, g_var: &Tensor, mask: &[bool], correction: f64) -> Result<Tensor> {
    let x = c.args.tensor(0)?;
    let n = reduced_len(x, mask) as f64;
    let centered = x.sub(&x.mean(&mask_dims(mask), true)?)?;
    g_var
        .mul(&centered)?
        .mul_scalar(2.0 / (n - correction).max(0.0))
}

fn var_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim, correction) = var_args(c.args)?;
    let g = keep_shape(&c.grad(0)?, x, &mask, keepdim)?;
    Ok(vec![Some(var_input_grad(c, &g, &mask, correction)?)])
}

/// d std = d var / (2 std); where std is 0 the gradient is 0 (PyTorch).
fn std_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let (mask, keepdim, correction) = var_args(c.args)?;
    let g = keep_shape(&c.grad(0)?, x, &mask, keepdim)?;
    // When the backward pass is recorded (create_graph), recompute std so second derivatives
    // see its dependence on x; otherwise the saved output suffices.
    let out = if crate::autograd::is_grad_enabled() && x.requires_grad() {
        call1(&STD, c.args.values)?
    } else {
        c.outputs[0].clone()
    };
    let s = keep_shape(&out, x, &mask, keepdim)?;
    let dt = s.dtype();
    let is_zero = s.eq_scalar(0.0)?.to_dtype(dt)?;
    let not_zero = s.ne_scalar(0.0)?.to_dtype(dt)?;
    let g_var = g.mul(&not_zero)?.div(&s.mul_scalar(2.0)?.add(&is_zero)?)?;
    Ok(vec![Some(var_input_grad(c, &g_var, &mask, correction)?)])
}

/// The `dims` argument as a boxed value.
fn dims_value(dims: &[i64]) -> Value {
    Value::IntList(dims.to_vec())
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
    /// The largest element as a 0-d tensor (NaN if any element is NaN); errors on an empty tensor.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, -1.0, 7.0, 2.0], &[2, 2])?;
    /// assert_eq!(x.max_all()?.item::<f32>()?, 7.0);
    /// assert_eq!(x.min_all()?.item::<f32>()?, -1.0);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn max_all(&self) -> Result<Tensor> {
        call1(&MAX, &[self.into()])
    }

    /// The smallest element as a 0-d tensor (NaN if any element is NaN).
    pub fn min_all(&self) -> Result<Tensor> {
        call1(&MIN, &[self.into()])
    }

    /// Maximum along `dim` and the i64 index of its first occurrence (NaN counts as the maximum).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 5.0, 4.0, 2.0, 0.0], &[2, 3])?;
    /// let (values, indices) = x.max_dim(1, false)?;
    /// assert_eq!(values.to_vec::<f32>()?, vec![5.0, 4.0]);
    /// assert_eq!(indices.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn max_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        two(call(&MAX_DIM, &[self.into(), dim.into(), keepdim.into()])?)
    }

    /// Minimum along `dim` and the i64 index of its first occurrence (NaN counts as the minimum).
    pub fn min_dim(&self, dim: i64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        two(call(&MIN_DIM, &[self.into(), dim.into(), keepdim.into()])?)
    }

    /// Maximum over `dims` (empty = all dims); the gradient is shared evenly among ties.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 9, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.amax(&[0], false)?.to_vec::<i32>()?, vec![4, 9, 6]);
    /// assert_eq!(x.amin(&[], false)?.to_vec::<i32>()?, vec![1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn amax(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        call1(&AMAX, &[self.into(), dims_value(dims), keepdim.into()])
    }

    /// Minimum over `dims` (empty = all dims).
    pub fn amin(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        call1(&AMIN, &[self.into(), dims_value(dims), keepdim.into()])
    }

    /// i64 index of the first maximum along `dim`, or in the flattened tensor when `dim` is None.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 8.0, 8.0, 4.0], &[2, 2])?;
    /// assert_eq!(x.argmax(None, false)?.item::<i64>()?, 1);
    /// assert_eq!(x.argmax(Some(0), false)?.to_vec::<i64>()?, vec![1, 0]);
    /// assert_eq!(x.argmin(Some(1), true)?.shape(), &[2, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn argmax(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        call1(
            &ARGMAX,
            &[
                self.into(),
                dim.map_or(Value::None, Value::Int),
                keepdim.into(),
            ],
        )
    }

    /// i64 index of the first minimum along `dim` (flattened when None).
    pub fn argmin(&self, dim: Option<i64>, keepdim: bool) -> Result<Tensor> {
        call1(
            &ARGMIN,
            &[
                self.into(),
                dim.map_or(Value::None, Value::Int),
                keepdim.into(),
            ],
        )
    }

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

    /// Unbiased variance over `dims` (empty = all dims): `correction = 1`. Floating input only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[4])?;
    /// assert_eq!(x.var(&[], false)?.item::<f64>()?, 5.0 / 3.0);
    /// assert_eq!(x.var_correction(&[0], 0.0, false)?.item::<f64>()?, 1.25);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn var(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.var_correction(dims, 1.0, keepdim)
    }

    /// Variance with an explicit `correction`: `sum((x - mean)^2) / max(n - correction, 0)`.
    pub fn var_correction(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        call1(
            &VAR,
            &[
                self.into(),
                dims_value(dims),
                correction.into(),
                keepdim.into(),
            ],
        )
    }

    /// Unbiased standard deviation over `dims` (empty = all dims).
    pub fn std(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.std_correction(dims, 1.0, keepdim)
    }

    /// Standard deviation with an explicit `correction` (the square root of `var_correction`).
    pub fn std_correction(&self, dims: &[i64], correction: f64, keepdim: bool) -> Result<Tensor> {
        call1(
            &STD,
            &[
                self.into(),
                dims_value(dims),
                correction.into(),
                keepdim.into(),
            ],
        )
    }
}

/// The `(values, indices)` pair of a two-output call.
fn two(mut outs: Vec<Tensor>) -> Result<(Tensor, Tensor)> {
    match (outs.pop(), outs.pop()) {
        (Some(indices), Some(values)) if outs.is_empty() => Ok((values, indices)),
        _ => Err(Error::Autograd(
            "a two-output op returned a different number of tensors".into(),
        )),
    }
}
