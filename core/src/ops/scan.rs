//! Scans: `cumsum` and `cumprod` along one dim. A prefix sum (or product) carries a value from element to element, which a
//! per-element scalar expression cannot, so the compiler runs it as a barrier ("has no scalar
//! lowering").
//!
//! Floating inputs accumulate in f64 and round each prefix once (PyTorch's CPU kernels accumulate
//! `float` in `double` too); integer and bool inputs sum (multiply) in i64 (wrapping), and their
//! result is i64 unless `dtype=` says otherwise (`dtype=` converts the input before scanning).

use tensorplay_ir::shape::normalize_dim;
use tensorplay_ir::{DType, OpClass, Result};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::element::Element;
use crate::symint::SymInt;
use crate::tensor::Tensor;
use crate::value::{Args, Value};
use crate::with_dtype;

/// `cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor`: `out[i] = sum(x[..=i])`
/// along `dim`.
pub static CUMSUM: OpDef = OpDef {
    name: "cumsum",
    schema: "cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: cumsum_meta,
        fill: cumsum_fill,
    },
    derivative: Some(cumsum_grad),
    saved: Saved::Nothing,
    lower: Lower::None,
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

/// `cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor`: `out[i] =
/// prod(x[..=i])` along `dim`.
pub static CUMPROD: OpDef = OpDef {
    name: "cumprod",
    schema: "cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
    class: OpClass::Reduction,
    kernel: Kernel::Compute {
        meta: cumsum_meta,
        fill: cumprod_fill,
    },
    derivative: Some(cumprod_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&CUMSUM, &CUMPROD];

/// The result dtype: `dtype=` when given, else i64 for integers and bool, else the input's.
fn out_dtype(a: Args, x: &Tensor) -> Result<DType> {
    Ok(match a.values.get(2) {
        None | Some(Value::None) => {
            if x.dtype().is_float() {
                x.dtype()
            } else {
                DType::I64
            }
        }
        Some(_) => a.dtype(2)?,
    })
}

fn cumsum_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    normalize_dim(a.op, a.int(1)?, x.rank())?;
    Ok(vec![OutSpec::new(x.shape(), out_dtype(a, x)?)])
}

/// Prefix sums of `[outer, n, inner]` data along the middle dim, in `acc` then rounded to `O`.
fn scan<O: Element, A: Copy>(
    xs: Vec<A>,
    n: usize,
    inner: usize,
    zero: A,
    add: impl Fn(A, A) -> A,
    to_out: impl Fn(A) -> O,
) -> Vec<O> {
    let mut out = Vec::with_capacity(xs.len());
    let mut acc = vec![zero; inner];
    for (k, &v) in xs.iter().enumerate() {
        let j = k % inner;
        if (k / inner).is_multiple_of(n) {
            acc[j] = zero;
        }
        acc[j] = add(acc[j], v);
        out.push(to_out(acc[j]));
    }
    out
}

/// Which scan a fill computes.
#[derive(Clone, Copy)]
enum ScanKind {
    Sum,
    Prod,
}

fn cumsum_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    scan_fill(a, outs, ScanKind::Sum)
}

fn cumprod_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    scan_fill(a, outs, ScanKind::Prod)
}

fn scan_fill(a: Args, outs: &[Tensor], kind: ScanKind) -> Result<()> {
    let x = a.tensor(0)?;
    let out = &outs[0];
    if x.numel() == 0 {
        return Ok(());
    }
    let dim = normalize_dim(a.op, a.int(1)?, x.rank())?;
    let (n, inner) = if x.rank() == 0 {
        (1, 1)
    } else {
        (x.shape()[dim], x.shape()[dim + 1..].iter().product())
    };
    let dt = out.dtype();
    let result = if dt.is_float() {
        let xs = x.to_dtype(dt)?.to_vec_f64()?;
        with_dtype!(dt, O => {
            let v: Vec<O> = match kind {
                ScanKind::Sum => scan(xs, n, inner, 0f64, |p, q| p + q, O::from_f64),
                ScanKind::Prod => scan(xs, n, inner, 1f64, |p, q| p * q, O::from_f64),
            };
            Tensor::from_vec(v, x.shape())?
        })
    } else {
        // `dtype=` converts the input first (a float input with an integer dtype truncates).
        let xs = x.to_dtype(dt)?.to_dtype(DType::I64)?.to_vec::<i64>()?;
        with_dtype!(dt, O => {
            let v: Vec<O> = match kind {
                ScanKind::Sum => scan(xs, n, inner, 0i64, i64::wrapping_add, O::from_i64),
                ScanKind::Prod => scan(xs, n, inner, 1i64, i64::wrapping_mul, O::from_i64),
            };
            Tensor::from_vec(v, x.shape())?
        })
    };
    super::cast::copy_convert(a.op, out, &result)
}

/// The gradient of a prefix sum is the suffix sum of the output gradient.
fn cumsum_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    if !x.dtype().is_float() {
        return Ok(vec![None]);
    }
    let dim = c.args.int(1)?;
    let g = c.grad(0)?;
    let flipped = g.flip(&[dim])?.cumsum(dim, None)?.flip(&[dim])?;
    Ok(vec![Some(flipped.to_dtype(x.dtype())?)])
}

/// The gradient of a prefix product without dividing by the input (so zeros in it are exact):
/// with `xs` moved to the last dim, `grad[j] = E[j] * S[j]`, where `E[j] = prod(x[..j])` is the
/// exclusive prefix product and `S[j] = sum_{i >= j} g[i] * prod(x[j+1..=i])`. The products
/// `prod(x[j+1..=i])` are the prefix products of the rows of an `[n, n]` matrix that holds `x[k]`
/// where `k > j` and 1 elsewhere, so the gradient costs `n²` elements per slice (PyTorch divides
/// by the input where it has no zeros; this form needs no data-dependent branch, which capture
/// cannot take). Built from differentiable ops, so it has a gradient of its own.
fn cumprod_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let g = c.grad(0)?;
    if !x.dtype().is_float() || !g.dtype().is_float() {
        return Ok(vec![None]);
    }
    let dim = c.args.int(1)?;
    if x.rank() == 0 {
        return Ok(vec![Some(g.to_dtype(x.dtype())?)]);
    }
    if x.numel() == 0 {
        return Ok(vec![Some(Tensor::zeros_sym(&x.sym_shape(), x.dtype())?)]);
    }
    let d = normalize_dim(c.args.op, dim, x.rank())? as i64;
    let xs = x.to_dtype(g.dtype())?.transpose(d, -1)?;
    let gs = g.transpose(d, -1)?;
    let n = xs.sym_size(-1)?;
    // k - j over the [j, k] grid.
    let diff = super::compose::col_minus_row(n, n)?;
    let after = Tensor::where_tensor_scalar(&diff.gt_scalar(0)?, &xs.unsqueeze(-2)?, 1)?;
    let partial = after.cumprod(-1, None)?; // [.., j, i]: prod(x[j+1..=i]), 1 for i <= j
    let upper = Tensor::where_tensor_scalar(&diff.ge_scalar(0)?, &partial, 0)?;
    let suffix = upper.mul(&gs.unsqueeze(-2)?)?.sum(&[-1], false)?;
    // A symbolic factory (not `ones_like`), so capture records it as part of the graph.
    let mut first = xs.sym_shape();
    *first.last_mut().expect("rank >= 1") = SymInt::Lit(1);
    let shifted = Tensor::cat(
        &[
            Tensor::ones_sym(&first, xs.dtype())?,
            xs.narrow(-1, 0, n - 1)?,
        ],
        -1,
    )?;
    let exclusive = shifted.cumprod(-1, None)?;
    let grad = exclusive.mul(&suffix)?.transpose(d, -1)?;
    Ok(vec![Some(grad.to_dtype(x.dtype())?)])
}

impl Tensor {
    /// Running sums along `dim`; `dtype` converts the result (integer and bool inputs give i64
    /// by default, as in PyTorch).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.cumsum(1, None)?.to_vec::<i64>()?, vec![1, 3, 6, 4, 9, 15]);
    /// assert_eq!(x.cumsum(0, None)?.to_vec::<i64>()?, vec![1, 2, 3, 5, 7, 9]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn cumsum(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        let dt = dtype.map_or(Value::None, Value::DType);
        call1(&CUMSUM, &[self.into(), dim.into(), dt])
    }

    /// Running products along `dim`; `dtype` converts the input first (integer and bool inputs
    /// give i64 by default, as in PyTorch). The gradient is exact also where the input has
    /// zeros.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 0.0, 6.0], &[2, 3])?;
    /// assert_eq!(x.cumprod(1, None)?.to_vec::<f32>()?, vec![1.0, 2.0, 6.0, 4.0, 0.0, 0.0]);
    /// assert_eq!(x.cumprod(0, None)?.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0, 0.0, 18.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn cumprod(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        let dt = dtype.map_or(Value::None, Value::DType);
        call1(&CUMPROD, &[self.into(), dim.into(), dt])
    }
}
