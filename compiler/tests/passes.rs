//! Graph passes: DCE, fusion partition, buffer planning and their printed forms.
//!
//! Every canonical graph's plan is snapshotted (`explain`) and checked against the structural
//! invariants a plan must satisfy (each op node in exactly one step, every edge running forward
//! in step order or inside one region, region outputs at the iteration shape, ...).

use std::collections::BTreeMap;

use tensorplay_compiler::passes::buffer_plan;
use tensorplay_compiler::passes::dce::dce;
use tensorplay_compiler::passes::fusion::{FusionPlan, NodeStepKind, Step, partition};
use tensorplay_compiler::passes::logging::{parse, stage_in};
use tensorplay_compiler::passes::region::RegionKind;
use tensorplay_ir::graph::{Attr, BuilderArg, Constant, Graph, GraphBuilder, Node};
use tensorplay_ir::{DType, Device, Dim, NodeId, OpClass, ReduceOp, Result, TensorMeta, ValueRef};

const N: Dim = Dim::Sym(0);

fn d(n: usize) -> Dim {
    Dim::Static(n)
}

fn f32m(dims: &[Dim]) -> TensorMeta {
    TensorMeta {
        shape: dims.iter().copied().collect(),
        dtype: DType::F32,
        device: Device::Cpu,
    }
}

fn shape_of(b: &GraphBuilder, v: ValueRef) -> Vec<Dim> {
    b.graph().meta(v).unwrap().shape.to_vec()
}

/// Broadcast of two symbolic shapes, as the meta rules compute it.
fn bcast(a: &[Dim], b: &[Dim]) -> Vec<Dim> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                d(1)
            };
            let y = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                d(1)
            };
            if x == d(1) { y } else { x }
        })
        .collect()
}

fn unary(b: &mut GraphBuilder, op: &str, x: ValueRef) -> ValueRef {
    let m = f32m(&shape_of(b, x));
    b.op(op, OpClass::Elementwise, vec![x.into()], vec![m])
        .unwrap()[0]
}

fn binary(b: &mut GraphBuilder, op: &str, x: ValueRef, y: ValueRef) -> ValueRef {
    let m = f32m(&bcast(&shape_of(b, x), &shape_of(b, y)));
    b.op(op, OpClass::Elementwise, vec![x.into(), y.into()], vec![m])
        .unwrap()[0]
}

fn scalar(b: &mut GraphBuilder, value: f64) -> ValueRef {
    b.constant(
        Constant::Float {
            value,
            dtype: DType::F64,
        },
        Device::Cpu,
    )
    .unwrap()
}

/// `tp::<op>(x, dim=[...], keepdim=...)` as the runtime records `sum(Tensor self, int[]? dim=None,
/// bool keepdim=False)`.
fn reduce(b: &mut GraphBuilder, op: &str, x: ValueRef, dims: &[i64], keepdim: bool) -> ValueRef {
    let shape = shape_of(b, x);
    let rank = shape.len() as i64;
    let norm: Vec<usize> = dims.iter().map(|&i| ((i + rank) % rank) as usize).collect();
    let out: Vec<Dim> = shape
        .iter()
        .enumerate()
        .filter_map(|(i, &s)| match (norm.contains(&i), keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(d(1)),
            (true, false) => None,
        })
        .collect();
    b.op(
        op,
        OpClass::Reduction,
        vec![
            x.into(),
            BuilderArg::named("dim", dims.to_vec()),
            BuilderArg::named("keepdim", keepdim),
        ],
        vec![f32m(&out)],
    )
    .unwrap()[0]
}

fn softmax(b: &mut GraphBuilder, op: &str, x: ValueRef, dim: i64) -> ValueRef {
    let m = f32m(&shape_of(b, x));
    b.op(
        op,
        OpClass::Reduction,
        vec![x.into(), BuilderArg::named("dim", dim)],
        vec![m],
    )
    .unwrap()[0]
}

fn permute(b: &mut GraphBuilder, x: ValueRef, dims: &[i64]) -> ValueRef {
    let s = shape_of(b, x);
    let out: Vec<Dim> = dims.iter().map(|&i| s[i as usize]).collect();
    b.op(
        "tp::permute",
        OpClass::View,
        vec![x.into(), BuilderArg::named("dims", dims.to_vec())],
        vec![f32m(&out)],
    )
    .unwrap()[0]
}

fn opaque(
    b: &mut GraphBuilder,
    op: &str,
    args: Vec<ValueRef>,
    out: &[Dim],
    reason: Option<&str>,
) -> ValueRef {
    let v = b
        .op(
            op,
            OpClass::Opaque,
            args.into_iter().map(BuilderArg::from).collect(),
            vec![f32m(out)],
        )
        .unwrap()[0];
    if let Some(r) = reason {
        b.set_barrier_reason(v.node, r).unwrap();
    }
    v
}

/// Checks what every plan must satisfy, whatever the graph.
fn check_plan(g: &Graph, plan: &FusionPlan) {
    // Each op node in exactly one step; node steps have reasons; regions are numbered densely.
    let mut step_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut region_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, r) in plan.regions.iter().enumerate() {
        assert_eq!(r.id, i);
        assert!(!r.nodes.is_empty());
        assert!(!r.outputs.is_empty(), "region {i} has no outputs");
    }
    for (k, step) in plan.steps.iter().enumerate() {
        match *step {
            Step::Region(r) => {
                for &n in &plan.regions[r].nodes {
                    assert!(step_of.insert(n, k).is_none());
                    region_of.insert(n, r);
                }
            }
            Step::Node(n) => {
                assert!(step_of.insert(n, k).is_none());
                assert!(
                    plan.node_steps.contains_key(&n),
                    "node step without a reason"
                );
            }
        }
    }
    assert_eq!(
        plan.node_steps.len(),
        plan.steps
            .iter()
            .filter(|s| matches!(s, Step::Node(_)))
            .count()
    );
    for id in g.node_ids() {
        if g.node(id).unwrap().as_op().is_some() {
            assert!(
                step_of.contains_key(&id),
                "{} is in no step",
                g.describe(id)
            );
        }
    }
    // Every edge between op nodes runs forward, or stays inside one region (convexity and order).
    for (s, t, _) in g.edges() {
        if let (Some(&a), Some(&b)) = (step_of.get(&s), step_of.get(&t)) {
            assert!(
                a < b || (a == b && region_of.contains_key(&s)),
                "edge {} -> {} runs backwards (steps {a} -> {b})",
                g.describe(s),
                g.describe(t)
            );
        }
    }
    // Region inputs come from outside, outputs are exactly the values read outside; shapes fit.
    let outs = g.outputs().unwrap();
    for r in &plan.regions {
        let iter = r.iteration_shape(g).unwrap();
        for &v in &r.inputs {
            assert!(!r.contains(v.node));
        }
        for &n in &r.nodes {
            let v = ValueRef::from(n);
            let leaves = outs.contains(&v)
                || g.users(n).is_empty()
                || g.users(n).iter().any(|&u| !r.contains(u));
            assert_eq!(
                r.outputs.contains(&v),
                leaves,
                "output set of region {}",
                r.id
            );
            let s = &g.meta(v).unwrap().shape;
            assert!(s.len() <= iter.len());
        }
        match &r.kind {
            RegionKind::Pointwise => {
                for &v in &r.outputs {
                    assert_eq!(
                        g.meta(v).unwrap().shape,
                        iter,
                        "region {} output shape",
                        r.id
                    );
                }
            }
            RegionKind::Reduction { reduction, .. } => {
                assert_eq!(r.outputs, vec![ValueRef::from(*reduction)]);
            }
            RegionKind::Softmax { node, .. } => {
                assert_eq!(r.outputs, vec![ValueRef::from(*node)]);
            }
        }
    }
}

/// Partitions, checks, and returns the plan with its explanation.
fn explain(g: &Graph) -> (FusionPlan, String) {
    let plan = partition(g).unwrap();
    check_plan(g, &plan);
    // Deterministic: a second run gives the same plan.
    assert_eq!(partition(g).unwrap(), plan);
    let text = plan.explain(g);
    (plan, text)
}

fn snapshot_text(g: &Graph) -> (FusionPlan, String) {
    let (plan, text) = explain(g);
    (plan, format!("{g}\n{text}"))
}

#[test]
fn chain() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(1024)]));
    let y = b.input("y", f32m(&[N, d(1024)]));
    let two = scalar(&mut b, 2.0);
    let a = binary(&mut b, "tp::mul", x, two);
    let c = binary(&mut b, "tp::add", a, y);
    let r = unary(&mut b, "tp::relu", c);
    b.output(&[r])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    assert_eq!(plan.regions[0].inputs, vec![x, two, y]);
    assert_eq!(plan.regions[0].outputs, vec![r]);
    insta::assert_snapshot!("chain", text);
    Ok(())
}

#[test]
fn diamond() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(64)]));
    let a = unary(&mut b, "tp::exp", x);
    let s = unary(&mut b, "tp::sin", a);
    let c = unary(&mut b, "tp::cos", a);
    let o = binary(&mut b, "tp::add", s, c);
    b.output(&[o])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    assert_eq!(plan.regions[0].nodes.len(), 4);
    insta::assert_snapshot!("diamond", text);
    Ok(())
}

#[test]
fn broadcast_bias() -> Result<()> {
    // relu(x + bias * 2): the [1024] product lives inside the [s0, 1024] region (recomputed).
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(1024)]));
    let bias = b.input("bias", f32m(&[d(1024)]));
    let two = scalar(&mut b, 2.0);
    let scaled = binary(&mut b, "tp::mul", bias, two);
    let s = binary(&mut b, "tp::add", x, scaled);
    let r = unary(&mut b, "tp::relu", s);
    b.output(&[r])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    assert_eq!(
        plan.regions[0].iteration_shape(&g)?.to_vec(),
        vec![N, d(1024)]
    );
    insta::assert_snapshot!("broadcast_bias", text);
    Ok(())
}

#[test]
fn broadcast_value_needed_outside_splits() -> Result<()> {
    // The [1024] product is also a graph output: it gets a region of its own shape.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(1024)]));
    let bias = b.input("bias", f32m(&[d(1024)]));
    let two = scalar(&mut b, 2.0);
    let scaled = binary(&mut b, "tp::mul", bias, two);
    let s = binary(&mut b, "tp::add", x, scaled);
    let r = unary(&mut b, "tp::relu", s);
    b.output(&[r, scaled])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert_eq!(plan.regions[0].outputs, vec![scaled]);
    assert_eq!(plan.regions[1].inputs, vec![x, scaled]);
    insta::assert_snapshot!("broadcast_split", text);
    Ok(())
}

#[test]
fn weighted_sum_is_one_reduction_region() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(1024)]));
    let w = b.input("w", f32m(&[d(1024)]));
    let xw = binary(&mut b, "tp::mul", x, w);
    let s = reduce(&mut b, "tp::sum", xw, &[-1], false);
    b.output(&[s])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    let r = &plan.regions[0];
    assert_eq!(
        r.kind,
        RegionKind::Reduction {
            reduction: s.node,
            op: ReduceOp::Sum,
            dims: vec![1],
            keepdim: false
        }
    );
    assert_eq!(r.inputs, vec![x, w]);
    assert_eq!(r.outputs, vec![s]);
    insta::assert_snapshot!("weighted_sum", text);
    Ok(())
}

#[test]
fn reduction_epilogue_is_a_second_region() -> Result<()> {
    // x / x.sum(1, keepdim=True)
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(256)]));
    let s = reduce(&mut b, "tp::sum", x, &[1], true);
    let q = binary(&mut b, "tp::div", x, s);
    b.output(&[q])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert!(matches!(
        plan.regions[0].kind,
        RegionKind::Reduction { keepdim: true, .. }
    ));
    assert_eq!(plan.regions[1].kind, RegionKind::Pointwise);
    assert_eq!(plan.steps, vec![Step::Region(0), Step::Region(1)]);
    insta::assert_snapshot!("reduction_epilogue", text);
    Ok(())
}

#[test]
fn shared_prologue_is_materialized() -> Result<()> {
    // e = exp(x) feeds a sum and a graph output: e is a pointwise region, the sum reads it.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(8)]));
    let e = unary(&mut b, "tp::exp", x);
    let n = unary(&mut b, "tp::neg", e);
    let s = reduce(&mut b, "tp::mean", n, &[0, 1], false);
    b.output(&[s, e])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    assert_eq!(plan.regions.len(), 2);
    // neg, used only by the mean, is its prologue; exp is materialized once.
    assert_eq!(plan.regions[0].nodes, vec![e.node]);
    assert_eq!(plan.regions[1].nodes, vec![n.node, s.node]);
    assert!(
        matches!(&plan.regions[1].kind, RegionKind::Reduction { op: ReduceOp::Mean, dims, .. } if dims == &[0, 1])
    );
    Ok(())
}

#[test]
fn softmax_with_prologue() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(128)]));
    let scale = scalar(&mut b, 0.125);
    let t = binary(&mut b, "tp::mul", x, scale);
    let p = softmax(&mut b, "tp::softmax", t, -1);
    let lp = softmax(&mut b, "tp::log_softmax", x, 1);
    let col = softmax(&mut b, "tp::softmax", x, 0);
    b.output(&[p, lp, col])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert_eq!(
        plan.regions[0].kind,
        RegionKind::Softmax {
            node: p.node,
            log: false
        }
    );
    assert_eq!(plan.regions[0].nodes, vec![t.node, p.node]);
    assert_eq!(
        plan.regions[1].kind,
        RegionKind::Softmax {
            node: lp.node,
            log: true
        }
    );
    assert_eq!(
        plan.reason(col.node),
        Some("softmax over a non-last dim runs eagerly")
    );
    insta::assert_snapshot!("softmax", text);
    Ok(())
}

/// `a = exp(x); mylib::scale_(x, 2.0); b = x * a` — the write must separate the two reads of x.
fn mutation_graph() -> Result<(Graph, ValueRef, NodeId, ValueRef)> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(16)]));
    let a = unary(&mut b, "tp::exp", x);
    let w = b.op_node(
        "mylib::scale_",
        OpClass::Mutating,
        vec![x.into(), BuilderArg::named("alpha", 2.0)],
        vec![],
    )?;
    b.set_barrier_reason(w, "mutates x")?;
    b.order_after_readers(w, x)?;
    let c = binary(&mut b, "tp::mul", x, a);
    b.order(c.node, w)?;
    b.output(&[c])?;
    Ok((b.finish()?, a, w, c))
}

#[test]
fn mutation_barrier_in_the_middle() -> Result<()> {
    let (g, a, w, c) = mutation_graph()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(
        plan.steps,
        vec![Step::Region(0), Step::Node(w), Step::Region(1)]
    );
    assert_eq!(plan.regions[0].nodes, vec![a.node]);
    assert_eq!(plan.regions[1].nodes, vec![c.node]);
    assert_eq!(plan.node_steps[&w].kind, NodeStepKind::Barrier);
    assert_eq!(plan.reason(w), Some("mutates x"));
    insta::assert_snapshot!("mutation_barrier", text);
    Ok(())
}

#[test]
fn triton_op_between_two_chains() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(512)]));
    let y = b.input("y", f32m(&[N, d(512)]));
    let a = unary(&mut b, "tp::relu", x);
    let a2 = binary(&mut b, "tp::mul", a, y);
    let t = opaque(
        &mut b,
        "mylib::triton_add",
        vec![a2, y],
        &[N, d(512)],
        Some("triton op"),
    );
    let c = unary(&mut b, "tp::sigmoid", t);
    let c2 = binary(&mut b, "tp::add", c, x);
    b.output(&[c2])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(
        plan.steps,
        vec![Step::Region(0), Step::Node(t.node), Step::Region(1)]
    );
    insta::assert_snapshot!("triton_between_chains", text);
    Ok(())
}

#[test]
fn custom_op_traced_through_fuses() -> Result<()> {
    // mylib::fast_gelu traced through: its body's builtin ops are recorded and fuse with the
    // surrounding bias add: 0.5 * x * (1 + tanh(x)), here with x = inp + bias.
    let mut b = GraphBuilder::new();
    let inp = b.input("inp", f32m(&[N, d(3072)]));
    let bias = b.input("bias", f32m(&[d(3072)]));
    let x = binary(&mut b, "tp::add", inp, bias);
    let half = scalar(&mut b, 0.5);
    let one = scalar(&mut b, 1.0);
    let h = binary(&mut b, "tp::mul", x, half);
    let t = unary(&mut b, "tp::tanh", x);
    let t1 = binary(&mut b, "tp::add", t, one);
    let y = binary(&mut b, "tp::mul", h, t1);
    b.output(&[y])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    assert_eq!(plan.steps, vec![Step::Region(0)]);
    insta::assert_snapshot!("custom_traced", text);
    Ok(())
}

#[test]
fn custom_op_with_data_access_is_opaque() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(64)]));
    let a = unary(&mut b, "tp::abs", x);
    let q = opaque(
        &mut b,
        "mylib::quantize",
        vec![a],
        &[N, d(64)],
        Some("body reads data; runs opaque with its fake kernel"),
    );
    let r = unary(&mut b, "tp::neg", q);
    b.output(&[r])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert_eq!(
        plan.reason(q.node),
        Some("body reads data; runs opaque with its fake kernel")
    );
    insta::assert_snapshot!("custom_data_access", text);
    Ok(())
}

#[test]
fn matmul_between_elementwise_chains() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(256)]));
    let w = b.input("w", f32m(&[d(256), d(128)]));
    let bias = b.input("bias", f32m(&[d(128)]));
    let xs = unary(&mut b, "tp::silu", x);
    let mm = b.op(
        "tp::matmul",
        OpClass::Opaque,
        vec![xs.into(), w.into()],
        vec![f32m(&[N, d(128)])],
    )?[0];
    let y = binary(&mut b, "tp::add", mm, bias);
    let r = unary(&mut b, "tp::relu", y);
    b.output(&[r])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(
        plan.steps,
        vec![Step::Region(0), Step::Node(mm.node), Step::Region(1)]
    );
    assert_eq!(plan.reason(mm.node), Some("opaque op tp::matmul"));
    insta::assert_snapshot!("matmul_between_chains", text);
    Ok(())
}

#[test]
fn views_of_inputs_are_folded() -> Result<()> {
    // x.permute(1, 0) + y: the permute is a free step; the region loads through it.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(64), N]));
    let y = b.input("y", f32m(&[N, d(64)]));
    let xt = permute(&mut b, x, &[1, 0]);
    let s = binary(&mut b, "tp::add", xt, y);
    let e = unary(&mut b, "tp::exp", s);
    b.output(&[e])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.steps, vec![Step::Node(xt.node), Step::Region(0)]);
    assert_eq!(plan.node_steps[&xt.node].kind, NodeStepKind::View);
    assert_eq!(plan.regions[0].inputs, vec![xt, y]);
    insta::assert_snapshot!("views_of_inputs", text);
    Ok(())
}

#[test]
fn view_of_intermediate_forces_split() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(32), d(16)]));
    let a = unary(&mut b, "tp::exp", x);
    let a2 = binary(&mut b, "tp::add", a, x);
    let v = b.op(
        "tp::view",
        OpClass::View,
        vec![a.into(), BuilderArg::named("size", vec![512i64])],
        vec![f32m(&[d(512)])],
    )?[0];
    let n = unary(&mut b, "tp::neg", v);
    b.output(&[a2, n])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert_eq!(plan.regions[0].nodes, vec![a.node, a2.node]);
    assert_eq!(plan.regions[0].outputs, vec![a, a2]);
    assert_eq!(plan.node_steps[&v.node].kind, NodeStepKind::Barrier);
    assert_eq!(plan.regions[1].inputs, vec![v]);
    insta::assert_snapshot!("view_of_intermediate", text);
    Ok(())
}

#[test]
fn unused_branch_removed_by_dce() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N, d(32)]));
    let unused = b.input("unused", f32m(&[d(4)]));
    let a = unary(&mut b, "tp::exp", x);
    let dead1 = unary(&mut b, "tp::log", a);
    let three = scalar(&mut b, 3.0);
    let dead2 = binary(&mut b, "tp::pow", dead1, three);
    let dead3 = opaque(&mut b, "tp::matmul", vec![dead2, dead2], &[N, N], None);
    let r = unary(&mut b, "tp::sqrt", a);
    b.output(&[r])?;
    let g0 = b.finish()?;
    let g = dce(&g0)?;
    for v in [dead1, dead2, dead3, three] {
        assert!(!g.contains(v.node));
    }
    assert!(g.contains(unused.node));
    assert_eq!(g.inputs(), vec![x, unused]);
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 1);
    insta::assert_snapshot!(
        "dce_unused_branch",
        format!("before DCE:\n{g0}\nafter DCE:\n{text}")
    );
    Ok(())
}

#[test]
fn convexity_no_cycle_through_a_barrier() -> Result<()> {
    // a = exp(x); t = matmul(a, w); c = a + t. Merging c into a's region would put the matmul
    // on a cycle (the region would both feed it and wait for it).
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(64), d(64)]));
    let w = b.input("w", f32m(&[d(64), d(64)]));
    let a = unary(&mut b, "tp::exp", x);
    let t = opaque(&mut b, "tp::matmul", vec![a, w], &[d(64), d(64)], None);
    let c = binary(&mut b, "tp::add", a, t);
    let r = unary(&mut b, "tp::tanh", c);
    b.output(&[r])?;
    let g = b.finish()?;
    let (plan, text) = snapshot_text(&g);
    assert_eq!(plan.regions.len(), 2);
    assert_eq!(plan.regions[0].nodes, vec![a.node]);
    assert_eq!(plan.regions[1].nodes, vec![c.node, r.node]);
    assert_eq!(
        plan.steps,
        vec![Step::Region(0), Step::Node(t.node), Step::Region(1)]
    );
    insta::assert_snapshot!("convexity", text);
    Ok(())
}

#[test]
fn convexity_of_siblings_through_a_barrier() -> Result<()> {
    // Two readers of x at full size would fuse horizontally, but one reads the matmul of the
    // other: p = exp(x); m = matmul(p, p); q = sin(x) + m. p and q must stay apart.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(8), d(8)]));
    let p = unary(&mut b, "tp::exp", x);
    let m = opaque(&mut b, "tp::matmul", vec![p, p], &[d(8), d(8)], None);
    let s = unary(&mut b, "tp::sin", x);
    let q = binary(&mut b, "tp::add", s, m);
    b.output(&[q])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    assert!(plan.region_of(p.node).is_some());
    assert_ne!(plan.region_of(p.node), plan.region_of(q.node));
    assert_eq!(plan.region_of(s.node), plan.region_of(q.node));
    Ok(())
}

#[test]
fn siblings_reading_one_input_fuse_horizontally() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N]));
    let e = unary(&mut b, "tp::exp", x);
    let s = unary(&mut b, "tp::sin", x);
    b.output(&[e, s])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    assert_eq!(plan.regions.len(), 1);
    assert_eq!(plan.regions[0].inputs, vec![x]);
    assert_eq!(plan.regions[0].outputs, vec![e, s]);
    Ok(())
}

#[test]
fn sibling_fusion_ignores_shared_scalars_and_shapes() -> Result<()> {
    // Two chains sharing only a scalar constant, or reading x at different shapes, stay apart.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[N]));
    let y = b.input("y", f32m(&[d(4), N]));
    let two = scalar(&mut b, 2.0);
    let a = binary(&mut b, "tp::mul", x, two);
    let c = binary(&mut b, "tp::add", y, x);
    let e = binary(&mut b, "tp::mul", y, two);
    b.output(&[a, c, e])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    assert_ne!(plan.region_of(a.node), plan.region_of(c.node));
    assert_ne!(plan.region_of(a.node), plan.region_of(e.node));
    // c and e both read y at full size: one region.
    assert_eq!(plan.region_of(c.node), plan.region_of(e.node));
    Ok(())
}

#[test]
fn symbolic_dims_compare_by_symbol() -> Result<()> {
    // [s0] and [s1] outputs never share a region, even though both are rank 1.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[Dim::Sym(0)]));
    let y = b.input("y", f32m(&[Dim::Sym(1)]));
    let a = unary(&mut b, "tp::exp", x);
    let c = unary(&mut b, "tp::exp", y);
    let k = b.op(
        "tp::cat",
        OpClass::Opaque,
        vec![
            BuilderArg::TensorList(vec![a, c]),
            BuilderArg::named("dim", 0i64),
        ],
        vec![f32m(&[Dim::Sym(2)])],
    )?[0];
    b.output(&[k])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    assert_eq!(plan.regions.len(), 2);
    Ok(())
}

#[test]
fn non_lowerable_and_multi_output_ops_are_barriers() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(4), d(6)]));
    let c = b.op(
        "mylib::erfinv",
        OpClass::Elementwise,
        vec![x.into()],
        vec![f32m(&[d(4), d(6)])],
    )?[0];
    let am = b.op(
        "tp::argmax",
        OpClass::Reduction,
        vec![x.into(), BuilderArg::named("dim", 1i64)],
        vec![TensorMeta::new(&[4], DType::I64, Device::Cpu)],
    )?[0];
    let halves = b.op(
        "tp::split_relu",
        OpClass::Elementwise,
        vec![c.into()],
        vec![f32m(&[d(4), d(3)]), f32m(&[d(4), d(3)])],
    )?;
    let gelu = b.op(
        "tp::gelu",
        OpClass::Elementwise,
        vec![x.into(), BuilderArg::named("approximate", "tanh")],
        vec![f32m(&[d(4), d(6)])],
    )?[0];
    b.output(&[am, halves[0], halves[1], gelu])?;
    let g = b.finish()?;
    let (plan, text) = explain(&g);
    assert_eq!(
        plan.reason(c.node),
        Some("mylib::erfinv has no scalar lowering")
    );
    assert_eq!(
        plan.reason(am.node),
        Some("tp::argmax has no scalar lowering")
    );
    assert_eq!(
        plan.reason(halves[0].node),
        Some("tp::split_relu has no scalar lowering")
    );
    assert_eq!(plan.region_of(gelu.node), Some(0));
    assert!(
        text.contains("why: mylib::erfinv has no scalar lowering"),
        "{text}"
    );
    Ok(())
}

#[test]
fn reduction_dims_are_normalized() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2), d(3), d(4)]));
    let s = reduce(&mut b, "tp::sum", x, &[-1, 0], false);
    let all = b.op(
        "tp::mean",
        OpClass::Reduction,
        vec![
            x.into(),
            BuilderArg::named("dim", Attr::None),
            BuilderArg::named("keepdim", false),
        ],
        vec![f32m(&[])],
    )?[0];
    b.output(&[s, all])?;
    let g = b.finish()?;
    let (plan, _) = explain(&g);
    let dims: Vec<Vec<usize>> = plan
        .regions
        .iter()
        .map(|r| match &r.kind {
            RegionKind::Reduction { dims, .. } => dims.clone(),
            other => panic!("expected a reduction, got {other:?}"),
        })
        .collect();
    assert_eq!(dims, vec![vec![0, 2], vec![0, 1, 2]]);
    Ok(())
}

#[test]
fn dot_export_has_region_clusters() -> Result<()> {
    let (g, ..) = mutation_graph()?;
    let plan = partition(&g)?;
    let dot = plan.to_dot(&g);
    assert!(dot.contains("subgraph cluster_1"));
    insta::assert_snapshot!("mutation_dot", dot);
    Ok(())
}

// ---- DCE ----

#[test]
fn dce_keeps_mutating_nodes_and_what_they_read() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(8)]));
    let buf = b.input("buf", f32m(&[d(8)]));
    let e = unary(&mut b, "tp::exp", x);
    // copy_(buf, exp(x)) writes a graph input: a side effect nothing reads.
    let w = b.op_node(
        "tp::copy_",
        OpClass::Mutating,
        vec![buf.into(), e.into()],
        vec![],
    )?;
    let dead = unary(&mut b, "tp::neg", x);
    b.output(&[x])?;
    let g = dce(&b.finish()?)?;
    assert!(g.contains(w) && g.contains(e.node));
    assert!(!g.contains(dead.node));
    let plan = partition(&g)?;
    check_plan(&g, &plan);
    assert_eq!(plan.steps, vec![Step::Region(0), Step::Node(w)]);
    Ok(())
}

#[test]
fn dce_bridges_orderings_through_removed_readers() -> Result<()> {
    // write1(x); dead read of x; write2(x): the dead read goes, write2 stays after write1.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(8)]));
    let w1 = b.op_node("mylib::zero_", OpClass::Mutating, vec![x.into()], vec![])?;
    let r = unary(&mut b, "tp::exp", x);
    b.order(r.node, w1)?;
    let w2 = b.op_node(
        "mylib::fill_",
        OpClass::Mutating,
        vec![x.into(), 1.0.into()],
        vec![],
    )?;
    b.order(w2, r.node)?;
    b.output(&[])?;
    let g = dce(&b.finish()?)?;
    assert!(!g.contains(r.node));
    assert_eq!(g.order_predecessors(w2), vec![w1]);
    let plan = partition(&g)?;
    assert_eq!(plan.steps, vec![Step::Node(w1), Step::Node(w2)]);
    Ok(())
}

#[test]
fn dce_is_identity_on_live_graphs() -> Result<()> {
    let (g, ..) = mutation_graph()?;
    let g2 = dce(&g)?;
    assert_eq!(g2.to_string(), g.to_string());
    Ok(())
}

// ---- buffer planning ----

#[test]
fn buffer_slots_are_reused_along_a_chain() -> Result<()> {
    // A -> B -> C -> out, each step a barrier: C reuses A's slot once B has consumed A.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(32), d(32)]));
    let a = opaque(&mut b, "tp::matmul", vec![x, x], &[d(32), d(32)], None);
    let bb = opaque(&mut b, "tp::matmul", vec![a, x], &[d(32), d(32)], None);
    let c = opaque(&mut b, "tp::matmul", vec![bb, x], &[d(32), d(32)], None);
    let out = opaque(&mut b, "tp::matmul", vec![c, x], &[d(32), d(32)], None);
    b.output(&[out])?;
    let g = b.finish()?;
    let plan = partition(&g)?;
    let bp = buffer_plan::plan(&g, &plan)?;
    assert_eq!(bp.num_slots(), 2);
    assert_eq!(bp.slot_of(a), Some(0));
    assert_eq!(bp.slot_of(bb), Some(1));
    assert_eq!(bp.slot_of(c), Some(0));
    assert_eq!(bp.slot_of(out), None);
    assert_eq!(bp.slot_of(x), None);
    assert_eq!(bp.live_range(a), Some((0, 1)));
    assert_eq!(bp.slot_values(0), vec![a, c]);
    insta::assert_snapshot!("buffer_chain", bp.to_string());
    Ok(())
}

#[test]
fn buffer_plan_views_extend_their_source() -> Result<()> {
    // a = exp(x) (region 0); v = view(a) read two steps later: a stays live until then, v has no
    // slot of its own.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(4), d(4)]));
    let a = unary(&mut b, "tp::exp", x);
    let m1 = opaque(&mut b, "tp::matmul", vec![x, x], &[d(4), d(4)], None);
    let v = permute(&mut b, a, &[1, 0]);
    let m2 = opaque(&mut b, "tp::matmul", vec![m1, x], &[d(4), d(4)], None);
    let m3 = opaque(&mut b, "tp::matmul", vec![m2, v], &[d(4), d(4)], None);
    b.output(&[m3])?;
    let g = b.finish()?;
    let plan = partition(&g)?;
    check_plan(&g, &plan);
    let bp = buffer_plan::plan(&g, &plan)?;
    let last = plan
        .steps
        .iter()
        .position(|s| *s == Step::Node(m3.node))
        .unwrap();
    assert_eq!(bp.slot_of(v), None);
    assert_eq!(bp.alias_of(v), Some(a));
    assert_eq!(bp.live_range(a).map(|r| r.1), Some(last));
    // a, m1 and m2 overlap (m1 dies at m2's step, where m2 is born): three slots... except m2
    // may not take m1's slot in the step that reads m1.
    assert_ne!(bp.slot_of(a), bp.slot_of(m1));
    assert_ne!(bp.slot_of(a), bp.slot_of(m2));
    assert_ne!(bp.slot_of(m1), bp.slot_of(m2));
    Ok(())
}

#[test]
fn buffer_plan_outputs_aliasing_an_intermediate_escape() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(4), d(4)]));
    let m = opaque(&mut b, "tp::matmul", vec![x, x], &[d(4), d(4)], None);
    let v = permute(&mut b, m, &[1, 0]);
    b.output(&[v])?;
    let g = b.finish()?;
    let bp = buffer_plan::plan(&g, &partition(&g)?)?;
    assert_eq!(bp.slot_of(m), None);
    assert_eq!(bp.num_slots(), 0);
    Ok(())
}

#[test]
fn buffer_plan_separates_devices() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(4), d(4)]));
    let cu = |dims: &[usize]| TensorMeta::new(dims, DType::F32, Device::Cuda(0));
    let a = opaque(&mut b, "tp::matmul", vec![x, x], &[d(4), d(4)], None);
    let to = b.op(
        "mylib::to_cuda",
        OpClass::Opaque,
        vec![a.into()],
        vec![cu(&[4, 4])],
    )?[0];
    let c = b.op(
        "mylib::cuda_mm",
        OpClass::Opaque,
        vec![to.into()],
        vec![cu(&[4, 4])],
    )?[0];
    let back = b.op(
        "mylib::to_cpu",
        OpClass::Opaque,
        vec![c.into()],
        vec![f32m(&[d(4), d(4)])],
    )?[0];
    b.output(&[back])?;
    let g = b.finish()?;
    let bp = buffer_plan::plan(&g, &partition(&g)?)?;
    // `c` could reuse `a`'s slot by lifetime, but not across devices.
    assert_ne!(bp.slot_of(a), bp.slot_of(c));
    assert_eq!(
        bp.slot_device(bp.slot_of(c).unwrap()),
        Some(Device::Cuda(0))
    );
    Ok(())
}

// ---- errors, never panics ----

#[test]
fn errors_on_invalid_graphs() {
    // No outputs.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2)]));
    unary(&mut b, "tp::exp", x);
    let g = b.graph().clone();
    for e in [partition(&g).unwrap_err(), dce(&g).unwrap_err()] {
        assert!(e.to_string().contains("no outputs"), "{e}");
    }

    // A cycle through an order edge.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2)]));
    let a = unary(&mut b, "tp::exp", x);
    let c = unary(&mut b, "tp::neg", a);
    b.output(&[c]).unwrap();
    b.order(a.node, c.node).unwrap();
    let g = b.graph().clone();
    assert!(partition(&g).unwrap_err().to_string().contains("cycle"));
    assert!(dce(&g).is_err());

    // An empty graph object.
    assert!(partition(&Graph::new()).is_err());

    // A reduction dim out of range.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2), d(3)]));
    let s = reduce(&mut b, "tp::sum", x, &[0], false);
    b.output(&[s]).unwrap();
    let mut g = b.finish().unwrap();
    if let Some(call) = g.node_mut(s.node).and_then(Node::as_op_mut) {
        call.args[1] = tensorplay_ir::graph::Arg::named("dim", vec![5i64]);
    }
    assert!(
        partition(&g)
            .unwrap_err()
            .to_string()
            .contains("out of range")
    );

    // A softmax without an int dim.
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2), d(3)]));
    let p = b
        .op(
            "tp::softmax",
            OpClass::Reduction,
            vec![x.into(), BuilderArg::named("dim", "last")],
            vec![f32m(&[d(2), d(3)])],
        )
        .unwrap()[0];
    b.output(&[p]).unwrap();
    let g = b.finish().unwrap();
    assert!(partition(&g).unwrap_err().to_string().contains("dim"));
}

#[test]
fn buffer_plan_rejects_a_plan_of_another_graph() -> Result<()> {
    let (g1, ..) = mutation_graph()?;
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2)]));
    let e = unary(&mut b, "tp::exp", x);
    b.output(&[e])?;
    let g2 = b.finish()?;
    let plan2 = partition(&g2)?;
    assert!(buffer_plan::plan(&g1, &plan2).is_err());
    let plan1 = partition(&g1)?;
    assert!(buffer_plan::plan(&g2, &plan1).is_err());
    // A hand-broken plan: a region listed twice.
    let mut broken = plan1.clone();
    broken.steps.push(Step::Region(0));
    assert!(
        buffer_plan::plan(&g1, &broken)
            .unwrap_err()
            .to_string()
            .contains("steps")
    );
    let mut broken = plan1;
    broken.steps.push(Step::Region(9));
    assert!(buffer_plan::plan(&g1, &broken).is_err());
    Ok(())
}

#[test]
fn constant_only_and_empty_graphs() -> Result<()> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32m(&[d(2)]));
    let _k = b.constant(
        Constant::IntTensor {
            data: vec![1, 2],
            shape: vec![2],
            dtype: DType::I64,
        },
        Device::Cpu,
    )?;
    b.output(&[x])?;
    let g = dce(&b.finish()?)?;
    assert_eq!(g.node_count(), 2); // the unused constant is gone
    let plan = partition(&g)?;
    assert!(plan.steps.is_empty() && plan.regions.is_empty());
    assert_eq!(
        plan.explain(&g),
        "fusion plan: 0 steps (0 regions, 0 barriers, 0 free views)\nreturns: (%x)\n"
    );
    assert_eq!(buffer_plan::plan(&g, &plan)?.num_slots(), 0);
    Ok(())
}

#[test]
fn tp_logs_parsing() {
    let s = parse("graph,fusion");
    assert!(stage_in(&s, "fusion") && stage_in(&s, "graph"));
    assert!(!stage_in(&s, "clif"));
    assert!(stage_in(&parse(" ALL "), "cuda"));
    assert!(parse(",,").is_empty());
}

// ---- random graphs: invariants hold whatever the graph ----

mod random {
    use super::*;
    use proptest::prelude::*;

    /// Builds a random valid graph from `choices`: each entry adds one node reading earlier
    /// values. Shapes: full [4, 8], rows [8] and keepdim sums [4, 1], all broadcastable to the
    /// full shape; mutations of full values get order edges to earlier and later readers.
    fn build(choices: &[(u8, usize, usize)]) -> Graph {
        let mut b = GraphBuilder::new();
        let x = b.input("x", f32m(&[d(4), d(8)]));
        let y = b.input("y", f32m(&[d(8)]));
        let mut vals = vec![x, y];
        // (mutated value, mutating node)
        let mut writes: Vec<(ValueRef, NodeId)> = Vec::new();
        let full = |b: &GraphBuilder, v: ValueRef| shape_of(b, v) == vec![d(4), d(8)];
        for &(kind, i, j) in choices {
            let a = vals[i % vals.len()];
            let c = vals[j % vals.len()];
            let new = match kind % 9 {
                0 | 1 => binary(&mut b, "tp::add", a, c),
                2 => unary(&mut b, "tp::exp", a),
                3 => binary(&mut b, "tp::mul", a, c),
                4 if full(&b, a) => reduce(&mut b, "tp::sum", a, &[1], true),
                5 if full(&b, a) => {
                    opaque(&mut b, "tp::matmul_like", vec![a, c], &[d(4), d(8)], None)
                }
                6 => b
                    .op(
                        "tp::view",
                        OpClass::View,
                        vec![
                            a.into(),
                            BuilderArg::named(
                                "size",
                                shape_of(&b, a)
                                    .iter()
                                    .map(|d| d.as_static().unwrap() as i64)
                                    .collect::<Vec<_>>(),
                            ),
                        ],
                        vec![f32m(&shape_of(&b, a))],
                    )
                    .unwrap()[0],
                7 if full(&b, a) => softmax(&mut b, "tp::softmax", a, -1),
                8 if full(&b, a) => {
                    let w = b
                        .op_node("mylib::scale_", OpClass::Mutating, vec![a.into()], vec![])
                        .unwrap();
                    b.set_barrier_reason(w, "mutates x").unwrap();
                    b.order_after_readers(w, a).unwrap();
                    for &(v, prev) in &writes {
                        if v == a {
                            b.order(w, prev).unwrap();
                        }
                    }
                    writes.push((a, w));
                    continue;
                }
                _ => unary(&mut b, "tp::neg", a),
            };
            // Readers of a mutated value run after the write.
            for &(v, w) in &writes {
                let reads: Vec<ValueRef> = b.graph().args_of(new.node).unwrap();
                if reads.contains(&v) {
                    b.order(new.node, w).unwrap();
                }
            }
            vals.push(new);
        }
        let outs: Vec<ValueRef> = vals.iter().rev().step_by(3).copied().take(3).collect();
        b.output(&outs).unwrap();
        b.finish().unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn plans_are_valid(choices in prop::collection::vec((0u8..9, 0usize..64, 0usize..64), 1..40)) {
            let g = build(&choices);
            for g in [g.clone(), dce(&g).unwrap()] {
                let (plan, _) = explain(&g);
                let bp = buffer_plan::plan(&g, &plan).unwrap();
                let vals = bp.values();
                for (i, a) in vals.iter().enumerate() {
                    prop_assert!(a.first_step <= a.last_step);
                    for b in &vals[i + 1..] {
                        if a.slot == b.slot {
                            prop_assert!(a.last_step < b.first_step || b.last_step < a.first_step,
                                "{} and {} overlap in slot {}", a.name, b.name, a.slot);
                        }
                    }
                }
                for v in g.outputs().unwrap() {
                    prop_assert_eq!(bp.slot_of(v), None);
                }
            }
        }
    }

    #[test]
    fn large_graph_partitions() {
        // A few hundred nodes: still valid (and quick).
        let choices: Vec<(u8, usize, usize)> = (0..400usize)
            .map(|k| (((k * 7 + 3) % 11) as u8, k * 31 + 5, k * 17 + 1))
            .collect();
        let g = build(&choices);
        let (plan, _) = explain(&g);
        assert!(plan.regions.len() > 1);
        buffer_plan::plan(&g, &plan).unwrap();
    }
}
