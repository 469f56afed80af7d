//! The layers, one per file. A layer is a struct with `#[derive(Module)]` (its tensors and
//! sub-layers) and a [`Forward`](crate::Forward) impl calling the functional ops of
//! `tensorplay::nn::functional`; adding one is adding a file here and a line below.

mod activation;
mod attention;
mod batch_norm;
mod conv;
mod dropout;
mod embedding;
mod group_norm;
mod layer_norm;
mod linear;
mod pad;
mod pool;
mod resize;
mod rms_norm;
mod sequential;

pub use activation::{GELU, ReLU, SiLU, Sigmoid, Tanh};
pub use attention::MultiheadAttention;
pub use batch_norm::{BatchNorm1d, BatchNorm2d, BatchNormOptions};
pub use conv::{Conv1d, Conv2d, ConvOptions, ConvTranspose2d, ConvTransposeOptions};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use group_norm::GroupNorm;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use pad::{
    CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
    ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
    ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d,
};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, Flatten, MaxPool2d};
pub use resize::Upsample;
pub use rms_norm::RMSNorm;
pub use sequential::Sequential;
