//! `register_autograd` for custom ops: a context object that `setup_context` fills and `backward`
//! reads, and the backward node that maps per-parameter gradients onto the op's tensor inputs.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use tensorplay_ir::schema::Schema;
use tensorplay_ir::{Error, Result};

use tensorplay_core::autograd::node::BackwardFn;
use tensorplay_core::dispatch::{CustomAutograd, CustomOperator};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// What `setup_context` saves for `backward`: tensors (checked against in-place modification),
/// named values and a typed state, and which inputs need a gradient.
///
/// ```
/// use tensorplay_runtime::library::{self, AutogradCtx};
/// use tensorplay_runtime::{Error, Result, Tensor, Value};
/// let pow = library::custom_op("docs_ctx::pow")
///     .arg_names(&["x", "n"])
///     .build(|x: &Tensor, n: f64| -> Result<Tensor> { x.pow_scalar(n) })?;
/// pow.register_autograd(
///     |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
///         let (x, n) = (&ctx.saved_tensors()[0], ctx.value("n")?.clone());
///         let Value::Float(n) = n else { return Err(Error::unsupported("pow", "n")) };
///         let g = grads[0].as_ref().expect("one output");
///         // d(x^n) = n x^(n-1); no gradient for the number n.
///         let gx = ctx.needs_input_grad()[0]
///             .then(|| g.mul(&x.pow_scalar(n - 1.0)?.mul_scalar(n)?))
///             .transpose()?;
///         Ok(vec![gx, None])
///     },
///     Some(Box::new(
///         |ctx: &mut AutogradCtx, inputs: &[Value], _outputs: &[Tensor]| -> Result<()> {
///             let (Value::Tensor(x), n) = (&inputs[0], &inputs[1]) else {
///                 return Err(Error::unsupported("pow's setup_context", "expected (x, n)"));
///             };
///             ctx.save_for_backward(&[x]);
///             ctx.save_value("n", n.clone());
///             Ok(())
///         },
///     )),
/// )?;
/// let x = Tensor::from_vec(vec![2.0f32], &[1])?.requires_grad_(true)?;
/// pow.call((&x, 3.0))?.sum_all()?.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![12.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Default, Clone)]
pub struct AutogradCtx {
    saved: Vec<Tensor>,
    values: HashMap<String, Value>,
    needs_input_grad: Vec<bool>,
    /// The state a typed `setup` returned (see `register_autograd_typed`).
    typed: Option<Arc<dyn Any + Send + Sync>>,
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

    /// Keeps an arbitrary state object for `backward` (what a typed `setup` returned, or a
    /// language binding's own context object); it replaces any state set before.
    pub fn set_typed(&mut self, state: Arc<dyn Any + Send + Sync>) {
        self.typed = Some(state);
    }

    /// The state kept by [`AutogradCtx::set_typed`].
    pub fn typed(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.typed.as_deref()
    }
}

/// `setup_context(ctx, inputs, outputs)`: `inputs` are the bound arguments, one per parameter.
pub type SetupContextFn =
    Arc<dyn Fn(&mut AutogradCtx, &[Value], &[Tensor]) -> Result<()> + Send + Sync>;
/// A boxed `setup_context`, as the registration functions take it.
pub type SetupContextBox =
    Box<dyn Fn(&mut AutogradCtx, &[Value], &[Tensor]) -> Result<()> + Send + Sync>;
/// `backward(ctx, grads)`: one gradient per output in, gradients for the inputs out.
pub type BackwardUserFn =
    Arc<dyn Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<Vec<Grad>> + Send + Sync>;

/// The gradient `backward` returns for one input: none, a tensor, or one per element of a
/// `Tensor[]` input.
#[derive(Clone, Debug, Default)]
pub enum Grad {
    #[default]
    None,
    Tensor(Tensor),
    List(Vec<Option<Tensor>>),
}

impl From<Option<Tensor>> for Grad {
    fn from(t: Option<Tensor>) -> Grad {
        t.map_or(Grad::None, Grad::Tensor)
    }
}

impl From<Tensor> for Grad {
    fn from(t: Tensor) -> Grad {
        Grad::Tensor(t)
    }
}

impl From<Vec<Option<Tensor>>> for Grad {
    fn from(ts: Vec<Option<Tensor>>) -> Grad {
        Grad::List(ts)
    }
}

/// What `backward` may return: one gradient per schema parameter, or one per tensor input
/// actually passed (PyTorch accepts both).
pub trait IntoGrads {
    fn into_grads(self) -> Vec<Grad>;
}

impl IntoGrads for Vec<Option<Tensor>> {
    fn into_grads(self) -> Vec<Grad> {
        self.into_iter().map(Grad::from).collect()
    }
}

impl IntoGrads for Vec<Grad> {
    fn into_grads(self) -> Vec<Grad> {
        self
    }
}

/// A tuple of gradients, one per parameter (or per tensor input passed): each element a
/// `Tensor`, an `Option<Tensor>`, a `Vec<Option<Tensor>>` (for a `Tensor[]` input) or a [`Grad`].
macro_rules! grads_tuple {
    ($($G:ident $i:tt),+) => {
        impl<$($G: Into<Grad>),+> IntoGrads for ($($G,)+) {
            fn into_grads(self) -> Vec<Grad> {
                vec![$(self.$i.into()),+]
            }
        }
    };
}

grads_tuple!(A 0);
grads_tuple!(A 0, B 1);
grads_tuple!(A 0, B 1, C 2);
grads_tuple!(A 0, B 1, C 2, D 3);
grads_tuple!(A 0, B 1, C 2, D 3, E 4);
grads_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);

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

/// The autograd layer records a formula's call: `setup_context` runs on the call, and the node
/// keeps the context for `backward`.
impl CustomAutograd for AutogradImpl {
    fn record(
        self: Arc<Self>,
        op: &dyn CustomOperator,
        args: &[Value],
        outputs: &[Tensor],
    ) -> Result<(Box<dyn BackwardFn>, Vec<Tensor>)> {
        let ctx = make_ctx(&self, args, outputs)?;
        let saved = ctx.saved_tensors().to_vec();
        let node = CustomBackward {
            op: op.qualname().to_string(),
            schema: op.schema().clone(),
            args: args.to_vec(),
            imp: self,
            ctx,
        };
        Ok((Box::new(node), saved))
    }
}

impl CustomBackward {
    /// The parameters `grads` answers for: every parameter when there is one gradient each,
    /// else the tensor parameters that were passed a value.
    fn targets(&self, n: usize) -> Result<Vec<usize>> {
        let params = &self.schema.params;
        if n == params.len() {
            return Ok((0..n).collect());
        }
        let passed: Vec<usize> = params
            .iter()
            .zip(&self.args)
            .enumerate()
            .filter(|(_, (p, a))| p.ty.is_tensor_like() && !matches!(a, Value::None))
            .map(|(i, _)| i)
            .collect();
        if n == passed.len() {
            return Ok(passed);
        }
        Err(Error::Autograd(format!(
            "backward of `{}` returned {n} gradients, expected {} (one per parameter: {}) or {} \
             (one per tensor input passed: {})",
            self.op,
            params.len(),
            params
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            passed.len(),
            passed
                .iter()
                .map(|&i| params[i].name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

impl BackwardFn for CustomBackward {
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        let returned = (self.imp.backward)(&self.ctx, grads)?;
        let targets = self.targets(returned.len())?;
        let mut per_param = vec![Grad::None; self.schema.params.len()];
        for (i, g) in targets.into_iter().zip(returned) {
            per_param[i] = g;
        }
        let mut flat = Vec::new();
        for ((param, grad), arg) in self.schema.params.iter().zip(per_param).zip(&self.args) {
            let n = arg.tensors().count();
            let bad = |why: &str| {
                Err(Error::Autograd(format!(
                    "backward of `{}` returned a gradient for `{}`, {why}",
                    self.op, param.name
                )))
            };
            match grad {
                Grad::None => flat.extend(std::iter::repeat_n(None, n)),
                _ if !param.ty.is_tensor_like() => {
                    return bad("which is not a tensor (return None)");
                }
                // `Tensor?[]`: one entry per list element; absent elements take none.
                Grad::List(gs) if let Value::OptionalTensorList(ts) = arg => {
                    if gs.len() != ts.len() {
                        return bad(&format!(
                            "a list of {} entries, but the list input had {} entries",
                            gs.len(),
                            ts.len()
                        ));
                    }
                    flat.extend(
                        gs.into_iter()
                            .zip(ts)
                            .filter(|(_, t)| t.is_some())
                            .map(|(g, _)| g),
                    );
                }
                Grad::List(gs) if param.ty.is_tensor_list() => {
                    if gs.len() != n {
                        return bad(&format!(
                            "a list of {} entries, but the list input had {n} tensors",
                            gs.len()
                        ));
                    }
                    flat.extend(gs);
                }
                Grad::List(_) => return bad("a list, but the input is a single tensor"),
                Grad::Tensor(_) if param.ty.is_tensor_list() => {
                    return bad(
                        "a single tensor, but the input is a Tensor[] (return a list: Grad::List)",
                    );
                }
                Grad::Tensor(_) if n == 0 => return bad("which was None"),
                Grad::Tensor(t) => flat.push(Some(t)),
            }
        }
        Ok(flat)
    }
}
