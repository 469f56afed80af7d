//! One CUDA device as the rest of the runtime sees it: raw memory, copies and synchronization,
//! served by the real driver or by the host emulation.
//!
//! An emulated device's "device memory" is ordinary host memory and its copies are `memcpy`:
//! every layer above — storage, the caching allocator, `to_device`, custom `cuda` kernels, the
//! compiler's launch of generated kernels (run under the host emulation) — runs unchanged on a
//! machine without a GPU, which is how CI tests them.

use std::alloc::Layout;

use parking_lot::Mutex;

use super::memory::Pool;

/// Alignment of emulated device allocations (what `cuMemAlloc` guarantees at least).
const EMULATED_ALIGN: usize = 256;

/// Who serves a device's operations.
pub(crate) enum Engine {
    /// The CUDA driver.
    #[cfg(feature = "cuda")]
    Driver(super::driver::Context),
    /// Host memory under the CUDA host emulation.
    Emulated,
}

/// A CUDA device in use: its engine and its caching allocator's pool.
pub struct CudaDevice {
    pub index: u16,
    pub(crate) engine: Engine,
    pub(crate) pool: Mutex<Pool>,
}

impl CudaDevice {
    pub(crate) fn new(index: u16, engine: Engine) -> CudaDevice {
        CudaDevice {
            index,
            engine,
            pool: Mutex::new(Pool::default()),
        }
    }

    /// A fresh allocation of `bytes` bytes (no caching), or why not.
    pub fn raw_alloc(&self, bytes: usize) -> Result<u64, String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            Engine::Driver(c) => c.alloc(bytes),
            Engine::Emulated => {
                let layout = emulated_layout(bytes)?;
                // SAFETY: the layout has a non-zero size (`emulated_layout` rounds up).
                let p = unsafe { std::alloc::alloc(layout) };
                if p.is_null() {
                    Err(format!("out of memory allocating {bytes} bytes"))
                } else {
                    Ok(p as u64)
                }
            }
        }
    }

    /// Frees an allocation `raw_alloc` made with the same `bytes`.
    pub fn raw_free(&self, ptr: u64, bytes: usize) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            Engine::Driver(c) => c.free(ptr),
            Engine::Emulated => {
                let layout = emulated_layout(bytes)?;
                // SAFETY: `ptr` came from `raw_alloc(bytes)`, i.e. `alloc` with this layout, and
                // its owner gave it up.
                unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
                Ok(())
            }
        }
    }

    /// Waits until every operation queued on the device has finished.
    pub fn synchronize(&self) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            Engine::Driver(c) => c.synchronize(),
            Engine::Emulated => Ok(()),
        }
    }

    /// The driver stream the device's work is ordered on (null for an emulated device).
    pub fn stream(&self) -> *mut std::ffi::c_void {
        match &self.engine {
            #[cfg(feature = "cuda")]
            Engine::Driver(c) => c.stream(),
            Engine::Emulated => std::ptr::null_mut(),
        }
    }

    /// Copies host bytes to device memory; done when it returns.
    ///
    /// # Safety
    /// `dst..dst + src.len()` must lie in one live allocation of this device.
    pub unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded contract.
            Engine::Driver(c) => unsafe { c.copy_to_device(dst, src) },
            Engine::Emulated => {
                // SAFETY: the caller guarantees the destination; a host slice and a device
                // allocation never overlap.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
                Ok(())
            }
        }
    }

    /// Copies device memory to host bytes, after the device's queued work.
    ///
    /// # Safety
    /// `src..src + dst.len()` must lie in one live allocation of this device.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded contract.
            Engine::Driver(c) => unsafe { c.copy_to_host(dst, src) },
            Engine::Emulated => {
                // SAFETY: as in `copy_to_device`.
                unsafe {
                    std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len())
                };
                Ok(())
            }
        }
    }

    /// Copies `bytes` bytes within the device (queued on its stream).
    ///
    /// # Safety
    /// Both ranges must lie in live allocations of this device and must not overlap.
    pub unsafe fn copy_on_device(&self, dst: u64, src: u64, bytes: usize) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded contract.
            Engine::Driver(c) => unsafe { c.copy_on_device(dst, src, bytes) },
            Engine::Emulated => {
                // SAFETY: the caller guarantees both ranges and that they are disjoint.
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, bytes) };
                Ok(())
            }
        }
    }

    /// Zeroes `bytes` bytes at `dst`.
    ///
    /// # Safety
    /// The range must lie in one live allocation of this device.
    pub unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String> {
        match &self.engine {
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded contract.
            Engine::Driver(c) => unsafe { c.zero(dst, bytes) },
            Engine::Emulated => {
                // SAFETY: the caller guarantees the range.
                unsafe { std::ptr::write_bytes(dst as *mut u8, 0, bytes) };
                Ok(())
            }
        }
    }
}

fn emulated_layout(bytes: usize) -> Result<Layout, String> {
    Layout::from_size_align(bytes.max(1), EMULATED_ALIGN)
        .map_err(|_| format!("an allocation of {bytes} bytes is too large"))
}
