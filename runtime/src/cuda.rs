//! CUDA devices, probed at run time: the driver (`libcuda.so.1`) is loaded through cudarc's
//! dynamic loading when the `cuda` feature is on (the default), so building needs no CUDA
//! toolkit and a machine without a driver or GPU simply reports none. Nothing here panics: the
//! library is looked for before any driver call, and each call's failure becomes the reason
//! [`unavailable_reason`] gives.
//!
//! CUDA tensors are not implemented yet (the compiler generates and verifies CUDA kernels, see
//! `docs/guide/gpu.md`): moving a tensor to `cuda:N` is an error that says why.
//!
//! ```
//! use tensorplay_runtime::{cuda, DType, Device, Tensor};
//! if !cuda::is_available() {
//!     assert_eq!(cuda::device_count(), 0);
//!     let e = Tensor::ones(&[2], DType::F32).to_device(Device::Cuda(0)).unwrap_err();
//!     assert!(e.to_string().contains("cuda:0"));
//! }
//! ```

use std::sync::OnceLock;

use crate::tensor::Tensor;
use tensorplay_ir::{Device, Error, Result};

/// What the probe found: the number of devices, or why there are none.
fn probe() -> &'static std::result::Result<usize, String> {
    static PROBE: OnceLock<std::result::Result<usize, String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        std::panic::catch_unwind(probe_driver)
            .unwrap_or_else(|_| Err("the CUDA driver probe failed unexpectedly".into()))
    })
}

#[cfg(feature = "cuda")]
fn probe_driver() -> std::result::Result<usize, String> {
    use cudarc::driver::{result, sys};
    // SAFETY: only tries to open the driver library (libloading), with no other effect.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so.1) was found".into());
    }
    result::init().map_err(|e| format!("cuInit failed: {e:?}"))?;
    let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))?;
    if n <= 0 {
        return Err("the CUDA driver reports no devices".into());
    }
    Ok(n as usize)
}

#[cfg(not(feature = "cuda"))]
fn probe_driver() -> std::result::Result<usize, String> {
    Err("tensorplay was built without the `cuda` feature".into())
}

/// Whether at least one CUDA device can be used.
pub fn is_available() -> bool {
    device_count() > 0
}

/// Number of CUDA devices (0 without a driver or a GPU).
pub fn device_count() -> usize {
    probe().as_ref().copied().unwrap_or(0)
}

/// Why no CUDA device is available (`None` when one is).
pub fn unavailable_reason() -> Option<String> {
    probe().as_ref().err().cloned()
}

impl Tensor {
    /// This tensor on `device`: itself on its own device, a fake (data-less) tensor with the
    /// same metadata on `meta`. CUDA tensors are not implemented yet: `cuda:N` is an error
    /// naming the device and the reason (no driver, no such device, or no CUDA storage yet).
    ///
    /// ```
    /// use tensorplay_runtime::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32);
    /// assert_eq!(x.to_device(Device::Cpu)?.to_vec::<f32>()?, vec![1.0; 6]);
    /// let m = x.to_device(Device::Meta)?;
    /// assert_eq!((m.device(), m.shape()), (Device::Meta, &[2usize, 3][..]));
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        match device {
            Device::Meta => Ok(Tensor::empty_fake(self.shape(), self.dtype(), Device::Meta)),
            Device::Cpu => Err(Error::device(
                "to_device",
                format!("cannot copy a {} tensor to the CPU", self.device()),
            )),
            Device::Cuda(i) => {
                let why = match unavailable_reason() {
                    Some(r) => r,
                    None if usize::from(i) >= device_count() => {
                        format!("there are {} CUDA devices", device_count())
                    }
                    None => "CUDA tensor storage is not implemented yet (fused regions are \
                             emitted as CUDA C and verified without a GPU; see \
                             docs/guide/gpu.md)"
                        .into(),
                };
                Err(Error::device(
                    "to_device",
                    format!("cannot move a tensor to {device}: {why}"),
                ))
            }
        }
    }
}
