//! The [`Backend`] trait: what every device back end provides (memory, copies, built-in ops,
//! its own generated kernels).

use tensorplay_ir::Device;
use tensorplay_ir::{Error, Result};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::plan::LaunchPlan;
use tensorplay_kernel::spec::KernelSpec;

use crate::ops::OpDef;
use crate::storage::Storage;
use crate::tensor::Tensor;
use crate::value::Value;

/// One device kind's memory and kernels. Every method checks its arguments (sizes, offsets,
/// devices) and reports errors naming `op`; none hands out memory it does not own.
pub trait Backend: Sync {
    /// The device type served (`"cpu"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// Memory for `bytes` bytes on `device`, whose contents are undefined until written.
    fn alloc(&self, op: &str, device: Device, bytes: usize) -> Result<Storage>;

    /// Zero-filled memory for `bytes` bytes on `device`.
    fn alloc_zeroed(&self, op: &str, device: Device, bytes: usize) -> Result<Storage>;

    /// Copies the host bytes `src` into `dst` from byte `offset` on.
    fn write(&self, op: &str, dst: &Storage, offset: usize, src: &[u8]) -> Result<()>;

    /// Copies `dst.len()` bytes of `src`, from byte `offset` on, into host memory `dst` (after
    /// the device's queued work).
    fn read(&self, op: &str, src: &Storage, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `bytes` bytes from `src` (at byte offset `src.1`) to `dst` (at `dst.1`), both
    /// memory of this back end on one device.
    fn copy(
        &self,
        op: &str,
        dst: (&Storage, usize),
        src: (&Storage, usize),
        bytes: usize,
    ) -> Result<()>;

    /// Runs built-in `op` (a computing or in-place kernel) on `args`, whose tensors are on
    /// `device` (0-d CPU scalars aside): its fresh outputs, or the in-place op's target.
    fn run_builtin(
        &self,
        op: &'static OpDef,
        args: &[Value],
        device: Device,
    ) -> Result<Vec<Tensor>>;

    /// Launches `spec` over `plan` (made for this back end's device) with scalar arguments
    /// `params`, for back ends that generate their kernels themselves; the CPU back end's
    /// kernels are compiled and launched by `tensorplay-compiler`, so it refuses.
    fn launch(&self, spec: &KernelSpec, plan: &LaunchPlan, params: &ScalarArgs) -> Result<()>;
}

/// `[offset, offset + len)` inside a storage of `nbytes` bytes, or an error naming `op`.
pub(super) fn check_range(op: &str, nbytes: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= nbytes => Ok(()),
        _ => Err(Error::argument(
            op,
            "offset",
            format!("a byte range inside the storage's {nbytes} bytes"),
            format!("{len} bytes at offset {offset}"),
        )),
    }
}
