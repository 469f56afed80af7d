//! A caching allocator for large CPU buffers.
//!
//! A fresh multi-megabyte allocation comes from `mmap` and is page-faulted in on first touch (about
//! 2 µs per 4 KiB page), which the anchors show costs a steady-state loop 4–6x at 2^24 elements.
//! Buffers of at least [`CACHE_MIN_BYTES`] are rounded up to a size class (four classes per power of
//! two) and, when freed, kept in a per-class free list for reuse, up to [`cache_limit_bytes`] in all.
//! Buffers of at most [`SMALL_MAX_BYTES`] (the outputs of small eager ops and compiled calls) are
//! rounded up to a power of two and recycled through a per-thread free list of a few buffers per
//! size (no lock; the system's aligned allocation costs about a third of a one-element eager op).
//! Sizes in between go straight to the system allocator.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc};
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Alignment of every buffer: a cache line, enough for any SIMD load we emit.
pub const ALIGN: usize = 64;
/// Buffers below this size are not cached.
pub const CACHE_MIN_BYTES: usize = 64 * 1024;
/// Default bound on the bytes held in free lists (`TP_ALLOC_CACHE_MB` overrides).
const DEFAULT_CACHE_LIMIT: usize = 2 << 30;

/// Number of size classes tracked (classes above this are freed, not cached).
const NUM_CLASSES: usize = 160;

/// Largest buffer recycled by the per-thread small-buffer lists.
pub const SMALL_MAX_BYTES: usize = 4096;
/// Smallest small-buffer size (one cache line, the alignment).
const SMALL_MIN_BYTES: usize = ALIGN;
/// Small-buffer sizes: powers of two from 64 bytes to [`SMALL_MAX_BYTES`].
const SMALL_CLASSES: usize = 7;
/// Buffers kept per small size and thread (so a thread holds at most 32 × 8,128 bytes ≈ 254 KiB).
const SMALL_PER_CLASS: usize = 32;

/// One thread's free small buffers, by size class; freed with the thread.
struct SmallCache {
    free: [Vec<NonNull<u8>>; SMALL_CLASSES],
}

impl Drop for SmallCache {
    fn drop(&mut self) {
        for (class, list) in self.free.iter_mut().enumerate() {
            for ptr in list.drain(..) {
                // SAFETY: every pointer in small list `class` was allocated by `raw_alloc` with
                // `small_bytes(class)` bytes and `ALIGN`, and only this list owns it.
                unsafe {
                    dealloc(
                        ptr.as_ptr(),
                        Layout::from_size_align_unchecked(small_bytes(class), ALIGN),
                    )
                };
            }
        }
    }
}

thread_local! {
    static SMALL: RefCell<SmallCache> = const {
        RefCell::new(SmallCache {
            free: [const { Vec::new() }; SMALL_CLASSES],
        })
    };
}

/// Small size class and its size for a request of at most [`SMALL_MAX_BYTES`] bytes.
fn small_class(bytes: usize) -> Option<(usize, usize)> {
    if bytes > SMALL_MAX_BYTES {
        return None;
    }
    let rounded = bytes.max(SMALL_MIN_BYTES).next_power_of_two();
    let class = (rounded.trailing_zeros() - SMALL_MIN_BYTES.trailing_zeros()) as usize;
    Some((class, rounded))
}

fn small_bytes(class: usize) -> usize {
    SMALL_MIN_BYTES << class
}

/// Takes a free small buffer of `class` from this thread's list.
fn small_pop(class: usize) -> Option<NonNull<u8>> {
    SMALL
        .try_with(|c| c.try_borrow_mut().ok()?.free[class].pop())
        .ok()
        .flatten()
}

/// Keeps a small buffer of `class` in this thread's list; `false` when the list is full (or the
/// thread is shutting down) and the caller must free it.
fn small_push(class: usize, ptr: NonNull<u8>) -> bool {
    SMALL
        .try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return false;
            };
            let list = &mut c.free[class];
            if list.len() >= SMALL_PER_CLASS {
                return false;
            }
            if list.capacity() == 0 {
                list.reserve_exact(SMALL_PER_CLASS);
            }
            list.push(ptr);
            true
        })
        .unwrap_or(false)
}

/// Frees this thread's free small buffers.
fn empty_small_cache() {
    let _ = SMALL.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            drop(std::mem::replace(
                &mut *c,
                SmallCache {
                    free: [const { Vec::new() }; SMALL_CLASSES],
                },
            ));
        }
    });
}

/// Small buffers free in this thread's lists (tests).
pub fn small_cached_count() -> usize {
    SMALL
        .try_with(|c| c.borrow().free.iter().map(Vec::len).sum())
        .unwrap_or(0)
}

struct Cache {
    free: Vec<Vec<NonNull<u8>>>,
    held_bytes: usize,
}

// SAFETY: the pointers in the cache are owned allocations that no tensor uses; the cache is only
// reached through its mutex, and moving ownership of raw memory between threads is fine.
unsafe impl Send for Cache {}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    free: Vec::new(),
    held_bytes: 0,
});
static CACHE_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static HITS: AtomicUsize = AtomicUsize::new(0);
static MISSES: AtomicUsize = AtomicUsize::new(0);

/// The bound on cached bytes, read once from `TP_ALLOC_CACHE_MB`.
pub fn cache_limit_bytes() -> usize {
    let v = CACHE_LIMIT.load(Ordering::Relaxed);
    if v != usize::MAX {
        return v;
    }
    let limit = std::env::var("TP_ALLOC_CACHE_MB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map(|mb| mb << 20)
        .unwrap_or(DEFAULT_CACHE_LIMIT);
    CACHE_LIMIT.store(limit, Ordering::Relaxed);
    limit
}

/// Sets the bound on cached bytes (what `TP_ALLOC_CACHE_MB` sets at start-up); when the free
/// lists hold more, they are emptied. `0` turns the large-buffer cache off.
///
/// ```
/// use tensorplay_core::storage::allocator;
/// let before = allocator::cache_limit_bytes();
/// allocator::set_cache_limit_bytes(0);
/// assert_eq!((allocator::cache_limit_bytes(), allocator::cached_bytes()), (0, 0));
/// allocator::set_cache_limit_bytes(before);
/// ```
pub fn set_cache_limit_bytes(bytes: usize) {
    // `usize::MAX` means "not read yet".
    CACHE_LIMIT.store(bytes.min(usize::MAX - 1), Ordering::Relaxed);
    if cached_bytes() > bytes {
        empty_cache();
    }
}

/// Size class index and rounded size for a request: four classes per power of two, so at most 25 %
/// of a buffer is slack.
fn size_class(bytes: usize) -> Option<(usize, usize)> {
    if bytes < CACHE_MIN_BYTES {
        return None;
    }
    let pow = usize::BITS - 1 - bytes.leading_zeros(); // floor(log2)
    if pow as usize * 4 >= NUM_CLASSES {
        // Beyond the cached range (and where `base + 4 * quarter` could overflow).
        return None;
    }
    let base = 1usize << pow;
    let quarter = base / 4;
    let step = bytes.saturating_sub(base).div_ceil(quarter); // 0..=4
    let rounded = base + step * quarter;
    let class = (pow as usize) * 4 + step;
    (class < NUM_CLASSES).then_some((class, rounded))
}

/// Allocation statistics: (cache hits, cache misses) since process start.
pub fn stats() -> (usize, usize) {
    (HITS.load(Ordering::Relaxed), MISSES.load(Ordering::Relaxed))
}

/// Bytes currently held in the free lists (not in use by any tensor).
pub fn cached_bytes() -> usize {
    CACHE.lock().held_bytes
}

/// Frees every cached large buffer, and this thread's small ones (tests and memory-pressure
/// hooks).
pub fn empty_cache() {
    empty_small_cache();
    let mut cache = CACHE.lock();
    for (class, list) in cache.free.iter_mut().enumerate() {
        for ptr in list.drain(..) {
            let bytes = class_bytes(class);
            // SAFETY: every pointer in free list `class` was allocated by `raw_alloc` with
            // `class_bytes(class)` bytes and `ALIGN` (a valid layout then, so now), and is owned by
            // the cache alone; draining the list forgets it.
            unsafe {
                dealloc(
                    ptr.as_ptr(),
                    Layout::from_size_align_unchecked(bytes, ALIGN),
                )
            };
        }
    }
    cache.held_bytes = 0;
}

fn class_bytes(class: usize) -> usize {
    let pow = class / 4;
    let step = class % 4;
    let base = 1usize << pow;
    base + step * (base / 4)
}

/// An owned, aligned, uninitialized (or zeroed) byte buffer.
pub(crate) struct Buffer {
    ptr: NonNull<u8>,
    /// Bytes actually allocated (the size class), needed to free it.
    capacity: usize,
}

// SAFETY: a `Buffer` owns its allocation (it frees it exactly once, in `drop`) and holds no
// thread-bound state, so it may move between threads.
unsafe impl Send for Buffer {}
// SAFETY: `&Buffer` only hands out the address (`as_ptr`); the buffer itself never reads or
// writes the bytes. What is done with the bytes is governed by the kernels' own rules (see
// `Storage`).
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Allocates at least `bytes` bytes. `zeroed` asks for zero-filled memory.
    ///
    /// Returns `None` when the request cannot be laid out (over `isize::MAX` bytes) or the system
    /// allocator refuses it, so callers can report an error instead of aborting the process.
    pub(crate) fn try_new(bytes: usize, zeroed: bool) -> Option<Buffer> {
        let bytes = bytes.max(1);
        if let Some((class, rounded)) = size_class(bytes) {
            let reused = {
                let mut cache = CACHE.lock();
                let popped = cache.free.get_mut(class).and_then(|l| l.pop());
                if popped.is_some() {
                    cache.held_bytes -= rounded;
                }
                popped
            };
            if let Some(ptr) = reused {
                HITS.fetch_add(1, Ordering::Relaxed);
                if zeroed {
                    // SAFETY: a reused class buffer has exactly `rounded` bytes and we own it.
                    unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, rounded) };
                }
                return Some(Buffer {
                    ptr,
                    capacity: rounded,
                });
            }
            MISSES.fetch_add(1, Ordering::Relaxed);
            let ptr = raw_alloc(rounded, zeroed).or_else(|| {
                // The system is short of memory: give the cached buffers back and retry once.
                empty_cache();
                raw_alloc(rounded, zeroed)
            })?;
            return Some(Buffer {
                ptr,
                capacity: rounded,
            });
        }
        if let Some((class, rounded)) = small_class(bytes) {
            let ptr = match small_pop(class) {
                Some(ptr) => {
                    if zeroed {
                        // SAFETY: a small buffer of `class` has exactly `rounded` bytes; we own it.
                        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, rounded) };
                    }
                    ptr
                }
                None => raw_alloc(rounded, zeroed)?,
            };
            return Some(Buffer {
                ptr,
                capacity: rounded,
            });
        }
        Some(Buffer {
            ptr: raw_alloc(bytes, zeroed)?,
            capacity: bytes,
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// Allocates `bytes` aligned bytes, or `None` when the layout is invalid or memory is exhausted.
fn raw_alloc(bytes: usize, zeroed: bool) -> Option<NonNull<u8>> {
    let layout = Layout::from_size_align(bytes, ALIGN).ok()?;
    // SAFETY: `layout` has a non-zero size (`try_new` asks for at least one byte).
    let p = unsafe {
        if zeroed {
            alloc_zeroed(layout)
        } else {
            alloc(layout)
        }
    };
    NonNull::new(p)
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Small buffers always have a small class's exact size (`try_new` rounds them up).
        if let Some((class, _)) = small_class(self.capacity)
            && small_push(class, self.ptr)
        {
            return;
        }
        if let Some((class, rounded)) = size_class(self.capacity)
            && rounded == self.capacity
        {
            let limit = cache_limit_bytes();
            let mut cache = CACHE.lock();
            if cache.held_bytes + rounded <= limit {
                if cache.free.len() <= class {
                    cache.free.resize_with(class + 1, Vec::new);
                }
                cache.free[class].push(self.ptr);
                cache.held_bytes += rounded;
                return;
            }
        }
        // SAFETY: `ptr` came from `raw_alloc` with `capacity` bytes and `ALIGN` (a valid layout),
        // and this buffer is its only owner.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.capacity, ALIGN),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_by_at_most_a_quarter() {
        for bytes in [
            CACHE_MIN_BYTES,
            100_000,
            1 << 20,
            (1 << 20) + 1,
            3 << 24,
            64 << 20,
        ] {
            let (class, rounded) = size_class(bytes).unwrap();
            assert!(
                rounded >= bytes && rounded <= bytes + bytes / 4 + 1,
                "{bytes} -> {rounded}"
            );
            assert_eq!(class_bytes(class), rounded);
            assert_eq!(size_class(rounded), Some((class, rounded)));
        }
        assert_eq!(size_class(100), None);
    }

    #[test]
    fn impossible_requests_fail_instead_of_aborting() {
        assert!(Buffer::try_new(usize::MAX - 10, false).is_none());
        assert!(Buffer::try_new(isize::MAX as usize, true).is_none());
        // Beyond the largest size class: not cached, still refused cleanly.
        assert!(Buffer::try_new(1 << 62, false).is_none());
    }

    #[test]
    fn small_classes_are_powers_of_two_from_a_cache_line() {
        assert_eq!(small_class(1), Some((0, 64)));
        assert_eq!(small_class(64), Some((0, 64)));
        assert_eq!(small_class(65), Some((1, 128)));
        assert_eq!(
            small_class(SMALL_MAX_BYTES),
            Some((SMALL_CLASSES - 1, 4096))
        );
        assert_eq!(small_class(SMALL_MAX_BYTES + 1), None);
        for class in 0..SMALL_CLASSES {
            assert_eq!(
                small_class(small_bytes(class)),
                Some((class, small_bytes(class)))
            );
        }
    }

    #[test]
    fn freed_small_buffers_are_reused_and_zeroed_on_request() {
        // Thread-local lists: a fresh thread sees only its own buffers.
        std::thread::spawn(|| {
            let first = Buffer::try_new(100, false).unwrap();
            let addr = first.as_ptr() as usize;
            // SAFETY: `first` owns 128 bytes.
            unsafe { std::ptr::write_bytes(first.as_ptr(), 0xAB, 128) };
            drop(first);
            assert_eq!(small_cached_count(), 1);
            let second = Buffer::try_new(120, true).unwrap();
            assert_eq!(
                second.as_ptr() as usize,
                addr,
                "the freed buffer comes back"
            );
            assert_eq!(second.as_ptr() as usize % ALIGN, 0);
            // SAFETY: `second` owns 128 zeroed bytes.
            let s = unsafe { std::slice::from_raw_parts(second.as_ptr(), 128) };
            assert!(s.iter().all(|&b| b == 0));
            // A list holds at most SMALL_PER_CLASS buffers; the rest go back to the system.
            let many: Vec<Buffer> = (0..SMALL_PER_CLASS + 5)
                .map(|_| Buffer::try_new(8, false).unwrap())
                .collect();
            drop(many);
            assert_eq!(small_cached_count(), SMALL_PER_CLASS);
            empty_small_cache();
            assert_eq!(small_cached_count(), 0);
            drop(second);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn freed_large_buffers_are_reused() {
        let bytes = 5 << 20;
        let first = Buffer::try_new(bytes, false).unwrap();
        let addr = first.as_ptr() as usize;
        drop(first);
        let second = Buffer::try_new(bytes, true).unwrap();
        // Another test thread may have taken it; only check the zeroing contract then.
        if second.as_ptr() as usize == addr {
            // SAFETY: `second` owns at least `bytes` bytes, zeroed, so initialised.
            let s = unsafe { std::slice::from_raw_parts(second.as_ptr(), bytes) };
            assert!(s.iter().all(|&b| b == 0));
        }
    }
}
