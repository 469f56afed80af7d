//! The vmap layer of the dispatcher: unwrapping arguments at the innermost level, the batching
//! rules of builtin ops, and custom ops (their `register_vmap` rule or the fallback).
//!
//! Builtin rules are picked once per op from its declaration: elementwise ops (class
//! `Elementwise`, tensors and non-dim arguments only), in-place ops (`Kernel::Mutate`),
//! reductions and softmax-like ops (class `Reduction` with a `dim` argument) and, by the rule
//! their `OpDef::vmap` names, the view ops, `slice_backward`, `matmul`, `cat` and `stack`.
//! Everything else, and every case a rule does not cover (0-d examples, unusual arguments), runs the per-example fallback. When a
//! rule fails, the fallback runs too, so the error is the one a single example raises (it names
//! per-example shapes and dims, not physical ones).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use tensorplay_ir::schema::{BaseType, Schema, SchemaType};
use tensorplay_ir::shape::{fmt_shape, normalize_dim};
use tensorplay_ir::{Error, OpClass, Result};

use super::batched::{self, pad_to_rank, to_front};
use super::custom_rule::VmapInfo;
use super::fallback::per_example;
use super::level::Level;
use super::unwrap::{ArgDims, Unwrapped, current_level, unwrap_args};
use crate::dispatch;
use crate::dispatch::CustomOperator;
use crate::ops::shape::view_strides;
use crate::ops::{Kernel, OpDef, VmapRule};
use crate::tensor::Tensor;
use crate::value::Value;

/// The per-example rank of a physical tensor with batch dim `bdim`.
fn logical_rank(t: &Tensor, bdim: Option<usize>) -> usize {
    t.rank() - usize::from(bdim.is_some())
}

/// `v` with its tensor replaced by `t`, keeping the variant (tensor or optional tensor).
fn with_tensor(v: &Value, t: Tensor) -> Value {
    match v {
        Value::OptionalTensor(_) => Value::OptionalTensor(Some(t)),
        _ => Value::Tensor(t),
    }
}

/// How a `dim` argument is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DimKind {
    /// `int dim`
    One,
    /// `int? dim`
    OptOne,
    /// `int[] dim` (empty = every dim)
    Many,
    /// `int[]? dim` (None or empty = every dim)
    OptMany,
}

/// The batching rule of a builtin op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleKind {
    Elementwise,
    InPlace,
    Reduce {
        dim_at: usize,
        kind: DimKind,
        keepdim_at: Option<usize>,
        flatten_none: bool,
    },
    View,
    Permute,
    Expand,
    Slice,
    SliceBackward,
    Diagonal,
    Matmul,
    Cat,
    Stack,
    Fallback,
}

fn is_int_like(ty: &SchemaType) -> bool {
    matches!(ty.base(), BaseType::Int | BaseType::SymInt)
}

fn dim_kind(ty: &SchemaType) -> Option<DimKind> {
    if !is_int_like(ty) {
        return None;
    }
    let opt = ty.is_optional();
    Some(match (ty.non_optional().is_list(), opt) {
        (false, false) => DimKind::One,
        (false, true) => DimKind::OptOne,
        (true, false) => DimKind::Many,
        (true, true) => DimKind::OptMany,
    })
}

/// Picks the rule of `op` from its declaration: the rule it names (`OpDef::vmap`, checked
/// against its schema), else one derived from its class, kernel kind and schema.
fn classify(op: &OpDef) -> RuleKind {
    let Ok(schema) = Schema::parse(&format!("tp::{}", op.schema)) else {
        return RuleKind::Fallback;
    };
    let p = &schema.params;
    let ty = |i: usize| p.get(i).map(|q| &q.ty);
    let tensor_at = |i: usize| ty(i).is_some_and(SchemaType::is_tensor);
    let int_list_at = |i: usize| ty(i).is_some_and(|t| is_int_like(t) && t.is_list());
    let int_at =
        |i: usize| ty(i).is_some_and(|t| is_int_like(t) && !t.is_list() && !t.is_optional());
    let tensor_count = p.iter().filter(|q| q.ty.is_tensor_like()).count();
    let declared = match op.vmap {
        VmapRule::View if tensor_at(0) && int_list_at(1) && p.len() == 2 => Some(RuleKind::View),
        VmapRule::Permute if tensor_at(0) && int_list_at(1) && p.len() == 2 => {
            Some(RuleKind::Permute)
        }
        VmapRule::Expand if tensor_at(0) && int_list_at(1) && p.len() == 2 => {
            Some(RuleKind::Expand)
        }
        VmapRule::Slice if tensor_at(0) && int_at(1) && tensor_count == 1 => Some(RuleKind::Slice),
        VmapRule::SliceBackward
            if tensor_at(0) && int_list_at(1) && int_at(2) && tensor_count == 1 =>
        {
            Some(RuleKind::SliceBackward)
        }
        VmapRule::Diagonal if tensor_at(0) && tensor_count == 1 && p.len() == 4 => {
            Some(RuleKind::Diagonal)
        }
        VmapRule::Matmul if tensor_at(0) && tensor_at(1) && p.len() == 2 => Some(RuleKind::Matmul),
        VmapRule::Cat | VmapRule::Stack
            if ty(0).is_some_and(SchemaType::is_tensor_list) && int_at(1) && p.len() == 2 =>
        {
            Some(if op.vmap == VmapRule::Cat {
                RuleKind::Cat
            } else {
                RuleKind::Stack
            })
        }
        VmapRule::Derived | VmapRule::ReduceFlattened => None,
        // A declared rule the schema does not fit batches per example.
        _ => Some(RuleKind::Fallback),
    };
    if let Some(k) = declared {
        return k;
    }
    // Arguments an elementwise-style rule passes through unchanged: tensors (which broadcast)
    // and values that carry no dims or sizes.
    let plain = |q: &tensorplay_ir::schema::Param| {
        if q.ty.is_tensor_like() {
            q.ty.is_tensor() || q.ty.is_optional_tensor()
        } else {
            !is_int_like(&q.ty) && !matches!(q.ty.base(), BaseType::Other(_))
        }
    };
    match (&op.kernel, op.class) {
        (Kernel::Mutate { .. }, _) if tensor_at(0) && p.iter().all(plain) => RuleKind::InPlace,
        (Kernel::Compute { .. }, OpClass::Elementwise) if p.iter().all(plain) => {
            RuleKind::Elementwise
        }
        (Kernel::Compute { .. }, OpClass::Reduction) if tensor_at(0) && tensor_count == 1 => {
            let dim_at = p.iter().position(|q| q.name == "dim");
            let others_plain = p.iter().all(|q| q.name == "dim" || plain(q));
            match dim_at.and_then(|i| dim_kind(&p[i].ty).map(|k| (i, k))) {
                Some((dim_at, kind)) if others_plain => RuleKind::Reduce {
                    dim_at,
                    kind,
                    keepdim_at: p
                        .iter()
                        .position(|q| q.name == "keepdim" && *q.ty.base() == BaseType::Bool),
                    // "No dim" means the flattened tensor for the arg-extremum reductions.
                    flatten_none: op.vmap == VmapRule::ReduceFlattened,
                },
                _ => RuleKind::Fallback,
            }
        }
        _ => RuleKind::Fallback,
    }
}

/// The cached rule of `op` (computed on first use; op declarations are static).
fn rule_of(op: &'static OpDef) -> RuleKind {
    static CACHE: OnceLock<RwLock<HashMap<usize, RuleKind>>> = OnceLock::new();
    let key = op as *const OpDef as usize;
    let cache = CACHE.get_or_init(|| RwLock::new(HashMap::new()));
    if let Some(k) = cache.read().get(&key) {
        return *k;
    }
    let k = classify(op);
    cache.write().insert(key, k);
    k
}

/// Calls builtin `op` on physical arguments and wraps every output as batched at `level` with
/// batch dim 0 (which each rule arranges).
fn call_batched(op: &'static OpDef, values: &[Value], level: Level) -> Result<Vec<Tensor>> {
    let outs = dispatch::call(op, values)?;
    wrap_front(op.name, outs, level)
}

/// Wraps batch-first physical outputs as batched at `level`.
fn wrap_front(op: &str, outs: Vec<Tensor>, level: Level) -> Result<Vec<Tensor>> {
    outs.into_iter()
        .map(|o| {
            if o.rank() == 0 || o.shape()[0] != level.batch_size {
                return Err(Error::unsupported(
                    op,
                    format!(
                        "vmap batching rule produced shape {}, which does not lead with the batch \
                         size {}",
                        fmt_shape(o.shape()),
                        level.batch_size
                    ),
                ));
            }
            Ok(batched::wrap(o, 0, level.id))
        })
        .collect()
}

/// The vmap layer for builtin `op`: unwrap at the innermost level, run the op's batching rule
/// (or the per-example fallback) and wrap the results.
pub(crate) fn dispatch_builtin(op: &'static OpDef, args: &[Value]) -> Result<Vec<Tensor>> {
    let level = current_level(op.name, args)?;
    let u = unwrap_args(args, level.id);
    let fallback = || {
        per_example(op.name, &u, level, &|vals: &[Value]| {
            dispatch::call(op, vals)
        })
    };
    let kind = rule_of(op);
    if let Kernel::Mutate { .. } = op.kernel {
        // Writing per-example results into one shared tensor would overwrite each other.
        if !matches!(u.dims.first(), Some(ArgDims::Tensor(_))) {
            return Err(inplace_unbatched(op.name));
        }
        return match kind {
            RuleKind::InPlace => inplace(op, &u, args),
            _ => {
                fallback()?;
                Ok(vec![
                    args[0]
                        .tensors()
                        .next()
                        .cloned()
                        .ok_or_else(|| inplace_unbatched(op.name))?,
                ])
            }
        };
    }
    let ruled = match kind {
        RuleKind::Elementwise => elementwise(op, &u, level),
        RuleKind::Reduce {
            dim_at,
            kind,
            keepdim_at,
            flatten_none,
        } => reduce(op, &u, level, dim_at, kind, keepdim_at, flatten_none),
        RuleKind::View => view(op, &u, level),
        RuleKind::Permute => permute(op, &u, level),
        RuleKind::Expand => expand(op, &u, level),
        RuleKind::Slice => slice(op, &u, level),
        RuleKind::SliceBackward => slice_backward(op, &u, level),
        RuleKind::Diagonal => diagonal(op, &u, level),
        RuleKind::Matmul => matmul(op, &u, level),
        RuleKind::Cat | RuleKind::Stack => join(op, &u, level, kind == RuleKind::Stack),
        RuleKind::InPlace | RuleKind::Fallback => Ok(None),
    };
    match ruled {
        Ok(Some(outs)) => Ok(outs),
        // Not covered by the rule: run per example.
        Ok(None) => fallback(),
        // Reproduce the error on the examples so it speaks of per-example shapes and dims.
        Err(_) if level.batch_size > 0 => fallback(),
        Err(e) => Err(e),
    }
}

fn inplace_unbatched(op: &str) -> Error {
    Error::unsupported(
        op,
        "vmap: inplace arithmetic(self, *extra_args) is not possible because `self` is not \
         batched while another argument is: the result would need the batch dim that `self` \
         lacks; use the out-of-place op instead",
    )
}

/// Elementwise ops: batch dims to the front, batched tensors padded with size-1 dims after the
/// batch dim to the largest per-example rank, so that unbatched tensors broadcast from the right.
fn elementwise(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let rank = (0..u.values.len())
        .filter_map(|i| u.tensor(i))
        .map(|(t, d)| logical_rank(t, d))
        .max()
        .unwrap_or(0);
    let mut values = u.values.clone();
    for (i, v) in values.iter_mut().enumerate() {
        if let Some((t, Some(d))) = u.tensor(i) {
            *v = with_tensor(v, pad_to_rank(&to_front(t, d)?, rank)?);
        }
    }
    call_batched(op, &values, level).map(Some)
}

/// In-place ops: `self` (which must be batched) is written through a batch-first view of its
/// physical tensor; the other operands are arranged as for elementwise ops. Returns `self`.
fn inplace(op: &'static OpDef, u: &Unwrapped, args: &[Value]) -> Result<Vec<Tensor>> {
    let Some((target, Some(d))) = u.tensor(0) else {
        return Err(inplace_unbatched(op.name));
    };
    let target = to_front(target, d)?;
    let rank = target.rank() - 1;
    let mut values = u.values.clone();
    values[0] = Value::Tensor(target);
    for (i, v) in values.iter_mut().enumerate().skip(1) {
        if let Some((t, Some(d))) = u.tensor(i) {
            *v = with_tensor(v, pad_to_rank(&to_front(t, d)?, rank)?);
        }
    }
    dispatch::call(op, &values)?;
    let Some(Value::Tensor(this)) = args.first() else {
        return Err(inplace_unbatched(op.name));
    };
    Ok(vec![this.clone()])
}

/// Reductions and softmax-like ops: per-example dims become physical dims (+1 behind the batch
/// dim at 0); "every dim" becomes every dim but the batch dim.
fn reduce(
    op: &'static OpDef,
    u: &Unwrapped,
    level: Level,
    dim_at: usize,
    kind: DimKind,
    keepdim_at: Option<usize>,
    flatten_none: bool,
) -> Result<Option<Vec<Tensor>>> {
    let Some((x, Some(d))) = u.tensor(0) else {
        return Ok(None);
    };
    let x = to_front(x, d)?;
    let rank = x.rank() - 1;
    if rank == 0 {
        return Ok(None);
    }
    let mut values = u.values.clone();
    if dim_at > values.len() {
        return Ok(None);
    }
    if dim_at == values.len() {
        values.push(Value::None);
    }
    let all = || Value::IntList((1..=rank as i64).collect());
    let phys = |dim: i64| -> Result<i64> { Ok(normalize_dim(op.name, dim, rank)? as i64 + 1) };
    let many = matches!(kind, DimKind::Many | DimKind::OptMany);
    let dim_value = match &values[dim_at] {
        Value::None if many => all(),
        Value::IntList(v) if many && v.is_empty() => all(),
        Value::IntList(v) if many => {
            Value::IntList(v.iter().map(|&d| phys(d)).collect::<Result<_>>()?)
        }
        Value::Int(d) if !many => Value::Int(phys(*d)?),
        Value::None if kind == DimKind::OptOne && flatten_none => {
            return flatten_reduce(op, &x, values, level, dim_at, keepdim_at).map(Some);
        }
        _ => return Ok(None),
    };
    values[0] = Value::Tensor(x);
    values[dim_at] = dim_value;
    call_batched(op, &values, level).map(Some)
}

/// An arg-extremum over the flattened example: reduce dim 1 of `[B, numel]`, then give the
/// keepdim result its all-ones per-example shape.
fn flatten_reduce(
    op: &'static OpDef,
    x: &Tensor,
    mut values: Vec<Value>,
    level: Level,
    dim_at: usize,
    keepdim_at: Option<usize>,
) -> Result<Vec<Tensor>> {
    let rank = x.rank() - 1;
    let n: usize = x.shape()[1..].iter().product();
    values[0] = Value::Tensor(x.reshape(&[x.shape()[0], n])?);
    values[dim_at] = Value::Int(1);
    let mut keepdim = false;
    if let Some(k) = keepdim_at
        && let Some(v) = values.get_mut(k)
    {
        keepdim = matches!(v, Value::Bool(true));
        *v = Value::Bool(false);
    }
    let outs = dispatch::call(op, &values)?;
    let outs = if keepdim {
        outs.into_iter()
            .map(|o| {
                let mut shape = vec![1usize; rank + 1];
                shape[0] = o.shape()[0];
                o.reshape(&shape)
            })
            .collect::<Result<_>>()?
    } else {
        outs
    };
    wrap_front(op.name, outs, level)
}

/// The batch-first physical tensor of argument 0 and its per-example rank.
fn self_front(u: &Unwrapped) -> Result<Option<(Tensor, usize)>> {
    match u.tensor(0) {
        Some((x, Some(d))) => {
            let x = to_front(x, d)?;
            let rank = x.rank() - 1;
            Ok(Some((x, rank)))
        }
        _ => Ok(None),
    }
}

/// `view(size)`: the batch size is prepended to the size (copying first when the batch-first
/// physical layout cannot be viewed so).
fn view(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let (Some((x, _)), Some(size)) = (self_front(u)?, u.ints(1)) else {
        return Ok(None);
    };
    let Ok(size) = size
        .iter()
        .map(|&s| usize::try_from(s))
        .collect::<std::result::Result<Vec<usize>, _>>()
    else {
        return Ok(None);
    };
    let numel: usize = x.shape()[1..].iter().product();
    if size.iter().product::<usize>() != numel {
        return Ok(None);
    }
    let mut shape = vec![x.shape()[0]];
    shape.extend_from_slice(&size);
    let x = if view_strides(x.shape(), x.strides(), &shape).is_some() {
        x
    } else {
        x.contiguous()?
    };
    let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    call_batched(op, &[Value::Tensor(x), Value::IntList(sizes)], level).map(Some)
}

/// `permute(dims)`: the batch dim stays first, per-example dims shift by one.
fn permute(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let (Some((x, rank)), Some(dims)) = (self_front(u)?, u.ints(1)) else {
        return Ok(None);
    };
    if dims.len() != rank {
        return Ok(None);
    }
    let mut perm = vec![0i64];
    for &d in dims {
        perm.push(normalize_dim(op.name, d, rank)? as i64 + 1);
    }
    call_batched(op, &[Value::Tensor(x), Value::IntList(perm)], level).map(Some)
}

/// `expand(size)`: pad the example to the target rank, then expand to `[B, *size]`.
fn expand(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let (Some((x, rank)), Some(size)) = (self_front(u)?, u.ints(1)) else {
        return Ok(None);
    };
    // New leading dims need explicit sizes (-1 only keeps an existing dim); the fallback reports
    // those errors per example.
    if size.len() < rank || size[..size.len() - rank].iter().any(|&s| s < 0) {
        return Ok(None);
    }
    let x = pad_to_rank(&x, size.len())?;
    let mut target = vec![x.shape()[0] as i64];
    target.extend_from_slice(size);
    call_batched(op, &[Value::Tensor(x), Value::IntList(target)], level).map(Some)
}

/// `slice(dim, ...)`: the dim shifts behind the batch dim.
fn slice(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let Some((x, rank)) = self_front(u)? else {
        return Ok(None);
    };
    if rank == 0 {
        return Ok(None);
    }
    let dim = match u.values.get(1) {
        None => 0,
        Some(_) => match u.int(1) {
            Some(d) => d,
            None => return Ok(None),
        },
    };
    let mut values = u.values.clone();
    values[0] = Value::Tensor(x);
    let phys = Value::Int(normalize_dim(op.name, dim, rank)? as i64 + 1);
    if values.len() < 2 {
        values.push(phys);
    } else {
        values[1] = phys;
    }
    call_batched(op, &values, level).map(Some)
}

/// `diagonal(self, offset, dim1, dim2)`: both dims shift behind the batch dim (which stays the
/// first dim of the result, since only `dim1` and `dim2` are removed).
fn diagonal(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let Some((x, rank)) = self_front(u)? else {
        return Ok(None);
    };
    if rank < 2 {
        return Ok(None);
    }
    let at = |i: usize, default: i64| match u.values.get(i) {
        None => Some(default),
        Some(_) => u.int(i),
    };
    let (Some(offset), Some(dim1), Some(dim2)) = (at(1, 0), at(2, 0), at(3, 1)) else {
        return Ok(None);
    };
    let phys =
        |d: i64| -> Result<Value> { Ok(Value::Int(normalize_dim(op.name, d, rank)? as i64 + 1)) };
    let values = vec![
        Value::Tensor(x),
        Value::Int(offset),
        phys(dim1)?,
        phys(dim2)?,
    ];
    call_batched(op, &values, level).map(Some)
}

/// `slice_backward(grad, input_sizes, dim, ...)`: the batch size is prepended to `input_sizes`
/// and the dim shifts behind it.
fn slice_backward(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let (Some((g, _)), Some(sizes), Some(dim)) = (self_front(u)?, u.ints(1), u.int(2)) else {
        return Ok(None);
    };
    if sizes.is_empty() {
        return Ok(None);
    }
    let mut values = u.values.clone();
    let mut phys_sizes = vec![g.shape()[0] as i64];
    phys_sizes.extend_from_slice(sizes);
    values[0] = Value::Tensor(g);
    values[1] = Value::IntList(phys_sizes);
    values[2] = Value::Int(normalize_dim(op.name, dim, sizes.len())? as i64 + 1);
    call_batched(op, &values, level).map(Some)
}

/// `t` without dim `dim` (negative counts from the end), which must have size 1.
fn drop_unit_dim(t: &Tensor, dim: i64) -> Result<Tensor> {
    let d = normalize_dim("matmul", dim, t.rank())?;
    let mut shape = t.shape().to_vec();
    shape.remove(d);
    t.reshape(&shape)
}

/// `matmul`: per-example vectors become matrices (a row for the left operand, a column for the
/// right one), batched operands are padded behind the batch dim to a common per-example rank so
/// the batch dim never meets an unbatched operand's dims, then the vector dims are dropped again.
fn matmul(op: &'static OpDef, u: &Unwrapped, level: Level) -> Result<Option<Vec<Tensor>>> {
    let (Some((a, da)), Some((b, db))) = (u.tensor(0), u.tensor(1)) else {
        return Ok(None);
    };
    let (ra, rb) = (logical_rank(a, da), logical_rank(b, db));
    if ra == 0 || rb == 0 {
        return Ok(None);
    }
    let front = |t: &Tensor, d: Option<usize>| d.map_or_else(|| Ok(t.clone()), |d| to_front(t, d));
    let (mut a, mut b) = (front(a, da)?, front(b, db)?);
    if ra == 1 {
        // [n] -> [1, n]: insert before the per-example dim.
        a = a.unsqueeze(a.rank() as i64 - 1)?;
    }
    if rb == 1 {
        // [n] -> [n, 1]
        b = b.unsqueeze(b.rank() as i64)?;
    }
    let rank = ra.max(2).max(rb.max(2));
    if da.is_some() {
        a = pad_to_rank(&a, rank)?;
    }
    if db.is_some() {
        b = pad_to_rank(&b, rank)?;
    }
    let mut out = dispatch::call1(op, &[Value::Tensor(a), Value::Tensor(b)])?;
    if ra == 1 {
        out = drop_unit_dim(&out, -2)?;
    }
    if rb == 1 {
        out = drop_unit_dim(&out, -1)?;
    }
    wrap_front(op.name, vec![out], level).map(Some)
}

/// `cat`/`stack`: members batch-first (unbatched ones expanded to the batch size), the dim
/// shifted behind the batch dim.
fn join(
    op: &'static OpDef,
    u: &Unwrapped,
    level: Level,
    stack: bool,
) -> Result<Option<Vec<Tensor>>> {
    let (Some(Value::TensorList(ts)), ArgDims::List(ds)) = (u.values.first(), &u.dims[0]) else {
        return Ok(None);
    };
    let ranks: Vec<usize> = ts
        .iter()
        .zip(ds)
        .map(|(t, d)| logical_rank(t, *d))
        .collect();
    let rank = ranks[0];
    if ranks.iter().any(|&r| r != rank) || (!stack && rank == 0) {
        return Ok(None);
    }
    let dim = match u.values.get(1) {
        None => 0,
        Some(_) => match u.int(1) {
            Some(d) => d,
            None => return Ok(None),
        },
    };
    let dim = normalize_dim(op.name, dim, rank + usize::from(stack))? as i64 + 1;
    let n = level.batch_size;
    let members: Vec<Tensor> = ts
        .iter()
        .zip(ds)
        .map(|(t, d)| match d {
            Some(d) => to_front(t, *d),
            None => {
                let mut shape = vec![n];
                shape.extend_from_slice(t.shape());
                t.unsqueeze(0)?.expand(&shape)
            }
        })
        .collect::<Result<_>>()?;
    call_batched(op, &[Value::TensorList(members), Value::Int(dim)], level).map(Some)
}

// ---- custom operators ----------------------------------------------------------------------

/// The vmap layer for a custom op: its `register_vmap` rule, or the per-example fallback.
pub(crate) fn dispatch_custom(op: &Arc<dyn CustomOperator>, args: &[Value]) -> Result<Vec<Tensor>> {
    let name = op.qualname();
    let level = current_level(name, args)?;
    let u = unwrap_args(args, level.id);
    for (i, p) in op.schema().params.iter().enumerate() {
        let unbatched = match u.dims.get(i) {
            Some(ArgDims::Tensor(_)) => false,
            Some(ArgDims::List(ds)) => ds.iter().any(Option::is_none),
            _ => args.get(i).is_some_and(|v| v.tensors().next().is_some()),
        };
        if p.is_mutated() && unbatched {
            return Err(Error::unsupported(
                name,
                format!(
                    "vmap: `{name}` mutates argument `{}`, which is not batched while other \
                     arguments are; every example would write the same tensor",
                    p.name
                ),
            ));
        }
    }
    let rule = op.vmap_rule();
    let Some(rule) = rule else {
        return per_example(name, &u, level, &|vals: &[Value]| {
            dispatch::call_op(dispatch::OpHandle::Custom(op), vals)
        });
    };
    // Lists: every member batch-first (unbatched members expanded), so one in_dim describes them.
    let mut values = u.values.clone();
    let mut in_dims: Vec<Option<usize>> = Vec::with_capacity(values.len());
    for (v, d) in values.iter_mut().zip(&u.dims) {
        in_dims.push(match d {
            ArgDims::Unbatched => None,
            ArgDims::Tensor(b) => Some(*b),
            ArgDims::List(ds) => {
                if let Value::TensorList(ts) = v {
                    let members = ts
                        .iter()
                        .zip(ds)
                        .map(|(t, d)| match d {
                            Some(d) => to_front(t, *d),
                            None => {
                                let mut shape = vec![level.batch_size];
                                shape.extend_from_slice(t.shape());
                                t.unsqueeze(0)?.expand(&shape)
                            }
                        })
                        .collect::<Result<Vec<_>>>()?;
                    *v = Value::TensorList(members);
                }
                Some(0)
            }
        });
    }
    let info = VmapInfo {
        batch_size: level.batch_size,
        randomness: level.randomness.as_str().to_string(),
    };
    let (outs, out_dims) = rule(&info, &in_dims, &values)?;
    if outs.len() != out_dims.len() {
        return Err(Error::argument(
            name,
            "vmap rule",
            format!("one out_dim per output ({} outputs)", outs.len()),
            format!("{} out_dims", out_dims.len()),
        ));
    }
    let returns = &op.schema().returns;
    let list_return = returns.len() == 1 && returns[0].ty.is_tensor_list();
    if !list_return && outs.len() != returns.len() {
        return Err(Error::argument(
            name,
            "vmap rule",
            format!("{} outputs (schema: {})", returns.len(), op.schema()),
            format!("{} outputs", outs.len()),
        ));
    }
    outs.into_iter()
        .zip(out_dims)
        .enumerate()
        .map(|(i, (o, d))| match d {
            None => Ok(o),
            Some(d) if d < o.rank() && o.shape()[d] == level.batch_size => {
                Ok(batched::wrap(o, d, level.id))
            }
            Some(d) => Err(Error::argument(
                name,
                "vmap rule out_dims",
                format!(
                    "a dim of output {i} (shape {}) whose size is the batch size {}",
                    fmt_shape(o.shape()),
                    level.batch_size
                ),
                format!("out_dim {d}"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{binary, cast, inplace, join, linalg, logical, reduce, shape, softmax, unary};

    #[test]
    fn rules_follow_the_op_table() {
        let named: [(&'static OpDef, RuleKind); 8] = [
            (&shape::VIEW, RuleKind::View),
            (&shape::PERMUTE, RuleKind::Permute),
            (&shape::EXPAND, RuleKind::Expand),
            (&shape::SLICE, RuleKind::Slice),
            (&shape::SLICE_BACKWARD, RuleKind::SliceBackward),
            (&linalg::MATMUL, RuleKind::Matmul),
            (&join::CAT, RuleKind::Cat),
            (&join::STACK, RuleKind::Stack),
        ];
        for (op, kind) in named {
            assert_eq!(rule_of(op), kind, "{}", op.name);
        }
        for op in [
            &binary::ADD,
            &unary::EXP,
            &logical::WHERE,
            &logical::CLAMP,
            &cast::TO_DTYPE,
            &unary::GELU,
        ] {
            assert_eq!(rule_of(op), RuleKind::Elementwise, "{}", op.name);
        }
        for op in [&inplace::ADD_, &inplace::COPY_, &inplace::FILL_] {
            assert_eq!(rule_of(op), RuleKind::InPlace, "{}", op.name);
        }
        let reduce_kind = |op: &'static OpDef| match rule_of(op) {
            RuleKind::Reduce {
                kind, flatten_none, ..
            } => Some((kind, flatten_none)),
            _ => None,
        };
        assert_eq!(reduce_kind(&reduce::SUM), Some((DimKind::OptMany, false)));
        assert_eq!(reduce_kind(&reduce::AMAX), Some((DimKind::Many, false)));
        assert_eq!(reduce_kind(&reduce::MAX_DIM), Some((DimKind::One, false)));
        assert_eq!(reduce_kind(&reduce::ARGMAX), Some((DimKind::OptOne, true)));
        assert_eq!(reduce_kind(&softmax::SOFTMAX), Some((DimKind::One, false)));
        // No dim argument: the per-example fallback.
        assert_eq!(rule_of(&reduce::MAX), RuleKind::Fallback);
    }
}
