//! The collectives as registered operators (`tp_dist::*`), so they go through the dispatcher like
//! any op: under `tensorplay::compile` a call is captured as an opaque node — a fusion barrier
//! the elementwise regions on both sides fuse around, shown by `explain()` and printed in the
//! `.tpir` text — and the functional forms are differentiable (PyTorch's functional
//! collectives): `all_reduce`'s gradient is an `all_reduce`, `all_gather`'s a `reduce_scatter`
//! and the other way round.
//!
//! Groups travel as their id (`int group`), reduce ops as their name (`str op`).

use std::sync::OnceLock;

use tensorplay_runtime::library::{self, AutogradCtx, CustomOpDef};
use tensorplay_runtime::{Error, Result, Tensor, Value};

use crate::collectives::{
    all_gather_into_tensor_async, all_reduce_async, broadcast_async, reduce_scatter_tensor_async,
};
use crate::group::{ProcessGroup, by_id, resolve};
use crate::reduce_op::ReduceOp;
use crate::work::blocking;

struct Ops {
    all_reduce_: CustomOpDef,
    broadcast_: CustomOpDef,
    all_reduce: CustomOpDef,
    all_gather: CustomOpDef,
    reduce_scatter: CustomOpDef,
}

static OPS: OnceLock<Ops> = OnceLock::new();
/// Held while registering, so two threads' first calls do not both define the ops.
static REGISTERING: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The `tp_dist::*` ops, registered on first use (once per process).
fn ops(op: &str) -> Result<&'static Ops> {
    // Checked first: without a group the ops could not run anyway.
    resolve(op, None)?;
    if let Some(ops) = OPS.get() {
        return Ok(ops);
    }
    let _once = REGISTERING.lock();
    if let Some(ops) = OPS.get() {
        return Ok(ops);
    }
    let ops = Ops {
        all_reduce_: define_all_reduce_()?,
        broadcast_: define_broadcast_()?,
        all_reduce: define_all_reduce()?,
        all_gather: define_all_gather()?,
        reduce_scatter: define_reduce_scatter()?,
    };
    Ok(OPS.get_or_init(|| ops))
}

fn op_of(s: &str) -> Result<ReduceOp> {
    s.parse()
}

fn group_arg(op: &str, group: Option<&ProcessGroup>) -> Result<Value> {
    Ok(Value::Int(resolve(op, group)?.id() as i64))
}

fn define_all_reduce_() -> Result<CustomOpDef> {
    let op = library::custom_op("tp_dist::all_reduce_")
        .schema("(Tensor(a!) tensor, str op, int group) -> ()")
        .mutates_args(["tensor"])
        .build(|t: &Tensor, op: String, group: i64| -> Result<()> {
            let g = by_id("all_reduce", group)?;
            blocking(|| all_reduce_async(t, op_of(&op)?, Some(&g)))
        })?;
    Ok(op.into_def())
}

fn define_broadcast_() -> Result<CustomOpDef> {
    let op = library::custom_op("tp_dist::broadcast_")
        .schema("(Tensor(a!) tensor, int src, int group) -> ()")
        .mutates_args(["tensor"])
        .build(|t: &Tensor, src: i64, group: i64| -> Result<()> {
            let g = by_id("broadcast", group)?;
            let src = usize::try_from(src)
                .map_err(|_| Error::argument("broadcast", "src", "a rank >= 0", src.to_string()))?;
            blocking(|| broadcast_async(t, src, Some(&g)))
        })?;
    Ok(op.into_def())
}

/// Reduces in place through the registered op (captured under compile).
pub(crate) fn all_reduce_inplace(
    tensor: &Tensor,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    let args = [
        tensor.into(),
        Value::Str(op.name().into()),
        group_arg("all_reduce", group)?,
    ];
    ops("all_reduce")?.all_reduce_.call(&args[..])?;
    Ok(())
}

/// Broadcasts in place through the registered op (captured under compile).
pub(crate) fn broadcast_inplace(
    tensor: &Tensor,
    src: usize,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    let args = [
        tensor.into(),
        Value::Int(src as i64),
        group_arg("broadcast", group)?,
    ];
    ops("broadcast")?.broadcast_.call(&args[..])?;
    Ok(())
}

/// The shape of `x` gathered from `n` ranks along dim 0 (a 0-d `x` gathers into `[n]`).
fn gathered_shape(x: &Tensor, n: usize) -> Vec<usize> {
    match x.shape() {
        [] => vec![n],
        [d0, rest @ ..] => std::iter::once(d0 * n)
            .chain(rest.iter().copied())
            .collect(),
    }
}

/// The shape of this rank's block of `x` scattered over `n` ranks along dim 0.
fn scattered_shape(x: &Tensor, n: usize) -> Result<Vec<usize>> {
    match x.shape() {
        [d0, rest @ ..] if d0 % n == 0 => Ok(std::iter::once(d0 / n)
            .chain(rest.iter().copied())
            .collect()),
        s => Err(Error::shape(
            "reduce_scatter_tensor",
            format!(
                "the input's first dim must be a multiple of the group size {n}; got shape {s:?}"
            ),
        )),
    }
}

fn size_of(op: &str, group: i64) -> Result<usize> {
    Ok(by_id(op, group)?.size())
}

fn define_all_reduce() -> Result<CustomOpDef> {
    let op = library::custom_op("tp_dist::all_reduce")
        .schema("(Tensor x, str op, int group) -> Tensor")
        .build(|x: &Tensor, op: String, group: i64| -> Result<Tensor> {
            let out = x.detach().clone_tensor()?;
            let g = by_id("all_reduce", group)?;
            blocking(|| all_reduce_async(&out, op_of(&op)?, Some(&g)))?;
            Ok(out)
        })?;
    op.register_fake(|x: &Tensor, _op: String, _group: i64| -> Result<Tensor> {
        Ok(Tensor::empty_like(x))
    })?;
    op.register_autograd(
        |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            let (op, group) = ctx_args(ctx)?;
            let reduce = op_of(&op)?;
            if !matches!(reduce, ReduceOp::Sum | ReduceOp::Avg) {
                return Err(Error::Autograd(format!(
                    "all_reduce with ReduceOp::{reduce:?} is not differentiable (sum and avg are)"
                )));
            }
            let g = grads[0]
                .clone()
                .map(|g| functional_all_reduce(&g, reduce, group));
            Ok(vec![g.transpose()?, None, None])
        },
        Some(Box::new(save_args)),
    )?;
    Ok(op.into_def())
}

fn define_all_gather() -> Result<CustomOpDef> {
    let op = library::custom_op("tp_dist::all_gather_into_tensor")
        .schema("(Tensor x, int group) -> Tensor")
        .build(|x: &Tensor, group: i64| -> Result<Tensor> {
            let g = by_id("all_gather_into_tensor", group)?;
            let out = Tensor::empty(&gathered_shape(x, g.size()), x.dtype());
            blocking(|| all_gather_into_tensor_async(&out, &x.detach(), Some(&g)))?;
            Ok(out)
        })?;
    op.register_fake(|x: &Tensor, group: i64| -> Result<Tensor> {
        let n = size_of("all_gather_into_tensor", group)?;
        Ok(Tensor::empty_fake(
            &gathered_shape(x, n),
            x.dtype(),
            x.device(),
        ))
    })?;
    op.register_autograd(
        |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            let group = group_of(ctx)?;
            let shape = ctx.saved_tensors()[0].shape().to_vec();
            let g = match &grads[0] {
                Some(g) => {
                    Some(functional_reduce_scatter(g, ReduceOp::Sum, group)?.reshape(&shape)?)
                }
                None => None,
            };
            Ok(vec![g, None])
        },
        Some(Box::new(save_args)),
    )?;
    Ok(op.into_def())
}

fn define_reduce_scatter() -> Result<CustomOpDef> {
    let op = library::custom_op("tp_dist::reduce_scatter_tensor")
        .schema("(Tensor x, str op, int group) -> Tensor")
        .build(|x: &Tensor, op: String, group: i64| -> Result<Tensor> {
            let g = by_id("reduce_scatter_tensor", group)?;
            let out = Tensor::empty(&scattered_shape(x, g.size())?, x.dtype());
            blocking(|| reduce_scatter_tensor_async(&out, &x.detach(), op_of(&op)?, Some(&g)))?;
            Ok(out)
        })?;
    op.register_fake(|x: &Tensor, _op: String, group: i64| -> Result<Tensor> {
        let n = size_of("reduce_scatter_tensor", group)?;
        Ok(Tensor::empty_fake(
            &scattered_shape(x, n)?,
            x.dtype(),
            x.device(),
        ))
    })?;
    op.register_autograd(
        |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            let (op, group) = ctx_args(ctx)?;
            let reduce = op_of(&op)?;
            let n = size_of("reduce_scatter_tensor", group)? as f64;
            let g = match (&grads[0], reduce) {
                (None, _) => None,
                (Some(g), ReduceOp::Sum) => Some(functional_all_gather(g, group)?),
                (Some(g), ReduceOp::Avg) => Some(functional_all_gather(g, group)?.div_scalar(n)?),
                (Some(_), r) => {
                    return Err(Error::Autograd(format!(
                        "reduce_scatter_tensor with ReduceOp::{r:?} is not differentiable \
                         (sum and avg are)"
                    )));
                }
            };
            Ok(vec![g, None, None])
        },
        Some(Box::new(save_args)),
    )?;
    Ok(op.into_def())
}

/// Saves the input (for its shape) and the op's other arguments (`op`, `group`) for backward.
fn save_args(ctx: &mut AutogradCtx, inputs: &[Value], _outputs: &[Tensor]) -> Result<()> {
    if let Value::Tensor(x) = &inputs[0] {
        ctx.save_for_backward(&[&x.detach()]);
    }
    for v in &inputs[1..] {
        match v {
            Value::Str(op) => ctx.save_value("op", Value::Str(op.clone())),
            Value::Int(g) => ctx.save_value("group", Value::Int(*g)),
            _ => {}
        }
    }
    Ok(())
}

fn ctx_args(ctx: &AutogradCtx) -> Result<(String, i64)> {
    match ctx.value("op")? {
        Value::Str(op) => Ok((op.clone(), group_of(ctx)?)),
        v => Err(Error::Autograd(format!("tp_dist: op saved as {v:?}"))),
    }
}

fn group_of(ctx: &AutogradCtx) -> Result<i64> {
    match ctx.value("group")? {
        Value::Int(g) => Ok(*g),
        v => Err(Error::Autograd(format!("tp_dist: group saved as {v:?}"))),
    }
}

fn functional_all_reduce(x: &Tensor, op: ReduceOp, group: i64) -> Result<Tensor> {
    let args = [x.into(), Value::Str(op.name().into()), Value::Int(group)];
    ops("all_reduce")?.all_reduce.call1(&args[..])
}

fn functional_all_gather(x: &Tensor, group: i64) -> Result<Tensor> {
    let args = [x.into(), Value::Int(group)];
    ops("all_gather_into_tensor")?.all_gather.call1(&args[..])
}

fn functional_reduce_scatter(x: &Tensor, op: ReduceOp, group: i64) -> Result<Tensor> {
    let args = [x.into(), Value::Str(op.name().into()), Value::Int(group)];
    ops("reduce_scatter_tensor")?
        .reduce_scatter
        .call1(&args[..])
}

/// The functional collectives (PyTorch's `torch.distributed._functional_collectives`): they
/// return new tensors, record autograd, and are captured by the compiler.
pub mod functional {
    use super::*;

    /// The reduction of `x` over the group, as a new tensor. Differentiable for `Sum` and `Avg`
    /// (the gradient is the same all-reduce of the output's gradient).
    pub fn all_reduce(x: &Tensor, op: ReduceOp, group: Option<&ProcessGroup>) -> Result<Tensor> {
        let g = resolve("all_reduce", group)?.id() as i64;
        functional_all_reduce(x, op, g)
    }

    /// Every rank's `x` concatenated along dim 0 (a 0-d `x` gathers into a 1-d tensor).
    /// Differentiable: the gradient is the reduce-scatter (sum) of the output's gradient.
    pub fn all_gather_tensor(x: &Tensor, group: Option<&ProcessGroup>) -> Result<Tensor> {
        let g = resolve("all_gather_tensor", group)?.id() as i64;
        functional_all_gather(x, g)
    }

    /// This rank's block of the reduction of `x` over the group, split along dim 0 (whose size
    /// must be a multiple of the group size). Differentiable for `Sum` and `Avg`: the gradient
    /// is the all-gather of the output's gradient.
    pub fn reduce_scatter_tensor(
        x: &Tensor,
        op: ReduceOp,
        group: Option<&ProcessGroup>,
    ) -> Result<Tensor> {
        let g = resolve("reduce_scatter_tensor", group)?.id() as i64;
        functional_reduce_scatter(x, op, g)
    }
}
