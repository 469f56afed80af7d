//! Indexing primitives: `gather`, `scatter`, `scatter_add`, `scatter_reduce`, `flip` and
//! `nonzero`. They move elements by
//! data-dependent (or reversed) positions, which no scalar expression describes, so they are
//! opaque to the compiler: each runs as a barrier node through its eager kernel. The indexing
//! helpers built on them (`index_select`, `masked_fill`, `embedding`…) are composites in
//! `ops/compose.rs` and `nn.rs`.
//!
//! Index tensors are `i64` (PyTorch's rule); an index outside `[0, size)` of its dim is an error
//! naming the op, the value and the size — checked before anything is written.

use tensorplay_ir::shape::{contiguous_strides, fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::index_rows;
use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::element::Element;
use crate::tensor::Tensor;
use crate::value::Args;
use crate::with_dtype;

/// `gather(Tensor self, int dim, Tensor index) -> Tensor`: `out[i][j] = self[index[i][j]][j]`
/// (for `dim = 0`; likewise for every dim).
pub static GATHER: OpDef = OpDef {
    name: "gather",
    schema: "gather(Tensor self, int dim, Tensor index) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: gather_meta,
        fill: gather_fill,
    },
    derivative: Some(gather_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `scatter(Tensor self, int dim, Tensor index, Tensor src) -> Tensor`: a copy of `self` with
/// `out[index[i][j]][j] = src[i][j]` (for `dim = 0`). With repeated indices the last write wins.
pub static SCATTER: OpDef = OpDef {
    name: "scatter",
    schema: "scatter(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: scatter_meta,
        fill: scatter_fill::<false>,
    },
    derivative: Some(scatter_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor`: a copy of `self` with
/// `out[index[i][j]][j] += src[i][j]` (for `dim = 0`), accumulated in index order.
pub static SCATTER_ADD: OpDef = OpDef {
    name: "scatter_add",
    schema: "scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: scatter_meta,
        fill: scatter_fill::<true>,
    },
    derivative: Some(scatter_add_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `scatter_reduce(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool
/// include_self=True) -> Tensor`: a copy of `self` where every `src[i][j]` is combined into
/// `out[index[i][j]][j]` (for `dim = 0`) by `reduce` — `"sum"`, `"prod"`, `"mean"`, `"amax"` or
/// `"amin"`. With `include_self = false` the old value of a position some index reaches takes no
/// part (positions no index reaches keep `self`'s value either way).
pub static SCATTER_REDUCE: OpDef = OpDef {
    name: "scatter_reduce",
    schema: "scatter_reduce(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: scatter_reduce_meta,
        fill: scatter_reduce_fill,
    },
    derivative: Some(scatter_reduce_grad),
    saved: Saved::All,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `nonzero(Tensor self) -> Tensor`: the positions of the nonzero elements (NaN counts as
/// nonzero, `-0.0` as zero) as an int64 `[n, ndim]` tensor, in row-major order. Its size depends
/// on the data, so it has no fake kernel: on fake tensors (and so under capture) it is an error.
pub static NONZERO: OpDef = OpDef {
    name: "nonzero",
    schema: "nonzero(Tensor self) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: nonzero_meta,
        fill: nonzero_fill,
    },
    derivative: None,
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// `flip(Tensor self, int[] dims) -> Tensor`: reverses the order of elements along `dims` (a
/// copy, as in PyTorch).
pub static FLIP: OpDef = OpDef {
    name: "flip",
    schema: "flip(Tensor self, int[] dims) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: flip_meta,
        fill: flip_fill,
    },
    derivative: Some(|c| {
        let dims = c.args.ints(1)?;
        Ok(vec![Some(c.grad(0)?.flip(dims)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &GATHER,
    &SCATTER,
    &SCATTER_ADD,
    &SCATTER_REDUCE,
    &FLIP,
    &NONZERO,
];

/// Calls `f(linear, index)` for every multi-index of `shape` in row-major order.
fn for_each_index(shape: &[usize], mut f: impl FnMut(usize, &[usize]) -> Result<()>) -> Result<()> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let mut idx = vec![0usize; shape.len()];
    for linear in 0..n {
        f(linear, &idx)?;
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

/// The `index` argument: an `i64` (or, as PyTorch 2.15 takes, `i32`) tensor of the same rank as
/// `self`.
fn check_index(op: &str, x: &Tensor, index: &Tensor) -> Result<()> {
    if !matches!(index.dtype(), DType::I64 | DType::I32) {
        return Err(Error::argument(
            op,
            "index",
            "an int64 or int32 tensor",
            format!("dtype {}", index.dtype()),
        ));
    }
    if index.rank() != x.rank() && !(index.rank() <= 1 && x.rank() <= 1) {
        return Err(Error::argument(
            op,
            "index",
            format!("the same number of dims as self ({})", x.rank()),
            format!("{} dims (shape {})", index.rank(), fmt_shape(index.shape())),
        ));
    }
    Ok(())
}

/// The dim of a gather/scatter call (0 for a 0-d `self`).
fn index_dim(a: Args, x: &Tensor) -> Result<usize> {
    normalize_dim(a.op, a.int(1)?, x.rank())
}

/// `index` fits `other` in every dim (but `dim`, when `skip` is set): the rule gather and scatter
/// share for which positions exist.
fn check_fits(
    op: &str,
    index: &Tensor,
    what: &str,
    other: &Tensor,
    skip: Option<usize>,
) -> Result<()> {
    if index.rank() != other.rank() {
        return Ok(());
    }
    for d in 0..index.rank() {
        if Some(d) != skip && index.shape()[d] > other.shape()[d] {
            return Err(Error::shape(
                op,
                format!(
                    "index {} is larger than {what} {} in dim {d}",
                    fmt_shape(index.shape()),
                    fmt_shape(other.shape())
                ),
            ));
        }
    }
    Ok(())
}

/// The index values (row-major), each checked against `size` (the length of the indexed dim).
fn index_values(op: &str, index: &Tensor, dim: usize, size: usize) -> Result<Vec<usize>> {
    let values: Vec<i64> = match index.dtype() {
        DType::I32 => index.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        _ => index.to_vec::<i64>()?,
    };
    values
        .into_iter()
        .map(|i| checked_index(op, i, dim, size))
        .collect()
}

/// Index value `i` as a position along `dim` (of length `size`): `i` itself when it is in
/// `[0, size)`, else an argument error naming `op`, the range and `i` (the general path and
/// the row case, `index_rows`, give the same error).
pub(super) fn checked_index(op: &str, i: i64, dim: usize, size: usize) -> Result<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&u| u < size)
        .ok_or_else(|| {
            Error::argument(
                op,
                "index",
                format!("values in [0, {size}) for dim {dim}"),
                format!("index {i}"),
            )
        })
}

/// `t`'s shape, with a 0-d tensor seen as one element of a 1-d one (PyTorch's rule for the
/// indexing ops).
fn shape1(t: &Tensor) -> Vec<usize> {
    if t.rank() == 0 {
        vec![1]
    } else {
        t.shape().to_vec()
    }
}

/// Writes `values` (row-major) into the fresh output `out`.
fn write_out<T: Element>(op: &str, out: &Tensor, values: Vec<T>) -> Result<()> {
    let src = Tensor::from_vec(values, out.shape())?;
    super::cast::copy_convert(op, out, &src)
}

/// Visits the elements of an `index`-shaped iteration in row-major order, calling
/// `f(self_at, other_at)`: `self_at` is the row-major offset in a tensor of `self_shape` of the
/// element's coordinates with dim `dim` replaced by `at[k]`, `other_at` the
/// offset of its own coordinates in a tensor of `other_shape` (all three shapes of one rank).
/// The inner loop walks the last dim with no per-element index arithmetic beyond two
/// multiply-adds (the gather/scatter hot loop).
fn for_each_indexed(
    index_shape: &[usize],
    (self_shape, other_shape): (&[usize], &[usize]),
    dim: usize,
    at: &[usize],
    mut f: impl FnMut(usize, usize),
) {
    let n: usize = index_shape.iter().product();
    let rank = index_shape.len();
    if n == 0 || rank == 0 {
        return;
    }
    let strides = |shape: &[usize]| -> Vec<usize> {
        contiguous_strides(shape)
            .iter()
            .map(|&s| s as usize)
            .collect()
    };
    let (ss, so) = (strides(self_shape), strides(other_shape));
    let last = rank - 1;
    let len = index_shape[last];
    let mut idx = vec![0usize; last];
    let mut k = 0;
    loop {
        let (mut bs, mut bo) = (0, 0);
        for (d, &i) in idx.iter().enumerate() {
            if d != dim {
                bs += i * ss[d];
            }
            bo += i * so[d];
        }
        let row = &at[k..k + len];
        if dim == last {
            for (j, &a) in row.iter().enumerate() {
                f(bs + a * ss[last], bo + j * so[last]);
            }
        } else {
            for (j, &a) in row.iter().enumerate() {
                f(bs + a * ss[dim] + j * ss[last], bo + j * so[last]);
            }
        }
        k += len;
        // The next row: the odometer over the leading dims.
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < index_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn gather_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, index) = (a.tensor(0)?, a.tensor(2)?);
    index_dim(a, x)?;
    check_index(a.op, x, index)?;
    check_fits(a.op, index, "self", x, Some(index_dim(a, x)?))?;
    Ok(vec![OutSpec::new(index.shape(), x.dtype())])
}

fn gather_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, index) = (a.tensor(0)?, a.tensor(2)?);
    let dim = index_dim(a, x)?;
    let size = if x.rank() == 0 { 1 } else { x.shape()[dim] };
    if index.numel() > 0 && x.numel() == 0 {
        return Err(Error::argument(
            a.op,
            "index",
            "no indices into an empty tensor",
            format!("{} indices", index.numel()),
        ));
    }
    if let Some(rows) = index_rows::row_case(a.op, x, index, dim)?
        && rows.gather(a.op, x, &outs[0])?
    {
        return Ok(());
    }
    let at = index_values(a.op, index, dim, size)?;
    let shapes = (shape1(x), shape1(index));
    with_dtype!(x.dtype(), T => {
        let xs = x.to_vec::<T>()?;
        let mut out = Vec::with_capacity(index.numel());
        for_each_indexed(&shapes.1, (&shapes.0, &shapes.1), dim, &at, |o, _| {
            out.push(xs[o]);
        });
        write_out(a.op, &outs[0], out)
    })
}

fn gather_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, dim, index) = (c.args.tensor(0)?, c.args.int(1)?, c.args.tensor(2)?);
    let g = c.grad(0)?;
    // `zeros_like` stays a graph value under capture (no size baked in).
    let gx = Tensor::zeros_like(x).scatter_add(dim, index, &g)?;
    Ok(vec![Some(gx), None])
}

fn scatter_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, index, src) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
    let dim = index_dim(a, x)?;
    check_index(a.op, x, index)?;
    if src.dtype() != x.dtype() {
        return Err(Error::argument(
            a.op,
            "src",
            format!("the dtype of self ({})", x.dtype()),
            format!("dtype {}", src.dtype()),
        ));
    }
    if src.rank() != x.rank() && !(src.rank() <= 1 && x.rank() <= 1) {
        return Err(Error::argument(
            a.op,
            "src",
            format!("the same number of dims as self ({})", x.rank()),
            format!("{} dims", src.rank()),
        ));
    }
    check_fits(a.op, index, "self", x, Some(dim))?;
    check_fits(a.op, index, "src", src, None)?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

/// `a + b` in `T`: floats round once from the exact f64 sum, integers wrap, bools or.
fn add_elem<T: Element>(a: T, b: T) -> T {
    match T::DTYPE {
        DType::I32 | DType::I64 => T::from_i64(a.to_i64().wrapping_add(b.to_i64())),
        DType::Bool => T::from_bool(a.to_bool() | b.to_bool()),
        _ => T::from_f64(a.to_f64() + b.to_f64()),
    }
}

fn scatter_fill<const ADD: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, index, src) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
    let dim = index_dim(a, x)?;
    let size = if x.rank() == 0 { 1 } else { x.shape()[dim] };
    let at = if x.numel() == 0 && index.numel() > 0 {
        return Err(Error::argument(
            a.op,
            "index",
            "no indices into an empty tensor",
            format!("{} indices", index.numel()),
        ));
    } else {
        if ADD
            && let Some(rows) = index_rows::row_case(a.op, x, index, dim)?
            && rows.scatter_add(a.op, x, src, &outs[0])?
        {
            return Ok(());
        }
        index_values(a.op, index, dim, size)?
    };
    let shapes = (shape1(x), shape1(src));
    with_dtype!(x.dtype(), T => {
        let mut out = x.to_vec::<T>()?;
        let s = src.to_vec::<T>()?;
        for_each_indexed(&shape1(index), (&shapes.0, &shapes.1), dim, &at, |o, i| {
            out[o] = if ADD { add_elem(out[o], s[i]) } else { s[i] };
        });
        write_out(a.op, &outs[0], out)
    })
}

fn scatter_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, dim, index, src) = (
        c.args.tensor(0)?,
        c.args.int(1)?,
        c.args.tensor(2)?,
        c.args.tensor(3)?,
    );
    let g = c.grad(0)?;
    // Overwritten positions get no gradient in self; src gets what reached its destination.
    let gx = if x.requires_grad() {
        let zeros = Tensor::zeros_like(index).to_dtype(g.dtype())?;
        Some(g.scatter(dim, index, &zeros)?)
    } else {
        None
    };
    let gs = src
        .requires_grad()
        .then(|| g.gather(dim, index))
        .transpose()?;
    Ok(vec![gx, None, gs])
}

fn scatter_add_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (dim, index, src) = (c.args.int(1)?, c.args.tensor(2)?, c.args.tensor(3)?);
    let g = c.grad(0)?;
    let gs = src
        .requires_grad()
        .then(|| g.gather(dim, index))
        .transpose()?;
    Ok(vec![Some(g), None, gs])
}

/// The `reduce` argument of `scatter_reduce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduce {
    Sum,
    Prod,
    Mean,
    Amax,
    Amin,
}

/// Parses `reduce` (argument 4) for `x`'s dtype.
fn reduce_arg(a: Args, x: &Tensor) -> Result<Reduce> {
    let got = a.str(4)?;
    let r = match got {
        "sum" => Reduce::Sum,
        "prod" => Reduce::Prod,
        "mean" => Reduce::Mean,
        // "max"/"min": PyTorch's (undocumented) spellings of amax/amin.
        "amax" | "max" => Reduce::Amax,
        "amin" | "min" => Reduce::Amin,
        _ => {
            return Err(Error::argument(
                a.op,
                "reduce",
                "one of \"sum\", \"prod\", \"mean\", \"amax\", \"amin\"",
                format!("{got:?}"),
            ));
        }
    };
    if r == Reduce::Mean && x.dtype() == DType::Bool {
        return Err(Error::argument(
            a.op,
            "self",
            "a numeric tensor for reduce=\"mean\"",
            "dtype bool",
        ));
    }
    Ok(r)
}

fn scatter_reduce_meta(a: Args) -> Result<Vec<OutSpec>> {
    reduce_arg(a, a.tensor(0)?)?;
    a.bool(5)?;
    scatter_meta(a)
}

/// `a` combined with `b` by `r` in `T` (`Mean` sums): floats round once from the exact f64
/// result, integers wrap, bools or (sum, amax) / and (prod, amin). A NaN wins `amax`/`amin`; on
/// a tie (`-0.0` vs `0.0`) the value already there stays.
fn combine<T: Element>(r: Reduce, a: T, b: T) -> T {
    match T::DTYPE {
        DType::I32 | DType::I64 => {
            let (x, y) = (a.to_i64(), b.to_i64());
            T::from_i64(match r {
                Reduce::Sum | Reduce::Mean => x.wrapping_add(y),
                Reduce::Prod => x.wrapping_mul(y),
                Reduce::Amax => x.max(y),
                Reduce::Amin => x.min(y),
            })
        }
        DType::Bool => {
            let (x, y) = (a.to_bool(), b.to_bool());
            T::from_bool(match r {
                Reduce::Sum | Reduce::Mean | Reduce::Amax => x | y,
                Reduce::Prod | Reduce::Amin => x & y,
            })
        }
        _ => {
            let (x, y) = (a.to_f64(), b.to_f64());
            let keep_b = match r {
                Reduce::Sum | Reduce::Mean => return T::from_f64(x + y),
                Reduce::Prod => return T::from_f64(x * y),
                _ if x.is_nan() => false,
                _ if y.is_nan() => true,
                Reduce::Amax => y > x,
                Reduce::Amin => y < x,
            };
            if keep_b { b } else { a }
        }
    }
}

fn scatter_reduce_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (x, index, src) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
    let (r, include_self) = (reduce_arg(a, x)?, a.bool(5)?);
    let dim = index_dim(a, x)?;
    let size = if x.rank() == 0 { 1 } else { x.shape()[dim] };
    if x.numel() == 0 && index.numel() > 0 {
        return Err(Error::argument(
            a.op,
            "index",
            "no indices into an empty tensor",
            format!("{} indices", index.numel()),
        ));
    }
    let at = index_values(a.op, index, dim, size)?;
    let shapes = (shape1(x), shape1(src));
    with_dtype!(x.dtype(), T => {
        let mut out = x.to_vec::<T>()?;
        let s = src.to_vec::<T>()?;
        // How many src values reached each position.
        let mut count = vec![0i64; out.len()];
        for_each_indexed(&shape1(index), (&shapes.0, &shapes.1), dim, &at, |o, i| {
            let v = s[i];
            out[o] = if count[o] == 0 && !include_self { v } else { combine(r, out[o], v) };
            count[o] += 1;
        });
        if r == Reduce::Mean {
            for (v, &c) in out.iter_mut().zip(&count) {
                let n = c + i64::from(include_self);
                if c == 0 || n == 1 {
                    continue;
                }
                *v = match T::DTYPE {
                    // Integer means round toward -inf (PyTorch's floor division).
                    DType::I32 | DType::I64 => T::from_i64(v.to_i64().div_euclid(n)),
                    _ => T::from_f64(v.to_f64() / n as f64),
                };
            }
        }
        write_out(a.op, &outs[0], out)
    })
}

fn scatter_reduce_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, dim, index, src) = (
        c.args.tensor(0)?,
        c.args.int(1)?,
        c.args.tensor(2)?,
        c.args.tensor(3)?,
    );
    let (r, include_self) = (reduce_arg(c.args, x)?, c.args.bool(5)?);
    let g = c.grad(0)?;
    let result = &c.outputs[0];
    // Ones made by ops on a graph value (`zeros_like` + 1), so a traced backward records them
    // (`ones_like` of a fake tensor would be a fresh proxy the tracer does not know).
    let ones = |t: &Tensor| Tensor::zeros_like(t).to_dtype(g.dtype())?.add_scalar(1.0);
    // 0 where some index reaches a position of self, else 1 (in g's dtype).
    let unreached = || -> Result<Tensor> {
        let zeros = Tensor::zeros_like(index).to_dtype(g.dtype())?;
        ones(&g)?.scatter(dim, index, &zeros)
    };
    let (gx, gs) = match r {
        Reduce::Sum => (g.clone(), g.gather(dim, index)?),
        Reduce::Mean => {
            // n = how many values were averaged into each position (1 where none reached it).
            let base = if include_self {
                ones(&g)?
            } else {
                Tensor::zeros_like(&g)
            };
            let n = base.scatter_add(dim, index, &ones(src)?)?;
            let n = n.clamp_min(1.0)?;
            let per = g.div(&n)?;
            (per.clone(), per.gather(dim, index)?)
        }
        Reduce::Amax | Reduce::Amin => {
            // The gradient is shared equally by every value equal to the result.
            let hit = result.gather(dim, index)?;
            let src_is = src.eq(&hit)?.to_dtype(g.dtype())?;
            let mut self_is = x.eq(result)?.to_dtype(g.dtype())?;
            if !include_self {
                // Self's old value took no part where an index reached it.
                self_is = self_is.mul(&unreached()?)?;
            }
            let n = self_is.scatter_add(dim, index, &src_is)?;
            let per = g.div(&n.clamp_min(1.0)?)?;
            (per.mul(&self_is)?, per.gather(dim, index)?.mul(&src_is)?)
        }
        Reduce::Prod => {
            // Each value's gradient is g times the product of the other values met at its
            // position. Zeros are counted apart so no 0/0 appears: with no zero there, that
            // product is result / value; a lone zero gets the product of the nonzero others;
            // with two or more zeros every gradient is 0.
            let dt = g.dtype();
            let scalar = |v: f64| Tensor::try_full(&[], v, dt);
            let (one, zero) = (scalar(1.0)?, scalar(0.0)?);
            let (zx, zs) = (x.eq_scalar(0)?, src.eq_scalar(0)?);
            let x1 = Tensor::where_cond(&zx, &one, x)?;
            let s1 = Tensor::where_cond(&zs, &one, src)?;
            let p = x1.scatter_reduce(dim, index, &s1, "prod", include_self)?;
            // Zeros per position: self's own where it takes part, plus src's.
            let mut base = zx.to_dtype(dt)?;
            if !include_self {
                base = base.mul(&unreached()?)?;
            }
            let nz = base.scatter_add(dim, index, &zs.to_dtype(dt)?)?;
            let share = |is_zero: &Tensor, v1: &Tensor, p: &Tensor, nz: &Tensor| {
                let lone = Tensor::where_cond(&nz.eq_scalar(1.0)?, p, &zero)?;
                let none = Tensor::where_cond(&nz.eq_scalar(0.0)?, &p.div(v1)?, &zero)?;
                Tensor::where_cond(is_zero, &lone, &none)
            };
            let gx = g.mul(&share(&zx, &x1, &p, &nz)?)?;
            let (pg, nzg) = (p.gather(dim, index)?, nz.gather(dim, index)?);
            let gs = g.gather(dim, index)?.mul(&share(&zs, &s1, &pg, &nzg)?)?;
            (gx, gs)
        }
    };
    let gx = if include_self || r == Reduce::Amax || r == Reduce::Amin {
        gx
    } else {
        gx.mul(&unreached()?)?
    };
    Ok(vec![
        x.requires_grad().then_some(gx),
        None,
        src.requires_grad().then_some(gs),
    ])
}

/// The error of an op whose output size depends on the data, met on fake tensors.
pub(crate) fn data_dependent(op: &str) -> Error {
    Error::unsupported(
        op,
        "output size depends on the data; not supported under fake tensors / tp_compile",
    )
}

/// Whether each element of `x` (row-major) is nonzero.
fn nonzero_mask(x: &Tensor) -> Result<Vec<bool>> {
    with_dtype!(x.dtype(), T => {
        Ok(x.to_vec::<T>()?.into_iter().map(|v| match T::DTYPE {
            DType::I32 | DType::I64 => v.to_i64() != 0,
            DType::Bool => v.to_bool(),
            _ => v.to_f64() != 0.0,
        }).collect())
    })
}

fn nonzero_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if x.is_fake() {
        return Err(data_dependent(a.op));
    }
    // A real input: the size is read from the data (which `nonzero_fill` reads again).
    let n = nonzero_mask(x)?.into_iter().filter(|&b| b).count();
    Ok(vec![OutSpec::new(&[n, x.rank()], DType::I64)])
}

fn nonzero_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let mask = nonzero_mask(x)?;
    let mut out = Vec::with_capacity(outs[0].numel());
    for_each_index(x.shape(), |k, idx| {
        if mask[k] {
            out.extend(idx.iter().map(|&i| i as i64));
        }
        Ok(())
    })?;
    // A 0-d input has one (empty) position.
    write_out(a.op, &outs[0], out)
}

/// The flipped dims of a flip call as a mask over `x`'s dims (duplicates are errors).
fn flip_mask(a: Args, x: &Tensor) -> Result<Vec<bool>> {
    let mut mask = vec![false; x.rank()];
    for &d in a.ints(1)? {
        let i = normalize_dim(a.op, d, x.rank())?;
        if x.rank() == 0 {
            continue;
        }
        if mask[i] {
            return Err(Error::argument(
                a.op,
                "dims",
                "distinct dims",
                format!("dim {d} appears twice in {:?}", a.ints(1)?),
            ));
        }
        mask[i] = true;
    }
    Ok(mask)
}

fn flip_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    flip_mask(a, x)?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

fn flip_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let mask = flip_mask(a, x)?;
    let strides = contiguous_strides(x.shape());
    with_dtype!(x.dtype(), T => {
        let xs = x.to_vec::<T>()?;
        let mut out = Vec::with_capacity(xs.len());
        for_each_index(x.shape(), |_, idx| {
            let o: usize = idx
                .iter()
                .enumerate()
                .map(|(d, &i)| {
                    let i = if mask[d] { x.shape()[d] - 1 - i } else { i };
                    i * strides[d] as usize
                })
                .sum();
            out.push(xs[o]);
            Ok(())
        })?;
        write_out(a.op, &outs[0], out)
    })
}

impl Tensor {
    /// Picks values along `dim` by `index` (int64, same rank as `self`): for `dim = 1`,
    /// `out[i][j] = self[i][index[i][j]]`. The result has `index`'s shape.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 0, 0, 0], &[2, 2])?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![2.0, 1.0, 3.0, 3.0]);
    /// assert!(x.gather(1, &Tensor::from_vec(vec![2i64], &[1, 1])?).is_err()); // out of range
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn gather(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        call1(&GATHER, &[self.into(), dim.into(), index.into()])
    }

    /// A copy of `self` with `src`'s values written at `index` along `dim` (the inverse of
    /// [`Tensor::gather`]); with repeated indices the last write wins.
    pub fn scatter(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        call1(
            &SCATTER,
            &[self.into(), dim.into(), index.into(), src.into()],
        )
    }

    /// A copy of `self` with `src`'s values added at `index` along `dim`.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let i = Tensor::from_vec(vec![0i64, 2, 0], &[3])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let y = Tensor::zeros(&[3], DType::F32).scatter_add(0, &i, &src)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.0, 0.0, 2.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn scatter_add(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        call1(
            &SCATTER_ADD,
            &[self.into(), dim.into(), index.into(), src.into()],
        )
    }

    /// A copy of `self` with every `src` value combined into the position `index` names along
    /// `dim` by `reduce`: `"sum"`, `"prod"`, `"mean"` (integers floor), `"amax"` or `"amin"`
    /// (a NaN wins; `"max"`/`"min"` are PyTorch's aliases of these). With `include_self = false`, a position's old value takes no part when some
    /// index reaches it. Differentiable for every reduce (`"prod"` handles zeros exactly).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], &[3])?;
    /// let i = Tensor::from_vec(vec![0i64, 0, 2], &[3])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 5.0, 2.0], &[3])?;
    /// let y = x.scatter_reduce(0, &i, &src, "amax", false)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 20.0, 2.0]);
    /// let m = x.scatter_reduce(0, &i, &src, "mean", true)?;
    /// assert_eq!(m.to_vec::<f32>()?, vec![16.0 / 3.0, 20.0, 16.0]);
    /// assert!(x.scatter_reduce(0, &i, &src, "maximum", true).is_err()); // unknown reduce
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn scatter_reduce(
        &self,
        dim: i64,
        index: &Tensor,
        src: &Tensor,
        reduce: &str,
        include_self: bool,
    ) -> Result<Tensor> {
        call1(
            &SCATTER_REDUCE,
            &[
                self.into(),
                dim.into(),
                index.into(),
                src.into(),
                reduce.into(),
                include_self.into(),
            ],
        )
    }

    /// The positions of `self`'s nonzero elements as an int64 `[n, ndim]` tensor, row-major
    /// (`torch.nonzero`). NaN is nonzero, `-0.0` is zero. The size depends on the data, so on
    /// fake tensors and under `tp_compile` capture it is an error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f32, 1.5, 0.0, -2.0], &[2, 2])?;
    /// let nz = x.nonzero()?;
    /// assert_eq!(nz.shape(), &[2, 2]);
    /// assert_eq!(nz.to_vec::<i64>()?, vec![0, 1, 1, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn nonzero(&self) -> Result<Tensor> {
        call1(&NONZERO, &[self.into()])
    }

    /// Reverses the element order along `dims` (a copy).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<i64>()?, vec![3, 2, 1, 6, 5, 4]);
    /// assert_eq!(x.flip(&[0, -1])?.to_vec::<i64>()?, vec![6, 5, 4, 3, 2, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn flip(&self, dims: &[i64]) -> Result<Tensor> {
        call1(&FLIP, &[self.into(), dims.to_vec().into()])
    }
}
