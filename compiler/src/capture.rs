//! Capture: run a user closure on proxy (fake) tensors with a capture hook installed, recording
//! every call that reaches the bottom of the dispatcher into an IR graph. Capture is the bottom
//! layer, so autocast's casts, vmap's batched (physical) ops and per-example calls are recorded
//! as the ops they became.
//!
//! Sizes: the closure sees the example sizes. Every size it reads as a plain integer (through
//! `shape()`, `size(d)` or `numel()` of a proxy-derived tensor, also inside tensor methods and
//! batching rules) is recorded as a [`SizeGuard`]: the executor uses the graph only for inputs
//! under which every guarded value has the same size, so a baked-in integer is never wrong.
//!
//! Policy (DESIGN §5.1): builtin ops become nodes of their op-table class. A custom op is traced
//! through — its builtin ops become fusible nodes — when it does not mutate, is not a triton op,
//! has no custom autograd and its selected kernel is the device-agnostic body; if that body reads
//! data, the partial trace is rolled back and the op becomes one opaque node shaped by its fake
//! kernel. Every other custom op is an opaque node (a fusion barrier) with the reason recorded.
//! Mutations get ordering edges after every earlier reader and before every later reader.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use tensorplay_ir::CompileKind;

use tensorplay_ir::graph::{Attr, BuilderArg, Constant, GraphBuilder, SizeGuard, SymGuard};
use tensorplay_ir::schema::Schema;
use tensorplay_ir::{
    DType, Device, Dim, Error, Graph, NodeId, OpClass, Result, SymExpr, TensorMeta, ValueRef,
};
use tensorplay_runtime::capture::{CaptureHook, TraceHook, install, suspend};
use tensorplay_runtime::dispatch;
use tensorplay_runtime::dispatch::CustomOperator;
use tensorplay_runtime::library::{Operator, Slot, registry};
use tensorplay_runtime::ops::OpDef;
use tensorplay_runtime::ops::sym_meta::{SymArg, SymCtx, sym_meta};
use tensorplay_runtime::{Tensor, Value};

use crate::grad_plan::{GradPlan, NodeGrad};

/// Largest tensor a closure may capture as a literal constant (larger ones must be inputs).
pub const MAX_CONSTANT_ELEMS: usize = 64;

/// Options of [`capture`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CaptureOptions {
    /// Make every input dim except size-1 (broadcast) dims symbolic in the graph's input metadata.
    pub dynamic: bool,
}

#[derive(Clone, Default)]
struct TraceState {
    builder: GraphBuilder,
    /// Tensor identity → the graph value it holds.
    values: HashMap<usize, ValueRef>,
    /// Value → the last node that mutated it, for ordering later readers.
    last_writer: HashMap<ValueRef, NodeId>,
    /// Every tensor seen, kept alive so identities stay unique during the trace.
    keep_alive: Vec<Tensor>,
    /// Real tensors the closure closes over, captured as literal constants.
    constants: Vec<Tensor>,
    /// The symbolic shape of every value that has one (inputs, constants, and results of ops
    /// with a symbolic meta rule whose arguments have one).
    sym_dims: HashMap<ValueRef, Vec<SymExpr>>,
    /// The example value of each symbol `s{k}`.
    hints: Vec<i64>,
    /// Symbols a guard showed equal to a smaller one (`s_a - s_b == 0`: `b → a`). Every input
    /// dim starts as its own symbol; the first op that relates two of them (a broadcast, the
    /// inner dims of a matmul) merges them, so later shapes use one symbol and the finished
    /// graph has one symbol per distinct size (which the fuser needs to see one loop).
    merged: HashMap<u32, u32>,
    /// Values some handle of which requires grad (inputs, and results autograd attached a
    /// backward node to), when the tracer records a [`GradPlan`].
    requires_grad: HashSet<ValueRef>,
    /// Per op node, when the tracer records a [`GradPlan`]: its tensor arguments' handles'
    /// `requires_grad`, and `Some(grad mode)` for a call no autograd layer ran below (an op
    /// without a backward rule sees the caller's grad mode), `None` for one it may have.
    node_grad: Vec<(NodeId, Vec<bool>, Option<bool>)>,
}

struct Tracer {
    state: RefCell<TraceState>,
    /// A joint (forward + backward) capture for compiled training.
    joint: bool,
    /// Record what autograd does at each node (a [`GradPlan`]).
    grad_plan: bool,
}

/// A captured real tensor as a literal constant.
fn constant_of(t: &Tensor) -> Result<Constant> {
    if t.is_fake() {
        return Err(Error::compile(
            CompileKind::Capture,
            format!("capture met a fake tensor {t:?} that is not derived from the inputs"),
        ));
    }
    if t.numel() > MAX_CONSTANT_ELEMS {
        return Err(Error::compile(
            CompileKind::Capture,
            format!(
                "the captured function uses a tensor {t:?} that is not one of its inputs; tensors \
             larger than {MAX_CONSTANT_ELEMS} elements must be passed as inputs"
            ),
        ));
    }
    let dtype = t.dtype();
    Ok(if t.is_wrapped_scalar() {
        match dtype {
            DType::Bool => Constant::Bool(t.item::<bool>()?),
            d if d.is_float() => Constant::Float {
                value: t.item::<f64>()?,
                dtype: d,
            },
            d => Constant::Int {
                value: t.item::<i64>()?,
                dtype: d,
            },
        }
    } else if dtype.is_float() {
        Constant::FloatTensor {
            data: t.to_vec_f64()?,
            shape: t.shape().to_vec(),
            dtype,
        }
    } else {
        let data = t.to_dtype(DType::I64)?.to_vec::<i64>()?;
        Constant::IntTensor {
            data,
            shape: t.shape().to_vec(),
            dtype,
        }
    })
}

impl TraceState {
    /// Adds a graph input of example shape `shape`. Under `dynamic`, sizes 0 and 1 are
    /// specialised (they change what broadcasting and empty tensors do); every other size becomes
    /// the next symbol `s{next_sym}`, with its example value as hint (guarded to stay >= 2).
    fn add_input(
        &mut self,
        name: String,
        m: &TensorMeta,
        shape: &[usize],
        dynamic: bool,
        next_sym: &mut u32,
    ) -> ValueRef {
        let mut meta = m.clone();
        if dynamic {
            for (d, &n) in meta.shape.iter_mut().zip(shape) {
                if n >= 2 {
                    *d = Dim::Sym(*next_sym);
                    *next_sym += 1;
                    self.hints.push(n as i64);
                }
            }
        }
        let v = self.builder.input(name, meta.clone());
        self.sym_dims
            .insert(v, meta.shape.iter().map(|d| d.to_expr()).collect());
        v
    }

    /// The symbol `k` stands for after the merges.
    fn representative(&self, mut k: u32) -> u32 {
        while let Some(&a) = self.merged.get(&k) {
            k = a;
        }
        k
    }

    /// `e` in representative symbols.
    fn canonical(&self, e: SymExpr) -> SymExpr {
        if self.merged.is_empty() {
            return e;
        }
        e.substitute(&|k| {
            let r = self.representative(k);
            (r != k).then(|| SymExpr::sym(r))
        })
    }

    /// Records a condition capture relied on, merging the symbols it equates.
    fn record_sym_guard(&mut self, g: SymGuard) {
        let g = SymGuard {
            expr: self.canonical(g.expr),
            ..g
        };
        if g.holds(&|_| None) == Some(true) {
            return;
        }
        if let Some((a, b)) = g.equated_symbols() {
            self.merged.insert(b, a);
        }
        self.builder.sym_guard(g);
    }

    fn value_of(&mut self, t: &Tensor) -> Result<ValueRef> {
        if let Some(v) = self.values.get(&t.identity()) {
            return Ok(*v);
        }
        let c = constant_of(t)?;
        let v = self.builder.constant(c, t.device())?;
        self.sym_dims.insert(
            v,
            t.shape().iter().map(|&d| SymExpr::lit(d as i64)).collect(),
        );
        self.values.insert(t.identity(), v);
        self.keep_alive.push(t.clone());
        self.constants.push(t.clone());
        Ok(v)
    }

    /// Notes, for a [`GradPlan`], the handles `args` passed to `node` and the grad mode the
    /// call saw (`None`: an autograd layer may have run it under `no_grad`).
    fn note_grad(&mut self, node: NodeId, args: &[Value], mode: Option<bool>) {
        let handles = args
            .iter()
            .flat_map(Value::tensors)
            .map(Tensor::requires_grad)
            .collect();
        self.node_grad.push((node, handles, mode));
    }

    /// The [`GradPlan`] of the finished trace: a call recorded nothing when an argument required
    /// grad but the caller's grad mode was off, or (when an autograd layer may have run) no
    /// output got a backward node.
    fn grad_plan(&self) -> GradPlan {
        let graph = self.builder.graph();
        // Values whose proxies do not require grad although eager's tensors may: results of an
        // op whose grad mode was noted (an opaque custom op, a builtin without a derivative:
        // its formula or its kernel's ops record in eager), and what is computed from them.
        // Their handles are never detached on replay.
        let mut hidden: HashSet<ValueRef> = HashSet::new();
        let mut nodes = HashMap::new();
        for (node, handles, mode) in &self.node_grad {
            let producers = graph.args_of(*node).unwrap_or_default();
            let mut handles = handles.clone();
            let mut from_hidden = false;
            for (h, v) in handles.iter_mut().zip(&producers) {
                if hidden.contains(v) {
                    *h = true;
                    from_hidden = true;
                }
            }
            let outputs = graph.node(*node).map_or(0, |n| n.outputs.len());
            let outs = (0..outputs).map(|i| ValueRef::new(*node, i));
            let recorded = match mode {
                Some(grad_on) => *grad_on,
                // Below an autograd layer: it recorded when a result requires grad, or (grad
                // mode being on, as the layer saw it) when an argument hides that it does.
                None => from_hidden || outs.clone().any(|v| self.requires_grad.contains(&v)),
            };
            let any_grad = handles.iter().any(|&r| r);
            if recorded && any_grad && (mode.is_some() || from_hidden) {
                hidden.extend(outs);
            }
            let grad = NodeGrad {
                no_grad: any_grad && !recorded,
                handle_requires_grad: handles,
            };
            nodes.insert(*node, grad);
        }
        GradPlan { nodes }
    }

    /// Refuses a mutation of a tensor the closure closes over (or of a view of one): the graph
    /// would hold a copy of it as a constant, so compiled calls would update the copy — not the
    /// tensor — and read stale values. Checked before the op runs, so the tensor is untouched.
    /// Tensors computed during the trace (even from closed-over ones) are graph values and may
    /// be mutated.
    fn check_mutation_target(&self, op: &str, t: &Tensor) -> Result<()> {
        if t.is_fake() {
            return Ok(());
        }
        let seen = self.values.contains_key(&t.identity());
        let aliases_constant = self.constants.iter().any(|c| c.storage().same(t.storage()));
        if seen && !aliases_constant {
            return Ok(());
        }
        Err(Error::compile(
            CompileKind::Capture,
            format!(
                "`{op}` mutates {t:?}, a tensor the compiled closure closes over or made outside \
                 the trace (not derived from its inputs); compiled calls would update a copy of \
                 it captured as a constant. Pass it to the compiled function as an input instead"
            ),
        ))
    }

    /// Builder arguments for `args`, named after the schema's parameters.
    fn builder_args(
        &mut self,
        schema: &Schema,
        args: &[Value],
    ) -> Result<(Vec<BuilderArg>, Vec<ValueRef>)> {
        let mut out = Vec::with_capacity(args.len());
        let mut reads = Vec::new();
        for (i, v) in args.iter().enumerate() {
            let name = schema.params.get(i).map(|p| p.name.clone());
            let arg = match v {
                Value::Tensor(t) | Value::OptionalTensor(Some(t)) => {
                    let r = self.value_of(t)?;
                    reads.push(r);
                    if matches!(v, Value::OptionalTensor(_)) {
                        BuilderArg::OptionalTensor(Some(r))
                    } else {
                        BuilderArg::Tensor(r)
                    }
                }
                Value::TensorList(ts) => {
                    let rs = ts
                        .iter()
                        .map(|t| self.value_of(t))
                        .collect::<Result<Vec<_>>>()?;
                    reads.extend(&rs);
                    BuilderArg::TensorList(rs)
                }
                // Graphs have no absent list entries; a full `Tensor?[]` is recorded as a list.
                Value::OptionalTensorList(ts) => {
                    let rs = ts
                        .iter()
                        .map(|t| match t {
                            Some(t) => self.value_of(t),
                            None => Err(Error::compile(
                                CompileKind::Capture,
                                format!(
                                    "capture: argument `{}` is a Tensor?[] with absent entries, \
                                     which graphs cannot hold",
                                    name.as_deref().unwrap_or("?")
                                ),
                            )),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    reads.extend(&rs);
                    BuilderArg::TensorList(rs)
                }
                other => BuilderArg::Attr {
                    name,
                    value: other.to_attr().unwrap_or(Attr::None),
                },
            };
            out.push(arg);
        }
        Ok((out, reads))
    }

    /// Adds an op node reading `reads`, ordered after the last writers of those values, and maps
    /// `outputs` to its results.
    #[allow(clippy::too_many_arguments)]
    fn add_node(
        &mut self,
        name: &str,
        class: OpClass,
        args: Vec<BuilderArg>,
        reads: &[ValueRef],
        outputs: &[Tensor],
        mutated: &[ValueRef],
        reason: Option<String>,
        sym: Option<Vec<Vec<SymExpr>>>,
    ) -> Result<NodeId> {
        let mut metas: Vec<TensorMeta> = outputs.iter().map(Tensor::meta).collect();
        if let Some(shapes) = &sym {
            for (m, dims) in metas.iter_mut().zip(shapes) {
                m.shape = dims.iter().map(|&e| Dim::from_expr(e)).collect();
            }
        }
        let node = self.builder.op_node(name, class, args, metas)?;
        if let Some(r) = reason {
            self.builder.set_barrier_reason(node, r)?;
        }
        for r in reads {
            if let Some(&w) = self.last_writer.get(r)
                && w != node
            {
                self.builder.order(node, w)?;
            }
        }
        for m in mutated {
            self.builder.order_after_readers(node, *m)?;
            self.last_writer.insert(*m, node);
        }
        for (i, t) in outputs.iter().enumerate() {
            // A mutating op returns its (already mapped) target: keep the original value.
            self.values
                .entry(t.identity())
                .or_insert(ValueRef::new(node, i));
            self.keep_alive.push(t.clone());
            if let Some(dims) = sym.as_ref().and_then(|s| s.get(i)) {
                self.sym_dims.insert(ValueRef::new(node, i), dims.clone());
            }
        }
        Ok(node)
    }

    /// Symbolic output shapes for an opaque custom op, whose fake kernel ran at the example sizes
    /// only: each output size equal to the (example value of a) symbolic input size is bound to
    /// it — the same dim of a tensor argument of the same rank first, then any input dim in
    /// argument order — so a graph capturing the op stays size-generic. The binding is a
    /// guess the executor checks on every new set of input sizes (its shape inference replays
    /// the fake kernel; a disagreement is a guard failure, and capture runs again). `None` when
    /// no size is bound (static capture, or sizes unrelated to the inputs').
    fn bind_opaque_outputs(&self, args: &[Value], outs: &[Tensor]) -> Option<Vec<Vec<SymExpr>>> {
        let hint = |k: u32| self.hints.get(k as usize).copied();
        let inputs: Vec<Vec<(SymExpr, i64)>> = args
            .iter()
            .flat_map(Value::tensors)
            .filter_map(|t| {
                let dims = self.sym_dims.get(self.values.get(&t.identity())?)?;
                Some(
                    dims.iter()
                        .filter_map(|&e| {
                            let e = self.canonical(e);
                            Some((e, e.eval(&hint)?))
                        })
                        .collect(),
                )
            })
            .collect();
        let symbolic =
            |e: &SymExpr, n: usize| e.as_lit().is_none() && e.eval(&hint) == Some(n as i64);
        let mut any = false;
        let shapes = outs
            .iter()
            .map(|t| {
                let rank = t.rank();
                t.shape()
                    .iter()
                    .enumerate()
                    .map(|(d, &n)| {
                        let same_dim = inputs
                            .iter()
                            .filter(|dims| dims.len() == rank)
                            .map(|dims| dims[d].0)
                            .find(|e| symbolic(e, n));
                        let any_dim = || {
                            inputs
                                .iter()
                                .flatten()
                                .map(|&(e, _)| e)
                                .find(|e| symbolic(e, n))
                        };
                        match same_dim.or_else(any_dim) {
                            Some(e) => {
                                any = true;
                                e
                            }
                            None => SymExpr::lit(n as i64),
                        }
                    })
                    .collect()
            })
            .collect();
        any.then_some(shapes)
    }

    /// The symbolic output shapes of builtin `op` on `args` (outputs `outs`), when its symbolic
    /// meta rule applies and agrees with the concrete result at the example sizes; the guards
    /// the rule relied on are recorded then.
    fn sym_outputs(
        &mut self,
        op: &'static OpDef,
        args: &[Value],
        outs: &[Tensor],
    ) -> Option<Vec<Vec<SymExpr>>> {
        let lits = |v: &[i64]| v.iter().map(|&i| SymExpr::lit(i)).collect::<Vec<_>>();
        let dims_of = |t: &Tensor| -> Option<Vec<SymExpr>> {
            let dims = self.sym_dims.get(self.values.get(&t.identity())?)?;
            Some(dims.iter().map(|&e| self.canonical(e)).collect())
        };
        let sargs: Vec<SymArg> = args
            .iter()
            .map(|v| match v {
                Value::Tensor(t) => dims_of(t).map_or(SymArg::UnknownTensor, SymArg::Tensor),
                Value::TensorList(ts) => ts
                    .iter()
                    .map(dims_of)
                    .collect::<Option<Vec<_>>>()
                    .map_or(SymArg::UnknownTensor, SymArg::Tensors),
                Value::OptionalTensor(Some(_)) => SymArg::UnknownTensor,
                Value::Bool(b) => SymArg::Bool(*b),
                Value::Int(i) => SymArg::Int(SymExpr::lit(*i)),
                Value::SymInt(s) => SymArg::Int(self.canonical(s.expr())),
                Value::IntList(v) => SymArg::Ints(lits(v)),
                Value::SymIntList(l) => {
                    SymArg::Ints(l.items().iter().map(|s| self.canonical(s.expr())).collect())
                }
                _ => SymArg::Other,
            })
            .collect();
        let hints = self.hints.clone();
        let hint = move |k: u32| hints.get(k as usize).copied();
        let mut ctx = SymCtx {
            hint: &hint,
            guards: Vec::new(),
        };
        let shapes = sym_meta(op, &sargs, &mut ctx)?;
        let agrees = shapes.len() == outs.len()
            && shapes.iter().zip(outs).all(|(dims, t)| {
                let real = t.shape();
                dims.len() == real.len()
                    && dims
                        .iter()
                        .zip(real)
                        .all(|(e, &r)| e.eval(&hint) == Some(r as i64))
            });
        if !agrees {
            return None;
        }
        for g in ctx.guards {
            self.record_sym_guard(g);
        }
        Some(shapes)
    }
}

impl Tracer {
    fn record_builtin(&self, op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
        if op.class == OpClass::Mutating
            && let Some(target) = args.iter().flat_map(Value::tensors).next()
        {
            self.state
                .borrow()
                .check_mutation_target(&format!("tp::{}", op.name), target)?;
        }
        // The tracer's own size reads (metadata of the outputs) are not the closure's.
        let _off = suspend();
        let outs = dispatch::backend(op, args)?;
        let qualname = format!("tp::{}", op.name);
        let schema = registry().get(&qualname)?.schema().clone();
        let mut st = self.state.borrow_mut();
        let (bargs, reads) = st.builder_args(&schema, args)?;
        let mutated: Vec<ValueRef> = if op.class == OpClass::Mutating {
            reads.first().copied().into_iter().collect()
        } else {
            vec![]
        };
        let sym = st.sym_outputs(op, args, &outs);
        let node = st.add_node(
            &qualname, op.class, bargs, &reads, &outs, &mutated, None, sym,
        )?;
        if self.grad_plan {
            // A builtin without a derivative passes the autograd layer by: it sees the caller's
            // grad mode.
            let mode = op
                .derivative
                .is_none()
                .then(tensorplay_runtime::autograd::is_grad_enabled);
            st.note_grad(node, args, mode);
        }
        Ok(outs)
    }

    fn device_of(args: &[Value]) -> Device {
        args.iter()
            .flat_map(Value::tensors)
            .map(Tensor::device)
            .next()
            .unwrap_or(Device::Cpu)
    }

    /// Why `op` cannot be traced through, or `None` when it can.
    fn opaque_reason(op: &Operator, device: Device) -> Option<String> {
        if op.schema().is_mutating() {
            return Some(format!(
                "mutates {}",
                op.schema().mutated_params().join(", ")
            ));
        }
        if op.is_triton() {
            return Some("triton op".into());
        }
        if op.has_autograd() {
            return Some("custom autograd".into());
        }
        match op.selected_slot(device) {
            Some(Slot::Default) => None,
            Some(slot) => Some(format!("{slot} kernel (device-specific)")),
            None => Some("no kernel for the device".into()),
        }
    }

    fn record_opaque(
        &self,
        op: &Arc<Operator>,
        args: &[Value],
        reason: String,
    ) -> Result<Vec<Tensor>> {
        if self.joint
            && !op.has_autograd()
            && tensorplay_runtime::autograd::is_grad_enabled()
            && args
                .iter()
                .flat_map(Value::tensors)
                .any(Tensor::requires_grad)
        {
            return Err(Error::compile(
                CompileKind::Capture,
                format!(
                    "`{}` runs as an opaque node under capture ({reason}) but has no autograd \
                     formula, and an input requires grad: a compiled backward cannot \
                     differentiate through its kernel; register one with register_autograd",
                    op.qualname()
                ),
            ));
        }
        if !op.runs_on_fake() {
            return Err(Error::compile(
                CompileKind::Capture,
                format!(
                    "`{}` runs as an opaque node under capture ({reason}) and needs a fake kernel; \
                 register one with register_fake",
                    op.qualname()
                ),
            ));
        }
        let declared = op.schema().mutated_params();
        {
            let st = self.state.borrow();
            for (p, v) in op.schema().params.iter().zip(args) {
                if declared.contains(&p.name.as_str()) {
                    for t in v.tensors() {
                        st.check_mutation_target(op.qualname(), t)?;
                    }
                }
            }
        }
        let _off = suspend();
        let outs = dispatch::custom_backend(op, args)?;
        let mut st = self.state.borrow_mut();
        let (bargs, reads) = st.builder_args(op.schema(), args)?;
        let mutated: Vec<ValueRef> = op
            .schema()
            .params
            .iter()
            .zip(args)
            .filter(|(p, _)| declared.contains(&p.name.as_str()))
            .flat_map(|(_, v)| v.tensors().cloned().collect::<Vec<_>>())
            .map(|t| st.value_of(&t))
            .collect::<Result<_>>()?;
        let sym = st.bind_opaque_outputs(args, &outs);
        let node = st.add_node(
            op.qualname(),
            op.class(),
            bargs,
            &reads,
            &outs,
            &mutated,
            Some(reason),
            sym,
        )?;
        if self.grad_plan {
            // An opaque op's results are proxies that never require grad, whether or not the op
            // has a formula, so whether its call recorded is read from the caller's grad mode
            // (without a formula the autograd layer passes it by; with one it records exactly
            // when grad mode is on and an argument requires grad), and its results are never
            // detached on replay.
            let mode = Some(tensorplay_runtime::autograd::is_grad_enabled());
            st.note_grad(node, args, mode);
        }
        Ok(outs)
    }
}

impl TraceHook for Tracer {
    fn on_size_read(&self, t: &Tensor, dim: Option<usize>) {
        let _off = suspend();
        let mut st = self.state.borrow_mut();
        // A tensor the graph does not know is not derived from the inputs: its sizes are
        // constants and need no guard.
        let Some(&value) = st.values.get(&t.identity()) else {
            return;
        };
        let expected = match dim {
            None => t.shape().to_vec(),
            Some(d) => vec![t.shape()[d]],
        };
        st.builder.size_guard(SizeGuard {
            value,
            dim,
            expected,
        });
    }

    fn on_sym_guard(&self, guard: SymGuard) {
        self.state.borrow_mut().record_sym_guard(guard);
    }

    fn sym_size(&self, t: &Tensor, dim: usize) -> Option<SymExpr> {
        let _off = suspend();
        let st = self.state.borrow();
        let v = st.values.get(&t.identity())?;
        Some(st.canonical(*st.sym_dims.get(v)?.get(dim)?))
    }

    fn on_alias(&self, from: &Tensor, to: &Tensor) {
        let mut st = self.state.borrow_mut();
        if let Some(&v) = st.values.get(&from.identity()) {
            st.values.insert(to.identity(), v);
            st.keep_alive.push(to.clone());
            if self.grad_plan && to.requires_grad() {
                st.requires_grad.insert(v);
            }
        }
    }
}

impl CaptureHook for Tracer {
    fn on_builtin(&self, op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
        self.record_builtin(op, args)
    }

    fn on_custom(&self, op: &Arc<dyn CustomOperator>, args: &[Value]) -> Result<Vec<Tensor>> {
        let Some(op) = Operator::from_custom(op) else {
            return Err(Error::unsupported(
                op.qualname(),
                "capture: a custom operator that is not in tensorplay's registry cannot be \
                 recorded",
            ));
        };
        let op = &op;
        let device = Self::device_of(args);
        if let Some(reason) = Self::opaque_reason(op, device) {
            return self.record_opaque(op, args, reason);
        }
        let Some(body) = op.kernel_in(Slot::Default) else {
            return self.record_opaque(op, args, "no device-agnostic body".into());
        };
        let snapshot = self.state.borrow().clone();
        // The body runs like the kernel it is: autocast off inside, its ops recorded.
        let result = {
            let _ac = tensorplay_runtime::autocast::suspend();
            body(args)
        };
        match result {
            Ok(outs) => Ok(outs),
            Err(_) => {
                *self.state.borrow_mut() = snapshot;
                self.record_opaque(
                    op,
                    args,
                    "body reads data; runs opaque with its fake kernel".into(),
                )
            }
        }
    }
}

/// Runs `f` on proxies shaped like `inputs` and returns the recorded graph.
///
/// ```
/// use tensorplay_compiler::capture::{capture, CaptureOptions};
/// use tensorplay_ir::{DType, Device, TensorMeta};
/// let x = TensorMeta::new(&[8], DType::F32, Device::Cpu);
/// let g = capture(|xs| Ok(vec![xs[0].exp()?.add(&xs[0])?]), &[x], CaptureOptions::default())?;
/// assert!(g.to_string().contains("tp::exp"));
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn capture(
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[TensorMeta],
    opts: CaptureOptions,
) -> Result<Graph> {
    capture_joint(f, inputs, opts, &[], |_, outs, _| Ok(outs))
}

/// Makes a new graph input shaped like a proxy (for the tangents of a joint capture).
pub(crate) type NewInput<'a> = dyn FnMut(&Tensor) -> Result<Tensor> + 'a;

/// [`capture`] for compiled training: inputs `i` with `requires_grad[i]` get proxies that require
/// grad (so the autograd layer above capture records backward nodes over proxies), and `then`
/// runs with the hook still installed on the closure's outputs — to run the backward on proxies,
/// whose ops are recorded too. `then` may add graph inputs (tangents) and returns the graph's
/// outputs. A joint capture refuses an opaque custom op that has no autograd formula but gets an
/// input that requires grad: eager differentiates through its kernel's ops, which the opaque node
/// hides.
pub(crate) fn capture_joint(
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[TensorMeta],
    opts: CaptureOptions,
    requires_grad: &[bool],
    then: impl FnOnce(&[Tensor], Vec<Tensor>, &mut NewInput) -> Result<Vec<Tensor>>,
) -> Result<Graph> {
    let tracer = Tracer {
        state: RefCell::new(TraceState::default()),
        joint: requires_grad.iter().any(|&r| r),
        grad_plan: false,
    };
    Ok(trace(tracer, f, inputs, opts, requires_grad, then)?.0)
}

/// [`capture`] for replaying the graph with autograd on (the interpreter path of a compiled
/// function whose training graph could not be split): proxies require grad where `requires_grad`
/// says, the closure runs with the caller's grad mode, and the returned [`GradPlan`] says which
/// arguments each node read through a detached handle and which calls recorded no backward node.
pub(crate) fn capture_for_autograd(
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[TensorMeta],
    opts: CaptureOptions,
    requires_grad: &[bool],
) -> Result<(Graph, GradPlan)> {
    let tracer = Tracer {
        state: RefCell::new(TraceState::default()),
        joint: false,
        grad_plan: true,
    };
    trace(tracer, f, inputs, opts, requires_grad, |_, outs, _| {
        Ok(outs)
    })
}

/// Runs `f` on proxies under `tracer` (see [`capture_joint`]); the graph and, when the tracer
/// records one, its [`GradPlan`].
fn trace(
    tracer: Tracer,
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[TensorMeta],
    opts: CaptureOptions,
    requires_grad: &[bool],
    then: impl FnOnce(&[Tensor], Vec<Tensor>, &mut NewInput) -> Result<Vec<Tensor>>,
) -> Result<(Graph, GradPlan)> {
    let tracer = Rc::new(tracer);
    let mut proxies = Vec::with_capacity(inputs.len());
    let mut next_sym = 0u32;
    {
        let mut st = tracer.state.borrow_mut();
        for (i, m) in inputs.iter().enumerate() {
            let shape = m.static_shape().ok_or_else(|| {
                Error::compile(
                    CompileKind::Capture,
                    format!("capture needs concrete example shapes; input {i} is {m}"),
                )
            })?;
            let mut proxy = Tensor::empty_fake(&shape, m.dtype, m.device);
            let v = st.add_input(format!("x{i}"), m, &shape, opts.dynamic, &mut next_sym);
            if requires_grad.get(i).copied().unwrap_or(false) {
                proxy = proxy.requires_grad_(true)?;
                st.requires_grad.insert(v);
            }
            st.values.insert(proxy.identity(), v);
            st.keep_alive.push(proxy.clone());
            proxies.push(proxy);
        }
    }
    let outs = {
        let _hook = install(tracer.clone());
        let outs = f(&proxies)?;
        let mut extra = 0usize;
        let n_inputs = inputs.len();
        let mut new_input = |like: &Tensor| -> Result<Tensor> {
            let _off = suspend();
            let m = like.meta();
            let proxy = Tensor::empty_fake(like.shape(), m.dtype, m.device);
            let mut st = tracer.state.borrow_mut();
            let name = format!("x{}", n_inputs + extra);
            let v = st.add_input(name, &m, like.shape(), opts.dynamic, &mut next_sym);
            extra += 1;
            st.values.insert(proxy.identity(), v);
            st.keep_alive.push(proxy.clone());
            Ok(proxy)
        };
        then(&proxies, outs, &mut new_input)?
    };
    let mut st = tracer.state.borrow_mut();
    let results = outs
        .iter()
        .map(|t| st.value_of(t))
        .collect::<Result<Vec<_>>>()?;
    let plan = st.grad_plan();
    let mut state = std::mem::take(&mut *st);
    state.builder.output(&results)?;
    let mut graph = state.builder.finish()?;
    merge_symbols(&mut graph, &state.merged);
    Ok((graph, plan))
}

/// Rewrites `graph` in representative symbols (`merged`: `b → a` for symbols found equal),
/// numbered densely in order of first appearance among the inputs — so a graph whose inputs
/// share a size reads `%x0: f32[s0], %x1: f32[s0]`.
fn merge_symbols(graph: &mut Graph, merged: &HashMap<u32, u32>) {
    let rep = |mut k: u32| {
        while let Some(&a) = merged.get(&k) {
            k = a;
        }
        k
    };
    let mut dense: HashMap<u32, u32> = HashMap::new();
    for v in graph.inputs() {
        for d in graph.meta(v).map_or(&[][..], |m| &m.shape[..]) {
            if let Dim::Sym(k) = d {
                let next = dense.len() as u32;
                dense.entry(rep(*k)).or_insert(next);
            }
        }
    }
    if merged.is_empty() && dense.iter().all(|(k, n)| k == n) {
        return;
    }
    graph.substitute_symbols(&|k| dense.get(&rep(k)).map(|&n| SymExpr::sym(n)));
}
