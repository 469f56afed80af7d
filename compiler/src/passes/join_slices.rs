//! Joining slice gradients: a sum of `slice_backward`s whose windows tile a dim becomes one
//! `cat`.
//!
//! The backward of `chunk`/`split`/`narrow` gives each piece's gradient as a `slice_backward`
//! (zeros of the input's size with the piece written into its window), and autograd sums them.
//! For a fused `qkv` projection that is three zero-filled copies of the whole gradient and two
//! adds; when the windows are disjoint and cover the dim (step 1, literal bounds), the sum *is*
//! the concatenation of the pieces in window order, which [`join_slices`] writes as one
//! `tp::cat` — one pass over the memory instead of five. The pieces must have the sum's dtype
//! and each `slice_backward` and inner add must have no other user; anything else is left as
//! captured.

use tensorplay_ir::graph::{Arg, Attr, Edge, Graph, Node, NodeId, NodeKind, OpCall, ValueRef};
use tensorplay_ir::{OpClass, OpId, Result};

/// One `slice_backward` term of a sum: its gradient operand and window `[start, end)`.
struct Term {
    grad: ValueRef,
    start: i64,
    end: i64,
}

/// The literal attribute at argument position `at` of `call`.
fn attr(call: &OpCall, at: usize) -> Option<&Attr> {
    match call.args.get(at)? {
        Arg::Attr { value, .. } => Some(value),
        _ => None,
    }
}

/// The window of a `slice_backward` node with literal, non-negative bounds and step 1:
/// `(input_sizes, dim, start, end)` with `dim` normalised and `end` clamped.
fn window(call: &OpCall) -> Option<(Vec<i64>, usize, i64, i64)> {
    let Some(Attr::IntList(sizes)) = attr(call, 1) else {
        return None;
    };
    let Some(&Attr::Int(dim)) = attr(call, 2) else {
        return None;
    };
    let rank = sizes.len() as i64;
    let dim = if dim < 0 { dim + rank } else { dim };
    if !(0..rank).contains(&dim) {
        return None;
    }
    let size = sizes[dim as usize];
    let bound = |at: usize, default: i64| match attr(call, at) {
        None | Some(Attr::None) => Some(default),
        Some(&Attr::Int(v)) if v >= 0 => Some(v.min(size)),
        _ => None,
    };
    let (start, end) = (bound(3, 0)?, bound(4, size)?);
    match attr(call, 5) {
        Some(&Attr::Int(1)) => Some((sizes.clone(), dim as usize, start, end)),
        _ => None,
    }
}

/// The op call of node `id`, when it is an op node.
fn call_of(g: &Graph, id: NodeId) -> Option<&OpCall> {
    match &g.node(id)?.kind {
        NodeKind::Op(call) => Some(call),
        _ => None,
    }
}

/// True for a plain `tp::add(a, b)` (no `alpha` other than 1).
fn is_plain_add(call: &OpCall) -> bool {
    call.op == OpId::of("tp::add")
        && call.args.len() >= 2
        && matches!(call.args[..2], [Arg::Tensor, Arg::Tensor])
        && call.args[2..].iter().all(|a| match a {
            Arg::Attr { value, .. } => matches!(value, Attr::Int(1) | Attr::Float(1.0)),
            _ => false,
        })
}

/// The tensor operands of `id` in slot order.
fn operands(g: &Graph, id: NodeId) -> Option<Vec<ValueRef>> {
    g.args_of(id).ok()
}

/// Collects the `slice_backward` terms of the sum rooted at value `v` (through plain adds that
/// only the sum uses), with the key `(input_sizes, dim)` they must share. `None` when some leaf
/// of the sum is anything else.
fn terms(
    g: &Graph,
    v: ValueRef,
    root: bool,
    key: &mut Option<(Vec<i64>, usize)>,
) -> Option<Vec<Term>> {
    let call = call_of(g, v.node)?;
    if !root && g.value_users(v).len() != 1 {
        return None;
    }
    let dtype = g.meta(v)?.dtype;
    if is_plain_add(call) {
        let mut all = Vec::new();
        for x in operands(g, v.node)? {
            if g.meta(x)?.dtype != dtype {
                return None;
            }
            all.extend(terms(g, x, false, key)?);
        }
        return Some(all);
    }
    if call.op != OpId::of("tp::slice_backward") || root {
        return None;
    }
    let (sizes, dim, start, end) = window(call)?;
    match key {
        None => *key = Some((sizes, dim)),
        Some(k) if *k == (sizes, dim) => {}
        Some(_) => return None,
    }
    let grad = *operands(g, v.node)?.first()?;
    (g.meta(grad)?.dtype == dtype).then(|| vec![Term { grad, start, end }])
}

/// Rewrites every sum of `slice_backward`s that tiles its dim into a `tp::cat` of the pieces
/// (see the module docs); returns how many sums were joined. The replaced nodes stay in the
/// graph without users (dead code elimination drops them).
pub fn join_slices(g: &mut Graph) -> Result<usize> {
    let mut joined = 0;
    for id in g.topo_order()? {
        let Some(call) = call_of(g, id) else { continue };
        if !is_plain_add(call) {
            continue;
        }
        let root = ValueRef::new(id, 0);
        // The outermost add of a sum: not itself a term of a bigger one.
        let users = g.value_users(root);
        let inner = users.len() == 1 && call_of(g, users[0]).is_some_and(is_plain_add);
        if inner {
            continue;
        }
        let mut key = None;
        let Some(mut parts) = terms(g, root, true, &mut key) else {
            continue;
        };
        let Some((sizes, dim)) = key else { continue };
        parts.sort_by_key(|t| t.start);
        let tiles = parts.first().is_some_and(|t| t.start == 0)
            && parts
                .windows(2)
                .all(|w| w[0].end == w[1].start && w[0].start < w[0].end)
            && parts
                .last()
                .is_some_and(|t| t.end == sizes[dim] && t.start < t.end);
        if !tiles || parts.len() < 2 {
            continue;
        }
        let Some(meta) = g.meta(root).cloned() else {
            continue;
        };
        let cat = OpCall::new(
            "tp::cat",
            OpClass::Opaque,
            vec![
                Arg::TensorList { len: parts.len() },
                Arg::named("dim", Attr::Int(dim as i64)),
            ],
        );
        let node = g.add_node(Node::new(NodeKind::Op(cat), vec![meta]));
        for (item, t) in parts.iter().enumerate() {
            let edge = Edge::Data {
                arg: 0,
                item,
                src_output: t.grad.output,
            };
            g.add_edge(t.grad.node, node, edge)?;
        }
        g.replace_uses(root, ValueRef::new(node, 0))?;
        joined += 1;
    }
    Ok(joined)
}

/// A copy of `g` with its slice-gradient sums joined, or `None` when it has none to join (the
/// common case costs one scan of the nodes and no copy).
pub fn rewritten(g: &Graph) -> Result<Option<Graph>> {
    let slice_backward = OpId::of("tp::slice_backward");
    let any = g
        .node_ids()
        .into_iter()
        .any(|id| call_of(g, id).is_some_and(|c| c.op == slice_backward));
    if !any {
        return Ok(None);
    }
    let mut out = g.clone();
    Ok((join_slices(&mut out)? > 0).then_some(out))
}
