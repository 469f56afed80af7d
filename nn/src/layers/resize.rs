//! The resizing layer `Upsample` (the padding layers are in `pad.rs`).

use tensorplay_runtime::nn::InterpolateMode;
use tensorplay_runtime::{Result, Tensor, nn};

use crate::Module;
use crate::module::Forward;

/// Resizes the spatial dims of `[N, C, d…]` inputs (PyTorch's `nn.Upsample`) to a fixed `size`
/// or by `scale_factor`, with [`nn::interpolate`].
///
/// ```
/// use tensorplay_nn::{Forward, Upsample};
/// use tensorplay_runtime::nn::InterpolateMode;
/// use tensorplay_runtime::{DType, Tensor};
/// let up = Upsample::scale(&[2.0], InterpolateMode::Bilinear);
/// let y = up.forward(&Tensor::ones(&[1, 3, 4, 5], DType::F32))?;
/// assert_eq!(y.shape(), &[1, 3, 8, 10]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct Upsample {
    /// The output's spatial size (one entry for every dim or one per dim), or `None`.
    pub size: Option<Vec<usize>>,
    /// The factor per spatial dim (one entry or one per dim), or `None`.
    pub scale_factor: Option<Vec<f64>>,
    /// How new elements are computed (PyTorch's default: nearest).
    #[skip]
    pub mode: InterpolateMode,
    /// Linear modes only: map corner elements onto each other.
    pub align_corners: Option<bool>,
}

impl Upsample {
    /// Resizes to `size` with `mode`.
    pub fn size(size: &[usize], mode: InterpolateMode) -> Upsample {
        Upsample {
            size: Some(size.to_vec()),
            scale_factor: None,
            mode,
            align_corners: None,
        }
    }

    /// Resizes by `scale_factor` with `mode`.
    pub fn scale(scale_factor: &[f64], mode: InterpolateMode) -> Upsample {
        Upsample {
            size: None,
            scale_factor: Some(scale_factor.to_vec()),
            mode,
            align_corners: None,
        }
    }
}

impl Forward for Upsample {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::interpolate(
            x,
            self.size.as_deref(),
            self.scale_factor.as_deref(),
            self.mode,
            self.align_corners,
            None,
        )
    }
}
