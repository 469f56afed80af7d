//! Parameter initialisation with PyTorch's default schemes, drawn from the global generator
//! (`tensorplay::manual_seed` makes them reproducible).

use tensorplay_runtime::{DType, Error, Result, Tensor};

/// A new leaf that requires grad, holding `t`'s values (a parameter).
pub fn parameter(t: Tensor) -> Result<Tensor> {
    t.detach().requires_grad_(true)
}

/// Uniform values in `[-bound, bound)` of `shape` and `dtype` (drawn in f32, then converted).
///
/// ```
/// use tensorplay_nn::init::uniform;
/// use tensorplay_runtime::DType;
/// let t = uniform(&[1000], 0.5, DType::F32)?.to_vec::<f32>()?;
/// assert!(t.iter().all(|v| (-0.5..0.5).contains(v)));
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn uniform(shape: &[usize], bound: f64, dtype: DType) -> Result<Tensor> {
    if !bound.is_finite() || bound < 0.0 {
        return Err(Error::argument(
            "init::uniform",
            "bound",
            "a finite number >= 0",
            bound.to_string(),
        ));
    }
    Tensor::rand(shape, DType::F32)?
        .mul_scalar(2.0 * bound)?
        .add_scalar(-bound)?
        .to_dtype(dtype)
}

/// Standard normal values of `shape` and `dtype` (drawn in f32, then converted).
pub fn normal(shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::randn(shape, DType::F32)?.to_dtype(dtype)
}

/// PyTorch's `kaiming_uniform_(w, a=sqrt(5))` for a weight whose fan-in is `fan_in`, the
/// default of `Linear` and the convolutions: uniform in `±1/sqrt(fan_in)` (0 when
/// `fan_in` is 0). The same bound is their bias' default.
pub fn fan_in_bound(fan_in: usize) -> f64 {
    if fan_in == 0 {
        0.0
    } else {
        1.0 / (fan_in as f64).sqrt()
    }
}
