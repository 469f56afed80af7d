//! The dispatcher: every op call, builtin or custom, enters here and passes the layers in a fixed
//! order — capture → autocast → vmap → autograd → backend. This module holds the autograd and
//! backend layers for builtin ops; the other layers are added by the modules that own them.

use tensorplay_ir::{Device, Error, Result};

use crate::autograd::mode::{is_grad_enabled, no_grad};
use crate::autograd::node::{BackwardFn, record};
use crate::ops::{GradCtx, Kernel, OpDef, Saved};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// Calls builtin `op` with boxed `args`, returning its outputs.
pub fn call(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    autograd_layer(op, args)
}

/// Calls a builtin op with exactly one output.
pub fn call1(op: &'static OpDef, args: &[Value]) -> Result<Tensor> {
    let mut outs = call(op, args)?;
    debug_assert_eq!(outs.len(), 1, "{} returns one tensor", op.name);
    Ok(outs.swap_remove(0))
}

fn any_requires_grad(args: &[Value]) -> bool {
    args.iter().flat_map(Value::tensors).any(Tensor::requires_grad)
}

fn autograd_layer(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    if !is_grad_enabled() || !any_requires_grad(args) {
        return backend(op, args);
    }
    if matches!(op.kernel, Kernel::Mutate { .. }) {
        return Err(Error::Autograd(format!(
            "{}: in-place operation on a tensor that requires grad (or with an operand that \
             requires grad) is not supported while grad mode is on; use the out-of-place op or \
             wrap the update in no_grad()",
            op.name
        )));
    }
    let Some(derivative) = op.derivative else {
        return backend(op, args);
    };
    let outs = {
        let _g = no_grad();
        backend(op, args)?
    };
    let inputs: Vec<&Tensor> = args.iter().flat_map(Value::tensors).collect();
    let saved: Vec<Tensor> = match op.saved {
        Saved::Nothing => vec![],
        Saved::Inputs => inputs.iter().map(|t| (*t).clone()).collect(),
        Saved::Outputs => outs.clone(),
        Saved::All => inputs.iter().map(|t| (*t).clone()).chain(outs.iter().cloned()).collect(),
    };
    let saved: Vec<&Tensor> = saved.iter().collect();
    let backward = Box::new(BuiltinBackward {
        op,
        derivative,
        args: args.to_vec(),
        outputs: outs.iter().map(Tensor::detach).collect(),
    });
    Ok(record(op.name, backward, &inputs, &saved, outs))
}

/// The saved state of one builtin op call.
struct BuiltinBackward {
    op: &'static OpDef,
    derivative: crate::ops::DerivativeFn,
    args: Vec<Value>,
    outputs: Vec<Tensor>,
}

impl BackwardFn for BuiltinBackward {
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        (self.derivative)(&GradCtx {
            args: Args::new(self.op.name, &self.args),
            outputs: &self.outputs,
            grads,
        })
    }
}

/// The device all tensor arguments share (0-d wrapped scalars adapt to any device).
pub(crate) fn common_device(op: &str, args: &[Value]) -> Result<Device> {
    let mut device: Option<Device> = None;
    for t in args.iter().flat_map(Value::tensors) {
        if t.is_wrapped_number() {
            continue;
        }
        match device {
            None => device = Some(t.device()),
            Some(d) if d != t.device() => {
                return Err(Error::device(
                    op,
                    format!("expected all tensors on one device, got {d} and {}", t.device()),
                ));
            }
            _ => {}
        }
    }
    Ok(device.unwrap_or(Device::Cpu))
}

fn backend(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let device = common_device(op.name, args)?;
    let fake = device == Device::Meta || args.iter().flat_map(Value::tensors).any(Tensor::is_fake);
    if !fake && device != Device::Cpu {
        return Err(Error::device(
            op.name,
            format!("no kernel for device {device} in this build (built-in ops run on cpu)"),
        ));
    }
    let a = Args::new(op.name, args);
    match &op.kernel {
        Kernel::Compute { meta, fill } => {
            let specs = meta(a)?;
            let outs: Vec<Tensor> = specs
                .iter()
                .map(|s| Tensor::empty_with(&s.shape, s.dtype, device, fake))
                .collect();
            if !fake {
                fill(a, &outs)?;
            }
            Ok(outs)
        }
        Kernel::View(view) => view(a),
        Kernel::Mutate { check, fill } => {
            check(a)?;
            let target = a.tensor(0)?;
            if !fake {
                fill(a)?;
                target.storage().bump_version();
            }
            Ok(vec![target.clone()])
        }
    }
}
