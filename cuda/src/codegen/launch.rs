//! Launching a fused region on a CUDA device: the region's kernel ([`super::get_or_emit`]) over
//! a launch plan whose pointers are device addresses (`plan_on`).
//!
//! On a driver device the kernel is compiled by NVRTC for the device's architecture (or read
//! from the on-disk cache, [`disk_cache`](super::disk_cache)), loaded once per device and queued
//! on the device's stream. On an emulated device
//! ([`use_emulated_devices`](crate::use_emulated_devices)) the same source is built by the host C++ compiler
//! against the emulation header (once per kernel) and run over the grid at once. Compiled
//! kernels are cached per device and kernel name for the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate as cuda;
use tensorplay_ir::{CompileKind, Device, Error, Result};

use super::{CudaKernel, CudaLayout, disk_cache, emulate, pack_args};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::plan::LaunchPlan;
use tensorplay_kernel::spec::KernelSpec;

/// Threads per block of every launch on a driver device.
const BLOCK: u32 = 256;
/// Most blocks of a launch (the kernels grid-stride over elements or rows beyond it).
const MAX_GRID: usize = 65_535;

fn err(msg: String) -> Error {
    Error::compile(CompileKind::Launch, msg)
}

/// A kernel ready to launch on one device.
#[derive(Clone)]
enum Loaded {
    Driver(cuda::DeviceFunction),
    Emulated(Arc<emulate::Emulated>),
}

type Loads = Mutex<HashMap<(Device, String), Loaded>>;

fn loads() -> &'static Loads {
    static LOADS: OnceLock<Loads> = OnceLock::new();
    LOADS.get_or_init(Default::default)
}

/// The kernel loaded on `device`, compiling and loading it on first use. The cache's lock is
/// held through a first load, so concurrent first launches of one kernel build it once (an
/// emulation build writes into a directory named after the kernel).
fn load(kernel: &Arc<CudaKernel>, device: Device) -> Result<Loaded> {
    let key = (device, kernel.name.clone());
    let mut cache = loads().lock().map_err(|_| poisoned())?;
    if let Some(l) = cache.get(&key) {
        return Ok(l.clone());
    }
    let loaded = if cuda::is_emulated() {
        let dir = emulate::scratch_dir(&format!("launch-{}", kernel.name));
        let built = emulate::build(std::slice::from_ref(kernel), &dir, 1)?;
        // The library is loaded; its build files are not needed any more.
        let _ = std::fs::remove_dir_all(&dir);
        Loaded::Emulated(Arc::new(built))
    } else {
        let (major, minor) = cuda::compute_capability(device)?;
        let arch = format!("compute_{major}{minor}");
        let ptx = disk_cache::compile_ptx(
            disk_cache::default_dir().as_deref(),
            &kernel.source,
            &format!("{}.cu", kernel.name),
            &arch,
        )?;
        Loaded::Driver(cuda::load_ptx(device, &ptx, &kernel.name)?)
    };
    cache.insert(key, loaded.clone());
    Ok(loaded)
}

fn poisoned() -> Error {
    err("the CUDA kernel load cache lock is poisoned".into())
}

/// The grid of a driver launch: pointwise kernels one thread per element up to
/// [`MAX_GRID`] blocks; reductions and softmax one block per row.
fn driver_grid(kernel: &CudaKernel, range: usize) -> u32 {
    let blocks = if kernel.uses_barriers() {
        range
    } else {
        range.div_ceil(BLOCK as usize)
    };
    blocks.clamp(1, MAX_GRID) as u32
}

/// Runs `spec` over `plan` (made by `plan_on` for `device`) with scalar arguments `params`.
/// On a driver device the launch is queued on the device's stream; on an emulated device it
/// has run when this returns.
pub fn launch(
    spec: &KernelSpec,
    plan: &LaunchPlan,
    params: &ScalarArgs,
    device: Device,
) -> Result<()> {
    if plan.device() != device || !matches!(device, Device::Cuda(_)) {
        return Err(err(format!(
            "a launch plan over {} tensors cannot run on {device}",
            plan.device()
        )));
    }
    let kernel = super::get_or_emit(spec, &CudaLayout::from(plan.layout()))?;
    if plan.is_empty() {
        return Ok(());
    }
    let ptrs: Vec<u64> = plan.ptrs().iter().map(|&p| p as u64).collect();
    let args = pack_args(&kernel, &ptrs, plan.shape(), plan.strides(), params.slots())?;
    match load(&kernel, device)? {
        Loaded::Emulated(lib) => {
            let (grid, block) = emulate::emulated_grid(&kernel, plan.range());
            // SAFETY: emulated device memory is host memory; the plan was made from live
            // tensors on the device, which checked that every element its sizes and strides
            // reach lies inside each tensor's storage.
            unsafe { lib.launch(&kernel.name, &args, grid, block) }
        }
        Loaded::Driver(f) => {
            let grid = driver_grid(&kernel, plan.range());
            let mut params = [args.as_ptr().cast_mut().cast::<std::ffi::c_void>()];
            // SAFETY: the kernel's one parameter is its argument struct of 8-byte fields
            // (`pack_args`), which `params[0]` points at; the addresses are the device memory
            // of live tensors that the plan's checks cover, which stays valid for the stream's
            // later work.
            unsafe { cuda::launch(&f, [grid, 1, 1], [BLOCK, 1, 1], 0, &mut params) }
        }
    }
}
