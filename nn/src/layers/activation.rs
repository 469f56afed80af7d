//! Activations as modules (no parameters): `ReLU`, `GELU`, `SiLU`, `Tanh`, `Sigmoid`.

use tensorplay_runtime::ops::GeluApproximate;
use tensorplay_runtime::{Result, Tensor};

use crate::Module;
use crate::module::Forward;

/// Declares a parameterless activation module calling a `Tensor` method.
macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $method:ident) => {
        $(#[$doc])*
        #[derive(Module, Debug, Clone, Copy, Default)]
        #[module(crate = crate)]
        pub struct $name;

        impl $name {
            /// The activation.
            pub fn new() -> $name {
                $name
            }
        }

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }
        }
    };
}

activation!(
    /// `max(x, 0)` (PyTorch's `nn.ReLU`).
    ///
    /// ```
    /// use tensorplay_nn::{Forward, ReLU};
    /// use tensorplay_runtime::Tensor;
    /// let y = ReLU::new().forward(&Tensor::from_vec(vec![-1.0f32, 2.0], &[2])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    ReLU,
    relu
);
activation!(
    /// `x * sigmoid(x)` (PyTorch's `nn.SiLU`).
    ///
    /// ```
    /// use tensorplay_nn::{Forward, SiLU};
    /// use tensorplay_runtime::Tensor;
    /// let y = SiLU::new().forward(&Tensor::from_vec(vec![0.0f32], &[1])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    SiLU,
    silu
);
activation!(
    /// The hyperbolic tangent (PyTorch's `nn.Tanh`).
    ///
    /// ```
    /// use tensorplay_nn::{Forward, Tanh};
    /// use tensorplay_runtime::Tensor;
    /// let y = Tanh::new().forward(&Tensor::from_vec(vec![0.0f32], &[1])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    Tanh,
    tanh
);
activation!(
    /// `1 / (1 + exp(-x))` (PyTorch's `nn.Sigmoid`).
    ///
    /// ```
    /// use tensorplay_nn::{Forward, Sigmoid};
    /// use tensorplay_runtime::Tensor;
    /// let y = Sigmoid::new().forward(&Tensor::from_vec(vec![0.0f32], &[1])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![0.5]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    Sigmoid,
    sigmoid
);

/// The Gaussian error linear unit (PyTorch's `nn.GELU`): the exact erf form by default, the
/// tanh approximation with [`GELU::tanh`].
///
/// ```
/// use tensorplay_nn::{Forward, GELU};
/// use tensorplay_runtime::Tensor;
/// let x = Tensor::from_vec(vec![2.0f64], &[1])?;
/// let exact = GELU::new().forward(&x)?.item::<f64>()?;
/// let approx = GELU::tanh().forward(&x)?.item::<f64>()?;
/// assert!((exact - 1.954_499_736_103_642).abs() < 1e-12 && (approx - exact).abs() < 1e-3);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone, Copy)]
#[module(crate = crate)]
pub struct GELU {
    /// The form computed.
    #[skip]
    pub approximate: GeluApproximate,
}

impl GELU {
    /// The exact (erf) form, PyTorch's default `approximate="none"`.
    pub fn new() -> GELU {
        GELU {
            approximate: GeluApproximate::None,
        }
    }

    /// The tanh approximation (`approximate="tanh"`).
    pub fn tanh() -> GELU {
        GELU {
            approximate: GeluApproximate::Tanh,
        }
    }
}

impl Default for GELU {
    fn default() -> GELU {
        GELU::new()
    }
}

impl Forward for GELU {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.gelu(self.approximate)
    }
}
