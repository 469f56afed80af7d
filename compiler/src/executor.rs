//! The executor: runs a compiled graph — fused regions as generated kernels, every other node
//! through the dispatcher — in the plan's order.
//!
//! Shapes are dynamic: kernels take sizes at run time, and the concrete shape of every value is
//! computed once per distinct set of input shapes (by running the ops' meta rules on fake
//! tensors) and cached. Guards fix what kernels were specialised for: input count, rank, dtype,
//! device and which dims have size 1 (the broadcast pattern).
//!
//! Size soundness: shape inference replays the whole captured program (dead nodes included, in
//! capture order) and checks each [`SizeGuard`] right after the value it guards is computed.
//! A failed guard means the graph does not apply (the closure is captured again); an op whose
//! meta rule fails before any guard did fails exactly as eager would (same arguments, same
//! rule), so that error is returned as is.
//!
//! A repeated call does little beyond the kernel itself: the guards are checked once,
//! the shape cache compares the input shapes with its most recent entry before hashing, and each
//! region keeps its last launch plan and kernel, relaunched without planning when the operands
//! have the same shapes and strides (only the data pointers change).

use std::collections::HashMap;
use std::sync::Arc;
use tensorplay_ir::CompileKind;

use parking_lot::Mutex;
use smallvec::SmallVec;
use tensorplay_ir::graph::{Arg, Attr, Constant, NodeKind, OpCall, SizeGuard, SymGuard};
use tensorplay_ir::{DType, Device, Dim, Error, Graph, NodeId, Result, Shape, SymExpr, ValueRef};
use tensorplay_runtime::autograd::is_grad_enabled;
use tensorplay_runtime::dispatch;
use tensorplay_runtime::library::{Operator, registry};
use tensorplay_runtime::ops::linalg::{MATMUL, RowPanels};
use tensorplay_runtime::{Scalar, Tensor, Value};

use crate::arena::{Arena, Slots};
use crate::codegen::cache;
use crate::codegen::cpu::{
    CompiledKernel, LaunchPlan, PlanKey, ScalarArgs, plan as plan_launch, plan_on,
};
use crate::codegen::kernel::{KernelSpec, Lit, LoopKind, LoweredRegion, lower};
use crate::passes::{BufferPlan, FusionPlan, RegionKind, Step, buffer_plan, dce, fusion, logging};

/// Where an op argument comes from at run time.
#[derive(Clone)]
enum ArgSrc {
    Tensor(usize),
    OptTensor(Option<usize>),
    List(Vec<usize>),
    Value(Value),
    /// A size expression over the input dims, evaluated per call.
    Sym(Attr),
}

/// One op node, ready to call through the dispatcher.
struct NodeCall {
    node: NodeId,
    op: Arc<Operator>,
    args: Vec<ArgSrc>,
    outs: Vec<usize>,
}

/// One fused region with its lowered kernel spec.
struct RegionRun {
    /// The region's number in the fusion plan.
    index: usize,
    lowered: LoweredRegion,
    /// The kernel's scalar arguments (the region's scalar constants), encoded once.
    params: ScalarArgs,
    ins: Vec<usize>,
    outs: Vec<usize>,
    /// The value whose shape is the loop's iteration shape.
    iter_value: usize,
    /// The last launch's plan and kernel: a call whose operands have the same shapes and
    /// strides relaunches it without planning or a kernel-cache lookup.
    last: Mutex<Option<Arc<CachedLaunch>>>,
}

/// A region's last launch: its plan (detached from the tensors of that call) and the kernel
/// compiled for the plan's layout.
struct CachedLaunch {
    plan: LaunchPlan,
    kernel: Arc<CompiledKernel>,
}

/// The shapes of every value (dense ids) for one set of input shapes.
pub(crate) struct ShapeEntry {
    /// The input shapes (the key).
    inputs: Vec<Shape>,
    /// Every value's shape (empty when a size guard failed).
    shapes: Vec<Shape>,
    /// The first size guard that failed for these inputs, if any.
    guard_failure: Option<String>,
    /// The value of each symbol `s{k}` for these inputs.
    syms: Vec<i64>,
}

/// Whether a graph applies to some inputs.
pub(crate) enum Admission {
    /// It does; the value shapes for the inputs.
    Run(Arc<ShapeEntry>),
    /// A guard failed (why): capture again.
    Miss(String),
}

impl ShapeEntry {
    /// Whether `inputs` have exactly this entry's input shapes (no allocation).
    fn fits(&self, inputs: &[Tensor]) -> bool {
        self.inputs.len() == inputs.len()
            && self
                .inputs
                .iter()
                .zip(inputs)
                .all(|(s, t)| s.as_slice() == t.shape())
    }
}

/// Per-input-shapes results of shape inference, with the most recent entry first in line (a
/// repeated call compares its shapes with it and skips hashing).
#[derive(Default)]
struct ShapeCache {
    map: HashMap<Vec<Shape>, Arc<ShapeEntry>>,
    last: Option<Arc<ShapeEntry>>,
}

/// Most distinct input-shape sets whose value shapes a graph keeps.
const SHAPE_CACHE_LIMIT: usize = 256;

/// The value environment of one run (dense ids); inline for small graphs.
type Env = SmallVec<[Option<Tensor>; 16]>;

enum Exec {
    Node(NodeCall),
    /// Boxed: a region (its lowered spec, scalar arguments and cached launch) is much larger
    /// than a node call.
    Region(Box<RegionRun>),
    /// A matmul and the pointwise region that alone reads its product, run panel by panel
    /// (`epilogue.rs`).
    Epilogue(Box<EpilogueRun>),
}

/// A matmul step fused with the pointwise region after it: the product (`product.outs[0]`) is
/// read by nothing else and has the region's iteration shape.
struct EpilogueRun {
    product: NodeCall,
    region: RegionRun,
}

impl EpilogueRun {
    /// The product's value id.
    fn value(&self) -> usize {
        self.product.outs[0]
    }
}

/// Run-time facts about each graph input that the compiled code relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Guard {
    dtype: DType,
    device: Device,
    dims: Vec<DimGuard>,
}

/// What one input dim must be, checked on every call before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DimGuard {
    /// Exactly this size (static dims, and the specialised sizes 0 and 1).
    Size(usize),
    /// A symbol `s{k}`: any size >= 2 (0 and 1 are specialised at capture).
    Symbol,
    /// An expression over symbols bound by other dims (a backward graph's saved value shaped
    /// `[s0 * s1]`): any size here; shape inference checks that it equals the expression.
    Derived(SymExpr),
}

impl DimGuard {
    fn of(d: Dim) -> DimGuard {
        match d {
            Dim::Static(n) => DimGuard::Size(n),
            Dim::Sym(_) => DimGuard::Symbol,
            Dim::Expr(e) => DimGuard::Derived(e),
        }
    }

    fn holds(self, size: usize) -> bool {
        match self {
            DimGuard::Size(n) => size == n,
            DimGuard::Symbol => size >= 2,
            DimGuard::Derived(_) => true,
        }
    }
}

impl std::fmt::Display for DimGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DimGuard::Size(n) => write!(f, "{n}"),
            DimGuard::Symbol => write!(f, "s"),
            DimGuard::Derived(e) => write!(f, "{e}"),
        }
    }
}

/// How a graph that is exactly one fused region maps onto that region, when the region computes
/// exactly the graph's (distinct) outputs.
struct SoleRegion {
    /// For each region input, the graph input it reads; `None` when some region input is a
    /// constant of the graph. When set, a call launches the region straight on the caller's
    /// tensors into freshly allocated outputs: no value environment, no arena, no output
    /// collection (the per-call path of small graphs).
    inputs: Option<SmallVec<[usize; 8]>>,
    /// For each region output, the graph output it is.
    outputs: SmallVec<[usize; 4]>,
}

/// The last call of a graph with a direct [`SoleRegion`]: its inputs' layout, the shapes
/// inferred for them and the launch made. A call whose inputs have the same shapes and strides
/// (and pass the static guards) runs straight from it: no shape-cache lookup, no planning.
struct HotCall {
    /// Rank, sizes and strides of every graph input.
    key: PlanKey,
    shapes: Arc<ShapeEntry>,
    launch: Arc<CachedLaunch>,
}

/// How region `r` maps onto a graph with these inputs and outputs (see [`SoleRegion`]).
fn sole_region(r: &RegionRun, input_ids: &[usize], output_ids: &[usize]) -> Option<SoleRegion> {
    let mut distinct = output_ids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != output_ids.len() || r.outs.len() != output_ids.len() {
        return None;
    }
    let outputs: SmallVec<[usize; 4]> = r
        .outs
        .iter()
        .map(|o| output_ids.iter().position(|g| g == o))
        .collect::<Option<_>>()?;
    let inputs = r
        .ins
        .iter()
        .map(|i| input_ids.iter().position(|g| g == i))
        .collect::<Option<_>>();
    Some(SoleRegion { inputs, outputs })
}

/// A compiled graph that is one pointwise kernel ([`CompiledGraph::sole_pointwise_kernel`]).
pub(crate) struct SoleKernel {
    pub spec: KernelSpec,
    /// The kernel's scalar arguments.
    pub params: Vec<Lit>,
    /// For each kernel input, the graph input it reads.
    pub inputs: Vec<usize>,
    /// For each kernel output, the graph output it is.
    pub outputs: Vec<usize>,
}

/// A graph compiled by [`tp_compile`](crate::tp_compile).
pub struct CompiledGraph {
    graph: Graph,
    plan: FusionPlan,
    buffers: BufferPlan,
    guards: Vec<Guard>,
    /// Dense value ids.
    ids: HashMap<ValueRef, usize>,
    num_values: usize,
    /// Dtype of every value.
    dtypes: Vec<DType>,
    input_ids: Vec<usize>,
    output_ids: Vec<usize>,
    constants: Vec<(usize, Tensor)>,
    steps: Vec<Exec>,
    /// Set when `steps` is exactly one region that maps straight onto the graph's inputs and
    /// outputs.
    sole: Option<SoleRegion>,
    /// The last call, for graphs with a direct [`SoleRegion`].
    hot: Mutex<Option<HotCall>>,
    /// For each step, the values whose last use it is (dropped after the step).
    dies_after: Vec<Vec<usize>>,
    /// The buffer plan's slot of every value (dense ids; `None` outside the arena).
    slot_of_id: Vec<Option<usize>>,
    /// The intermediates' memory, kept across calls.
    arena: Arena,
    /// Every op node in topological order (for the autograd path).
    calls: Vec<NodeCall>,
    /// Every op node of the graph as captured (before DCE), in capture order, with the size
    /// guards to check after it: shape inference replays these.
    check_calls: Vec<(NodeCall, Vec<(usize, SizeGuard)>)>,
    /// Size guards on the graph inputs.
    input_size_guards: Vec<(usize, SizeGuard)>,
    /// Conditions on the input dims (checked before the replay).
    sym_guards: Vec<SymGuard>,
    /// Where each symbol `s{k}` comes from: (input, dim) of its first occurrence.
    sym_src: Vec<(usize, usize)>,
    /// Input dims that must equal an expression of the bound symbols — later occurrences of a
    /// symbol (two inputs capture found to share a size) and derived dims: (input, dim, size).
    dim_checks: Vec<(usize, usize, SymExpr)>,
    /// Constants of the graph as captured (dead ones included).
    check_constants: Vec<(usize, Tensor)>,
    shape_cache: Mutex<ShapeCache>,
}

/// The values step `s` reads (not the ones it writes).
fn step_reads(s: &Exec) -> Vec<usize> {
    let node = |c: &NodeCall| -> Vec<usize> {
        c.args
            .iter()
            .flat_map(|a| match a {
                ArgSrc::Tensor(i) => vec![*i],
                ArgSrc::OptTensor(i) => i.iter().copied().collect(),
                ArgSrc::List(v) => v.clone(),
                ArgSrc::Value(_) | ArgSrc::Sym(_) => vec![],
            })
            .collect()
    };
    match s {
        Exec::Node(c) => node(c),
        Exec::Region(r) => r.ins.clone(),
        Exec::Epilogue(e) => {
            let mut v = node(&e.product);
            v.extend(&e.region.ins);
            v
        }
    }
}

/// Fuses each matmul step with the pointwise region right after it ([`Exec::Epilogue`]) when
/// that region alone reads the product (no later step, not a graph output), the product is a
/// 2-D CPU value of the region's iteration shape (as is every region output), and the matmul is
/// the built-in one with no kernel registered over it.
fn fuse_epilogues(
    steps: Vec<Exec>,
    graph: &Graph,
    ids: &HashMap<ValueRef, usize>,
    output_ids: &[usize],
) -> Vec<Exec> {
    // `TP_MATMUL_EPILOGUE=0` keeps the steps apart (for measuring what fusion changes).
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ENABLED.get_or_init(|| std::env::var("TP_MATMUL_EPILOGUE").map_or(true, |v| v != "0")) {
        return steps;
    }
    let value_of: HashMap<usize, ValueRef> = ids.iter().map(|(&v, &i)| (i, v)).collect();
    let meta = |id: usize| value_of.get(&id).and_then(|&v| graph.meta(v));
    let reads: Vec<Vec<usize>> = steps.iter().map(step_reads).collect();
    let fusable = |i: usize| -> bool {
        let (Exec::Node(c), Some(Exec::Region(r))) = (&steps[i], steps.get(i + 1)) else {
            return false;
        };
        let [v] = c.outs.as_slice() else {
            return false;
        };
        let (Some(pm), Some(im)) = (meta(*v), meta(r.iter_value)) else {
            return false;
        };
        c.op.builtin().is_some_and(|d| std::ptr::eq(d, &MATMUL))
            && c.op.selected_slot(Device::Cpu).is_none()
            && matches!(c.args.as_slice(), [ArgSrc::Tensor(_), ArgSrc::Tensor(_)])
            && matches!(r.lowered.spec.kind, LoopKind::Pointwise)
            && pm.device == Device::Cpu
            && pm.shape.len() == 2
            && pm.shape == im.shape
            && r.outs
                .iter()
                .all(|&o| meta(o).is_some_and(|m| m.shape == pm.shape))
            && r.ins.contains(v)
            && !output_ids.contains(v)
            && !reads[i + 2..].iter().any(|later| later.contains(v))
    };
    // A pair is (matmul node, region): a step is in at most one pair.
    let fused: Vec<bool> = (0..steps.len()).map(fusable).collect();
    let mut out = Vec::with_capacity(steps.len());
    let mut it = steps.into_iter().zip(fused);
    while let Some((step, fuse)) = it.next() {
        match (step, fuse) {
            (Exec::Node(product), true) => match it.next() {
                Some((Exec::Region(region), _)) => {
                    out.push(Exec::Epilogue(Box::new(EpilogueRun {
                        product,
                        region: *region,
                    })))
                }
                // `fusable` saw a region next; keep the steps as they are otherwise.
                next => {
                    out.push(Exec::Node(product));
                    out.extend(next.map(|(s, _)| s));
                }
            },
            (step, _) => out.push(step),
        }
    }
    out
}

/// The tensors of region `r`'s inputs in `env` (each computed by an earlier step).
fn region_inputs<'a>(
    r: &RegionRun,
    env: &'a [Option<Tensor>],
) -> Result<SmallVec<[&'a Tensor; 8]>> {
    r.ins
        .iter()
        .map(|&i| {
            env[i].as_ref().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("region input {i} not computed"),
                )
            })
        })
        .collect()
}

fn attr_value(a: &Attr) -> Value {
    match a {
        Attr::Int(i) => Value::Int(*i),
        Attr::Float(f) => Value::Float(*f),
        Attr::Bool(b) => Value::Bool(*b),
        Attr::Str(s) => Value::Str(s.clone()),
        Attr::IntList(v) => Value::IntList(v.clone()),
        Attr::FloatList(v) => Value::FloatList(v.clone()),
        Attr::BoolList(v) => Value::BoolList(v.clone()),
        Attr::DType(d) => Value::DType(*d),
        Attr::Device(d) => Value::Device(*d),
        Attr::None | Attr::SymInt(_) | Attr::SymIntList(_) => Value::None,
    }
}

/// The tensor a constant node stands for (scalars become wrapped Rust scalars, as captured,
/// which stay on the host whatever the graph's device); tensor constants of a CUDA graph are
/// copied to its device once, here.
fn constant_tensor(c: &Constant, device: Device) -> Result<Tensor> {
    if device == Device::Meta {
        return Err(Error::compile(
            CompileKind::Launch,
            format!("constants on {device} are not supported"),
        ));
    }
    let t = host_constant(c)?;
    if device == Device::Cpu || t.is_wrapped_scalar() {
        return Ok(t);
    }
    t.to_device(device)
}

fn host_constant(c: &Constant) -> Result<Tensor> {
    Ok(match c {
        Constant::Float { value, dtype } => {
            let t = Tensor::wrapped_scalar(Scalar::Float(*value));
            if *dtype == DType::F64 {
                t
            } else {
                Tensor::scalar(*value).to_dtype(*dtype)?
            }
        }
        Constant::Int { value, dtype } => {
            let t = Tensor::wrapped_scalar(Scalar::Int(*value));
            if *dtype == DType::I64 {
                t
            } else {
                Tensor::scalar(*value).to_dtype(*dtype)?
            }
        }
        Constant::Bool(b) => Tensor::wrapped_scalar(Scalar::Bool(*b)),
        Constant::FloatTensor { data, shape, dtype } => {
            Tensor::from_slice(data, shape)?.to_dtype(*dtype)?
        }
        Constant::IntTensor { data, shape, dtype } => {
            Tensor::from_slice(data, shape)?.to_dtype(*dtype)?
        }
    })
}

/// The CUDA device the inputs live on, `None` when none does; an error when they mix devices
/// (a CUDA device with the CPU or another CUDA device).
fn cuda_device(inputs: &[Tensor]) -> Result<Option<Device>> {
    let mut found: Option<Device> = None;
    for t in inputs {
        if let Device::Cuda(_) = t.device() {
            match found {
                Some(d) if d != t.device() => {
                    return Err(Error::device(
                        "compiled function",
                        format!("inputs on {d} and {}: move them to one device", t.device()),
                    ));
                }
                _ => found = Some(t.device()),
            }
        }
    }
    if let Some(d) = found
        && let Some(t) = inputs
            .iter()
            .find(|t| t.device() != d && !t.is_wrapped_scalar())
    {
        return Err(Error::device(
            "compiled function",
            format!("inputs on {d} and {}: move them to one device", t.device()),
        ));
    }
    Ok(found)
}

impl CompiledGraph {
    /// Compiles `graph`: DCE, fusion, buffer planning and lowering of every region. Kernels are
    /// generated on first use for the stride layout they meet (and cached process-wide).
    pub fn new(graph: &Graph) -> Result<CompiledGraph> {
        // Compiling anything makes eager built-in ops work on CUDA tensors too.
        crate::codegen::cuda::eager::install();
        graph.validate()?;
        logging::log("graph", || format!("captured graph:\n{graph}"));
        let captured = graph;
        let graph = dce::dce(captured)?;
        let plan = fusion::partition(&graph)?;
        let buffers = buffer_plan::plan(&graph, &plan)?;

        // Dense value ids over the graph as captured (DCE keeps node ids), in topological
        // order — for a captured graph that is capture order.
        let captured_order = captured.topo_order()?;
        let order = graph.topo_order()?;
        let mut ids = HashMap::new();
        let mut dtypes = Vec::new();
        for &n in &captured_order {
            let node = captured
                .node(n)
                .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
            for (i, m) in node.outputs.iter().enumerate() {
                ids.insert(ValueRef::new(n, i), dtypes.len());
                dtypes.push(m.dtype);
            }
        }
        let id = |v: ValueRef| -> Result<usize> {
            ids.get(&v).copied().ok_or_else(|| {
                Error::compile(CompileKind::Launch, format!("value {v:?} has no producer"))
            })
        };
        let inputs = graph.inputs();
        let input_ids = inputs.iter().map(|&v| id(v)).collect::<Result<Vec<_>>>()?;
        let guards = inputs
            .iter()
            .map(|&v| {
                let m = graph
                    .meta(v)
                    .ok_or_else(|| Error::compile(CompileKind::Launch, "input without metadata"))?;
                Ok(Guard {
                    dtype: m.dtype,
                    device: m.device,
                    dims: m.shape.iter().map(|&d| DimGuard::of(d)).collect(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut sym_src: Vec<(usize, usize)> = Vec::new();
        let mut dim_checks = Vec::new();
        for (i, &v) in inputs.iter().enumerate() {
            let Some(m) = graph.meta(v) else { continue };
            for (d, &dim) in m.shape.iter().enumerate() {
                match dim {
                    Dim::Sym(k) => {
                        let k = k as usize;
                        if sym_src.len() <= k {
                            sym_src.resize(k + 1, (usize::MAX, 0));
                        }
                        if sym_src[k].0 == usize::MAX {
                            sym_src[k] = (i, d);
                        } else {
                            dim_checks.push((i, d, dim.to_expr()));
                        }
                    }
                    Dim::Expr(e) => dim_checks.push((i, d, e)),
                    Dim::Static(_) => {}
                }
            }
        }
        let output_ids = graph
            .outputs()?
            .into_iter()
            .map(id)
            .collect::<Result<Vec<_>>>()?;

        // The replay program of shape inference: every op of the graph as captured, each with
        // the size guards on its outputs.
        let mut guards_of: HashMap<NodeId, Vec<(usize, SizeGuard)>> = HashMap::new();
        for g in captured.size_guards() {
            let v = id(g.value).map_err(|_| {
                Error::compile(
                    CompileKind::Graph,
                    format!("size guard {g} names a value the graph does not have"),
                )
            })?;
            guards_of
                .entry(g.value.node)
                .or_default()
                .push((v, g.clone()));
        }
        let mut check_calls = Vec::new();
        let mut check_constants = Vec::new();
        let mut input_size_guards = Vec::new();
        for &n in &captured_order {
            let node = captured
                .node(n)
                .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
            let guards = guards_of.remove(&n).unwrap_or_default();
            match &node.kind {
                NodeKind::Constant(c) => {
                    let device = node.outputs.first().map_or(Device::Cpu, |m| m.device);
                    check_constants.push((id(ValueRef::new(n, 0))?, constant_tensor(c, device)?));
                }
                NodeKind::Op(call) => {
                    check_calls.push((Self::node_call(captured, n, call, &id)?, guards));
                }
                NodeKind::Input { .. } => input_size_guards.extend(guards),
                NodeKind::Output { .. } => {}
            }
        }

        let mut constants = Vec::new();
        let mut calls = Vec::new();
        for &n in &order {
            let node = graph
                .node(n)
                .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
            match &node.kind {
                NodeKind::Constant(c) => {
                    let device = node.outputs.first().map_or(Device::Cpu, |m| m.device);
                    constants.push((id(ValueRef::new(n, 0))?, constant_tensor(c, device)?));
                }
                NodeKind::Op(call) => calls.push(Self::node_call(&graph, n, call, &id)?),
                _ => {}
            }
        }

        let mut steps = Vec::new();
        for step in &plan.steps {
            match *step {
                Step::Node(n) => {
                    let call = calls.iter().find(|c| c.node == n).ok_or_else(|| {
                        Error::compile(CompileKind::Launch, format!("step node {n} is not an op"))
                    })?;
                    steps.push(Exec::Node(NodeCall {
                        node: call.node,
                        op: call.op.clone(),
                        args: call.args.clone(),
                        outs: call.outs.clone(),
                    }));
                }
                Step::Region(r) => {
                    let region = &plan.regions[r];
                    let lowered = lower(&graph, region)?;
                    let iter_ref = match &region.kind {
                        RegionKind::Pointwise => *region.outputs.first().ok_or_else(|| {
                            Error::compile(
                                CompileKind::Launch,
                                format!("region {r} has no outputs"),
                            )
                        })?,
                        RegionKind::Reduction { reduction, .. } => graph.args_of(*reduction)?[0],
                        RegionKind::Softmax { node, .. } => graph.args_of(*node)?[0],
                    };
                    let params = ScalarArgs::new(&lowered.spec.param_dtypes(), &lowered.params)?;
                    steps.push(Exec::Region(Box::new(RegionRun {
                        index: r,
                        params,
                        ins: lowered
                            .inputs
                            .iter()
                            .map(|&v| id(v))
                            .collect::<Result<_>>()?,
                        outs: lowered
                            .outputs
                            .iter()
                            .map(|&v| id(v))
                            .collect::<Result<_>>()?,
                        iter_value: id(iter_ref)?,
                        lowered,
                        last: Mutex::new(None),
                    })));
                }
            }
        }

        let steps = fuse_epilogues(steps, &graph, &ids, &output_ids);

        // Last use of every value, so intermediates are freed (and their buffers recycled by
        // the allocator) as soon as nothing needs them.
        let num_values = dtypes.len();
        let mut last_use = vec![None::<usize>; num_values];
        for (si, s) in steps.iter().enumerate() {
            let writes: &[usize] = match s {
                Exec::Node(c) => &c.outs,
                Exec::Region(r) => &r.outs,
                Exec::Epilogue(e) => &e.region.outs,
            };
            for v in step_reads(s).into_iter().chain(writes.iter().copied()) {
                last_use[v] = Some(si);
            }
        }
        let mut dies_after = vec![Vec::new(); steps.len()];
        for (v, lu) in last_use.iter().enumerate() {
            if let Some(si) = lu
                && !output_ids.contains(&v)
                && !input_ids.contains(&v)
            {
                dies_after[*si].push(v);
            }
        }

        let mut slot_of_id = vec![None; num_values];
        for pv in buffers.values() {
            if let Some(&i) = ids.get(&pv.value) {
                slot_of_id[i] = Some(pv.slot);
            }
        }
        let arena = Arena::new(buffers.num_slots());
        let sole = match steps.as_slice() {
            [Exec::Region(r)] => sole_region(r, &input_ids, &output_ids),
            _ => None,
        };
        let compiled = CompiledGraph {
            graph,
            plan,
            buffers,
            guards,
            ids,
            num_values,
            dtypes,
            input_ids,
            output_ids,
            constants,
            steps,
            sole,
            hot: Mutex::new(None),
            dies_after,
            slot_of_id,
            arena,
            calls,
            check_calls,
            input_size_guards,
            sym_guards: captured.sym_guards().to_vec(),
            sym_src,
            dim_checks,
            check_constants,
            shape_cache: Mutex::new(ShapeCache::default()),
        };
        logging::log("fusion", || compiled.explain());
        Ok(compiled)
    }

    fn node_call(
        graph: &Graph,
        n: NodeId,
        call: &OpCall,
        id: &dyn Fn(ValueRef) -> Result<usize>,
    ) -> Result<NodeCall> {
        let op = registry().get(&call.name).map_err(|e| {
            Error::compile(
                CompileKind::Launch,
                format!(
                    "{}: {e} (was it registered before the graph was compiled?)",
                    graph.describe(n)
                ),
            )
        })?;
        let producers = graph.args_of(n)?;
        let mut next = producers.into_iter();
        let mut take = || -> Result<usize> {
            let v = next.next().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("{}: missing tensor argument", graph.describe(n)),
                )
            })?;
            id(v)
        };
        let mut args = Vec::with_capacity(call.args.len());
        for a in &call.args {
            args.push(match a {
                Arg::Tensor => ArgSrc::Tensor(take()?),
                Arg::OptionalTensor { present: true } => ArgSrc::OptTensor(Some(take()?)),
                Arg::OptionalTensor { present: false } => ArgSrc::OptTensor(None),
                Arg::TensorList { len } => {
                    ArgSrc::List((0..*len).map(|_| take()).collect::<Result<_>>()?)
                }
                Arg::Attr {
                    value: value @ (Attr::SymInt(_) | Attr::SymIntList(_)),
                    ..
                } => ArgSrc::Sym(value.clone()),
                Arg::Attr { value, .. } => ArgSrc::Value(attr_value(value)),
            });
        }
        let node = graph
            .node(n)
            .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
        let outs = (0..node.outputs.len())
            .map(|i| id(ValueRef::new(n, i)))
            .collect::<Result<_>>()?;
        Ok(NodeCall {
            node: n,
            op,
            args,
            outs,
        })
    }

    /// The graph after dead-code elimination.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The fusion plan.
    pub fn plan(&self) -> &FusionPlan {
        &self.plan
    }

    /// The intermediate-buffer plan.
    pub fn buffer_plan(&self) -> &BufferPlan {
        &self.buffers
    }

    /// Regions, their ops, and which barrier (and why) split them; then the size guards, if
    /// capture recorded any.
    pub fn explain(&self) -> String {
        let mut text = self.plan.explain(&self.graph);
        for e in self.steps.iter().filter_map(|s| match s {
            Exec::Epilogue(e) => Some(e),
            _ => None,
        }) {
            text.push_str(&format!(
                "matmul epilogue: {} and region {} run as one step (each thread computes a panel \
                 of the product's rows, then runs the region on it)\n",
                self.graph.describe(e.product.node),
                e.region.index
            ));
        }
        let guards = self.graph.size_guards();
        if !guards.is_empty() {
            text.push_str("size guards (sizes the captured code read as plain integers):\n");
            for g in guards {
                let node = self.graph.describe(g.value.node);
                text.push_str(&format!("  {g}  ({node})\n"));
            }
        }
        if !self.sym_guards.is_empty() {
            text.push_str("symbolic size guards (conditions on the input dims the captured code relied on):\n");
            for g in &self.sym_guards {
                text.push_str(&format!("  {g}\n"));
            }
        }
        text
    }

    /// The graph as DOT, fused regions drawn as clusters.
    pub fn to_dot(&self) -> String {
        self.plan.to_dot(&self.graph)
    }

    /// Number of fused regions (kernels).
    pub fn num_kernels(&self) -> usize {
        self.plan.regions.len()
    }

    /// Whether `t` passes guard `g` (no allocation: this runs on every call).
    fn guard_holds(g: &Guard, t: &Tensor) -> bool {
        t.dtype() == g.dtype
            && t.device() == g.device
            && t.rank() == g.dims.len()
            && t.shape()
                .iter()
                .zip(&g.dims)
                // A symbolic dim stands for sizes >= 2 (0 and 1 are specialised at capture).
                .all(|(&s, d)| d.holds(s))
    }

    fn check_guards(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.guards.len() {
            return Err(Error::compile(
                CompileKind::Guard,
                format!(
                    "guard failed: the graph takes {} inputs, got {}",
                    self.guards.len(),
                    inputs.len()
                ),
            ));
        }
        for (i, (t, g)) in inputs.iter().zip(&self.guards).enumerate() {
            if !Self::guard_holds(g, t) {
                let want: Vec<String> = g.dims.iter().map(|d| d.to_string()).collect();
                return Err(Error::compile(
                    CompileKind::Guard,
                    format!(
                        "guard failed for input {i}: compiled for {}[{}] on {}, got {}{} on {} (rank, dtype, device and sizes 0 and 1 must match; recompile for this input)",
                        g.dtype,
                        want.join(", "),
                        g.device,
                        t.dtype(),
                        tensorplay_ir::shape::fmt_shape(t.shape()),
                        t.device()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Why `inputs` fail this graph's guards (which input, what was compiled for and what came),
    /// or `None` when they pass.
    pub fn guard_failure(&self, inputs: &[Tensor]) -> Option<String> {
        self.check_guards(inputs).err().map(|e| e.to_string())
    }

    /// True when `inputs` pass this graph's static guards (count, dtype, device, rank, size-1
    /// dims); the size guards are checked by shape inference when the graph runs.
    pub fn accepts(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.guards.len()
            && inputs
                .iter()
                .zip(&self.guards)
                .all(|(t, g)| Self::guard_holds(g, t))
    }

    fn args_of(call: &NodeCall, env: &[Option<Tensor>], syms: &[i64]) -> Result<Vec<Value>> {
        let get = |i: usize| -> Result<Tensor> {
            env[i].clone().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("value {i} used before it was computed"),
                )
            })
        };
        call.args
            .iter()
            .map(|a| {
                Ok(match a {
                    ArgSrc::Tensor(i) => Value::Tensor(get(*i)?),
                    ArgSrc::OptTensor(Some(i)) => Value::OptionalTensor(Some(get(*i)?)),
                    ArgSrc::OptTensor(None) => Value::None,
                    ArgSrc::List(v) => {
                        Value::TensorList(v.iter().map(|&i| get(i)).collect::<Result<_>>()?)
                    }
                    ArgSrc::Value(v) => v.clone(),
                    ArgSrc::Sym(a) => {
                        let resolved = a.resolve(&|k| syms.get(k as usize).copied());
                        match resolved {
                            Some(r) => attr_value(&r),
                            None => {
                                return Err(Error::compile(
                                    CompileKind::Launch,
                                    format!(
                                        "`{}`: size {a} cannot be evaluated for input sizes \
                                         {syms:?}",
                                        call.op.qualname()
                                    ),
                                ));
                            }
                        }
                    }
                })
            })
            .collect()
    }

    fn call_node(call: &NodeCall, env: &mut [Option<Tensor>], syms: &[i64]) -> Result<()> {
        let args = Self::args_of(call, env, syms)?;
        let outs = match call.op.builtin() {
            Some(def) => dispatch::call(def, &args)?,
            None => dispatch::call_bound(&call.op, &args)?,
        };
        if outs.len() < call.outs.len() {
            return Err(Error::compile(
                CompileKind::Launch,
                format!(
                    "`{}` returned {} outputs, the graph expects {}",
                    call.op.qualname(),
                    outs.len(),
                    call.outs.len()
                ),
            ));
        }
        for (&slot, t) in call.outs.iter().zip(outs) {
            env[slot] = Some(t);
        }
        Ok(())
    }

    /// Shapes of every value for these input shapes (computed once per distinct input shapes by
    /// replaying the captured program's meta rules on fake tensors, checking the size guards on
    /// the way). An error is an op's own error, met before any guard failed: eager fails the
    /// same way on these inputs.
    fn shapes_for(&self, inputs: &[Tensor]) -> Result<Arc<ShapeEntry>> {
        let key = {
            let mut c = self.shape_cache.lock();
            if let Some(e) = &c.last
                && e.fits(inputs)
            {
                return Ok(e.clone());
            }
            let key: Vec<Shape> = inputs.iter().map(|t| Shape::from(t.shape())).collect();
            if let Some(e) = c.map.get(&key).cloned() {
                c.last = Some(e.clone());
                return Ok(e);
            }
            key
        };
        // The replay runs the captured ops as recorded (autocast's casts are in the graph).
        let entry = {
            let _ac = tensorplay_runtime::autocast::suspend();
            Arc::new(self.infer_shapes(inputs, key.clone())?)
        };
        let mut c = self.shape_cache.lock();
        if c.map.len() >= SHAPE_CACHE_LIMIT {
            // A graph fed ever-new shapes must not grow without bound; recomputing is cheap
            // (meta rules only), so the simplest eviction — start over — is enough.
            c.map.clear();
        }
        c.map.insert(key, entry.clone());
        c.last = Some(entry.clone());
        Ok(entry)
    }

    fn infer_shapes(&self, inputs: &[Tensor], key: Vec<Shape>) -> Result<ShapeEntry> {
        let syms = self.bind_syms(inputs);
        let failed = |g: &SizeGuard, got: &[usize]| ShapeEntry {
            inputs: key.clone(),
            shapes: Vec::new(),
            guard_failure: Some(format!(
                "size guard {g} failed: got {} (the captured code read this size as a plain \
                 integer)",
                tensorplay_ir::shape::fmt_shape(got)
            )),
            syms: Vec::new(),
        };
        for &(i, d, e) in &self.dim_checks {
            let got = inputs.get(i).and_then(|t| t.shape().get(d)).copied();
            let want = e.eval(&|k| syms.get(k as usize).copied());
            if got.map(|n| n as i64) != want {
                return Ok(ShapeEntry {
                    inputs: key.clone(),
                    shapes: Vec::new(),
                    guard_failure: Some(format!(
                        "input {i} dim {d} has size {}, but the graph was captured for it being \
                         {e} (= {} for these inputs)",
                        got.map_or("?".into(), |n| n.to_string()),
                        want.map_or("?".into(), |n| n.to_string()),
                    )),
                    syms: Vec::new(),
                });
            }
        }
        for g in &self.sym_guards {
            if g.holds(&|k| syms.get(k as usize).copied()) != Some(true) {
                return Ok(ShapeEntry {
                    inputs: key.clone(),
                    shapes: Vec::new(),
                    guard_failure: Some(format!(
                        "size guard {g} failed for input sizes {syms:?} (the captured code \
                         branched on this size or read it as a plain integer)"
                    )),
                    syms: Vec::new(),
                });
            }
        }
        let mut env: Vec<Option<Tensor>> = vec![None; self.num_values];
        for (&i, t) in self.input_ids.iter().zip(inputs) {
            env[i] = Some(Tensor::empty_fake(t.shape(), t.dtype(), t.device()));
        }
        for (v, g) in &self.input_size_guards {
            let shape = env[*v].as_ref().map_or(&[][..], Tensor::shape);
            if !g.holds(shape) {
                return Ok(failed(g, shape));
            }
        }
        for (i, t) in &self.check_constants {
            env[*i] = Some(t.clone());
        }
        {
            let _g = tensorplay_runtime::autograd::no_grad();
            for (call, guards) in &self.check_calls {
                Self::call_node(call, &mut env, &syms)?;
                for (v, g) in guards {
                    let shape = env[*v].as_ref().map_or(&[][..], Tensor::shape);
                    if !g.holds(shape) {
                        return Ok(failed(g, shape));
                    }
                }
            }
        }
        let shapes: Vec<Shape> = env
            .iter()
            .map(|t| {
                t.as_ref()
                    .map_or_else(Shape::new, |t| Shape::from(t.shape()))
            })
            .collect();
        Ok(ShapeEntry {
            inputs: key,
            shapes,
            guard_failure: None,
            syms,
        })
    }

    /// Whether the graph applies to `inputs` (which passed the static guards): the size guards,
    /// checked by shape inference. `Err` is the error eager meets on these inputs.
    pub(crate) fn admit(&self, inputs: &[Tensor]) -> Result<Admission> {
        let entry = self.shapes_for(inputs)?;
        Ok(match &entry.guard_failure {
            Some(why) => Admission::Miss(why.clone()),
            None => Admission::Run(entry),
        })
    }

    fn env_with_inputs(&self, inputs: &[Tensor]) -> Env {
        let mut env: Env = SmallVec::from_elem(None, self.num_values);
        for (&i, t) in self.input_ids.iter().zip(inputs) {
            env[i] = Some(t.clone());
        }
        for (i, t) in &self.constants {
            env[*i] = Some(t.clone());
        }
        env
    }

    fn collect_outputs(&self, env: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
        self.output_ids
            .iter()
            .map(|&i| {
                env[i].clone().ok_or_else(|| {
                    Error::compile(
                        CompileKind::Launch,
                        format!("output value {i} was never computed"),
                    )
                })
            })
            .collect()
    }

    /// Runs the graph on `inputs`. When gradients are needed (grad mode on and an input requires
    /// grad), the graph is interpreted op by op through the dispatcher so autograd records it
    /// (`TP_LOGS=fallback` says so). Inputs that fail a guard are an error.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        if let Some(outs) = self.run_hot(inputs) {
            return outs;
        }
        match self.admit(inputs)? {
            Admission::Run(shapes) => self.run_admitted(inputs, &shapes),
            Admission::Miss(why) => Err(Error::compile(
                CompileKind::Guard,
                format!("guard failed: {why}; recompile for this input"),
            )),
        }
    }

    /// [`CompiledGraph::run`] for inputs already admitted ([`Self::accepts`] and
    /// [`Self::admit`]).
    pub(crate) fn run_admitted(
        &self,
        inputs: &[Tensor],
        shapes: &Arc<ShapeEntry>,
    ) -> Result<Vec<Tensor>> {
        if is_grad_enabled() && inputs.iter().any(Tensor::requires_grad) {
            logging::log("fallback", || {
                "an input requires grad: the graph runs op by op through the dispatcher (no \
                 fused kernels) so autograd records it"
                    .to_string()
            });
            let _ac = tensorplay_runtime::autocast::suspend();
            return self.interpret_accepted(inputs, &shapes.syms);
        }
        if let Some(device) = cuda_device(inputs)? {
            let _ac = tensorplay_runtime::autocast::suspend();
            return self.run_on_device(inputs, shapes, device);
        }
        if let (Some(sole), [Exec::Region(r)]) = (&self.sole, self.steps.as_slice())
            && let Some(region_inputs) = &sole.inputs
        {
            let outs = self.run_sole(sole, region_inputs, r, inputs, &shapes.shapes, None)?;
            self.remember_hot(r, inputs, shapes);
            return Ok(outs);
        }
        // Autocast's casts were recorded at capture: the graph runs as recorded.
        let _ac = tensorplay_runtime::autocast::suspend();
        let mut slots = self.arena.take();
        let outs = self.run_steps(inputs, shapes, &mut slots);
        self.arena.put_back(slots);
        outs
    }

    /// The call path of a graph with a direct [`SoleRegion`] whose inputs have the last call's
    /// shapes and strides ([`HotCall`]); `None` when that does not apply and the caller takes
    /// the general path. The inputs must pass the static guards ([`Self::accepts`]).
    pub(crate) fn run_hot(&self, inputs: &[Tensor]) -> Option<Result<Vec<Tensor>>> {
        let (Some(sole), [Exec::Region(r)]) = (&self.sole, self.steps.as_slice()) else {
            return None;
        };
        let region_inputs = sole.inputs.as_ref()?;
        if (is_grad_enabled() && inputs.iter().any(Tensor::requires_grad))
            || crate::codegen::hook::current().is_some()
            || inputs.iter().any(|t| t.device() != Device::Cpu)
        {
            return None;
        }
        // The entry is used in place, not cloned: one call at a time runs from it, and a
        // concurrent call takes the general path rather than wait.
        let hot = self.hot.try_lock()?;
        let h = hot.as_ref()?;
        if !h.key.matches(None, inputs) {
            return None;
        }
        Some(self.run_sole(
            sole,
            region_inputs,
            r,
            inputs,
            &h.shapes.shapes,
            Some(&h.launch),
        ))
    }

    /// Keeps a successful call of a direct [`SoleRegion`] graph as the [`HotCall`] (skipped when
    /// another call holds it, or a region hook ran the region).
    fn remember_hot(&self, r: &RegionRun, inputs: &[Tensor], shapes: &Arc<ShapeEntry>) {
        if crate::codegen::hook::current().is_some() {
            return;
        }
        let Some(launch) = r.last.lock().clone() else {
            return;
        };
        if let Some(mut hot) = self.hot.try_lock() {
            *hot = Some(HotCall {
                key: PlanKey::new(None, inputs),
                shapes: shapes.clone(),
                launch,
            });
        }
    }

    /// A graph that is one region over its own inputs ([`SoleRegion`]): the region launched on
    /// the caller's tensors, writing fresh outputs in graph-output order (through `cached`, the
    /// hot call's launch, when it fits). Nothing is dispatched, so autocast needs no
    /// suspending.
    fn run_sole(
        &self,
        sole: &SoleRegion,
        region_inputs: &[usize],
        r: &RegionRun,
        inputs: &[Tensor],
        shapes: &[Shape],
        cached: Option<&CachedLaunch>,
    ) -> Result<Vec<Tensor>> {
        let outs = self
            .output_ids
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe { Tensor::try_empty_uninit(&shapes[o], self.dtypes[o]) })
            .collect::<Result<Vec<_>>>()?;
        let mut in_refs: SmallVec<[&Tensor; 8]> = SmallVec::with_capacity(region_inputs.len());
        for &i in region_inputs {
            in_refs.push(inputs.get(i).ok_or_else(|| {
                Error::compile(CompileKind::Launch, format!("graph input {i} missing"))
            })?);
        }
        {
            let out_refs: SmallVec<[&Tensor; 4]> = sole.outputs.iter().map(|&g| &outs[g]).collect();
            let iter_shape = &shapes[r.iter_value];
            let relaunched = match cached {
                Some(c) => {
                    c.kernel
                        .relaunch(&c.plan, &in_refs, &out_refs, Some(iter_shape), &r.params)?
                }
                None => false,
            };
            if !relaunched {
                self.launch(r, iter_shape, &in_refs, &out_refs)?;
            }
        }
        Ok(outs)
    }

    /// The steps of one call on a CUDA device: regions launch their CUDA kernels on fresh
    /// device outputs (the arena holds host memory, so it is not used), other nodes go through
    /// the dispatcher (custom ops with a `cuda` kernel, views; built-in computing ops have no
    /// CUDA kernels yet and say so).
    fn run_on_device(
        &self,
        inputs: &[Tensor],
        shapes: &ShapeEntry,
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let mut env = self.env_with_inputs(inputs);
        for (si, step) in self.steps.iter().enumerate() {
            match step {
                Exec::Node(call) => {
                    Self::call_node(call, &mut env, &shapes.syms)?;
                    self.check_node_outputs(call, &shapes.shapes, &env)?;
                }
                Exec::Region(r) => self.run_region_on_device(r, shapes, &mut env, device)?,
                // The product on the device, then its region.
                Exec::Epilogue(e) => {
                    Self::call_node(&e.product, &mut env, &shapes.syms)?;
                    self.check_node_outputs(&e.product, &shapes.shapes, &env)?;
                    self.run_region_on_device(&e.region, shapes, &mut env, device)?;
                }
            }
            for &v in &self.dies_after[si] {
                env[v] = None;
            }
        }
        self.collect_outputs(&env)
    }

    /// Launches region `r` on `device` into fresh device outputs.
    fn run_region_on_device(
        &self,
        r: &RegionRun,
        shapes: &ShapeEntry,
        env: &mut [Option<Tensor>],
        device: Device,
    ) -> Result<()> {
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it (later work on the device's stream, or a copy to the
            // host, which waits for the stream).
            .map(|&o| unsafe {
                tensorplay_runtime::cuda::empty_uninit(&shapes.shapes[o], self.dtypes[o], device)
            })
            .collect::<Result<_>>()?;
        self.launch_region(r, &shapes.shapes, env, outs, device)
    }

    /// The steps of one call, intermediates in the arena's `slots`.
    fn run_steps(
        &self,
        inputs: &[Tensor],
        shapes: &ShapeEntry,
        slots: &mut Slots,
    ) -> Result<Vec<Tensor>> {
        let mut env = self.env_with_inputs(inputs);
        for (si, step) in self.steps.iter().enumerate() {
            match step {
                Exec::Node(call) => {
                    Self::call_node(call, &mut env, &shapes.syms)?;
                    self.check_node_outputs(call, &shapes.shapes, &env)?;
                }
                Exec::Region(r) => self.run_region(r, &shapes.shapes, &mut env, slots)?,
                Exec::Epilogue(e) => self.run_epilogue(e, shapes, &mut env, slots)?,
            }
            for &v in &self.dies_after[si] {
                // Dropped; an arena value's storage goes back to its slot.
                if let (Some(k), Some(t)) = (self.slot_of_id[v], env[v].take()) {
                    slots.release(k, t);
                }
            }
        }
        self.collect_outputs(&env)
    }

    /// Bytes of intermediate memory the graph keeps between calls (its arena: the buffer
    /// plan's slots, each as large as the largest value it held). Zero before the first call,
    /// and for graphs without intermediates.
    ///
    /// ```
    /// use tensorplay_compiler::capture::{CaptureOptions, capture};
    /// use tensorplay_compiler::executor::CompiledGraph;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// use tensorplay_runtime::Tensor;
    /// // exp(x) + 1, a cumulative sum (a barrier), then * 2: exp(x) + 1 is an intermediate.
    /// let m = TensorMeta::new(&[1000], DType::F32, Device::Cpu);
    /// let g = capture(
    ///     |xs| Ok(vec![xs[0].exp()?.add_scalar(1.0)?.cumsum(0, None)?.mul_scalar(2.0)?]),
    ///     &[m],
    ///     CaptureOptions::default(),
    /// )?;
    /// let c = CompiledGraph::new(&g)?;
    /// assert_eq!(c.arena_bytes(), 0);
    /// c.run(&[Tensor::ones(&[1000], DType::F32)])?;
    /// assert!(c.arena_bytes() >= 4000); // exp(x) + 1, and the cumulative sum
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn arena_bytes(&self) -> usize {
        self.arena.held_bytes()
    }

    /// The outputs of a node run through the dispatcher must be what shape inference (the ops'
    /// fake kernels) said: the kernels after it were planned for those shapes and dtypes. An op
    /// whose real kernel disagrees with its fake kernel is named here.
    fn check_node_outputs(
        &self,
        call: &NodeCall,
        shapes: &[Shape],
        env: &[Option<Tensor>],
    ) -> Result<()> {
        for (k, &o) in call.outs.iter().enumerate() {
            let Some(t) = &env[o] else { continue };
            let (want_shape, want_dtype) = (&shapes[o], self.dtypes[o]);
            if t.shape() != want_shape.as_slice() || t.dtype() != want_dtype {
                return Err(Error::argument(
                    call.op.qualname(),
                    format!("output {k}"),
                    format!(
                        "{want_dtype}{} (what its fake kernel said)",
                        tensorplay_ir::shape::fmt_shape(want_shape)
                    ),
                    format!(
                        "{}{} from its kernel; the fake kernel must return the real kernel's \
                         shapes and dtypes",
                        t.dtype(),
                        tensorplay_ir::shape::fmt_shape(t.shape())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Runs a graph that is a single pointwise region writing `dests[k]` as its output `k`
    /// instead of fresh buffers (for callers that keep their own output buffers). A destination
    /// must be a real tensor of the output's shape and dtype; it may be exactly an input's
    /// elements (same address, dtype, shape and strides: an update in place, run by the
    /// kernel's in-place variant), and any other overlap with an input is an error. Each
    /// destination's version counter is bumped. Inputs and destinations on a CUDA device run the
    /// region's CUDA kernel there.
    pub fn run_into(&self, inputs: &[Tensor], dests: &[Tensor]) -> Result<()> {
        let err = |msg: String| Error::compile(CompileKind::Launch, format!("run_into: {msg}"));
        let [Exec::Region(r)] = self.steps.as_slice() else {
            return Err(err(format!(
                "the graph must be exactly one fused region, it has {} step(s)",
                self.steps.len()
            )));
        };
        let pointwise = matches!(
            self.plan.regions.first().map(|x| &x.kind),
            Some(RegionKind::Pointwise)
        );
        // Where each region output goes: the destination of the graph output it is.
        let Some(order) = self.sole.as_ref().map(|s| &s.outputs).filter(|_| pointwise) else {
            return Err(err(
                "the region must be pointwise and compute exactly the graph's (distinct) outputs"
                    .into(),
            ));
        };
        if dests.len() != self.output_ids.len() {
            return Err(err(format!(
                "{} destinations for {} outputs",
                dests.len(),
                self.output_ids.len()
            )));
        }
        self.check_guards(inputs)?;
        let shapes = match self.admit(inputs)? {
            Admission::Run(s) => s,
            Admission::Miss(why) => return Err(err(format!("guard failed: {why}"))),
        };
        for (k, (d, &o)) in dests.iter().zip(&self.output_ids).enumerate() {
            if d.is_fake()
                || d.shape() != shapes.shapes[o].as_slice()
                || d.dtype() != self.dtypes[o]
            {
                return Err(err(format!(
                    "destination {k} is {d:?}, the output is {}{}",
                    self.dtypes[o],
                    tensorplay_ir::shape::fmt_shape(&shapes.shapes[o])
                )));
            }
        }
        let _ac = tensorplay_runtime::autocast::suspend();
        let mut env = self.env_with_inputs(inputs);
        let outs = order.iter().map(|&k| dests[k].clone()).collect();
        let device = cuda_device(inputs)?.unwrap_or(Device::Cpu);
        self.launch_region(r, &shapes.shapes, &mut env, outs, device)?;
        for d in dests {
            d.storage().bump_version();
        }
        Ok(())
    }

    /// The graph as one standalone pointwise kernel: its spec and scalar arguments, which graph
    /// input each kernel input reads and which graph output each kernel output is. An error
    /// unless the graph is exactly one pointwise region over its own inputs (no constant
    /// tensors) computing exactly its (distinct) outputs. For callers that launch the kernel
    /// themselves on operands the executor cannot express — in place, or over a group of
    /// operand sets ([`CompiledKernel::launch_group`], the fused optimizers).
    pub(crate) fn sole_pointwise_kernel(&self) -> Result<SoleKernel> {
        let err = |msg: &str| {
            Error::compile(
                CompileKind::Launch,
                format!("sole_pointwise_kernel: {msg}:\n{}", self.explain()),
            )
        };
        let [Exec::Region(r)] = self.steps.as_slice() else {
            return Err(err("the graph is not exactly one fused region"));
        };
        if !matches!(r.lowered.spec.kind, LoopKind::Pointwise) {
            return Err(err("the region is not pointwise"));
        }
        let sole = self.sole.as_ref().ok_or_else(|| {
            err("the region does not compute exactly the graph's (distinct) outputs")
        })?;
        let inputs = sole
            .inputs
            .clone()
            .ok_or_else(|| err("a kernel input is not a graph input"))?
            .into_vec();
        let outputs = sole.outputs.to_vec();
        Ok(SoleKernel {
            spec: r.lowered.spec.clone(),
            params: r.lowered.params.clone(),
            inputs,
            outputs,
        })
    }

    fn run_region(
        &self,
        r: &RegionRun,
        shapes: &[Shape],
        env: &mut [Option<Tensor>],
        slots: &mut Slots,
    ) -> Result<()> {
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe { slots.tensor(self.slot_of_id[o], &shapes[o], self.dtypes[o]) })
            .collect::<Result<_>>()?;
        self.launch_region(r, shapes, env, outs, Device::Cpu)
    }

    /// A matmul and its epilogue region on the CPU: fused panel by panel when the product is
    /// one [`RowPanels`] computes (2-D `f32`/`f64`) and no region hook is installed, otherwise
    /// the product through the dispatcher and then the region.
    fn run_epilogue(
        &self,
        e: &EpilogueRun,
        shapes: &ShapeEntry,
        env: &mut [Option<Tensor>],
        slots: &mut Slots,
    ) -> Result<()> {
        let (v, r) = (e.value(), &e.region);
        let operands = match e.product.args.as_slice() {
            [ArgSrc::Tensor(a), ArgSrc::Tensor(b)] => env[*a].as_ref().zip(env[*b].as_ref()),
            _ => None,
        };
        // A kernel registered over matmul since compilation takes the dispatcher's path.
        let fusable = crate::codegen::hook::current().is_none()
            && e.product.op.selected_slot(Device::Cpu).is_none()
            && shapes.shapes[r.iter_value] == shapes.shapes[v]
            && matches!(shapes.shapes[v].as_slice(), &[_, n] if n > 0);
        let slot = self.slot_of_id[v];
        let fused = match operands.filter(|_| fusable) {
            Some((a, b)) => {
                // SAFETY: the product is written in full by `RowPanels::compute` over all its
                // rows (in `epilogue::run`) before the region reads it; unused, it goes back to
                // its slot unread.
                let out = unsafe { slots.tensor(slot, &shapes.shapes[v], self.dtypes[v]) }?;
                match RowPanels::new(a, b, &out) {
                    Some(p) => Some((p, out)),
                    None => {
                        if let Some(k) = slot {
                            slots.release(k, out);
                        }
                        None
                    }
                }
            }
            None => None,
        };
        let Some((product, out)) = fused else {
            logging::log("fallback", || {
                format!(
                    "{}: its epilogue runs unfused (not a 2-D f32/f64 CPU product, a kernel is \
                     registered over matmul, or a region hook is installed)",
                    self.graph.describe(e.product.node)
                )
            });
            Self::call_node(&e.product, env, &shapes.syms)?;
            self.check_node_outputs(&e.product, &shapes.shapes, env)?;
            return self.run_region(r, &shapes.shapes, env, slots);
        };
        env[v] = Some(out);
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel writes every element of each output, panel by panel,
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe {
                slots.tensor(self.slot_of_id[o], &shapes.shapes[o], self.dtypes[o])
            })
            .collect::<Result<_>>()?;
        {
            let in_refs = region_inputs(r, env)?;
            let out_refs: SmallVec<[&Tensor; 4]> = outs.iter().collect();
            let iter_shape = &shapes.shapes[r.iter_value];
            let spec = &r.lowered.spec;
            let plan = plan_launch(spec, &in_refs, &out_refs, Some(iter_shape))?;
            let last = r.last.lock().clone();
            let kernel = match last {
                Some(c) if c.kernel.layout() == plan.layout() => c.kernel.clone(),
                _ => cache::get_or_compile(spec, plan.layout())?,
            };
            crate::epilogue::run(&product, &kernel, &plan, &r.params, iter_shape[1])?;
            *r.last.lock() = Some(Arc::new(CachedLaunch {
                plan: plan.detach(),
                kernel,
            }));
        }
        for (&o, t) in r.outs.iter().zip(outs) {
            env[o] = Some(t);
        }
        Ok(())
    }

    /// Launches region `r` writing `outs` (all operands on `device`: its CPU kernel, or its
    /// CUDA kernel on a CUDA device), then binds them in `env`.
    fn launch_region(
        &self,
        r: &RegionRun,
        shapes: &[Shape],
        env: &mut [Option<Tensor>],
        outs: SmallVec<[Tensor; 4]>,
        device: Device,
    ) -> Result<()> {
        // The operand references borrow `env` and `outs` until the launch is done.
        {
            let in_refs = region_inputs(r, env)?;
            let out_refs: SmallVec<[&Tensor; 4]> = outs.iter().collect();
            let iter_shape = &shapes[r.iter_value];
            if device == Device::Cpu {
                self.launch(r, iter_shape, &in_refs, &out_refs)?;
            } else {
                let spec = &r.lowered.spec;
                let plan = plan_on(spec, &in_refs, &out_refs, Some(iter_shape), device)?;
                crate::codegen::cuda::launch::launch(spec, &plan, &r.params, device)?;
            }
        }
        for (&o, t) in r.outs.iter().zip(outs) {
            env[o] = Some(t);
        }
        Ok(())
    }

    /// Launches region `r` over iteration shape `iter_shape` on its operands: the last launch's
    /// plan again when the operands have its shapes and strides, otherwise a new plan (and the
    /// kernel for its layout).
    fn launch(
        &self,
        r: &RegionRun,
        iter_shape: &[usize],
        in_refs: &[&Tensor],
        out_refs: &[&Tensor],
    ) -> Result<()> {
        let iter_shape = Some(iter_shape);
        // A region hook (verification of another backend) may run the region instead.
        let hooked = match crate::codegen::hook::current() {
            Some(hook) => {
                let plan = plan_launch(&r.lowered.spec, in_refs, out_refs, iter_shape)?;
                hook.run(&r.lowered.spec, &plan, &r.params)?
            }
            None => false,
        };
        if hooked {
            return Ok(());
        }
        // The lock is held only to clone the entry: concurrent runs of the graph launch in
        // parallel.
        let last = r.last.lock().clone();
        if let Some(c) = &last
            && c.kernel
                .relaunch(&c.plan, in_refs, out_refs, iter_shape, &r.params)?
        {
            return Ok(());
        }
        let spec = &r.lowered.spec;
        let plan = plan_launch(spec, in_refs, out_refs, iter_shape)?;
        if logging::enabled("cuda") {
            // The region's CUDA translation, printed once per structure.
            crate::codegen::cuda::get_or_emit(spec, &plan.layout().into())?;
        }
        let kernel = match last {
            Some(c) if c.kernel.layout() == plan.layout() => c.kernel.clone(),
            _ => cache::get_or_compile(spec, plan.layout())?,
        };
        kernel.launch_plan(&plan, &r.params)?;
        *r.last.lock() = Some(Arc::new(CachedLaunch {
            plan: plan.detach(),
            kernel,
        }));
        Ok(())
    }

    /// Runs every op node through the dispatcher in topological order (no generated kernels):
    /// the reference the compiled path is checked against, and the path that records autograd.
    pub fn interpret(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        if let Admission::Miss(why) = self.admit(inputs)? {
            return Err(Error::compile(
                CompileKind::Guard,
                format!("guard failed: {why}; recompile for this input"),
            ));
        }
        let _ac = tensorplay_runtime::autocast::suspend();
        self.interpret_accepted(inputs, &self.bind_syms(inputs))
    }

    /// The value of every symbol for these inputs (symbol `k` is one input dim).
    fn bind_syms(&self, inputs: &[Tensor]) -> Vec<i64> {
        self.sym_src
            .iter()
            .map(|&(i, d)| {
                inputs
                    .get(i)
                    .and_then(|t| t.shape().get(d))
                    .map_or(0, |&n| n as i64)
            })
            .collect()
    }

    fn interpret_accepted(&self, inputs: &[Tensor], syms: &[i64]) -> Result<Vec<Tensor>> {
        let mut env = self.env_with_inputs(inputs);
        for call in &self.calls {
            Self::call_node(call, &mut env, syms)?;
        }
        self.collect_outputs(&env)
    }

    /// The shapes of the graph's outputs for the inputs `entry` was inferred for.
    pub(crate) fn output_shapes(&self, entry: &ShapeEntry) -> Vec<Shape> {
        self.output_ids
            .iter()
            .map(|&i| entry.shapes.get(i).cloned().unwrap_or_default())
            .collect()
    }

    /// Dense id of a graph value (for tests and tools).
    pub fn value_id(&self, v: ValueRef) -> Option<usize> {
        self.ids.get(&v).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use tensorplay_ir::TensorMeta;

    fn f(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![xs[0].mul(&xs[1])?.add_scalar(1.0)?.relu()?])
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    /// The cached launch of the graph's only region.
    fn cached(c: &CompiledGraph) -> Option<Arc<CachedLaunch>> {
        c.steps.iter().find_map(|s| match s {
            Exec::Region(r) => r.last.lock().clone(),
            Exec::Epilogue(e) => e.region.last.lock().clone(),
            Exec::Node(_) => None,
        })
    }

    #[test]
    fn launch_plans_are_reused_only_for_the_same_shapes_and_strides() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        assert_eq!(c.num_kernels(), 1);
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let y = Tensor::randn_seeded(&[6, 5], DType::F32, 2)?;
        // Views of one shape: contiguous, two offsets with the same strides, a transpose, a
        // step-2 slice; then another size.
        let views = [
            Tensor::randn_seeded(&[6, 5], DType::F32, 3)?,
            base.narrow(0, 0, 6)?.narrow(1, 0, 5)?,
            base.narrow(0, 3, 6)?.narrow(1, 2, 5)?,
            base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?,
            base.slice(0, Some(0), Some(12), 2)?.narrow(1, 0, 5)?,
        ];
        for round in 0..2 {
            let mut previous: Option<Arc<CachedLaunch>> = None;
            for (i, x) in views.iter().enumerate() {
                let got = c.run(&[x.clone(), y.clone()])?;
                let want = f(&[x.clone(), y.clone()])?;
                assert_eq!(bits(&got[0]), bits(&want[0]), "round {round}, view {i}");
                let now = cached(&c).expect("a launch is cached");
                if let Some(p) = &previous {
                    // Views 1 and 2 differ only in their storage offset: same plan.
                    assert_eq!(Arc::ptr_eq(p, &now), i == 2, "round {round}, view {i}");
                }
                // Running again on the same tensors reuses the plan.
                let again = c.run(&[x.clone(), y.clone()])?;
                assert_eq!(bits(&again[0]), bits(&want[0]));
                assert!(Arc::ptr_eq(&now, &cached(&c).expect("cached")));
                previous = Some(now);
            }
        }
        // Another size: a new shape entry and a new plan, then back again.
        for n in [3usize, 6, 3] {
            let x = Tensor::randn_seeded(&[n, 5], DType::F32, 4)?;
            let yn = y.narrow(0, 0, n)?;
            let got = c.run(&[x.clone(), yn.clone()])?;
            assert_eq!(bits(&got[0]), bits(&f(&[x, yn])?[0]), "n = {n}");
        }
        assert_eq!(c.shape_cache.lock().map.len(), 2);
        Ok(())
    }

    /// The graph input layout of the hot call, if any.
    fn hot_key(c: &CompiledGraph) -> Option<PlanKey> {
        c.hot.lock().as_ref().map(|h| h.key.clone())
    }

    #[test]
    fn the_hot_call_serves_only_inputs_of_its_shapes_and_strides() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        assert!(c.sole.as_ref().is_some_and(|s| s.inputs.is_some()));
        assert!(hot_key(&c).is_none(), "nothing ran yet");
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let y = Tensor::randn_seeded(&[6, 5], DType::F32, 2)?;
        let x = Tensor::randn_seeded(&[6, 5], DType::F32, 3)?;
        let transposed = base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?;
        let other_size = (
            Tensor::randn_seeded(&[4, 5], DType::F32, 4)?,
            y.narrow(0, 0, 4)?,
        );
        let sets = [
            [x.clone(), y.clone()],
            [x.clone(), y.clone()],
            [transposed.clone(), y.clone()],
            [other_size.0.clone(), other_size.1.clone()],
            [transposed, y.clone()],
            [x, y],
        ];
        for (i, ins) in sets.iter().enumerate() {
            let got = c.run(ins)?;
            assert_eq!(bits(&got[0]), bits(&f(ins)?[0]), "set {i}");
            // The hot call is always the last call's layout.
            assert_eq!(hot_key(&c), Some(PlanKey::new(None, ins)), "set {i}");
        }
        Ok(())
    }

    #[test]
    fn concurrent_calls_of_one_graph_agree_with_eager() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let sets: Vec<[Tensor; 2]> = vec![
            [
                Tensor::randn_seeded(&[6, 5], DType::F32, 2)?,
                Tensor::randn_seeded(&[6, 5], DType::F32, 3)?,
            ],
            [
                base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?,
                Tensor::randn_seeded(&[6, 5], DType::F32, 4)?,
            ],
            [
                Tensor::randn_seeded(&[300, 70], DType::F32, 5)?,
                Tensor::randn_seeded(&[300, 70], DType::F32, 6)?,
            ],
        ];
        let want: Vec<Vec<u32>> = sets
            .iter()
            .map(|s| f(s).map(|o| bits(&o[0])))
            .collect::<Result<_>>()?;
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (c, sets, want) = (&c, &sets, &want);
                scope.spawn(move || {
                    for i in 0..300 {
                        let k = (i + t) % sets.len();
                        let got = c.run(&sets[k]).expect("the graph runs");
                        assert_eq!(bits(&got[0]), want[k], "thread {t}, call {i}");
                    }
                });
            }
        });
        Ok(())
    }

    #[test]
    fn a_region_reading_a_constant_runs_through_the_environment() -> Result<()> {
        let with_constant = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let c = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?;
            Ok(vec![xs[0].mul(&c)?.exp()?])
        };
        let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
        let g = capture(with_constant, &[m], CaptureOptions::default())?;
        let c = CompiledGraph::new(&g)?;
        assert_eq!(c.num_kernels(), 1);
        assert!(c.sole.as_ref().is_some_and(|s| s.inputs.is_none()));
        let x = Tensor::randn_seeded(&[4], DType::F32, 1)?;
        for _ in 0..2 {
            let got = c.run(std::slice::from_ref(&x))?;
            let want = with_constant(std::slice::from_ref(&x))?;
            assert_eq!(bits(&got[0]), bits(&want[0]));
            assert!(hot_key(&c).is_none(), "no hot call without a direct region");
        }
        Ok(())
    }

    #[test]
    fn the_shape_cache_stays_bounded() -> Result<()> {
        let m = TensorMeta::new(&[6], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        for n in 2..(SHAPE_CACHE_LIMIT + 40) {
            let x = Tensor::randn_seeded(&[n], DType::F32, n as u64)?;
            let got = c.run(&[x.clone(), x.clone()])?;
            assert_eq!(bits(&got[0]), bits(&f(&[x.clone(), x])?[0]), "n = {n}");
            assert!(c.shape_cache.lock().map.len() <= SHAPE_CACHE_LIMIT);
        }
        Ok(())
    }

    #[test]
    fn guards_accept_or_reject_and_errors_name_the_failing_input() -> Result<()> {
        let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        let x = Tensor::ones(&[4], DType::F32);
        assert!(c.accepts(&[x.clone(), x.clone()]));
        assert!(!c.accepts(std::slice::from_ref(&x)));
        let i = Tensor::ones(&[4], DType::I32);
        assert!(!c.accepts(&[x.clone(), i.clone()]));
        let e = c.run(&[x, i]).unwrap_err().to_string();
        assert!(e.contains("guard failed for input 1"), "{e}");
        Ok(())
    }
}
