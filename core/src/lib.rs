//! `tensorplay-core`: the ground floor — tensors, storage, the op table, eager kernels and the
//! dispatcher.
//!
//! Every op call goes through [`dispatch`]; builtin ops are declared once in [`ops`]. Custom
//! operators (`tensorplay-runtime`'s `library`) reach the dispatcher through the
//! [`dispatch::CustomOp`] trait, and the compiler's tracer through the [`capture`] hook: this
//! crate names neither.

pub mod autocast;
pub mod autograd;
pub mod backend;
pub mod capture;
pub mod cuda;
pub mod dispatch;
pub mod element;
pub(crate) mod kernels;
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
pub use tensor::factory::manual_seed;
pub use tensorplay_ir::{CompileKind, DType, Device, Error, Result};
pub use value::{Args, Scalar, Value};
