//! The CUDA code generator (`tensorplay-cuda`'s `codegen`, re-exported): kernel specs emitted as
//! CUDA C, compiled by NVRTC (or built by the host emulation) and launched on a device. Compiled
//! graphs on CUDA inputs launch their regions through it; eager built-in ops on CUDA tensors run
//! the same generated kernels through `tensorplay-core`'s CUDA back end.

pub use tensorplay_cuda::codegen::*;
