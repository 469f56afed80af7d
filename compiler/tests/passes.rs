//! Graph passes: DCE, fusion partition, buffer planning and their printed forms — the tests that
//! need code (graph queries, rewrites, error paths, DOT, logging).
//!
//! The canonical graphs and their expected fusion plans live as file tests in
//! `compiler/filetests/*.tpir` (run by `filetests.rs`). Every plan here and there is checked
//! against the structural invariants of `common/plans.rs` (each op node in exactly one step,
//! every edge running forward in step order or inside one region, region outputs at the
//! iteration shape, ...).

use tensorplay_compiler::passes::buffer_plan;
use tensorplay_compiler::passes::dce::dce;
use tensorplay_compiler::passes::fusion::{FusionPlan, Step, partition};
use tensorplay_compiler::passes::join_slices::join_slices;
use tensorplay_compiler::passes::logging::{parse, stage_in};
use tensorplay_ir::graph::{BuilderArg, Constant, Graph, GraphBuilder, Node};
use tensorplay_ir::{DType, Device, Dim, NodeId, OpClass, Result, TensorMeta, ValueRef};

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

#[path = "common/plans.rs"]
mod plans;

use plans::check_plan;

/// Partitions, checks, and returns the plan with its explanation.
fn explain(g: &Graph) -> (FusionPlan, String) {
    let plan = partition(g).unwrap();
    check_plan(g, &plan);
    // Deterministic: a second run gives the same plan.
    assert_eq!(partition(g).unwrap(), plan);
    let text = plan.explain(g);
    (plan, text)
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

/// `slice_backward(g, input_sizes=[2, width], dim=1, start, end, step=1)` of a `[2, end - start]`
/// gradient.
fn slice_grad(b: &mut GraphBuilder, g: ValueRef, width: i64, start: i64, end: i64) -> ValueRef {
    b.op(
        "tp::slice_backward",
        OpClass::Opaque,
        vec![
            g.into(),
            BuilderArg::named("input_sizes", vec![2i64, width]),
            BuilderArg::named("dim", 1i64),
            BuilderArg::named("start", start),
            BuilderArg::named("end", end),
            BuilderArg::named("step", 1i64),
        ],
        vec![f32m(&[d(2), d(width as usize)])],
    )
    .unwrap()[0]
}

/// The sum of slice gradients over `windows` of a `[2, width]` tensor, after `join_slices` and
/// DCE, printed.
fn joined(width: i64, windows: &[(i64, i64)]) -> Result<(usize, String)> {
    let mut b = GraphBuilder::new();
    let mut sum: Option<ValueRef> = None;
    for (i, &(s, e)) in windows.iter().enumerate() {
        let g = b.input(format!("g{i}"), f32m(&[d(2), d((e - s) as usize)]));
        let piece = slice_grad(&mut b, g, width, s, e);
        sum = Some(match sum {
            None => piece,
            Some(acc) => binary(&mut b, "tp::add", acc, piece),
        });
    }
    b.output(&[sum.unwrap()])?;
    let mut g = b.finish()?;
    let n = join_slices(&mut g)?;
    g.validate()?;
    Ok((n, dce(&g)?.to_string()))
}

#[test]
fn slice_gradients_that_tile_a_dim_are_joined_into_one_cat() -> Result<()> {
    // The three pieces of a chunked projection, summed in autograd's order (last chunk first).
    let (n, text) = joined(6, &[(4, 6), (2, 4), (0, 2)])?;
    assert_eq!(n, 1);
    assert!(text.contains("tp::cat([%g2, %g1, %g0], dim=1)"), "{text}");
    assert!(
        !text.contains("slice_backward") && !text.contains("tp::add"),
        "{text}"
    );
    // Windows that overlap, leave a gap or do not reach the end are summed as captured.
    for windows in [
        &[(0, 3), (2, 6)][..],
        &[(0, 2), (3, 6)][..],
        &[(0, 2), (2, 4)][..],
    ] {
        let (n, text) = joined(6, windows)?;
        assert_eq!(n, 0, "{windows:?}");
        assert!(
            text.contains("slice_backward") && !text.contains("tp::cat"),
            "{text}"
        );
    }
    Ok(())
}
