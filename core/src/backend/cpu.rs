//! The CPU back end: host memory (the caching allocator of `crate::storage`) and the op table's
//! eager kernels (`Kernel::Compute`'s meta rule and fill, `Kernel::Mutate`'s check and fill).

use tensorplay_ir::{Device, Error, Result};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::plan::LaunchPlan;
use tensorplay_kernel::spec::KernelSpec;

use crate::backend::api::{Backend, check_range};
use crate::ops::{Kernel, OpDef};
use crate::storage::Storage;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// Host memory and eager CPU kernels.
pub(super) struct Cpu;

/// The host address of `storage`, or an error naming `op` for storage without host memory.
fn host_ptr(op: &str, storage: &Storage) -> Result<*mut u8> {
    storage.ptr().ok_or_else(|| {
        Error::device(
            op,
            "the storage has no host memory (a fake, meta or device storage)",
        )
    })
}

fn out_of_memory(op: &str, bytes: usize) -> Error {
    Error::unsupported(
        op,
        format!("out of memory: cannot allocate {bytes} bytes of host memory"),
    )
}

impl Backend for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn alloc(&self, op: &str, _device: Device, bytes: usize) -> Result<Storage> {
        Storage::uninit(bytes).ok_or_else(|| out_of_memory(op, bytes))
    }

    fn alloc_zeroed(&self, op: &str, _device: Device, bytes: usize) -> Result<Storage> {
        Storage::zeroed(bytes).ok_or_else(|| out_of_memory(op, bytes))
    }

    fn write(&self, op: &str, dst: &Storage, offset: usize, src: &[u8]) -> Result<()> {
        check_range(op, dst.nbytes(), offset, src.len())?;
        let base = host_ptr(op, dst)?;
        // SAFETY: `offset..offset + src.len()` lies inside `dst`'s host block (checked above);
        // `src` is a host slice of another allocation, or of this one only when the caller
        // borrowed it from elsewhere, so `copy` (memmove) is sound either way.
        unsafe { std::ptr::copy(src.as_ptr(), base.add(offset), src.len()) };
        Ok(())
    }

    fn read(&self, op: &str, src: &Storage, offset: usize, dst: &mut [u8]) -> Result<()> {
        check_range(op, src.nbytes(), offset, dst.len())?;
        let base = host_ptr(op, src)?;
        // SAFETY: the range lies inside `src`'s host block (checked above); `dst` is a distinct
        // exclusive slice.
        unsafe { std::ptr::copy(base.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
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
        let (d, s) = (host_ptr(op, dst)?, host_ptr(op, src)?);
        // SAFETY: both ranges lie inside their host blocks (checked above); `copy` is a memmove,
        // so overlapping ranges of one storage are fine.
        unsafe { std::ptr::copy(s.add(src_off), d.add(dst_off), bytes) };
        Ok(())
    }

    fn run_builtin(
        &self,
        op: &'static OpDef,
        args: &[Value],
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let a = Args::new(op.name, args);
        match &op.kernel {
            Kernel::Compute { meta, fill } => {
                let outs: Vec<Tensor> = meta(a)?
                    .iter()
                    .map(|s| Tensor::try_empty_with(op.name, &s.shape, s.dtype, device, false))
                    .collect::<Result<_>>()?;
                fill(a, &outs)?;
                Ok(outs)
            }
            Kernel::View(view) => view(a),
            Kernel::Mutate { check, fill } => {
                check(a)?;
                let target = a.tensor(0)?;
                fill(a)?;
                target.storage().bump_version();
                Ok(vec![target.clone()])
            }
        }
    }

    fn launch(&self, _spec: &KernelSpec, _plan: &LaunchPlan, _params: &ScalarArgs) -> Result<()> {
        Err(Error::unsupported(
            "launch",
            "the CPU back end does not generate kernels: CPU kernels are compiled and launched \
             by tensorplay-compiler (codegen::cpu)",
        ))
    }
}
