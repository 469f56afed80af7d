//! Eager built-in ops on CUDA tensors as generated kernels. A call becomes a one-node IR graph
//! (its tensor arguments as inputs, 0-d CPU scalars as constants, other arguments as
//! attributes); the node is classified and lowered exactly as a compiled region would be
//! (`tensorplay-kernel`), and the spec is emitted, compiled (NVRTC, or the host emulation) and
//! launched by `tensorplay-cuda`, whose kernel cache is keyed by structure — so an op meets the
//! CUDA compiler once per dtype and loop layout, not once per call or size.
//!
//! In-place ops (`add_`, `sub_`, `mul_`, `div_`, `copy_`, `fill_`) compute the value to write
//! (the out-of-place op's result, the source, or the fill value) and write it over the target
//! with a cast kernel.

use tensorplay_ir::graph::{Attr, BuilderArg, Constant, Graph, GraphBuilder, NodeKind};
use tensorplay_ir::{DType, Device, Error, Result, TensorMeta, ValueRef};
use tensorplay_kernel::args::ScalarArgs;
use tensorplay_kernel::classify::{Class, classify};
use tensorplay_kernel::plan::plan_on;
use tensorplay_kernel::region::{Region, RegionKind};
use tensorplay_kernel::spec::lower;

use crate::backend::cuda::memory::fresh;
use crate::ops::lowering::BUILTIN_NAMESPACE;
use crate::ops::table::OpTable;
use crate::ops::{Kernel, Lower, OpDef, binary, cast, inplace};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// The error for a built-in op without a CUDA kernel.
pub(super) fn no_kernel(op: &OpDef, device: Device, why: &str) -> Error {
    Error::device(
        op.name,
        format!(
            "built-in op {} has no kernel for {device} ({why}); copy the tensors with \
             to_device(Device::Cpu), or use a custom op with a `cuda` kernel",
            op.name
        ),
    )
}

/// Runs computing op `op` (with a lowering) on CUDA tensors: its fresh outputs.
pub(super) fn compute(op: &'static OpDef, args: &[Value], device: Device) -> Result<Vec<Tensor>> {
    if let Some((dim, last)) = softmax_dim(op, args)? {
        // The generated kernels take softmax rows along the last dim: move `dim` there and back.
        let mut moved = args.to_vec();
        moved[0] = Value::Tensor(first_tensor(op, args)?.transpose(dim, last)?);
        moved[1] = Value::Int(last);
        let y = compute(op, &moved, device)?.remove(0);
        return Ok(vec![y.transpose(dim, last)?.contiguous()?]);
    }
    let Kernel::Compute { meta, .. } = &op.kernel else {
        return Err(no_kernel(op, device, "not a computing op"));
    };
    let outs: Vec<Tensor> = meta(Args::new(op.name, args))?
        .iter()
        // SAFETY: the kernel launched below writes every element of each output before
        // anything reads it (later work on the device's stream, or a copy to the host, which
        // waits for the stream); if the launch fails, the outputs are dropped unread.
        .map(|s| unsafe { fresh(op.name, &s.shape, s.dtype, device, false) })
        .collect::<Result<_>>()?;
    launch_call(op, args, &outs, device)?;
    Ok(outs)
}

/// Runs in-place op `op` (checked) on CUDA tensors: writes the target and returns it.
pub(super) fn in_place(op: &'static OpDef, args: &[Value], device: Device) -> Result<Vec<Tensor>> {
    let target = first_tensor(op, args)?.clone();
    let value = if let Some(math) = out_of_place(op) {
        compute(math, args, device)?.remove(0)
    } else if std::ptr::eq(op, &inplace::FILL_) {
        let v = Args::new(op.name, args).scalar(1)?;
        Tensor::try_full(&[], v, target.dtype())?.to_device(device)?
    } else if std::ptr::eq(op, &inplace::COPY_) {
        match args.get(1) {
            // Reading elements the kernel is writing: read a copy (as eager does).
            Some(Value::Tensor(src))
                if src.storage().same(target.storage()) && !src.same(&target) =>
            {
                src.clone_tensor()?
            }
            Some(Value::Tensor(src)) => src.clone(),
            other => {
                return Err(Error::argument(
                    op.name,
                    "src",
                    "a tensor",
                    format!("{other:?}"),
                ));
            }
        }
    } else {
        return Err(no_kernel(
            op,
            device,
            "only add_, sub_, mul_, div_, copy_ and fill_ run in place on CUDA tensors",
        ));
    };
    // The value in the target's dtype, broadcast (a view, on any device) to its shape.
    let value = value.expand(target.shape())?;
    launch_call(
        &cast::TO_DTYPE,
        &[Value::Tensor(value), Value::DType(target.dtype())],
        std::slice::from_ref(&target),
        device,
    )?;
    target.storage().bump_version();
    Ok(vec![target])
}

/// The out-of-place op whose result an in-place op writes (`add_` → `add`), if it is one of
/// the arithmetic ones.
fn out_of_place(op: &'static OpDef) -> Option<&'static OpDef> {
    [
        (&inplace::ADD_, &binary::ADD),
        (&inplace::SUB_, &binary::SUB),
        (&inplace::MUL_, &binary::MUL),
        (&inplace::DIV_, &binary::DIV),
    ]
    .into_iter()
    .find(|(i, _)| std::ptr::eq(*i, op))
    .map(|(_, o)| o)
}

fn first_tensor<'a>(op: &OpDef, args: &'a [Value]) -> Result<&'a Tensor> {
    match args.first() {
        Some(Value::Tensor(t)) => Ok(t),
        other => Err(Error::argument(
            op.name,
            "self",
            "a tensor",
            format!("{other:?}"),
        )),
    }
}

/// For a softmax over a dim other than the last: that dim and the last one.
fn softmax_dim(op: &'static OpDef, args: &[Value]) -> Result<Option<(i64, i64)>> {
    let Lower::Softmax { .. } = op.lower else {
        return Ok(None);
    };
    let (Some(Value::Tensor(x)), Some(Value::Int(dim))) = (args.first(), args.get(1)) else {
        return Ok(None);
    };
    let rank = x.rank();
    if rank < 2 {
        return Ok(None);
    }
    let dim = tensorplay_ir::shape::normalize_dim(op.name, *dim, rank)? as i64;
    let last = rank as i64 - 1;
    Ok((dim != last).then_some((dim, last)))
}

/// A wrapped Rust scalar as the graph constant capture would record for it.
fn scalar_constant(t: &Tensor) -> Result<Constant> {
    Ok(match t.dtype() {
        DType::Bool => Constant::Bool(t.item::<bool>()?),
        d if d.is_float() => Constant::Float {
            value: t.item::<f64>()?,
            dtype: d,
        },
        d => Constant::Int {
            value: t.item::<i64>()?,
            dtype: d,
        },
    })
}

/// One call as a graph: the builder with the call's node added, and the tensor behind each
/// graph input.
struct CallGraph<'a> {
    graph: Graph,
    feeds: Vec<(ValueRef, &'a Tensor)>,
    outputs: Vec<ValueRef>,
}

impl<'a> CallGraph<'a> {
    fn new(op: &'static OpDef, args: &'a [Value], outs: &[Tensor], device: Device) -> Result<Self> {
        let mut builder = GraphBuilder::new();
        let mut feeds = Vec::new();
        let mut bargs = Vec::with_capacity(args.len());
        for v in args {
            let mut input = |t: &'a Tensor| -> Result<ValueRef> {
                if t.is_wrapped_scalar() {
                    return builder.constant(scalar_constant(t)?, t.device());
                }
                let r = builder.input(format!("x{}", feeds.len()), t.meta());
                feeds.push((r, t));
                Ok(r)
            };
            bargs.push(match v {
                Value::Tensor(t) => BuilderArg::Tensor(input(t)?),
                Value::OptionalTensor(Some(t)) => BuilderArg::OptionalTensor(Some(input(t)?)),
                Value::TensorList(_) | Value::OptionalTensorList(_) => {
                    return Err(no_kernel(op, device, "a tensor-list argument"));
                }
                other => BuilderArg::attr(other.to_attr().unwrap_or(Attr::None)),
            });
        }
        let metas: Vec<TensorMeta> = outs.iter().map(Tensor::meta).collect();
        let name = format!("{BUILTIN_NAMESPACE}::{}", op.name);
        let outputs = builder.op(&name, op.class, bargs, metas)?;
        builder.output(&outputs)?;
        Ok(CallGraph {
            graph: builder.finish()?,
            feeds,
            outputs,
        })
    }

    /// The tensor behind graph input `v`.
    fn tensor(&self, v: ValueRef) -> Result<&'a Tensor> {
        self.feeds
            .iter()
            .find(|(r, _)| *r == v)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                Error::device(
                    "cuda",
                    format!(
                        "kernel input {}.{} is not a call argument",
                        v.node, v.output
                    ),
                )
            })
    }
}

/// Launches `op`'s generated kernel over `args` into `outs` (fresh tensors, or the in-place
/// target, which may be exactly an input's elements).
fn launch_call(op: &'static OpDef, args: &[Value], outs: &[Tensor], device: Device) -> Result<()> {
    let call = CallGraph::new(op, args, outs, device)?;
    let graph = &call.graph;
    let node = call.outputs[0].node;
    let Some(NodeKind::Op(op_call)) = graph.node(node).map(|n| &n.kind) else {
        return Err(no_kernel(
            op,
            device,
            "the call did not become a graph node",
        ));
    };
    let kind = match classify(graph, node, op_call, call.outputs.len(), &OpTable)? {
        Class::Pointwise => RegionKind::Pointwise,
        Class::Reduce { op, dims, keepdim } => RegionKind::Reduction {
            reduction: node,
            op,
            dims,
            keepdim,
        },
        Class::Softmax { log } => RegionKind::Softmax { node, log },
        Class::View => return Err(no_kernel(op, device, "a view")),
        Class::Barrier(why) => return Err(no_kernel(op, device, &why)),
    };
    let mut inputs: Vec<ValueRef> = Vec::new();
    for v in graph.args_of(node)? {
        if !inputs.contains(&v) {
            inputs.push(v);
        }
    }
    let region = Region {
        id: 0,
        kind,
        nodes: vec![node],
        inputs,
        outputs: call.outputs.clone(),
    };
    let lowered = lower(graph, &region, &OpTable)?;
    let ins: Vec<&Tensor> = lowered
        .inputs
        .iter()
        .map(|&v| call.tensor(v))
        .collect::<Result<_>>()?;
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    let plan = plan_on(&lowered.spec, &ins, &out_refs, None, device, false)?;
    let params = ScalarArgs::new(&lowered.spec.param_dtypes(), &lowered.params)?;
    tensorplay_cuda::codegen::launch::launch(&lowered.spec, &plan, &params, device)
}
