//! `tensorplay-cuda`: CUDA devices as TensorPlay's back end sees them — no tensors here.
//!
//! Devices are probed at run time: the driver (`libcuda.so.1`) is loaded through cudarc's
//! dynamic loading when the `cuda` feature is on (the default), so building needs no CUDA
//! toolkit and a machine without a driver or GPU simply reports none. Nothing here panics: the
//! library is looked for before any driver call, and each call's failure becomes the reason
//! [`unavailable_reason`] gives.
//!
//! A device (`device.rs`) is raw memory, copies, zeroing and one stream that orders all its work
//! (`driver.rs`, cudarc's `result` layer); `memory.rs` is the caching allocator
//! ([`memory::DeviceBuffer`]); `kernel.rs` loads PTX/cubin modules and launches their functions;
//! `blas.rs` is one strided batched GEMM in cuBLAS's terms; [`codegen`] emits kernel specs as
//! CUDA C, compiles them with NVRTC (or the host emulation) and launches them. Tensors on `cuda:N`
//! and eager ops on them (`tensorplay-core`'s `cuda` module and CUDA back end) are built on
//! these.
//!
//! **Emulated devices.** [`use_emulated_devices`] (or `TP_CUDA_EMULATE=N` in the environment)
//! selects `N` host-emulated CUDA devices instead of the driver: device memory is host memory and
//! generated kernels run under a host emulation. Everything above the device layer then runs on a
//! machine without a GPU, which is how CI tests it.
//!
//! ```
//! use tensorplay_cuda as cuda;
//! cuda::use_emulated_devices(1)?;
//! assert!(cuda::is_emulated() && cuda::device_count() == 1);
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

pub mod blas;
pub mod codegen;
pub mod device;
#[cfg(feature = "cuda")]
pub(crate) mod driver;
mod kernel;
pub mod memory;

use std::sync::OnceLock;

use tensorplay_ir::{Device, Error, Result};

pub use device::CudaDevice;
use device::Engine;
pub use kernel::{DeviceFunction, ModuleImage, compute_capability, launch, load_module, load_ptx};
pub use memory::cache_limit_bytes;

/// Which devices `cuda:N` means in this process, chosen once.
enum Backend {
    /// The driver's devices, each set up on first use.
    Driver(Vec<OnceLock<std::result::Result<CudaDevice, String>>>),
    /// Host-emulated devices.
    Emulated(Vec<CudaDevice>),
    /// No device, and why.
    Unavailable(String),
}

static BACKEND: OnceLock<Backend> = OnceLock::new();

fn backend() -> &'static Backend {
    BACKEND.get_or_init(|| {
        if let Some(n) = emulate_from_env() {
            return emulated(n);
        }
        match std::panic::catch_unwind(probe_driver) {
            Ok(Ok(n)) => Backend::Driver((0..n).map(|_| OnceLock::new()).collect()),
            Ok(Err(why)) => Backend::Unavailable(why),
            Err(_) => Backend::Unavailable("the CUDA driver probe failed unexpectedly".into()),
        }
    })
}

/// `TP_CUDA_EMULATE=N` (N ≥ 1).
fn emulate_from_env() -> Option<usize> {
    let n = std::env::var("TP_CUDA_EMULATE")
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()?;
    (1..=usize::from(u16::MAX)).contains(&n).then_some(n)
}

fn emulated(n: usize) -> Backend {
    Backend::Emulated(
        (0..n)
            .map(|i| CudaDevice::new(i as u16, Engine::Emulated))
            .collect(),
    )
}

#[cfg(feature = "cuda")]
fn probe_driver() -> std::result::Result<usize, String> {
    driver::probe()
}

#[cfg(not(feature = "cuda"))]
fn probe_driver() -> std::result::Result<usize, String> {
    Err("tensorplay was built without the `cuda` feature".into())
}

/// Selects `n` host-emulated CUDA devices for this process (`TP_CUDA_EMULATE=n` does the same
/// at start-up): `cuda:0..n` are then served by host memory and the CPU emulation of generated
/// kernels, for testing CUDA code paths on a machine without a GPU. Must come before the first
/// use of CUDA; an error if the process already chose its devices otherwise (calling it again
/// with the same `n` is fine).
///
/// ```
/// use tensorplay_cuda as cuda;
/// cuda::use_emulated_devices(2)?;
/// assert!(cuda::is_emulated() && cuda::device_count() == 2);
/// assert!(cuda::use_emulated_devices(2).is_ok());
/// assert!(cuda::use_emulated_devices(3).is_err());
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn use_emulated_devices(n: usize) -> Result<()> {
    if n == 0 || n > usize::from(u16::MAX) {
        return Err(Error::argument(
            "use_emulated_devices",
            "n",
            format!("1..={}", u16::MAX),
            n.to_string(),
        ));
    }
    match BACKEND.get_or_init(|| emulated(n)) {
        Backend::Emulated(d) if d.len() == n => Ok(()),
        other => Err(Error::device(
            "use_emulated_devices",
            format!(
                "this process already uses {} (the devices are chosen once, at the first CUDA use)",
                match other {
                    Backend::Emulated(d) => format!("{} emulated CUDA devices", d.len()),
                    Backend::Driver(d) => format!("the CUDA driver's {} devices", d.len()),
                    Backend::Unavailable(_) => "no CUDA devices".into(),
                }
            ),
        )),
    }
}

/// True when `cuda:N` are host-emulated devices ([`use_emulated_devices`]).
pub fn is_emulated() -> bool {
    matches!(backend(), Backend::Emulated(_))
}

/// Whether at least one CUDA device can be used.
pub fn is_available() -> bool {
    device_count() > 0
}

/// Number of CUDA devices (0 without a driver or a GPU).
pub fn device_count() -> usize {
    match backend() {
        Backend::Driver(d) => d.len(),
        Backend::Emulated(d) => d.len(),
        Backend::Unavailable(_) => 0,
    }
}

/// Why no CUDA device is available (`None` when one is).
pub fn unavailable_reason() -> Option<String> {
    match backend() {
        Backend::Unavailable(why) => Some(why.clone()),
        _ => None,
    }
}

/// The device behind `device` (a `cuda:N`), set up on first use; an error naming `op` when
/// there is no such device or it cannot be set up.
pub fn device(op: &str, device: Device) -> Result<&'static CudaDevice> {
    let Device::Cuda(i) = device else {
        return Err(Error::device(op, format!("{device} is not a CUDA device")));
    };
    let i = usize::from(i);
    let fail = |why: String| Error::device(op, format!("cannot use {device}: {why}"));
    match backend() {
        Backend::Unavailable(why) => Err(fail(why.clone())),
        Backend::Emulated(d) => d
            .get(i)
            .ok_or_else(|| fail(format!("there are {} (emulated) CUDA devices", d.len()))),
        Backend::Driver(d) => {
            let slot = d
                .get(i)
                .ok_or_else(|| fail(format!("there are {} CUDA devices", d.len())))?;
            slot.get_or_init(|| open_driver_device(i))
                .as_ref()
                .map_err(|why| fail(why.clone()))
        }
    }
}

#[cfg(feature = "cuda")]
fn open_driver_device(i: usize) -> std::result::Result<CudaDevice, String> {
    Ok(CudaDevice::new(
        i as u16,
        Engine::Driver(driver::Context::new(i)?),
    ))
}

#[cfg(not(feature = "cuda"))]
fn open_driver_device(_: usize) -> std::result::Result<CudaDevice, String> {
    Err("tensorplay was built without the `cuda` feature".into())
}

/// Waits until all work queued on `device` has finished.
pub fn synchronize(device: Device) -> Result<()> {
    let d = self::device("synchronize", device)?;
    d.synchronize()
        .map_err(|e| Error::device("synchronize", format!("{device}: {e}")))
}

/// The driver stream (`CUstream`) all of `device`'s work is ordered on, for `cuda` kernels of
/// custom ops that launch their own work (null on emulated devices, which run work at once).
pub fn stream(device: Device) -> Result<*mut std::ffi::c_void> {
    Ok(self::device("stream", device)?.stream())
}

/// Bytes of `device`'s memory held by tensors (rounded to the allocator's blocks).
pub fn memory_allocated(device: Device) -> Result<usize> {
    Ok(memory::usage(self::device("memory_allocated", device)?).0)
}

/// Bytes of `device`'s memory the caching allocator keeps free for reuse.
pub fn memory_cached(device: Device) -> Result<usize> {
    Ok(memory::usage(self::device("memory_cached", device)?).1)
}

/// Frees every cached block of every device in use (tensors keep theirs).
pub fn empty_cache() -> Result<()> {
    let devices: Vec<&CudaDevice> = match backend() {
        Backend::Driver(d) => d.iter().filter_map(|s| s.get()?.as_ref().ok()).collect(),
        Backend::Emulated(d) => d.iter().collect(),
        Backend::Unavailable(_) => Vec::new(),
    };
    for d in devices {
        memory::empty_pool(d)
            .map_err(|e| Error::device("empty_cache", format!("cuda:{}: {e}", d.index)))?;
    }
    Ok(())
}
