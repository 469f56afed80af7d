//! The dispatcher: every op call, builtin or custom, enters here and passes the layers in a fixed
//! order — autocast → vmap → autograd → backend, where the backend is the capture hook (a proxy
//! backend recording the call) while one is installed, else the kernel. Each layer is a small
//! function below; the state they consult (autocast region, vmap levels, grad mode, capture hook)
//! is thread-local. Because capture is the bottom, a captured graph holds the casts, batched
//! (physical) ops and per-example calls the layers above produced.

use std::sync::Arc;

use tensorplay_ir::{Device, Error, Result};

use crate::autocast;
use crate::autograd::mode::{is_grad_enabled, no_grad};
use crate::autograd::node::{BackwardFn, record};
use crate::capture;
use crate::library::autograd::{CustomBackward, make_ctx};
use crate::library::bind::bind;
use crate::library::registry::{Operator, Slot};
use crate::ops::{GradCtx, Kernel, OpDef, Saved};
use crate::tensor::Tensor;
use crate::value::{Args, Value};
use crate::vmap;

/// Calls builtin `op` with boxed `args` (already in schema order), returning its outputs.
pub fn call(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    if autocast::any_active()
        && let Some(cast) = autocast::apply_builtin(op, args, common_device(op.name, args)?)?
    {
        let _off = autocast::suspend();
        return vmap_layer(op, &cast);
    }
    vmap_layer(op, args)
}

/// Batched arguments (inside `vmap`) go to their batching rule, which re-dispatches on the
/// physical tensors; everything else continues to autograd.
fn vmap_layer(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    if vmap::any_batched(args) {
        return vmap::dispatch_builtin(op, args);
    }
    autograd_layer(op, args)
}

/// Calls a builtin op with exactly one output.
pub fn call1(op: &'static OpDef, args: &[Value]) -> Result<Tensor> {
    let mut outs = call(op, args)?;
    debug_assert_eq!(outs.len(), 1, "{} returns one tensor", op.name);
    Ok(outs.swap_remove(0))
}

/// Calls a registered operator (builtin or custom) with positional and keyword arguments, which
/// are first bound to its schema (arity, types, defaults).
pub fn call_operator(
    op: &Arc<Operator>,
    args: &[Value],
    kwargs: &[(String, Value)],
) -> Result<Vec<Tensor>> {
    let bound = bind(op.qualname(), op.schema(), args, kwargs)?;
    call_bound(op, &bound)
}

/// Calls a registered operator with arguments already bound to its schema (one value per
/// parameter, in order, keyword-only ones included) — how graphs and tools replay recorded calls.
pub fn call_bound(op: &Arc<Operator>, bound: &[Value]) -> Result<Vec<Tensor>> {
    if bound.len() != op.schema().params.len() {
        return Err(Error::argument(
            op.qualname(),
            "args",
            format!(
                "{} bound arguments (one per parameter)",
                op.schema().params.len()
            ),
            format!("{}", bound.len()),
        ));
    }
    match op.builtin() {
        Some(def) => call(def, bound),
        None => call_custom(op, bound),
    }
}

fn any_requires_grad(args: &[Value]) -> bool {
    args.iter()
        .flat_map(Value::tensors)
        .any(Tensor::requires_grad)
}

fn autograd_layer(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    if !is_grad_enabled() || !any_requires_grad(args) {
        return bottom(op, args);
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
        return bottom(op, args);
    };
    let outs = {
        let _g = no_grad();
        bottom(op, args)?
    };
    let inputs: Vec<&Tensor> = args.iter().flat_map(Value::tensors).collect();
    let saved: Vec<&Tensor> = match op.saved {
        Saved::Nothing => vec![],
        Saved::Inputs => inputs.clone(),
        Saved::Outputs => outs.iter().collect(),
        Saved::All => inputs.iter().copied().chain(outs.iter()).collect(),
    };
    let saved: Vec<Tensor> = saved.into_iter().cloned().collect();
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
        // Saved outputs are detached (keeping them attached would make a reference cycle). When
        // the backward pass is itself recorded (`create_graph`), derivatives that read outputs
        // need them differentiable, so the forward is recomputed from the saved inputs.
        let recomputed;
        let outputs: &[Tensor] = if is_grad_enabled()
            && matches!(self.op.saved, Saved::Outputs | Saved::All)
            && any_requires_grad(&self.args)
        {
            recomputed = call(self.op, &self.args)?;
            &recomputed
        } else {
            &self.outputs
        };
        (self.derivative)(&GradCtx {
            args: Args::new(self.op.name, &self.args),
            outputs,
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
                    format!(
                        "expected all tensors on one device, got {d} and {}",
                        t.device()
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(device.unwrap_or(Device::Cpu))
}

fn any_fake(args: &[Value]) -> bool {
    args.iter().flat_map(Value::tensors).any(Tensor::is_fake)
}

/// The bottom of the builtin chain: the capture hook when one is installed (it records the call
/// and returns fake outputs), else the kernel.
fn bottom(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    if capture::is_installed()
        && let Some(hook) = capture::current()
    {
        return hook.on_builtin(op, args);
    }
    backend(op, args)
}

/// Runs builtin `op`'s kernel (or its meta rule, for fake and meta tensors) on `args`, skipping
/// every layer above the backend — what a capture hook calls to learn output metadata.
pub fn backend(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let device = common_device(op.name, args)?;
    let fake = device == Device::Meta || any_fake(args);
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
            let target = a.tensor(0)?;
            if !fake {
                fill(a)?;
                target.storage().bump_version();
            }
            Ok(vec![target.clone()])
        }
    }
}

// ---- custom operators ----------------------------------------------------------------------

/// The layers for a custom op: autocast by its registered rule, then autograd (its formula, or
/// implicitly through the builtin ops its kernel calls), then kernel selection.
pub(crate) fn call_custom(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    if autocast::any_active() {
        let device = crate::library::backend::call_device(op, args)?;
        let rule = Slot::for_device(device)
            .and_then(|slot| autocast::active_dtype(device).and(op.autocast_dtype(slot)));
        if let Some(dtype) = rule {
            let cast = autocast::cast_args(args, device, dtype)?;
            return custom_vmap_layer(op, &cast);
        }
    }
    custom_vmap_layer(op, args)
}

/// Batched arguments go to the op's `register_vmap` rule (or the per-example fallback).
fn custom_vmap_layer(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    if vmap::any_batched(args) {
        return vmap::dispatch_custom(op, args);
    }
    custom_autograd_layer(op, args)
}

fn custom_autograd_layer(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    let formula = op.autograd_impl();
    let needs_grad = is_grad_enabled() && any_requires_grad(args);
    match formula {
        Some(imp) if needs_grad => {
            let outs = {
                let _g = no_grad();
                custom_bottom(op, args)?
            };
            let ctx = make_ctx(&imp, args, &outs)?;
            let inputs: Vec<&Tensor> = args.iter().flat_map(Value::tensors).collect();
            let saved: Vec<Tensor> = ctx.saved_tensors().to_vec();
            let saved: Vec<&Tensor> = saved.iter().collect();
            let backward = Box::new(CustomBackward {
                op: op.qualname().to_string(),
                schema: op.schema().clone(),
                args: args.to_vec(),
                imp,
                ctx,
            });
            Ok(record(op.qualname(), backward, &inputs, &saved, outs))
        }
        // No formula: the kernel's own builtin ops record the graph (implicit autograd).
        _ => custom_bottom(op, args),
    }
}

/// The bottom of the custom chain: the capture hook when installed, else kernel selection.
fn custom_bottom(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    if capture::is_installed()
        && let Some(hook) = capture::current()
    {
        return hook.on_custom(op, args);
    }
    custom_backend(op, args)
}

/// Picks and runs the kernel for `args` and checks what it did (see `library::backend`). Skips
/// every layer above the backend (a capture hook calls it for opaque nodes).
pub fn custom_backend(op: &Arc<Operator>, args: &[Value]) -> Result<Vec<Tensor>> {
    crate::library::backend::run(op, args)
}
