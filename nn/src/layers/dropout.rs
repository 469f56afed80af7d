//! `Dropout`: random zeroing in training mode.

use tensorplay_runtime::{Error, Result, Tensor, nn};

use crate::Module;
use crate::module::Forward;

/// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)` in training
/// mode; the identity in evaluation mode (PyTorch's `nn.Dropout`, `p = 0.5` by default). Masks
/// come from the global generator (`tensorplay::manual_seed`), a fresh one per call.
///
/// ```
/// use tensorplay_nn::{Dropout, Forward, Module};
/// use tensorplay_runtime::{DType, Tensor};
/// let mut drop = Dropout::new(0.5)?;
/// let x = Tensor::ones(&[64], DType::F32);
/// let y = drop.forward(&x)?.to_vec::<f32>()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.eval();
/// assert_eq!(drop.forward(&x)?.to_vec::<f32>()?, vec![1.0; 64]);
/// assert!(Dropout::new(1.5).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
pub struct Dropout {
    /// The probability of zeroing an element.
    pub p: f64,
    /// Training mode (masks drawn) or evaluation mode (identity).
    pub training: bool,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1]`, in training mode.
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::argument(
                "Dropout",
                "p",
                "a probability in [0, 1]",
                p.to_string(),
            ));
        }
        Ok(Dropout { p, training: true })
    }
}

impl Forward for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        nn::dropout_global(x, self.p, self.training)
    }
}
