//! `Conv1d` and `Conv2d`: convolutions with learned filters.

use tensorplay_runtime::nn::ConvPadding;
use tensorplay_runtime::{DType, Error, Result, Tensor, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::{fan_in_bound, parameter, uniform};
use crate::module::Forward;

/// A convolution's settings besides its channels and kernel size, with PyTorch's defaults
/// (`stride` 1, `padding` 0, `dilation` 1, `groups` 1, a bias, f32). One entry in `stride`,
/// `padding` or `dilation` applies to every spatial dim.
///
/// ```
/// use tensorplay_nn::ConvOptions;
/// let o = ConvOptions { stride: vec![2], padding: 1.into(), ..ConvOptions::default() };
/// assert_eq!((o.groups, o.bias), (1, true));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConvOptions {
    /// The step between windows, per spatial dim (or one for all).
    pub stride: Vec<usize>,
    /// Zero padding: explicit sizes, or `"same"`/`"valid"` ([`ConvPadding::parse`]).
    pub padding: ConvPadding,
    /// The spacing between kernel taps, per spatial dim (or one for all).
    pub dilation: Vec<usize>,
    /// Channel groups: `in_channels` and `out_channels` must both be multiples.
    pub groups: usize,
    /// Whether the layer adds a learned bias.
    pub bias: bool,
    /// The parameters' floating-point dtype.
    pub dtype: DType,
}

impl Default for ConvOptions {
    fn default() -> Self {
        ConvOptions {
            stride: vec![1],
            padding: ConvPadding::Explicit(vec![0]),
            dilation: vec![1],
            groups: 1,
            bias: true,
            dtype: DType::F32,
        }
    }
}

/// A 2-D convolution (PyTorch's `nn.Conv2d`): `weight` `[out_channels, in_channels / groups,
/// kH, kW]` and `bias` `[out_channels]`, both initialised uniform in `±1/sqrt(fan_in)` with
/// `fan_in = in_channels / groups * kH * kW` (PyTorch's `kaiming_uniform_(a=sqrt(5))` and its
/// bias rule). Input `[N, C, H, W]` or unbatched `[C, H, W]`.
///
/// ```
/// use tensorplay_nn::{Conv2d, ConvOptions, Forward, Module};
/// use tensorplay_runtime::{DType, Tensor};
/// let conv = Conv2d::new(3, 8, [3, 3], ConvOptions { padding: 1.into(), ..Default::default() })?;
/// assert_eq!(conv.weight.shape(), &[8, 3, 3, 3]);
/// let y = conv.forward(&Tensor::ones(&[2, 3, 16, 16], DType::F32))?;
/// assert_eq!(y.shape(), &[2, 8, 16, 16]);
/// assert_eq!(conv.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// assert!(Conv2d::new(3, 8, [3, 3], ConvOptions { groups: 2, ..Default::default() }).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, kH, kW]`.
    pub weight: Tensor,
    /// `[out_channels]`, or none.
    pub bias: Option<Tensor>,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// `[kH, kW]`.
    pub kernel_size: [usize; 2],
    /// Stride, padding, dilation, groups.
    #[skip]
    pub options: ConvOptions,
}

/// An error unless `groups` divides both channel counts.
fn check_channels(layer: &str, in_c: usize, out_c: usize, groups: usize) -> Result<()> {
    if groups == 0 || !in_c.is_multiple_of(groups) || !out_c.is_multiple_of(groups) {
        return Err(Error::argument(
            layer,
            "groups",
            format!("a positive divisor of in_channels ({in_c}) and out_channels ({out_c})"),
            groups.to_string(),
        ));
    }
    Ok(())
}

/// A weight of `shape` (`[out, in / groups, k...]`) and its bias, with PyTorch's default
/// initialisation.
fn conv_parameters(shape: &[usize], options: &ConvOptions) -> Result<(Tensor, Option<Tensor>)> {
    let fan_in: usize = shape[1..].iter().product();
    let bound = fan_in_bound(fan_in);
    let weight = parameter(uniform(shape, bound, options.dtype)?)?;
    let bias = options
        .bias
        .then(|| parameter(uniform(&shape[..1], bound, options.dtype)?))
        .transpose()?;
    Ok((weight, bias))
}

impl Conv2d {
    /// A convolution from `in_channels` to `out_channels` with a `kernel_size` window.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        options: ConvOptions,
    ) -> Result<Conv2d> {
        float_dtype("Conv2d", options.dtype)?;
        check_channels("Conv2d", in_channels, out_channels, options.groups)?;
        let [kh, kw] = kernel_size;
        let shape = [out_channels, in_channels / options.groups, kh, kw];
        let (weight, bias) = conv_parameters(&shape, &options)?;
        Ok(Conv2d {
            weight,
            bias,
            in_channels,
            out_channels,
            kernel_size,
            options,
        })
    }
}

impl Forward for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let o = &self.options;
        nn::conv2d(
            x,
            &self.weight,
            self.bias.as_ref(),
            &o.stride,
            o.padding.clone(),
            &o.dilation,
            o.groups,
        )
    }
}

/// A 1-D convolution (PyTorch's `nn.Conv1d`): `weight` `[out_channels, in_channels / groups,
/// k]`, `bias` `[out_channels]`, initialised as [`Conv2d`]'s. Input `[N, C, L]` or unbatched
/// `[C, L]`; `options` hold one stride, padding and dilation.
///
/// ```
/// use tensorplay_nn::{Conv1d, ConvOptions, Forward};
/// use tensorplay_runtime::{DType, Tensor, nn::ConvPadding};
/// let conv = Conv1d::new(4, 6, 3, ConvOptions { padding: ConvPadding::Same, ..Default::default() })?;
/// let y = conv.forward(&Tensor::ones(&[2, 4, 10], DType::F32))?;
/// assert_eq!(y.shape(), &[2, 6, 10]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Conv1d {
    /// `[out_channels, in_channels / groups, kernel_size]`.
    pub weight: Tensor,
    /// `[out_channels]`, or none.
    pub bias: Option<Tensor>,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// The window length.
    pub kernel_size: usize,
    /// Stride, padding, dilation, groups.
    #[skip]
    pub options: ConvOptions,
}

impl Conv1d {
    /// A convolution from `in_channels` to `out_channels` with a window of `kernel_size`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: usize,
        options: ConvOptions,
    ) -> Result<Conv1d> {
        float_dtype("Conv1d", options.dtype)?;
        check_channels("Conv1d", in_channels, out_channels, options.groups)?;
        for (name, v) in [("stride", &options.stride), ("dilation", &options.dilation)] {
            if v.len() != 1 {
                return Err(Error::argument(
                    "Conv1d",
                    name,
                    "one entry",
                    format!("{v:?}"),
                ));
            }
        }
        let shape = [out_channels, in_channels / options.groups, kernel_size];
        let (weight, bias) = conv_parameters(&shape, &options)?;
        Ok(Conv1d {
            weight,
            bias,
            in_channels,
            out_channels,
            kernel_size,
            options,
        })
    }
}

impl Forward for Conv1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let o = &self.options;
        nn::conv1d(
            x,
            &self.weight,
            self.bias.as_ref(),
            o.stride[0],
            o.padding.clone(),
            o.dilation[0],
            o.groups,
        )
    }
}
