//! Reference-counted tensor storage: a host buffer, host memory another owner allocated (a numpy
//! array, a DLPack producer), device memory on a CUDA device, or nothing (fake and meta
//! tensors), plus the version counter that every in-place write bumps.

pub mod allocator;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use allocator::Buffer;

use tensorplay_cuda::memory::DeviceBuffer;

/// Shared storage behind one or more tensor views.
///
/// The bytes are shared mutable memory, like an `UnsafeCell<[u8]>` behind an `Arc`: every view
/// holds a clone, and in-place ops write through a shared handle. Nothing here hands out
/// references to the bytes; kernels get the address from [`Storage::ptr`] and follow the rules of
/// `kernels::raw` (no `&mut` over memory an input may cover). Across threads the rule is the
/// user's, as with any shared buffer: an in-place write to a tensor must not run concurrently
/// with another access to the same elements (the library does not lock storages).
#[derive(Clone)]
pub struct Storage(Arc<StorageImpl>);

struct StorageImpl {
    data: Data,
    bytes: usize,
    version: AtomicU64,
}

/// Where a storage's bytes live.
enum Data {
    /// Fake/meta storage: shapes only, no data.
    None,
    /// Host memory.
    Host(Buffer),
    /// Memory of a CUDA device.
    Cuda(DeviceBuffer),
    /// Host memory allocated by someone else, kept alive by its owner.
    External(External),
}

/// Host memory this library did not allocate: its address and the object that keeps it alive.
/// Dropping the owner (when the last view goes) releases the memory by the owner's own rules
/// (a Python reference released, a DLPack deleter called); it never goes to the allocator's
/// caches, and the compiler's buffer arena never recycles it ([`Storage::is_external`]).
struct External {
    ptr: *mut u8,
    _owner: Box<dyn Any + Send + Sync>,
}

// SAFETY: the bytes behind `ptr` are shared mutable memory under the same rules as an allocator
// buffer's (see `Storage`): nothing hands out references to them, kernels follow
// `kernels::raw`. The owner is itself `Send + Sync`; `ptr` is only an address into its memory.
unsafe impl Send for External {}
// SAFETY: as for `Send`.
unsafe impl Sync for External {}

impl Storage {
    /// Uninitialized storage of `bytes` bytes, or `None` when the allocation fails.
    pub(crate) fn uninit(bytes: usize) -> Option<Storage> {
        Some(Storage::with_data(
            Data::Host(Buffer::try_new(bytes, false)?),
            bytes,
        ))
    }

    /// Zero-filled storage of `bytes` bytes, or `None` when the allocation fails.
    pub(crate) fn zeroed(bytes: usize) -> Option<Storage> {
        Some(Storage::with_data(
            Data::Host(Buffer::try_new(bytes, true)?),
            bytes,
        ))
    }

    /// Storage with no data, for fake and meta tensors.
    pub(crate) fn fake(bytes: usize) -> Storage {
        Storage::with_data(Data::None, bytes)
    }

    /// Storage of `bytes` bytes over the device memory `buffer` (at least that large).
    pub(crate) fn cuda(buffer: DeviceBuffer, bytes: usize) -> Storage {
        Storage::with_data(Data::Cuda(buffer), bytes)
    }

    /// Storage over `bytes` bytes of host memory at `ptr` that `owner` keeps alive; `owner` is
    /// dropped when the last tensor using the storage goes.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `bytes` bytes for as long as `owner` lives,
    /// and nothing may access that memory through other paths while a kernel writes it (the
    /// same rule as for any shared tensor storage).
    pub(crate) unsafe fn external(
        ptr: *mut u8,
        bytes: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Storage {
        Storage::with_data(Data::External(External { ptr, _owner: owner }), bytes)
    }

    fn with_data(data: Data, bytes: usize) -> Storage {
        Storage(Arc::new(StorageImpl {
            data,
            bytes,
            version: AtomicU64::new(0),
        }))
    }

    /// Host base pointer, or `None` for fake and device storage.
    pub(crate) fn ptr(&self) -> Option<*mut u8> {
        match &self.0.data {
            Data::Host(b) => Some(b.as_ptr()),
            Data::External(e) => Some(e.ptr),
            Data::None | Data::Cuda(_) => None,
        }
    }

    /// The device memory of a CUDA storage.
    pub(crate) fn device_buffer(&self) -> Option<&DeviceBuffer> {
        match &self.0.data {
            Data::Cuda(b) => Some(b),
            Data::None | Data::Host(_) | Data::External(_) => None,
        }
    }

    /// True when this storage holds no data.
    pub fn is_fake(&self) -> bool {
        matches!(self.0.data, Data::None)
    }

    /// True when the memory belongs to another owner (`Tensor::from_external`): it must never
    /// be recycled for another tensor, even when no tensor uses it any more.
    pub fn is_external(&self) -> bool {
        matches!(self.0.data, Data::External(_))
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.0.bytes
    }

    /// How many in-place writes this storage has seen; autograd uses it to detect that a tensor it
    /// saved for backward was modified.
    pub fn version(&self) -> u64 {
        self.0.version.load(Ordering::Acquire)
    }

    /// Records an in-place write (done by a kernel outside the dispatcher, such as a compiled
    /// in-place update), so autograd notices saved tensors that changed.
    pub fn bump_version(&self) {
        self.0.version.fetch_add(1, Ordering::AcqRel);
    }

    /// True when both handles share one allocation.
    pub fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// True when this is the only handle to the allocation: no tensor or view uses it, so its
    /// owner may hand the memory to a new tensor (the compiler's buffer arena does).
    ///
    /// ```
    /// use tensorplay_core::{DType, Tensor};
    /// let t = Tensor::zeros(&[4], DType::F32);
    /// let s = t.storage().clone();
    /// assert!(!s.is_unique()); // `t` uses it
    /// drop(t);
    /// assert!(s.is_unique());
    /// ```
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.0) == 1
    }

    /// A stable identity for the allocation (for alias checks and debugging).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}
