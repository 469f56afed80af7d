//! Graphviz (DOT) export.

use std::fmt::Write;

use super::Graph;
use super::naming::Naming;
use super::node::{Edge, NodeId, NodeKind};

/// Escapes a label for a double-quoted DOT string (`\n` stays a DOT line break).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Graph {
    /// The graph in Graphviz DOT syntax. Nodes are named `n0, n1, ...` in printed order and
    /// labelled as in the text form; barriers are filled and show their reason; order edges are
    /// dashed; data edges from a multi-output node are labelled with the output index. Each region
    /// in `regions` (e.g. a fusion group) is drawn as `subgraph cluster_N` (a node listed in
    /// several regions goes to the first; ids that name no node are ignored). Deterministic.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// b.output(&y)?;
    /// let g = b.finish()?;
    /// let dot = g.to_dot(Some(&[vec![y[0].node]]));
    /// assert!(dot.starts_with("digraph tensorplay {"));
    /// assert!(dot.contains("subgraph cluster_0"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn to_dot(&self, regions: Option<&[Vec<NodeId>]>) -> String {
        let naming = Naming::new(self);
        let dot_id = |id: NodeId| format!("n{}", naming.pos(id));

        // Region of each node (first listing wins).
        let mut region_of: Vec<Option<usize>> = vec![None; self.bound()];
        let regions = regions.unwrap_or(&[]);
        for (r, members) in regions.iter().enumerate() {
            for &id in members {
                if self.contains(id) && region_of[id.index()].is_none() {
                    region_of[id.index()] = Some(r);
                }
            }
        }

        let node_stmt = |id: NodeId| -> String {
            let Some(node) = self.node(id) else {
                return String::new();
            };
            let label = naming.label(id);
            let types: Vec<String> = node.outputs.iter().map(ToString::to_string).collect();
            let types = if types.is_empty() {
                "()".to_string()
            } else {
                types.join(", ")
            };
            let (text, attrs) = match &node.kind {
                NodeKind::Input { .. } => (format!("{label}\n{types}"), ", shape=ellipse"),
                NodeKind::Output { .. } => ("return".to_string(), ", shape=house"),
                NodeKind::Constant(c) => {
                    (format!("{label} = constant({c})\n{types}"), ", shape=note")
                }
                NodeKind::Op(call) => {
                    let mut text = format!("{label} = {}\n{types}", call.name);
                    if let Some(reason) = &call.barrier_reason {
                        text.push_str(&format!("\nbarrier: {reason}"));
                    }
                    let attrs = if call.is_barrier() {
                        ", style=filled, fillcolor=\"#f4cccc\""
                    } else {
                        ""
                    };
                    (text, attrs)
                }
            };
            format!("{} [label=\"{}\"{attrs}];", dot_id(id), escape(&text))
        };

        let mut out = String::new();
        out.push_str("digraph tensorplay {\n");
        out.push_str("  node [shape=box, fontname=\"monospace\"];\n");
        for (r, _) in regions.iter().enumerate() {
            let members: Vec<NodeId> = naming
                .order
                .iter()
                .copied()
                .filter(|id| region_of[id.index()] == Some(r))
                .collect();
            let _ = writeln!(out, "  subgraph cluster_{r} {{");
            let _ = writeln!(out, "    label=\"region {r}\";");
            out.push_str("    style=rounded;\n    color=\"#3c78d8\";\n");
            for id in members {
                let _ = writeln!(out, "    {}", node_stmt(id));
            }
            out.push_str("  }\n");
        }
        for &id in &naming.order {
            if region_of[id.index()].is_none() {
                let _ = writeln!(out, "  {}", node_stmt(id));
            }
        }
        let mut edges: Vec<(usize, usize, usize, usize, Edge)> = self
            .edges()
            .into_iter()
            .map(|(s, t, e)| {
                let (arg, item) = match e {
                    Edge::Data { arg, item, .. } => (arg, item),
                    Edge::Order => (usize::MAX, usize::MAX),
                };
                (naming.pos(s), naming.pos(t), arg, item, e)
            })
            .collect();
        edges.sort_by_key(|&(s, t, arg, item, _)| (s, t, arg, item));
        for (s, t, _, _, e) in edges {
            let attrs = match e {
                Edge::Order => " [style=dashed]".to_string(),
                Edge::Data { src_output, .. } => {
                    let multi = naming
                        .order
                        .get(s)
                        .and_then(|&id| self.node(id))
                        .is_some_and(|n| n.outputs.len() != 1);
                    if multi {
                        format!(" [label=\"{src_output}\"]")
                    } else {
                        String::new()
                    }
                }
            };
            let _ = writeln!(out, "  n{s} -> n{t}{attrs};");
        }
        out.push_str("}\n");
        out
    }
}
