//! Dead-code elimination: drops op and constant nodes whose results nothing needs.

use std::collections::BTreeSet;

use tensorplay_ir::graph::{Edge, Graph, NodeId, NodeKind};
use tensorplay_ir::{OpClass, Result};
use tensorplay_runtime::ops::lowering::fails_on_values;

/// Returns a copy of `g` without the op and constant nodes that have no data path to the graph
/// outputs or to a mutating op.
///
/// Kept: the output sink and everything it reads (transitively, through data edges); every
/// [`OpClass::Mutating`] node (a write is a side effect, even when nobody reads the result) and
/// everything it reads; every builtin call that can fail on its operands' values
/// ([`fails_on_values`]: integer `remainder` by zero) and everything it reads; every graph input, used or not (input positions are the calling
/// convention). Order edges do not make a node live: a dead reader ordered around a mutation is
/// removed, and when the removed nodes carried an ordering between two live nodes (a write, a
/// dead read, a second write) a direct order edge keeps it. Node ids are preserved.
///
/// Errors if `g` is not a valid graph (e.g. it has no outputs); never panics.
///
/// ```
/// use tensorplay_compiler::passes::dce::dce;
/// use tensorplay_ir::graph::GraphBuilder;
/// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
/// let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", m.clone());
/// let unused = b.input("unused", m.clone());
/// let y = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
/// let dead = b.op("tp::neg", OpClass::Elementwise, vec![y[0].into()], vec![m])?;
/// let write = b.op_node("mylib::zero_", OpClass::Mutating, vec![unused.into()], vec![])?;
/// b.output(&y)?;
/// let g = dce(&b.finish()?)?;
/// assert!(!g.contains(dead[0].node));
/// assert!(g.contains(write) && g.contains(unused.node));
/// assert_eq!(g.outputs()?, y);
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn dce(g: &Graph) -> Result<Graph> {
    g.validate()?;
    let ids = g.node_ids();
    let bound = ids.iter().map(|id| id.index() + 1).max().unwrap_or(0);
    let mut live = vec![false; bound];
    let mut stack: Vec<NodeId> = Vec::new();
    for &id in &ids {
        let Some(node) = g.node(id) else { continue };
        match &node.kind {
            NodeKind::Input { .. } | NodeKind::Output { .. } => stack.push(id),
            NodeKind::Op(call) if call.class == OpClass::Mutating => stack.push(id),
            // A call that can fail on its operands' values (integer remainder by zero) is kept
            // even when unused, so the compiled graph fails exactly where eager does.
            NodeKind::Op(call) if node.outputs.iter().any(|m| fails_on_values(call, m.dtype)) => {
                stack.push(id)
            }
            _ => {}
        }
    }
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut live[id.index()], true) {
            continue;
        }
        for (src, e) in g.in_edges(id) {
            if e.is_data() && !live[src.index()] {
                stack.push(src);
            }
        }
    }
    let is_live = |id: NodeId| live.get(id.index()).copied().unwrap_or(false);

    // Orderings carried through dead nodes: a live node with an order edge into a dead region
    // must still precede the live nodes that region is ordered before. (Edges from a dead node
    // to a live one are always order edges: a data edge would have made the source live.)
    let mut bridges: BTreeSet<(NodeId, NodeId)> = BTreeSet::new();
    for &p in ids.iter().filter(|&&id| is_live(id)) {
        for (d, e) in g.out_edges(p) {
            if e != Edge::Order || is_live(d) {
                continue;
            }
            let mut seen: BTreeSet<NodeId> = BTreeSet::new();
            let mut todo = vec![d];
            while let Some(n) = todo.pop() {
                if !seen.insert(n) {
                    continue;
                }
                for (t, _) in g.out_edges(n) {
                    if is_live(t) {
                        if t != p {
                            bridges.insert((p, t));
                        }
                    } else {
                        todo.push(t);
                    }
                }
            }
        }
    }

    let mut out = g.clone();
    for &id in &ids {
        if !is_live(id) {
            out.remove_node(id)?;
        }
    }
    for (p, s) in bridges {
        if !reaches(&out, p, s) {
            out.add_edge(p, s, Edge::Order)?;
        }
    }
    out.validate()?;
    Ok(out)
}

/// True when a path (data or order edges) leads from `from` to `to`.
fn reaches(g: &Graph, from: NodeId, to: NodeId) -> bool {
    let mut seen: BTreeSet<NodeId> = BTreeSet::new();
    let mut todo = vec![from];
    while let Some(n) = todo.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n) {
            todo.extend(g.out_edges(n).into_iter().map(|(t, _)| t));
        }
    }
    false
}
