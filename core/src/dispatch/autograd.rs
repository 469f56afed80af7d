//! The autograd layer: when grad mode is on and an input requires grad, runs the rest of the
//! stack under `no_grad` and records a backward node from the op handle's backward rule (a
//! builtin's derivative, a custom op's registered formula). An op without a rule passes through,
//! so a custom op's kernel records the graph through the builtin ops it calls. The graph and the
//! engine live in `crate::autograd`.

use tensorplay_ir::Result;

use super::op::{BackwardRule, OpHandle};
use super::stack::{Autograd, Layer, Next};
use crate::autograd::mode::{is_grad_enabled, no_grad};
use crate::autograd::node::{BackwardFn, record};
use crate::ops::{GradCtx, OpDef, Saved};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

pub(super) fn any_requires_grad(args: &[Value]) -> bool {
    args.iter()
        .flat_map(Value::tensors)
        .any(Tensor::requires_grad)
}

impl Layer for Autograd {
    fn name(&self) -> &'static str {
        "autograd"
    }

    fn call(&self, op: OpHandle<'_>, args: &[Value], next: Next) -> Result<Vec<Tensor>> {
        if !is_grad_enabled() || !any_requires_grad(args) {
            return next.call(op, args);
        }
        if let Some(e) = op.grad_error() {
            return Err(e);
        }
        let Some(rule) = op.backward_rule() else {
            return next.call(op, args);
        };
        let outs = {
            let _g = no_grad();
            next.call(op, args)?
        };
        let inputs: Vec<&Tensor> = args.iter().flat_map(Value::tensors).collect();
        match rule {
            BackwardRule::Derivative(def, derivative) => {
                let saved: Vec<Tensor> = match def.saved {
                    Saved::Nothing => vec![],
                    Saved::Inputs => inputs.iter().copied().cloned().collect(),
                    Saved::Outputs => outs.clone(),
                    Saved::All | Saved::AllAsData => {
                        inputs.iter().copied().chain(&outs).cloned().collect()
                    }
                };
                let saved: Vec<&Tensor> = saved.iter().collect();
                let backward = Box::new(BuiltinBackward {
                    op: def,
                    derivative,
                    args: args.to_vec(),
                    outputs: outs.iter().map(Tensor::detach).collect(),
                });
                Ok(record(def.name, backward, &inputs, &saved, outs))
            }
            BackwardRule::Formula(custom, imp) => {
                let (backward, saved) = imp.record(&**custom, args, &outs)?;
                let saved: Vec<&Tensor> = saved.iter().collect();
                Ok(record(custom.qualname(), backward, &inputs, &saved, outs))
            }
        }
    }
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
            recomputed = super::stack::call(self.op, &self.args)?;
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
