//! The backend layer, the bottom of the stack: the capture hook while one is installed (see
//! `capture`), else the kernel the op handle selects. Also the builtin kernel runner, which hands
//! real tensors to their device's back end (`crate::backend`).

use tensorplay_ir::{Device, Result};

use super::capture;
use super::op::OpHandle;
use super::stack::{Backend, Layer, Next};
use crate::backend;
use crate::ops::{Kernel, OpDef};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

impl Layer for Backend {
    fn name(&self) -> &'static str {
        "backend"
    }

    fn call(&self, op: OpHandle<'_>, args: &[Value], _next: Next) -> Result<Vec<Tensor>> {
        if let Some(recorded) = capture::try_record(op, args) {
            return recorded;
        }
        op.run_kernel(args)
    }
}

fn any_fake(args: &[Value]) -> bool {
    args.iter().flat_map(Value::tensors).any(Tensor::is_fake)
}

/// Runs builtin `op`'s kernel (or its meta rule, for fake and meta tensors) on `args`: views on
/// any device (they only re-describe memory), computing and in-place ops by the device's back
/// end (`crate::backend`).
pub(super) fn run_builtin(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let device = super::common_device(op.name, args)?;
    let a = Args::new(op.name, args);
    if let Kernel::View(view) = &op.kernel {
        return view(a);
    }
    if device == Device::Meta || any_fake(args) {
        return run_meta(op, a, device);
    }
    backend::for_device(device)?.run_builtin(op, args, device)
}

/// Fake and meta tensors: the meta rule shapes fake outputs; an in-place op's check runs and
/// its target is returned unwritten.
fn run_meta(op: &'static OpDef, a: Args<'_>, device: Device) -> Result<Vec<Tensor>> {
    match &op.kernel {
        Kernel::Compute { meta, .. } => meta(a)?
            .iter()
            .map(|s| Tensor::try_empty_with(op.name, &s.shape, s.dtype, device, true))
            .collect(),
        Kernel::View(view) => view(a),
        Kernel::Mutate { check, .. } => {
            check(a)?;
            Ok(vec![a.tensor(0)?.clone()])
        }
    }
}
