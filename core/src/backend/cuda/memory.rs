//! CUDA device memory for the back end: fresh blocks from `tensorplay-cuda`'s caching allocator
//! as storages and as fresh tensors, and a storage's device block.

use tensorplay_cuda::memory::DeviceBuffer;
use tensorplay_ir::{DType, Device, Error, Result};

use crate::storage::Storage;
use crate::tensor::{Tensor, checked_nbytes};

/// A device error naming `op` and the device.
pub(super) fn fail(op: &str, device: Device, why: String) -> Error {
    Error::device(op, format!("{device}: {why}"))
}

/// Device memory for `bytes` bytes on `device`, zero-filled when `zeroed`.
pub(super) fn alloc(op: &str, device: Device, bytes: usize, zeroed: bool) -> Result<Storage> {
    let d = tensorplay_cuda::device(op, device)?;
    let buf = DeviceBuffer::alloc(d, bytes).map_err(|e| {
        fail(
            op,
            device,
            format!("cannot allocate {bytes} bytes of device memory: {e}"),
        )
    })?;
    if zeroed {
        // SAFETY: the block was just allocated with at least `bytes` bytes on `d`.
        unsafe { d.zero(buf.ptr(), bytes) }.map_err(|e| fail(op, device, e))?;
    }
    Ok(Storage::cuda(buf, bytes))
}

/// The device block of `storage`, or an error naming `op`.
pub(super) fn block<'s>(op: &str, storage: &'s Storage) -> Result<&'s DeviceBuffer> {
    storage.device_buffer().ok_or_else(|| {
        Error::device(
            op,
            "the storage has no device memory (host, fake or meta storage)",
        )
    })
}

pub(super) fn buffer_device(buf: &DeviceBuffer) -> Device {
    Device::Cuda(buf.device().index)
}

/// A contiguous tensor in fresh memory of CUDA `device`, zero-filled when `zeroed`.
///
/// # Safety
/// Unless `zeroed`, every element must be written before the tensor is read.
pub(super) unsafe fn fresh(
    op: &str,
    shape: &[usize],
    dtype: DType,
    device: Device,
    zeroed: bool,
) -> Result<Tensor> {
    let bytes = checked_nbytes(op, shape, dtype)?;
    let storage = alloc(op, device, bytes, zeroed)?;
    Ok(Tensor::contiguous_over(storage, shape, dtype, device))
}
