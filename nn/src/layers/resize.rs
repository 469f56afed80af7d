//! Padding and resizing layers: `ZeroPad2d`, `ConstantPad2d`, `ReflectionPad2d`,
//! `ReplicationPad2d`, `CircularPad2d` (PyTorch's 2-D padding modules) and `Upsample`.

use tensorplay_runtime::nn::{InterpolateMode, PadMode};
use tensorplay_runtime::{Error, Result, Tensor, nn};

use crate::Module;
use crate::module::Forward;

/// `[left, right, top, bottom]` from one size for every side or the four of them.
fn sides(layer: &str, padding: &[i64]) -> Result<[i64; 4]> {
    match *padding {
        [p] => Ok([p; 4]),
        [l, r, t, b] => Ok([l, r, t, b]),
        _ => Err(Error::argument(
            layer,
            "padding",
            "one size for every side or four (left, right, top, bottom)",
            format!("{padding:?}"),
        )),
    }
}

macro_rules! pad2d {
    ($(#[$doc:meta])* $name:ident, $mode:ident) => {
        $(#[$doc])*
        #[derive(Module, Debug, Clone, PartialEq)]
        #[module(crate = crate)]
        pub struct $name {
            /// `[left, right, top, bottom]`: the last dim's sides, then the one before's.
            pub padding: [i64; 4],
        }

        impl $name {
            /// Pads by `padding`: one size for every side or `[left, right, top, bottom]`.
            pub fn new(padding: &[i64]) -> Result<$name> {
                Ok($name {
                    padding: sides(stringify!($name), padding)?,
                })
            }
        }

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                nn::pad(x, &self.padding, PadMode::$mode, 0.0)
            }
        }
    };
}

pad2d!(
    /// Pads the last two dims by mirroring about the edge (PyTorch's `nn.ReflectionPad2d`):
    /// each side less than its dim.
    ///
    /// ```
    /// use tensorplay_nn::{Forward, ReflectionPad2d};
    /// use tensorplay_runtime::Tensor;
    /// let pad = ReflectionPad2d::new(&[1, 0, 0, 0])?;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2])?;
    /// assert_eq!(pad.forward(&x)?.to_vec::<f32>()?, vec![2.0, 1.0, 2.0, 4.0, 3.0, 4.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    ReflectionPad2d,
    Reflect
);
pad2d!(
    /// Pads the last two dims by repeating the edge (PyTorch's `nn.ReplicationPad2d`).
    ReplicationPad2d,
    Replicate
);
pad2d!(
    /// Pads the last two dims by wrapping around (PyTorch's `nn.CircularPad2d`): each side at
    /// most its dim.
    CircularPad2d,
    Circular
);
pad2d!(
    /// Pads the last two dims with zeros (PyTorch's `nn.ZeroPad2d`); negative sizes crop.
    ZeroPad2d,
    Constant
);

/// Pads the last two dims with `value` (PyTorch's `nn.ConstantPad2d`); negative sizes crop.
///
/// ```
/// use tensorplay_nn::{ConstantPad2d, Forward};
/// use tensorplay_runtime::{DType, Tensor};
/// let pad = ConstantPad2d::new(&[1], 0.5)?;
/// let y = pad.forward(&Tensor::ones(&[3, 2, 2], DType::F32))?;
/// assert_eq!(y.shape(), &[3, 4, 4]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, PartialEq)]
#[module(crate = crate)]
pub struct ConstantPad2d {
    /// `[left, right, top, bottom]`.
    pub padding: [i64; 4],
    /// The fill value.
    pub value: f64,
}

impl ConstantPad2d {
    /// Pads by `padding` (one size for every side or `[left, right, top, bottom]`) with `value`.
    pub fn new(padding: &[i64], value: f64) -> Result<ConstantPad2d> {
        Ok(ConstantPad2d {
            padding: sides("ConstantPad2d", padding)?,
            value,
        })
    }
}

impl Forward for ConstantPad2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::pad(x, &self.padding, PadMode::Constant, self.value)
    }
}

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
