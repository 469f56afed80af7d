//! `Linear`: `y = x @ weight.T + bias`.

use tensorplay_runtime::{DType, Error, Result, Tensor, nn};

use crate::Module;
use crate::init::{fan_in_bound, parameter, uniform};
use crate::module::Forward;

/// A fully connected layer (PyTorch's `nn.Linear`): `weight` `[out_features, in_features]`
/// and `bias` `[out_features]` (when `bias`), both initialised uniform in
/// `±1/sqrt(in_features)` (PyTorch's `kaiming_uniform_(a=sqrt(5))` and its bias rule).
///
/// ```
/// use tensorplay_nn::{Forward, Linear, Module};
/// use tensorplay_runtime::{DType, Tensor};
/// let layer = Linear::new(4, 3, true)?;
/// assert_eq!(layer.weight.shape(), &[3, 4]);
/// let y = layer.forward(&Tensor::ones(&[2, 4], DType::F32))?;
/// assert_eq!(y.shape(), &[2, 3]);
/// assert_eq!(layer.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, or none.
    pub bias: Option<Tensor>,
    /// The input size.
    pub in_features: usize,
    /// The output size.
    pub out_features: usize,
}

impl Linear {
    /// A layer with PyTorch's default initialisation, in f32.
    pub fn new(in_features: usize, out_features: usize, bias: bool) -> Result<Linear> {
        Linear::with_dtype(in_features, out_features, bias, DType::F32)
    }

    /// [`Linear::new`] with parameters of the floating-point `dtype`.
    pub fn with_dtype(
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
    ) -> Result<Linear> {
        float_dtype("Linear", dtype)?;
        let bound = fan_in_bound(in_features);
        let weight = parameter(uniform(&[out_features, in_features], bound, dtype)?)?;
        let bias = bias
            .then(|| parameter(uniform(&[out_features], bound, dtype)?))
            .transpose()?;
        Ok(Linear {
            weight,
            bias,
            in_features,
            out_features,
        })
    }
}

impl Forward for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// An error unless `dtype` is floating-point (a layer's parameters must be able to train).
pub(crate) fn float_dtype(layer: &str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::argument(
            layer,
            "dtype",
            "a floating-point dtype",
            dtype.to_string(),
        ))
    }
}
