//! Python-style indexing for Rust: [`Tensor::index`] (`x[i, 1:3, None, ..., idx]`),
//! [`Tensor::index_put`] (`x[...] = v` / `x.index_put(..., accumulate=True)`, out of place) and
//! [`Tensor::index_put_`] (in place), with indices given as [`Idx`] values.
//!
//! PyTorch's semantics: integers, slices, `None` ([`Idx::NewAxis`]) and `...` ([`Idx::Ellipsis`])
//! are *basic* indices and give views (integers `select`, as PyTorch applies them, so they take
//! no part in advanced indexing); index tensors are *advanced* indices: they broadcast together,
//! and the result's broadcast dims replace the indexed dims where those are adjacent, else go to
//! the front. A bool mask stands for the index tensors of its `nonzero` positions (so its size
//! depends on the data and needs real tensors). Negative integers and index values count from
//! the end. Everything is a composite over op-table ops (`select`, `slice`, `unsqueeze`,
//! `permute`, `reshape`, `index_select`, `scatter`/`scatter_add`), so autograd, vmap and fake
//! tensors see those ops.

use tensorplay_ir::shape::{broadcast_shapes, fmt_shape};
use tensorplay_ir::{DType, Error, Result};

use crate::tensor::Tensor;

/// One index of [`Tensor::index`] / [`Tensor::index_put`], as in Python's `x[...]`.
///
/// ```
/// use tensorplay_core::{Idx, Tensor};
/// let x = Tensor::from_vec((0..6i64).collect(), &[2, 3])?;
/// // x[None, -1, 1:] and x[[1, 0]] (ints and tensors convert with `into()`)
/// let y = x.index(&[Idx::NewAxis, (-1).into(), Idx::Slice { start: Some(1), end: None, step: 1 }])?;
/// assert_eq!((y.shape(), y.to_vec::<i64>()?), (&[1usize, 2][..], vec![4, 5]));
/// let rows = x.index(&[Tensor::from_vec(vec![1i64, 0], &[2])?.into()])?;
/// assert_eq!(rows.to_vec::<i64>()?, vec![3, 4, 5, 0, 1, 2]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub enum Idx {
    /// `x[i]`: one position of a dim (negative counts from the end); the dim goes away.
    Int(i64),
    /// `x[start:end:step]`: `None` bounds are the dim's ends, negative bounds count from the
    /// end, out-of-range bounds clamp (Python's rule); `step` must be positive (PyTorch's rule).
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    },
    /// `x[:]`: the whole dim.
    Full,
    /// `x[None]`: a new dim of size 1.
    NewAxis,
    /// `x[...]`: as many [`Idx::Full`] as the other indices leave dims (at most one).
    Ellipsis,
    /// An int64 (or int32) index tensor of any shape (an advanced index), or a bool mask over
    /// the next `mask.rank()` dims (the index tensors of its `nonzero` positions).
    Tensor(Tensor),
}

impl Idx {
    /// `start..end` with step 1 (`x[start:end]`).
    ///
    /// ```
    /// use tensorplay_core::{ops::indexing::Idx, Tensor};
    /// let x = Tensor::from_vec(vec![0i64, 1, 2, 3, 4], &[5])?;
    /// assert_eq!(x.index(&[Idx::range(1, -1)])?.to_vec::<i64>()?, vec![1, 2, 3]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn range(start: i64, end: i64) -> Idx {
        Idx::Slice {
            start: Some(start),
            end: Some(end),
            step: 1,
        }
    }
}

impl From<i64> for Idx {
    fn from(i: i64) -> Idx {
        Idx::Int(i)
    }
}

impl From<Tensor> for Idx {
    fn from(t: Tensor) -> Idx {
        Idx::Tensor(t)
    }
}

impl From<&Tensor> for Idx {
    fn from(t: &Tensor) -> Idx {
        Idx::Tensor(t.clone())
    }
}

/// An index with bool masks replaced by their index tensors and 0-d bools by a new axis.
enum Item {
    Int(i64),
    Slice(Option<i64>, Option<i64>, i64),
    Full,
    NewAxis,
    Ellipsis,
    /// An int64 index tensor.
    Adv(Tensor),
    /// An int64 index tensor into a new axis of size 1 (a 0-d bool index).
    AdvNewAxis(Tensor),
    /// Dim `j` of a bool mask of shape `mask`: the int64 positions along it (an advanced
    /// index); the indexed dim must have size `mask[j]`.
    MaskDim(Tensor, usize, Vec<usize>),
}

/// Replaces bool masks with one int64 index tensor per masked dim (from `nonzero`), a 0-d bool
/// with a new axis indexed by `[0]` (true) or `[]` (false), and int32 index tensors by int64.
fn expand_masks(op: &str, indices: &[Idx]) -> Result<Vec<Item>> {
    let mut out = Vec::with_capacity(indices.len());
    for idx in indices {
        match idx {
            Idx::Int(i) => out.push(Item::Int(*i)),
            Idx::Slice { start, end, step } => out.push(Item::Slice(*start, *end, *step)),
            Idx::Full => out.push(Item::Full),
            Idx::NewAxis => out.push(Item::NewAxis),
            Idx::Ellipsis => out.push(Item::Ellipsis),
            Idx::Tensor(t) => match t.dtype() {
                DType::I64 => out.push(Item::Adv(t.clone())),
                DType::I32 => out.push(Item::Adv(t.to_dtype(DType::I64)?)),
                DType::Bool if t.rank() == 0 => {
                    if t.is_fake() {
                        return Err(super::index::data_dependent(op));
                    }
                    let n = usize::from(t.item::<bool>()?);
                    out.push(Item::AdvNewAxis(Tensor::zeros(&[n], DType::I64)));
                }
                DType::Bool => {
                    if t.is_fake() {
                        return Err(super::index::data_dependent(op));
                    }
                    let nz = t.nonzero()?; // [n, k]
                    for j in 0..t.rank() {
                        out.push(Item::MaskDim(
                            nz.select(1, j as i64)?,
                            j,
                            t.shape().to_vec(),
                        ));
                    }
                }
                d => {
                    return Err(Error::argument(
                        op,
                        "indices",
                        "int64, int32 or bool index tensors",
                        format!("an index tensor of dtype {d}"),
                    ));
                }
            },
        }
    }
    Ok(out)
}

/// The result of applying `indices` to `x`: the basic indices applied (a view), and the
/// advanced index tensors (int64, negative values wrapped) with the dims of the view they index.
struct Applied {
    view: Tensor,
    adv: Vec<(usize, Tensor)>,
}

fn apply_basic(op: &str, x: &Tensor, indices: &[Idx]) -> Result<Applied> {
    let items = expand_masks(op, indices)?;
    let ellipses = items.iter().filter(|i| matches!(i, Item::Ellipsis)).count();
    if ellipses > 1 {
        return Err(Error::argument(
            op,
            "indices",
            "at most one Ellipsis",
            format!("{ellipses} Ellipsis entries"),
        ));
    }
    let consumed = items
        .iter()
        .filter(|i| !matches!(i, Item::NewAxis | Item::Ellipsis | Item::AdvNewAxis(_)))
        .count();
    if consumed > x.rank() {
        return Err(Error::argument(
            op,
            "indices",
            format!("at most {} indices for a {}-d tensor", x.rank(), x.rank()),
            format!("{consumed} indices"),
        ));
    }
    let mut view = x.clone();
    let mut adv = Vec::new();
    // `d`: the dim of `view` the next index applies to; `src`: the dim of `x` it consumes.
    let (mut d, mut src) = (0usize, 0usize);
    for item in items {
        match item {
            Item::Ellipsis => {
                let skip = x.rank() - consumed;
                d += skip;
                src += skip;
            }
            Item::NewAxis => {
                view = view.unsqueeze(d as i64)?;
                d += 1;
            }
            Item::Full => {
                d += 1;
                src += 1;
            }
            Item::Int(i) => {
                let size = x.shape()[src] as i64;
                let at = if i < 0 { i + size } else { i };
                if !(0..size).contains(&at) {
                    return Err(Error::argument(
                        op,
                        "indices",
                        format!("an integer in [-{size}, {size}) for dim {src} of size {size}"),
                        i.to_string(),
                    ));
                }
                view = view.select(d as i64, at)?;
                src += 1;
            }
            Item::Slice(start, end, step) => {
                if step <= 0 {
                    return Err(Error::argument(
                        op,
                        "indices",
                        "a slice with a positive step",
                        format!("step {step}"),
                    ));
                }
                view = view.slice(d as i64, start, end, step)?;
                d += 1;
                src += 1;
            }
            Item::AdvNewAxis(t) => {
                view = view.unsqueeze(d as i64)?;
                adv.push((d, t));
                d += 1;
            }
            Item::Adv(t) => {
                let size = x.shape()[src];
                adv.push((d, wrap_index(op, &t, src, size)?));
                d += 1;
                src += 1;
            }
            Item::MaskDim(t, j, mask) => {
                let size = x.shape()[src];
                if size != mask[j] {
                    return Err(Error::argument(
                        op,
                        "indices",
                        format!(
                            "a bool mask matching the indexed dims (dim {src} has size {size}, \
                             tensor shape {})",
                            fmt_shape(x.shape())
                        ),
                        format!("a mask of shape {}", fmt_shape(&mask)),
                    ));
                }
                adv.push((d, t));
                d += 1;
                src += 1;
            }
        }
    }
    Ok(Applied { view, adv })
}

/// `t` with negative values counted from the end of a dim of `size`; a value outside
/// `[-size, size)` is an error (checked on real data; under capture `gather` checks it).
fn wrap_index(op: &str, t: &Tensor, dim: usize, size: usize) -> Result<Tensor> {
    let size = size as i64;
    if !t.is_fake()
        && let Some(bad) = t
            .to_vec::<i64>()?
            .into_iter()
            .find(|v| !(-size..size).contains(v))
    {
        return Err(Error::argument(
            op,
            "indices",
            format!("index values in [-{size}, {size}) for dim {dim} of size {size}"),
            format!("index {bad}"),
        ));
    }
    let shifted = t.add_scalar(size)?;
    Tensor::where_cond(&t.lt_scalar(0)?, &shifted, t)
}

/// Applies the advanced indices of `a` to its view: the gathered result.
fn apply_advanced(op: &str, a: Applied) -> Result<Tensor> {
    let Applied { view, adv } = a;
    if adv.is_empty() {
        return Ok(view);
    }
    // The broadcast shape of the index tensors.
    let mut b: Vec<usize> = Vec::new();
    for (_, t) in &adv {
        b = broadcast_shapes(op, &b, t.shape())
            .map_err(|_| {
                Error::shape(
                    op,
                    format!(
                        "index tensors of shapes {} do not broadcast together",
                        adv.iter()
                            .map(|(_, t)| fmt_shape(t.shape()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?
            .to_vec();
    }
    let dims: Vec<usize> = adv.iter().map(|(d, _)| *d).collect();
    let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
    let rest: Vec<usize> = (0..view.rank()).filter(|d| !dims.contains(d)).collect();
    // Indexed dims first (in order), then the rest: [s_1.., rest..].
    let perm: Vec<i64> = dims.iter().chain(&rest).map(|&d| d as i64).collect();
    let moved = view.permute(&perm)?;
    let sizes: Vec<usize> = dims.iter().map(|&d| view.shape()[d]).collect();
    // The row-major linear position in the indexed dims.
    let mut linear: Option<Tensor> = None;
    let mut stride = 1i64;
    for ((_, t), &s) in adv.iter().zip(&sizes).rev() {
        let term = t.mul_scalar(stride)?.expand(&b)?;
        linear = Some(match linear {
            None => term,
            Some(l) => l.add(&term)?,
        });
        stride *= s as i64;
    }
    let linear = linear.ok_or_else(|| Error::argument(op, "indices", "an index tensor", "none"))?;
    let n: usize = b.iter().product();
    let rest_shape: Vec<usize> = rest.iter().map(|&d| view.shape()[d]).collect();
    let mut flat_shape = vec![sizes.iter().product::<usize>()];
    flat_shape.extend(&rest_shape);
    let picked = moved
        .reshape(&flat_shape)?
        .index_select(0, &linear.reshape(&[n])?)?;
    let mut out_shape = b.clone();
    out_shape.extend(&rest_shape);
    let out = picked.reshape(&out_shape)?;
    if !adjacent || dims[0] == 0 {
        return Ok(out);
    }
    // Adjacent: the broadcast dims go where the indexed dims were.
    let (nb, first) = (b.len(), dims[0]);
    let perm: Vec<i64> = (nb..nb + first)
        .chain(0..nb)
        .chain(nb + first..out.rank())
        .map(|d| d as i64)
        .collect();
    out.permute(&perm)
}

impl Tensor {
    /// `self[indices]` with Python/PyTorch semantics (see [`Idx`]): integers, slices,
    /// [`Idx::NewAxis`] and [`Idx::Ellipsis`] give a view; index tensors (advanced indexing)
    /// broadcast together and gather a copy, their dims placed where the indexed dims were when
    /// those are adjacent, else first. Missing trailing indices mean whole dims. Differentiable.
    ///
    /// Errors: more indices than dims, two ellipses, an integer or index value out of range, a
    /// step ≤ 0, index tensors that do not broadcast, a float index tensor; a bool mask needs
    /// real (not fake) tensors.
    ///
    /// ```
    /// use tensorplay_core::{ops::indexing::Idx, Tensor};
    /// let x = Tensor::from_vec((0..24i64).collect(), &[2, 3, 4])?;
    /// // x[1, :, ::2]
    /// let y = x.index(&[Idx::Int(1), Idx::Full, Idx::Slice { start: None, end: None, step: 2 }])?;
    /// assert_eq!(y.to_vec::<i64>()?, vec![12, 14, 16, 18, 20, 22]);
    /// // x[..., [0, -1]] (an index tensor on the last dim)
    /// let i = Tensor::from_vec(vec![0i64, -1], &[2])?;
    /// let z = x.index(&[Idx::Ellipsis, Idx::Tensor(i)])?;
    /// assert_eq!(z.shape(), &[2, 3, 2]);
    /// assert_eq!(z.to_vec::<i64>()?[..4], [0, 3, 4, 7]);
    /// assert!(x.index(&[Idx::Int(2)]).is_err()); // dim 0 has size 2
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn index(&self, indices: &[Idx]) -> Result<Tensor> {
        const OP: &str = "index";
        apply_advanced(OP, apply_basic(OP, self, indices)?)
    }

    /// A copy of `self` with `self[indices] = values` (`accumulate = false`; with repeated
    /// positions one of the writes wins) or `self[indices] += values` (`accumulate = true`,
    /// every repeat adds, as `index_put(..., accumulate=True)`). `values` has `self`'s dtype
    /// and broadcasts to the shape `self.index(indices)` has. Differentiable in `self` (written
    /// positions get no gradient unless accumulating) and in `values` (summed over broadcast).
    ///
    /// ```
    /// use tensorplay_core::{ops::indexing::Idx, Tensor};
    /// let x = Tensor::from_vec(vec![0.0f32; 6], &[2, 3])?;
    /// // x[:, 1] = [5, 6]
    /// let v = Tensor::from_vec(vec![5.0f32, 6.0], &[2])?;
    /// let y = x.index_put(&[Idx::Full, Idx::Int(1)], &v, false)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 5.0, 0.0, 0.0, 6.0, 0.0]);
    /// // x[[0, 0], [2, 2]] += 1 (accumulates twice)
    /// let i = Tensor::from_vec(vec![0i64, 0], &[2])?;
    /// let j = Tensor::from_vec(vec![2i64, 2], &[2])?;
    /// let one = Tensor::scalar(1.0f32);
    /// let z = x.index_put(&[Idx::Tensor(i), Idx::Tensor(j)], &one, true)?;
    /// assert_eq!(z.to_vec::<f32>()?, vec![0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn index_put(&self, indices: &[Idx], values: &Tensor, accumulate: bool) -> Result<Tensor> {
        const OP: &str = "index_put";
        if values.dtype() != self.dtype() {
            return Err(Error::argument(
                OP,
                "values",
                format!("a tensor of self's dtype ({})", self.dtype()),
                format!("dtype {}", values.dtype()),
            ));
        }
        let n = self.numel();
        // The flat position of every element of self, indexed like self.
        let positions = Tensor::ones_sym(&self.sym_shape(), DType::I64)?
            .reshape(&[n])?
            .cumsum(0, None)?
            .add_scalar(-1)?
            .reshape(self.shape())?;
        let at = apply_advanced(OP, apply_basic(OP, &positions, indices)?)?;
        let fits = broadcast_shapes(OP, at.shape(), values.shape())
            .is_ok_and(|b| b.as_ref() == at.shape());
        if !fits {
            return Err(Error::argument(
                OP,
                "values",
                format!("a shape that broadcasts to {}", fmt_shape(at.shape())),
                format!("shape {}", fmt_shape(values.shape())),
            ));
        }
        let m = at.numel();
        let v = values.expand(at.shape())?.reshape(&[m])?;
        let at = at.reshape(&[m])?;
        let flat = self.reshape(&[n])?;
        let out = if accumulate {
            flat.scatter_add(0, &at, &v)?
        } else {
            flat.scatter(0, &at, &v)?
        };
        out.reshape(self.shape())
    }

    /// [`Tensor::index_put`] written into `self` (`x[indices] = values` in place; a mutation,
    /// with the same autograd rules as [`Tensor::copy_`]). Returns `self`.
    ///
    /// ```
    /// use tensorplay_core::{ops::indexing::Idx, Tensor};
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4])?;
    /// let mask = Tensor::from_vec(vec![true, false, true, false], &[4])?;
    /// x.index_put_(&[Idx::Tensor(mask)], &Tensor::scalar(0i64), false)?;
    /// assert_eq!(x.to_vec::<i64>()?, vec![0, 2, 0, 4]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn index_put_(&self, indices: &[Idx], values: &Tensor, accumulate: bool) -> Result<Tensor> {
        let out = self.index_put(indices, values, accumulate)?;
        self.copy_(&out)
    }
}
