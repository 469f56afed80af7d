//! `BatchNorm1d` and `BatchNorm2d`: normalization over the batch, with running statistics.

use tensorplay_runtime::{DType, Error, Result, Tensor, autograd, nn};

use super::linear::float_dtype;
use crate::Module;
use crate::init::parameter;
use crate::module::Forward;

/// The state both batch norms share: an affine `weight`/`bias` per channel, and the running
/// statistics PyTorch keeps as buffers (`running_mean`, `running_var`, `num_batches_tracked`).
#[derive(Module, Debug, Clone)]
#[module(crate = crate)]
struct BatchNormState {
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    #[buffer]
    running_mean: Option<Tensor>,
    #[buffer]
    running_var: Option<Tensor>,
    #[buffer]
    num_batches_tracked: Option<Tensor>,
    training: bool,
}

/// Options of the batch norms, PyTorch's defaults: `eps` 1e-5, `momentum` 0.1 (`None`: a
/// cumulative average over the batches seen), affine, tracking running statistics, f32.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormOptions {
    /// Added to the variance.
    pub eps: f64,
    /// The weight of a new batch in the running statistics; `None` averages all batches.
    pub momentum: Option<f64>,
    /// A learned per-channel scale (ones) and shift (zeros).
    pub affine: bool,
    /// Keep running statistics (used in evaluation mode); without them evaluation uses the
    /// batch's own statistics.
    pub track_running_stats: bool,
    /// The parameters' and statistics' dtype.
    pub dtype: DType,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
            track_running_stats: true,
            dtype: DType::F32,
        }
    }
}

impl BatchNormState {
    fn new(layer: &str, num_features: usize, o: &BatchNormOptions) -> Result<BatchNormState> {
        float_dtype(layer, o.dtype)?;
        let per_channel = |v: f64| Tensor::try_full(&[num_features], v, o.dtype);
        let affine = |v: f64| o.affine.then(|| parameter(per_channel(v)?)).transpose();
        let tracked = |t: Result<Tensor>| o.track_running_stats.then_some(t).transpose();
        Ok(BatchNormState {
            weight: affine(1.0)?,
            bias: affine(0.0)?,
            running_mean: tracked(per_channel(0.0))?,
            running_var: tracked(per_channel(1.0))?,
            num_batches_tracked: tracked(Ok(Tensor::scalar(0i64)))?,
            training: true,
        })
    }

    /// PyTorch's `_BatchNorm.forward`: in training mode with running statistics, count the
    /// batch and update them (momentum, or the cumulative average); batch statistics in
    /// training or without running statistics, running ones otherwise.
    fn forward(&self, x: &Tensor, o: &BatchNormOptions) -> Result<Tensor> {
        let mut momentum = o.momentum.unwrap_or(0.0);
        if self.training
            && let Some(n) = &self.num_batches_tracked
        {
            let _off = autograd::no_grad();
            n.add_scalar_(1i64)?;
            if o.momentum.is_none() {
                momentum = 1.0 / n.item::<i64>()? as f64;
            }
        }
        // Without running statistics evaluation normalizes with the batch's own.
        let use_batch_stats = self.training || self.running_mean.is_none();
        nn::batch_norm(
            x,
            self.running_mean.as_ref(),
            self.running_var.as_ref(),
            self.weight.as_ref(),
            self.bias.as_ref(),
            use_batch_stats,
            momentum,
            o.eps,
        )
    }
}

/// An error unless `x` has one of the ranks the layer takes.
fn check_rank(layer: &str, x: &Tensor, ranks: &[usize], what: &str) -> Result<()> {
    if ranks.contains(&x.rank()) {
        Ok(())
    } else {
        Err(Error::argument(
            layer,
            "input",
            what,
            format!("a {}-D tensor of shape {:?}", x.rank(), x.shape()),
        ))
    }
}

macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, $ranks:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            state: BatchNormState,
            /// The channels normalized.
            pub num_features: usize,
            /// Epsilon, momentum, affine, running statistics.
            pub options: BatchNormOptions,
        }

        impl $name {
            /// PyTorch's defaults ([`BatchNormOptions::default`]).
            pub fn new(num_features: usize) -> Result<$name> {
                $name::with_options(num_features, BatchNormOptions::default())
            }

            /// Every option.
            pub fn with_options(num_features: usize, options: BatchNormOptions) -> Result<$name> {
                let state = BatchNormState::new(stringify!($name), num_features, &options)?;
                Ok($name { state, num_features, options })
            }

            /// The learned per-channel scale, when affine.
            pub fn weight(&self) -> Option<&Tensor> {
                self.state.weight.as_ref()
            }

            /// The learned per-channel shift, when affine.
            pub fn bias(&self) -> Option<&Tensor> {
                self.state.bias.as_ref()
            }

            /// The running mean and (unbiased) variance, when tracked.
            pub fn running_stats(&self) -> Option<(&Tensor, &Tensor)> {
                self.state.running_mean.as_ref().zip(self.state.running_var.as_ref())
            }
        }

        // The state's tensors sit at the top level of the layer's names (`weight`,
        // `running_mean`), as in PyTorch.
        impl Module for $name {
            fn visit(&self, prefix: &str, f: &mut crate::Visit<'_>) {
                self.state.visit(prefix, f)
            }
            fn visit_mut(&mut self, prefix: &str, f: &mut crate::VisitMut<'_>) -> Result<()> {
                self.state.visit_mut(prefix, f)
            }
            fn children(&self) -> Vec<(String, &dyn Module)> {
                Vec::new()
            }
            fn set_training(&mut self, training: bool) {
                self.state.set_training(training)
            }
            fn mode(&self) -> Option<bool> {
                self.state.mode()
            }
        }

        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                check_rank(stringify!($name), x, &$ranks, $what)?;
                self.state.forward(x, &self.options)
            }
        }
    };
}

batch_norm_layer!(
    /// Batch normalization over `[N, C]` or `[N, C, L]` inputs (PyTorch's `nn.BatchNorm1d`).
    ///
    /// ```
    /// use tensorplay_nn::{BatchNorm1d, Forward, Module};
    /// use tensorplay_runtime::Tensor;
    /// let bn = BatchNorm1d::new(2)?;
    /// let x = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], &[2, 2])?;
    /// let y = bn.forward(&x)?.to_vec::<f32>()?;
    /// assert!((y[0] + 1.0).abs() < 1e-3 && (y[2] - 1.0).abs() < 1e-3);
    /// let (mean, _) = bn.running_stats().unwrap();
    /// assert!((mean.to_vec::<f32>()?[0] - 0.2).abs() < 1e-6); // 0.9 * 0 + 0.1 * 2
    /// assert_eq!(
    ///     bn.state_dict().keys().collect::<Vec<_>>(),
    ///     ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    /// );
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    BatchNorm1d,
    [2, 3],
    "a 2-D [N, C] or 3-D [N, C, L] tensor"
);

batch_norm_layer!(
    /// Batch normalization over `[N, C, H, W]` inputs (PyTorch's `nn.BatchNorm2d`): in
    /// training mode each channel is normalized with the batch's mean and biased variance and
    /// the running statistics move towards the batch's (unbiased variance); in evaluation mode
    /// the running statistics are used.
    ///
    /// ```
    /// use tensorplay_nn::{BatchNorm2d, Forward, Module};
    /// use tensorplay_runtime::{DType, Tensor};
    /// let mut bn = BatchNorm2d::new(3)?;
    /// let x = Tensor::randn(&[4, 3, 5, 5], DType::F32)?;
    /// bn.forward(&x)?;
    /// bn.eval();
    /// assert_eq!(bn.forward(&x)?.shape(), &[4, 3, 5, 5]);
    /// assert!(bn.forward(&Tensor::ones(&[3, 5], DType::F32)).is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    BatchNorm2d,
    [4],
    "a 4-D [N, C, H, W] tensor"
);
