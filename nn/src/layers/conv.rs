//! `Conv1d`, `Conv2d` and `ConvTranspose2d`: convolutions with learned filters.

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

/// A weight of `shape` and, with `bias`, a bias of `bias_len`, with PyTorch's default
/// initialisation: both uniform in `±1/sqrt(fan_in)`, `fan_in` being the product of the
/// weight's dims after the first (`[out, in / groups, k...]` for a convolution,
/// `[in, out / groups, k...]` for a transposed one, as PyTorch computes it from the tensor).
fn conv_parameters(
    shape: &[usize],
    bias_len: usize,
    bias: bool,
    dtype: DType,
) -> Result<(Tensor, Option<Tensor>)> {
    let fan_in: usize = shape[1..].iter().product();
    let bound = fan_in_bound(fan_in);
    let weight = parameter(uniform(shape, bound, dtype)?)?;
    let bias = bias
        .then(|| parameter(uniform(&[bias_len], bound, dtype)?))
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
        let (weight, bias) = conv_parameters(&shape, out_channels, options.bias, options.dtype)?;
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
        let (weight, bias) = conv_parameters(&shape, out_channels, options.bias, options.dtype)?;
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

/// A transposed convolution's settings besides its channels and kernel size, with PyTorch's
/// defaults (`stride` 1, `padding` 0, `output_padding` 0, `groups` 1, a bias, `dilation` 1,
/// f32). One entry in a size list applies to both spatial dims.
///
/// ```
/// use tensorplay_nn::ConvTransposeOptions;
/// let o = ConvTransposeOptions { stride: vec![2], output_padding: vec![1], ..Default::default() };
/// assert_eq!((o.padding.clone(), o.groups, o.bias), (vec![0], 1, true));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTransposeOptions {
    /// The step between the input's positions on the output, per spatial dim (or one for all).
    pub stride: Vec<usize>,
    /// Rows and columns removed from each side of the full output.
    pub padding: Vec<usize>,
    /// Rows and columns added on the bottom/right of the output (to pick among the output
    /// sizes a strided convolution maps to one input size): each smaller than the stride or
    /// the dilation.
    pub output_padding: Vec<usize>,
    /// Channel groups: `in_channels` and `out_channels` must both be multiples.
    pub groups: usize,
    /// Whether the layer adds a learned bias.
    pub bias: bool,
    /// The spacing between kernel taps, per spatial dim (or one for all).
    pub dilation: Vec<usize>,
    /// The parameters' floating-point dtype.
    pub dtype: DType,
}

impl Default for ConvTransposeOptions {
    fn default() -> Self {
        ConvTransposeOptions {
            stride: vec![1],
            padding: vec![0],
            output_padding: vec![0],
            groups: 1,
            bias: true,
            dilation: vec![1],
            dtype: DType::F32,
        }
    }
}

/// A 2-D transposed convolution (PyTorch's `nn.ConvTranspose2d`): `weight`
/// `[in_channels, out_channels / groups, kH, kW]` and `bias` `[out_channels]`, both
/// initialised uniform in `±1/sqrt(fan_in)` with PyTorch's `fan_in` for this weight,
/// `out_channels / groups * kH * kW`. Input `[N, C, H, W]` or unbatched `[C, H, W]`; runs
/// [`nn::conv_transpose2d`].
///
/// ```
/// use tensorplay_nn::{ConvTranspose2d, ConvTransposeOptions, Forward, Module};
/// use tensorplay_runtime::{DType, Tensor};
/// let up = ConvTranspose2d::new(8, 4, [3, 3], ConvTransposeOptions {
///     stride: vec![2], padding: vec![1], output_padding: vec![1], ..Default::default()
/// })?;
/// assert_eq!(up.weight.shape(), &[8, 4, 3, 3]);
/// let y = up.forward(&Tensor::ones(&[2, 8, 5, 5], DType::F32))?;
/// assert_eq!(y.shape(), &[2, 4, 10, 10]);
/// assert_eq!(up.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kH, kW]`.
    pub weight: Tensor,
    /// `[out_channels]`, or none.
    pub bias: Option<Tensor>,
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// `[kH, kW]`.
    pub kernel_size: [usize; 2],
    /// Stride, padding, output padding, groups, dilation.
    #[skip]
    pub options: ConvTransposeOptions,
}

impl ConvTranspose2d {
    /// A transposed convolution from `in_channels` to `out_channels` with a `kernel_size`
    /// window.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        options: ConvTransposeOptions,
    ) -> Result<ConvTranspose2d> {
        const LAYER: &str = "ConvTranspose2d";
        float_dtype(LAYER, options.dtype)?;
        check_channels(LAYER, in_channels, out_channels, options.groups)?;
        let [kh, kw] = kernel_size;
        let shape = [in_channels, out_channels / options.groups, kh, kw];
        let (weight, bias) = conv_parameters(&shape, out_channels, options.bias, options.dtype)?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            in_channels,
            out_channels,
            kernel_size,
            options,
        })
    }
}

impl Forward for ConvTranspose2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let o = &self.options;
        nn::conv_transpose2d(
            x,
            &self.weight,
            self.bias.as_ref(),
            &o.stride,
            &o.padding,
            &o.output_padding,
            o.groups,
            &o.dilation,
        )
    }
}
