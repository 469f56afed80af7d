//! The real CUDA driver, through cudarc's `result` layer (`libcuda.so.1` loaded at run time).
//!
//! Each device gets its primary context (retained on first use, never released: it lives as
//! long as the process) and one non-blocking stream. Every operation makes the context current
//! on the calling thread first, so any thread may use any device. All work of a device —
//! copies, memsets, kernel launches — is ordered on its one stream, which is what lets the
//! caching allocator hand a freed block to the next tensor without waiting: whatever still uses
//! the block was queued before whatever will use it next.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::cublas;
use cudarc::driver::{result, sys};

/// A driver error as text (the error's name and description).
fn describe(what: &str, e: result::DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{what} failed: {name} ({text})")
}

/// Number of devices the driver reports; an error when there is no driver or it fails.
pub(super) fn probe() -> Result<usize, String> {
    // SAFETY: only tries to open the driver library (libloading), with no other effect.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so.1) was found".into());
    }
    result::init().map_err(|e| describe("cuInit", e))?;
    let n = result::device::get_count().map_err(|e| describe("cuDeviceGetCount", e))?;
    if n <= 0 {
        return Err("the CUDA driver reports no devices".into());
    }
    Ok(n as usize)
}

/// One device's primary context and stream.
pub(crate) struct Context {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    /// The cuBLAS handle bound to `stream` (a `cublasHandle_t`), made on the first product.
    cublas: OnceLock<Result<usize, String>>,
}

// SAFETY: CUDA contexts and streams are process-wide driver objects that every thread may use
// (the driver API is thread-safe); the handles are plain pointers that are never freed.
unsafe impl Send for Context {}
// SAFETY: as above; no method mutates the handles themselves.
unsafe impl Sync for Context {}

impl Context {
    /// Retains device `index`'s primary context and creates its stream.
    pub(super) fn new(index: usize) -> Result<Context, String> {
        let dev = result::device::get(index as i32).map_err(|e| describe("cuDeviceGet", e))?;
        // SAFETY: `dev` came from `cuDeviceGet`.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| describe("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: `ctx` is the live primary context just retained.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| describe("cuCtxSetCurrent", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| describe("cuStreamCreate", e))?;
        Ok(Context {
            dev,
            ctx,
            stream,
            cublas: OnceLock::new(),
        })
    }

    pub(crate) fn bind(&self) -> Result<(), String> {
        // SAFETY: the context was retained in `new` and is never released.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| describe("cuCtxSetCurrent", e))
    }

    /// The stream every operation of this device is queued on (a `CUstream`).
    pub(super) fn stream(&self) -> *mut c_void {
        self.stream.cast()
    }

    pub(super) fn alloc(&self, bytes: usize) -> Result<u64, String> {
        self.bind()?;
        // SAFETY: a plain allocation in the current (bound) context.
        unsafe { result::malloc_sync(bytes) }.map_err(|e| describe("cuMemAlloc", e))
    }

    /// Frees `ptr` after the stream's queued work (which may still use it) has finished.
    pub(super) fn free(&self, ptr: u64) -> Result<(), String> {
        self.synchronize()?;
        // SAFETY: `ptr` came from `alloc` on this context and nothing uses it any more.
        unsafe { result::free_sync(ptr) }.map_err(|e| describe("cuMemFree", e))
    }

    pub(super) fn synchronize(&self) -> Result<(), String> {
        self.bind()?;
        // SAFETY: the stream was created in `new` and is never destroyed.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| describe("cuStreamSynchronize", e))
    }

    /// Copies `src` to device address `dst`, waiting until the copy is done (so `src` may be
    /// freed right after).
    ///
    /// # Safety
    /// `dst..dst + src.len()` must be device memory of this context.
    pub(super) unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        self.bind()?;
        // SAFETY: the caller guarantees the destination range; `src` is a live host slice.
        unsafe { result::memcpy_htod_async(dst, src, self.stream) }
            .map_err(|e| describe("cuMemcpyHtoDAsync", e))?;
        self.synchronize()
    }

    /// Copies device memory at `src` into `dst` after the stream's queued work.
    ///
    /// # Safety
    /// `src..src + dst.len()` must be device memory of this context.
    pub(super) unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), String> {
        self.bind()?;
        // SAFETY: the caller guarantees the source range; `dst` is a live host slice.
        unsafe { result::memcpy_dtoh_async(dst, src, self.stream) }
            .map_err(|e| describe("cuMemcpyDtoHAsync", e))?;
        self.synchronize()
    }

    /// Queues a device-to-device copy of `bytes` bytes.
    ///
    /// # Safety
    /// Both ranges must be device memory of this context.
    pub(super) unsafe fn copy_on_device(
        &self,
        dst: u64,
        src: u64,
        bytes: usize,
    ) -> Result<(), String> {
        self.bind()?;
        // SAFETY: the caller guarantees both ranges.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(|e| describe("cuMemcpyDtoDAsync", e))
    }

    /// Queues zeroing `bytes` bytes at `dst`.
    ///
    /// # Safety
    /// The range must be device memory of this context.
    pub(super) unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String> {
        self.bind()?;
        // SAFETY: the caller guarantees the range.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream) }
            .map_err(|e| describe("cuMemsetD8Async", e))
    }

    /// The device's compute capability (major, minor).
    pub(super) fn compute_capability(&self) -> Result<(i32, i32), String> {
        use sys::CUdevice_attribute::*;
        let get = |a| {
            // SAFETY: `dev` came from `cuDeviceGet`.
            unsafe { result::device::get_attribute(self.dev, a) }
                .map_err(|e| describe("cuDeviceGetAttribute", e))
        };
        Ok((
            get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            get(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// Loads a module image (PTX text, NUL-terminated, or a cubin) and looks up `entry` in it;
    /// the module stays loaded for the process. `shared_bytes` above the 48 KiB default opts
    /// the function into that much dynamic shared memory.
    pub(super) fn load_module(
        &self,
        image: &[u8],
        entry: &str,
        shared_bytes: u32,
    ) -> Result<usize, String> {
        self.bind()?;
        let name =
            std::ffi::CString::new(entry).map_err(|_| "the entry name contains a NUL byte")?;
        // SAFETY: `image` is a complete module image (the caller NUL-terminates PTX), alive for
        // the call.
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .map_err(|e| describe("cuModuleLoadData", e))?;
        // SAFETY: `module` was just loaded and is never unloaded.
        let f = unsafe { result::module::get_function(module, name) }
            .map_err(|e| describe(&format!("cuModuleGetFunction({entry})"), e))?;
        if shared_bytes > 48 * 1024 {
            use sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            // SAFETY: `f` is the live function just looked up.
            unsafe {
                result::function::set_function_attribute(
                    f,
                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            }
            .map_err(|e| describe("cuFuncSetAttribute", e))?;
        }
        Ok(f as usize)
    }

    /// Queues `function` (from `load_module`) on the stream; `params[i]` points at the value of
    /// the kernel's parameter `i`.
    ///
    /// # Safety
    /// `params` must match the kernel's parameter list, and every device address among the
    /// values must be valid for what the kernel accesses.
    pub(super) unsafe fn launch(
        &self,
        function: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> Result<(), String> {
        self.bind()?;
        // The driver copies the parameter values when the launch is queued.
        // SAFETY: the caller guarantees the parameters and memory accesses; `function` is a
        // live `CUfunction` of this context.
        unsafe {
            result::launch_kernel(
                function as sys::CUfunction,
                (grid[0], grid[1], grid[2]),
                (block[0], block[1], block[2]),
                shared_bytes,
                self.stream,
                params,
            )
        }
        .map_err(|e| describe("cuLaunchKernel", e))
    }

    /// This device's cuBLAS handle, created on first use with the device's stream.
    pub(crate) fn cublas(&self) -> Result<cublas::sys::cublasHandle_t, String> {
        let handle = self.cublas.get_or_init(|| {
            self.bind()?;
            // cudarc panics on a missing library or symbol: probe first, and contain the rest.
            std::panic::catch_unwind(|| -> Result<usize, String> {
                preload_cublas()?;
                // SAFETY: only tries to open the library.
                if !unsafe { cublas::sys::is_culib_present() } {
                    return Err("no cuBLAS library (libcublas.so.12) was found: put its \
                                directory on LD_LIBRARY_PATH or set TP_CUBLAS to it"
                        .into());
                }
                let h = cublas::result::create_handle()
                    .map_err(|e| format!("cublasCreate failed: {e}"))?;
                // SAFETY: `h` was just created; the stream lives as long as the process.
                unsafe { cublas::result::set_stream(h, self.stream.cast()) }
                    .map_err(|e| format!("cublasSetStream failed: {e}"))?;
                Ok(h as usize)
            })
            .unwrap_or_else(|_| Err("loading cuBLAS failed unexpectedly".into()))
        });
        handle.clone().map(|h| h as cublas::sys::cublasHandle_t)
    }
}

/// Opens the cuBLAS named by `TP_CUBLAS` (the library or its directory) once, so that cudarc's
/// lookup by name finds it already loaded; nothing when unset.
fn preload_cublas() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let Some(path) = std::env::var_os("TP_CUBLAS").filter(|p| !p.is_empty()) else {
                return Ok(());
            };
            let path = std::path::PathBuf::from(path);
            let mut libs = Vec::new();
            if path.is_dir() {
                let entries = std::fs::read_dir(&path)
                    .map_err(|e| format!("TP_CUBLAS={}: {e}", path.display()))?;
                let mut names: Vec<_> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("libcublas") && n.contains(".so"))
                    })
                    .collect();
                // cublasLt first: libcublas needs it.
                names.sort_by_key(|p| !p.to_string_lossy().contains("cublasLt"));
                libs.extend(names);
            } else {
                libs.push(path.clone());
            }
            if libs.is_empty() {
                return Err(format!(
                    "TP_CUBLAS={} holds no libcublas.so.*",
                    path.display()
                ));
            }
            for lib in libs {
                // SAFETY: loading cuBLAS runs only its initialisers; the library stays loaded
                // for the process (forgotten on purpose).
                let l = unsafe { libloading::Library::new(&lib) }
                    .map_err(|e| format!("TP_CUBLAS: cannot open {}: {e}", lib.display()))?;
                std::mem::forget(l);
            }
            Ok(())
        })
        .clone()
}
