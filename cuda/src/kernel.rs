//! Loading kernel modules (PTX or cubin) on a driver device and launching them on its stream:
//! what the compiler's CUDA launcher and `wrap_triton`'s `GpuKernel` call. Emulated devices run
//! CUDA C under the compiler's host emulation instead, so these are errors there.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

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
             emulation, not PTX or cubin images"
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

/// A module image: PTX text or a cubin.
#[derive(Debug, Clone, Copy)]
pub enum ModuleImage<'a> {
    /// PTX assembly text.
    Ptx(&'a str),
    /// A compiled cubin (or fatbin).
    Cubin(&'a [u8]),
}

type Loaded = Mutex<HashMap<(Device, String, u64), DeviceFunction>>;

fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(Default::default)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Loads `image` on `device` and returns its entry point `entry`, from a per-process cache keyed
/// by device, entry and image contents. `shared_bytes` is the dynamic shared memory launches will
/// ask for (above 48 KiB the function is opted into it).
pub fn load_module(
    device: Device,
    image: ModuleImage<'_>,
    entry: &str,
    shared_bytes: u32,
) -> Result<DeviceFunction> {
    const OP: &str = "load_module";
    let d = super::device(OP, device)?;
    let bytes: Vec<u8> = match image {
        // The driver reads PTX as a NUL-terminated string.
        ModuleImage::Ptx(text) => {
            if text.contains('\0') {
                return Err(Error::argument(
                    OP,
                    "image",
                    "PTX text",
                    "text with a NUL byte",
                ));
            }
            let mut b = text.as_bytes().to_vec();
            b.push(0);
            b
        }
        ModuleImage::Cubin(b) => b.to_vec(),
    };
    let key = (
        device,
        entry.to_string(),
        fnv1a(&bytes) ^ u64::from(shared_bytes),
    );
    let poisoned = || Error::device(OP, "the module cache lock is poisoned");
    if let Some(f) = loaded().lock().map_err(|_| poisoned())?.get(&key) {
        return Ok(*f);
    }
    let handle = match &d.engine {
        #[cfg(feature = "cuda")]
        Engine::Driver(c) => c
            .load_module(&bytes, entry, shared_bytes)
            .map_err(|e| Error::device(OP, format!("{device}: {e}"))),
        Engine::Emulated => Err(not_on_emulated(OP, device)),
    }?;
    let f = DeviceFunction { device, handle };
    loaded().lock().map_err(|_| poisoned())?.insert(key, f);
    Ok(f)
}

/// [`load_module`] for PTX text without extra shared memory.
pub fn load_ptx(device: Device, ptx: &str, entry: &str) -> Result<DeviceFunction> {
    load_module(device, ModuleImage::Ptx(ptx), entry, 0)
}

/// Queues `function` on its device's stream over `grid` blocks of `block` threads;
/// `params[i]` points at the value of the kernel's parameter `i` (the driver copies the values
/// when the launch is queued).
///
/// # Safety
/// `params` must match the kernel's parameter list in number and types, and every device address
/// among the values must stay valid, for all the kernel accesses, until the stream reaches it
/// (tensors keep their memory valid: a freed block is only reused by later work of the same
/// stream).
pub unsafe fn launch(
    function: &DeviceFunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    let device = function.device;
    let d = super::device("launch", device)?;
    match &d.engine {
        #[cfg(feature = "cuda")]
        Engine::Driver(c) => {
            // SAFETY: forwarded contract.
            unsafe { c.launch(function.handle, grid, block, shared_bytes, params) }
                .map_err(|e| Error::device("launch", format!("{device}: {e}")))
        }
        Engine::Emulated => {
            let _ = (grid, block, shared_bytes, params);
            Err(not_on_emulated("launch", device))
        }
    }
}
