//! The backend layer, the bottom of the stack: the capture hook while one is installed (see
//! `capture`), else the kernel the op handle selects. Also the builtin kernel runner.

use tensorplay_ir::{Device, Result};

use super::capture;
use super::op::OpHandle;
use super::stack::{Backend, Layer, Next};
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

/// Runs builtin `op`'s kernel (or its meta rule, for fake and meta tensors) on `args`.
pub(super) fn run_builtin(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let device = super::common_device(op.name, args)?;
    let fake = device == Device::Meta || any_fake(args);
    // Views only re-describe memory, so they work on every device; computing ops have CPU
    // kernels, and on CUDA tensors the kernels the compiler generates (`cuda::eager`).
    let on_cuda = !fake && matches!(device, Device::Cuda(_));
    if on_cuda && let Kernel::Compute { .. } = op.kernel {
        return crate::cuda::eager::run(op, args, device);
    }
    let a = Args::new(op.name, args);
    match &op.kernel {
        Kernel::Compute { meta, fill } => {
            let specs = meta(a)?;
            let outs: Vec<Tensor> = specs
                .iter()
                .map(|s| Tensor::try_empty_with(op.name, &s.shape, s.dtype, device, fake))
                .collect::<Result<_>>()?;
            if !fake {
                fill(a, &outs)?;
            }
            Ok(outs)
        }
        Kernel::View(view) => view(a),
        Kernel::Mutate { check, fill } => {
            check(a)?;
            if on_cuda {
                return crate::cuda::eager::run(op, args, device);
            }
            let target = a.tensor(0)?;
            if !fake {
                fill(a)?;
                target.storage().bump_version();
            }
            Ok(vec![target.clone()])
        }
    }
}
