//! The CUDA back end: device memory (`tensorplay-cuda`'s caching allocator and copies) and eager
//! built-in ops on CUDA tensors — elementwise, reduction, softmax, cast and copy ops as kernels
//! generated from the op table's lowering (`generated.rs`, through `tensorplay-cuda`'s code
//! generator), matrix products through cuBLAS (`ops::linalg::matmul_cuda`). Other computing ops
//! have no CUDA kernel and say so.

mod generated;
mod matmul;
mod memory;

use tensorplay_ir::{Device, Error, Result};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::plan::LaunchPlan;
use tensorplay_kernel::spec::KernelSpec;

use self::generated::no_kernel;
use self::memory::{block, buffer_device, fail};
use super::api::{Backend, check_range};
use crate::autocast;
use crate::autograd::no_grad;
use crate::ops::{Kernel, Lower, OpDef, linalg};
use crate::storage::Storage;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// CUDA devices' memory and kernels.
pub(super) struct Cuda;

impl Backend for Cuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn alloc(&self, op: &str, device: Device, bytes: usize) -> Result<Storage> {
        memory::alloc(op, device, bytes, false)
    }

    fn alloc_zeroed(&self, op: &str, device: Device, bytes: usize) -> Result<Storage> {
        memory::alloc(op, device, bytes, true)
    }

    fn write(&self, op: &str, dst: &Storage, offset: usize, src: &[u8]) -> Result<()> {
        check_range(op, dst.nbytes(), offset, src.len())?;
        let buf = block(op, dst)?;
        // SAFETY: the range lies inside the storage's device block (checked above); a host
        // slice never overlaps device memory.
        unsafe { buf.device().copy_to_device(buf.ptr() + offset as u64, src) }
            .map_err(|e| fail(op, buffer_device(buf), e))
    }

    fn read(&self, op: &str, src: &Storage, offset: usize, dst: &mut [u8]) -> Result<()> {
        check_range(op, src.nbytes(), offset, dst.len())?;
        let buf = block(op, src)?;
        // SAFETY: as in `write`, in the other direction.
        unsafe { buf.device().copy_to_host(dst, buf.ptr() + offset as u64) }
            .map_err(|e| fail(op, buffer_device(buf), e))
    }

    fn copy(
        &self,
        op: &str,
        (dst, dst_off): (&Storage, usize),
        (src, src_off): (&Storage, usize),
        bytes: usize,
    ) -> Result<()> {
        check_range(op, dst.nbytes(), dst_off, bytes)?;
        check_range(op, src.nbytes(), src_off, bytes)?;
        let (d, s) = (block(op, dst)?, block(op, src)?);
        if d.device().index != s.device().index {
            return Err(Error::device(
                op,
                format!(
                    "a copy from {} to {} is not a copy within one device",
                    buffer_device(s),
                    buffer_device(d)
                ),
            ));
        }
        if dst.same(src) && dst_off < src_off + bytes && src_off < dst_off + bytes {
            return Err(Error::argument(
                op,
                "offset",
                "disjoint source and destination ranges",
                format!("{bytes} bytes from offset {src_off} to offset {dst_off} of one storage"),
            ));
        }
        // SAFETY: both ranges lie inside their blocks on one device (checked above) and are
        // disjoint (different storages are different blocks).
        unsafe {
            d.device()
                .copy_on_device(d.ptr() + dst_off as u64, s.ptr() + src_off as u64, bytes)
        }
        .map_err(|e| fail(op, buffer_device(d), e))
    }

    fn run_builtin(
        &self,
        op: &'static OpDef,
        args: &[Value],
        device: Device,
    ) -> Result<Vec<Tensor>> {
        // The layers above did their part for this call (autocast's casts, autograd's node); the
        // views and copies made here are this kernel's own work.
        let _grad = no_grad();
        let _autocast = autocast::suspend();
        match &op.kernel {
            Kernel::Compute { .. } if std::ptr::eq(op, &linalg::MATMUL) => {
                // Matrix products are cuBLAS's (or its emulation's), not generated kernels.
                matmul::matmul(args, device)
            }
            Kernel::Compute { .. } if matches!(op.lower, Lower::None) => Err(no_kernel(
                op,
                device,
                "only elementwise, reduction, softmax, cast and copy ops have generated CUDA \
                 kernels",
            )),
            Kernel::Compute { .. } => generated::compute(op, args, device),
            Kernel::Mutate { check, .. } => {
                check(Args::new(op.name, args))?;
                generated::in_place(op, args, device)
            }
            Kernel::View(view) => view(Args::new(op.name, args)),
        }
    }

    fn launch(&self, spec: &KernelSpec, plan: &LaunchPlan, params: &ScalarArgs) -> Result<()> {
        tensorplay_cuda::codegen::launch::launch(spec, plan, params, plan.device())
    }
}
