//! Building a [`CompiledGraph`] from a graph ([`CompiledGraph::new`]): dense value ids, the
//! input guards and symbol bindings, the replay program of shape inference, the steps of the
//! fusion plan (regions lowered, matmul epilogues paired), and when each intermediate dies.

use std::collections::HashMap;
use tensorplay_ir::CompileKind;

use parking_lot::Mutex;
use tensorplay_ir::graph::{Constant, NodeKind, SizeGuard};
use tensorplay_ir::{DType, Device, Dim, Error, Graph, NodeId, Result, SymExpr, ValueRef};
use tensorplay_runtime::ops::Kernel;
use tensorplay_runtime::ops::conv::CONV2D;
use tensorplay_runtime::ops::linalg::MATMUL;
use tensorplay_runtime::{Scalar, Tensor};

use super::guards::Guard;
use super::node::{ArgSrc, NodeCall};
use super::shapes::{ReplayCall, ShapeCache};
use super::sole_region::sole_region;
use super::{CompiledGraph, EpilogueRun, Exec, ProductKind, RegionRun};
use crate::arena::Arena;
use crate::codegen::cpu::ScalarArgs;
use crate::codegen::kernel::{LoopKind, lower};
use crate::grad_plan::GradPlan;
use crate::passes::{
    BufferPlan, FusionPlan, RegionKind, Step, buffer_plan, dce, fusion, join_slices, logging,
    transpose_products,
};

impl CompiledGraph {
    /// Compiles `graph`: DCE, fusion, buffer planning and lowering of every region. Kernels are
    /// generated on first use for the stride layout they meet (and cached process-wide).
    pub fn new(graph: &Graph) -> Result<CompiledGraph> {
        graph.validate()?;
        logging::log("graph", || format!("captured graph:\n{graph}"));
        let joined = join_slices::rewritten(graph)?;
        let captured = joined.as_ref().unwrap_or(graph);
        let transposed = transpose_products::rewritten(captured)?;
        let captured = transposed.as_ref().unwrap_or(captured);
        let graph = dce::dce(captured)?;
        let plan = fusion::partition(&graph)?;
        let buffers = buffer_plan::plan(&graph, &plan)?;

        // Dense value ids over the graph as captured (DCE keeps node ids), in topological
        // order — for a captured graph that is capture order.
        let captured_order = captured.topo_order()?;
        let order = graph.topo_order()?;
        let (ids, dtypes) = dense_ids(captured, &captured_order)?;
        let id = |v: ValueRef| -> Result<usize> {
            ids.get(&v).copied().ok_or_else(|| {
                Error::compile(CompileKind::Launch, format!("value {v:?} has no producer"))
            })
        };
        let inputs = graph.inputs();
        let input_ids = inputs.iter().map(|&v| id(v)).collect::<Result<Vec<_>>>()?;
        let guards = input_guards(&graph, &inputs)?;
        let symbols = SymbolSources::new(&graph, &inputs);
        let output_ids = graph
            .outputs()?
            .into_iter()
            .map(id)
            .collect::<Result<Vec<_>>>()?;
        let replay = Replay::new(captured, &captured_order, &id)?;
        let live = LiveNodes::new(&graph, &order, &id)?;
        let steps = plan_steps(&graph, &plan, &live.calls, &id)?;
        let steps = fuse_epilogues(steps, &graph, &ids, &output_ids);

        let num_values = dtypes.len();
        let dies_after = dies_after(&steps, num_values, &input_ids, &output_ids);
        let slot_of_id = slot_of_ids(&buffers, &ids, num_values);
        let arena = Arena::new(buffers.num_slots());
        let sole = match steps.as_slice() {
            [Exec::Region(r)] => sole_region(r, &input_ids, &output_ids),
            _ => None,
        };
        let clock = super::profile::StepClock::new(steps.len());
        let compiled = CompiledGraph {
            clock,
            graph,
            plan,
            buffers,
            guards,
            ids,
            num_values,
            dtypes,
            input_ids,
            output_ids,
            constants: live.constants,
            steps,
            sole,
            hot: Mutex::new(None),
            dies_after,
            slot_of_id,
            arena,
            calls: live.calls,
            check_calls: replay.calls,
            input_size_guards: replay.input_size_guards,
            sym_guards: captured.sym_guards().to_vec(),
            sym_src: symbols.sym_src,
            dim_checks: symbols.dim_checks,
            check_constants: replay.constants,
            shape_cache: Mutex::new(ShapeCache::default()),
            grad_plan: GradPlan::default(),
        };
        logging::log("fusion", || compiled.explain());
        Ok(compiled)
    }
}

/// A dense id for every value of `captured` (its nodes in `captured_order`), and each value's
/// dtype.
fn dense_ids(
    captured: &Graph,
    captured_order: &[NodeId],
) -> Result<(HashMap<ValueRef, usize>, Vec<DType>)> {
    let mut ids = HashMap::new();
    let mut dtypes = Vec::new();
    for &n in captured_order {
        let node = captured
            .node(n)
            .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
        for (i, m) in node.outputs.iter().enumerate() {
            ids.insert(ValueRef::new(n, i), dtypes.len());
            dtypes.push(m.dtype);
        }
    }
    Ok((ids, dtypes))
}

/// The static guard of every graph input (what its metadata says).
fn input_guards(graph: &Graph, inputs: &[ValueRef]) -> Result<Vec<Guard>> {
    inputs
        .iter()
        .map(|&v| {
            let m = graph
                .meta(v)
                .ok_or_else(|| Error::compile(CompileKind::Launch, "input without metadata"))?;
            Ok(Guard::of(m))
        })
        .collect()
}

/// Where shape inference binds each symbol `s{k}` from, and the input dims it checks against
/// the bound symbols instead.
struct SymbolSources {
    /// (input, dim) of each symbol's first occurrence among the inputs' dims.
    sym_src: Vec<(usize, usize)>,
    /// Later occurrences of a symbol and derived dims: (input, dim, size).
    dim_checks: Vec<(usize, usize, SymExpr)>,
}

impl SymbolSources {
    fn new(graph: &Graph, inputs: &[ValueRef]) -> SymbolSources {
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
        SymbolSources {
            sym_src,
            dim_checks,
        }
    }
}

/// The replay program of shape inference: every op of the graph as captured (dead ones too, in
/// capture order), each with the size guards on its outputs.
struct Replay {
    calls: Vec<ReplayCall>,
    constants: Vec<(usize, Tensor)>,
    /// Size guards on the graph inputs.
    input_size_guards: Vec<(usize, SizeGuard)>,
}

impl Replay {
    fn new(
        captured: &Graph,
        captured_order: &[NodeId],
        id: &dyn Fn(ValueRef) -> Result<usize>,
    ) -> Result<Replay> {
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
        let mut calls = Vec::new();
        let mut constants = Vec::new();
        let mut input_size_guards = Vec::new();
        for &n in captured_order {
            let node = captured
                .node(n)
                .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
            let guards = guards_of.remove(&n).unwrap_or_default();
            match &node.kind {
                NodeKind::Constant(c) => {
                    let device = node.outputs.first().map_or(Device::Cpu, |m| m.device);
                    constants.push((id(ValueRef::new(n, 0))?, constant_tensor(c, device)?));
                }
                NodeKind::Op(call) => {
                    let call = CompiledGraph::node_call(captured, n, call, id)?;
                    // A custom op's outputs were bound to the sizes of its inputs at capture
                    // (its fake kernel ran at the example sizes only): check the binding.
                    let bound_outputs = if call.op.builtin().is_none() {
                        symbolic_outputs(node, n, id)?
                    } else {
                        Vec::new()
                    };
                    calls.push(ReplayCall {
                        call,
                        guards,
                        bound_outputs,
                    });
                }
                NodeKind::Input { .. } => input_size_guards.extend(guards),
                NodeKind::Output { .. } => {}
            }
        }
        Ok(Replay {
            calls,
            constants,
            input_size_guards,
        })
    }
}

/// The outputs of node `n` with a symbolic dim, each with its dims (dense value ids).
fn symbolic_outputs(
    node: &tensorplay_ir::graph::Node,
    n: NodeId,
    id: &dyn Fn(ValueRef) -> Result<usize>,
) -> Result<Vec<(usize, Vec<Dim>)>> {
    let mut out = Vec::new();
    for (i, m) in node.outputs.iter().enumerate() {
        if m.shape.iter().any(|d| d.as_static().is_none()) {
            out.push((id(ValueRef::new(n, i))?, m.shape.to_vec()));
        }
    }
    Ok(out)
}

/// The constants (as tensors) and op nodes of the graph after DCE, in topological order.
struct LiveNodes {
    constants: Vec<(usize, Tensor)>,
    calls: Vec<NodeCall>,
}

impl LiveNodes {
    fn new(
        graph: &Graph,
        order: &[NodeId],
        id: &dyn Fn(ValueRef) -> Result<usize>,
    ) -> Result<LiveNodes> {
        let mut constants = Vec::new();
        let mut calls = Vec::new();
        for &n in order {
            let node = graph
                .node(n)
                .ok_or_else(|| Error::compile(CompileKind::Launch, format!("node {n} vanished")))?;
            match &node.kind {
                NodeKind::Constant(c) => {
                    let device = node.outputs.first().map_or(Device::Cpu, |m| m.device);
                    constants.push((id(ValueRef::new(n, 0))?, constant_tensor(c, device)?));
                }
                NodeKind::Op(call) => calls.push(CompiledGraph::node_call(graph, n, call, id)?),
                _ => {}
            }
        }
        Ok(LiveNodes { constants, calls })
    }
}

/// The fusion plan's steps in order: each node step a copy of its op node's call, each region
/// step the region lowered ([`region_run`]).
fn plan_steps(
    graph: &Graph,
    plan: &FusionPlan,
    calls: &[NodeCall],
    id: &dyn Fn(ValueRef) -> Result<usize>,
) -> Result<Vec<Exec>> {
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
            Step::Region(r) => steps.push(Exec::Region(Box::new(region_run(graph, plan, r, id)?))),
        }
    }
    Ok(steps)
}

/// Region `r` of `plan` lowered to its kernel spec, with its scalar arguments encoded, its
/// operands as dense ids and the value whose shape is its iteration shape.
fn region_run(
    graph: &Graph,
    plan: &FusionPlan,
    r: usize,
    id: &dyn Fn(ValueRef) -> Result<usize>,
) -> Result<RegionRun> {
    let region = &plan.regions[r];
    let lowered = lower(graph, region)?;
    let iter_ref = match &region.kind {
        RegionKind::Pointwise => *region.outputs.first().ok_or_else(|| {
            Error::compile(CompileKind::Launch, format!("region {r} has no outputs"))
        })?,
        RegionKind::Reduction { reduction, .. } => graph.args_of(*reduction)?[0],
        RegionKind::Softmax { node, .. } => graph.args_of(*node)?[0],
    };
    let params = ScalarArgs::new(&lowered.spec.param_dtypes(), &lowered.params)?;
    Ok(RegionRun {
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
    })
}

/// For each step, the values whose last use it is: intermediates are freed (and their buffers
/// recycled by the allocator) as soon as nothing needs them. Graph inputs and outputs never
/// die.
fn dies_after(
    steps: &[Exec],
    num_values: usize,
    input_ids: &[usize],
    output_ids: &[usize],
) -> Vec<Vec<usize>> {
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
    dies_after
}

/// The buffer plan's slot of every value (dense ids; `None` outside the arena).
fn slot_of_ids(
    buffers: &BufferPlan,
    ids: &HashMap<ValueRef, usize>,
    num_values: usize,
) -> Vec<Option<usize>> {
    let mut slot_of_id = vec![None; num_values];
    for pv in buffers.values() {
        if let Some(&i) = ids.get(&pv.value) {
            slot_of_id[i] = Some(pv.slot);
        }
    }
    slot_of_id
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

/// The kind of product step `c` is when it can take an epilogue, and whether that kind's
/// fusion is on (`TP_MATMUL_EPILOGUE=0` / `TP_CONV_EPILOGUE=0` keep the steps apart, for
/// measuring what fusion changes): the built-in op with no kernel registered over it, on
/// plain tensor operands.
fn product_kind(c: &NodeCall) -> Option<ProductKind> {
    static MATMUL_ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static CONV_ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = |cell: &std::sync::OnceLock<bool>, var: &str| {
        *cell.get_or_init(|| std::env::var(var).map_or(true, |v| v != "0"))
    };
    let def = c.op.builtin()?;
    if c.op.selected_slot(Device::Cpu).is_some() {
        return None;
    }
    if std::ptr::eq(def, &MATMUL)
        && matches!(c.args.as_slice(), [ArgSrc::Tensor(_), ArgSrc::Tensor(_)])
        && on(&MATMUL_ON, "TP_MATMUL_EPILOGUE")
    {
        return Some(ProductKind::Matmul);
    }
    if std::ptr::eq(def, &CONV2D)
        && matches!(
            c.args.as_slice(),
            [ArgSrc::Tensor(_), ArgSrc::Tensor(_), ..]
        )
        && on(&CONV_ON, "TP_CONV_EPILOGUE")
    {
        return Some(ProductKind::Conv2d);
    }
    None
}

/// Most view steps an epilogue pair may reach over: a product and its region can be separated
/// by steps that do not touch the product, such as batch norm's reshapes of its `[C]`
/// statistics to `[1, C, 1, 1]` between a convolution and the region that normalises it.
const MAX_STEPS_BETWEEN: usize = 8;

/// Fuses each matmul or conv2d step with the pointwise region after it ([`Exec::Epilogue`])
/// when that region alone reads the product (no later step, not a graph output), the product
/// is a CPU value of the region's iteration shape (as is every region output) — 2-D for a
/// matmul, `[N, C, H, W]` in f32 or f64 for a convolution — and the product is the built-in op
/// with no kernel registered over it.
///
/// Between the product and its region there may be view steps (at most [`MAX_STEPS_BETWEEN`])
/// that do not read the product: the fused step takes the region's place, after them. Moving
/// the product past them changes nothing: a view reads no data and writes no buffer (views get
/// no arena slot, so none can reuse the memory of an operand the product still has to read).
fn fuse_epilogues(
    steps: Vec<Exec>,
    graph: &Graph,
    ids: &HashMap<ValueRef, usize>,
    output_ids: &[usize],
) -> Vec<Exec> {
    let value_of: HashMap<usize, ValueRef> = ids.iter().map(|(&v, &i)| (i, v)).collect();
    let meta = |id: usize| value_of.get(&id).and_then(|&v| graph.meta(v));
    let reads: Vec<Vec<usize>> = steps.iter().map(step_reads).collect();
    // The product kind and the index of the region that step `i` fuses with, if any.
    let pair = |i: usize| -> Option<(ProductKind, usize)> {
        let Exec::Node(c) = &steps[i] else {
            return None;
        };
        let [v] = c.outs.as_slice() else {
            return None;
        };
        let kind = product_kind(c)?;
        let between = |s: &Exec, r: &[usize]| {
            let view = |n: &NodeCall| {
                n.op.builtin()
                    .is_some_and(|d| matches!(d.kernel, Kernel::View(_)))
                    && n.op.selected_slot(Device::Cpu).is_none()
            };
            matches!(s, Exec::Node(n) if view(n)) && !r.contains(v)
        };
        let j = (i + 1..steps.len().min(i + 2 + MAX_STEPS_BETWEEN))
            .find(|&j| !between(&steps[j], &reads[j]))?;
        let Exec::Region(r) = &steps[j] else {
            return None;
        };
        let (pm, im) = (meta(*v)?, meta(r.iter_value)?);
        let rank_ok = match kind {
            ProductKind::Matmul => pm.shape.len() == 2,
            ProductKind::Conv2d => {
                pm.shape.len() == 4 && matches!(pm.dtype, DType::F32 | DType::F64)
            }
        };
        let ok = rank_ok
            && matches!(r.lowered.spec.kind, LoopKind::Pointwise)
            && pm.device == Device::Cpu
            && pm.shape == im.shape
            && r.outs
                .iter()
                .all(|&o| meta(o).is_some_and(|m| m.shape == pm.shape))
            && r.ins.contains(v)
            && !output_ids.contains(v)
            && !reads[j + 1..].iter().any(|later| later.contains(v));
        ok.then_some((kind, j))
    };
    // (product step, kind, region step), in order and disjoint: a step is in at most one pair.
    let mut pairs = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        match pair(i) {
            Some((kind, j)) => {
                pairs.push((i, kind, j));
                i = j + 1;
            }
            None => i += 1,
        }
    }
    let mut slots: Vec<Option<Exec>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len() - pairs.len());
    let mut next = 0;
    for (i, kind, j) in pairs {
        out.extend(slots[next..i].iter_mut().filter_map(Option::take));
        let product = slots[i].take();
        out.extend(slots[i + 1..j].iter_mut().filter_map(Option::take));
        match (product, slots[j].take()) {
            (Some(Exec::Node(product)), Some(Exec::Region(region))) => {
                out.push(Exec::Epilogue(Box::new(EpilogueRun {
                    kind,
                    product,
                    region: *region,
                })))
            }
            // `pair` saw a node and a region at these places.
            (p, r) => out.extend(p.into_iter().chain(r)),
        }
        next = j + 1;
    }
    out.extend(slots[next..].iter_mut().filter_map(Option::take));
    out
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
