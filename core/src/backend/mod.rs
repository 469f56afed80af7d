//! Device back ends: where a tensor's memory lives and how built-in ops run on it — one
//! implementation of [`Backend`] per device kind (`cpu.rs`: host memory and the op table's
//! kernels; `cuda/`: device memory and kernels generated from the op table's lowering, cuBLAS
//! for matrix products). The dispatcher's backend layer picks one by the call's device
//! ([`for_device`]); views run on any device without one (they only re-describe memory).
//!
//! The CUDA back end generates its kernels itself (`tensorplay-cuda`'s code generator), so eager
//! ops on CUDA tensors need nothing from the compiler; the CPU's fused kernels are JIT-compiled
//! by `tensorplay-compiler`, which launches them itself ([`Backend::launch`] is for back ends
//! that generate their own).
//!
//! ```
//! use tensorplay_core::backend::for_device;
//! use tensorplay_core::{cuda, Device};
//! cuda::use_emulated_devices(1)?;
//! let gpu = for_device(Device::Cuda(0))?;
//! let mem = gpu.alloc("example", Device::Cuda(0), 8)?;
//! gpu.write("example", &mem, 0, &[1, 2, 3, 4, 5, 6, 7, 8])?;
//! let mut back = [0u8; 4];
//! gpu.read("example", &mem, 4, &mut back)?;
//! assert_eq!((gpu.name(), back), ("cuda", [5, 6, 7, 8]));
//! assert!(gpu.read("example", &mem, 6, &mut back).is_err()); // past the end
//! # Ok::<(), tensorplay_core::Error>(())
//! ```

mod api;
mod cpu;
mod cuda;
mod select;

pub use api::Backend;
pub use select::for_device;
