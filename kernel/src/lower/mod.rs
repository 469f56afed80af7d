//! [`lower`]: a fused [`Region`] of a graph to a [`KernelSpec`] — the region's inputs bound to
//! kernel inputs or scalar arguments, each node lowered in order (elementwise ops in `op`, the
//! closing reduction or softmax as the loop kind), and the outputs stored or written.

mod lowerer;
mod op;
mod pow;

use tensorplay_ir::graph::{Arg, Attr, Constant, Graph, NodeKind, OpCall, ValueRef};
use tensorplay_ir::{DType, Error, NodeId, ReduceOp, Result, SymShape};

use crate::lower::lowerer::{Lowerer, Operand, compile_err};
use crate::lower::op::lower_op;
use crate::lowering::{OpLowerings, pointwise};
use crate::region::{Region, RegionKind};
use crate::spec::inst::{Inst, ValueId};
use crate::spec::kernel::{KernelSpec, LoopKind};
use crate::spec::lit::Lit;
use crate::spec::print::reduce_name;
use crate::spec::rules::reduce_out_dtype;

/// A region lowered to a kernel, with the graph values that feed and receive its operands.
#[derive(Debug, Clone, PartialEq)]
pub struct LoweredRegion {
    /// The kernel.
    pub spec: KernelSpec,
    /// For each kernel input, the region input it reads (region inputs that are scalar
    /// constants are kernel arguments instead, see `params`).
    pub inputs: Vec<ValueRef>,
    /// The value of each scalar kernel argument ([`Inst::Param`]), already converted to its
    /// dtype: what a launch passes in [`ScalarArgs`](crate::args::ScalarArgs).
    pub params: Vec<Lit>,
    /// For each kernel output, the region output it writes.
    pub outputs: Vec<ValueRef>,
}

/// Lowers `region` of `graph` to a [`KernelSpec`], applying eager's dtype rules (see the
/// [`spec` module docs](crate::spec)). Scalar constants among the region's inputs become scalar
/// kernel arguments ([`Inst::Param`], values in [`LoweredRegion::params`]) — except a `pow`
/// exponent that strength reduction turns into code; every other input becomes a kernel input,
/// in region order.
///
/// Errors (`Error::Compile`, or the dtype error eager would raise) for ops that are not builtin
/// elementwise ops, dtype combinations eager rejects, node metadata that disagrees with eager's
/// rules, reduction or softmax regions with outputs other than their result, and softmax over a
/// dim other than the last.
pub fn lower(graph: &Graph, region: &Region, table: &dyn OpLowerings) -> Result<LoweredRegion> {
    let mut l = Lowerer::new(graph);
    bind_inputs(&mut l, region)?;
    let iter_shape = region.iteration_shape(graph)?;
    let rank = iter_shape.len();
    let mut kind = LoopKind::Pointwise;
    for (pos, &id) in region.nodes.iter().enumerate() {
        let last = pos + 1 == region.nodes.len();
        if let Some(k) = lower_node(&mut l, region, table, id, last, rank)? {
            kind = k;
        }
    }
    let (outputs, output_refs) = match kind {
        LoopKind::Pointwise => store_outputs(&mut l, region, &iter_shape)?,
        LoopKind::Reduce { .. } | LoopKind::Softmax { .. } => result_output(graph, region)?,
    };
    if matches!(
        region.kind,
        RegionKind::Reduction { .. } | RegionKind::Softmax { .. }
    ) && matches!(kind, LoopKind::Pointwise)
    {
        return Err(compile_err(format!(
            "region {}: its reduction or softmax node is not among its nodes",
            region.id
        )));
    }
    let spec = KernelSpec {
        rank,
        inputs: l.inputs,
        outputs,
        insts: l.insts,
        kind,
    };
    spec.validate()?;
    Ok(LoweredRegion {
        spec,
        inputs: l.input_refs,
        params: l.params,
        outputs: output_refs,
    })
}

/// Binds each region input: a scalar constant becomes a (not yet used) scalar argument, any
/// other value a kernel input, in region order.
fn bind_inputs(l: &mut Lowerer, region: &Region) -> Result<()> {
    let graph = l.g;
    for (src, &v) in region.inputs.iter().enumerate() {
        if l.env.contains_key(&v) {
            continue;
        }
        let node = graph.node(v.node).ok_or_else(|| {
            compile_err(format!(
                "region {}: input node {} is not in the graph",
                region.id, v.node
            ))
        })?;
        let scalar = match &node.kind {
            NodeKind::Constant(Constant::Float { value, dtype }) => {
                Some((Lit::Float(*value), *dtype))
            }
            NodeKind::Constant(Constant::Int { value, dtype }) => Some((Lit::Int(*value), *dtype)),
            NodeKind::Constant(Constant::Bool(b)) => Some((Lit::Bool(*b), DType::Bool)),
            _ => None,
        };
        let op = match scalar {
            Some((lit, dtype)) => Operand::Scalar(lit, dtype, src),
            None => {
                let meta = graph.meta(v).ok_or_else(|| {
                    compile_err(format!(
                        "region {}: input {}.{} has no metadata",
                        region.id, v.node, v.output
                    ))
                })?;
                l.inputs.push(meta.dtype);
                l.input_refs.push(v);
                Operand::Input(l.inputs.len() - 1)
            }
        };
        l.env.insert(v, op);
    }
    Ok(())
}

/// Lowers node `id` of the region (`last`: it is the region's last node). Returns the loop kind
/// when the node is the region's reduction or softmax.
fn lower_node(
    l: &mut Lowerer,
    region: &Region,
    table: &dyn OpLowerings,
    id: NodeId,
    last: bool,
    rank: usize,
) -> Result<Option<LoopKind>> {
    let graph = l.g;
    let node = graph.node(id).ok_or_else(|| {
        compile_err(format!(
            "region {}: node {id} is not in the graph",
            region.id
        ))
    })?;
    let call = node.as_op().ok_or_else(|| {
        compile_err(format!(
            "region {}: {} is not an op",
            region.id,
            graph.describe(id)
        ))
    })?;
    let meta = node
        .outputs
        .first()
        .ok_or_else(|| compile_err(format!("{} has no output", graph.describe(id))))?;
    let arg_refs = graph.args_of(id)?;
    l.zero_dim = arg_refs
        .iter()
        .map(|&a| graph.meta(a).is_some_and(|m| m.shape.is_empty()))
        .collect();
    let args: Vec<Operand> = arg_refs
        .into_iter()
        .map(|a| l.operand(a, id))
        .collect::<Result<_>>()?;
    let n = NodeCtx {
        call,
        id,
        args: &args,
        last,
        dtype: meta.dtype,
    };
    let (value, kind) = match &region.kind {
        RegionKind::Reduction {
            reduction,
            op,
            dims,
            keepdim,
        } if *reduction == id => {
            let reduce = Reduce {
                op: *op,
                dims,
                keepdim: *keepdim,
                rank,
            };
            let (value, kind) = lower_reduction(l, &n, reduce)?;
            (value, Some(kind))
        }
        RegionKind::Softmax { node, log } if *node == id => {
            let (value, kind) = lower_softmax(l, &n, *log, rank)?;
            (value, Some(kind))
        }
        _ => {
            let (expr, p) = pointwise(table, call)?.ok_or_else(|| {
                Error::unsupported(
                    &call.name,
                    "not a builtin elementwise op; it cannot be fused into a kernel",
                )
            })?;
            let value = lower_op(l, call, &expr, p.dtype, &args, meta.dtype)?;
            (value, None)
        }
    };
    l.env.insert(ValueRef::from(id), Operand::Value(value));
    Ok(kind)
}

/// The node being lowered.
struct NodeCtx<'a> {
    call: &'a OpCall,
    id: NodeId,
    /// Its tensor operands.
    args: &'a [Operand],
    /// Whether it is the region's last node.
    last: bool,
    /// Its output dtype, as the graph states it.
    dtype: DType,
}

/// The region's reduction, as its region kind states it.
#[derive(Clone, Copy)]
struct Reduce<'a> {
    op: ReduceOp,
    /// Reduced dims as the region states them (empty: every dim).
    dims: &'a [usize],
    keepdim: bool,
    /// The iteration rank.
    rank: usize,
}

/// The region's closing reduction node `id`: its input becomes the reduced value.
fn lower_reduction(l: &mut Lowerer, n: &NodeCtx, r: Reduce) -> Result<(ValueId, LoopKind)> {
    let (graph, id, meta_dtype) = (l.g, n.id, n.dtype);
    if !n.last {
        return Err(Error::unsupported(
            &n.call.name,
            "a reduction region must end with its reduction",
        ));
    }
    let input = n
        .args
        .first()
        .copied()
        .ok_or_else(|| compile_err(format!("{} has no tensor input", graph.describe(id))))?;
    let value = l.materialize(input);
    let d = l.dtype_of(value);
    let out = reduce_out_dtype(r.op, d)?;
    if out != meta_dtype {
        return Err(compile_err(format!(
            "{}: {} of {d} gives {out}, but the node says {meta_dtype}",
            graph.describe(id),
            reduce_name(r.op),
        )));
    }
    let dims = if r.dims.is_empty() && r.rank > 0 {
        (0..r.rank).collect()
    } else {
        r.dims.to_vec()
    };
    let kind = LoopKind::Reduce {
        op: r.op,
        value,
        dims,
        keepdim: r.keepdim,
    };
    Ok((value, kind))
}

/// The region's closing softmax node `id` (over the last dim): its input becomes the value.
fn lower_softmax(
    l: &mut Lowerer,
    n: &NodeCtx,
    log: bool,
    rank: usize,
) -> Result<(ValueId, LoopKind)> {
    let (call, meta_dtype) = (n.call, n.dtype);
    if !n.last {
        return Err(Error::unsupported(
            &call.name,
            "a softmax region must end with its softmax",
        ));
    }
    let dim = call.args.iter().find_map(|a| match a {
        Arg::Attr {
            value: Attr::Int(d),
            ..
        } => Some(*d),
        _ => None,
    });
    if let Some(d) = dim {
        let d = tensorplay_ir::shape::normalize_dim(&call.name, d, rank)?;
        if rank > 0 && d + 1 != rank {
            return Err(Error::unsupported(
                &call.name,
                format!("fused softmax runs along the last dim, got dim {d} of rank {rank}"),
            ));
        }
    }
    let input = n
        .args
        .first()
        .copied()
        .ok_or_else(|| compile_err(format!("{} has no tensor input", l.g.describe(n.id))))?;
    let d = l.operand_dtype(input);
    if !d.is_float() || d != meta_dtype {
        return Err(Error::dtype(
            &call.name,
            format!(
                "input dtype must be floating point and match the output, got {d} -> {meta_dtype}"
            ),
        ));
    }
    let value = l.materialize(input);
    Ok((value, LoopKind::Softmax { value, log }))
}

/// A pointwise region's outputs: each must have the iteration shape, and is stored (converted
/// to its dtype). Returns the output dtypes and the values they write.
fn store_outputs(
    l: &mut Lowerer,
    region: &Region,
    iter_shape: &SymShape,
) -> Result<(Vec<DType>, Vec<ValueRef>)> {
    let graph = l.g;
    let mut outputs = Vec::new();
    let mut output_refs = Vec::new();
    for &v in &region.outputs {
        let meta = graph.meta(v).ok_or_else(|| {
            compile_err(format!(
                "region output {}.{} has no metadata",
                v.node, v.output
            ))
        })?;
        if meta.shape != *iter_shape {
            return Err(Error::unsupported(
                "fusion",
                format!(
                    "region {} output {} has shape {}, not the iteration shape {}",
                    region.id,
                    graph.describe(v.node),
                    tensorplay_ir::shape::fmt_shape(&meta.shape),
                    tensorplay_ir::shape::fmt_shape(iter_shape)
                ),
            ));
        }
        let o = l.operand(v, v.node)?;
        let value = l.coerce(o, meta.dtype);
        outputs.push(meta.dtype);
        output_refs.push(v);
        let output = outputs.len() - 1;
        l.push(Inst::Store { output, value });
    }
    Ok((outputs, output_refs))
}

/// A reduction or softmax region's one output: its result.
fn result_output(graph: &Graph, region: &Region) -> Result<(Vec<DType>, Vec<ValueRef>)> {
    let result = match &region.kind {
        RegionKind::Reduction { reduction, .. } => *reduction,
        RegionKind::Softmax { node, .. } => *node,
        RegionKind::Pointwise => unreachable!("loop kind follows the region kind"),
    };
    if region.outputs != [ValueRef::from(result)] {
        return Err(Error::unsupported(
            "fusion",
            format!(
                "region {}: a reduction or softmax region must output exactly its result",
                region.id
            ),
        ));
    }
    let meta = graph
        .meta(ValueRef::from(result))
        .ok_or_else(|| compile_err(format!("{} has no output", graph.describe(result))))?;
    Ok((vec![meta.dtype], vec![ValueRef::from(result)]))
}
