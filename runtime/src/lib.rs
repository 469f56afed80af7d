//! `tensorplay-runtime`: tensors, eager CPU kernels, the op table and dispatcher, and autograd.
//!
//! Every op call goes through [`dispatch`]; builtin ops are declared once in [`ops`].

pub mod autocast;
pub mod autograd;
pub mod capture;
pub mod cuda;
pub mod dispatch;
pub mod element;
pub(crate) mod kernels;
pub mod library;
pub mod nn;
pub mod ops;
pub mod parallel;
pub mod storage;
pub mod symint;
pub mod tensor;
pub mod value;
pub mod vmap;

pub use element::Element;
pub use ops::indexing::Idx;
pub use symint::SymInt;
pub use tensor::Tensor;
pub use tensor::factory_api::manual_seed;
pub use tensorplay_ir::{CompileKind, DType, Device, Error, Result};
pub use value::{Args, Scalar, Value};
