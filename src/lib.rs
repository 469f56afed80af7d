//! # TensorPlay
//!
//! Tensors with PyTorch's custom-operator ergonomics and a JIT compiler that costs microseconds.
//!
//! - [`Tensor`]: eager CPU tensors with views, broadcasting, type promotion and autograd.
//! - [`library`]: register custom operators once — kernels per device, fake kernels, autograd,
//!   autocast and vmap rules, triton-style grid kernels — and use them everywhere.
//! - [`compiler`]: capture, fuse and compile graphs to native SIMD code.
//!
//! ```
//! use tensorplay::{Tensor, DType};
//! let x = Tensor::randn_seeded(&[4, 3], DType::F32, 0)?.requires_grad_(true)?;
//! let y = x.exp()?.sum_all()?;
//! y.backward()?;
//! assert_eq!(x.grad().unwrap().shape(), &[4, 3]);
//! # Ok::<(), tensorplay::Error>(())
//! ```

pub use tensorplay_runtime::{
    Args, DType, Device, Element, Error, Result, Scalar, Tensor, Value, autocast, autograd,
    dispatch, manual_seed, ops, parallel,
};

/// The IR: dtypes, shapes, schemas and graphs (re-exported from `tensorplay-ir`).
pub use tensorplay_ir as ir;

/// The compiler crate (re-exported from `tensorplay-compiler`).
pub use tensorplay_compiler as compiler;

/// Define custom operators once; use them in eager mode, under autograd, autocast, vmap and the
/// compiler. See the crate-level docs of `tensorplay_runtime::library`.
pub mod library {
    pub use tensorplay_runtime::library::*;
}
