//! The extremum reductions: `max`/`min` (of everything), `max_dim`/`min_dim` (values and
//! indices), `amax`/`amin` (over dims) and `argmax`/`argmin`, with their derivatives.
//!
//! They treat NaN as larger (and smaller) than every number, so NaN propagates and its first
//! position is the arg-extremum; ties keep the first occurrence. They have no identity, so
//! reducing over a zero-size dim is a shape error.

use half::{bf16, f16};
use tensorplay_ir::shape::{fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, OpClass, ReduceOp, Result};

use super::args::{
    check_nonempty, dims_args, dims_value, keep_shape, mask_dims, opt_bool, opt_int,
    single_dim_mask,
};
use crate::dispatch::{call, call1};
use crate::element::Element;
use crate::kernels::iter::SendPtr;
use crate::kernels::reduce::{reduced_mask, reduced_shape, reducer};
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::tensor::Tensor;
use crate::value::{Args, Value};
use crate::with_dtype;

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
