//! Functionalization of buffer updates: before a joint graph is split, every builtin in-place op
//! whose target is a primal input that does not require grad (a buffer, such as a batch norm's
//! running statistics) is replaced by its out-of-place form. Readers after the update read the
//! new value; the last value of each updated input becomes an extra forward output, which the
//! runtime copies back into the input's storage after the forward runs (once per call, through
//! `copy_`, so its version counter moves as an eager in-place op's does).
//!
//! Refused (the call falls back to the interpreter, with the reason): a mutation of an input
//! that requires grad, of an intermediate or a view, a mutating custom op, an in-place op
//! without an out-of-place form here (`fill_`) or whose result would need a dtype conversion
//! this pass does not write, an input that is also viewed, and an updated input that the
//! backward reads (checked by the caller, after partitioning).

use std::collections::HashMap;

use tensorplay_ir::graph::{Attr, BuilderArg, Constant, GraphBuilder, NodeKind};
use tensorplay_ir::{CompileKind, Error, Graph, NodeId, OpClass, Result, TensorMeta, ValueRef};

use super::partition::copy_node;

/// A joint graph without mutations, and which primal inputs it updates.
pub(crate) struct Functional {
    /// The joint graph with the buffer updates' final values as outputs after the forward ones:
    /// forward outputs, updated values, then gradients.
    pub graph: Graph,
    /// The primal input each updated value is written back into, in output order.
    pub updated: Vec<usize>,
}

fn refuse(msg: String) -> Error {
    Error::compile(
        CompileKind::Capture,
        format!("compiled training: {msg}; such mutations are not split into forward and backward"),
    )
}

/// Rewrites `joint` (`requires_grad` per primal input, `num_outputs` forward outputs) so that it
/// has no mutating node; `None` when it has none to begin with.
pub(crate) fn functionalize(
    joint: &Graph,
    requires_grad: &[bool],
    num_outputs: usize,
) -> Result<Option<Functional>> {
    let order = joint.topo_order()?;
    let mutating = |n: NodeId| {
        matches!(joint.node(n).map(|x| &x.kind),
            Some(NodeKind::Op(c)) if c.class == OpClass::Mutating)
    };
    if !order.iter().any(|&n| mutating(n)) {
        return Ok(None);
    }
    let inputs = joint.inputs();
    let primal_of = |v: ValueRef| {
        inputs[..requires_grad.len()]
            .iter()
            .position(|&p| p == v)
            .filter(|_| v.output == 0)
    };
    let mut b = GraphBuilder::new();
    let mut map: HashMap<ValueRef, ValueRef> = HashMap::new();
    for &v in &inputs {
        let (name, meta) = input_parts(joint, v)?;
        map.insert(v, b.input(name, meta));
    }
    // The primal inputs some op updates, in order of first update.
    let mut updated: Vec<usize> = Vec::new();
    for &n in &order {
        let Some(NodeKind::Op(call)) = joint.node(n).map(|x| &x.kind) else {
            if matches!(joint.node(n).map(|x| &x.kind), Some(NodeKind::Constant(_))) {
                copy_node(joint, n, &mut b, &mut map)?;
            }
            continue;
        };
        if call.class != OpClass::Mutating {
            copy_node(joint, n, &mut b, &mut map)?;
            continue;
        }
        let args = joint.args_of(n)?;
        let target = *args
            .first()
            .ok_or_else(|| refuse(format!("{} mutates no tensor argument", joint.describe(n))))?;
        let Some(k) = primal_of(target) else {
            return Err(refuse(format!(
                "{} mutates {}, an intermediate value or a view, not an input buffer",
                joint.describe(n),
                joint.describe(target.node)
            )));
        };
        if requires_grad[k] {
            return Err(refuse(format!(
                "{} mutates input {k}, which requires grad",
                joint.describe(n)
            )));
        }
        if !call.name.starts_with("tp::") {
            return Err(refuse(format!(
                "{} is a mutating custom op (an opaque barrier)",
                joint.describe(n)
            )));
        }
        let new = out_of_place(joint, n, &call.name, &args, &mut b, &map)?;
        // Readers after the update (later in the order) read the new value.
        map.insert(target, new);
        map.insert(ValueRef::new(n, 0), new);
        if !updated.contains(&k) {
            updated.push(k);
        }
    }
    refuse_viewed(joint, &order, &updated, &inputs)?;
    let outs = joint.outputs()?;
    let mut results: Vec<ValueRef> = Vec::with_capacity(outs.len() + updated.len());
    let lookup = |v: &ValueRef| {
        map.get(v).copied().ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                format!("functionalize: output {v:?} was not copied"),
            )
        })
    };
    for v in &outs[..num_outputs] {
        results.push(lookup(v)?);
    }
    for &k in &updated {
        results.push(lookup(&inputs[k])?);
    }
    for v in &outs[num_outputs..] {
        results.push(lookup(v)?);
    }
    b.output(&results)?;
    for g in joint.size_guards() {
        if let Some(&v) = map.get(&g.value) {
            let mut g = g.clone();
            g.value = v;
            b.size_guard(g);
        }
    }
    for g in joint.sym_guards() {
        b.sym_guard(*g);
    }
    Ok(Some(Functional {
        graph: b.finish()?,
        updated,
    }))
}

/// The name and metadata of input `v`.
fn input_parts(joint: &Graph, v: ValueRef) -> Result<(String, TensorMeta)> {
    let node = joint
        .node(v.node)
        .ok_or_else(|| Error::compile(CompileKind::Graph, "functionalize: input vanished"))?;
    let NodeKind::Input { name, .. } = &node.kind else {
        return Err(Error::compile(
            CompileKind::Graph,
            "functionalize: not an input",
        ));
    };
    let meta = node
        .outputs
        .first()
        .cloned()
        .ok_or_else(|| Error::compile(CompileKind::Graph, "input without metadata"))?;
    Ok((name.clone(), meta))
}

/// Refuses an updated input that a view reads: the view would alias the buffer, which the
/// functional graph cannot express.
fn refuse_viewed(
    joint: &Graph,
    order: &[NodeId],
    updated: &[usize],
    inputs: &[ValueRef],
) -> Result<()> {
    for &n in order {
        let Some(NodeKind::Op(call)) = joint.node(n).map(|x| &x.kind) else {
            continue;
        };
        if call.class != OpClass::View {
            continue;
        }
        for v in joint.args_of(n)? {
            if let Some(&k) = updated.iter().find(|&&k| inputs[k] == v) {
                return Err(refuse(format!(
                    "input {k} is updated in place and also viewed by {}",
                    joint.describe(n)
                )));
            }
        }
    }
    Ok(())
}

/// Adds the out-of-place form of in-place node `n` (`name`, reading `args`) to `b` and returns
/// the new value of its target.
fn out_of_place(
    joint: &Graph,
    n: NodeId,
    name: &str,
    args: &[ValueRef],
    b: &mut GraphBuilder,
    map: &HashMap<ValueRef, ValueRef>,
) -> Result<ValueRef> {
    let get = |v: &ValueRef| {
        map.get(v).copied().ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                format!(
                    "functionalize: {} reads a value not copied",
                    joint.describe(n)
                ),
            )
        })
    };
    let meta = |v: &ValueRef| {
        joint
            .meta(*v)
            .cloned()
            .ok_or_else(|| Error::compile(CompileKind::Graph, "value without metadata"))
    };
    let (target, other) = match args {
        [t, o] => (*t, *o),
        _ => {
            return Err(refuse(format!(
                "{} has no out-of-place form here",
                joint.describe(n)
            )));
        }
    };
    let tm = meta(&target)?;
    let om = meta(&other)?;
    let t = get(&target)?;
    let o = get(&other)?;
    let functional = match name {
        "tp::add_" => "tp::add",
        "tp::sub_" => "tp::sub",
        "tp::mul_" => "tp::mul",
        "tp::div_" => "tp::div",
        "tp::copy_" => {
            // Equal ranks and no size-1 source dim against another target dim: no broadcast
            // (a static size against the target's symbol is the same size: eager's copy_ checks
            // the shapes agree).
            let one = tensorplay_ir::Dim::Static(1);
            let broadcasts = om.shape.len() != tm.shape.len()
                || om
                    .shape
                    .iter()
                    .zip(&tm.shape)
                    .any(|(s, t)| *s == one && *t != one);
            if broadcasts {
                return Err(refuse(format!(
                    "{} broadcasts a {} into input {}",
                    joint.describe(n),
                    om,
                    tm
                )));
            }
            if om.dtype == tm.dtype {
                return Ok(o);
            }
            let args = vec![
                BuilderArg::Tensor(o),
                BuilderArg::Attr {
                    name: Some("dtype".into()),
                    value: Attr::DType(tm.dtype),
                },
            ];
            let id = b.op_node("tp::to_dtype", OpClass::Elementwise, args, vec![tm])?;
            return Ok(ValueRef::new(id, 0));
        }
        _ => {
            return Err(refuse(format!(
                "{} has no out-of-place form here",
                joint.describe(n)
            )));
        }
    };
    // The out-of-place result has the target's dtype when the operand cannot promote it.
    let wrapped_scalar = matches!(
        joint.node(other.node).map(|x| &x.kind),
        Some(NodeKind::Constant(
            Constant::Float { .. } | Constant::Int { .. } | Constant::Bool(_)
        ))
    );
    let keeps_dtype =
        om.dtype == tm.dtype || (wrapped_scalar && om.dtype.category() <= tm.dtype.category());
    if !keeps_dtype {
        return Err(refuse(format!(
            "{} writes a {} result into input {} (a dtype conversion this rewrite does not make)",
            joint.describe(n),
            om.dtype,
            tm
        )));
    }
    let id = b.op_node(
        functional,
        OpClass::Elementwise,
        vec![BuilderArg::Tensor(t), BuilderArg::Tensor(o)],
        vec![tm],
    )?;
    Ok(ValueRef::new(id, 0))
}
