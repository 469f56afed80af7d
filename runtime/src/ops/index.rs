//! Indexing primitives: `gather`, `scatter`, `scatter_add` and `flip`. They move elements by
//! data-dependent (or reversed) positions, which no scalar expression describes, so they are
//! opaque to the compiler: each runs as a barrier node through its eager kernel. The indexing
//! helpers built on them (`index_select`, `masked_fill`, `embedding`…) are composites in
//! `ops/compose.rs` and `nn.rs`.
//!
//! Index tensors are `i64` (PyTorch's rule); an index outside `[0, size)` of its dim is an error
//! naming the op, the value and the size — checked before anything is written.

use tensorplay_ir::shape::{contiguous_strides, fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, OpClass, Result};

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
pub static OPS: &[&OpDef] = &[&GATHER, &SCATTER, &SCATTER_ADD, &FLIP];

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

/// The `index` argument: an `i64` tensor of the same rank as `self`.
fn check_index(op: &str, x: &Tensor, index: &Tensor) -> Result<()> {
    if index.dtype() != DType::I64 {
        return Err(Error::argument(
            op,
            "index",
            "an int64 tensor",
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
    index
        .to_vec::<i64>()?
        .into_iter()
        .map(|i| {
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
        })
        .collect()
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

/// Element offset (row-major, into a tensor with `strides`) of `idx` with dim `dim` replaced by
/// `at`.
fn offset_with(idx: &[usize], strides: &[isize], dim: usize, at: usize) -> usize {
    idx.iter()
        .zip(strides)
        .enumerate()
        .map(|(d, (&i, &s))| if d == dim { at } else { i } * s as usize)
        .sum()
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
    let at = index_values(a.op, index, dim, size)?;
    let strides = contiguous_strides(&shape1(x));
    with_dtype!(x.dtype(), T => {
        let xs = x.to_vec::<T>()?;
        let mut out = Vec::with_capacity(index.numel());
        for_each_index(&shape1(index), |k, idx| {
            out.push(xs[offset_with(idx, &strides, dim, at[k])]);
            Ok(())
        })?;
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
        index_values(a.op, index, dim, size)?
    };
    let x_strides = contiguous_strides(&shape1(x));
    let src_strides = contiguous_strides(&shape1(src));
    with_dtype!(x.dtype(), T => {
        let mut out = x.to_vec::<T>()?;
        let s = src.to_vec::<T>()?;
        for_each_index(&shape1(index), |k, idx| {
            let o = offset_with(idx, &x_strides, dim, at[k]);
            let v = s[offset_with(idx, &src_strides, usize::MAX, 0)];
            out[o] = if ADD { add_elem(out[o], v) } else { v };
            Ok(())
        })?;
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
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![1i64, 0, 0, 0], &[2, 2])?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![2.0, 1.0, 3.0, 3.0]);
    /// assert!(x.gather(1, &Tensor::from_vec(vec![2i64], &[1, 1])?).is_err()); // out of range
    /// # Ok::<(), tensorplay_runtime::Error>(())
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
    /// use tensorplay_runtime::{DType, Tensor};
    /// let i = Tensor::from_vec(vec![0i64, 2, 0], &[3])?;
    /// let src = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let y = Tensor::zeros(&[3], DType::F32).scatter_add(0, &i, &src)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.0, 0.0, 2.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn scatter_add(&self, dim: i64, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        call1(
            &SCATTER_ADD,
            &[self.into(), dim.into(), index.into(), src.into()],
        )
    }

    /// Reverses the element order along `dims` (a copy).
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.flip(&[1])?.to_vec::<i64>()?, vec![3, 2, 1, 6, 5, 4]);
    /// assert_eq!(x.flip(&[0, -1])?.to_vec::<i64>()?, vec![6, 5, 4, 3, 2, 1]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn flip(&self, dims: &[i64]) -> Result<Tensor> {
        call1(&FLIP, &[self.into(), dims.to_vec().into()])
    }
}
