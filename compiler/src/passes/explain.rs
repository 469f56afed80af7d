//! Observability of fusion: the printed plan (`explain`) and the DOT drawing with region
//! clusters. Node names ([`Names`]) follow the graph printer (`%x` for inputs, `%0, %1, ...` for
//! constants and ops in topological order), so a plan reads side by side with `Graph`'s
//! `Display`.

use std::fmt::Write;

use tensorplay_ir::graph::{Graph, NodeId, ValueRef};
use tensorplay_ir::shape::fmt_shape;

use super::fusion::{FusionPlan, NodeStepKind, Step};
use super::names::Names;
use super::region::RegionKind;

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl FusionPlan {
    /// A stable, human-readable listing of the plan: every step in execution order; for a region
    /// its kind and iteration shape, its ops (`%n = tp::op(...)`, numbered as the graph prints),
    /// inputs and outputs; for a node run on its own, the node and why it splits fusion (or, for
    /// a free view, why it does not). `TP_LOGS=fusion` prints this when [`partition`] runs.
    ///
    /// [`partition`]: super::fusion::partition
    ///
    /// ```
    /// use tensorplay_compiler::passes::fusion::partition;
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let a = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
    /// let t = b.op("mylib::triton_add", OpClass::Opaque, vec![a[0].into(), x.into()], vec![m.clone()])?;
    /// b.set_barrier_reason(t[0].node, "triton op")?;
    /// let y = b.op("tp::neg", OpClass::Elementwise, vec![t[0].into()], vec![m])?;
    /// b.output(&y)?;
    /// let g = b.finish()?;
    /// let text = partition(&g)?.explain(&g);
    /// assert!(text.contains("step 1: barrier %1 = mylib::triton_add(%0, %x) : f32[8]\n  why: triton op"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn explain(&self, g: &Graph) -> String {
        let names = Names::new(g);
        let barriers = self
            .node_steps
            .values()
            .filter(|s| s.kind == NodeStepKind::Barrier)
            .count();
        let views = self.node_steps.len() - barriers;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "fusion plan: {} ({}, {}, {})",
            plural(self.steps.len(), "step", "steps"),
            plural(self.regions.len(), "region", "regions"),
            plural(barriers, "barrier", "barriers"),
            plural(views, "free view", "free views"),
        );
        for (i, step) in self.steps.iter().enumerate() {
            match *step {
                Step::Region(r) => {
                    let Some(region) = self.regions.get(r) else {
                        let _ = writeln!(out, "step {i}: region {r} (missing from the plan)");
                        continue;
                    };
                    let shape = region
                        .iteration_shape(g)
                        .map(|s| fmt_shape(&s))
                        .unwrap_or_else(|_| "[?]".to_string());
                    let what = match &region.kind {
                        RegionKind::Pointwise => format!("pointwise over {shape}"),
                        RegionKind::Reduction {
                            op, dims, keepdim, ..
                        } => format!(
                            "reduction {} over dims {dims:?} of {shape}, keepdim={}",
                            format!("{op:?}").to_lowercase(),
                            if *keepdim { "True" } else { "False" }
                        ),
                        RegionKind::Softmax { log, .. } => format!(
                            "{} over the last dim of {shape}",
                            if *log { "log_softmax" } else { "softmax" }
                        ),
                    };
                    let _ = writeln!(out, "step {i}: region {r}, {what}");
                    for &n in &region.nodes {
                        let _ = writeln!(out, "    {}", names.op_line(g, n));
                    }
                    let list = |vs: &[ValueRef]| {
                        if vs.is_empty() {
                            "(none)".to_string()
                        } else {
                            vs.iter()
                                .map(|&v| names.typed_value(g, v))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    };
                    let _ = writeln!(out, "  inputs: {}", list(&region.inputs));
                    let _ = writeln!(out, "  outputs: {}", list(&region.outputs));
                }
                Step::Node(n) => {
                    let (word, label, reason) = match self.node_steps.get(&n) {
                        Some(s) if s.kind == NodeStepKind::View => ("view", "note", &s.reason),
                        Some(s) => ("barrier", "why", &s.reason),
                        None => {
                            let _ = writeln!(out, "step {i}: node {}", names.op_line(g, n));
                            continue;
                        }
                    };
                    let _ = writeln!(out, "step {i}: {word} {}", names.op_line(g, n));
                    let _ = writeln!(out, "  {label}: {reason}");
                }
            }
        }
        match g.outputs() {
            Ok(vs) => {
                let vs: Vec<String> = vs.iter().map(|&v| names.value(g, v)).collect();
                let _ = writeln!(out, "returns: ({})", vs.join(", "));
            }
            Err(_) => out.push_str("returns: <unset>\n"),
        }
        out
    }

    /// The graph in Graphviz DOT syntax ([`Graph::to_dot`]) with each region drawn as a cluster
    /// `region N`; barriers are filled and show their reason.
    ///
    /// ```
    /// use tensorplay_compiler::passes::fusion::partition;
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// b.output(&y)?;
    /// let g = b.finish()?;
    /// let dot = partition(&g)?.to_dot(&g);
    /// assert!(dot.contains("subgraph cluster_0") && dot.contains("label=\"region 0\""));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn to_dot(&self, g: &Graph) -> String {
        let clusters: Vec<Vec<NodeId>> = self.regions.iter().map(|r| r.nodes.clone()).collect();
        g.to_dot(Some(&clusters))
    }
}
