//! Which back end serves a device.

use tensorplay_ir::{Device, Error, Result};

use crate::backend::api::Backend;

/// The back end serving tensors on `device` (an error for `meta`, which has no memory).
pub fn for_device(device: Device) -> Result<&'static dyn Backend> {
    match device {
        Device::Cpu => Ok(&crate::backend::cpu::Cpu),
        Device::Cuda(_) => Ok(&crate::backend::cuda::Cuda),
        Device::Meta => Err(Error::device(
            "backend",
            "the meta device has no memory and runs no kernels (meta tensors carry shapes only)",
        )),
    }
}
