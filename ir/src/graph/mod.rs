//! The IR graph: a petgraph `StableDiGraph` of [`Node`]s (inputs, constants, op calls and one
//! output sink) joined by [`Edge`]s (data edges that fill tensor argument slots, and order edges
//! that only sequence mutation).
//!
//! Build graphs with [`GraphBuilder`]; passes rewrite them with the lower-level methods of
//! [`Graph`] (`add_node`, `add_edge`, `replace_uses`, `remove_node`) and call
//! [`Graph::validate`] afterwards. `Display` prints a stable text form, [`Graph::to_dot`] a
//! Graphviz drawing.
//!
//! ```
//! use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
//! use tensorplay_ir::{DType, Device, Dim, OpClass, TensorMeta};
//!
//! let meta = TensorMeta { shape: [Dim::Sym(0), Dim::Static(4)].into_iter().collect(),
//!                         dtype: DType::F32, device: Device::Cpu };
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", meta.clone());
//! let y = b.op("tp::relu", OpClass::Elementwise, vec![x.into()], vec![meta])?;
//! b.output(&y)?;
//! let g = b.finish()?;
//! assert_eq!(g.to_string(), "graph(%x: f32[s0, 4]) {\n  %0 = tp::relu(%x) : f32[s0, 4]\n  return (%0)\n}\n");
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

pub mod attr;
mod builder;
mod dot;
mod guard;
mod naming;
mod node;
mod parse;
mod print;
mod validate;

use crate::error::CompileKind;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use petgraph::Direction;
use petgraph::stable_graph::StableDiGraph;
use petgraph::visit::{EdgeRef, NodeIndexable};

pub use attr::Attr;
pub use builder::{BuilderArg, GraphBuilder};
pub use guard::{SizeGuard, SymCmp, SymGuard};
pub use node::{Arg, Constant, Edge, Node, NodeId, NodeKind, OpCall, ValueRef};

use crate::error::{Error, Result};
use crate::meta::TensorMeta;
use crate::symint::SymExpr;
use naming::Naming;

/// A dataflow graph of tensor operations.
///
/// Cloning is cheap enough for passes written as pure `Graph -> Graph` functions. Node ids are
/// stable across removals.
///
/// ```
/// use tensorplay_ir::graph::GraphBuilder;
/// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
/// let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", m.clone());
/// let y = b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m])?;
/// b.output(&y)?;
/// let g = b.finish()?;
/// assert_eq!(g.node_count(), 3); // input, op, output sink
/// assert_eq!(g.outputs()?, y);
/// let copy = g.clone();
/// assert_eq!(copy.to_string(), g.to_string());
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Graph {
    g: StableDiGraph<Node, Edge>,
    /// Sizes capture read as plain integers (see [`SizeGuard`]); not part of the printed form.
    size_guards: Vec<SizeGuard>,
    /// Conditions on the input dims capture assumed (see [`SymGuard`]); not printed either.
    sym_guards: Vec<SymGuard>,
}

impl Graph {
    /// The size guards recorded by capture: the graph is valid only for inputs under which every
    /// guarded value has the recorded size.
    pub fn size_guards(&self) -> &[SizeGuard] {
        &self.size_guards
    }

    /// Records a size guard (duplicates are kept once).
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, NodeId, SizeGuard, ValueRef};
    /// let mut g = Graph::new();
    /// let guard = SizeGuard { value: ValueRef::new(NodeId::new(0), 0), dim: None, expected: vec![8] };
    /// g.add_size_guard(guard.clone());
    /// g.add_size_guard(guard);
    /// assert_eq!(g.size_guards().len(), 1);
    /// ```
    pub fn add_size_guard(&mut self, guard: SizeGuard) {
        if !self.size_guards.contains(&guard) {
            self.size_guards.push(guard);
        }
    }

    /// The conditions on the input dims recorded by capture: the graph is valid only for inputs
    /// whose dims satisfy all of them.
    pub fn sym_guards(&self) -> &[SymGuard] {
        &self.sym_guards
    }

    /// Records a condition on the input dims (duplicates are kept once).
    pub fn add_sym_guard(&mut self, guard: SymGuard) {
        if !self.sym_guards.contains(&guard) {
            self.sym_guards.push(guard);
        }
    }

    /// Replaces symbols everywhere they occur — every value's shape, every size attribute and
    /// every symbolic guard (a guard that becomes trivially true is dropped). Capture calls it
    /// when it learned that two input dims are equal (`s0 - s2 == 0`): one symbol for both lets
    /// the fuser see that `[s0]` and `[s2]` are the same loop.
    ///
    /// ```
    /// use tensorplay_ir::graph::{GraphBuilder, SymCmp, SymGuard};
    /// use tensorplay_ir::{DType, Device, Dim, OpClass, SymExpr, TensorMeta};
    /// let meta = |k| TensorMeta { shape: vec![Dim::Sym(k)].into(), dtype: DType::F32, device: Device::Cpu };
    /// let mut b = GraphBuilder::new();
    /// let (x, y) = (b.input("x", meta(0)), b.input("y", meta(1)));
    /// let z = b.op("tp::add", OpClass::Elementwise, vec![x.into(), y.into()], vec![meta(0)])?;
    /// b.output(&z)?;
    /// b.sym_guard(SymGuard { expr: SymExpr::sym(0) - SymExpr::sym(1), cmp: SymCmp::Eq, rhs: 0 });
    /// let mut g = b.finish()?;
    /// g.substitute_symbols(&|k| (k == 1).then_some(SymExpr::sym(0)));
    /// assert_eq!(g.meta(y).unwrap().shape[0], Dim::Sym(0));
    /// assert!(g.sym_guards().is_empty());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn substitute_symbols(&mut self, f: &dyn Fn(u32) -> Option<SymExpr>) {
        for node in self.g.node_weights_mut() {
            for m in node.outputs.iter_mut() {
                for d in m.shape.iter_mut() {
                    *d = d.substitute(f);
                }
            }
            if let NodeKind::Op(call) = &mut node.kind {
                for a in call.args.iter_mut() {
                    if let Arg::Attr { value, .. } = a {
                        *value = value.substitute(f);
                    }
                }
            }
        }
        let guards = std::mem::take(&mut self.sym_guards);
        for g in guards {
            let g = SymGuard {
                expr: g.expr.substitute(f),
                ..g
            };
            if g.holds(&|_| None) != Some(true) {
                self.add_sym_guard(g);
            }
        }
    }

    /// An empty graph (no inputs, no output sink yet).
    ///
    /// ```
    /// use tensorplay_ir::graph::Graph;
    /// assert_eq!(Graph::new().node_count(), 0);
    /// ```
    pub fn new() -> Self {
        Graph::default()
    }

    /// The underlying petgraph graph, read-only (for algorithms this type does not wrap).
    ///
    /// ```
    /// use tensorplay_ir::graph::Graph;
    /// assert_eq!(Graph::new().petgraph().edge_count(), 0);
    /// ```
    pub fn petgraph(&self) -> &StableDiGraph<Node, Edge> {
        &self.g
    }

    /// Number of live nodes (inputs, constants, ops and the output sink).
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// assert_eq!(g.node_count(), 1);
    /// ```
    pub fn node_count(&self) -> usize {
        self.g.node_count()
    }

    /// True if `id` names a live node.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, NodeId};
    /// assert!(!Graph::new().contains(NodeId::new(0)));
    /// ```
    pub fn contains(&self, id: NodeId) -> bool {
        self.g.contains_node(id.0)
    }

    /// The node `id`, if it is live.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// let id = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// assert!(g.node(id).unwrap().is_output());
    /// ```
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.g.node_weight(id.0)
    }

    /// Mutable access to node `id` (e.g. to set a barrier reason). Changing the kind or the output
    /// count can invalidate edges; call [`Graph::validate`] afterwards.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// let id = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// g.node_mut(id).unwrap().kind = NodeKind::Output { arity: 1 };
    /// assert!(g.validate().is_err()); // result 0 now has no edge
    /// ```
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.g.node_weight_mut(id.0)
    }

    /// The metadata of value `v`, if its node is live and has that output.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[3], DType::I64, Device::Cpu));
    /// assert_eq!(b.graph().meta(x).unwrap().dtype, DType::I64);
    /// ```
    pub fn meta(&self, v: ValueRef) -> Option<&TensorMeta> {
        self.node(v.node)?.outputs.get(v.output)
    }

    /// Every live node id in index order (not topological; see [`Graph::topo_order`]).
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// let a = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// assert_eq!(g.node_ids(), vec![a]);
    /// ```
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.g.node_indices().map(NodeId).collect()
    }

    /// Adds a node without edges (lower-level API for passes; the graph may be invalid until the
    /// edges are in place).
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// let id = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// assert!(g.contains(id));
    /// ```
    pub fn add_node(&mut self, node: Node) -> NodeId {
        NodeId(self.g.add_node(node))
    }

    /// Adds an edge `src -> dst` (lower-level API for passes). Only checks that both nodes exist;
    /// everything else (slots, output indices, cycles) is [`Graph::validate`]'s job.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Edge, Graph, Node, NodeKind};
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut g = Graph::new();
    /// let x = g.add_node(Node::new(NodeKind::Input { index: 0, name: "x".into() },
    ///     vec![TensorMeta::new(&[2], DType::F32, Device::Cpu)]));
    /// let out = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
    /// g.add_edge(x, out, Edge::Data { arg: 0, item: 0, src_output: 0 })?;
    /// assert!(g.validate().is_ok());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn add_edge(&mut self, src: NodeId, dst: NodeId, edge: Edge) -> Result<()> {
        for (role, id) in [("source", src), ("target", dst)] {
            if !self.contains(id) {
                return Err(Error::compile(
                    CompileKind::Graph,
                    format!("add_edge: the {role} node {id} does not exist"),
                ));
            }
        }
        self.g.add_edge(src.0, dst.0, edge);
        Ok(())
    }

    /// Removes one edge `src -> dst` equal to `edge`; returns whether one was found.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Edge, Graph, Node, NodeKind};
    /// let mut g = Graph::new();
    /// let a = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// let b = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// g.add_edge(a, b, Edge::Order)?;
    /// assert!(g.remove_edge(a, b, Edge::Order));
    /// assert!(!g.remove_edge(a, b, Edge::Order));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn remove_edge(&mut self, src: NodeId, dst: NodeId, edge: Edge) -> bool {
        if !self.contains(src) {
            return false;
        }
        let found = self
            .g
            .edges_directed(src.0, Direction::Outgoing)
            .filter(|e| e.target() == dst.0 && *e.weight() == edge)
            .map(|e| e.id())
            .min();
        match found {
            Some(e) => self.g.remove_edge(e).is_some(),
            None => false,
        }
    }

    /// Every edge as `(source, target, edge)`, sorted by source, target and edge insertion order.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// b.output(&[x])?;
    /// assert_eq!(b.graph().edges().len(), 1);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn edges(&self) -> Vec<(NodeId, NodeId, Edge)> {
        let mut all: Vec<_> = self
            .g
            .edge_indices()
            .filter_map(|e| {
                let (s, t) = self.g.edge_endpoints(e)?;
                Some((s.index(), t.index(), e.index(), *self.g.edge_weight(e)?))
            })
            .collect();
        all.sort_by_key(|&(s, t, e, _)| (s, t, e));
        all.into_iter()
            .map(|(s, t, _, w)| (NodeId::new(s), NodeId::new(t), w))
            .collect()
    }

    /// The edges into `id` as `(source, edge)`, sorted by source and insertion order.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Edge, GraphBuilder};
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// b.output(&[x])?;
    /// let out = b.graph().output_node().unwrap();
    /// assert_eq!(b.graph().in_edges(out), vec![(x.node, Edge::Data { arg: 0, item: 0, src_output: 0 })]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn in_edges(&self, id: NodeId) -> Vec<(NodeId, Edge)> {
        self.directed_edges(id, Direction::Incoming)
    }

    /// The edges out of `id` as `(target, edge)`, sorted by target and insertion order.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// b.output(&[x, x])?;
    /// assert_eq!(b.graph().out_edges(x.node).len(), 2);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn out_edges(&self, id: NodeId) -> Vec<(NodeId, Edge)> {
        self.directed_edges(id, Direction::Outgoing)
    }

    fn directed_edges(&self, id: NodeId, dir: Direction) -> Vec<(NodeId, Edge)> {
        if !self.contains(id) {
            return Vec::new();
        }
        let mut v: Vec<_> = self
            .g
            .edges_directed(id.0, dir)
            .map(|e| {
                let other = if dir == Direction::Incoming {
                    e.source()
                } else {
                    e.target()
                };
                (other.index(), e.id().index(), *e.weight())
            })
            .collect();
        v.sort_by_key(|&(o, e, _)| (o, e));
        v.into_iter().map(|(o, _, w)| (NodeId::new(o), w)).collect()
    }

    /// Removes node `id` and every edge touching it, returning the node. Removing a node that still
    /// has users leaves their slots empty, which [`Graph::validate`] reports.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Graph, Node, NodeKind, NodeId};
    /// let mut g = Graph::new();
    /// let id = g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    /// assert!(g.remove_node(id).is_ok());
    /// assert!(g.remove_node(id).is_err());
    /// ```
    pub fn remove_node(&mut self, id: NodeId) -> Result<Node> {
        self.g.remove_node(id.0).ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                format!("remove_node: node {id} does not exist"),
            )
        })
    }

    /// The graph inputs, ordered by input index (ties, which validation rejects, by node index).
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.input("y", m);
    /// assert_eq!(b.graph().inputs(), vec![x, y]);
    /// ```
    pub fn inputs(&self) -> Vec<ValueRef> {
        let mut v: Vec<(usize, NodeId)> = self
            .g
            .node_indices()
            .filter_map(|n| match &self.g[n].kind {
                NodeKind::Input { index, .. } => Some((*index, NodeId(n))),
                _ => None,
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, id)| ValueRef::from(id)).collect()
    }

    /// The output sink (the first by index if, invalidly, there are several).
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// let mut b = GraphBuilder::new();
    /// assert!(b.graph().output_node().is_none());
    /// b.output(&[])?;
    /// assert!(b.graph().output_node().is_some());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn output_node(&self) -> Option<NodeId> {
        self.g
            .node_indices()
            .find(|&n| self.g[n].is_output())
            .map(NodeId)
    }

    /// The graph results in order. Errors if the outputs are not set or a result is missing.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    /// assert!(b.graph().outputs().is_err());
    /// b.output(&[x, x])?;
    /// assert_eq!(b.graph().outputs()?, vec![x, x]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn outputs(&self) -> Result<Vec<ValueRef>> {
        let out = self.output_node().ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                "graph has no outputs (call GraphBuilder::output)",
            )
        })?;
        self.args_of(out)
    }

    /// The distinct nodes that read any output of `id` through data edges, in index order (the
    /// output sink included). Order edges do not make a user.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::mul", OpClass::Elementwise, vec![x.into(), x.into()], vec![m])?;
    /// assert_eq!(b.graph().users(x.node), vec![y[0].node]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .out_edges(id)
            .into_iter()
            .filter(|(_, e)| e.is_data())
            .map(|(t, _)| t)
            .collect();
        v.dedup();
        v
    }

    /// The distinct nodes that read value `v` through data edges, in index order.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let parts = b.op("tp::split", OpClass::View, vec![x.into()], vec![m.clone(), m.clone()])?;
    /// let n = b.op("tp::neg", OpClass::Elementwise, vec![parts[1].into()], vec![m])?;
    /// assert!(b.graph().value_users(parts[0]).is_empty());
    /// assert_eq!(b.graph().value_users(parts[1]), vec![n[0].node]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn value_users(&self, v: ValueRef) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = self
            .out_edges(v.node)
            .into_iter()
            .filter(|(_, e)| matches!(e, Edge::Data { src_output, .. } if *src_output == v.output))
            .map(|(t, _)| t)
            .collect();
        out.dedup();
        out
    }

    /// The nodes `id` must run after because of order edges (sources of its incoming order edges),
    /// in index order.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let r = b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
    /// let w = b.op_node("mylib::zero_", OpClass::Mutating, vec![x.into()], vec![])?;
    /// b.order(w, r[0].node)?;
    /// assert_eq!(b.graph().order_predecessors(w), vec![r[0].node]);
    /// assert_eq!(b.graph().order_successors(r[0].node), vec![w]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn order_predecessors(&self, id: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .in_edges(id)
            .into_iter()
            .filter(|(_, e)| !e.is_data())
            .map(|(s, _)| s)
            .collect();
        v.dedup();
        v
    }

    /// The nodes that must run after `id` because of order edges, in index order.
    ///
    /// ```
    /// use tensorplay_ir::graph::Graph;
    /// use tensorplay_ir::graph::NodeId;
    /// assert!(Graph::new().order_successors(NodeId::new(0)).is_empty());
    /// ```
    pub fn order_successors(&self, id: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .out_edges(id)
            .into_iter()
            .filter(|(_, e)| !e.is_data())
            .map(|(t, _)| t)
            .collect();
        v.dedup();
        v
    }

    /// The producers of `id`'s tensor arguments in argument order: one [`ValueRef`] per tensor
    /// slot (a plain tensor, a present optional tensor, each item of a list; for the output sink,
    /// each result). Errors name the node and the slot when a slot has no edge or several.
    ///
    /// ```
    /// use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.input("y", m.clone());
    /// let c = b.op("tp::cat", OpClass::Opaque,
    ///     vec![BuilderArg::TensorList(vec![y, x]), BuilderArg::named("dim", 0i64)],
    ///     vec![TensorMeta::new(&[4], DType::F32, Device::Cpu)])?;
    /// assert_eq!(b.graph().args_of(c[0].node)?, vec![y, x]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn args_of(&self, id: NodeId) -> Result<Vec<ValueRef>> {
        let node = self.node(id).ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                format!("args_of: node {id} does not exist"),
            )
        })?;
        let slots = node.tensor_slots();
        let mut filled: Vec<Vec<ValueRef>> = vec![Vec::new(); slots.len()];
        for (src, e) in self.in_edges(id) {
            if let Edge::Data {
                arg,
                item,
                src_output,
            } = e
                && let Some(k) = slots.iter().position(|&s| s == (arg, item))
            {
                filled[k].push(ValueRef::new(src, src_output));
            }
        }
        let mut out = Vec::with_capacity(slots.len());
        for (k, vals) in filled.into_iter().enumerate() {
            match vals.as_slice() {
                [v] => out.push(*v),
                _ => {
                    let (arg, item) = slots[k];
                    return Err(Error::compile(
                        CompileKind::Graph,
                        format!(
                            "{}: {} has {} data edges (expected exactly one)",
                            self.describe(id),
                            naming::slot_name(node, arg, item),
                            vals.len()
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Redirects every data use of `old` to `new` (same slot, new producer) and returns how many
    /// uses moved. Uses by `new`'s own node are left alone, so replacing `x` by `f(x)` does not make
    /// `f` read itself. Order edges are not touched.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let n1 = b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
    /// let n2 = b.op("tp::neg", OpClass::Elementwise, vec![n1[0].into()], vec![m])?;
    /// b.output(&n2)?;
    /// let mut g = b.finish()?;
    /// // neg(neg(x)) == x
    /// assert_eq!(g.replace_uses(n2[0], x)?, 1);
    /// g.remove_node(n2[0].node)?;
    /// g.remove_node(n1[0].node)?;
    /// g.validate()?;
    /// assert_eq!(g.outputs()?, vec![x]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn replace_uses(&mut self, old: ValueRef, new: ValueRef) -> Result<usize> {
        if !self.contains(old.node) {
            return Err(Error::compile(
                CompileKind::Graph,
                format!(
                    "replace_uses: the replaced node {} does not exist",
                    old.node
                ),
            ));
        }
        let n_out = self.node(new.node).map(|n| n.outputs.len());
        match n_out {
            None => {
                return Err(Error::compile(
                    CompileKind::Graph,
                    format!(
                        "replace_uses: the replacement node {} does not exist",
                        new.node
                    ),
                ));
            }
            Some(n) if new.output >= n => {
                return Err(Error::compile(
                    CompileKind::Graph,
                    format!(
                        "replace_uses: {} has {n} output(s), so output {} does not exist",
                        self.describe(new.node),
                        new.output
                    ),
                ));
            }
            _ => {}
        }
        if old == new {
            return Ok(0);
        }
        let mut moved: Vec<_> = self
            .g
            .edges_directed(old.node.0, Direction::Outgoing)
            .filter_map(|e| match *e.weight() {
                Edge::Data {
                    arg,
                    item,
                    src_output,
                } if src_output == old.output && e.target() != new.node.0 => {
                    Some((e.id(), e.target(), arg, item))
                }
                _ => None,
            })
            .collect();
        moved.sort_by_key(|m| m.0);
        for &(eid, target, arg, item) in &moved {
            self.g.remove_edge(eid);
            self.g.add_edge(
                new.node.0,
                target,
                Edge::Data {
                    arg,
                    item,
                    src_output: new.output,
                },
            );
        }
        Ok(moved.len())
    }

    /// One past the largest node index ever used (sizes per-node tables).
    pub(crate) fn bound(&self) -> usize {
        self.g.node_bound()
    }

    /// Kahn's algorithm with ties broken by the smallest node index. Returns the order (possibly
    /// partial) and whether it covers every node.
    fn kahn(&self) -> (Vec<NodeId>, bool) {
        let bound = self.bound();
        let mut indegree = vec![0usize; bound];
        for e in self.g.edge_indices() {
            if let Some((_, t)) = self.g.edge_endpoints(e) {
                indegree[t.index()] += 1;
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = self
            .g
            .node_indices()
            .filter(|n| indegree[n.index()] == 0)
            .map(|n| Reverse(n.index()))
            .collect();
        let mut order = Vec::with_capacity(self.g.node_count());
        while let Some(Reverse(i)) = ready.pop() {
            let id = NodeId::new(i);
            order.push(id);
            for e in self.g.edges_directed(id.0, Direction::Outgoing) {
                let t = e.target().index();
                indegree[t] -= 1;
                if indegree[t] == 0 {
                    ready.push(Reverse(t));
                }
            }
        }
        let complete = order.len() == self.g.node_count();
        (order, complete)
    }

    /// Every node in a topological order of data and order edges; among ready nodes the smallest
    /// index goes first, so the order is deterministic. Errors on a cycle, naming its nodes.
    ///
    /// ```
    /// use tensorplay_ir::graph::{Edge, GraphBuilder};
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let a = b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
    /// let c = b.op("tp::abs", OpClass::Elementwise, vec![a[0].into()], vec![m])?;
    /// b.output(&c)?;
    /// let mut g = b.finish()?;
    /// assert_eq!(g.topo_order()?[..3], [x.node, a[0].node, c[0].node]);
    /// g.add_edge(c[0].node, a[0].node, Edge::Order)?; // abs before neg: impossible
    /// assert!(g.topo_order().is_err());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn topo_order(&self) -> Result<Vec<NodeId>> {
        let (order, complete) = self.kahn();
        if complete {
            Ok(order)
        } else {
            Err(self.cycle_error())
        }
    }

    fn cycle_error(&self) -> Error {
        let naming = Naming::new(self);
        let mut sccs: Vec<Vec<NodeId>> = petgraph::algo::tarjan_scc(&self.g)
            .into_iter()
            .map(|c| {
                let mut c: Vec<NodeId> = c.into_iter().map(NodeId).collect();
                c.sort();
                c
            })
            .filter(|c| c.len() > 1 || self.g.find_edge(c[0].0, c[0].0).is_some())
            .collect();
        sccs.sort();
        let members = sccs
            .first()
            .map(|c| {
                c.iter()
                    .map(|&id| naming.describe(self, id))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "unknown nodes".into());
        Error::compile(
            CompileKind::Graph,
            format!("graph has a cycle (through data or order edges) involving {members}"),
        )
    }

    /// A short description of node `id` for messages, using the printed numbering:
    /// `%3 = tp::add`, `%1 = constant(2.0)`, `input %x`, `return`.
    ///
    /// ```
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// assert_eq!(b.graph().describe(x.node), "input %x");
    /// assert_eq!(b.graph().describe(y[0].node), "%0 = tp::exp");
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn describe(&self, id: NodeId) -> String {
        Naming::new(self).describe(self, id)
    }
}
