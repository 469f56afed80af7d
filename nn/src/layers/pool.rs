//! Pooling layers and `Flatten`: `MaxPool2d`, `AvgPool2d`, `AdaptiveAvgPool2d`.

use tensorplay_runtime::{Result, Tensor, nn};

use crate::Module;
use crate::module::Forward;

/// Max pooling over `[N, C, H, W]` (or `[C, H, W]`) windows (PyTorch's `nn.MaxPool2d`):
/// `stride` defaults to the kernel size, `padding` 0 (padded with `-inf`), `dilation` 1,
/// `ceil_mode` off. One entry in a setting applies to both dims.
///
/// ```
/// use tensorplay_nn::{Forward, MaxPool2d};
/// use tensorplay_runtime::Tensor;
/// let pool = MaxPool2d::new(&[2]);
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4])?;
/// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct MaxPool2d {
    /// The window.
    pub kernel_size: Vec<usize>,
    /// The step between windows (empty: the kernel size).
    pub stride: Vec<usize>,
    /// Implicit `-inf` padding on both sides.
    pub padding: Vec<usize>,
    /// The spacing between window taps.
    pub dilation: Vec<usize>,
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl MaxPool2d {
    /// Windows of `kernel_size`, PyTorch's defaults otherwise.
    pub fn new(kernel_size: &[usize]) -> MaxPool2d {
        MaxPool2d {
            kernel_size: kernel_size.to_vec(),
            stride: Vec::new(),
            padding: vec![0],
            dilation: vec![1],
            ceil_mode: false,
        }
    }

    /// The values and, per output, the flat `H * W` index of the maximum (PyTorch's
    /// `return_indices=True`).
    pub fn forward_with_indices(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        nn::max_pool2d_with_indices(
            x,
            &self.kernel_size,
            &self.stride,
            &self.padding,
            &self.dilation,
            self.ceil_mode,
        )
    }
}

impl Forward for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.forward_with_indices(x)?.0)
    }
}

/// Average pooling (PyTorch's `nn.AvgPool2d`): `stride` defaults to the kernel size,
/// `padding` 0, `ceil_mode` off, `count_include_pad` on (padded zeros count in the average),
/// no `divisor_override`.
///
/// ```
/// use tensorplay_nn::{AvgPool2d, Forward};
/// use tensorplay_runtime::Tensor;
/// let pool = AvgPool2d::new(&[2]);
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4])?;
/// assert_eq!(pool.forward(&x)?.to_vec::<f32>()?, vec![2.5, 4.5, 10.5, 12.5]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct AvgPool2d {
    /// The window.
    pub kernel_size: Vec<usize>,
    /// The step between windows (empty: the kernel size).
    pub stride: Vec<usize>,
    /// Implicit zero padding on both sides.
    pub padding: Vec<usize>,
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
    /// Count padded zeros in the divisor.
    pub count_include_pad: bool,
    /// Divide by this instead of the window's size.
    pub divisor_override: Option<i64>,
}

impl AvgPool2d {
    /// Windows of `kernel_size`, PyTorch's defaults otherwise.
    pub fn new(kernel_size: &[usize]) -> AvgPool2d {
        AvgPool2d {
            kernel_size: kernel_size.to_vec(),
            stride: Vec::new(),
            padding: vec![0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

impl Forward for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::avg_pool2d(
            x,
            &self.kernel_size,
            &self.stride,
            &self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )
    }
}

/// Average pooling to a fixed `output_size` (PyTorch's `nn.AdaptiveAvgPool2d`; `[1, 1]` is a
/// global average pool).
///
/// ```
/// use tensorplay_nn::{AdaptiveAvgPool2d, Forward};
/// use tensorplay_runtime::{DType, Tensor};
/// let gap = AdaptiveAvgPool2d::new(&[1, 1]);
/// assert_eq!(gap.forward(&Tensor::ones(&[2, 8, 7, 7], DType::F32))?.shape(), &[2, 8, 1, 1]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct AdaptiveAvgPool2d {
    /// `[H_out, W_out]` (one entry: both).
    pub output_size: Vec<usize>,
}

impl AdaptiveAvgPool2d {
    /// Pooling to `output_size`.
    pub fn new(output_size: &[usize]) -> AdaptiveAvgPool2d {
        AdaptiveAvgPool2d {
            output_size: output_size.to_vec(),
        }
    }
}

impl Forward for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::adaptive_avg_pool2d(x, &self.output_size)
    }
}

/// Flattens dims `start_dim..=end_dim` into one (PyTorch's `nn.Flatten`: dims 1 to -1, so a
/// batch `[N, C, H, W]` becomes `[N, C * H * W]`).
///
/// ```
/// use tensorplay_nn::{Flatten, Forward};
/// use tensorplay_runtime::{DType, Tensor};
/// let y = Flatten::new().forward(&Tensor::ones(&[2, 3, 4, 5], DType::F32))?;
/// assert_eq!(y.shape(), &[2, 60]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct Flatten {
    /// The first dim flattened.
    pub start_dim: i64,
    /// The last dim flattened (negative counts from the end).
    pub end_dim: i64,
}

impl Flatten {
    /// PyTorch's defaults: dims 1 to -1.
    pub fn new() -> Flatten {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten::new()
    }
}

impl Forward for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten(self.start_dim, self.end_dim)
    }
}
