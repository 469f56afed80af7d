//! `tensorplay-runtime`: the operator registry and `tensorplay::library` over the ground floor
//! (`tensorplay-core`: tensors, the op table, eager kernels, the dispatcher and autograd), plus
//! calling any operator by name and `nn`'s functions.
//!
//! Every op call goes through [`dispatch`]; builtin ops are declared once in [`ops`]. The
//! modules of `tensorplay-core` are re-exported here under their old paths, so
//! `tensorplay_runtime::tensor::Tensor` and `tensorplay_core::tensor::Tensor` are one type.

pub mod dispatch;
pub mod library;
pub mod nn;
pub mod ops;

pub use tensorplay_core::{
    Args, CompileKind, DType, Device, Element, Error, Idx, Result, Scalar, SymInt, Tensor, Value,
    autocast, autograd, backend, capture, cuda, element, manual_seed, parallel, storage, symint,
    tensor, value, vmap,
};
