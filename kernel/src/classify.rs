//! What loop nest one op node can become ([`Class`]): pointwise, a reduction over normalised
//! dims, last-dim softmax rows, a free view, or a barrier with the reason it splits fusion — the
//! unit the compiler's fusion pass groups into regions, and how a back end that generates kernels
//! runs one eager op.

use tensorplay_ir::graph::{Arg, Attr, Graph, NodeId, OpCall};
use tensorplay_ir::shape::normalize_dim;
use tensorplay_ir::{CompileKind, Error, OpClass, ReduceOp, Result};

use crate::lowering::{OpLowerings, compiles, pointwise, reduce_op, softmax};

/// What loop nest one op node can become.
#[derive(Debug, Clone, PartialEq)]
pub enum Class {
    Pointwise,
    Reduce {
        op: ReduceOp,
        dims: Vec<usize>,
        keepdim: bool,
    },
    Softmax {
        log: bool,
    },
    View,
    Barrier(String),
}

impl Class {
    /// Whether the node can be part of a generated loop nest.
    pub fn fusible(&self) -> bool {
        matches!(
            self,
            Class::Pointwise | Class::Reduce { .. } | Class::Softmax { .. }
        )
    }

    /// Whether the node reduces (a reduction or softmax: the end of a region's prologue).
    pub fn reducing(&self) -> bool {
        matches!(self, Class::Reduce { .. } | Class::Softmax { .. })
    }
}

fn compile_err(msg: String) -> Error {
    Error::compile(CompileKind::Lowering, msg)
}

/// The attribute called `name`, else the `index`-th attribute.
fn attr<'a>(call: &'a OpCall, name: &str, index: usize) -> Option<&'a Attr> {
    let attrs: Vec<(Option<&str>, &Attr)> = call
        .args
        .iter()
        .filter_map(|a| match a {
            Arg::Attr { name, value } => Some((name.as_deref(), value)),
            _ => None,
        })
        .collect();
    attrs
        .iter()
        .find(|(n, _)| *n == Some(name))
        .or_else(|| attrs.get(index))
        .map(|(_, v)| *v)
}

/// Why a barrier op splits fusion when capture recorded no reason.
fn default_barrier_reason(call: &OpCall) -> String {
    match call.class {
        OpClass::Mutating => "mutating op".to_string(),
        OpClass::Opaque => format!("opaque op {}", call.name),
        _ => format!("{} has no scalar lowering", call.name),
    }
}

/// Reduced dims of a reduction over an input of rank `rank`, as the eager kernels read them:
/// absent or empty means every dim; negative dims count from the end; duplicates are errors.
fn normalize_dims(op: &str, dims: Option<&[i64]>, rank: usize) -> Result<Vec<usize>> {
    let dims = match dims {
        None | Some([]) => return Ok((0..rank).collect()),
        Some(d) => d,
    };
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let i = normalize_dim(op, d, rank)?;
        if rank == 0 {
            continue;
        }
        if out.contains(&i) {
            return Err(Error::argument(
                op,
                "dim",
                "distinct dims",
                format!("dim {d} twice in {dims:?}"),
            ));
        }
        out.push(i);
    }
    out.sort_unstable();
    Ok(out)
}

/// How node `id` (a call of `call`, with `n_outputs` outputs) of `g` runs: a pointwise op, a
/// reduction over its normalised dims, last-dim softmax rows, a free view, or a barrier with
/// the reason it splits fusion. Each op's declared lowering comes from `table`. Errors for
/// arguments eager would reject (an out-of-range or repeated dim).
pub fn classify(
    g: &Graph,
    id: NodeId,
    call: &OpCall,
    n_outputs: usize,
    table: &dyn OpLowerings,
) -> Result<Class> {
    if call.is_barrier() {
        return Ok(Class::Barrier(
            call.barrier_reason
                .clone()
                .unwrap_or_else(|| default_barrier_reason(call)),
        ));
    }
    let name = call.name.as_str();
    let no_lowering = || Class::Barrier(format!("{name} has no scalar lowering"));
    let single_output = |class: Class| {
        if n_outputs == 1 {
            class
        } else {
            Class::Barrier(format!(
                "{name} has {n_outputs} outputs; fused ops have exactly one"
            ))
        }
    };
    let input_rank = || -> Result<usize> {
        let args = g.args_of(id)?;
        let first = args
            .first()
            .ok_or_else(|| compile_err(format!("{}: expected a tensor input", g.describe(id))))?;
        g.meta(*first).map(|m| m.rank()).ok_or_else(|| {
            compile_err(format!("{}: its input is not in the graph", g.describe(id)))
        })
    };
    match call.class {
        OpClass::View => Ok(Class::View),
        OpClass::Opaque | OpClass::Mutating => Ok(Class::Barrier(default_barrier_reason(call))),
        OpClass::Elementwise | OpClass::Reduction => {
            if call.class == OpClass::Elementwise
                && let Some((expr, p)) = pointwise(table, call)?
            {
                let operands = call.tensor_slots();
                if operands != expr.arity() {
                    return Ok(Class::Barrier(format!(
                        "{name} has {operands} tensor operand(s) but its scalar lowering \
                         takes {}",
                        expr.arity()
                    )));
                }
                if let Some(out) = g.node(id).and_then(|n| n.outputs.first())
                    && !compiles(&p, out.dtype)
                {
                    return Ok(Class::Barrier(format!(
                        "{name} runs eagerly for {} results",
                        out.dtype
                    )));
                }
                return Ok(single_output(Class::Pointwise));
            }
            if call.class == OpClass::Reduction
                && let Some((op, dims, keepdim)) = reduce_op(table, call)?
            {
                let dims = normalize_dims(name, dims.as_deref(), input_rank()?)?;
                return Ok(single_output(Class::Reduce { op, dims, keepdim }));
            }
            if let Some(log) = softmax(table, call) {
                let rank = input_rank()?;
                let dim = match attr(call, "dim", 0) {
                    Some(Attr::Int(d)) => *d,
                    other => {
                        return Err(compile_err(format!(
                            "{}: expected an int `dim` attribute, got {}",
                            g.describe(id),
                            other.map_or("none".to_string(), ToString::to_string)
                        )));
                    }
                };
                let dim = normalize_dim(name, dim, rank)?;
                if rank == 0 {
                    return Ok(Class::Barrier(format!(
                        "{} of a 0-d tensor runs eagerly",
                        &name[4..]
                    )));
                }
                if dim + 1 != rank {
                    return Ok(Class::Barrier(
                        "softmax over a non-last dim runs eagerly".to_string(),
                    ));
                }
                return Ok(single_output(Class::Softmax { log }));
            }
            Ok(no_lowering())
        }
    }
}
