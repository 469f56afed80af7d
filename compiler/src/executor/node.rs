//! Op nodes run through the dispatcher: a node's call ([`NodeCall`], its arguments resolved
//! per call), and the check that its outputs are what shape inference said.

use std::sync::Arc;
use tensorplay_ir::CompileKind;

use tensorplay_ir::graph::{Arg, Attr, OpCall};
use tensorplay_ir::{Error, Graph, NodeId, Result, Shape, ValueRef};
use tensorplay_runtime::dispatch;
use tensorplay_runtime::library::{Operator, registry};
use tensorplay_runtime::{Tensor, Value};

use super::CompiledGraph;
use crate::grad_plan::NodeGrad;

/// Where an op argument comes from at run time.
#[derive(Clone)]
pub(super) enum ArgSrc {
    Tensor(usize),
    OptTensor(Option<usize>),
    List(Vec<usize>),
    Value(Value),
    /// A size expression over the input dims, evaluated per call.
    Sym(Attr),
}

/// One op node, ready to call through the dispatcher.
pub(super) struct NodeCall {
    pub(super) node: NodeId,
    pub(super) op: Arc<Operator>,
    pub(super) args: Vec<ArgSrc>,
    pub(super) outs: Vec<usize>,
}

impl CompiledGraph {
    pub(super) fn node_call(
        graph: &Graph,
        n: NodeId,
        call: &OpCall,
        id: &dyn Fn(ValueRef) -> Result<usize>,
    ) -> Result<NodeCall> {
        let op = registry().get(&call.name).map_err(|e| {
            Error::compile(
                CompileKind::Launch,
                format!(
                    "{}: {e} (was it registered before the graph was compiled?)",
                    graph.describe(n)
                ),
            )
        })?;
        let producers = graph.args_of(n)?;
        let mut next = producers.into_iter();
        let mut take = || -> Result<usize> {
            let v = next.next().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("{}: missing tensor argument", graph.describe(n)),
                )
            })?;
            id(v)
        };
        let mut args = Vec::with_capacity(call.args.len());
        for a in &call.args {
            args.push(match a {
                Arg::Tensor => ArgSrc::Tensor(take()?),
                Arg::OptionalTensor { present: true } => ArgSrc::OptTensor(Some(take()?)),
                Arg::OptionalTensor { present: false } => ArgSrc::OptTensor(None),
                Arg::TensorList { len } => {
                    ArgSrc::List((0..*len).map(|_| take()).collect::<Result<_>>()?)
                }
                Arg::Attr {
                    value: value @ (Attr::SymInt(_) | Attr::SymIntList(_)),
                    ..
                } => ArgSrc::Sym(value.clone()),
                Arg::Attr { value, .. } => ArgSrc::Value(Value::from_attr(value)),
            });
        }
        let node = graph
            .node(n)
            .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
        let outs = (0..node.outputs.len())
            .map(|i| id(ValueRef::new(n, i)))
            .collect::<Result<_>>()?;
        Ok(NodeCall {
            node: n,
            op,
            args,
            outs,
        })
    }

    pub(super) fn args_of(
        call: &NodeCall,
        env: &[Option<Tensor>],
        syms: &[i64],
    ) -> Result<Vec<Value>> {
        let get = |i: usize| -> Result<Tensor> {
            env[i].clone().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("value {i} used before it was computed"),
                )
            })
        };
        call.args
            .iter()
            .map(|a| {
                Ok(match a {
                    ArgSrc::Tensor(i) => Value::Tensor(get(*i)?),
                    ArgSrc::OptTensor(Some(i)) => Value::OptionalTensor(Some(get(*i)?)),
                    ArgSrc::OptTensor(None) => Value::None,
                    ArgSrc::List(v) => {
                        Value::TensorList(v.iter().map(|&i| get(i)).collect::<Result<_>>()?)
                    }
                    ArgSrc::Value(v) => v.clone(),
                    ArgSrc::Sym(a) => {
                        let resolved = a.resolve(&|k| syms.get(k as usize).copied());
                        match resolved {
                            Some(r) => Value::from_attr(&r),
                            None => {
                                return Err(Error::compile(
                                    CompileKind::Launch,
                                    format!(
                                        "`{}`: size {a} cannot be evaluated for input sizes \
                                         {syms:?}",
                                        call.op.qualname()
                                    ),
                                ));
                            }
                        }
                    }
                })
            })
            .collect()
    }

    pub(super) fn call_node(
        call: &NodeCall,
        env: &mut [Option<Tensor>],
        syms: &[i64],
    ) -> Result<()> {
        Self::call_node_with(call, env, syms, None)
    }

    /// [`Self::call_node`] with what autograd did at the node during capture (its arguments read
    /// through detached handles are detached, and a call that recorded nothing runs under
    /// `no_grad`; see `crate::grad_plan`).
    pub(super) fn call_node_with(
        call: &NodeCall,
        env: &mut [Option<Tensor>],
        syms: &[i64],
        grad: Option<&NodeGrad>,
    ) -> Result<()> {
        let mut args = Self::args_of(call, env, syms)?;
        let _mode = grad.and_then(|g| g.apply(&mut args));
        let outs = match call.op.builtin() {
            Some(def) => dispatch::call(def, &args)?,
            None => dispatch::call_bound(&call.op, &args)?,
        };
        if outs.len() < call.outs.len() {
            return Err(Error::compile(
                CompileKind::Launch,
                format!(
                    "`{}` returned {} outputs, the graph expects {}",
                    call.op.qualname(),
                    outs.len(),
                    call.outs.len()
                ),
            ));
        }
        for (&slot, t) in call.outs.iter().zip(outs) {
            env[slot] = Some(t);
        }
        Ok(())
    }

    /// The outputs of a node run through the dispatcher must be what shape inference (the ops'
    /// fake kernels) said: the kernels after it were planned for those shapes and dtypes. An op
    /// whose real kernel disagrees with its fake kernel is named here.
    pub(super) fn check_node_outputs(
        &self,
        call: &NodeCall,
        shapes: &[Shape],
        env: &[Option<Tensor>],
    ) -> Result<()> {
        for (k, &o) in call.outs.iter().enumerate() {
            let Some(t) = &env[o] else { continue };
            let (want_shape, want_dtype) = (&shapes[o], self.dtypes[o]);
            if t.shape() != want_shape.as_slice() || t.dtype() != want_dtype {
                return Err(Error::argument(
                    call.op.qualname(),
                    format!("output {k}"),
                    format!(
                        "{want_dtype}{} (what its fake kernel said)",
                        tensorplay_ir::shape::fmt_shape(want_shape)
                    ),
                    format!(
                        "{}{} from its kernel; the fake kernel must return the real kernel's \
                         shapes and dtypes",
                        t.dtype(),
                        tensorplay_ir::shape::fmt_shape(t.shape())
                    ),
                ));
            }
        }
        Ok(())
    }
}
