//! cat and stack: join a list of tensors along a dim into one fresh tensor.
//!
//! The result dtype is the promotion of every input's dtype. Each input is copied (converting)
//! into its window of the output, so non-contiguous inputs need no extra copy. The gradient of
//! each input is its window of the output gradient (a view).

use tensorplay_ir::shape::{fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, OpClass, Result, Shape, Strides};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `cat(Tensor[] tensors, int dim=0) -> Tensor`: concatenates along an existing dim.
pub static CAT: OpDef = OpDef {
    name: "cat",
    schema: "cat(Tensor[] tensors, int dim=0) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: cat_meta,
        fill: cat_fill,
    },
    derivative: Some(cat_grad),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Cat,
};

/// `stack(Tensor[] tensors, int dim=0) -> Tensor`: joins equal-shaped tensors along a new dim.
pub static STACK: OpDef = OpDef {
    name: "stack",
    schema: "stack(Tensor[] tensors, int dim=0) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: stack_meta,
        fill: stack_fill,
    },
    derivative: Some(stack_grad),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Stack,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&CAT, &STACK];

/// The tensor list, which must not be empty.
fn tensor_list<'a>(a: Args<'a>) -> Result<&'a [Tensor]> {
    let ts = a.tensors(0)?;
    if ts.is_empty() {
        return Err(Error::argument(
            a.op,
            "tensors",
            "a non-empty list of tensors",
            "an empty list",
        ));
    }
    Ok(ts)
}

/// The `dim` argument (default 0).
fn dim_arg(a: Args) -> Result<i64> {
    match a.values.get(1) {
        None => Ok(0),
        Some(_) => a.int(1),
    }
}

/// The promoted dtype of every tensor in the list.
fn joined_dtype(ts: &[Tensor]) -> DType {
    ts.iter()
        .skip(1)
        .fold(ts[0].dtype(), |d, t| DType::promote(d, t.dtype()))
}

/// PyTorch (legacy) skips 1-D tensors of size 0 in cat: they join with any shape.
fn skipped_in_cat(t: &Tensor) -> bool {
    t.shape() == [0]
}

/// Validated layout of a cat call: the normalized dim, each input's size along it (`None` for a
/// skipped input) and the output shape.
struct CatPlan {
    dim: usize,
    sizes: Vec<Option<usize>>,
    shape: Shape,
}

fn cat_plan(a: Args) -> Result<CatPlan> {
    let ts = tensor_list(a)?;
    let Some(first) = ts.iter().position(|t| !skipped_in_cat(t)) else {
        // Every input is a skipped empty vector: the result is one too.
        return Ok(CatPlan {
            dim: 0,
            sizes: vec![None; ts.len()],
            shape: smallvec::smallvec![0],
        });
    };
    let reference = &ts[first];
    if let Some(i) = ts.iter().position(|t| t.rank() == 0) {
        return Err(Error::shape(
            a.op,
            format!("zero-dimensional tensor (at position {i}) cannot be concatenated"),
        ));
    }
    let dim = normalize_dim(a.op, dim_arg(a)?, reference.rank())?;
    let mut total = 0usize;
    let mut sizes = Vec::with_capacity(ts.len());
    for (i, t) in ts.iter().enumerate() {
        if skipped_in_cat(t) {
            sizes.push(None);
            continue;
        }
        let fits = t.rank() == reference.rank()
            && t.shape()
                .iter()
                .zip(reference.shape())
                .enumerate()
                .all(|(d, (x, y))| d == dim || x == y);
        if !fits {
            return Err(Error::shape(
                a.op,
                format!(
                    "tensor {i} has shape {} but tensor {first} has shape {}; all dims except dim {dim} must match",
                    fmt_shape(t.shape()),
                    fmt_shape(reference.shape())
                ),
            ));
        }
        total += t.shape()[dim];
        sizes.push(Some(t.shape()[dim]));
    }
    let mut shape: Shape = reference.shape().into();
    shape[dim] = total;
    Ok(CatPlan { dim, sizes, shape })
}

fn cat_meta(a: Args) -> Result<Vec<OutSpec>> {
    let plan = cat_plan(a)?;
    Ok(vec![OutSpec::new(
        &plan.shape,
        joined_dtype(tensor_list(a)?),
    )])
}

fn cat_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (ts, plan, out) = (tensor_list(a)?, cat_plan(a)?, &outs[0]);
    let stride = out.strides().get(plan.dim).copied().unwrap_or(0);
    let mut start = 0usize;
    for (t, size) in ts.iter().zip(&plan.sizes) {
        let Some(size) = *size else { continue };
        if size > 0 && t.numel() > 0 {
            let offset = out.storage_offset() as isize + start as isize * stride;
            let window = out.alias_with(t.shape().into(), out.strides().into(), offset as usize);
            super::cast::copy_convert(a.op, &window, t)?;
        }
        start += size;
    }
    Ok(())
}

fn cat_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (ts, plan) = (tensor_list(c.args)?, cat_plan(c.args)?);
    let g = c.grad(0)?;
    let mut start = 0usize;
    let mut grads = Vec::with_capacity(ts.len());
    for (t, size) in ts.iter().zip(&plan.sizes) {
        match *size {
            None => grads.push(t.requires_grad().then(|| Tensor::zeros(&[0], g.dtype()))),
            Some(size) => {
                grads.push(if t.requires_grad() {
                    Some(g.narrow(plan.dim as i64, start, size)?)
                } else {
                    None
                });
                start += size;
            }
        }
    }
    Ok(grads)
}

/// The common shape of a stack call's inputs and the normalized new dim.
fn stack_plan(a: Args) -> Result<(Shape, usize)> {
    let ts = tensor_list(a)?;
    let shape: Shape = ts[0].shape().into();
    if let Some(i) = ts.iter().position(|t| t.shape() != shape.as_slice()) {
        return Err(Error::shape(
            a.op,
            format!(
                "expects tensors of equal shape, but tensor 0 has shape {} and tensor {i} has shape {}",
                fmt_shape(&shape),
                fmt_shape(ts[i].shape())
            ),
        ));
    }
    let dim = normalize_dim(a.op, dim_arg(a)?, shape.len() + 1)?;
    Ok((shape, dim))
}

fn stack_meta(a: Args) -> Result<Vec<OutSpec>> {
    let ts = tensor_list(a)?;
    let (mut shape, dim) = stack_plan(a)?;
    shape.insert(dim, ts.len());
    Ok(vec![OutSpec::new(&shape, joined_dtype(ts))])
}

fn stack_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (ts, (shape, dim), out) = (tensor_list(a)?, stack_plan(a)?, &outs[0]);
    if out.numel() == 0 {
        return Ok(());
    }
    let mut strides: Strides = out.strides().into();
    let step = strides.remove(dim);
    for (i, t) in ts.iter().enumerate() {
        let offset = out.storage_offset() as isize + i as isize * step;
        let window = out.alias_with(shape.clone(), strides.clone(), offset as usize);
        super::cast::copy_convert(a.op, &window, t)?;
    }
    Ok(())
}

fn stack_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let ts = tensor_list(c.args)?;
    let (_, dim) = stack_plan(c.args)?;
    let g = c.grad(0)?;
    ts.iter()
        .enumerate()
        .map(|(i, t)| {
            if t.requires_grad() {
                g.select(dim as i64, i as i64).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect()
}

impl Tensor {
    /// Concatenates `tensors` along `dim` (all other dims must match; dtypes promote).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1i64, 2], &[1, 2])?;
    /// let b = Tensor::from_vec(vec![3.5f32, 4.5, 5.5, 6.5], &[2, 2])?;
    /// let c = Tensor::cat(&[a, b], 0)?;
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.to_vec::<f32>()?, vec![1.0, 2.0, 3.5, 4.5, 5.5, 6.5]);
    /// assert!(Tensor::cat(&[], 0).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn cat(tensors: &[Tensor], dim: i64) -> Result<Tensor> {
        call1(&CAT, &[Value::TensorList(tensors.to_vec()), dim.into()])
    }

    /// Stacks equal-shaped `tensors` along a new dim `dim` (`-1` appends it last).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let b = Tensor::from_vec(vec![3.0f32, 4.0], &[2])?;
    /// let s = Tensor::stack(&[a, b], -1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec::<f32>()?, vec![1.0, 3.0, 2.0, 4.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn stack(tensors: &[Tensor], dim: i64) -> Result<Tensor> {
        call1(&STACK, &[Value::TensorList(tensors.to_vec()), dim.into()])
    }
}
