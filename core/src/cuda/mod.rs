//! CUDA tensors: the devices of `tensorplay-cuda` (re-exported here) holding tensor storage.
//!
//! A tensor on `cuda:N` owns device memory from the device's caching allocator; each device
//! orders its work on one stream. [`Tensor::to_device`] copies between the host and devices;
//! reading a CUDA tensor's values (`to_vec`, `item`, printing) copies them to the host first.
//! Built-in elementwise, reduction, softmax, cast and copy ops run on CUDA tensors through
//! kernels generated from the op table by the CUDA back end (`crate::backend`, with
//! `tensorplay-cuda`'s code generator); `matmul` runs through cuBLAS; custom ops with a `cuda` kernel run too (see `library::custom_op`), and the kernel
//! gets device addresses from [`Tensor::data_ptr_cuda`].
//!
//! **Emulated devices.** [`use_emulated_devices`] (or `TP_CUDA_EMULATE=N` in the environment)
//! selects `N` host-emulated CUDA devices instead of the driver: device memory is host memory and
//! generated kernels run under a host emulation. Everything above the device layer then runs on a
//! machine without a GPU, which is how CI tests it.
//!
//! ```
//! use tensorplay_core::{cuda, DType, Device, Tensor};
//! cuda::use_emulated_devices(1)?;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let g = x.to_device(Device::Cuda(0))?;
//! assert_eq!((g.device(), g.to_vec::<f32>()?), (Device::Cuda(0), vec![1.0, 2.0, 3.0, 4.0]));
//! // A transposed view copies back in its own element order.
//! assert_eq!(g.t()?.to_device(Device::Cpu)?.to_vec::<f32>()?, vec![1.0, 3.0, 2.0, 4.0]);
//! assert!(Tensor::ones(&[2], DType::F32).to_device(Device::Cuda(1)).is_err()); // one device
//! # Ok::<(), tensorplay_core::Error>(())
//! ```

mod transfer;

pub use tensorplay_cuda::*;
pub use transfer::empty_uninit;

#[cfg(doc)]
use crate::Tensor;
