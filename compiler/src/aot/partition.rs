//! Splits a joint (forward + backward) graph into a forward graph and a backward graph.
//!
//! The joint graph's inputs are the primals then the tangents (one per differentiable output);
//! its outputs are the forward outputs then the input gradients. A node belongs to the backward
//! when it depends on a tangent or only the gradients need it; every other node stays in the
//! forward (dead ones too, so their size guards are still checked — in the half that has their
//! operands). Values the forward computes
//! (or primal inputs) that backward nodes read are **saved**: extra outputs of the forward graph
//! and the first inputs of the backward graph.
//!
//! Save vs recompute: an elementwise forward value whose operands are all saved anyway (or are
//! primal inputs or constants) is recomputed in the backward instead of saved — one buffer less
//! to keep alive between the passes, and the recomputation fuses into the backward's kernels —
//! unless it calls a transcendental function (`tanh`, `exp`, `erf`, `pow`, …) and the forward
//! writes it to memory anyway (a forward output, or an operand of a matrix product or another
//! non-elementwise op): saving it then costs no extra traffic, while recomputing it would
//! evaluate the function again (the transformer's `gelu(tanh)` before its down projection).
//!
//! Sizes: both halves keep the joint graph's symbols, so a size the backward computes with (a
//! view back to `[s0, s1]`, a mean's divisor) means what it meant in the joint. A symbol that
//! no saved value or tangent carries as a dim of its own is bound by a **shape carrier**: the
//! primal input's shape, passed to the backward as a data-less tensor after the tangents. The
//! joint's symbolic guards go to the forward when the primals bind all their symbols, else to
//! the backward. Under dynamic shapes a static dim of 2 or more of a saved value or tangent (a
//! size no symbolic meta rule knew, such as an opaque custom op's result) becomes a fresh symbol
//! bound from that input.

use std::collections::{HashMap, HashSet};

use tensorplay_kernel::lowering::pointwise;
use tensorplay_runtime::ops::table::OpTable;

use tensorplay_ir::graph::{Arg, BuilderArg, GraphBuilder, NodeKind, OpCall, SizeGuard};
use tensorplay_ir::{
    CompileKind, Dim, Error, Graph, NodeId, OpClass, Result, TensorMeta, ValueRef,
};

/// The [`ScalarExpr::cost`](tensorplay_ir::ScalarExpr::cost) of one call of a transcendental
/// function (`exp`, `tanh`, `erf`, …): an expression costing this much or more is not recomputed
/// in the backward when the forward stores it anyway.
const TRANSCENDENTAL_COST: usize = 8;

/// The two halves of a joint graph.
pub(crate) struct Partition {
    /// Inputs: the primals. Outputs: the forward outputs, then the saved values.
    pub forward: Graph,
    /// Inputs: the saved values, the tangents, then the shape carriers. Outputs: the gradients.
    pub backward: Graph,
    /// The primal inputs whose shapes the backward takes as shape carriers, in input order.
    pub shape_carriers: Vec<usize>,
    /// How many values the forward saves for the backward.
    pub num_saved: usize,
    /// Forward values recomputed in the backward instead of saved (for `explain()`).
    pub recomputed: usize,
    /// The primal inputs among the saved values (the backward reads them as they are).
    pub saved_inputs: Vec<usize>,
}

fn graph_err(msg: impl Into<String>) -> Error {
    Error::compile(CompileKind::Graph, msg.into())
}

/// The symbols `meta` has as dims of their own.
fn bare_symbols(meta: &TensorMeta) -> impl Iterator<Item = u32> + '_ {
    meta.shape.iter().filter_map(|d| match d {
        Dim::Sym(k) => Some(*k),
        _ => None,
    })
}

/// `meta` for a backward input: with `dynamic` shapes, a static dim of 2 or more becomes a fresh
/// symbol. Under dynamic capture such a dim is a value's example size when no symbolic meta rule
/// knew its shape (an opaque custom op's result); the executor recomputes every shape per call,
/// so binding it from the input keeps the backward valid at other sizes instead of guarding on
/// the example one.
fn backward_input_meta(meta: &TensorMeta, dynamic: bool, next_sym: &mut u32) -> TensorMeta {
    let mut m = meta.clone();
    if !dynamic {
        return m;
    }
    for d in m.shape.iter_mut() {
        if let Dim::Static(n) = *d
            && n >= 2
        {
            *d = Dim::Sym(*next_sym);
            *next_sym += 1;
        }
    }
    m
}

/// Partitions `joint` (`num_primals` primal inputs, `num_outputs` forward outputs), captured
/// with `dynamic` shapes or not.
pub(crate) fn partition(
    joint: &Graph,
    num_primals: usize,
    num_outputs: usize,
    dynamic: bool,
) -> Result<Partition> {
    let j = Joint::new(joint, num_primals, num_outputs)?;
    let tangent_dep = j.tangent_dependents()?;
    let halves = j.split_nodes(&tangent_dep)?;
    let mut saved = j.saved_values(&halves)?;
    let recompute = j.recompute_instead_of_saving(&halves, &mut saved)?;
    // Deterministic order: by producer position, then output index.
    let pos: HashMap<NodeId, usize> = j.order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    saved.sort_by_key(|v| (pos[&v.node], v.output));

    let mut fb = j.forward_graph(&halves, &saved)?;
    let (mut bb, shape_carriers) = j.backward_graph(&halves, &recompute, &saved, dynamic)?;
    let primal_symbols: HashSet<u32> = j
        .primals()
        .iter()
        .filter_map(|&v| joint.meta(v))
        .flat_map(bare_symbols)
        .collect();
    for g in joint.sym_guards() {
        if g.expr.symbols().iter().all(|k| primal_symbols.contains(k)) {
            fb.sym_guard(*g);
        } else {
            bb.sym_guard(*g);
        }
    }
    let saved_inputs = (0..num_primals)
        .filter(|&i| saved.contains(&j.primals()[i]))
        .collect();
    Ok(Partition {
        saved_inputs,
        forward: fb.finish()?,
        backward: bb.finish()?,
        shape_carriers,
        num_saved: saved.len(),
        recomputed: recompute.len(),
    })
}

/// The joint graph with what partitioning reads of it once: its topological order, inputs
/// (primals, then tangents) and outputs (forward outputs, then gradients).
struct Joint<'g> {
    graph: &'g Graph,
    order: Vec<NodeId>,
    inputs: Vec<ValueRef>,
    outputs: Vec<ValueRef>,
    num_primals: usize,
    num_outputs: usize,
    primal_nodes: HashSet<NodeId>,
}

/// Which half each op or constant node of the joint graph goes to.
struct Halves {
    in_forward: HashSet<NodeId>,
    in_backward: HashSet<NodeId>,
}

impl<'g> Joint<'g> {
    fn new(graph: &'g Graph, num_primals: usize, num_outputs: usize) -> Result<Joint<'g>> {
        let order = graph.topo_order()?;
        let inputs = graph.inputs();
        let outputs = graph.outputs()?;
        if num_outputs > outputs.len() || num_primals > inputs.len() {
            return Err(graph_err(
                "partition: the joint graph has too few inputs or outputs",
            ));
        }
        let primal_nodes: HashSet<NodeId> = inputs[..num_primals].iter().map(|v| v.node).collect();
        Ok(Joint {
            graph,
            order,
            inputs,
            outputs,
            num_primals,
            num_outputs,
            primal_nodes,
        })
    }

    fn primals(&self) -> &[ValueRef] {
        &self.inputs[..self.num_primals]
    }

    fn tangents(&self) -> &[ValueRef] {
        &self.inputs[self.num_primals..]
    }

    fn forward_outputs(&self) -> &[ValueRef] {
        &self.outputs[..self.num_outputs]
    }

    fn gradients(&self) -> &[ValueRef] {
        &self.outputs[self.num_outputs..]
    }

    fn is_const(&self, n: NodeId) -> bool {
        self.graph
            .node(n)
            .is_some_and(|x| matches!(x.kind, NodeKind::Constant(_)))
    }

    fn is_op_or_const(&self, n: NodeId) -> bool {
        self.graph
            .node(n)
            .is_some_and(|x| matches!(x.kind, NodeKind::Op(_) | NodeKind::Constant(_)))
    }

    /// The tangent inputs and the nodes that depend on one; an error for a graph with
    /// mutations (they are not split).
    fn tangent_dependents(&self) -> Result<HashSet<NodeId>> {
        let joint = self.graph;
        let mut tangent_dep: HashSet<NodeId> = self.tangents().iter().map(|v| v.node).collect();
        for &n in &self.order {
            let node = joint
                .node(n)
                .ok_or_else(|| graph_err(format!("node {n} vanished")))?;
            if let NodeKind::Op(call) = &node.kind {
                if call.class == OpClass::Mutating || !joint.order_predecessors(n).is_empty() {
                    return Err(Error::compile(
                        CompileKind::Capture,
                        format!(
                            "compiled training: {} mutates a tensor; graphs with mutations are \
                             not split into forward and backward",
                            joint.describe(n)
                        ),
                    ));
                }
                if joint
                    .args_of(n)?
                    .iter()
                    .any(|v| tangent_dep.contains(&v.node))
                {
                    tangent_dep.insert(n);
                }
            }
        }
        Ok(tangent_dep)
    }

    /// The nodes `roots` depend on (their own nodes included).
    fn ancestors(&self, roots: &[ValueRef]) -> Result<HashSet<NodeId>> {
        let mut seen = HashSet::new();
        let mut stack: Vec<NodeId> = roots.iter().map(|v| v.node).collect();
        while let Some(n) = stack.pop() {
            if seen.insert(n) {
                stack.extend(self.graph.args_of(n)?.iter().map(|v| v.node));
            }
        }
        Ok(seen)
    }

    /// Forward: what the outputs need, and dead nodes whose operands the forward has (so their
    /// size guards are checked there). Backward: every other op or constant (everything that
    /// depends on a tangent among them).
    fn split_nodes(&self, tangent_dep: &HashSet<NodeId>) -> Result<Halves> {
        let fw_needed = self.ancestors(self.forward_outputs())?;
        let bw_needed = self.ancestors(self.gradients())?;
        let mut in_forward: HashSet<NodeId> = HashSet::new();
        for &n in &self.order {
            if !self.is_op_or_const(n) || tangent_dep.contains(&n) {
                continue;
            }
            let dead_here =
                !bw_needed.contains(&n)
                    && self.graph.args_of(n)?.iter().all(|v| {
                        in_forward.contains(&v.node) || self.primal_nodes.contains(&v.node)
                    });
            if fw_needed.contains(&n) || dead_here {
                in_forward.insert(n);
            }
        }
        let in_backward: HashSet<NodeId> = self
            .order
            .iter()
            .copied()
            .filter(|&n| self.is_op_or_const(n) && !in_forward.contains(&n))
            .collect();
        Ok(Halves {
            in_forward,
            in_backward,
        })
    }

    /// Saved: forward (or primal) values read by backward nodes or returned as gradients, in
    /// order of first use.
    fn saved_values(&self, halves: &Halves) -> Result<Vec<ValueRef>> {
        let mut saved: Vec<ValueRef> = Vec::new();
        let note = |v: ValueRef, saved: &mut Vec<ValueRef>| {
            if (halves.in_forward.contains(&v.node) || self.primal_nodes.contains(&v.node))
                && !self.is_const(v.node)
                && !saved.contains(&v)
            {
                saved.push(v);
            }
        };
        for &n in &self.order {
            if halves.in_backward.contains(&n) {
                for v in self.graph.args_of(n)? {
                    note(v, &mut saved);
                }
            }
        }
        for &v in self.gradients() {
            note(v, &mut saved);
        }
        Ok(saved)
    }

    /// Replaces in `saved` each cheap elementwise forward value whose operands are kept anyway
    /// (saved, primal inputs or constants) by its primal operands, until none is left; returns
    /// the nodes the backward recomputes instead.
    fn recompute_instead_of_saving(
        &self,
        halves: &Halves,
        saved: &mut Vec<ValueRef>,
    ) -> Result<HashSet<NodeId>> {
        let joint = self.graph;
        let mut recompute: HashSet<NodeId> = HashSet::new();
        loop {
            let mut changed = false;
            for i in 0..saved.len() {
                let v = saved[i];
                let Some(NodeKind::Op(call)) = joint.node(v.node).map(|x| &x.kind) else {
                    continue;
                };
                if call.class != OpClass::Elementwise
                    || !halves.in_forward.contains(&v.node)
                    || self.too_costly_to_recompute(v, call, halves)?
                {
                    continue;
                }
                let args = joint.args_of(v.node)?;
                let kept = args.iter().all(|a| {
                    self.is_const(a.node)
                        || self.primal_nodes.contains(&a.node)
                        || saved.contains(a)
                });
                if kept {
                    recompute.insert(v.node);
                    for a in args {
                        if self.primal_nodes.contains(&a.node) && !saved.contains(&a) {
                            saved.push(a);
                        }
                    }
                    saved.remove(i);
                    changed = true;
                    break;
                }
            }
            if !changed {
                break;
            }
        }
        Ok(recompute)
    }

    /// Whether `v` (an elementwise forward value) calls a transcendental function and is written
    /// to memory by the forward anyway: a forward output, or read by a forward op that is not
    /// elementwise (so no fusion region keeps it in registers).
    fn too_costly_to_recompute(&self, v: ValueRef, call: &OpCall, halves: &Halves) -> Result<bool> {
        let costly =
            pointwise(&OpTable, call)?.is_some_and(|(expr, _)| expr.cost() >= TRANSCENDENTAL_COST);
        if !costly {
            return Ok(false);
        }
        if self.forward_outputs().contains(&v) {
            return Ok(true);
        }
        Ok(self.graph.users(v.node).into_iter().any(|u| {
            halves.in_forward.contains(&u)
                && matches!(
                    self.graph.node(u).map(|x| &x.kind),
                    Some(NodeKind::Op(c)) if c.class != OpClass::Elementwise
                )
        }))
    }

    /// The forward graph (without its symbolic guards): the primals as inputs, the forward
    /// nodes, the forward outputs then `saved` as outputs, and the size guards on its values.
    fn forward_graph(&self, halves: &Halves, saved: &[ValueRef]) -> Result<GraphBuilder> {
        let joint = self.graph;
        let mut fb = GraphBuilder::new();
        let mut fmap: HashMap<ValueRef, ValueRef> = HashMap::new();
        for (i, &v) in self.primals().iter().enumerate() {
            let meta = joint
                .meta(v)
                .ok_or_else(|| graph_err("input without metadata"))?;
            fmap.insert(v, fb.input(format!("x{i}"), meta.clone()));
        }
        for &n in &self.order {
            if halves.in_forward.contains(&n) {
                copy_node(joint, n, &mut fb, &mut fmap)?;
            }
        }
        let mut fouts: Vec<ValueRef> = Vec::new();
        for v in self.forward_outputs().iter().chain(saved) {
            fouts.push(*fmap.get(v).ok_or_else(|| {
                graph_err(format!("partition: forward value {v:?} was not copied"))
            })?);
        }
        fb.output(&fouts)?;
        copy_guards(joint, &fmap, &mut fb);
        Ok(fb)
    }

    /// The backward graph (without its symbolic guards) and its shape carriers: `saved`, the
    /// tangents and the shape carriers as inputs, the backward nodes and the `recompute`d
    /// ones (with the constants they read), the gradients as outputs, and the size guards on
    /// its own values.
    fn backward_graph(
        &self,
        halves: &Halves,
        recompute: &HashSet<NodeId>,
        saved: &[ValueRef],
        dynamic: bool,
    ) -> Result<(GraphBuilder, Vec<usize>)> {
        let joint = self.graph;
        let mut bb = GraphBuilder::new();
        let mut bmap: HashMap<ValueRef, ValueRef> = HashMap::new();
        let shape_carriers = self.backward_inputs(saved, dynamic, &mut bb, &mut bmap)?;
        for &n in &self.order {
            let wanted = halves.in_backward.contains(&n) || recompute.contains(&n);
            if !wanted {
                continue;
            }
            // Constants the backward reads are copied; the forward's are its own.
            for v in joint.args_of(n)? {
                if self.is_const(v.node) && !bmap.contains_key(&v) {
                    copy_node(joint, v.node, &mut bb, &mut bmap)?;
                }
            }
            if !bmap.contains_key(&ValueRef::new(n, 0)) || !self.is_const(n) {
                copy_node(joint, n, &mut bb, &mut bmap)?;
            }
        }
        let mut bouts = Vec::new();
        for v in self.gradients() {
            if self.is_const(v.node) && !bmap.contains_key(v) {
                copy_node(joint, v.node, &mut bb, &mut bmap)?;
            }
            bouts.push(*bmap.get(v).ok_or_else(|| {
                graph_err(format!(
                    "partition: gradient value {v:?} is not computed by the backward"
                ))
            })?);
        }
        bb.output(&bouts)?;
        let forward_owned =
            |n: NodeId| halves.in_forward.contains(&n) || self.primal_nodes.contains(&n);
        copy_guards_backward(joint, &bmap, &forward_owned, &mut bb);
        Ok((bb, shape_carriers))
    }

    /// The backward's inputs, added to `bb` (and mapped in `bmap`): the saved values, the
    /// tangents, then a shape carrier for each primal with a symbol neither binds. Returns the
    /// primals that got a shape carrier.
    fn backward_inputs(
        &self,
        saved: &[ValueRef],
        dynamic: bool,
        bb: &mut GraphBuilder,
        bmap: &mut HashMap<ValueRef, ValueRef>,
    ) -> Result<Vec<usize>> {
        let joint = self.graph;
        let mut bound: HashSet<u32> = HashSet::new();
        let mut next_sym = self
            .inputs
            .iter()
            .filter_map(|&v| joint.meta(v))
            .flat_map(bare_symbols)
            .max()
            .map_or(0, |k| k + 1);
        for (i, &v) in saved.iter().enumerate() {
            let meta = joint
                .meta(v)
                .ok_or_else(|| graph_err("saved value without metadata"))?;
            let meta = backward_input_meta(meta, dynamic, &mut next_sym);
            bound.extend(bare_symbols(&meta));
            bmap.insert(v, bb.input(format!("saved{i}"), meta));
        }
        for (i, &v) in self.tangents().iter().enumerate() {
            let meta = joint
                .meta(v)
                .ok_or_else(|| graph_err("tangent without metadata"))?;
            let meta = backward_input_meta(meta, dynamic, &mut next_sym);
            bound.extend(bare_symbols(&meta));
            bmap.insert(v, bb.input(format!("tangent{i}"), meta));
        }
        let mut shape_carriers = Vec::new();
        for (i, &v) in self.primals().iter().enumerate() {
            let meta = joint
                .meta(v)
                .ok_or_else(|| graph_err("input without metadata"))?;
            if bare_symbols(meta).any(|k| !bound.contains(&k)) {
                bound.extend(bare_symbols(meta));
                // Not an input of the joint graph's: `bmap` does not map the primal to it.
                bb.input(format!("shape{i}"), meta.clone());
                shape_carriers.push(i);
            }
        }
        Ok(shape_carriers)
    }
}

/// Copies op or constant node `n` of `joint` into `b`, mapping its outputs.
pub(super) fn copy_node(
    joint: &Graph,
    n: NodeId,
    b: &mut GraphBuilder,
    map: &mut HashMap<ValueRef, ValueRef>,
) -> Result<()> {
    let node = joint
        .node(n)
        .ok_or_else(|| graph_err(format!("node {n} vanished")))?;
    match &node.kind {
        NodeKind::Constant(c) => {
            let device = node.outputs.first().map(|m| m.device).unwrap_or_default();
            let v = b.constant(c.clone(), device)?;
            map.insert(ValueRef::new(n, 0), v);
        }
        NodeKind::Op(call) => {
            let mut producers = joint.args_of(n)?.into_iter();
            let mut take = || -> Result<ValueRef> {
                let v = producers
                    .next()
                    .ok_or_else(|| graph_err(format!("{}: missing argument", joint.describe(n))))?;
                map.get(&v).copied().ok_or_else(|| {
                    graph_err(format!(
                        "partition: {} reads output {} of {}, which this half does not have",
                        joint.describe(n),
                        v.output,
                        joint.describe(v.node)
                    ))
                })
            };
            let mut args = Vec::with_capacity(call.args.len());
            for a in &call.args {
                args.push(match a {
                    Arg::Tensor => BuilderArg::Tensor(take()?),
                    Arg::OptionalTensor { present: true } => {
                        BuilderArg::OptionalTensor(Some(take()?))
                    }
                    Arg::OptionalTensor { present: false } => BuilderArg::OptionalTensor(None),
                    Arg::TensorList { len } => {
                        BuilderArg::TensorList((0..*len).map(|_| take()).collect::<Result<_>>()?)
                    }
                    Arg::Attr { name, value } => BuilderArg::Attr {
                        name: name.clone(),
                        value: value.clone(),
                    },
                });
            }
            let id = b.op_node(&call.name, call.class, args, node.outputs.to_vec())?;
            if let Some(r) = &call.barrier_reason {
                b.set_barrier_reason(id, r.clone())?;
            }
            for i in 0..node.outputs.len() {
                map.insert(ValueRef::new(n, i), ValueRef::new(id, i));
            }
        }
        _ => {
            return Err(graph_err(format!(
                "partition: {} is not an op",
                joint.describe(n)
            )));
        }
    }
    Ok(())
}

fn remap(g: &SizeGuard, v: ValueRef) -> SizeGuard {
    SizeGuard {
        value: v,
        dim: g.dim,
        expected: g.expected.clone(),
    }
}

/// The joint graph's size guards on values `map` has (the forward's values and primal inputs).
fn copy_guards(joint: &Graph, map: &HashMap<ValueRef, ValueRef>, b: &mut GraphBuilder) {
    for g in joint.size_guards() {
        if let Some(&v) = map.get(&g.value) {
            b.size_guard(remap(g, v));
        }
    }
}

/// The backward's size guards: on its own values (the forward checks those on the values it
/// computes, saved ones included, and on the primals).
fn copy_guards_backward(
    joint: &Graph,
    map: &HashMap<ValueRef, ValueRef>,
    forward_owned: &dyn Fn(NodeId) -> bool,
    b: &mut GraphBuilder,
) {
    for g in joint.size_guards() {
        if forward_owned(g.value.node) {
            continue;
        }
        if let Some(&v) = map.get(&g.value) {
            b.size_guard(remap(g, v));
        }
    }
}
