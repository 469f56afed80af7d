//! Printed names of a graph's nodes and values, numbered as the graph printer numbers them
//! (`%x` for inputs, `%0, %1, ...` for constants and ops in topological order): shared by the
//! fusion plan's listing (`explain.rs`), fusion's barrier reasons and the buffer plan.

use std::collections::BTreeMap;

use tensorplay_ir::graph::{Arg, Edge, Graph, Node, NodeId, NodeKind, ValueRef};

/// Printed names of a graph's nodes, numbered exactly as `Graph`'s `Display` numbers them.
pub(crate) struct Names {
    labels: BTreeMap<NodeId, String>,
}

impl Names {
    pub(crate) fn new(g: &Graph) -> Self {
        let mut order = g.topo_order().unwrap_or_default();
        // On an invalid (cyclic) graph, number what is left by index, like the printer does.
        for id in g.node_ids() {
            if !order.contains(&id) {
                order.push(id);
            }
        }
        let mut labels = BTreeMap::new();
        let mut k = 0usize;
        for id in order {
            let Some(node) = g.node(id) else { continue };
            let label = match &node.kind {
                NodeKind::Input { name, .. } => format!("%{name}"),
                NodeKind::Output { .. } => "return".to_string(),
                _ => {
                    k += 1;
                    format!("%{}", k - 1)
                }
            };
            labels.insert(id, label);
        }
        Names { labels }
    }

    /// `%x`, `%3`, `return`, or `%?` for an id that names no node.
    pub(crate) fn node(&self, id: NodeId) -> String {
        self.labels
            .get(&id)
            .cloned()
            .unwrap_or_else(|| "%?".to_string())
    }

    /// A value's name: the node's, with `.i` unless the node has exactly one output.
    pub(crate) fn value(&self, g: &Graph, v: ValueRef) -> String {
        let base = self.node(v.node);
        match g.node(v.node) {
            Some(n) if n.outputs.len() == 1 && v.output == 0 => base,
            _ => format!("{base}.{}", v.output),
        }
    }

    /// `%v: f32[s0, 4]`.
    pub(crate) fn typed_value(&self, g: &Graph, v: ValueRef) -> String {
        match g.meta(v) {
            Some(m) => format!("{}: {m}", self.value(g, v)),
            None => self.value(g, v),
        }
    }

    /// One op line as the graph printer writes it: `%3 = tp::add(%x, %2) : f32[4]`.
    pub(crate) fn op_line(&self, g: &Graph, id: NodeId) -> String {
        let Some(node) = g.node(id) else {
            return format!("{} (removed)", self.node(id));
        };
        let mut sources: BTreeMap<(usize, usize), ValueRef> = BTreeMap::new();
        for (src, e) in g.in_edges(id) {
            if let Edge::Data {
                arg,
                item,
                src_output,
            } = e
            {
                sources
                    .entry((arg, item))
                    .or_insert(ValueRef::new(src, src_output));
            }
        }
        let slot = |arg: usize, item: usize| match sources.get(&(arg, item)) {
            Some(&v) => self.value(g, v),
            None => "%?".to_string(),
        };
        let label = self.node(id);
        let lhs = match node.outputs.len() {
            1 => label,
            0 => label,
            n => (0..n)
                .map(|i| format!("{label}.{i}"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let rhs = match &node.kind {
            NodeKind::Op(call) => {
                let args: Vec<String> = call
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| match a {
                        Arg::Tensor | Arg::OptionalTensor { present: true } => slot(i, 0),
                        Arg::OptionalTensor { present: false } => "None".to_string(),
                        Arg::TensorList { len } => format!(
                            "[{}]",
                            (0..*len).map(|j| slot(i, j)).collect::<Vec<_>>().join(", ")
                        ),
                        Arg::Attr {
                            name: Some(n),
                            value,
                        } => format!("{n}={value}"),
                        Arg::Attr { name: None, value } => value.to_string(),
                    })
                    .collect();
                format!("{}({})", call.name, args.join(", "))
            }
            NodeKind::Constant(c) => format!("constant({c})"),
            NodeKind::Input { .. } => "input".to_string(),
            NodeKind::Output { .. } => "return".to_string(),
        };
        format!("{lhs} = {rhs} : {}", types(node))
    }
}

fn types(node: &Node) -> String {
    match node.outputs.as_slice() {
        [one] => one.to_string(),
        many => format!(
            "({})",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
