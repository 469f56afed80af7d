//! The moment reductions: `var` and `std` (with a `correction`), accumulated in f64 by Welford's
//! update and Chan's merge, and their derivatives.

use half::{bf16, f16};
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::args::{dims_args_at, dims_value, keep_shape, mask_dims, reduced_len};
use super::sum::lane_sum;
use crate::dispatch::call1;
use crate::element::Element;
use crate::kernels::reduce::{reduced_shape, reducer};
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::tensor::Tensor;
use crate::value::Args;

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

impl Tensor {
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
