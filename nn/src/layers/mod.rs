//! The layers, one per file. A layer is a struct with `#[derive(Module)]` (its tensors and
//! sub-layers) and a [`Forward`](crate::Forward) impl calling the functional ops of
//! `tensorplay::nn::functional`; adding one is adding a file here and a line below.

mod activation;
mod attention;
mod dropout;
mod embedding;
mod layer_norm;
mod linear;
mod rms_norm;
mod sequential;

pub use activation::{GELU, ReLU, SiLU, Sigmoid, Tanh};
pub use attention::MultiheadAttention;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use rms_norm::RMSNorm;
pub use sequential::Sequential;
