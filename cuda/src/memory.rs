//! The caching device allocator: `cuMemAlloc`/`cuMemFree` cost tens of microseconds and free
//! synchronizes the device, so freed blocks are kept per device, by block size, and handed to
//! the next request of that size.
//!
//! Requests round up to a block size: multiples of 512 bytes below 1 MiB, of 2 MiB above (so
//! steady-state loops, which ask for the same sizes each step, hit the cache). A freed block
//! goes back to its device's pool while the pool holds at most [`cache_limit_bytes`]; beyond
//! that it is freed. When the driver runs out of memory, the device's pool is emptied and the
//! allocation tried once more. Reusing a block without synchronizing is safe because each
//! device orders all its work on one stream (see `driver.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::device::CudaDevice;

const SMALL_ROUND: usize = 512;
const LARGE_ROUND: usize = 2 << 20;
const LARGE_FROM: usize = 1 << 20;
/// Default bound on the bytes a device's pool keeps (`TP_CUDA_CACHE_MB` overrides).
const DEFAULT_CACHE_LIMIT: usize = 4 << 30;

/// The block size a request of `bytes` bytes gets (at least one small block, so every
/// allocation has a distinct non-null address).
pub fn block_size(bytes: usize) -> Option<usize> {
    let round = if bytes < LARGE_FROM {
        SMALL_ROUND
    } else {
        LARGE_ROUND
    };
    bytes.max(1).checked_next_multiple_of(round)
}

/// One device's free blocks and counters.
#[derive(Default)]
pub struct Pool {
    free: HashMap<usize, Vec<u64>>,
    /// Bytes in free blocks.
    cached: usize,
    /// Bytes in blocks that tensors hold.
    in_use: usize,
}

static CACHE_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The bound on each device pool's cached bytes, read once from `TP_CUDA_CACHE_MB`
/// (default 4 GiB).
pub fn cache_limit_bytes() -> usize {
    let v = CACHE_LIMIT.load(Ordering::Relaxed);
    if v != usize::MAX {
        return v;
    }
    let limit = std::env::var("TP_CUDA_CACHE_MB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map(|mb| mb.saturating_mul(1 << 20))
        .unwrap_or(DEFAULT_CACHE_LIMIT)
        .min(usize::MAX - 1);
    CACHE_LIMIT.store(limit, Ordering::Relaxed);
    limit
}

/// Device memory a tensor storage owns; back to its device's pool when dropped.
pub struct DeviceBuffer {
    device: &'static CudaDevice,
    ptr: u64,
    block: usize,
}

impl DeviceBuffer {
    /// A block of at least `bytes` bytes on `device`, from the pool or the driver; its contents
    /// are whatever the block held.
    pub fn alloc(device: &'static CudaDevice, bytes: usize) -> Result<DeviceBuffer, String> {
        let block = block_size(bytes).ok_or_else(|| format!("{bytes} bytes is too large"))?;
        {
            let mut pool = device.pool.lock();
            if let Some(ptr) = pool.free.get_mut(&block).and_then(Vec::pop) {
                pool.cached -= block;
                pool.in_use += block;
                return Ok(DeviceBuffer { device, ptr, block });
            }
        }
        let ptr = match device.raw_alloc(block) {
            Ok(p) => p,
            Err(first) => {
                // Out of memory (most likely): give the pool's blocks back and try once more.
                empty_pool(device)?;
                device
                    .raw_alloc(block)
                    .map_err(|e| format!("{e} (after emptying the cache; first try: {first})"))?
            }
        };
        device.pool.lock().in_use += block;
        Ok(DeviceBuffer { device, ptr, block })
    }

    /// The device address of the first byte.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The device it lives on.
    pub fn device(&self) -> &'static CudaDevice {
        self.device
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let mut pool = self.device.pool.lock();
        pool.in_use -= self.block;
        if pool.cached + self.block <= cache_limit_bytes() {
            pool.cached += self.block;
            pool.free.entry(self.block).or_default().push(self.ptr);
            return;
        }
        drop(pool);
        // A failed free leaks the block; there is nobody to report it to in a destructor.
        let _ = self.device.raw_free(self.ptr, self.block);
    }
}

/// Frees every cached block of `device`.
pub fn empty_pool(device: &CudaDevice) -> Result<(), String> {
    let blocks: Vec<(usize, Vec<u64>)> = {
        let mut pool = device.pool.lock();
        pool.cached = 0;
        pool.free.drain().collect()
    };
    let mut first_error = None;
    for (block, ptrs) in blocks {
        for p in ptrs {
            if let Err(e) = device.raw_free(p, block) {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// (bytes held by tensors, bytes cached free) on `device`.
pub fn usage(device: &CudaDevice) -> (usize, usize) {
    let pool = device.pool.lock();
    (pool.in_use, pool.cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_round_to_their_granularity() {
        assert_eq!(block_size(0), Some(512));
        assert_eq!(block_size(1), Some(512));
        assert_eq!(block_size(513), Some(1024));
        assert_eq!(block_size(LARGE_FROM - 1), Some(LARGE_FROM));
        assert_eq!(block_size(LARGE_FROM), Some(LARGE_ROUND));
        assert_eq!(block_size(LARGE_ROUND + 1), Some(2 * LARGE_ROUND));
        assert_eq!(block_size(usize::MAX), None);
    }
}
