//! `RMSNorm`: root-mean-square normalization over the trailing dims.

use tensorplay_runtime::{DType, Result, Tensor, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::parameter;
use crate::module::Forward;

/// Root-mean-square normalization over the trailing `normalized_shape` dims (PyTorch's
/// `nn.RMSNorm`): `eps` `None` (the input dtype's machine epsilon); with
/// `elementwise_affine` a `weight` of ones.
///
/// ```
/// use tensorplay_nn::{Forward, Module, RMSNorm};
/// use tensorplay_runtime::Tensor;
/// let norm = RMSNorm::new(&[2])?;
/// let y = norm.forward(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?)?.to_vec::<f32>()?;
/// assert!((y[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-5);
/// assert_eq!(norm.num_parameters(), 2);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct RMSNorm {
    /// The scale (`normalized_shape`), when `elementwise_affine`.
    pub weight: Option<Tensor>,
    /// The trailing dims normalized over.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square (`None`: the input dtype's machine epsilon).
    pub eps: Option<f64>,
}

impl RMSNorm {
    /// PyTorch's defaults: `eps = None`, affine, f32.
    pub fn new(normalized_shape: &[usize]) -> Result<RMSNorm> {
        RMSNorm::with_options(normalized_shape, None, true, DType::F32)
    }

    /// Every option.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        dtype: DType,
    ) -> Result<RMSNorm> {
        float_dtype("RMSNorm", dtype)?;
        let weight = elementwise_affine
            .then(|| parameter(Tensor::ones(normalized_shape, dtype)))
            .transpose()?;
        Ok(RMSNorm {
            weight,
            normalized_shape: normalized_shape.to_vec(),
            eps,
        })
    }
}

impl Forward for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::rms_norm(x, &self.normalized_shape, self.weight.as_ref(), self.eps)
    }
}
