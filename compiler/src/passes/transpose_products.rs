//! Transposed products: `permute(matmul(a, b), [1, 0])` of 2-D operands becomes
//! `matmul(permute(b, [1, 0]), permute(a, [1, 0]))`, since `(a b)ᵀ = bᵀ aᵀ`.
//!
//! The backward of a linear layer `x @ wᵀ` gives the weight's gradient as the transpose of the
//! product `xᵀ @ dy`: a view whose rows are `1` apart. Handed to a leaf's `.grad` (or to anything
//! that needs rows), it is copied into a contiguous tensor element by element, a strided pass
//! over the whole weight. Swapping the operands makes the product itself write the gradient in
//! row order; the operand transposes are views the GEMM reads with their strides, so the
//! rewrite costs nothing.
//!
//! The rewrite keeps the schedule: one operand must itself be a transpose (as `xᵀ` is), so its
//! transpose is its input and only the other operand needs a new view. The product's node
//! becomes that view and the transpose's node becomes the product, so both run exactly where
//! the captured product and transpose ran (the executor orders ready nodes by id; new nodes
//! would run late and keep their operands alive). Only products whose sole user is the
//! transpose are rewritten (their value is then needed nowhere else), and only when neither
//! node carries an order edge (mutation ordering) — anything else is left as captured.

use tensorplay_ir::graph::{Arg, Attr, Edge, Graph, Node, NodeId, NodeKind, OpCall, ValueRef};
use tensorplay_ir::{CompileKind, Error, OpId, Result, TensorMeta};

/// The op call of node `id`, when it is an op node.
fn call_of(g: &Graph, id: NodeId) -> Option<&OpCall> {
    g.node(id).and_then(Node::as_op)
}

/// True for `tp::permute(x, dims=[1, 0])`.
fn is_transpose(call: &OpCall) -> bool {
    call.op == OpId::of("tp::permute")
        && matches!(call.args.as_slice(), [Arg::Tensor, Arg::Attr { value: Attr::IntList(d), .. }]
            if d.as_slice() == [1, 0])
}

/// True when every edge into and out of `id` is a data edge.
fn data_only(g: &Graph, id: NodeId) -> bool {
    g.in_edges(id)
        .into_iter()
        .chain(g.out_edges(id))
        .all(|(_, e)| e.is_data())
}

/// `meta` with its two dims swapped (`None` unless it is 2-D).
fn swapped(meta: &TensorMeta) -> Option<TensorMeta> {
    if meta.shape.len() != 2 {
        return None;
    }
    let mut t = meta.clone();
    t.shape = [meta.shape[1], meta.shape[0]].into_iter().collect();
    Some(t)
}

/// The input of `v` when `v` is a transpose (`permute(x, [1, 0])`).
fn transposed_input(g: &Graph, v: ValueRef) -> Option<ValueRef> {
    call_of(g, v.node).filter(|c| is_transpose(c))?;
    g.args_of(v.node).ok()?.first().copied()
}

/// A rewritable transposed product.
struct Pattern {
    /// The product and its transpose.
    product: NodeId,
    transpose: NodeId,
    /// The operand that needs a new transpose view, its position in the rewritten product,
    /// and the operand that is already available transposed (the input of its transpose).
    to_transpose: ValueRef,
    position: usize,
    transposed: ValueRef,
}

/// The pattern rooted at the product `id`, if it is one (see the module docs).
fn pattern(g: &Graph, id: NodeId) -> Option<Pattern> {
    let call = call_of(g, id)?;
    if call.op != OpId::of("tp::matmul")
        || !matches!(call.args.as_slice(), [Arg::Tensor, Arg::Tensor])
        || g.node(id)?.outputs.len() != 1
        || !data_only(g, id)
    {
        return None;
    }
    let users = g.value_users(ValueRef::new(id, 0));
    let [user] = users.as_slice() else {
        return None;
    };
    if !call_of(g, *user).is_some_and(is_transpose) || !data_only(g, *user) {
        return None;
    }
    // The product's only edge out is the one into its transpose.
    if g.out_edges(id).len() != 1 {
        return None;
    }
    let [a, b] = g.args_of(id).ok()?[..] else {
        return None;
    };
    let two_d = |v: ValueRef| g.meta(v).is_some_and(|m| m.shape.len() == 2);
    if !(two_d(a) && two_d(b)) {
        return None;
    }
    // (a b)ᵀ = bᵀ aᵀ: bᵀ is argument 0, aᵀ argument 1.
    let (to_transpose, position, transposed) =
        match (transposed_input(g, a), transposed_input(g, b)) {
            (Some(x), _) => (b, 0, x),
            (None, Some(y)) => (a, 1, y),
            (None, None) => return None,
        };
    Some(Pattern {
        product: id,
        transpose: *user,
        to_transpose,
        position,
        transposed,
    })
}

/// Rewrites one pattern in place: the product's node becomes the new transpose view and the
/// transpose's node the swapped product.
fn rewrite(g: &mut Graph, p: &Pattern) -> Result<bool> {
    let (Some(product), Some(transpose)) = (
        call_of(g, p.product).cloned(),
        call_of(g, p.transpose).cloned(),
    ) else {
        return Ok(false);
    };
    let Some(view_meta) = g.meta(p.to_transpose).and_then(swapped) else {
        return Ok(false);
    };
    let data = |arg: usize, src_output: usize| Edge::Data {
        arg,
        item: 0,
        src_output,
    };
    for (src, e) in g.in_edges(p.product) {
        g.remove_edge(src, p.product, e);
    }
    g.remove_edge(p.product, p.transpose, data(0, 0));
    let out_meta = g.meta(ValueRef::new(p.transpose, 0)).cloned();
    for (id, node) in [
        (
            p.product,
            Node::new(NodeKind::Op(transpose), vec![view_meta]),
        ),
        (
            p.transpose,
            Node::new(NodeKind::Op(product), out_meta.into_iter().collect()),
        ),
    ] {
        let slot = g.node_mut(id).ok_or_else(|| {
            Error::compile(
                CompileKind::Graph,
                format!("transpose_products: node {id} vanished during its rewrite"),
            )
        })?;
        *slot = node;
    }
    g.add_edge(
        p.to_transpose.node,
        p.product,
        data(0, p.to_transpose.output),
    )?;
    g.add_edge(p.product, p.transpose, data(p.position, 0))?;
    let other = 1 - p.position;
    g.add_edge(
        p.transposed.node,
        p.transpose,
        data(other, p.transposed.output),
    )?;
    Ok(true)
}

/// Rewrites every transposed 2-D product with one operand already transposed as the product of
/// the transposed operands in swapped order (see the module docs); returns how many were
/// rewritten. A transpose that only the product read stays in the graph without users (dead
/// code elimination drops it).
pub fn transpose_products(g: &mut Graph) -> Result<usize> {
    let mut rewritten = 0;
    for id in g.topo_order()? {
        let Some(p) = pattern(g, id) else { continue };
        if rewrite(g, &p)? {
            rewritten += 1;
        }
    }
    Ok(rewritten)
}

/// A copy of `g` with its transposed products rewritten, or `None` when it has none (the
/// common case costs one scan of the nodes and no copy).
pub fn rewritten(g: &Graph) -> Result<Option<Graph>> {
    let any = g.node_ids().into_iter().any(|id| pattern(g, id).is_some());
    if !any {
        return Ok(None);
    }
    let mut out = g.clone();
    Ok((transpose_products(&mut out)? > 0).then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorplay_ir::graph::{BuilderArg, GraphBuilder};
    use tensorplay_ir::{DType, Device, OpClass};

    fn meta(shape: &[usize]) -> TensorMeta {
        TensorMeta::new(shape, DType::F32, Device::Cpu)
    }

    fn transpose(b: &mut GraphBuilder, x: ValueRef, out: &[usize]) -> Result<ValueRef> {
        let t = b.op(
            "tp::permute",
            OpClass::View,
            vec![x.into(), BuilderArg::named("dims", vec![1i64, 0])],
            vec![meta(out)],
        )?;
        Ok(t[0])
    }

    /// `matmul(a, b)` with output shape `out`.
    fn product(b: &mut GraphBuilder, x: ValueRef, y: ValueRef, out: &[usize]) -> Result<ValueRef> {
        let p = b.op(
            "tp::matmul",
            OpClass::Opaque,
            vec![x.into(), y.into()],
            vec![meta(out)],
        )?;
        Ok(p[0])
    }

    /// `permute(matmul(permute(x [3, 4]), w [3, 5]), [1, 0])` (a linear layer's weight
    /// gradient), plus `extra_user` reading the product.
    fn graph(extra_user: bool) -> Result<Graph> {
        let mut b = GraphBuilder::new();
        let x = b.input("x", meta(&[3, 4]));
        let w = b.input("w", meta(&[3, 5]));
        let xt = transpose(&mut b, x, &[4, 3])?;
        let p = product(&mut b, xt, w, &[4, 5])?;
        let t = transpose(&mut b, p, &[5, 4])?;
        let mut outs = vec![t];
        if extra_user {
            let n = b.op(
                "tp::neg",
                OpClass::Elementwise,
                vec![p.into()],
                vec![meta(&[4, 5])],
            )?;
            outs.extend(n);
        }
        b.output(&outs)?;
        b.finish()
    }

    #[test]
    fn a_transposed_product_becomes_the_product_of_transposes_in_place() -> Result<()> {
        let g = graph(false)?;
        let out = rewritten(&g)?.expect("one product to rewrite");
        out.validate()?;
        let root = out.outputs()?[0];
        // The product now sits in the transpose's node, the new view in the product's.
        assert_eq!(root, g.outputs()?[0]);
        let call = call_of(&out, root.node).expect("an op");
        assert_eq!(call.op, OpId::of("tp::matmul"));
        let shape: Vec<String> = out
            .meta(root)
            .unwrap()
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert_eq!(shape, ["5", "4"]);
        let [wt, x] = out.args_of(root.node)?[..] else {
            panic!("two operands");
        };
        let inputs = g.inputs();
        assert_eq!(x, inputs[0]);
        assert!(is_transpose(call_of(&out, wt.node).expect("a transpose")));
        assert_eq!(out.args_of(wt.node)?, vec![inputs[1]]);
        let order = out.topo_order()?;
        let at = |id: NodeId| order.iter().position(|&n| n == id).unwrap();
        assert!(at(wt.node) < at(root.node));
        Ok(())
    }

    #[test]
    fn a_product_of_two_untransposed_operands_is_left_alone() -> Result<()> {
        let mut b = GraphBuilder::new();
        let x = b.input("x", meta(&[4, 3]));
        let w = b.input("w", meta(&[3, 5]));
        let p = product(&mut b, x, w, &[4, 5])?;
        let t = transpose(&mut b, p, &[5, 4])?;
        b.output(&[t])?;
        assert!(rewritten(&b.finish()?)?.is_none());
        Ok(())
    }

    #[test]
    fn a_product_with_other_users_is_left_alone() -> Result<()> {
        assert!(rewritten(&graph(true)?)?.is_none());
        Ok(())
    }
}
