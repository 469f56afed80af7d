//! Printed names of a graph's nodes (`%x`, `%3`, `return`) and of their argument slots, shared
//! by the printer, the DOT exporter, the validator and error messages.

use std::collections::BTreeMap;

use super::Graph;
use super::node::{Arg, Edge, Node, NodeId, NodeKind, ValueRef};

/// Printed names of every node, shared by the printer, the DOT exporter and error messages.
pub(crate) struct Naming {
    /// Every live node: inputs by input index, then constants and ops in topological order (if the
    /// graph has a cycle: the acyclic prefix, then the rest by index), then output sinks.
    pub(crate) order: Vec<NodeId>,
    /// By node index: the position in `order`.
    pos: Vec<Option<usize>>,
    /// By node index: `%x` for inputs, `%3` for constants and ops, `return` for sinks.
    label: Vec<Option<String>>,
}

impl Naming {
    pub(crate) fn new(g: &Graph) -> Self {
        let bound = g.bound();
        let (topo, _) = g.kahn();
        let mut seen = vec![false; bound];
        let mut body = Vec::new();
        for id in topo.into_iter().chain(g.node_ids()) {
            if seen[id.index()] {
                continue;
            }
            seen[id.index()] = true;
            if let Some(n) = g.node(id)
                && !n.is_input()
                && !n.is_output()
            {
                body.push(id);
            }
        }
        let inputs: Vec<NodeId> = g.inputs().into_iter().map(|v| v.node).collect();
        let sinks: Vec<NodeId> = g
            .node_ids()
            .into_iter()
            .filter(|&id| g.node(id).is_some_and(Node::is_output))
            .collect();
        let mut label = vec![None; bound];
        for &id in &inputs {
            if let Some(NodeKind::Input { name, .. }) = g.node(id).map(|n| &n.kind) {
                label[id.index()] = Some(format!("%{name}"));
            }
        }
        for (k, &id) in body.iter().enumerate() {
            label[id.index()] = Some(format!("%{k}"));
        }
        for &id in &sinks {
            label[id.index()] = Some("return".to_string());
        }
        let order: Vec<NodeId> = inputs.into_iter().chain(body).chain(sinks).collect();
        let mut pos = vec![None; bound];
        for (p, id) in order.iter().enumerate() {
            pos[id.index()] = Some(p);
        }
        Naming { order, pos, label }
    }

    /// Position of `id` in the printed order (`usize::MAX` for a dead id).
    pub(crate) fn pos(&self, id: NodeId) -> usize {
        self.pos
            .get(id.index())
            .copied()
            .flatten()
            .unwrap_or(usize::MAX)
    }

    /// `%x`, `%3`, `return`, or `%?` for a dead id.
    pub(crate) fn label(&self, id: NodeId) -> String {
        self.label
            .get(id.index())
            .cloned()
            .flatten()
            .unwrap_or_else(|| "%?".to_string())
    }

    /// The name of a value: the node label, with `.i` when the node does not have exactly one
    /// output or `i` is not 0.
    pub(crate) fn value(&self, g: &Graph, v: ValueRef) -> String {
        let base = self.label(v.node);
        match g.node(v.node) {
            Some(n) if n.outputs.len() == 1 && v.output == 0 => base,
            _ => format!("{base}.{}", v.output),
        }
    }

    /// `%3 = tp::add`, `%1 = constant(2.0)`, `input %x`, `return`, `node #7 (removed)`.
    pub(crate) fn describe(&self, g: &Graph, id: NodeId) -> String {
        let label = self.label(id);
        match g.node(id).map(|n| &n.kind) {
            None => format!("node {id} (removed)"),
            Some(NodeKind::Input { .. }) => format!("input {label}"),
            Some(NodeKind::Output { .. }) => label,
            Some(NodeKind::Constant(c)) => format!("{label} = constant({c})"),
            Some(NodeKind::Op(call)) => format!("{label} = {}", call.name),
        }
    }

    /// The producers of `id`'s tensor slots, keyed by `(arg, item)`.
    pub(crate) fn slot_sources(g: &Graph, id: NodeId) -> BTreeMap<(usize, usize), Vec<ValueRef>> {
        let mut map: BTreeMap<(usize, usize), Vec<ValueRef>> = BTreeMap::new();
        for (src, e) in g.in_edges(id) {
            if let Edge::Data {
                arg,
                item,
                src_output,
            } = e
            {
                map.entry((arg, item))
                    .or_default()
                    .push(ValueRef::new(src, src_output));
            }
        }
        map
    }
}

/// Words for a tensor slot of `node`: `tensor argument 1`, `item 2 of tensor-list argument 0`,
/// `result 1`.
pub(crate) fn slot_name(node: &Node, arg: usize, item: usize) -> String {
    match &node.kind {
        NodeKind::Output { .. } => format!("result {arg}"),
        NodeKind::Op(call) => match call.args.get(arg) {
            Some(Arg::TensorList { .. }) => format!("item {item} of tensor-list argument {arg}"),
            Some(Arg::OptionalTensor { .. }) => format!("optional tensor argument {arg}"),
            _ if item == 0 => format!("tensor argument {arg}"),
            _ => format!("argument {arg} item {item}"),
        },
        _ => format!("argument {arg} item {item}"),
    }
}
