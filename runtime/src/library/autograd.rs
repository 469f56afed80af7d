//! `register_autograd` for custom ops: a context object that `setup_context` fills and `backward`
//! reads, and the backward node that maps per-parameter gradients onto the op's tensor inputs.

use std::collections::HashMap;
use std::sync::Arc;

use tensorplay_ir::schema::Schema;
use tensorplay_ir::{Error, Result};

use crate::autograd::node::BackwardFn;
use crate::tensor::Tensor;
use crate::value::Value;

/// What `setup_context` saves for `backward`.
#[derive(Default, Clone)]
pub struct AutogradCtx {
    saved: Vec<Tensor>,
    values: HashMap<String, Value>,
    needs_input_grad: Vec<bool>,
}

impl AutogradCtx {
    /// Saves tensors for backward (autograd checks they are not modified in place meanwhile).
    pub fn save_for_backward(&mut self, tensors: &[&Tensor]) {
        self.saved = tensors.iter().map(|t| (*t).clone()).collect();
    }

    /// The tensors saved by [`AutogradCtx::save_for_backward`].
    pub fn saved_tensors(&self) -> &[Tensor] {
        &self.saved
    }

    /// Saves a non-tensor value under `key`.
    pub fn save_value(&mut self, key: &str, value: impl Into<Value>) {
        self.values.insert(key.to_string(), value.into());
    }

    /// A value saved with [`AutogradCtx::save_value`], or a lookup error naming the key.
    pub fn value(&self, key: &str) -> Result<&Value> {
        self.values
            .get(key)
            .ok_or_else(|| Error::Lookup(format!("autograd context has no saved value `{key}`")))
    }

    /// For each parameter of the op: whether its gradient is needed (a tensor that requires grad).
    pub fn needs_input_grad(&self) -> &[bool] {
        &self.needs_input_grad
    }
}

/// `setup_context(ctx, inputs, outputs)`: `inputs` are the bound arguments, one per parameter.
pub type SetupContextFn =
    Arc<dyn Fn(&mut AutogradCtx, &[Value], &[Tensor]) -> Result<()> + Send + Sync>;
/// A boxed `setup_context`, as the registration functions take it.
pub type SetupContextBox =
    Box<dyn Fn(&mut AutogradCtx, &[Value], &[Tensor]) -> Result<()> + Send + Sync>;
/// `backward(ctx, grads)`: one gradient per output in, one optional gradient per parameter out.
pub type BackwardUserFn =
    Arc<dyn Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// A registered autograd formula.
pub struct AutogradImpl {
    pub(crate) backward: BackwardUserFn,
    pub(crate) setup_context: Option<SetupContextFn>,
}

/// The node recorded for one call of a custom op with a formula.
pub(crate) struct CustomBackward {
    pub(crate) op: String,
    pub(crate) schema: Schema,
    pub(crate) args: Vec<Value>,
    pub(crate) imp: Arc<AutogradImpl>,
    pub(crate) ctx: AutogradCtx,
}

/// Builds the context for a call (needs_input_grad from the arguments), running `setup_context`.
pub(crate) fn make_ctx(
    imp: &AutogradImpl,
    args: &[Value],
    outputs: &[Tensor],
) -> Result<AutogradCtx> {
    let mut ctx = AutogradCtx {
        needs_input_grad: args
            .iter()
            .map(|v| v.tensors().any(Tensor::requires_grad))
            .collect(),
        ..AutogradCtx::default()
    };
    if let Some(setup) = &imp.setup_context {
        setup(&mut ctx, args, outputs)?;
    }
    Ok(ctx)
}

impl BackwardFn for CustomBackward {
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let per_param = (self.imp.backward)(&self.ctx, grads)?;
        let params = &self.schema.params;
        if per_param.len() != params.len() {
            return Err(Error::Autograd(format!(
                "backward of `{}` returned {} gradients, expected {} (one per input: {})",
                self.op,
                per_param.len(),
                params.len(),
                params
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut flat = Vec::new();
        for ((param, grad), arg) in params.iter().zip(per_param).zip(&self.args) {
            let n = arg.tensors().count();
            if !param.ty.is_tensor_like() {
                if grad.is_some() {
                    return Err(Error::Autograd(format!(
                        "backward of `{}` returned a gradient for `{}`, which is not a tensor (return None)",
                        self.op, param.name
                    )));
                }
                continue;
            }
            if param.ty.is_tensor_list() {
                if grad.is_some() {
                    return Err(Error::Autograd(format!(
                        "backward of `{}`: gradients for the tensor-list input `{}` are not supported; return None",
                        self.op, param.name
                    )));
                }
                flat.extend(std::iter::repeat_n(None, n));
                continue;
            }
            if n == 1 {
                flat.push(grad);
            } else if grad.is_some() {
                return Err(Error::Autograd(format!(
                    "backward of `{}` returned a gradient for `{}`, which was None",
                    self.op, param.name
                )));
            }
        }
        Ok(flat)
    }
}
