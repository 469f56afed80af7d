//! `LayerNorm`: normalization over the trailing dims.

use tensorplay_runtime::{DType, Result, Tensor, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::parameter;
use crate::module::Forward;

/// Layer normalization over the trailing `normalized_shape` dims (PyTorch's `nn.LayerNorm`):
/// `eps` 1e-5; with `elementwise_affine` a `weight` of ones and (with `bias`) a `bias` of
/// zeros, both shaped `normalized_shape`.
///
/// ```
/// use tensorplay_nn::{Forward, LayerNorm, Module};
/// use tensorplay_runtime::Tensor;
/// let ln = LayerNorm::new(&[2])?;
/// assert_eq!(ln.eps, 1e-5);
/// let y = ln.forward(&Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2])?)?;
/// assert!((y.to_vec::<f32>()?[1] - 1.0).abs() < 1e-4);
/// assert_eq!(ln.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct LayerNorm {
    /// The scale (`normalized_shape`), when `elementwise_affine`.
    pub weight: Option<Tensor>,
    /// The shift (`normalized_shape`), when `elementwise_affine` and `bias`.
    pub bias: Option<Tensor>,
    /// The trailing dims normalized over.
    pub normalized_shape: Vec<usize>,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// PyTorch's defaults: `eps = 1e-5`, affine with a bias, f32.
    pub fn new(normalized_shape: &[usize]) -> Result<LayerNorm> {
        LayerNorm::with_options(normalized_shape, 1e-5, true, true, DType::F32)
    }

    /// Every option.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        bias: bool,
        dtype: DType,
    ) -> Result<LayerNorm> {
        float_dtype("LayerNorm", dtype)?;
        let weight = elementwise_affine
            .then(|| parameter(Tensor::ones(normalized_shape, dtype)))
            .transpose()?;
        let bias = (elementwise_affine && bias)
            .then(|| parameter(Tensor::zeros(normalized_shape, dtype)))
            .transpose()?;
        Ok(LayerNorm {
            weight,
            bias,
            normalized_shape: normalized_shape.to_vec(),
            eps,
        })
    }
}

impl Forward for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::layer_norm(
            x,
            &self.normalized_shape,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}
