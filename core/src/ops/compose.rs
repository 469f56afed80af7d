//! Composite tensor methods: indexing, shape and reduction helpers written over op-table ops
//! (`gather`, `where`, `sum`, `amax`, views…), the way PyTorch decomposes them. They have no
//! `OpDef` of their own: every op they call goes through the dispatcher, so autograd, vmap,
//! autocast, fake tensors and capture see (and the compiler fuses) the ops they are made of.
//!
//! Errors are raised under the composite's own name before any op runs when they depend on
//! shapes, dtypes or arguments; an out-of-range *index value* is found by the `gather` it
//! lowers to (values are not readable while capturing) and names `gather`.

use tensorplay_ir::shape::{fmt_shape, normalize_dim};
use tensorplay_ir::{DType, Error, Result, Shape};

use crate::symint::SymInt;
use crate::tensor::Tensor;
use crate::value::Scalar;

/// `index` as an i64 tensor (PyTorch accepts int32 and int64 indices for `index_select` and
/// `embedding`).
pub fn int_index(op: &str, arg: &str, index: &Tensor) -> Result<Tensor> {
    match index.dtype() {
        DType::I64 => Ok(index.clone()),
        DType::I32 => index.to_dtype(DType::I64),
        d => Err(Error::argument(
            op,
            arg,
            "an int64 or int32 tensor",
            format!("dtype {d}"),
        )),
    }
}

/// A 0-d tensor holding `value` in `dtype` (an error when the value does not fit, as in
/// PyTorch's `fill_`).
fn scalar_of(value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
    Tensor::try_full(&[], value, dtype)
}

/// The error for a 0-d `self` given to an op that works along a dim.
/// `mask` must be a bool tensor (argument `mask` of `op`).
fn require_bool_mask(op: &str, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::argument(
            op,
            "mask",
            "a bool tensor",
            format!("dtype {}", mask.dtype()),
        ));
    }
    Ok(())
}

fn require_dims(op: &str, x: &Tensor) -> Result<()> {
    if x.rank() == 0 {
        return Err(Error::argument(
            op,
            "self",
            "a tensor with at least 1 dim",
            "a 0-d tensor",
        ));
    }
    Ok(())
}

/// `col - row` at every position of a `[rows, cols]` grid, in i64: the index arithmetic of
/// triangular and causal masks. It is built from `ones` and `cumsum` of the sizes (which may be
/// symbolic), not from `arange` of plain sizes, so under capture it is a graph computation that
/// follows the input sizes — not a constant of the example's sizes (which would specialise the
/// graph to them and is refused beyond 64 elements).
pub fn col_minus_row(rows: SymInt, cols: SymInt) -> Result<Tensor> {
    let positions = |n: SymInt| Tensor::ones_sym(&[n], DType::I64)?.cumsum(0, None);
    positions(cols)?.sub(&positions(rows)?.view_sym(&[rows, SymInt::Lit(1)])?)
}

/// The positions `(row, col)` of the last two dims of `x` with `col - row <= k` (`lower`) or
/// `col - row >= k`, as a bool `[rows, cols]` tensor.
fn triangle(op: &str, x: &Tensor, k: i64, lower: bool) -> Result<Tensor> {
    if x.rank() < 2 {
        return Err(Error::argument(
            op,
            "self",
            "a tensor with at least 2 dims",
            format!("shape {}", fmt_shape(x.shape())),
        ));
    }
    let diff = col_minus_row(x.sym_size(-2)?, x.sym_size(-1)?)?;
    if lower {
        diff.le_scalar(k)
    } else {
        diff.ge_scalar(k)
    }
}

impl Tensor {
    /// Rows (or slices) of `self` along `dim` picked by a 1-D `index` (int64 or int32):
    /// the result has `self`'s shape with `dim` resized to `index.numel()`. A 0-d `self` takes
    /// exactly one index (0) and gives a 0-d result, as in PyTorch.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
    /// let i = Tensor::from_vec(vec![2i64, 0], &[2])?;
    /// assert_eq!(x.index_select(0, &i)?.to_vec::<f32>()?, vec![5.0, 6.0, 1.0, 2.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn index_select(&self, dim: i64, index: &Tensor) -> Result<Tensor> {
        const OP: &str = "index_select";
        let index = int_index(OP, "index", index)?;
        if index.rank() > 1 {
            return Err(Error::argument(
                OP,
                "index",
                "a 0-d or 1-D tensor",
                format!("shape {}", fmt_shape(index.shape())),
            ));
        }
        if self.rank() == 0 {
            normalize_dim(OP, dim, 0)?;
            if index.numel() != 1 {
                return Err(Error::argument(
                    OP,
                    "index",
                    "exactly one index into a 0-d tensor",
                    format!("{} indices", index.numel()),
                ));
            }
            // As PyTorch: the result is 0-d like `self`, whatever the index's rank.
            return self
                .reshape(&[1])?
                .index_select(0, &index.reshape(&[1])?)?
                .reshape(&[]);
        }
        let d = normalize_dim(OP, dim, self.rank())?;
        let n = index.numel();
        let mut at: Shape = vec![1; self.rank()].into();
        at[d] = n;
        let mut out: Shape = self.shape().into();
        out[d] = n;
        let index = index.reshape(&at)?.expand(&out)?;
        self.gather(d as i64, &index)
    }

    /// `value` where `mask` (bool, broadcast to `self`'s shape) is true, `self` elsewhere; the
    /// result keeps `self`'s dtype.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// let m = Tensor::from_vec(vec![false, true, false], &[3])?;
    /// assert_eq!(x.masked_fill(&m, f32::NEG_INFINITY)?.to_vec::<f32>()?, vec![1.0, f32::NEG_INFINITY, 3.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn masked_fill(&self, mask: &Tensor, value: impl Into<Scalar>) -> Result<Tensor> {
        const OP: &str = "masked_fill";
        require_bool_mask(OP, mask)?;
        // Checked on symbolic sizes: under capture it guards nothing that holds at every size
        // (a causal mask `[s1, s1]` against scores `[s0, s1, s1]`).
        let (x, m) = (self.sym_shape(), mask.sym_shape());
        let fits = m.len() <= x.len()
            && m.iter()
                .rev()
                .zip(x.iter().rev())
                .all(|(&a, &b)| a == SymInt::Lit(1) || a == b);
        if !fits {
            return Err(Error::shape(
                OP,
                format!(
                    "mask of shape {} does not broadcast to self's shape {}",
                    fmt_shape(mask.shape()),
                    fmt_shape(self.shape())
                ),
            ));
        }
        Tensor::where_cond(mask, &scalar_of(value, self.dtype())?, self)
    }

    /// The elements of `self` where `mask` (bool) is true, as a 1-D tensor in row-major order;
    /// `self` and `mask` broadcast together (`torch.masked_select`). Differentiable in `self`:
    /// the gradient lands back at the selected positions (summed over broadcast dims). The size
    /// depends on the data, so on fake tensors and under `tp_compile` capture it is an error.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let m = Tensor::from_vec(vec![true, false], &[2])?; // broadcasts over rows
    /// assert_eq!(x.masked_select(&m)?.to_vec::<f32>()?, vec![1.0, 3.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn masked_select(&self, mask: &Tensor) -> Result<Tensor> {
        const OP: &str = "masked_select";
        require_bool_mask(OP, mask)?;
        if self.is_fake() || mask.is_fake() {
            return Err(super::index::data_dependent(OP));
        }
        let shape = tensorplay_ir::shape::broadcast_shapes(OP, self.shape(), mask.shape())?;
        let n = shape.iter().product::<usize>();
        let flat = self.expand(&shape)?.reshape(&[n])?;
        let at = mask.expand(&shape)?.reshape(&[n])?.nonzero()?;
        let count = at.shape()[0];
        flat.gather(0, &at.reshape(&[count])?)
    }

    /// The positions of `self`'s nonzero elements as an int64 `[n, ndim]` tensor
    /// (`torch.argwhere`, the same as [`Tensor::nonzero`]).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0i64, 3, 5], &[3])?;
    /// assert_eq!(x.argwhere()?.to_vec::<i64>()?, vec![1, 2]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn argwhere(&self) -> Result<Tensor> {
        self.nonzero()
    }

    /// The lower triangle of the last two dims: elements with `col - row <= diagonal`, zeros
    /// elsewhere.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32);
    /// assert_eq!(x.tril(0)?.to_vec::<f32>()?, vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    /// assert_eq!(x.triu(1)?.to_vec::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        let keep = triangle("tril", self, diagonal, true)?;
        Tensor::where_cond(&keep, self, &scalar_of(0, self.dtype())?)
    }

    /// The upper triangle of the last two dims: elements with `col - row >= diagonal`.
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        let keep = triangle("triu", self, diagonal, false)?;
        Tensor::where_cond(&keep, self, &scalar_of(0, self.dtype())?)
    }

    /// Splits `dim` into `sizes` (one of them may be `-1`, inferred); the inverse of
    /// [`Tensor::flatten`].
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::zeros(&[2, 12], DType::F32);
    /// assert_eq!(x.unflatten(1, &[3, -1])?.shape(), &[2, 3, 4]);
    /// assert!(x.unflatten(1, &[5, -1]).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Tensor> {
        const OP: &str = "unflatten";
        require_dims(OP, self)?;
        let d = normalize_dim(OP, dim, self.rank())?;
        let n = self.shape()[d] as i64;
        let holes = sizes.iter().filter(|&&s| s == -1).count();
        let known: i64 = sizes.iter().filter(|&&s| s != -1).product();
        let ok = sizes.iter().all(|&s| s >= -1)
            && holes <= 1
            && if holes == 1 {
                known != 0 && n % known == 0
            } else {
                known == n
            };
        if sizes.is_empty() || !ok {
            return Err(Error::argument(
                OP,
                "sizes",
                format!("sizes whose product is dim {dim}'s size {n}"),
                format!("{sizes:?}"),
            ));
        }
        let mut shape: Vec<i64> = self.shape()[..d].iter().map(|&s| s as i64).collect();
        shape.extend(sizes.iter().map(|&s| if s == -1 { n / known } else { s }));
        shape.extend(self.shape()[d + 1..].iter().map(|&s| s as i64));
        self.reshape_infer(&shape)
    }

    /// Splits `dim` into pieces of `split_size` (the last may be smaller); views.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::zeros(&[5, 2], DType::F32);
    /// let parts = x.split(2, 0)?;
    /// assert_eq!(parts.iter().map(|p| p.shape()[0]).collect::<Vec<_>>(), vec![2, 2, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn split(&self, split_size: usize, dim: i64) -> Result<Vec<Tensor>> {
        const OP: &str = "split";
        let d = normalize_dim(OP, dim, self.rank())?;
        let n = self.shape().get(d).copied().unwrap_or(1);
        if split_size == 0 && n > 0 {
            return Err(Error::argument(
                OP,
                "split_size",
                "a positive size for a non-empty dim",
                "0",
            ));
        }
        if n == 0 {
            return Ok(vec![self.clone()]);
        }
        let sizes: Vec<usize> = (0..n)
            .step_by(split_size)
            .map(|s| split_size.min(n - s))
            .collect();
        self.split_with_sizes(&sizes, dim)
    }

    /// Splits `dim` into pieces of the given sizes (which must add up to its length); views.
    pub fn split_with_sizes(&self, sizes: &[usize], dim: i64) -> Result<Vec<Tensor>> {
        const OP: &str = "split_with_sizes";
        require_dims(OP, self)?;
        let d = normalize_dim(OP, dim, self.rank())?;
        let n = self.shape()[d];
        if sizes.iter().sum::<usize>() != n {
            return Err(Error::argument(
                OP,
                "split_sizes",
                format!("sizes adding up to dim {dim}'s size {n}"),
                format!("{sizes:?}"),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&s| {
                let part = self.narrow(d as i64, start, s);
                start += s;
                part
            })
            .collect()
    }

    /// Splits `dim` into `chunks` pieces of `ceil(len / chunks)` (fewer pieces when `len` is
    /// small, as in PyTorch); views.
    pub fn chunk(&self, chunks: usize, dim: i64) -> Result<Vec<Tensor>> {
        const OP: &str = "chunk";
        if chunks == 0 {
            return Err(Error::argument(OP, "chunks", "at least 1", "0"));
        }
        let d = normalize_dim(OP, dim, self.rank())?;
        let n = self.shape().get(d).copied().unwrap_or(1);
        self.split(n.div_ceil(chunks).max(1), dim)
    }

    /// Moves dims `source[i]` to positions `destination[i]`; the other dims keep their order.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::zeros(&[2, 3, 4], DType::F32);
    /// assert_eq!(x.movedim(&[0], &[2])?.shape(), &[3, 4, 2]);
    /// assert_eq!(x.movedim(&[2, 0], &[0, 1])?.shape(), &[4, 2, 3]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn movedim(&self, source: &[i64], destination: &[i64]) -> Result<Tensor> {
        const OP: &str = "movedim";
        let rank = self.rank();
        if source.len() != destination.len() {
            return Err(Error::argument(
                OP,
                "destination",
                format!("as many dims as source ({})", source.len()),
                format!("{} dims", destination.len()),
            ));
        }
        let norm = |dims: &[i64], arg: &str| -> Result<Vec<usize>> {
            let v: Vec<usize> = dims
                .iter()
                .map(|&d| normalize_dim(OP, d, rank))
                .collect::<Result<_>>()?;
            let mut seen = v.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != v.len() {
                return Err(Error::argument(
                    OP,
                    arg,
                    "distinct dims",
                    format!("{dims:?}"),
                ));
            }
            Ok(v)
        };
        let (src, dst) = (norm(source, "source")?, norm(destination, "destination")?);
        if rank == 0 {
            return Ok(self.clone());
        }
        let mut perm: Vec<Option<i64>> = vec![None; rank];
        for (&s, &d) in src.iter().zip(&dst) {
            perm[d] = Some(s as i64);
        }
        let mut rest = (0..rank).filter(|i| !src.contains(i));
        let perm: Vec<i64> = perm
            .into_iter()
            .map(|p| p.unwrap_or_else(|| rest.next().unwrap_or(0) as i64))
            .collect();
        self.permute(&perm)
    }

    /// Tiles `self` `repeats[i]` times along dim `i` (more repeats than dims add leading dims).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2], &[2])?;
    /// let y = x.repeat(&[2, 2])?;
    /// assert_eq!(y.shape(), &[2, 4]);
    /// assert_eq!(y.to_vec::<i64>()?, vec![1, 2, 1, 2, 1, 2, 1, 2]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn repeat(&self, repeats: &[usize]) -> Result<Tensor> {
        const OP: &str = "repeat";
        if repeats.len() < self.rank() {
            return Err(Error::argument(
                OP,
                "repeats",
                format!("at least as many repeats as dims ({})", self.rank()),
                format!("{repeats:?}"),
            ));
        }
        let mut shape = vec![1usize; repeats.len() - self.rank()];
        shape.extend_from_slice(self.shape());
        let spread: Vec<usize> = shape.iter().flat_map(|&s| [1, s]).collect();
        let expanded: Vec<usize> = repeats
            .iter()
            .zip(&shape)
            .flat_map(|(&r, &s)| [r, s])
            .collect();
        let out: Vec<usize> = repeats.iter().zip(&shape).map(|(&r, &s)| r * s).collect();
        self.reshape(&spread)?.expand(&expanded)?.reshape(&out)
    }

    /// `log(sum(exp(x)))` over `dims` (empty = all), computed stably: the maximum is subtracted
    /// first (and added back), so large inputs do not overflow; a lane of `-inf` gives `-inf`.
    /// Integer inputs compute in f32; f16/bf16 in f32, rounded once.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1000.0f64, 1000.0], &[2])?;
    /// let y = x.logsumexp(&[0], false)?.item::<f64>()?;
    /// assert!((y - (1000.0 + std::f64::consts::LN_2)).abs() < 1e-12);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn logsumexp(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        let dt = self.dtype();
        let x = match dt {
            DType::F32 | DType::F64 => self.clone(),
            _ => self.to_dtype(DType::F32)?,
        };
        if self.numel() == 0 {
            // Nothing to sum (or nothing to return): log(0) = -inf per lane, as PyTorch.
            let s = x.sum(dims, keepdim)?.add_scalar(f64::NEG_INFINITY)?;
            return if dt.is_half() { s.to_dtype(dt) } else { Ok(s) };
        }
        // The shift is a constant for autograd: the gradient is exactly softmax(x).
        let m = x.amax(dims, true)?.detach();
        let inf = m.abs()?.eq_scalar(f64::INFINITY)?;
        let m = Tensor::where_cond(&inf, &scalar_of(0.0, x.dtype())?, &m)?;
        let s = x.sub(&m)?.exp()?.sum(dims, true)?.log()?.add(&m)?;
        let s = if keepdim { s } else { s.sum(dims, false)? };
        match dt {
            DType::F16 | DType::BF16 => s.to_dtype(dt),
            _ => Ok(s),
        }
    }

    /// Whether any element over `dims` (empty = all) is nonzero (NaN counts); a bool tensor.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f32, 0.0, 2.0, 0.0], &[2, 2])?;
    /// assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, vec![false, true]);
    /// assert_eq!(x.all(&[], false)?.to_vec::<bool>()?, vec![false]);
    /// assert_eq!(x.count_nonzero(&[0])?.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn any(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.ne_scalar(0)?.sum(dims, keepdim)?.gt_scalar(0)
    }

    /// Whether every element over `dims` (empty = all) is nonzero; a bool tensor.
    pub fn all(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        self.eq_scalar(0)?.sum(dims, keepdim)?.eq_scalar(0)
    }

    /// The number of nonzero elements over `dims` (empty = all), as i64.
    pub fn count_nonzero(&self, dims: &[i64]) -> Result<Tensor> {
        self.ne_scalar(0)?.sum(dims, false)
    }

    /// [`Tensor::sum`] computed and returned in `dtype` (PyTorch's `sum(..., dtype=)`: the
    /// input is converted first; integers accumulate in i64 and wrap into `dtype`).
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![i32::MAX, 1], &[2])?;
    /// assert_eq!(x.sum_dtype(&[], false, DType::F64)?.item::<f64>()?, 2147483648.0);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn sum_dtype(&self, dims: &[i64], keepdim: bool, dtype: DType) -> Result<Tensor> {
        self.to_dtype(dtype)?.sum(dims, keepdim)?.to_dtype(dtype)
    }

    /// [`Tensor::sum`] with NaN counted as 0 (`torch.nansum`): over `dims` (empty = all),
    /// keeping reduced dims under `keepdim`. The gradient is 0 at NaN positions and 1 elsewhere;
    /// integer and bool inputs (which hold no NaN) sum as in [`Tensor::sum`]. `±inf` still
    /// propagates (`inf + -inf` → NaN).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, f32::NAN, 3.0, f32::NAN], &[2, 2])?;
    /// assert_eq!(x.nansum(&[], false)?.item::<f32>()?, 4.0);
    /// assert_eq!(x.nansum(&[1], false)?.to_vec::<f32>()?, vec![1.0, 3.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn nansum(&self, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return self.sum(dims, keepdim);
        }
        Tensor::where_scalar_tensor(&self.isnan()?, 0, self)?.sum(dims, keepdim)
    }

    /// [`Tensor::nansum`] computed and returned in `dtype` (like [`Tensor::sum_dtype`]: the input
    /// is converted first, so NaN positions are found in `dtype`; a float input with an integer
    /// `dtype` is an argument error, since NaN has no integer value).
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.5f32, f32::NAN, 2.25], &[3])?;
    /// assert_eq!(x.nansum_dtype(&[], false, DType::F64)?.item::<f64>()?, 3.75);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn nansum_dtype(&self, dims: &[i64], keepdim: bool, dtype: DType) -> Result<Tensor> {
        if self.dtype().is_float() && !dtype.is_float() {
            return Err(Error::argument(
                "nansum",
                "dtype",
                format!("a floating dtype for the {} input", self.dtype()),
                dtype.to_string(),
            ));
        }
        self.to_dtype(dtype)?.nansum(dims, keepdim)?.to_dtype(dtype)
    }

    /// [`Tensor::mean`] computed and returned in `dtype` (floating).
    pub fn mean_dtype(&self, dims: &[i64], keepdim: bool, dtype: DType) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::argument(
                "mean",
                "dtype",
                "a floating dtype",
                dtype.to_string(),
            ));
        }
        self.to_dtype(dtype)?.mean(dims, keepdim)
    }

    /// The vector `p`-norm over `dims` (empty = all): `p = 2.0` (Euclidean, also the
    /// Frobenius norm of a matrix), `1.0`, `f64::INFINITY` (max of `|x|`), `-inf` (min),
    /// `0.0` (count of nonzeros) or any other `p` (`sum(|x|^p)^(1/p)`). Floating inputs only.
    /// The gradient at a zero vector is 0 (a subgradient), as in PyTorch.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![3.0f32, -4.0], &[2])?;
    /// assert_eq!(x.norm(2.0, &[], false)?.item::<f32>()?, 5.0);
    /// assert_eq!(x.norm(1.0, &[], false)?.item::<f32>()?, 7.0);
    /// assert_eq!(x.norm(f64::INFINITY, &[], false)?.item::<f32>()?, 4.0);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn norm(&self, p: f64, dims: &[i64], keepdim: bool) -> Result<Tensor> {
        const OP: &str = "norm";
        if !self.dtype().is_float() {
            return Err(Error::dtype(
                OP,
                format!("input dtype must be floating point, got {}", self.dtype()),
            ));
        }
        if p.is_nan() {
            // PyTorch: a NaN order gives NaN for every reduced lane.
            return self.abs()?.sum(dims, keepdim)?.mul_scalar(f64::NAN);
        }
        // f16/bf16: powers and sums in f32, rounded once (PyTorch's accumulate type), so a
        // sum of squares past 65504 does not overflow.
        if self.dtype().is_half() && ![0.0, 1.0].contains(&p) && p.is_finite() {
            return self
                .to_dtype(DType::F32)?
                .norm(p, dims, keepdim)?
                .to_dtype(self.dtype());
        }
        let a = self.abs()?;
        if p == f64::INFINITY {
            return a.amax(dims, keepdim);
        }
        if p == f64::NEG_INFINITY {
            return a.amin(dims, keepdim);
        }
        if p == 0.0 {
            return self
                .ne_scalar(0)?
                .sum(dims, keepdim)?
                .to_dtype(self.dtype());
        }
        if p == 1.0 {
            return a.sum(dims, keepdim);
        }
        let s = if p == 2.0 {
            self.mul(self)?
        } else {
            a.pow_scalar(p)?
        }
        .sum(dims, keepdim)?;
        // `s^(1/p)` has an infinite slope at 0; the root is taken of 1 there and replaced by 0,
        // so the gradient of a zero vector is 0 rather than NaN.
        let zero = s.eq_scalar(0)?;
        let safe = Tensor::where_cond(&zero, &scalar_of(1.0, s.dtype())?, &s)?;
        let root = if p == 2.0 {
            safe.sqrt()?
        } else {
            safe.pow_scalar(1.0 / p)?
        };
        Tensor::where_cond(&zero, &scalar_of(0.0, s.dtype())?, &root)
    }

    /// Rotates elements along `dims` by `shifts` (positive shifts move elements to higher
    /// indices; elements pushed off the end come back at the start). With no dims the
    /// flattened tensor is rolled and reshaped back.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.roll(&[1], &[1])?.to_vec::<i64>()?, vec![3, 1, 2, 6, 4, 5]);
    /// assert_eq!(x.roll(&[-1], &[])?.to_vec::<i64>()?, vec![2, 3, 4, 5, 6, 1]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn roll(&self, shifts: &[i64], dims: &[i64]) -> Result<Tensor> {
        const OP: &str = "roll";
        if dims.is_empty() {
            if shifts.len() != 1 {
                return Err(Error::argument(
                    OP,
                    "shifts",
                    "one shift when dims is empty",
                    format!("{shifts:?}"),
                ));
            }
            return self
                .reshape(&[self.numel()])?
                .roll(shifts, &[0])?
                .reshape(self.shape());
        }
        if shifts.len() != dims.len() {
            return Err(Error::argument(
                OP,
                "shifts",
                format!("one shift per dim ({} dims)", dims.len()),
                format!("{shifts:?}"),
            ));
        }
        if self.rank() == 0 {
            // A 0-d tensor has no dim to roll over (PyTorch raises too; `dims=[]` rolls the
            // flattened tensor and is fine).
            return Err(Error::argument(
                OP,
                "dims",
                "no dims for a 0-d tensor (it has none)",
                format!("{dims:?}"),
            ));
        }
        let mut out = self.clone();
        for (&s, &dim) in shifts.iter().zip(dims) {
            let d = normalize_dim(OP, dim, self.rank())?;
            let n = self.shape().get(d).copied().unwrap_or(1) as i64;
            if n == 0 || self.rank() == 0 {
                continue;
            }
            let s = s.rem_euclid(n) as usize;
            if s == 0 {
                continue;
            }
            let n = n as usize;
            let (tail, head) = (
                out.narrow(d as i64, n - s, s)?,
                out.narrow(d as i64, 0, n - s)?,
            );
            out = Tensor::cat(&[tail, head], d as i64)?;
        }
        if out.same(self) {
            return self.clone_tensor();
        }
        Ok(out)
    }

    /// Repeats `self` `reps[i]` times along dim `i`; fewer reps than dims repeat the trailing
    /// dims (PyTorch's `tile`, unlike [`Tensor::repeat`]).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(x.tile(&[2])?.to_vec::<i64>()?, vec![1, 2, 1, 2, 3, 4, 3, 4]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn tile(&self, reps: &[usize]) -> Result<Tensor> {
        let mut full = vec![1usize; self.rank().saturating_sub(reps.len())];
        full.extend_from_slice(reps);
        self.repeat(&full)
    }

    /// Elements of the flattened `self` at `index` (int64, any shape): the result has
    /// `index`'s shape.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let i = Tensor::from_vec(vec![3i64, 0], &[2])?;
    /// assert_eq!(x.take(&i)?.to_vec::<f32>()?, vec![4.0, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn take(&self, index: &Tensor) -> Result<Tensor> {
        let index = int_index("take", "index", index)?;
        let flat = self.reshape(&[self.numel()])?;
        flat.gather(0, &index.reshape(&[index.numel()])?)?
            .reshape(index.shape())
    }

    /// The `n × m` identity matrix: ones where row == col.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// assert_eq!(Tensor::eye(2, 3, DType::I64)?.to_vec::<i64>()?, vec![1, 0, 0, 0, 1, 0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn eye(n: usize, m: usize, dtype: DType) -> Result<Tensor> {
        let rows = Tensor::arange(0.0, n as f64, 1.0, DType::I64)?.reshape(&[n, 1])?;
        let cols = Tensor::arange(0.0, m as f64, 1.0, DType::I64)?;
        rows.eq(&cols)?.to_dtype(dtype)
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive; the second half counts back
    /// from `end`, as PyTorch does, so both endpoints are exact. f32 and f64 compute as
    /// PyTorch's kernel: the step in the dtype, each value one fused multiply-add
    /// (`start + i·step`, `end - (steps-1-i)·step`); other dtypes compute in f64 and convert once.
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let x = Tensor::linspace(0.0, 1.0, 5, DType::F32)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    /// assert_eq!(Tensor::linspace(2.0, 3.0, 1, DType::F64)?.to_vec::<f64>()?, vec![2.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn linspace(start: f64, end: f64, steps: usize, dtype: DType) -> Result<Tensor> {
        if dtype == DType::Bool {
            return Err(Error::argument(
                "linspace",
                "dtype",
                "a numeric dtype",
                "bool",
            ));
        }
        if !start.is_finite() || !end.is_finite() {
            return Err(Error::argument(
                "linspace",
                "start/end",
                "finite numbers",
                format!("start {start}, end {end}"),
            ));
        }
        if steps == 1 {
            return Tensor::from_vec(vec![start], &[1])?.to_dtype(dtype);
        }
        let half = steps / 2;
        // f32 and f64 as PyTorch's kernel: start, end and the step in the dtype, each value
        // one fused multiply-add from the nearer end.
        if steps >= 2 && dtype == DType::F32 {
            let (s, e) = (start as f32, end as f32);
            let step = (e - s) / (steps - 1) as f32;
            let v: Vec<f32> = (0..steps)
                .map(|i| match i < half {
                    true => step.mul_add(i as f32, s),
                    false => (-step).mul_add((steps - 1 - i) as f32, e),
                })
                .collect();
            return Tensor::from_vec(v, &[steps]);
        }
        let step = (end - start) / (steps.max(2) - 1) as f64;
        if dtype == DType::F64 {
            let v: Vec<f64> = (0..steps)
                .map(|i| match i < half {
                    true => step.mul_add(i as f64, start),
                    false => (-step).mul_add((steps - 1 - i) as f64, end),
                })
                .collect();
            return Tensor::from_vec(v, &[steps]);
        }
        let v: Vec<f64> = (0..steps)
            .map(|i| {
                if i < half {
                    start + step * i as f64
                } else {
                    end - step * (steps - 1 - i) as f64
                }
            })
            .collect();
        Tensor::from_vec(v, &[steps])?.to_dtype(dtype)
    }
}
