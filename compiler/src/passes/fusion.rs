//! Fusion partition: which op nodes run together in one generated loop nest, and in what order
//! the regions and the remaining nodes run.
//!
//! The rules (DESIGN.md §5.2):
//!
//! - Elementwise ops with a scalar lowering fuse into maximal **convex** regions: contracting a
//!   region to one step never creates a cycle through anything outside it (order edges around
//!   mutation included), so no read moves across a write.
//! - A region iterates over one shape. Every value that leaves a region has that shape; a node
//!   of a smaller, broadcastable shape lives inside only when all its users do (it is recomputed
//!   at broadcast indices), otherwise it becomes the output of a region of its own shape.
//! - A reduction (`tp::sum`, `tp::mean`, ...) or a last-dim `tp::softmax` / `tp::log_softmax`
//!   absorbs the elementwise producers used by nothing else as a prologue; its result is the
//!   region's only output.
//! - Views of graph inputs, constants and barrier outputs are free steps that run before their
//!   readers (regions load through them); a view of a value computed in a region makes that
//!   value a region output and runs as a step of its own.
//! - Opaque, mutating and non-lowerable ops run individually, each with the reason it splits
//!   fusion.
//!
//! Regions are numbered in topological order of their first node and the steps follow a
//! deterministic topological order, so plans (and [`FusionPlan::explain`]) are stable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use tensorplay_ir::CompileKind;

use tensorplay_ir::graph::{Graph, NodeId, NodeKind, ValueRef};
use tensorplay_ir::{Device, Dim, Error, Result};
use tensorplay_kernel::classify::{Class, classify};
use tensorplay_runtime::ops::table::OpTable;

use super::logging;
use super::names::Names;
use super::region::{Region, RegionKind};

/// One step of a plan's execution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// Run fused region `regions[id]`.
    Region(usize),
    /// Run one op node on its own (a barrier or a view); [`FusionPlan::node_steps`] says why.
    Node(NodeId),
}

/// Why an op node runs as its own step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeStepKind {
    /// The node splits fusion: opaque, mutating, without a lowering, a softmax over a non-last
    /// dim, or a view of a value computed inside a region.
    Barrier,
    /// A free view (of a graph input, a constant or another step's output): metadata only,
    /// regions load through its result. It does not split fusion.
    View,
}

/// An op node that runs as its own step, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeStep {
    /// Barrier or free view.
    pub kind: NodeStepKind,
    /// Human-readable reason (`mutates x`, `triton op`, `tp::argmax has no scalar lowering`...).
    pub reason: String,
}

/// The result of [`partition`]: fused regions and the order in which regions and individual
/// nodes run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FusionPlan {
    /// Fused regions, numbered in topological order of their first node.
    pub regions: Vec<Region>,
    /// Execution order: every op node of the graph is in exactly one step.
    pub steps: Vec<Step>,
    /// For each [`Step::Node`], why it runs on its own.
    pub node_steps: BTreeMap<NodeId, NodeStep>,
}

impl FusionPlan {
    /// The region containing `node`, if any.
    ///
    /// ```
    /// use tensorplay_compiler::passes::fusion::partition;
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::relu", OpClass::Elementwise, vec![x.into()], vec![m])?;
    /// b.output(&y)?;
    /// let plan = partition(&b.finish()?)?;
    /// assert_eq!(plan.region_of(y[0].node), Some(0));
    /// assert_eq!(plan.region_of(x.node), None);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn region_of(&self, node: NodeId) -> Option<usize> {
        self.regions.iter().find(|r| r.contains(node)).map(|r| r.id)
    }

    /// Why `node` runs as its own step (`None` for nodes inside regions and non-op nodes).
    ///
    /// ```
    /// use tensorplay_compiler::passes::fusion::partition;
    /// use tensorplay_ir::graph::GraphBuilder;
    /// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
    /// let m = TensorMeta::new(&[2, 2], DType::F32, Device::Cpu);
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", m.clone());
    /// let y = b.op("tp::matmul", OpClass::Opaque, vec![x.into(), x.into()], vec![m])?;
    /// b.output(&y)?;
    /// let plan = partition(&b.finish()?)?;
    /// assert_eq!(plan.reason(y[0].node), Some("opaque op tp::matmul"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn reason(&self, node: NodeId) -> Option<&str> {
        self.node_steps.get(&node).map(|s| s.reason.as_str())
    }
}

fn compile_err(msg: String) -> Error {
    Error::compile(CompileKind::Lowering, msg)
}

/// True when `s` broadcasts to `t` (aligned from the right, each dim equal or a static 1).
fn broadcasts_to(s: &[Dim], t: &[Dim]) -> bool {
    s.len() <= t.len()
        && s.iter()
            .rev()
            .zip(t.iter().rev())
            .all(|(a, b)| a == b || *a == Dim::Static(1))
}

/// Per-graph facts the partitioner reads over and over.
struct Ctx<'g> {
    g: &'g Graph,
    /// Topological position by node index (`usize::MAX` for ids that name no node).
    pos: Vec<usize>,
    /// Class of each op node, by node index.
    class: Vec<Option<Class>>,
    /// Distinct data users of each node (the output sink included), by node index.
    users: Vec<Vec<NodeId>>,
    /// Distinct targets of every out-edge (data or order), by node index.
    succ: Vec<Vec<NodeId>>,
    /// Distinct producers of each node's tensor arguments, in argument order.
    producers: Vec<Vec<NodeId>>,
    /// The op nodes in topological order.
    ops: Vec<NodeId>,
}

impl<'g> Ctx<'g> {
    fn new(g: &'g Graph) -> Result<Self> {
        g.validate()?;
        let topo = g.topo_order()?;
        let bound = topo.iter().map(|id| id.index() + 1).max().unwrap_or(0);
        let mut pos = vec![usize::MAX; bound];
        for (p, id) in topo.iter().enumerate() {
            pos[id.index()] = p;
        }
        let mut class = vec![None; bound];
        let mut users = vec![Vec::new(); bound];
        let mut succ = vec![Vec::new(); bound];
        let mut producers = vec![Vec::new(); bound];
        let mut ops = Vec::new();
        for &id in &topo {
            let Some(node) = g.node(id) else { continue };
            users[id.index()] = g.users(id);
            let mut s: Vec<NodeId> = g.out_edges(id).into_iter().map(|(t, _)| t).collect();
            s.sort();
            s.dedup();
            succ[id.index()] = s;
            if let NodeKind::Op(call) = &node.kind {
                class[id.index()] = Some(classify(g, id, call, node.outputs.len(), &OpTable)?);
                let mut p: Vec<NodeId> = Vec::new();
                for v in g.args_of(id)? {
                    if !p.contains(&v.node) {
                        p.push(v.node);
                    }
                }
                producers[id.index()] = p;
                ops.push(id);
            }
        }
        Ok(Ctx {
            g,
            pos,
            class,
            users,
            succ,
            producers,
            ops,
        })
    }

    fn class(&self, id: NodeId) -> Option<&Class> {
        self.class.get(id.index()).and_then(Option::as_ref)
    }

    fn fusible(&self, id: NodeId) -> bool {
        self.class(id).is_some_and(Class::fusible)
    }

    fn pos(&self, id: NodeId) -> usize {
        self.pos.get(id.index()).copied().unwrap_or(usize::MAX)
    }

    fn shape(&self, id: NodeId) -> Option<&[Dim]> {
        self.g
            .node(id)
            .and_then(|n| n.outputs.first())
            .map(|m| m.shape.as_slice())
    }

    fn device(&self, id: NodeId) -> Option<Device> {
        self.g
            .node(id)
            .and_then(|n| n.outputs.first())
            .map(|m| m.device)
    }
}

/// The evolving partition: every op node belongs to one unit; fusible units grow by merging,
/// the others stay single nodes.
struct Units<'c, 'g> {
    ctx: &'c Ctx<'g>,
    unit_of: Vec<usize>,
    members: Vec<Vec<NodeId>>,
}

impl<'c, 'g> Units<'c, 'g> {
    fn new(ctx: &'c Ctx<'g>) -> Self {
        let mut unit_of = vec![usize::MAX; ctx.pos.len()];
        let mut members = Vec::with_capacity(ctx.ops.len());
        for &id in &ctx.ops {
            unit_of[id.index()] = members.len();
            members.push(vec![id]);
        }
        Units {
            ctx,
            unit_of,
            members,
        }
    }

    fn unit(&self, id: NodeId) -> Option<usize> {
        self.unit_of
            .get(id.index())
            .copied()
            .filter(|&u| u != usize::MAX)
    }

    fn is_fusible_unit(&self, u: usize) -> bool {
        self.members[u].iter().all(|&n| self.ctx.fusible(n))
    }

    fn has_reducer(&self, u: usize) -> bool {
        self.members[u]
            .iter()
            .any(|&n| self.ctx.class(n).is_some_and(Class::reducing))
    }

    /// Units reached by one edge out of unit `u` (other than `u`).
    fn unit_succ(&self, u: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for &m in &self.members[u] {
            for &t in &self.ctx.succ[m.index()] {
                if let Some(v) = self.unit(t)
                    && v != u
                {
                    out.insert(v);
                }
            }
        }
        out
    }

    /// True when a path leads from unit `a` to unit `b` through at least one other unit; merging
    /// `a` and `b` would then put that unit on a cycle.
    fn path_through_other(&self, a: usize, b: usize) -> bool {
        let mut seen: BTreeSet<usize> = BTreeSet::new();
        let mut todo: Vec<usize> = self.unit_succ(a).into_iter().filter(|&u| u != b).collect();
        while let Some(u) = todo.pop() {
            if u == b {
                return true;
            }
            if seen.insert(u) {
                todo.extend(self.unit_succ(u));
            }
        }
        false
    }

    /// Whether `nodes` (sorted by topological position) form a valid region.
    fn valid_region(&self, nodes: &[NodeId]) -> bool {
        let ctx = self.ctx;
        let inside = |n: NodeId| {
            nodes
                .binary_search_by_key(&ctx.pos(n), |&m| ctx.pos(m))
                .is_ok()
        };
        // A value leaves the region when something outside reads it, or nothing reads it at all
        // (it is then materialized as eager would).
        let escapes = |n: NodeId| {
            let users = &ctx.users[n.index()];
            users.is_empty() || users.iter().any(|&u| !inside(u))
        };
        let mut device = None;
        let mut reducer = None;
        for &n in nodes {
            let Some(d) = ctx.device(n) else { return false };
            if *device.get_or_insert(d) != d {
                return false;
            }
            if ctx.class(n).is_some_and(Class::reducing) {
                if reducer.is_some() {
                    return false;
                }
                reducer = Some(n);
            }
        }
        let iter: &[Dim] = match reducer {
            Some(r) => {
                // Prologue only: the reduction is the sink, every other value stays inside.
                if ctx.users[r.index()].iter().any(|&u| inside(u)) {
                    return false;
                }
                if nodes.iter().any(|&n| n != r && escapes(n)) {
                    return false;
                }
                let input = match ctx.g.args_of(r) {
                    Ok(args) => args.first().copied(),
                    Err(_) => None,
                };
                match input.and_then(|v| ctx.g.meta(v)) {
                    Some(m) => m.shape.as_slice(),
                    None => return false,
                }
            }
            None => {
                let mut out_shape: Option<&[Dim]> = None;
                for &n in nodes.iter().filter(|&&n| escapes(n)) {
                    let Some(s) = ctx.shape(n) else { return false };
                    if *out_shape.get_or_insert(s) != s {
                        return false;
                    }
                }
                match out_shape.or_else(|| nodes.last().and_then(|&n| ctx.shape(n))) {
                    Some(s) => s,
                    None => return false,
                }
            }
        };
        // The reducer's own result has the reduced shape; everything else is read at `iter`.
        nodes
            .iter()
            .filter(|&&n| Some(n) != reducer)
            .all(|&n| ctx.shape(n).is_some_and(|s| broadcasts_to(s, iter)))
    }

    /// Merges units `a` and `b` if both are fusible and the result is a valid, acyclic region.
    fn try_merge(&mut self, a: usize, b: usize) -> bool {
        if a == b || !self.is_fusible_unit(a) || !self.is_fusible_unit(b) {
            return false;
        }
        if self.path_through_other(a, b) || self.path_through_other(b, a) {
            return false;
        }
        let mut merged: Vec<NodeId> = self.members[a]
            .iter()
            .chain(&self.members[b])
            .copied()
            .collect();
        merged.sort_by_key(|&n| self.ctx.pos(n));
        if !self.valid_region(&merged) {
            return false;
        }
        let (keep, gone) = (a.min(b), a.max(b));
        for &n in &merged {
            self.unit_of[n.index()] = keep;
        }
        self.members[keep] = merged;
        self.members[gone].clear();
        true
    }

    /// Reductions and softmaxes absorb the elementwise producers only they use, walking back
    /// from the reduction as far as possible.
    fn absorb_prologues(&mut self) {
        let ctx = self.ctx;
        for &r in &ctx.ops {
            if !ctx.class(r).is_some_and(Class::reducing) {
                continue;
            }
            while let Some(u) = self.unit(r) {
                let mut candidates: Vec<NodeId> = Vec::new();
                for &m in self.members[u].iter().rev() {
                    for &p in &ctx.producers[m.index()] {
                        if matches!(ctx.class(p), Some(Class::Pointwise))
                            && self.unit(p) != Some(u)
                            && !candidates.contains(&p)
                        {
                            candidates.push(p);
                        }
                    }
                }
                let mut changed = false;
                for p in candidates {
                    if let (Some(pu), Some(ru)) = (self.unit(p), self.unit(r)) {
                        changed |= self.try_merge(ru, pu);
                    }
                }
                if !changed {
                    break;
                }
            }
        }
    }

    /// Producer-consumer merges, in topological order of the consumer. Returns whether anything
    /// merged.
    fn merge_vertical(&mut self) -> bool {
        let ctx = self.ctx;
        let mut any = false;
        for &c in &ctx.ops {
            if !ctx.fusible(c) {
                continue;
            }
            for &p in &ctx.producers[c.index()] {
                if let (Some(pu), Some(cu)) = (self.unit(p), self.unit(c))
                    && pu != cu
                    && ctx.fusible(p)
                {
                    any |= self.try_merge(pu, cu);
                }
            }
        }
        any
    }

    /// Sibling merges: pointwise units that read the same value at full size (the reader has
    /// the value's shape) fuse so the value is loaded once. Scalars and broadcast operands do
    /// not count: sharing them saves nothing. Returns whether anything merged.
    fn merge_horizontal(&mut self) -> bool {
        let ctx = self.ctx;
        let mut any = false;
        let sources: Vec<NodeId> = {
            let mut v: Vec<NodeId> = ctx.g.node_ids();
            v.sort_by_key(|&n| ctx.pos(n));
            v
        };
        for id in sources {
            let Some(shape) = ctx.shape(id) else { continue };
            let own = self.unit(id);
            let mut readers: Vec<NodeId> = ctx.users[id.index()]
                .iter()
                .copied()
                .filter(|&u| ctx.fusible(u) && ctx.shape(u) == Some(shape))
                .collect();
            readers.sort_by_key(|&u| ctx.pos(u));
            // `rep` is a node of the growing sibling group.
            let mut rep: Option<NodeId> = None;
            for u in readers {
                let Some(uu) = self.unit(u) else { continue };
                if Some(uu) == own || self.has_reducer(uu) {
                    continue;
                }
                match rep.and_then(|r| self.unit(r)) {
                    None => rep = Some(u),
                    Some(acc) if acc == uu => {}
                    Some(acc) => any |= self.try_merge(acc, uu),
                }
            }
        }
        any
    }
}

/// Partitions `g` into fused regions and individually run nodes, in execution order.
///
/// See the [module documentation](self) for the rules. Errors (never panics) when `g` is not a
/// valid graph (no outputs, a cycle, a dangling argument) or an op call is malformed (a
/// reduction dim out of range, a softmax without an int `dim`). With `TP_LOGS=fusion` the plan's
/// [`FusionPlan::explain`] text is printed to stderr.
///
/// ```
/// use tensorplay_compiler::passes::fusion::{partition, Step};
/// use tensorplay_compiler::passes::region::RegionKind;
/// use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
/// use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
/// let m = TensorMeta::new(&[64, 1024], DType::F32, Device::Cpu);
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", m.clone());
/// let w = b.input("w", m.clone());
/// let xw = b.op("tp::mul", OpClass::Elementwise, vec![x.into(), w.into()], vec![m])?;
/// let s = b.op("tp::sum", OpClass::Reduction,
///     vec![xw[0].into(), BuilderArg::named("dim", vec![1i64]), BuilderArg::named("keepdim", false)],
///     vec![TensorMeta::new(&[64], DType::F32, Device::Cpu)])?;
/// b.output(&s)?;
/// let plan = partition(&b.finish()?)?;
/// // (x * w).sum(1) is one region that reads x and w once; the product is never stored.
/// assert_eq!(plan.regions.len(), 1);
/// assert!(matches!(plan.regions[0].kind, RegionKind::Reduction { ref dims, .. } if dims == &[1]));
/// assert_eq!(plan.regions[0].inputs, vec![x, w]);
/// assert_eq!(plan.regions[0].outputs, s);
/// assert_eq!(plan.steps, vec![Step::Region(0)]);
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn partition(g: &Graph) -> Result<FusionPlan> {
    let ctx = Ctx::new(g)?;
    let mut units = Units::new(&ctx);
    units.absorb_prologues();
    loop {
        let vertical = units.merge_vertical();
        let horizontal = units.merge_horizontal();
        if !vertical && !horizontal {
            break;
        }
    }
    let plan = build_plan(&ctx, &units)?;
    logging::log("fusion", || plan.explain(g));
    Ok(plan)
}

fn build_plan(ctx: &Ctx<'_>, units: &Units<'_, '_>) -> Result<FusionPlan> {
    let g = ctx.g;
    let graph_outputs = g.outputs()?;
    let live_units: Vec<usize> = {
        let mut v: Vec<usize> = (0..units.members.len())
            .filter(|&u| !units.members[u].is_empty())
            .collect();
        v.sort_by_key(|&u| ctx.pos(units.members[u][0]));
        v
    };

    // Regions, numbered by their first node.
    let mut region_of_unit: BTreeMap<usize, usize> = BTreeMap::new();
    let mut regions = Vec::new();
    for &u in &live_units {
        if !units.is_fusible_unit(u) {
            continue;
        }
        let nodes = units.members[u].clone();
        let id = regions.len();
        region_of_unit.insert(u, id);
        let inside = |n: NodeId| units.unit(n) == Some(u);
        let mut kind = RegionKind::Pointwise;
        for &n in &nodes {
            match ctx.class(n) {
                Some(Class::Reduce { op, dims, keepdim }) => {
                    kind = RegionKind::Reduction {
                        reduction: n,
                        op: *op,
                        dims: dims.clone(),
                        keepdim: *keepdim,
                    }
                }
                Some(Class::Softmax { log }) => kind = RegionKind::Softmax { node: n, log: *log },
                _ => {}
            }
        }
        let mut inputs: Vec<ValueRef> = Vec::new();
        for &n in &nodes {
            for v in g.args_of(n)? {
                if !inside(v.node) && !inputs.contains(&v) {
                    inputs.push(v);
                }
            }
        }
        let mut outputs = Vec::new();
        for &n in &nodes {
            let users = &ctx.users[n.index()];
            let v = ValueRef::from(n);
            if users.is_empty() || users.iter().any(|&t| !inside(t)) || graph_outputs.contains(&v) {
                outputs.push(v);
            }
        }
        regions.push(Region {
            id,
            kind,
            nodes,
            inputs,
            outputs,
        });
    }

    // Steps: a topological order of the units, ties broken by the first node's position.
    let key = |u: usize| ctx.pos(units.members[u][0]);
    let mut indegree: BTreeMap<usize, usize> = live_units.iter().map(|&u| (u, 0)).collect();
    let succs: BTreeMap<usize, BTreeSet<usize>> = live_units
        .iter()
        .map(|&u| (u, units.unit_succ(u)))
        .collect();
    for s in succs.values() {
        for v in s {
            if let Some(d) = indegree.get_mut(v) {
                *d += 1;
            }
        }
    }
    let mut ready: BinaryHeap<Reverse<(usize, usize)>> = indegree
        .iter()
        .filter(|&(_, &d)| d == 0)
        .map(|(&u, _)| Reverse((key(u), u)))
        .collect();
    let mut steps = Vec::with_capacity(live_units.len());
    let mut node_steps = BTreeMap::new();
    let names = Names::new(g);
    while let Some(Reverse((_, u))) = ready.pop() {
        match region_of_unit.get(&u) {
            Some(&r) => steps.push(Step::Region(r)),
            None => {
                let n = units.members[u][0];
                steps.push(Step::Node(n));
                node_steps.insert(n, node_step(ctx, units, &names, &region_of_unit, n)?);
            }
        }
        for &v in succs.get(&u).into_iter().flatten() {
            if let Some(d) = indegree.get_mut(&v) {
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse((key(v), v)));
                }
            }
        }
    }
    if steps.len() != live_units.len() {
        return Err(compile_err(
            "fusion partition: the regions and barriers do not form an acyclic order \
             (internal error)"
                .to_string(),
        ));
    }
    Ok(FusionPlan {
        regions,
        steps,
        node_steps,
    })
}

fn node_step(
    ctx: &Ctx<'_>,
    units: &Units<'_, '_>,
    names: &Names,
    region_of_unit: &BTreeMap<usize, usize>,
    n: NodeId,
) -> Result<NodeStep> {
    let g = ctx.g;
    match ctx.class(n) {
        Some(Class::View) => {
            let Some(src) = g.args_of(n)?.first().copied() else {
                return Ok(NodeStep {
                    kind: NodeStepKind::View,
                    reason: "view without a tensor source: metadata only".to_string(),
                });
            };
            let src_name = names.value(g, src);
            let region = units
                .unit(src.node)
                .and_then(|u| region_of_unit.get(&u).copied());
            let (kind, reason) = match region {
                Some(r) => (
                    NodeStepKind::Barrier,
                    format!(
                        "view of {src_name}, computed in region {r}: {src_name} is \
                         materialized for it"
                    ),
                ),
                None => {
                    let what = match g.node(src.node).map(|s| &s.kind) {
                        Some(NodeKind::Input { .. }) => format!("graph input {src_name}"),
                        Some(NodeKind::Constant(_)) => format!("constant {src_name}"),
                        _ if matches!(ctx.class(src.node), Some(Class::View)) => {
                            format!("view {src_name}")
                        }
                        _ => format!("barrier output {src_name}"),
                    };
                    (
                        NodeStepKind::View,
                        format!("view of {what}: metadata only; regions load through it"),
                    )
                }
            };
            Ok(NodeStep { kind, reason })
        }
        Some(Class::Barrier(reason)) => Ok(NodeStep {
            kind: NodeStepKind::Barrier,
            reason: reason.clone(),
        }),
        _ => Err(compile_err(format!(
            "fusion partition: {} is neither fused nor a barrier (internal error)",
            g.describe(n)
        ))),
    }
}
