//! Loading PTX kernels on a driver device and launching them on its stream: what the compiler's
//! CUDA launcher (and `wrap_triton`-style users) call. Emulated devices run CUDA C under the
//! compiler's host emulation instead, so these are errors there.

use tensorplay_ir::{Device, Error, Result};

use super::device::Engine;

/// A kernel entry point loaded on one device (its module stays loaded for the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFunction {
    device: Device,
    handle: usize,
}

impl DeviceFunction {
    /// The device it was loaded on.
    pub fn device(&self) -> Device {
        self.device
    }
}

fn not_on_emulated(op: &str, device: Device) -> Error {
    Error::unsupported(
        op,
        format!(
            "{device} is an emulated CUDA device: it runs generated CUDA C under the host \
             emulation, not PTX"
        ),
    )
}

/// The compute capability (major, minor) of `device`; emulated devices report 9.0 (the
/// architecture CI compiles the generated kernels for).
pub fn compute_capability(device: Device) -> Result<(i32, i32)> {
    let d = super::device("compute_capability", device)?;
    match &d.engine {
        #[cfg(feature = "cuda")]
        Engine::Driver(c) => c
            .compute_capability()
            .map_err(|e| Error::device("compute_capability", format!("{device}: {e}"))),
        Engine::Emulated => Ok((9, 0)),
    }
}

/// Loads `ptx` on `device` and returns its entry point `entry`.
pub fn load_ptx(device: Device, ptx: &str, entry: &str) -> Result<DeviceFunction> {
    let d = super::device("load_ptx", device)?;
    match &d.engine {
        #[cfg(feature = "cuda")]
        Engine::Driver(c) => Ok(DeviceFunction {
            device,
            handle: c
                .load_ptx(ptx, entry)
                .map_err(|e| Error::device("load_ptx", format!("{device}: {e}")))?,
        }),
        Engine::Emulated => {
            let _ = (ptx, entry);
            Err(not_on_emulated("load_ptx", device))
        }
    }
}

/// Queues `function` on its device's stream over a 1-D grid, with one by-value struct argument
/// whose 8-byte fields are `args`.
///
/// # Safety
/// The kernel's only parameter must be a struct of `args.len()` 8-byte fields, and every device
/// address in `args` must stay valid, for all the kernel accesses, until the stream reaches it
/// (tensors keep their memory valid: a freed block is only reused by later work of the same
/// stream).
pub unsafe fn launch(
    function: &DeviceFunction,
    grid: u32,
    block: u32,
    shared_bytes: u32,
    args: &[u64],
) -> Result<()> {
    let device = function.device;
    let d = super::device("launch", device)?;
    match &d.engine {
        #[cfg(feature = "cuda")]
        // SAFETY: forwarded contract.
        Engine::Driver(c) => unsafe { c.launch(function.handle, grid, block, shared_bytes, args) }
            .map_err(|e| Error::device("launch", format!("{device}: {e}"))),
        Engine::Emulated => {
            let _ = (grid, block, shared_bytes, args);
            Err(not_on_emulated("launch", device))
        }
    }
}
