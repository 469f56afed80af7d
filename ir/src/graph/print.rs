//! The stable text form of a graph.
//!
//! Inputs print as `%name`; constants and ops are numbered `%0, %1, ...` in topological order (ties
//! by node index), so the text does not depend on how petgraph numbered the nodes. A node with
//! several outputs prints `%4.0, %4.1 = ...` and its uses as `%4.1`.

use std::collections::BTreeMap;
use std::fmt;

use super::Graph;
use super::attr::{Attr, fmt_float};
use super::naming::Naming;
use super::node::{Arg, Constant, Node, NodeId, NodeKind, ValueRef};
use crate::meta::TensorMeta;

/// An attribute as `Display` writes it, except that empty float and bool lists are tagged
/// (`[]:float`, `[]:bool`) so the parser can tell them from an empty int list.
fn fmt_attr(a: &Attr) -> String {
    match a {
        Attr::FloatList(v) if v.is_empty() => "[]:float".to_string(),
        Attr::BoolList(v) if v.is_empty() => "[]:bool".to_string(),
        other => other.to_string(),
    }
}

/// A literal with every element (`Display for Constant` elides long tensors, which the parser
/// could not read back).
fn fmt_constant(c: &Constant) -> String {
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    match c {
        Constant::FloatTensor { data, .. } => list(data.iter().map(|&x| fmt_float(x)).collect()),
        Constant::IntTensor { data, .. } => list(data.iter().map(ToString::to_string).collect()),
        scalar => scalar.to_string(),
    }
}

fn fmt_types(outputs: &[TensorMeta]) -> String {
    match outputs {
        [one] => one.to_string(),
        many => {
            let parts: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!("({})", parts.join(", "))
        }
    }
}

impl Graph {
    fn fmt_slot(
        &self,
        naming: &Naming,
        sources: &BTreeMap<(usize, usize), Vec<ValueRef>>,
        arg: usize,
        item: usize,
    ) -> String {
        match sources.get(&(arg, item)).and_then(|v| v.first()) {
            Some(&v) => naming.value(self, v),
            None => "%?".to_string(),
        }
    }

    fn fmt_node_line(&self, naming: &Naming, id: NodeId, node: &Node) -> String {
        let sources = Naming::slot_sources(self, id);
        let label = naming.label(id);
        let lhs = if node.outputs.len() == 1 {
            label
        } else {
            let parts: Vec<String> = (0..node.outputs.len())
                .map(|i| format!("{label}.{i}"))
                .collect();
            if parts.is_empty() {
                label
            } else {
                parts.join(", ")
            }
        };
        let mut comments = Vec::new();
        let rhs = match &node.kind {
            NodeKind::Constant(c) => format!("constant({})", fmt_constant(c)),
            NodeKind::Op(call) => {
                let args: Vec<String> = call
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| match a {
                        Arg::Tensor => self.fmt_slot(naming, &sources, i, 0),
                        Arg::OptionalTensor { present: true } => {
                            format!("Some({})", self.fmt_slot(naming, &sources, i, 0))
                        }
                        Arg::OptionalTensor { present: false } => "None:Tensor".to_string(),
                        Arg::TensorList { len: 0 } => "[]:Tensor".to_string(),
                        Arg::TensorList { len } => {
                            let items: Vec<String> = (0..*len)
                                .map(|j| self.fmt_slot(naming, &sources, i, j))
                                .collect();
                            format!("[{}]", items.join(", "))
                        }
                        Arg::Attr {
                            name: Some(n),
                            value,
                        } => format!("{n}={}", fmt_attr(value)),
                        Arg::Attr { name: None, value } => fmt_attr(value),
                    })
                    .collect();
                if let Some(reason) = &call.barrier_reason {
                    comments.push(format!("barrier: {reason}"));
                }
                format!("{}({})", call.name, args.join(", "))
            }
            // Inputs print in the header and sinks as `return`; never reached.
            NodeKind::Input { .. } | NodeKind::Output { .. } => String::new(),
        };
        let mut after = self.order_predecessors(id);
        after.sort_by_key(|&p| naming.pos(p));
        if !after.is_empty() {
            let names: Vec<String> = after.iter().map(|&p| naming.label(p)).collect();
            comments.push(format!("after {}", names.join(", ")));
        }
        let mut line = format!("{lhs} = {rhs} : {}", fmt_types(&node.outputs));
        if !comments.is_empty() {
            line.push_str("  # ");
            line.push_str(&comments.join("; "));
        }
        line
    }

    fn fmt_return(&self, naming: &Naming, id: NodeId, arity: usize) -> String {
        let sources = Naming::slot_sources(self, id);
        let items: Vec<String> = (0..arity)
            .map(|i| self.fmt_slot(naming, &sources, i, 0))
            .collect();
        let mut line = format!("return ({})", items.join(", "));
        let mut after = self.order_predecessors(id);
        after.sort_by_key(|&p| naming.pos(p));
        if !after.is_empty() {
            let names: Vec<String> = after.iter().map(|&p| naming.label(p)).collect();
            line.push_str(&format!("  # after {}", names.join(", ")));
        }
        line
    }
}

impl fmt::Display for Graph {
    /// Prints the graph in its stable text form:
    ///
    /// ```text
    /// graph(%x: f32[s0, 1024], %b: f32[1024]) {
    ///   %0 = tp::add(%x, %b) : f32[s0, 1024]
    ///   %1 = tp::sum(%0, dims=[1], keepdim=False) : f32[s0]
    ///   return (%0, %1)
    /// }
    /// ```
    ///
    /// Order edges print as a trailing `# after %2` comment, barrier reasons as
    /// `# barrier: mutates self`; a missing tensor argument prints as `%?`. Tensor literals print
    /// every element; an optional tensor prints `Some(%3)` or `None:Tensor`, and empty non-int lists
    /// `[]:Tensor`, `[]:float`, `[]:bool`, so that [`Graph::parse`] reads the text back. Never fails, even on an
    /// invalid graph (a cycle numbers the remaining nodes by index).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let naming = Naming::new(self);
        let header: Vec<String> = self
            .inputs()
            .into_iter()
            .map(|v| {
                let ty = self
                    .node(v.node)
                    .map(|n| fmt_types(&n.outputs))
                    .unwrap_or_default();
                format!("{}: {ty}", naming.label(v.node))
            })
            .collect();
        writeln!(f, "graph({}) {{", header.join(", "))?;
        let mut has_return = false;
        for &id in &naming.order {
            let Some(node) = self.node(id) else { continue };
            match &node.kind {
                NodeKind::Input { .. } => {}
                NodeKind::Output { arity } => {
                    has_return = true;
                    writeln!(f, "  {}", self.fmt_return(&naming, id, *arity))?;
                }
                _ => writeln!(f, "  {}", self.fmt_node_line(&naming, id, node))?,
            }
        }
        if !has_return {
            writeln!(f, "  return <unset>")?;
        }
        writeln!(f, "}}")
    }
}
