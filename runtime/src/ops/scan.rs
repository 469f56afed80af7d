//! Scans: `cumsum` along one dim. A prefix sum carries a value from element to element, which a
//! per-element scalar expression cannot, so the compiler runs it as a barrier ("has no scalar
//! lowering").
//!
//! Floating inputs accumulate in f64 and round each prefix once (PyTorch's CPU kernels accumulate
//! `float` in `double` too); integer and bool inputs sum in i64 (wrapping), and their result is
//! i64 unless `dtype=` says otherwise (`dtype=` converts the input before summing).

use tensorplay_ir::shape::normalize_dim;
use tensorplay_ir::{DType, OpClass, Result};

use super::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::element::Element;
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

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&CUMSUM];

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

fn cumsum_fill(a: Args, outs: &[Tensor]) -> Result<()> {
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
            let v: Vec<O> = scan(xs, n, inner, 0f64, |p, q| p + q, O::from_f64);
            Tensor::from_vec(v, x.shape())?
        })
    } else {
        // `dtype=` converts the input first (a float input with an integer dtype truncates).
        let xs = x.to_dtype(dt)?.to_dtype(DType::I64)?.to_vec::<i64>()?;
        with_dtype!(dt, O => {
            let v: Vec<O> = scan(xs, n, inner, 0i64, i64::wrapping_add, O::from_i64);
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

impl Tensor {
    /// Running sums along `dim`; `dtype` converts the result (integer and bool inputs give i64
    /// by default, as in PyTorch).
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])?;
    /// assert_eq!(x.cumsum(1, None)?.to_vec::<i64>()?, vec![1, 3, 6, 4, 9, 15]);
    /// assert_eq!(x.cumsum(0, None)?.to_vec::<i64>()?, vec![1, 2, 3, 5, 7, 9]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn cumsum(&self, dim: i64, dtype: Option<DType>) -> Result<Tensor> {
        let dt = dtype.map_or(Value::None, Value::DType);
        call1(&CUMSUM, &[self.into(), dim.into(), dt])
    }
}
