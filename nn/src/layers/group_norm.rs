//! `GroupNorm`: normalization over groups of channels.

use tensorplay_runtime::{DType, Error, Result, Tensor, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::parameter;
use crate::module::Forward;

/// Group normalization (PyTorch's `nn.GroupNorm`): the channels of `[N, C, ...]` split into
/// `num_groups` groups, each normalized over its channels and positions; `eps` 1e-5; with
/// `affine` a per-channel `weight` of ones and `bias` of zeros.
///
/// ```
/// use tensorplay_nn::{Forward, GroupNorm, Module};
/// use tensorplay_runtime::{DType, Tensor};
/// let gn = GroupNorm::new(2, 4)?;
/// let y = gn.forward(&Tensor::randn(&[3, 4, 5], DType::F32)?)?;
/// assert_eq!(y.shape(), &[3, 4, 5]);
/// assert_eq!(gn.state_dict().keys().collect::<Vec<_>>(), ["weight", "bias"]);
/// assert!(GroupNorm::new(3, 4).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct GroupNorm {
    /// `[num_channels]`, when affine.
    pub weight: Option<Tensor>,
    /// `[num_channels]`, when affine.
    pub bias: Option<Tensor>,
    /// The groups the channels split into.
    pub num_groups: usize,
    /// The channels.
    pub num_channels: usize,
    /// Added to the variance.
    pub eps: f64,
}

impl GroupNorm {
    /// PyTorch's defaults: `eps = 1e-5`, affine, f32.
    pub fn new(num_groups: usize, num_channels: usize) -> Result<GroupNorm> {
        GroupNorm::with_options(num_groups, num_channels, 1e-5, true, DType::F32)
    }

    /// Every option.
    pub fn with_options(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        dtype: DType,
    ) -> Result<GroupNorm> {
        float_dtype("GroupNorm", dtype)?;
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::argument(
                "GroupNorm",
                "num_groups",
                format!("a positive divisor of num_channels ({num_channels})"),
                num_groups.to_string(),
            ));
        }
        let per_channel =
            |v: f64| affine.then(|| parameter(Tensor::try_full(&[num_channels], v, dtype)?));
        Ok(GroupNorm {
            weight: per_channel(1.0).transpose()?,
            bias: per_channel(0.0).transpose()?,
            num_groups,
            num_channels,
            eps,
        })
    }
}

impl Forward for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::group_norm(
            x,
            self.num_groups,
            self.weight.as_ref(),
            self.bias.as_ref(),
            self.eps,
        )
    }
}
