//! Tensors on CUDA devices: allocation, copies between the host and devices, device addresses.

use tensorplay_ir::shape::contiguous_strides;
use tensorplay_ir::{DType, Device, Error, Result};

use super::memory::DeviceBuffer;
use crate::storage::Storage;
use crate::tensor::{Tensor, TensorImpl, checked_nbytes};

/// A device error naming `op`.
fn fail(op: &str, device: Device, why: String) -> Error {
    Error::device(op, format!("{device}: {why}"))
}

/// Device memory for `bytes` bytes on `device`.
fn alloc(op: &str, device: Device, bytes: usize) -> Result<(Storage, u64)> {
    let d = super::device(op, device)?;
    let buf = DeviceBuffer::alloc(d, bytes).map_err(|e| {
        fail(
            op,
            device,
            format!("cannot allocate {bytes} bytes of device memory: {e}"),
        )
    })?;
    let ptr = buf.ptr();
    Ok((Storage::cuda(buf, bytes), ptr))
}

/// The lowest and highest element index (from the storage base) a view reaches; `None` when it
/// has no elements.
fn element_span(t: &Tensor) -> Option<(usize, usize)> {
    if t.numel() == 0 {
        return None;
    }
    let (mut lo, mut hi) = (t.storage_offset() as isize, t.storage_offset() as isize);
    for (&n, &s) in t.shape().iter().zip(t.strides()) {
        let reach = (n as isize - 1) * s;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    Some((lo as usize, hi as usize))
}

impl Tensor {
    /// A zero-filled contiguous tensor on `device` (`cpu`, `cuda:N` or `meta`, where it has no
    /// data): how a custom op's `cuda` kernel makes its outputs.
    ///
    /// ```
    /// use tensorplay_core::{cuda, DType, Device, Tensor};
    /// cuda::use_emulated_devices(1)?;
    /// let z = Tensor::zeros_on(&[2, 3], DType::I64, Device::Cuda(0))?;
    /// assert_eq!((z.device(), z.to_vec::<i64>()?), (Device::Cuda(0), vec![0; 6]));
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn zeros_on(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        match device {
            Device::Cpu => Tensor::try_zeros(shape, dtype),
            Device::Meta => Tensor::try_empty_with("zeros_on", shape, dtype, device, true),
            Device::Cuda(_) => {
                let bytes = checked_nbytes("zeros_on", shape, dtype)?;
                let (storage, ptr) = alloc("zeros_on", device, bytes)?;
                let d = super::device("zeros_on", device)?;
                // SAFETY: `ptr` addresses the `bytes`-byte block just allocated on `d`.
                unsafe { d.zero(ptr, bytes) }.map_err(|e| fail("zeros_on", device, e))?;
                Ok(Tensor::contiguous_over(storage, shape, dtype, device))
            }
        }
    }

    /// This tensor on `device`: itself when it is already there, else a contiguous copy (fake
    /// tensors give fake tensors; anything to `meta` gives a data-less tensor). Copies to or
    /// from a CUDA device are done when this returns. Differentiable: under grad mode, the copy
    /// of a tensor that requires grad records a node whose backward moves the gradient back to
    /// this tensor's device (so a CPU leaf moved to a GPU gets its `.grad` on the CPU).
    ///
    /// ```
    /// use tensorplay_core::{DType, Device, Tensor};
    /// let x = Tensor::ones(&[2, 3], DType::F32);
    /// assert_eq!(x.to_device(Device::Cpu)?.to_vec::<f32>()?, vec![1.0; 6]);
    /// let m = x.to_device(Device::Meta)?;
    /// assert_eq!((m.device(), m.shape()), (Device::Meta, &[2usize, 3][..]));
    /// assert!(m.to_device(Device::Cpu).is_err()); // meta tensors have no values
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let moved = {
            let _g = crate::autograd::no_grad();
            self.copy_to_device(device)?
        };
        if device == Device::Meta || !self.requires_grad() || !crate::autograd::is_grad_enabled() {
            return Ok(moved);
        }
        let back = ToDeviceBackward {
            source: self.device(),
        };
        let mut out = crate::autograd::attach_backward(
            "to_device",
            Box::new(back),
            &[self],
            &[],
            vec![moved],
        );
        Ok(out.swap_remove(0))
    }

    /// [`Tensor::to_device`] without autograd.
    fn copy_to_device(&self, device: Device) -> Result<Tensor> {
        const OP: &str = "to_device";
        if self.is_batched() {
            return Err(Error::unsupported(
                OP,
                "moving a batched tensor between devices inside vmap",
            ));
        }
        if device == Device::Meta {
            return Ok(Tensor::empty_fake(self.shape(), self.dtype(), Device::Meta));
        }
        if self.device() == Device::Meta {
            return Err(Error::device(
                OP,
                format!("cannot copy a meta tensor (no data) to {device}"),
            ));
        }
        if self.is_fake() {
            if crate::tensor::is_tracing() {
                return Err(Error::unsupported(
                    OP,
                    format!(
                        "moving tensors between devices inside a compiled closure ({} to \
                         {device}); move the inputs before calling the compiled function",
                        self.device()
                    ),
                ));
            }
            if let Device::Cuda(_) = device {
                super::device(OP, device)?;
            }
            return Ok(Tensor::empty_fake(self.shape(), self.dtype(), device));
        }
        match (self.device(), device) {
            (Device::Cpu, Device::Cuda(_)) => self.host_to_device(device),
            (Device::Cuda(_), Device::Cpu) => self.device_to_host(),
            // Between two devices through the host (peer copies are not used yet).
            _ => self.device_to_host()?.host_to_device(device),
        }
    }

    /// A contiguous copy of this CPU tensor on CUDA `device`.
    fn host_to_device(&self, device: Device) -> Result<Tensor> {
        const OP: &str = "to_device";
        let _g = crate::autograd::no_grad();
        let src = self.contiguous()?;
        let bytes = checked_nbytes(OP, src.shape(), src.dtype())?;
        let (storage, ptr) = alloc(OP, device, bytes)?;
        if bytes > 0 {
            let host = src.data_ptr(OP)?;
            // SAFETY: `src` is contiguous, so its `bytes` bytes from `host` are its elements,
            // initialised and alive for this call.
            let host = unsafe { std::slice::from_raw_parts(host.cast_const(), bytes) };
            let d = super::device(OP, device)?;
            // SAFETY: `ptr` addresses a fresh block of at least `bytes` bytes on `d`.
            unsafe { d.copy_to_device(ptr, host) }.map_err(|e| fail(OP, device, e))?;
        }
        Ok(Tensor::contiguous_over(
            storage,
            src.shape(),
            src.dtype(),
            device,
        ))
    }

    /// A contiguous CPU copy of this CUDA tensor: the span of device memory the view reaches is
    /// copied to the host, then gathered in row-major order there.
    fn device_to_host(&self) -> Result<Tensor> {
        const OP: &str = "to_device";
        let device = self.device();
        let Some((lo, hi)) = element_span(self) else {
            return Tensor::try_empty(self.shape(), self.dtype());
        };
        let size = self.dtype().size();
        let elems = hi - lo + 1;
        let buf = self
            .storage()
            .device_buffer()
            .ok_or_else(|| fail(OP, device, "the tensor has no device memory".into()))?;
        // SAFETY: `copy_to_host` below writes all of it before anything reads it.
        let host = unsafe { Tensor::try_empty_uninit(&[elems], self.dtype()) }?;
        let dst = host.data_ptr(OP)?;
        // SAFETY: `host` is a fresh contiguous tensor of `elems` elements of `size` bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, elems * size) };
        // SAFETY: views only address elements inside their storage, so bytes `lo * size ..
        // (hi + 1) * size` lie in the storage's device block.
        unsafe {
            buf.device()
                .copy_to_host(dst, buf.ptr() + (lo * size) as u64)
        }
        .map_err(|e| fail(OP, device, e))?;
        let view = Tensor::from_impl(TensorImpl::new(
            host.storage().clone(),
            self.shape().into(),
            self.strides().into(),
            self.storage_offset() - lo,
            self.dtype(),
            Device::Cpu,
        ));
        let _g = crate::autograd::no_grad();
        view.contiguous()
    }

    /// A copy of this contiguous CUDA tensor in new memory of its device, made by the device's
    /// copy engine (a device-to-device `memcpy`, the bandwidth reference of the GPU check).
    /// Non-contiguous tensors are an error: gathering strided elements needs a kernel, which
    /// built-in eager ops do not have on CUDA yet.
    ///
    /// ```
    /// use tensorplay_core::{cuda, DType, Device, Tensor};
    /// cuda::use_emulated_devices(1)?;
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32)?.to_device(Device::Cuda(0))?;
    /// let y = x.clone_on_device()?;
    /// assert!(!y.storage().same(x.storage()) && y.equal(&x)?);
    /// assert!(x.reshape(&[2, 3])?.t()?.clone_on_device().is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn clone_on_device(&self) -> Result<Tensor> {
        const OP: &str = "clone_on_device";
        let device = self.device();
        let src = self.data_ptr_cuda().map_err(|_| {
            Error::device(
                OP,
                format!("tensor {} is not a CUDA tensor with data", self.meta()),
            )
        })?;
        if !self.is_contiguous() {
            return Err(Error::unsupported(
                OP,
                format!(
                    "tensor {} is not contiguous (strided copies on CUDA need a kernel)",
                    self.meta()
                ),
            ));
        }
        let bytes = checked_nbytes(OP, self.shape(), self.dtype())?;
        let (storage, dst) = alloc(OP, device, bytes)?;
        if bytes > 0 {
            let d = super::device(OP, device)?;
            // SAFETY: `src` addresses this contiguous tensor's `bytes` bytes; `dst` a fresh
            // block of at least `bytes` bytes on the same device.
            unsafe { d.copy_on_device(dst, src, bytes) }.map_err(|e| fail(OP, device, e))?;
        }
        Ok(Tensor::contiguous_over(
            storage,
            self.shape(),
            self.dtype(),
            device,
        ))
    }

    /// Device address of element `[0, .., 0]` of a CUDA tensor (a `CUdeviceptr`; on an emulated
    /// device, a host address), for `cuda` kernels of custom ops. Work on it belongs on the
    /// device's stream ([`crate::cuda::stream`]). An error for tensors elsewhere.
    ///
    /// ```
    /// use tensorplay_core::{cuda, DType, Device, Tensor};
    /// cuda::use_emulated_devices(1)?;
    /// let x = Tensor::zeros_on(&[4], DType::F32, Device::Cuda(0))?;
    /// assert_eq!(x.narrow(0, 1, 2)?.data_ptr_cuda()?, x.data_ptr_cuda()? + 4);
    /// assert!(Tensor::zeros(&[4], DType::F32).data_ptr_cuda().is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn data_ptr_cuda(&self) -> Result<u64> {
        let buf = self.storage().device_buffer().ok_or_else(|| {
            Error::device(
                "data_ptr_cuda",
                format!("tensor {} is not a CUDA tensor with data", self.meta()),
            )
        })?;
        Ok(buf.ptr() + (self.storage_offset() * self.dtype().size()) as u64)
    }
}

/// A contiguous tensor on `device`'s memory, uninitialised, for code that writes every element
/// (the compiler's launch of generated kernels).
///
/// # Safety
/// Every element must be written before the tensor is read.
pub unsafe fn empty_uninit(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    let bytes = checked_nbytes("empty", shape, dtype)?;
    let (storage, _) = alloc("empty", device, bytes)?;
    Ok(Tensor::from_impl(TensorImpl::new(
        storage,
        shape.into(),
        contiguous_strides(shape),
        0,
        dtype,
        device,
    )))
}

/// The backward of a copy between devices: the gradient goes back to where the input lives.
struct ToDeviceBackward {
    source: Device,
}

impl crate::autograd::BackwardFn for ToDeviceBackward {
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let g = grads.first().cloned().flatten();
        Ok(vec![g.map(|g| g.to_device(self.source)).transpose()?])
    }
}
