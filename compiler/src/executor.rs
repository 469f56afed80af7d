//! The executor: runs a compiled graph — fused regions as generated kernels, every other node
//! through the dispatcher — in the plan's order.
//!
//! Shapes are dynamic: kernels take sizes at run time, and the concrete shape of every value is
//! computed once per distinct set of input shapes (by running the ops' meta rules on fake
//! tensors) and cached. Guards fix what kernels were specialised for: input count, rank, dtype,
//! device and which dims have size 1 (the broadcast pattern).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tensorplay_ir::graph::{Arg, Attr, Constant, NodeKind, OpCall};
use tensorplay_ir::{DType, Device, Dim, Error, Graph, NodeId, Result, Shape, ValueRef};
use tensorplay_runtime::autograd::is_grad_enabled;
use tensorplay_runtime::dispatch;
use tensorplay_runtime::library::{Operator, registry};
use tensorplay_runtime::{Scalar, Tensor, Value};

use crate::codegen::cache;
use crate::codegen::cpu::CompiledKernel;
use crate::codegen::kernel::{LoweredRegion, lower};
use crate::passes::{BufferPlan, FusionPlan, RegionKind, Step, buffer_plan, dce, fusion, logging};

/// Where an op argument comes from at run time.
#[derive(Clone)]
enum ArgSrc {
    Tensor(usize),
    OptTensor(Option<usize>),
    List(Vec<usize>),
    Value(Value),
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
    lowered: LoweredRegion,
    ins: Vec<usize>,
    outs: Vec<usize>,
    /// The value whose shape is the loop's iteration shape.
    iter_value: usize,
    /// The kernel used last time (skips the cache lookup when the layout repeats).
    last: Mutex<Option<Arc<CompiledKernel>>>,
}

enum Exec {
    Node(NodeCall),
    Region(RegionRun),
}

/// Run-time facts about each graph input that the compiled code relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Guard {
    dtype: DType,
    device: Device,
    /// `Some(n)` for a dim that must have size `n` (static dims, and size-1 broadcast dims);
    /// `None` for a symbolic dim.
    dims: Vec<Option<usize>>,
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
    /// For each step, the values whose last use it is (dropped after the step).
    dies_after: Vec<Vec<usize>>,
    /// Every op node in topological order (for shape inference and the autograd path).
    calls: Vec<NodeCall>,
    shape_cache: Mutex<HashMap<Vec<Shape>, Arc<Vec<Shape>>>>,
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
        Attr::None => Value::None,
    }
}

/// The tensor a constant node stands for (scalars become wrapped Rust scalars, as captured).
fn constant_tensor(c: &Constant, device: Device) -> Result<Tensor> {
    if device != Device::Cpu {
        return Err(Error::Compile(format!(
            "constants on {device} are not supported"
        )));
    }
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

fn shape_of(dims: &[Dim]) -> Vec<Option<usize>> {
    dims.iter().map(|d| d.as_static()).collect()
}

impl CompiledGraph {
    /// Compiles `graph`: DCE, fusion, buffer planning and lowering of every region. Kernels are
    /// generated on first use for the stride layout they meet (and cached process-wide).
    pub fn new(graph: &Graph) -> Result<CompiledGraph> {
        graph.validate()?;
        logging::log("graph", || format!("captured graph:\n{graph}"));
        let graph = dce::dce(graph)?;
        let plan = fusion::partition(&graph)?;
        let buffers = buffer_plan::plan(&graph, &plan)?;

        // Dense value ids, in topological order.
        let order = graph.topo_order()?;
        let mut ids = HashMap::new();
        let mut dtypes = Vec::new();
        for &n in &order {
            let node = graph
                .node(n)
                .ok_or_else(|| Error::Compile(format!("node {n} vanished")))?;
            for (i, m) in node.outputs.iter().enumerate() {
                ids.insert(ValueRef::new(n, i), dtypes.len());
                dtypes.push(m.dtype);
            }
        }
        let id = |v: ValueRef| -> Result<usize> {
            ids.get(&v)
                .copied()
                .ok_or_else(|| Error::Compile(format!("value {v:?} has no producer")))
        };
        let inputs = graph.inputs();
        let input_ids = inputs.iter().map(|&v| id(v)).collect::<Result<Vec<_>>>()?;
        let guards = inputs
            .iter()
            .map(|&v| {
                let m = graph
                    .meta(v)
                    .ok_or_else(|| Error::Compile("input without metadata".into()))?;
                Ok(Guard {
                    dtype: m.dtype,
                    device: m.device,
                    dims: shape_of(&m.shape),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let output_ids = graph
            .outputs()?
            .into_iter()
            .map(id)
            .collect::<Result<Vec<_>>>()?;

        let mut constants = Vec::new();
        let mut calls = Vec::new();
        for &n in &order {
            let node = graph
                .node(n)
                .ok_or_else(|| Error::Compile(format!("node {n} vanished")))?;
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
                    let call = calls
                        .iter()
                        .find(|c| c.node == n)
                        .ok_or_else(|| Error::Compile(format!("step node {n} is not an op")))?;
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
                        RegionKind::Pointwise => *region
                            .outputs
                            .first()
                            .ok_or_else(|| Error::Compile(format!("region {r} has no outputs")))?,
                        RegionKind::Reduction { reduction, .. } => graph.args_of(*reduction)?[0],
                        RegionKind::Softmax { node, .. } => graph.args_of(*node)?[0],
                    };
                    steps.push(Exec::Region(RegionRun {
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
                    }));
                }
            }
        }

        // Last use of every value, so intermediates are freed (and their buffers recycled by
        // the allocator) as soon as nothing needs them.
        let num_values = dtypes.len();
        let mut last_use = vec![None::<usize>; num_values];
        for (si, s) in steps.iter().enumerate() {
            let reads: Vec<usize> = match s {
                Exec::Node(c) => c
                    .args
                    .iter()
                    .flat_map(|a| match a {
                        ArgSrc::Tensor(i) => vec![*i],
                        ArgSrc::OptTensor(i) => i.iter().copied().collect(),
                        ArgSrc::List(v) => v.clone(),
                        ArgSrc::Value(_) => vec![],
                    })
                    .chain(c.outs.iter().copied())
                    .collect(),
                Exec::Region(r) => r.ins.iter().chain(&r.outs).copied().collect(),
            };
            for v in reads {
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
            dies_after,
            calls,
            shape_cache: Mutex::new(HashMap::new()),
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
            Error::Compile(format!(
                "{}: {e} (was it registered before the graph was compiled?)",
                graph.describe(n)
            ))
        })?;
        let producers = graph.args_of(n)?;
        let mut next = producers.into_iter();
        let mut take = || -> Result<usize> {
            let v = next.next().ok_or_else(|| {
                Error::Compile(format!("{}: missing tensor argument", graph.describe(n)))
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
                Arg::Attr { value, .. } => ArgSrc::Value(attr_value(value)),
            });
        }
        let node = graph
            .node(n)
            .ok_or_else(|| Error::Compile(format!("node {n} vanished")))?;
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

    /// Regions, their ops, and which barrier (and why) split them.
    pub fn explain(&self) -> String {
        self.plan.explain(&self.graph)
    }

    /// The graph as DOT, fused regions drawn as clusters.
    pub fn to_dot(&self) -> String {
        self.plan.to_dot(&self.graph)
    }

    /// Number of fused regions (kernels).
    pub fn num_kernels(&self) -> usize {
        self.plan.regions.len()
    }

    fn check_guards(&self, inputs: &[Tensor]) -> Result<()> {
        if inputs.len() != self.guards.len() {
            return Err(Error::Compile(format!(
                "guard failed: the graph takes {} inputs, got {}",
                self.guards.len(),
                inputs.len()
            )));
        }
        for (i, (t, g)) in inputs.iter().zip(&self.guards).enumerate() {
            let dims_ok = t.rank() == g.dims.len()
                && t.shape()
                    .iter()
                    .zip(&g.dims)
                    .all(|(&s, d)| d.is_none_or(|d| d == s) && (d.is_some() || s != 1));
            if t.dtype() != g.dtype || t.device() != g.device || !dims_ok {
                let want: Vec<String> = g
                    .dims
                    .iter()
                    .map(|d| d.map_or("s".into(), |d| d.to_string()))
                    .collect();
                return Err(Error::Compile(format!(
                    "guard failed for input {i}: compiled for {}[{}] on {}, got {}{} on {} (rank, dtype, device and size-1 dims must match; recompile for this input)",
                    g.dtype,
                    want.join(", "),
                    g.device,
                    t.dtype(),
                    tensorplay_ir::shape::fmt_shape(t.shape()),
                    t.device()
                )));
            }
        }
        Ok(())
    }

    /// True when `inputs` pass this graph's guards.
    pub fn accepts(&self, inputs: &[Tensor]) -> bool {
        self.check_guards(inputs).is_ok()
    }

    fn args_of(call: &NodeCall, env: &[Option<Tensor>]) -> Result<Vec<Value>> {
        let get = |i: usize| -> Result<Tensor> {
            env[i]
                .clone()
                .ok_or_else(|| Error::Compile(format!("value {i} used before it was computed")))
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
                })
            })
            .collect()
    }

    fn call_node(call: &NodeCall, env: &mut [Option<Tensor>]) -> Result<()> {
        let args = Self::args_of(call, env)?;
        let outs = match call.op.builtin() {
            Some(def) => dispatch::call(def, &args)?,
            None => dispatch::call_bound(&call.op, &args)?,
        };
        if outs.len() < call.outs.len() {
            return Err(Error::Compile(format!(
                "`{}` returned {} outputs, the graph expects {}",
                call.op.qualname(),
                outs.len(),
                call.outs.len()
            )));
        }
        for (&slot, t) in call.outs.iter().zip(outs) {
            env[slot] = Some(t);
        }
        Ok(())
    }

    /// Shapes of every value for these input shapes (computed once per distinct input shapes by
    /// running the meta rules on fake tensors).
    fn shapes_for(&self, inputs: &[Tensor]) -> Result<Arc<Vec<Shape>>> {
        let key: Vec<Shape> = inputs.iter().map(|t| Shape::from(t.shape())).collect();
        if let Some(s) = self.shape_cache.lock().get(&key) {
            return Ok(s.clone());
        }
        let mut env: Vec<Option<Tensor>> = vec![None; self.num_values];
        for (&i, t) in self.input_ids.iter().zip(inputs) {
            env[i] = Some(Tensor::empty_fake(t.shape(), t.dtype(), t.device()));
        }
        for (i, t) in &self.constants {
            env[*i] = Some(t.clone());
        }
        {
            let _g = tensorplay_runtime::autograd::no_grad();
            for call in &self.calls {
                Self::call_node(call, &mut env)?;
            }
        }
        let shapes: Vec<Shape> = env
            .iter()
            .map(|t| {
                t.as_ref()
                    .map_or_else(Shape::new, |t| Shape::from(t.shape()))
            })
            .collect();
        let shapes = Arc::new(shapes);
        self.shape_cache.lock().insert(key, shapes.clone());
        Ok(shapes)
    }

    fn env_with_inputs(&self, inputs: &[Tensor]) -> Vec<Option<Tensor>> {
        let mut env: Vec<Option<Tensor>> = vec![None; self.num_values];
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
                env[i]
                    .clone()
                    .ok_or_else(|| Error::Compile(format!("output value {i} was never computed")))
            })
            .collect()
    }

    /// Runs the graph on `inputs`. When gradients are needed (grad mode on and an input requires
    /// grad), the graph is interpreted op by op through the dispatcher so autograd records it.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        if is_grad_enabled() && inputs.iter().any(Tensor::requires_grad) {
            return self.interpret(inputs);
        }
        let shapes = self.shapes_for(inputs)?;
        let mut env = self.env_with_inputs(inputs);
        for (si, step) in self.steps.iter().enumerate() {
            match step {
                Exec::Node(call) => Self::call_node(call, &mut env)?,
                Exec::Region(r) => self.run_region(r, &shapes, &mut env)?,
            }
            for &v in &self.dies_after[si] {
                env[v] = None;
            }
        }
        self.collect_outputs(&env)
    }

    fn run_region(
        &self,
        r: &RegionRun,
        shapes: &[Shape],
        env: &mut [Option<Tensor>],
    ) -> Result<()> {
        let ins: Vec<Tensor> = r
            .ins
            .iter()
            .map(|&i| {
                env[i]
                    .clone()
                    .ok_or_else(|| Error::Compile(format!("region input {i} not computed")))
            })
            .collect::<Result<_>>()?;
        let outs: Vec<Tensor> = r
            .outs
            .iter()
            .map(|&o| Tensor::try_empty(&shapes[o], self.dtypes[o]))
            .collect::<Result<_>>()?;
        let in_refs: Vec<&Tensor> = ins.iter().collect();
        let out_refs: Vec<&Tensor> = outs.iter().collect();
        let iter_shape = &shapes[r.iter_value];
        let plan =
            crate::codegen::cpu::plan(&r.lowered.spec, &in_refs, &out_refs, Some(iter_shape))?;
        let kernel = {
            let mut last = r.last.lock();
            match last.as_ref() {
                Some(k) if k.layout() == &plan.layout => k.clone(),
                _ => {
                    let k = cache::get_or_compile(&r.lowered.spec, &plan.layout)?;
                    *last = Some(k.clone());
                    k
                }
            }
        };
        kernel.launch_plan(&plan)?;
        for (&o, t) in r.outs.iter().zip(outs) {
            env[o] = Some(t);
        }
        Ok(())
    }

    /// Runs every op node through the dispatcher in topological order (no generated kernels):
    /// the reference the compiled path is checked against, and the path that records autograd.
    pub fn interpret(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        let mut env = self.env_with_inputs(inputs);
        for call in &self.calls {
            Self::call_node(call, &mut env)?;
        }
        self.collect_outputs(&env)
    }

    /// Dense id of a graph value (for tests and tools).
    pub fn value_id(&self, v: ValueRef) -> Option<usize> {
        self.ids.get(&v).copied()
    }
}
