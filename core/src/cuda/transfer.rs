//! Tensors on devices: allocation, copies between the host and devices (through the devices'
//! back ends, `crate::backend`), device addresses.

use tensorplay_ir::shape::contiguous_strides;
use tensorplay_ir::{DType, Device, Error, Result};

use crate::backend::for_device;
use crate::tensor::{Tensor, TensorImpl, checked_nbytes};

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
                let storage = for_device(device)?.alloc_zeroed("zeros_on", device, bytes)?;
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
        let backend = for_device(device)?;
        let storage = backend.alloc(OP, device, bytes)?;
        if bytes > 0 {
            let host = src.data_ptr(OP)?;
            // SAFETY: `src` is contiguous, so its `bytes` bytes from `host` are its elements,
            // initialised and alive for this call.
            let host = unsafe { std::slice::from_raw_parts(host.cast_const(), bytes) };
            backend.write(OP, &storage, 0, host)?;
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
        // SAFETY: `read` below writes all of it before anything reads it.
        let host = unsafe { Tensor::try_empty_uninit(&[elems], self.dtype()) }?;
        let dst = host.data_ptr(OP)?;
        // SAFETY: `host` is a fresh contiguous tensor of `elems` elements of `size` bytes, which
        // nothing else references yet.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, elems * size) };
        // Views only address elements inside their storage: bytes `lo * size .. (hi + 1) * size`
        // lie in it (and `read` checks).
        for_device(device)?.read(OP, self.storage(), lo * size, dst)?;
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
        if self.storage().device_buffer().is_none() {
            return Err(Error::device(
                OP,
                format!("tensor {} is not a CUDA tensor with data", self.meta()),
            ));
        }
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
        let backend = for_device(device)?;
        let storage = backend.alloc(OP, device, bytes)?;
        if bytes > 0 {
            let offset = self.storage_offset() * self.dtype().size();
            backend.copy(OP, (&storage, 0), (self.storage(), offset), bytes)?;
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
    let storage = for_device(device)?.alloc("empty", device, bytes)?;
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
