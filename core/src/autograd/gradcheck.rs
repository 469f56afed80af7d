//! Finite-difference gradient checking: the test oracle for every derivative in the op table.

use tensorplay_ir::{DType, Error, Result};

use super::engine::grad;
use super::mode::no_grad;
use crate::tensor::Tensor;

/// Tolerances and step of [`gradcheck`].
#[derive(Debug, Clone, Copy)]
pub struct GradcheckOptions {
    /// Central-difference step.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance (relative to the numerical derivative).
    pub rtol: f64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
        }
    }
}

/// Projects the output onto a fixed pseudo-random direction so one backward pass checks the whole
/// Jacobian against one finite difference per input element.
fn projection(like: &Tensor) -> Result<Tensor> {
    let n = like.numel();
    let v: Vec<f64> = (0..n)
        .map(|i| 0.5 + ((i as f64 * 0.618_033_988_75).fract()))
        .collect();
    Tensor::from_vec(v, like.shape())?.to_dtype(like.dtype())
}

fn project(y: &Tensor, v: &Tensor) -> Result<f64> {
    let p = y.to_dtype(DType::F64)?.mul(&v.to_dtype(DType::F64)?)?;
    Ok(p.to_vec_f64()?.iter().sum())
}

/// Compares the analytical gradient of `f` at `inputs` with central finite differences.
///
/// Inputs that require grad are checked; use f64 inputs for meaningful tolerances. Returns an
/// autograd error naming the input, the element and both values on the first mismatch.
///
/// ```
/// use tensorplay_core::{Tensor, autograd::{gradcheck, GradcheckOptions}};
/// let x = Tensor::from_vec(vec![0.3f64, -1.2, 2.0], &[3])?.requires_grad_(true)?;
/// gradcheck(|xs| xs[0].exp()?.mul(&xs[0]), &[x], GradcheckOptions::default())?;
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let y = f(inputs)?;
    if !y.dtype().is_float() {
        return Err(Error::argument(
            "gradcheck",
            "f",
            "a function returning a floating tensor",
            format!("dtype {}", y.dtype()),
        ));
    }
    let v = projection(&y)?;
    let checked: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].requires_grad())
        .collect();
    if checked.is_empty() {
        return Err(Error::argument(
            "gradcheck",
            "inputs",
            "at least one input that requires grad",
            "none",
        ));
    }
    let wrt: Vec<Tensor> = checked.iter().map(|&i| inputs[i].clone()).collect();
    let analytical = if y.requires_grad() {
        grad(std::slice::from_ref(&y), &wrt, &[Some(v.clone())], false)?
    } else {
        vec![None; wrt.len()]
    };

    let _g = no_grad();
    for (k, &i) in checked.iter().enumerate() {
        let x = &inputs[i];
        let base = x.to_vec_f64()?;
        let ana = match &analytical[k] {
            Some(g) => g.to_vec_f64()?,
            None => vec![0.0; base.len()],
        };
        for j in 0..base.len() {
            let eval = |delta: f64| -> Result<f64> {
                let mut d = base.clone();
                d[j] += delta;
                let xj = Tensor::from_vec(d, x.shape())?.to_dtype(x.dtype())?;
                let mut args = inputs.to_vec();
                args[i] = xj;
                project(&f(&args)?, &v)
            };
            let num = (eval(opts.eps)? - eval(-opts.eps)?) / (2.0 * opts.eps);
            let a = ana[j];
            let ok = (num - a).abs() <= opts.atol + opts.rtol * num.abs()
                || (num.is_nan() && a.is_nan());
            if !ok {
                return Err(Error::Autograd(format!(
                    "gradcheck failed for input {i}, element {j}: analytical {a:e} vs numerical {num:e}"
                )));
            }
        }
    }
    Ok(())
}
