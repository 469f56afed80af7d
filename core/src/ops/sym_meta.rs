//! Meta rules over symbolic sizes: an op's output shapes as expressions of its inputs' symbolic
//! shapes and size arguments (what printed graphs show, and what `Tensor::sym_size` hands out for
//! an op's result during capture).
//!
//! A rule exists for elementwise ops (from their class: broadcasting), the ops that take sizes
//! (`view`, `expand`, `slice`, `permute`), reductions (a `dim` list or a single `dim`, with
//! `keepdim`), softmax, matmul, `cat`/`stack`, and the ops whose result has an argument's shape
//! (`cumsum`, `cumprod`, `flip`, `sort`, `scatter`/`scatter_add`/`scatter_reduce`: `self`'s;
//! `gather`: the index's), `diagonal` (the other dims, then the diagonal's length); any
//! other op's results have no symbolic shape,
//! so code reading their sizes gets guarded plain integers. Rules are selected by `OpDef`
//! identity, never by name. Correctness never rests on a rule: the caller checks every result
//! against the op's concrete meta rule at the example sizes and drops a rule's answer that
//! disagrees, and where a rule needs a fact about the sizes that does not hold for all of them
//! (two dims that broadcast are equal), it records a guard.

use tensorplay_ir::graph::{SymCmp, SymGuard};
use tensorplay_ir::{OpClass, SymExpr};

use super::OpDef;
use super::attention::{FUSED_ATTENTION, FUSED_ATTENTION_BACKWARD};
use super::conv::{CONV_TRANSPOSE2D, CONV_TRANSPOSE2D_BACKWARD, CONV2D, CONV2D_BACKWARD};
use super::index::{FLIP, GATHER, SCATTER, SCATTER_ADD, SCATTER_REDUCE};
use super::join::{CAT, STACK};
use super::linalg::MATMUL;
use super::pool::{
    ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_BACKWARD, AVG_POOL2D, AVG_POOL2D_BACKWARD,
    MAX_POOL2D_WITH_INDICES, MAX_POOL2D_WITH_INDICES_BACKWARD,
};
use super::reduce::{
    AMAX, AMIN, ARGMAX, ARGMIN, MAX, MAX_DIM, MEAN, MIN, MIN_DIM, PROD, STD, SUM, VAR,
};
use super::scan::{CUMPROD, CUMSUM};
use super::shape::{DIAGONAL, EXPAND, PERMUTE, SLICE, VIEW};
use super::softmax::{LOG_SOFTMAX, SOFTMAX};
use super::sort::SORT;

/// One argument of a call, as the symbolic rule sees it.
#[derive(Debug, Clone)]
pub enum SymArg {
    /// A tensor whose every dim has a known expression.
    Tensor(Vec<SymExpr>),
    /// A tensor without a (complete) symbolic shape.
    UnknownTensor,
    /// A tensor list whose every tensor has a known symbolic shape.
    Tensors(Vec<Vec<SymExpr>>),
    /// An integer.
    Int(SymExpr),
    /// An integer list.
    Ints(Vec<SymExpr>),
    /// A flag (`keepdim`).
    Bool(bool),
    /// Anything else (`None`, floats, flags, tensor lists, ...).
    Other,
}

/// What a rule may consult and record: the example value of each symbol, and the guards its
/// answer relies on.
pub struct SymCtx<'a> {
    pub hint: &'a dyn Fn(u32) -> Option<i64>,
    pub guards: Vec<SymGuard>,
}

impl SymCtx<'_> {
    /// Whether `e <cmp> rhs`: statically when it holds (or fails) for every size, otherwise by
    /// the example values with a guard recorded.
    pub fn decide(&mut self, e: SymExpr, cmp: SymCmp, rhs: i64) -> Option<bool> {
        let d = e.minus(SymExpr::lit(rhs));
        if let Some(known) = cmp.decide_statically(d) {
            return Some(known);
        }
        let holds = cmp.test(d.eval(self.hint)?, 0);
        self.guards.push(SymGuard {
            expr: d,
            cmp: if holds { cmp } else { cmp.negate() },
            rhs: 0,
        });
        Some(holds)
    }

    /// The broadcast of two dims (`None` when the example sizes do not broadcast).
    fn broadcast_dim(&mut self, a: SymExpr, b: SymExpr) -> Option<SymExpr> {
        if a == b {
            return Some(a);
        }
        if self.decide(a, SymCmp::Eq, 1)? {
            return Some(b);
        }
        if self.decide(b, SymCmp::Eq, 1)? {
            return Some(a);
        }
        self.decide(a.minus(b), SymCmp::Eq, 0)?.then_some(a)
    }

    fn broadcast(&mut self, a: &[SymExpr], b: &[SymExpr]) -> Option<Vec<SymExpr>> {
        let rank = a.len().max(b.len());
        let one = SymExpr::lit(1);
        (0..rank)
            .map(|i| {
                let at = |s: &[SymExpr]| (i + s.len()).checked_sub(rank).map_or(one, |j| s[j]);
                self.broadcast_dim(at(a), at(b))
            })
            .collect()
    }
}

fn tensor(args: &[SymArg], i: usize) -> Option<&[SymExpr]> {
    match args.get(i)? {
        SymArg::Tensor(s) => Some(s),
        _ => None,
    }
}

fn int(args: &[SymArg], i: usize) -> Option<SymExpr> {
    match args.get(i)? {
        SymArg::Int(e) => Some(*e),
        _ => None,
    }
}

fn ints(args: &[SymArg], i: usize) -> Option<&[SymExpr]> {
    match args.get(i)? {
        SymArg::Ints(v) => Some(v),
        _ => None,
    }
}

fn flag(args: &[SymArg], i: usize) -> Option<bool> {
    match args.get(i) {
        None => Some(false),
        Some(SymArg::Bool(b)) => Some(*b),
        Some(_) => None,
    }
}

/// The shape of a reduction of `x` over `dims` (`None`: every dim), keeping reduced dims as 1
/// under `keepdim`.
fn reduced(x: &[SymExpr], dims: Option<&[SymExpr]>, keepdim: bool) -> Option<Vec<SymExpr>> {
    let reduce: Vec<usize> = match dims {
        None | Some([]) => (0..x.len()).collect(),
        Some(d) => d
            .iter()
            .map(|&e| dim_index(e, x.len().max(1)))
            .collect::<Option<_>>()?,
    };
    let one = SymExpr::lit(1);
    Some(
        x.iter()
            .enumerate()
            .filter_map(|(i, &e)| match reduce.contains(&i) {
                false => Some(e),
                true => keepdim.then_some(one),
            })
            .collect(),
    )
}

/// The dims argument at `i` of a reduction: `None` for an absent or `None` argument (every
/// dim), one dim for an integer, the list for a list.
fn reduce_dims(args: &[SymArg], i: usize) -> Option<Option<Vec<SymExpr>>> {
    match args.get(i) {
        None | Some(SymArg::Other) => Some(None),
        Some(SymArg::Int(e)) => Some(Some(vec![*e])),
        Some(SymArg::Ints(v)) => Some(Some(v.clone())),
        Some(_) => None,
    }
}

impl SymCtx<'_> {
    /// `a == b` for two sizes the op requires equal: statically, or guarded by the example.
    fn require_equal(&mut self, a: SymExpr, b: SymExpr) -> Option<()> {
        (a == b || self.decide(a.minus(b), SymCmp::Eq, 0)?).then_some(())
    }

    /// `matmul`'s result shape (PyTorch's rules: 1-D operands gain and then lose a dim, batch
    /// dims broadcast, the contracted sizes must be equal).
    fn matmul(&mut self, a: &[SymExpr], b: &[SymExpr]) -> Option<Vec<SymExpr>> {
        if a.is_empty() || b.is_empty() {
            return None;
        }
        let (m, ka) = match a.len() {
            1 => (None, a[0]),
            n => (Some(a[n - 2]), a[n - 1]),
        };
        let (kb, n) = match b.len() {
            1 => (b[0], None),
            r => (b[r - 2], Some(b[r - 1])),
        };
        self.require_equal(ka, kb)?;
        let batch_a = &a[..a.len().saturating_sub(2)];
        let batch_b = &b[..b.len().saturating_sub(2)];
        let mut out = self.broadcast(batch_a, batch_b)?;
        out.extend(m);
        out.extend(n);
        Some(out)
    }

    /// `cat`'s result shape: sizes along `dim` add up, the others must agree. Legacy empty 1-D
    /// operands (skipped by `cat`) get no rule.
    fn cat(&mut self, xs: &[Vec<SymExpr>], dim: SymExpr) -> Option<Vec<SymExpr>> {
        let first = xs.first()?;
        if xs.iter().any(|x| x.len() != first.len()) {
            return None;
        }
        let dim = dim_index(dim, first.len())?;
        let mut out = first.clone();
        for x in &xs[1..] {
            for (i, (&o, &e)) in out.clone().iter().zip(x).enumerate() {
                if i == dim {
                    out[i] = o.plus(e);
                } else {
                    self.require_equal(o, e)?;
                }
            }
        }
        Some(out)
    }

    /// `stack`'s result shape: every operand has the same shape; a new dim of their count.
    fn stack(&mut self, xs: &[Vec<SymExpr>], dim: SymExpr) -> Option<Vec<SymExpr>> {
        let first = xs.first()?;
        if xs.iter().any(|x| x.len() != first.len()) {
            return None;
        }
        for x in &xs[1..] {
            for (&o, &e) in first.iter().zip(x) {
                self.require_equal(o, e)?;
            }
        }
        let dim = dim_index(dim, first.len() + 1)?;
        let mut out = first.clone();
        out.insert(dim, SymExpr::lit(xs.len() as i64));
        Some(out)
    }
}

/// `_fused_attention` (output `batch ++ [L, Ev]`, log-sum-exp `batch ++ [L]`, the 0-d dropout
/// seed) and its backward
/// (the gradients take the query's, key's and value's shapes), when query, key and value share
/// their batch dims exactly (broadcast batch dims get no rule).
fn attention(args: &[SymArg], forward: bool) -> Option<Vec<Vec<SymExpr>>> {
    let at = usize::from(!forward);
    let (q, k, v) = (
        tensor(args, at)?,
        tensor(args, at + 1)?,
        tensor(args, at + 2)?,
    );
    let r = q.len();
    if r < 2 || k.len() != r || v.len() != r || q[..r - 2] != k[..r - 2] || q[..r - 2] != v[..r - 2]
    {
        return None;
    }
    if !forward {
        return Some(vec![q.to_vec(), k.to_vec(), v.to_vec()]);
    }
    let mut out = q[..r - 1].to_vec();
    out.push(v[r - 1]);
    Some(vec![out, q[..r - 1].to_vec(), Vec::new()])
}

/// `conv2d`'s output `[N, O, OH, OW]`, each spatial size
/// `(in + pad_before + pad_after - dilation * (k - 1) - 1) / stride + 1`.
fn conv2d(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let (x, w) = (tensor(args, 0)?, tensor(args, 1)?);
    if x.len() != 4 || w.len() != 4 {
        return None;
    }
    let pair = |i: usize| -> Option<[SymExpr; 2]> {
        match ints(args, i)? {
            [a] => Some([*a, *a]),
            [a, b] => Some([*a, *b]),
            _ => None,
        }
    };
    let (stride, dilation) = (pair(3)?, pair(5)?);
    let pad = match ints(args, 4)? {
        [p] => [*p; 4],
        [h, w] => [*h, *h, *w, *w],
        [t, b, l, r] => [*t, *b, *l, *r],
        _ => return None,
    };
    let one = SymExpr::lit(1);
    let size = |d: usize| {
        let span = dilation[d].times(w[2 + d].minus(one)).plus(one);
        x[2 + d]
            .plus(pad[2 * d])
            .plus(pad[2 * d + 1])
            .minus(span)
            .floor_div(stride[d])
            .plus(one)
    };
    Some(vec![x[0], w[0], size(0), size(1)])
}

/// `conv_transpose2d`'s output `[N, C_out, OH, OW]`: `C_out = weight[1] * groups`, each
/// spatial size `(in - 1) * stride - 2 * pad + dilation * (k - 1) + output_padding + 1`.
/// With `backward`, the arguments start one later (after `grad_output`).
fn conv_transpose2d(args: &[SymArg], backward: bool) -> Option<Vec<SymExpr>> {
    let at = usize::from(backward);
    let (x, w) = (tensor(args, at)?, tensor(args, at + 1)?);
    if x.len() != 4 || w.len() != 4 {
        return None;
    }
    let pair = |i: usize| -> Option<[SymExpr; 2]> {
        match ints(args, at + i)? {
            [a] => Some([*a, *a]),
            [a, b] => Some([*a, *b]),
            _ => None,
        }
    };
    let (stride, pad, out_pad, dilation) = (pair(3)?, pair(4)?, pair(5)?, pair(7)?);
    let groups = int(args, at + 6)?;
    let one = SymExpr::lit(1);
    let size = |d: usize| {
        x[2 + d]
            .minus(one)
            .times(stride[d])
            .minus(pad[d].times(SymExpr::lit(2)))
            .plus(dilation[d].times(w[2 + d].minus(one)))
            .plus(out_pad[d])
            .plus(one)
    };
    Some(vec![x[0], w[1].times(groups), size(0), size(1)])
}

/// A windowed pooling's output: the leading dims, then per spatial dim
/// `(in + 2 * pad - dilation * (k - 1) - 1) / stride + 1`. `ceil_mode` (whose last window is
/// dropped when it would start in the padding) gets no rule.
fn pool2d(args: &[SymArg], dilated: bool) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let ceil_at = if dilated { 5 } else { 4 };
    if x.len() < 3 || flag(args, ceil_at) != Some(false) {
        return None;
    }
    let pair = |i: usize, empty: Option<[SymExpr; 2]>| -> Option<[SymExpr; 2]> {
        match (ints(args, i)?, empty) {
            ([], Some(e)) => Some(e),
            ([a], _) => Some([*a, *a]),
            ([a, b], _) => Some([*a, *b]),
            _ => None,
        }
    };
    let zero = SymExpr::lit(0);
    let one = SymExpr::lit(1);
    let k = pair(1, None)?;
    let s = pair(2, Some(k))?;
    let p = pair(3, Some([zero, zero]))?;
    let d = if dilated {
        pair(4, Some([one, one]))?
    } else {
        [one, one]
    };
    let r = x.len();
    let mut out = x[..r - 2].to_vec();
    for i in 0..2 {
        let span = d[i].times(k[i].minus(one)).plus(one);
        out.push(
            x[r - 2 + i]
                .plus(p[i].times(SymExpr::lit(2)))
                .minus(span)
                .floor_div(s[i])
                .plus(one),
        );
    }
    Some(out)
}

fn dim_index(d: SymExpr, rank: usize) -> Option<usize> {
    let d = d.as_lit()?;
    let r = rank as i64;
    let d = if d < 0 { d + r } else { d };
    (0..r).contains(&d).then_some(d as usize)
}

/// The symbolic output shapes of `op` called with `args` (`None`: no rule, or a tensor argument
/// without a symbolic shape).
pub fn sym_meta(
    op: &'static OpDef,
    args: &[SymArg],
    ctx: &mut SymCtx,
) -> Option<Vec<Vec<SymExpr>>> {
    let is = |others: &[&'static OpDef]| others.iter().any(|o| std::ptr::eq(op, *o));
    if args.iter().any(|a| matches!(a, SymArg::UnknownTensor)) {
        return None;
    }
    if op.class == OpClass::Elementwise {
        return Some(vec![elementwise(args, ctx)?]);
    }
    if is(&[
        &CUMSUM,
        &CUMPROD,
        &FLIP,
        &SCATTER,
        &SCATTER_ADD,
        &SCATTER_REDUCE,
    ]) {
        return Some(vec![tensor(args, 0)?.to_vec()]);
    }
    if is(&[&SORT]) {
        let x = tensor(args, 0)?.to_vec();
        return Some(vec![x.clone(), x]);
    }
    if is(&[&GATHER]) {
        return Some(vec![tensor(args, 2)?.to_vec()]);
    }
    if is(&[&VIEW]) {
        return Some(vec![view(args)?]);
    }
    if is(&[&EXPAND]) {
        return Some(vec![expand(args)?]);
    }
    if is(&[&PERMUTE]) {
        return Some(vec![permute(args)?]);
    }
    if is(&[&SUM, &MEAN, &PROD, &AMAX, &AMIN, &VAR, &STD]) {
        // var/std take `correction` before `keepdim`.
        let keepdim_at = if is(&[&VAR, &STD]) { 3 } else { 2 };
        return Some(vec![reduction(args, keepdim_at)?]);
    }
    if is(&[&MAX, &MIN]) {
        tensor(args, 0)?;
        return Some(vec![Vec::new()]);
    }
    if is(&[&MAX_DIM, &MIN_DIM, &ARGMAX, &ARGMIN]) {
        let out = one_dim_reduction(args)?;
        let n = if is(&[&MAX_DIM, &MIN_DIM]) { 2 } else { 1 };
        return Some(vec![out; n]);
    }
    if is(&[&SOFTMAX, &LOG_SOFTMAX]) {
        return Some(vec![tensor(args, 0)?.to_vec()]);
    }
    if is(&[&FUSED_ATTENTION, &FUSED_ATTENTION_BACKWARD]) {
        return attention(args, is(&[&FUSED_ATTENTION]));
    }
    if is(&[&CONV2D]) {
        return Some(vec![conv2d(args)?]);
    }
    if is(&[&CONV2D_BACKWARD]) {
        let (x, w) = (tensor(args, 1)?, tensor(args, 2)?);
        return Some(vec![x.to_vec(), w.to_vec(), vec![*w.first()?]]);
    }
    if is(&[&CONV_TRANSPOSE2D]) {
        return Some(vec![conv_transpose2d(args, false)?]);
    }
    if is(&[&CONV_TRANSPOSE2D_BACKWARD]) {
        let (x, w) = (tensor(args, 1)?, tensor(args, 2)?);
        let out = conv_transpose2d(args, true)?;
        return Some(vec![x.to_vec(), w.to_vec(), vec![out[1]]]);
    }
    if is(&[&MAX_POOL2D_WITH_INDICES]) {
        let out = pool2d(args, true)?;
        return Some(vec![out.clone(), out]);
    }
    if is(&[&AVG_POOL2D]) {
        return Some(vec![pool2d(args, false)?]);
    }
    if is(&[&ADAPTIVE_AVG_POOL2D]) {
        let x = tensor(args, 0)?;
        let size = match ints(args, 1)? {
            [a] => [*a, *a],
            [a, b] => [*a, *b],
            _ => return None,
        };
        let mut out = x.get(..x.len().checked_sub(2)?)?.to_vec();
        out.extend(size);
        return Some(vec![out]);
    }
    if is(&[
        &MAX_POOL2D_WITH_INDICES_BACKWARD,
        &AVG_POOL2D_BACKWARD,
        &ADAPTIVE_AVG_POOL2D_BACKWARD,
    ]) {
        return Some(vec![tensor(args, 1)?.to_vec()]);
    }
    if is(&[&MATMUL]) {
        let (a, b) = (tensor(args, 0)?.to_vec(), tensor(args, 1)?.to_vec());
        return Some(vec![ctx.matmul(&a, &b)?]);
    }
    if is(&[&CAT, &STACK]) {
        return Some(vec![join(args, ctx, is(&[&CAT]))?]);
    }
    if is(&[&DIAGONAL]) {
        return Some(vec![diagonal(args)?]);
    }
    if is(&[&SLICE]) {
        return Some(vec![slice(args, ctx)?]);
    }
    None
}

/// An elementwise op's result: every tensor argument broadcast together.
fn elementwise(args: &[SymArg], ctx: &mut SymCtx) -> Option<Vec<SymExpr>> {
    let mut out: Vec<SymExpr> = Vec::new();
    for a in args {
        if let SymArg::Tensor(s) = a {
            out = ctx.broadcast(&out, s)?;
        }
    }
    Some(out)
}

/// `view`'s result: its size list, unless a size is inferred (`-1`).
fn view(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let size = ints(args, 1)?;
    if size.iter().any(|e| e.as_lit() == Some(-1)) {
        return None;
    }
    Some(size.to_vec())
}

/// `expand`'s result: its size list, a `-1` keeping the input's size there.
fn expand(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let size = ints(args, 1)?;
    let lead = size.len().checked_sub(x.len())?;
    size.iter()
        .enumerate()
        .map(|(i, &e)| match e.as_lit() {
            Some(-1) => i.checked_sub(lead).map(|j| x[j]),
            _ => Some(e),
        })
        .collect()
}

/// `permute`'s result: the input's sizes in the order of its dims argument.
fn permute(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let dims = ints(args, 1)?;
    dims.iter()
        .map(|&d| dim_index(d, x.len()).map(|j| x[j]))
        .collect()
}

/// The result of a reduction over a dims argument (`dim` at 1, `keepdim` at `keepdim_at`).
fn reduction(args: &[SymArg], keepdim_at: usize) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let keepdim = flag(args, keepdim_at)?;
    let dims = reduce_dims(args, 1)?;
    reduced(x, dims.as_deref(), keepdim)
}

/// The result of a reduction over one optional dim (`max_dim`, `argmax`...).
fn one_dim_reduction(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let dims = reduce_dims(args, 1)?;
    let keepdim = flag(args, 2)?;
    // argmax without a dim reduces the flattened tensor: a 0-d result (its keepdim form
    // has every dim 1, which `reduced` also gives).
    reduced(x, dims.as_deref(), keepdim)
}

/// `cat`'s (or, unless `is_cat`, `stack`'s) result.
fn join(args: &[SymArg], ctx: &mut SymCtx, is_cat: bool) -> Option<Vec<SymExpr>> {
    let SymArg::Tensors(xs) = args.first()? else {
        return None;
    };
    let dim = match args.get(1) {
        None => SymExpr::lit(0),
        Some(_) => int(args, 1)?,
    };
    if is_cat {
        ctx.cat(xs, dim)
    } else {
        ctx.stack(xs, dim)
    }
}

/// `diagonal`'s result: the other dims, then the diagonal's length.
fn diagonal(args: &[SymArg]) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let arg = |i: usize, default: i64| match args.get(i) {
        None => Some(default),
        Some(_) => int(args, i)?.as_lit(),
    };
    let (offset, d1, d2) = (arg(1, 0)?, arg(2, 0)?, arg(3, 1)?);
    let (d1, d2) = (
        dim_index(SymExpr::lit(d1), x.len())?,
        dim_index(SymExpr::lit(d2), x.len())?,
    );
    if d1 == d2 {
        return None;
    }
    // Above the main diagonal the columns shrink by `offset`, below it the rows.
    let (rows, cols) = (x[d1], x[d2]);
    let len = if offset >= 0 {
        rows.min(cols.minus(SymExpr::lit(offset)))
    } else {
        rows.plus(SymExpr::lit(offset)).min(cols)
    }
    .max(SymExpr::lit(0));
    let mut out: Vec<SymExpr> = (0..x.len())
        .filter(|&i| i != d1 && i != d2)
        .map(|i| x[i])
        .collect();
    out.push(len);
    Some(out)
}

/// `slice`'s result: the sliced dim's length from Python bounds and a positive step.
fn slice(args: &[SymArg], ctx: &mut SymCtx) -> Option<Vec<SymExpr>> {
    let x = tensor(args, 0)?;
    let dim = match args.get(1) {
        None => 0,
        Some(_) => dim_index(int(args, 1)?, x.len())?,
    };
    let size = x[dim];
    let step = match args.get(4) {
        None => SymExpr::lit(1),
        Some(_) => int(args, 4)?,
    };
    if step.as_lit().is_none_or(|s| s < 1) {
        return None;
    }
    let start = slice_bound(args, 2, SymExpr::lit(0), size, ctx)?;
    let end = slice_bound(args, 3, size, size, ctx)?.max(start);
    let len = end
        .minus(start)
        .plus(step)
        .minus(SymExpr::lit(1))
        .floor_div(step);
    let mut out = x.to_vec();
    out[dim] = len;
    Some(out)
}

/// A Python bound of `slice` (argument `i`, `default` when absent or `None`): a negative bound
/// counts from the end; both clamp to `[0, size]`.
fn slice_bound(
    args: &[SymArg],
    i: usize,
    default: SymExpr,
    size: SymExpr,
    ctx: &mut SymCtx,
) -> Option<SymExpr> {
    let e = match args.get(i) {
        None | Some(SymArg::Other) => return Some(default),
        Some(_) => int(args, i)?,
    };
    let e = if ctx.decide(e, SymCmp::Lt, 0)? {
        e.plus(size)
    } else {
        e
    };
    Some(e.max(SymExpr::lit(0)).min(size))
}
