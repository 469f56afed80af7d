//! View ops: new shape/strides/offset over the same storage, no data touched (so they work on fake
//! tensors unchanged). `reshape`, `squeeze`, `unsqueeze`, `flatten` and `select` are methods
//! composed from these.

use smallvec::SmallVec;
use tensorplay_ir::shape::{contiguous_strides, fmt_shape, normalize_dim, numel};
use tensorplay_ir::{Error, OpClass, Result, Shape, Strides};

use super::{AutocastPolicy, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::symint::SymInt;
use crate::tensor::{Tensor, checked_nbytes};
use crate::value::{Args, Value};

/// Element count of a shape that passed [`checked_nbytes`] (zero-size dims short-circuit).
fn shape_numel(shape: &[usize]) -> usize {
    if shape.contains(&0) { 0 } else { numel(shape) }
}

/// A Rust shape as the schema's `SymInt[]`. A size above `i64::MAX` is an error naming the size
/// the caller gave (a plain cast would turn `usize::MAX` into `-1`, "infer this dim").
/// Plain sizes as `SymInt`s; a size past `i64::MAX` is an error naming it.
fn sym_list(op: &str, shape: &[usize]) -> Result<Vec<SymInt>> {
    shape
        .iter()
        .map(|&s| {
            i64::try_from(s).map(SymInt::Lit).map_err(|_| {
                Error::argument(
                    op,
                    "size",
                    "sizes of at most i64::MAX",
                    format!("size {s} in {}", fmt_shape(shape)),
                )
            })
        })
        .collect()
}

/// `view(Tensor(a) self, SymInt[] size) -> Tensor(a)`: same data, new shape (must be viewable).
pub static VIEW: OpDef = OpDef {
    name: "view",
    schema: "view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    class: OpClass::View,
    kernel: Kernel::View(view_kernel),
    derivative: Some(|c| {
        // Symbolic sizes under a traced backward, so the graph serves other sizes.
        let x = c.args.tensor(0)?;
        Ok(vec![Some(c.grad(0)?.reshape_sym(&x.sym_shape())?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::View,
};

/// `permute(Tensor(a) self, int[] dims) -> Tensor(a)`
pub static PERMUTE: OpDef = OpDef {
    name: "permute",
    schema: "permute(Tensor(a) self, int[] dims) -> Tensor(a)",
    class: OpClass::View,
    kernel: Kernel::View(permute_kernel),
    derivative: Some(|c| {
        let x = c.args.tensor(0)?;
        let perm = permutation(c.args.op, c.args.ints(1)?, x.rank())?;
        let mut inverse = vec![0i64; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i as i64;
        }
        Ok(vec![Some(c.grad(0)?.permute(&inverse)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Permute,
};

/// `expand(Tensor(a) self, SymInt[] size) -> Tensor(a)`: broadcast view (stride 0 along new dims).
pub static EXPAND: OpDef = OpDef {
    name: "expand",
    schema: "expand(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    class: OpClass::View,
    kernel: Kernel::View(expand_kernel),
    derivative: Some(|c| {
        let x = c.args.tensor(0)?;
        Ok(vec![Some(c.grad(0)?.sum_to_shape_of(x)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Expand,
};

/// `slice(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) ->
/// Tensor(a)`: Python-style slicing along one dim (negative and out-of-range bounds clamp).
pub static SLICE: OpDef = OpDef {
    name: "slice",
    schema: "slice(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
    class: OpClass::View,
    kernel: Kernel::View(slice_kernel),
    derivative: Some(|c| {
        let x = c.args.tensor(0)?;
        let dim = match c.args.values.get(1) {
            None => 0,
            Some(_) => c.args.int(1)?,
        };
        let (start, end, step) = slice_bounds_args(c.args, 2)?;
        let opt = |v: Option<i64>| v.map_or(Value::None, Value::Int);
        let args = [
            Value::Tensor(c.grad(0)?),
            Value::IntList(x.shape().iter().map(|&s| s as i64).collect()),
            Value::Int(dim),
            opt(start),
            opt(end),
            Value::Int(step),
        ];
        Ok(vec![Some(call1(&SLICE_BACKWARD, &args)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Slice,
};

/// `slice_backward(Tensor grad, SymInt[] input_sizes, int dim, SymInt? start, SymInt? end, SymInt
/// step) -> Tensor`: zeros of `input_sizes` with `grad` written into the slice.
pub static SLICE_BACKWARD: OpDef = OpDef {
    name: "slice_backward",
    schema: "slice_backward(Tensor grad, SymInt[] input_sizes, int dim, SymInt? start, SymInt? end, SymInt step) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: slice_backward_meta,
        fill: slice_backward_fill,
    },
    derivative: Some(|c| {
        let g = c.grad(0)?;
        let dim = c.args.int(2)?;
        let (start, end, step) = slice_bounds_args(c.args, 3)?;
        Ok(vec![Some(g.slice(dim, start, end, step)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::SliceBackward,
};

/// `diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)`: the diagonal
/// of the `(dim1, dim2)` planes as a strided view; both dims are removed and the diagonal is
/// appended as the last dim. `offset > 0` is above the main diagonal, `< 0` below.
pub static DIAGONAL: OpDef = OpDef {
    name: "diagonal",
    schema: "diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)",
    class: OpClass::View,
    kernel: Kernel::View(diagonal_kernel),
    derivative: Some(|c| {
        let x = c.args.tensor(0)?;
        let (offset, dim1, dim2) = diagonal_args(c.args)?;
        let args = [
            Value::Tensor(c.grad(0)?),
            Value::IntList(x.shape().iter().map(|&s| s as i64).collect()),
            Value::Int(offset),
            Value::Int(dim1),
            Value::Int(dim2),
        ];
        Ok(vec![Some(call1(&DIAGONAL_BACKWARD, &args)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Diagonal,
};

/// `diagonal_backward(Tensor grad, SymInt[] input_sizes, int offset, int dim1, int dim2) ->
/// Tensor`: zeros of `input_sizes` with `grad` written into the diagonal.
pub static DIAGONAL_BACKWARD: OpDef = OpDef {
    name: "diagonal_backward",
    schema: "diagonal_backward(Tensor grad, SymInt[] input_sizes, int offset, int dim1, int dim2) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: diagonal_backward_meta,
        fill: diagonal_backward_fill,
    },
    derivative: Some(|c| {
        let g = c.grad(0)?;
        let (offset, dim1, dim2) = (c.args.int(2)?, c.args.int(3)?, c.args.int(4)?);
        Ok(vec![Some(g.diagonal(offset, dim1, dim2)?)])
    }),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every view op.
pub static OPS: &[&OpDef] = &[
    &VIEW,
    &PERMUTE,
    &EXPAND,
    &SLICE,
    &SLICE_BACKWARD,
    &DIAGONAL,
    &DIAGONAL_BACKWARD,
];

fn to_usizes(op: &str, arg: &str, v: &[i64]) -> Result<Shape> {
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| Error::argument(op, arg, "non-negative sizes", format!("{v:?}")))
        })
        .collect()
}

/// Strides that let `shape`/`strides` be read as `new_shape` without copying, if any exist.
pub(crate) fn view_strides(
    shape: &[usize],
    strides: &[isize],
    new_shape: &[usize],
) -> Option<Strides> {
    if numel(shape) <= 1 || shape.is_empty() {
        return Some(contiguous_strides(new_shape));
    }
    let mut out: Strides = SmallVec::from_elem(0, new_shape.len());
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_stride = *strides.last().unwrap();
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..shape.len()).rev() {
        tensor_numel *= shape[d];
        // A chunk ends where the next-outer dim does not continue this one contiguously.
        let chunk_ends =
            d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel as isize * chunk_stride);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                out[view_d as usize] = view_numel as isize * chunk_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_stride = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

fn view_kernel(a: Args) -> Result<Vec<Tensor>> {
    let x = a.tensor(0)?;
    let shape = to_usizes(a.op, "size", a.ints(1)?)?;
    checked_nbytes(a.op, &shape, x.dtype())?;
    if shape_numel(&shape) != x.numel() {
        return Err(Error::shape(
            a.op,
            format!(
                "shape {} is invalid for input of size {} (shape {})",
                fmt_shape(&shape),
                x.numel(),
                fmt_shape(x.shape())
            ),
        ));
    }
    let strides = view_strides(x.shape(), x.strides(), &shape).ok_or_else(|| {
        Error::shape(
            a.op,
            format!(
                "cannot view {} with strides {:?} as {} without a copy; use reshape()",
                fmt_shape(x.shape()),
                x.strides(),
                fmt_shape(&shape)
            ),
        )
    })?;
    Ok(vec![x.alias_with(shape, strides, x.storage_offset())])
}

/// Validates a permutation of `0..rank` (negative entries allowed).
fn permutation(op: &str, dims: &[i64], rank: usize) -> Result<SmallVec<[usize; 6]>> {
    if dims.len() != rank {
        return Err(Error::argument(
            op,
            "dims",
            format!("{rank} dims (one per dimension of the rank-{rank} input)"),
            format!("{} dims {dims:?}", dims.len()),
        ));
    }
    let mut seen: SmallVec<[bool; 6]> = SmallVec::from_elem(false, rank);
    let mut perm = SmallVec::new();
    for &d in dims {
        let i = normalize_dim(op, d, rank)?;
        if seen[i] {
            return Err(Error::argument(
                op,
                "dims",
                "a permutation",
                format!("{dims:?} repeats dim {d}"),
            ));
        }
        seen[i] = true;
        perm.push(i);
    }
    Ok(perm)
}

fn permute_kernel(a: Args) -> Result<Vec<Tensor>> {
    let x = a.tensor(0)?;
    let perm = permutation(a.op, a.ints(1)?, x.rank())?;
    let shape = perm.iter().map(|&p| x.shape()[p]).collect();
    let strides = perm.iter().map(|&p| x.strides()[p]).collect();
    Ok(vec![x.alias_with(shape, strides, x.storage_offset())])
}

fn expand_kernel(a: Args) -> Result<Vec<Tensor>> {
    let x = a.tensor(0)?;
    let target = a.ints(1)?;
    if target.len() < x.rank() {
        return Err(Error::shape(
            a.op,
            format!(
                "cannot expand {} (rank {}) to {target:?} of the lower rank {}",
                fmt_shape(x.shape()),
                x.rank(),
                target.len()
            ),
        ));
    }
    let lead = target.len() - x.rank();
    let mut shape: Shape = SmallVec::with_capacity(target.len());
    let mut strides: Strides = SmallVec::with_capacity(target.len());
    for (i, &t) in target.iter().enumerate() {
        let (size, stride) = if i < lead {
            (t, 0)
        } else {
            let (d, s) = (x.shape()[i - lead], x.strides()[i - lead]);
            match t {
                -1 => (d as i64, s),
                t if t == d as i64 => (t, s),
                t if d == 1 && t >= 0 => (t, 0),
                _ => {
                    return Err(Error::shape(
                        a.op,
                        format!(
                            "cannot expand {} to {target:?} (dim {i}: {d} vs {t})",
                            fmt_shape(x.shape())
                        ),
                    ));
                }
            }
        };
        if size < 0 {
            return Err(Error::argument(
                a.op,
                "size",
                "non-negative sizes (or -1 for existing dims)",
                format!("{target:?}"),
            ));
        }
        shape.push(size as usize);
        strides.push(stride);
    }
    checked_nbytes(a.op, &shape, x.dtype())?;
    Ok(vec![x.alias_with(shape, strides, x.storage_offset())])
}

/// `(start, end, step)` from args `i..i+3` with Python defaults.
fn slice_bounds_args(a: Args, i: usize) -> Result<(Option<i64>, Option<i64>, i64)> {
    let opt = |k: usize| -> Result<Option<i64>> {
        match a.values.get(k) {
            None | Some(Value::None) => Ok(None),
            _ => a.int(k).map(Some),
        }
    };
    let step = match a.values.get(i + 2) {
        None => 1,
        Some(_) => a.int(i + 2)?,
    };
    Ok((opt(i)?, opt(i + 1)?, step))
}

/// Clamped `(start, len)` of a Python slice over a dim of `size`.
fn slice_range(
    op: &str,
    size: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<(usize, usize)> {
    if step <= 0 {
        return Err(Error::argument(
            op,
            "step",
            "a positive step",
            step.to_string(),
        ));
    }
    let n = size as i64;
    let clamp = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
    let s = clamp(start.unwrap_or(0));
    let e = clamp(end.unwrap_or(n)).max(s);
    // ceil((e - s) / step) without overflowing for huge steps.
    let len = if e > s { (e - s - 1) / step + 1 } else { 0 };
    Ok((s as usize, len as usize))
}

fn slice_kernel(a: Args) -> Result<Vec<Tensor>> {
    let x = a.tensor(0)?;
    let dim = normalize_dim(a.op, a.values.get(1).map_or(Ok(0), |_| a.int(1))?, x.rank())?;
    if x.rank() == 0 {
        return Err(Error::shape(a.op, "cannot slice a 0-d tensor"));
    }
    let (start, end, step) = slice_bounds_args(a, 2)?;
    let (s, len) = slice_range(a.op, x.shape()[dim], start, end, step)?;
    let mut shape: Shape = x.shape().into();
    let mut strides: Strides = x.strides().into();
    shape[dim] = len;
    // An empty slice keeps the base offset: `s` may be one past the end of the dim.
    let offset = if len == 0 || x.numel() == 0 {
        x.storage_offset()
    } else {
        (x.storage_offset() as isize + s as isize * strides[dim]) as usize
    };
    // With at most one element the stride is never used; otherwise `step < size` keeps the
    // product in range.
    if len > 1 {
        strides[dim] *= step as isize;
    }
    Ok(vec![x.alias_with(shape, strides, offset)])
}

fn slice_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = a.tensor(0)?;
    let shape = to_usizes(a.op, "input_sizes", a.ints(1)?)?;
    checked_nbytes(a.op, &shape, g.dtype())?;
    if shape.is_empty() {
        return Err(Error::shape(a.op, "cannot slice a 0-d tensor"));
    }
    let dim = normalize_dim(a.op, a.int(2)?, shape.len())?;
    let (start, end, step) = slice_bounds_args(a, 3)?;
    let (_, len) = slice_range(a.op, shape[dim], start, end, step)?;
    let mut window = shape.clone();
    window[dim] = len;
    if g.shape() != window.as_slice() {
        return Err(Error::shape(
            a.op,
            format!(
                "grad has shape {}, but slicing input_sizes {} gives {}",
                fmt_shape(g.shape()),
                fmt_shape(&shape),
                fmt_shape(&window)
            ),
        ));
    }
    Ok(vec![OutSpec::new(&shape, g.dtype())])
}

fn slice_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    super::inplace::fill_scalar(a.op, out, crate::value::Scalar::Int(0))?;
    let mut args: Vec<Value> = a.values.to_vec();
    args.remove(1);
    args[0] = Value::Tensor(out.clone());
    let window = slice_kernel(Args::new(a.op, &args))?.remove(0);
    window.expect_shape(a.op, "grad", a.tensor(0)?.shape())?;
    super::cast::copy_convert(a.op, &window, a.tensor(0)?)
}

/// `(offset, dim1, dim2)` of a `diagonal` call, with the schema's defaults.
fn diagonal_args(a: Args) -> Result<(i64, i64, i64)> {
    let at = |i: usize, default: i64| match a.values.get(i) {
        None => Ok(default),
        Some(_) => a.int(i),
    };
    Ok((at(1, 0)?, at(2, 0)?, at(3, 1)?))
}

/// The diagonal's layout in a tensor of `shape`/`strides`: the two normalised dims, its length
/// and the element offset of its first entry (relative to the tensor's own offset).
fn diagonal_layout(
    op: &str,
    shape: &[usize],
    offset: i64,
    dim1: i64,
    dim2: i64,
) -> Result<(usize, usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::argument(
            op,
            "self",
            "a tensor with at least 2 dims",
            format!("shape {}", fmt_shape(shape)),
        ));
    }
    let d1 = normalize_dim(op, dim1, shape.len())?;
    let d2 = normalize_dim(op, dim2, shape.len())?;
    if d1 == d2 {
        return Err(Error::argument(
            op,
            "dim2",
            format!("a dim other than dim1 ({dim1})"),
            dim2.to_string(),
        ));
    }
    let (n1, n2) = (shape[d1] as i64, shape[d2] as i64);
    // Saturating: an offset far outside the plane gives an empty diagonal.
    let len = if offset >= 0 {
        n1.min(n2.saturating_sub(offset))
    } else {
        n1.saturating_add(offset).min(n2)
    };
    Ok((d1, d2, len.max(0) as usize))
}

fn diagonal_kernel(a: Args) -> Result<Vec<Tensor>> {
    let x = a.tensor(0)?;
    let (offset, dim1, dim2) = diagonal_args(a)?;
    let (d1, d2, len) = diagonal_layout(a.op, x.shape(), offset, dim1, dim2)?;
    let (s1, s2) = (x.strides()[d1], x.strides()[d2]);
    let mut shape: Shape = SmallVec::new();
    let mut strides: Strides = SmallVec::new();
    for (i, (&n, &st)) in x.shape().iter().zip(x.strides()).enumerate() {
        if i != d1 && i != d2 {
            shape.push(n);
            strides.push(st);
        }
    }
    shape.push(len);
    strides.push(s1 + s2);
    // An empty diagonal keeps the base offset (the start may lie outside the plane).
    let start = if len == 0 || x.numel() == 0 {
        x.storage_offset()
    } else if offset >= 0 {
        (x.storage_offset() as isize + offset as isize * s2) as usize
    } else {
        (x.storage_offset() as isize - offset as isize * s1) as usize
    };
    Ok(vec![x.alias_with(shape, strides, start)])
}

fn diagonal_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = a.tensor(0)?;
    let shape = to_usizes(a.op, "input_sizes", a.ints(1)?)?;
    checked_nbytes(a.op, &shape, g.dtype())?;
    let (offset, dim1, dim2) = (a.int(2)?, a.int(3)?, a.int(4)?);
    let (d1, d2, len) = diagonal_layout(a.op, &shape, offset, dim1, dim2)?;
    let mut want: Shape = shape
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != d1 && i != d2)
        .map(|(_, &n)| n)
        .collect();
    want.push(len);
    if g.shape() != want.as_slice() {
        return Err(Error::shape(
            a.op,
            format!(
                "grad has shape {}, but the diagonal of input_sizes {} has shape {}",
                fmt_shape(g.shape()),
                fmt_shape(&shape),
                fmt_shape(&want)
            ),
        ));
    }
    Ok(vec![OutSpec::new(&shape, g.dtype())])
}

fn diagonal_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let out = &outs[0];
    super::inplace::fill_scalar(a.op, out, crate::value::Scalar::Int(0))?;
    let args = [
        Value::Tensor(out.clone()),
        Value::Int(a.int(2)?),
        Value::Int(a.int(3)?),
        Value::Int(a.int(4)?),
    ];
    let window = diagonal_kernel(Args::new(a.op, &args))?.remove(0);
    window.expect_shape(a.op, "grad", a.tensor(0)?.shape())?;
    super::cast::copy_convert(a.op, &window, a.tensor(0)?)
}

impl Tensor {
    /// The diagonal of the `(dim1, dim2)` planes as a view (`torch.diagonal`): `dim1` and `dim2`
    /// are removed and the diagonal becomes the last dim. `offset > 0` picks a diagonal above
    /// the main one, `offset < 0` one below; an offset past the plane gives an empty diagonal.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3])?;
    /// assert_eq!(x.diagonal(0, 0, 1)?.to_vec::<f32>()?, vec![0.0, 4.0]);
    /// assert_eq!(x.diagonal(1, 0, 1)?.to_vec::<f32>()?, vec![1.0, 5.0]);
    /// assert_eq!(x.diagonal(-1, 0, 1)?.to_vec::<f32>()?, vec![3.0]);
    /// assert_eq!(x.diagonal(0, 1, 0)?.to_vec::<f32>()?, vec![0.0, 4.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn diagonal(&self, offset: i64, dim1: i64, dim2: i64) -> Result<Tensor> {
        call1(
            &DIAGONAL,
            &[self.into(), offset.into(), dim1.into(), dim2.into()],
        )
    }

    /// A view with a new shape; errors when the strides do not allow one (see [`Tensor::reshape`]).
    pub fn view(&self, shape: &[usize]) -> Result<Tensor> {
        self.view_sym(&sym_list("view", shape)?)
    }

    /// [`Tensor::view`] with sizes that may be symbolic ([`SymInt`]s from
    /// [`Tensor::sym_size`]): under capture the graph records the expressions.
    pub fn view_sym(&self, shape: &[SymInt]) -> Result<Tensor> {
        call1(&VIEW, &[self.into(), Value::sym_int_list(shape.to_vec())])
    }

    /// Same data with a new shape: a view when possible, otherwise a contiguous copy.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0, tensorplay_core::DType::F32)?;
    /// let y = x.reshape(&[2, 3])?.t()?.reshape(&[6])?; // the transpose forces a copy
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        self.reshape_concrete(shape)
    }

    /// [`Tensor::reshape`] with sizes that may be symbolic. With symbolic sizes (only under
    /// capture) it records a contiguous copy and a view of it: whether the input's layout allows
    /// a view can depend on the sizes — and a tangent's layout on the caller — so the example's
    /// layout cannot decide it without guarding the shape. The copy fuses into the region that
    /// computes the input (no extra pass then); [`Tensor::view_sym`] skips it where the input is
    /// known to be viewable.
    pub fn reshape_sym(&self, sizes: &[SymInt]) -> Result<Tensor> {
        if sizes.iter().all(|s| !s.is_symbolic()) {
            let plain: Vec<usize> = sizes
                .iter()
                .map(|s| usize::try_from(s.hint()).unwrap_or(usize::MAX))
                .collect();
            return self.reshape_concrete(&plain);
        }
        let hints: Vec<i64> = sizes.iter().map(|s| s.hint()).collect();
        let numel = sizes.iter().fold(SymInt::Lit(1), |a, &b| a * b);
        if numel != self.sym_numel() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "shape {} is invalid for input of size {} (shape {})",
                    fmt_shape(&hints),
                    self.sym_numel().hint(),
                    fmt_shape(
                        &self
                            .sym_shape()
                            .iter()
                            .map(|s| s.hint())
                            .collect::<Vec<_>>()
                    )
                ),
            ));
        }
        self.clone_tensor()?.view_sym(sizes)
    }

    fn reshape_concrete(&self, shape: &[usize]) -> Result<Tensor> {
        checked_nbytes("reshape", shape, self.dtype())?;
        if shape_numel(shape) != self.numel() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "shape {} is invalid for input of size {} (shape {})",
                    fmt_shape(shape),
                    self.numel(),
                    fmt_shape(self.shape())
                ),
            ));
        }
        if view_strides(self.shape(), self.strides(), shape).is_none() {
            return self.contiguous()?.view(shape);
        }
        self.view(shape)
    }

    /// Like [`Tensor::reshape`], with one dim given as `-1` and inferred.
    pub fn reshape_infer(&self, shape: &[i64]) -> Result<Tensor> {
        let bad = |why: &str| {
            Error::shape(
                "reshape",
                format!(
                    "shape {} is invalid for input of size {} (shape {}): {why}",
                    fmt_shape(shape),
                    self.numel(),
                    fmt_shape(self.shape())
                ),
            )
        };
        let holes = shape.iter().filter(|&&d| d == -1).count();
        if holes > 1 {
            return Err(bad("only one dim can be -1"));
        }
        if shape.iter().any(|&d| d < -1) {
            return Err(bad("sizes must be non-negative (or -1 to infer one)"));
        }
        let known = shape
            .iter()
            .filter(|&&d| d != -1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(|| bad("the product of the sizes overflows"))?;
        let n = self.numel() as u64;
        let resolved: Vec<usize> = if holes == 1 {
            if known == 0 {
                return Err(bad("the -1 dim is ambiguous when another dim is 0"));
            }
            if !n.is_multiple_of(known) {
                return Err(bad("the other dims do not divide the element count"));
            }
            shape
                .iter()
                .map(|&d| {
                    if d == -1 {
                        (n / known) as usize
                    } else {
                        d as usize
                    }
                })
                .collect()
        } else {
            shape.iter().map(|&d| d as usize).collect()
        };
        self.reshape(&resolved)
    }

    /// Reorders dims: output dim `i` is input dim `dims[i]`.
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        call1(&PERMUTE, &[self.into(), dims.to_vec().into()])
    }

    /// Swaps two dims.
    pub fn transpose(&self, dim0: i64, dim1: i64) -> Result<Tensor> {
        let rank = self.rank();
        let d0 = normalize_dim("transpose", dim0, rank)?;
        let d1 = normalize_dim("transpose", dim1, rank)?;
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        if rank > 0 {
            perm.swap(d0, d1);
        }
        self.permute(&perm)
    }

    /// Transpose of a 1-D or 2-D tensor.
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(Error::shape(
                "t",
                format!(
                    "expects a tensor with <= 2 dims, got rank {r} (shape {})",
                    fmt_shape(self.shape())
                ),
            )),
        }
    }

    /// Broadcasts to `shape` without copying (new leading dims and size-1 dims stretch).
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand_sym(&sym_list("expand", shape)?)
    }

    /// [`Tensor::expand`] with sizes that may be symbolic.
    pub fn expand_sym(&self, shape: &[SymInt]) -> Result<Tensor> {
        call1(&EXPAND, &[self.into(), Value::sym_int_list(shape.to_vec())])
    }

    /// Same as [`Tensor::expand`].
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand(shape)
    }

    /// Python-style slice `start:end:step` along `dim`.
    pub fn slice(
        &self,
        dim: i64,
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    ) -> Result<Tensor> {
        let opt = |v: Option<i64>| v.map_or(Value::None, Value::Int);
        call1(
            &SLICE,
            &[self.into(), dim.into(), opt(start), opt(end), step.into()],
        )
    }

    /// `len` elements of `dim` starting at `start` (a view). `start` and `len` may be symbolic
    /// (`x.narrow(0, 1, x.sym_size(0)? - 1)` stays size-generic under compile).
    pub fn narrow(
        &self,
        dim: i64,
        start: impl Into<SymInt>,
        len: impl Into<SymInt>,
    ) -> Result<Tensor> {
        let (start, len) = (start.into(), len.into());
        let d = normalize_dim("narrow", dim, self.rank())?;
        let size = if self.rank() == 0 {
            SymInt::Lit(0)
        } else {
            self.sym_size(d as i64)?
        };
        if start < 0 || len < 0 {
            return Err(Error::argument(
                "narrow",
                if start < 0 { "start" } else { "length" },
                "a non-negative integer",
                format!("{}", if start < 0 { start } else { len }.hint()),
            ));
        }
        for (name, v) in [("start", start), ("length", len)] {
            // A `usize` past i64::MAX saturates on conversion: say so rather than print the
            // saturated value as if it were the one given.
            if v.as_literal() == Some(i64::MAX) {
                return Err(Error::shape(
                    "narrow",
                    format!(
                        "{name} is at least {} (the value given overflowed i64), past the end of \
                         dim {dim} of size {}",
                        i64::MAX,
                        size.hint()
                    ),
                ));
            }
        }
        let end = start + len;
        if end > size {
            let end_text = match end.as_literal() {
                Some(i64::MAX) => "overflows i64".to_string(),
                _ => format!("= {}", end.hint()),
            };
            return Err(Error::shape(
                "narrow",
                format!(
                    "start {} + length {} {end_text}, past the end of dim {dim} of size {}",
                    start.hint(),
                    len.hint(),
                    size.hint()
                ),
            ));
        }
        call1(
            &SLICE,
            &[
                self.into(),
                dim.into(),
                start.into(),
                end.into(),
                Value::Int(1),
            ],
        )
    }

    /// Index `index` of `dim`, removing that dim (a view). `index` may be symbolic.
    pub fn select(&self, dim: i64, index: impl Into<SymInt>) -> Result<Tensor> {
        let index = index.into();
        if self.rank() == 0 {
            return Err(Error::shape("select", "cannot select from a 0-d tensor"));
        }
        let d = normalize_dim("select", dim, self.rank())?;
        let size = self.sym_size(d as i64)?;
        let i = if index < 0 { index + size } else { index };
        if i < 0 || i >= size {
            return Err(Error::shape(
                "select",
                format!(
                    "index {} is out of range for dim {dim} of size {}",
                    index.hint(),
                    size.hint()
                ),
            ));
        }
        let mut shape = self.sym_shape();
        shape.remove(d);
        // Dropping a size-1 dim is always a view.
        self.narrow(dim, i, 1)?.view_sym(&shape)
    }

    /// Removes size-1 dims (all of them, or just `dim`).
    pub fn squeeze(&self, dim: Option<i64>) -> Result<Tensor> {
        let shape: Shape = match dim {
            None => self.shape().iter().copied().filter(|&s| s != 1).collect(),
            Some(d) => {
                let d = normalize_dim("squeeze", d, self.rank())?;
                let mut s: Shape = self.shape().into();
                if s.get(d) == Some(&1) {
                    s.remove(d);
                }
                s
            }
        };
        self.reshape(&shape)
    }

    /// Inserts a size-1 dim at `dim` (which may be `rank`, or negative).
    pub fn unsqueeze(&self, dim: i64) -> Result<Tensor> {
        let d = normalize_dim("unsqueeze", dim, self.rank() + 1)?;
        if self.is_fake() {
            // Under capture: a view of symbolic sizes (a size-1 dim fits every layout), so the
            // graph does not bake in the example's sizes.
            let mut sizes = self.sym_shape();
            if sizes.iter().any(|s| s.is_symbolic()) {
                sizes.insert(d, SymInt::Lit(1));
                return self.view_sym(&sizes);
            }
        }
        let mut shape: Shape = self.shape().into();
        shape.insert(d, 1);
        self.reshape(&shape)
    }

    /// Merges dims `start..=end` into one.
    pub fn flatten(&self, start: i64, end: i64) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(&[1]);
        }
        let s = normalize_dim("flatten", start, self.rank())?;
        let e = normalize_dim("flatten", end, self.rank())?;
        if s > e {
            return Err(Error::argument(
                "flatten",
                "start_dim",
                "start_dim <= end_dim",
                format!("{start} > {end}"),
            ));
        }
        let mut shape: Shape = self.shape()[..s].into();
        shape.push(self.shape()[s..=e].iter().product());
        shape.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape(&shape)
    }

    /// A contiguous tensor with the same values (`self` when already contiguous).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            Ok(self.clone())
        } else {
            call1(&super::cast::CLONE, &[self.into()])
        }
    }

    /// A contiguous copy (always new storage).
    pub fn clone_tensor(&self) -> Result<Tensor> {
        call1(&super::cast::CLONE, &[self.into()])
    }

    /// Converts to `dtype` (a copy; `self` when the dtype already matches).
    pub fn to_dtype(&self, dtype: tensorplay_ir::DType) -> Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        call1(&super::cast::TO_DTYPE, &[self.into(), dtype.into()])
    }
}
