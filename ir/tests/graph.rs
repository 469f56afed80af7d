//! Tests of the IR graph: printer and DOT snapshots, validation errors, queries and rewrites.

use tensorplay_ir::graph::{
    Arg, Attr, BuilderArg, Constant, Edge, Graph, GraphBuilder, Node, NodeId, NodeKind, OpCall,
    ValueRef,
};
use tensorplay_ir::{DType, Device, Dim, Error, OpClass, TensorMeta};

fn meta(dtype: DType, dims: &[Dim]) -> TensorMeta {
    TensorMeta {
        shape: dims.iter().copied().collect(),
        dtype,
        device: Device::Cpu,
    }
}

fn f32(dims: &[Dim]) -> TensorMeta {
    meta(DType::F32, dims)
}

const S0: Dim = Dim::Sym(0);

fn st(n: usize) -> Dim {
    Dim::Static(n)
}

fn ew(b: &mut GraphBuilder, name: &str, args: Vec<BuilderArg>, out: TensorMeta) -> ValueRef {
    b.op(name, OpClass::Elementwise, args, vec![out]).unwrap()[0]
}

fn compile_msg(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(Error::Compile { msg: m, .. }) => m,
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// The graph of the design brief.
fn brief_graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0, st(1024)]));
    let bias = b.input("b", f32(&[st(1024)]));
    let a = ew(
        &mut b,
        "tp::add",
        vec![x.into(), bias.into()],
        f32(&[S0, st(1024)]),
    );
    let r = ew(&mut b, "tp::relu", vec![a.into()], f32(&[S0, st(1024)]));
    let s = b
        .op(
            "tp::sum",
            OpClass::Reduction,
            vec![
                r.into(),
                BuilderArg::named("dims", vec![1i64]),
                BuilderArg::named("keepdim", false),
            ],
            vec![f32(&[S0])],
        )
        .unwrap()[0];
    let w = b
        .op_node(
            "mylib::scale_",
            OpClass::Mutating,
            vec![x.into(), 2.0.into()],
            vec![f32(&[S0, st(1024)])],
        )
        .unwrap();
    b.set_barrier_reason(w, "mutates self").unwrap();
    b.output(&[r, s]).unwrap();
    b.finish().unwrap()
}

#[test]
fn prints_the_brief_example() {
    insta::assert_snapshot!(brief_graph().to_string(), @r##"
        graph(%x: f32[s0, 1024], %b: f32[1024]) {
          %0 = tp::add(%x, %b) : f32[s0, 1024]
          %1 = tp::relu(%0) : f32[s0, 1024]
          %2 = tp::sum(%1, dims=[1], keepdim=False) : f32[s0]
          %3 = mylib::scale_(%x, 2.0) : f32[s0, 1024]  # barrier: mutates self
          return (%1, %2)
        }
        "##);
}

#[test]
fn prints_a_chain() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(8)]));
    let e = ew(&mut b, "tp::exp", vec![x.into()], f32(&[st(8)]));
    let m = ew(
        &mut b,
        "tp::mul",
        vec![e.into(), BuilderArg::attr(0.5)],
        f32(&[st(8)]),
    );
    let t = ew(&mut b, "tp::tanh", vec![m.into()], f32(&[st(8)]));
    b.output(&[t]).unwrap();
    insta::assert_snapshot!(b.finish().unwrap().to_string(), @r##"
        graph(%x: f32[8]) {
          %0 = tp::exp(%x) : f32[8]
          %1 = tp::mul(%0, 0.5) : f32[8]
          %2 = tp::tanh(%1) : f32[8]
          return (%2)
        }
        "##);
}

#[test]
fn prints_a_diamond() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0]));
    let l = ew(&mut b, "tp::exp", vec![x.into()], f32(&[S0]));
    let r = ew(&mut b, "tp::neg", vec![x.into()], f32(&[S0]));
    let j = ew(&mut b, "tp::add", vec![l.into(), r.into()], f32(&[S0]));
    b.output(&[j]).unwrap();
    let g = b.finish().unwrap();
    insta::assert_snapshot!(g.to_string(), @r##"
        graph(%x: f32[s0]) {
          %0 = tp::exp(%x) : f32[s0]
          %1 = tp::neg(%x) : f32[s0]
          %2 = tp::add(%0, %1) : f32[s0]
          return (%2)
        }
        "##);
    assert_eq!(g.users(x.node), vec![l.node, r.node]);
    assert_eq!(g.args_of(j.node).unwrap(), vec![l, r]);
}

#[test]
fn prints_a_broadcast() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0, Dim::Sym(1), st(4)]));
    let bias = b.input("bias", meta(DType::F16, &[st(1), st(4)]));
    let e = b
        .op(
            "tp::expand",
            OpClass::View,
            vec![bias.into(), BuilderArg::named("size", vec![3i64, 4])],
            vec![meta(DType::F16, &[st(3), st(4)])],
        )
        .unwrap()[0];
    let y = ew(
        &mut b,
        "tp::add",
        vec![x.into(), bias.into()],
        f32(&[S0, Dim::Sym(1), st(4)]),
    );
    let z = ew(
        &mut b,
        "tp::mul",
        vec![y.into(), e.into()],
        f32(&[S0, st(3), st(4)]),
    );
    b.output(&[z]).unwrap();
    insta::assert_snapshot!(b.finish().unwrap().to_string(), @r##"
        graph(%x: f32[s0, s1, 4], %bias: f16[1, 4]) {
          %0 = tp::expand(%bias, size=[3, 4]) : f16[3, 4]
          %1 = tp::add(%x, %bias) : f32[s0, s1, 4]
          %2 = tp::mul(%1, %0) : f32[s0, 3, 4]
          return (%2)
        }
        "##);
}

#[test]
fn prints_multi_output_and_lists() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(4), st(6)]));
    let half = f32(&[st(4), st(3)]);
    let parts = b
        .op(
            "tp::split",
            OpClass::View,
            vec![x.into(), 3i64.into(), BuilderArg::named("dim", 1i64)],
            vec![half.clone(), half.clone()],
        )
        .unwrap();
    let n = ew(&mut b, "tp::neg", vec![parts[1].into()], half.clone());
    let c = b
        .op(
            "tp::cat",
            OpClass::Opaque,
            vec![
                vec![n, parts[0], parts[1]].into(),
                BuilderArg::named("dim", -1i64),
            ],
            vec![f32(&[st(4), st(9)])],
        )
        .unwrap()[0];
    let ln = b
        .op(
            "tp::layer_norm",
            OpClass::Opaque,
            vec![
                c.into(),
                BuilderArg::named("normalized_shape", vec![9i64]),
                None.into(),
                BuilderArg::OptionalTensor(Some(x)),
                BuilderArg::named("eps", 1e-5),
            ],
            vec![
                f32(&[st(4), st(9)]),
                f32(&[st(4), st(1)]),
                f32(&[st(4), st(1)]),
            ],
        )
        .unwrap();
    b.output(&[ln[0], ln[2], parts[0]]).unwrap();
    let g = b.finish().unwrap();
    insta::assert_snapshot!(g.to_string(), @r##"
        graph(%x: f32[4, 6]) {
          %0.0, %0.1 = tp::split(%x, 3, dim=1) : (f32[4, 3], f32[4, 3])
          %1 = tp::neg(%0.1) : f32[4, 3]
          %2 = tp::cat([%1, %0.0, %0.1], dim=-1) : f32[4, 9]
          %3.0, %3.1, %3.2 = tp::layer_norm(%2, normalized_shape=[9], None:Tensor, Some(%x), eps=1e-05) : (f32[4, 9], f32[4, 1], f32[4, 1])
          return (%3.0, %3.2, %0.0)
        }
        "##);
    assert_eq!(g.args_of(c.node).unwrap(), vec![n, parts[0], parts[1]]);
    assert_eq!(g.args_of(ln[0].node).unwrap(), vec![c, x]);
    assert_eq!(g.outputs().unwrap(), vec![ln[0], ln[2], parts[0]]);
    assert_eq!(g.value_users(parts[1]), vec![n.node, c.node]);
}

#[test]
fn prints_mutation_with_order_edges() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0]));
    let y = b.input("y", f32(&[S0]));
    let r1 = ew(&mut b, "tp::exp", vec![x.into()], f32(&[S0]));
    let r2 = ew(&mut b, "tp::mul", vec![x.into(), y.into()], f32(&[S0]));
    let w = b
        .op_node(
            "mylib::fill_",
            OpClass::Mutating,
            vec![x.into(), 0.0.into()],
            vec![],
        )
        .unwrap();
    b.set_barrier_reason(w, "mutates x").unwrap();
    assert_eq!(b.order_after_readers(w, x).unwrap(), 2);
    let r3 = ew(&mut b, "tp::add", vec![x.into(), r1.into()], f32(&[S0]));
    b.order(r3.node, w).unwrap();
    b.output(&[r2, r3]).unwrap();
    let g = b.finish().unwrap();
    insta::assert_snapshot!(g.to_string(), @r##"
        graph(%x: f32[s0], %y: f32[s0]) {
          %0 = tp::exp(%x) : f32[s0]
          %1 = tp::mul(%x, %y) : f32[s0]
          %2 = mylib::fill_(%x, 0.0) : ()  # barrier: mutates x; after %0, %1
          %3 = tp::add(%x, %0) : f32[s0]  # after %2
          return (%1, %3)
        }
        "##);
    assert_eq!(g.order_predecessors(w), vec![r1.node, r2.node]);
    assert_eq!(g.order_successors(w), vec![r3.node]);
    // The read-after-write must come after the write, which must come after both reads.
    let topo = g.topo_order().unwrap();
    let at = |id: NodeId| topo.iter().position(|&t| t == id).unwrap();
    assert!(at(r1.node) < at(w) && at(r2.node) < at(w) && at(w) < at(r3.node));
    // Order edges do not make users.
    assert_eq!(g.users(r2.node), vec![g.output_node().unwrap()]);
}

#[test]
fn prints_constants() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", meta(DType::I64, &[st(2), st(2)]));
    let half = b
        .constant(
            Constant::Float {
                value: 0.5,
                dtype: DType::F32,
            },
            Device::Cpu,
        )
        .unwrap();
    let k = b
        .constant(
            Constant::IntTensor {
                data: vec![1, 2, 3, 4],
                shape: vec![2, 2],
                dtype: DType::I64,
            },
            Device::Cpu,
        )
        .unwrap();
    let flag = b.constant(Constant::Bool(true), Device::Cpu).unwrap();
    let big = b
        .constant(
            Constant::FloatTensor {
                data: (0..12).map(|i| i as f64 * 0.25).collect(),
                shape: vec![3, 4],
                dtype: DType::F64,
            },
            Device::Cuda(0),
        )
        .unwrap();
    let s = ew(
        &mut b,
        "tp::add",
        vec![x.into(), k.into()],
        meta(DType::I64, &[st(2), st(2)]),
    );
    let m = ew(
        &mut b,
        "tp::mul",
        vec![s.into(), half.into()],
        f32(&[st(2), st(2)]),
    );
    let w = ew(
        &mut b,
        "tp::where",
        vec![flag.into(), m.into(), half.into()],
        f32(&[st(2), st(2)]),
    );
    b.output(&[w, big]).unwrap();
    insta::assert_snapshot!(b.finish().unwrap().to_string(), @r##"
        graph(%x: i64[2, 2]) {
          %0 = constant(0.5) : f32[]
          %1 = constant([1, 2, 3, 4]) : i64[2, 2]
          %2 = constant(True) : bool[]
          %3 = constant([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75]) : f64[3, 4]@cuda:0
          %4 = tp::add(%x, %1) : i64[2, 2]
          %5 = tp::mul(%4, %0) : f32[2, 2]
          %6 = tp::where(%2, %5, %0) : f32[2, 2]
          return (%6, %3)
        }
        "##);
}

#[test]
fn dot_draws_regions_as_clusters() {
    let g = brief_graph();
    let topo = g.topo_order().unwrap();
    let ops: Vec<NodeId> = topo
        .iter()
        .copied()
        .filter(|&id| g.node(id).unwrap().as_op().is_some())
        .collect();
    // add + relu fused, sum alone; the mutating op in no region.
    let regions = vec![vec![ops[0], ops[1]], vec![ops[2]]];
    let dot = g.to_dot(Some(&regions));
    insta::assert_snapshot!(dot, @r##"
        digraph tensorplay {
          node [shape=box, fontname="monospace"];
          subgraph cluster_0 {
            label="region 0";
            style=rounded;
            color="#3c78d8";
            n2 [label="%0 = tp::add\nf32[s0, 1024]"];
            n3 [label="%1 = tp::relu\nf32[s0, 1024]"];
          }
          subgraph cluster_1 {
            label="region 1";
            style=rounded;
            color="#3c78d8";
            n4 [label="%2 = tp::sum\nf32[s0]"];
          }
          n0 [label="%x\nf32[s0, 1024]", shape=ellipse];
          n1 [label="%b\nf32[1024]", shape=ellipse];
          n5 [label="%3 = mylib::scale_\nf32[s0, 1024]\nbarrier: mutates self", style=filled, fillcolor="#f4cccc"];
          n6 [label="return", shape=house];
          n0 -> n2;
          n0 -> n5;
          n1 -> n2;
          n2 -> n3;
          n3 -> n4;
          n3 -> n6;
          n4 -> n6;
        }
        "##);
    assert_eq!(dot, g.to_dot(Some(&regions)));
}

#[test]
fn dot_draws_order_edges_dashed_and_output_indices() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(4)]));
    let p = b
        .op(
            "tp::chunk",
            OpClass::View,
            vec![x.into(), 2i64.into()],
            vec![f32(&[st(2)]), f32(&[st(2)])],
        )
        .unwrap();
    let w = b
        .op_node(
            "mylib::log_",
            OpClass::Mutating,
            vec![BuilderArg::named("note", "a \"quoted\" note")],
            vec![],
        )
        .unwrap();
    b.set_barrier_reason(w, "writes \"log\"").unwrap();
    b.order(w, p[0].node).unwrap();
    b.output(&[p[1]]).unwrap();
    let g = b.finish().unwrap();
    insta::assert_snapshot!(g.to_dot(None), @r##"
        digraph tensorplay {
          node [shape=box, fontname="monospace"];
          n0 [label="%x\nf32[4]", shape=ellipse];
          n1 [label="%0 = tp::chunk\nf32[2], f32[2]"];
          n2 [label="%1 = mylib::log_\n()\nbarrier: writes \"log\"", style=filled, fillcolor="#f4cccc"];
          n3 [label="return", shape=house];
          n0 -> n1;
          n1 -> n2 [style=dashed];
          n1 -> n3 [label="1"];
        }
        "##);
}

#[test]
fn validate_rejects_a_cycle() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(2)]));
    let a = ew(&mut b, "tp::exp", vec![x.into()], f32(&[st(2)]));
    let c = ew(&mut b, "tp::neg", vec![a.into()], f32(&[st(2)]));
    let d = ew(&mut b, "tp::abs", vec![c.into()], f32(&[st(2)]));
    b.output(&[d]).unwrap();
    let mut g = b.finish().unwrap();
    g.add_edge(c.node, a.node, Edge::Order).unwrap();
    let msg = compile_msg(g.validate());
    assert_eq!(
        msg,
        "graph has a cycle (through data or order edges) involving %0 = tp::exp, %1 = tp::neg"
    );
    assert!(g.topo_order().is_err());
    // Printing an invalid graph still works: the acyclic prefix is numbered first.
    insta::assert_snapshot!(g.to_string(), @r##"
        graph(%x: f32[2]) {
          %0 = tp::exp(%x) : f32[2]  # after %1
          %1 = tp::neg(%0) : f32[2]
          %2 = tp::abs(%1) : f32[2]
          return (%2)
        }
        "##);
    // A builder-made order cycle is reported by finish().
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(2)]));
    let a = ew(&mut b, "tp::exp", vec![x.into()], f32(&[st(2)]));
    let c = ew(&mut b, "tp::neg", vec![x.into()], f32(&[st(2)]));
    b.order(a.node, c.node).unwrap();
    b.order(c.node, a.node).unwrap();
    b.output(&[a, c]).unwrap();
    assert!(compile_msg(b.finish()).contains("cycle"));
    // A self-loop data edge.
    let mut g2 = Graph::new();
    let n = g2.add_node(Node::new(
        NodeKind::Op(OpCall::new(
            "tp::neg",
            OpClass::Elementwise,
            vec![Arg::Tensor],
        )),
        vec![f32(&[st(1)])],
    ));
    g2.add_edge(
        n,
        n,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    let out = g2.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
    g2.add_edge(
        n,
        out,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g2.validate()),
        "graph has a cycle (through data or order edges) involving %0 = tp::neg"
    );
}

#[test]
fn validate_rejects_dangling_and_doubled_args() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(2)]));
    let y = b.input("y", f32(&[st(2)]));
    let s = ew(&mut b, "tp::add", vec![x.into(), y.into()], f32(&[st(2)]));
    b.output(&[s]).unwrap();
    let g = b.finish().unwrap();

    let mut dangling = g.clone();
    dangling.remove_node(y.node).unwrap();
    assert_eq!(
        compile_msg(dangling.validate()),
        "%0 = tp::add: tensor argument 1 has no data edge (dangling argument)"
    );
    assert!(dangling.args_of(s.node).is_err());

    let mut doubled = g.clone();
    doubled
        .add_edge(
            x.node,
            s.node,
            Edge::Data {
                arg: 1,
                item: 0,
                src_output: 0,
            },
        )
        .unwrap();
    assert_eq!(
        compile_msg(doubled.validate()),
        "%0 = tp::add: tensor argument 1 has 2 data edges (from %x, %y); expected exactly one"
    );

    // An op node added through the lower-level API with a list slot left unfilled.
    let mut g2 = g.clone();
    let cat = g2.add_node(Node::new(
        NodeKind::Op(OpCall::new(
            "tp::cat",
            OpClass::Opaque,
            vec![Arg::TensorList { len: 2 }, Arg::named("dim", 0i64)],
        )),
        vec![f32(&[st(4)])],
    ));
    g2.add_edge(
        x.node,
        cat,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g2.validate()),
        "%1 = tp::cat: item 1 of tensor-list argument 0 has no data edge (dangling argument)"
    );
    g2.add_edge(
        x.node,
        cat,
        Edge::Data {
            arg: 1,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g2.validate()),
        "%1 = tp::cat: the data edge from input %x targets argument 1 (`dim=0`), which is not a \
         tensor argument"
    );
}

#[test]
fn validate_rejects_bad_output_indices() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(2)]));
    let n = ew(&mut b, "tp::neg", vec![x.into()], f32(&[st(2)]));
    // The builder refuses a value that does not exist.
    let bad = ValueRef::new(n.node, 1);
    assert_eq!(
        compile_msg(b.op(
            "tp::exp",
            OpClass::Elementwise,
            vec![bad.into()],
            vec![f32(&[st(2)])]
        )),
        "tp::exp: argument 0 refers to output 1 of %0 = tp::neg, which has 1 output(s)"
    );
    assert!(b.output(&[bad]).is_err());
    b.output(&[n]).unwrap();
    let mut g = b.finish().unwrap();
    // Through the lower-level API it is caught by validate().
    let out = g.output_node().unwrap();
    assert!(g.remove_edge(
        n.node,
        out,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0
        }
    ));
    g.add_edge(
        n.node,
        out,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 3,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g.validate()),
        "return: the data edge from %0 = tp::neg refers to its output 3, but it has 1 output(s)"
    );
    assert!(g.replace_uses(n, ValueRef::new(x.node, 5)).is_err());
    assert!(
        g.replace_uses(ValueRef::new(NodeId::new(99), 0), n)
            .is_err()
    );
}

#[test]
fn validate_rejects_missing_or_incomplete_outputs() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[st(2)]));
    ew(&mut b, "tp::neg", vec![x.into()], f32(&[st(2)]));
    assert_eq!(
        compile_msg(b.clone().finish()),
        "graph has no outputs: the output sink is missing (call GraphBuilder::output)"
    );
    assert!(b.graph().outputs().is_err());
    b.output(&[x]).unwrap();
    let mut g = b.finish().unwrap();
    let out = g.output_node().unwrap();
    g.node_mut(out).unwrap().kind = NodeKind::Output { arity: 2 };
    assert_eq!(
        compile_msg(g.validate()),
        "return: result 1 has no data edge (dangling argument)"
    );
    g.add_node(Node::new(NodeKind::Output { arity: 0 }, vec![]));
    assert!(compile_msg(g.validate()).contains("2 output sinks"));
    assert_eq!(
        GraphBuilder::new().graph().to_string(),
        "graph() {\n  return <unset>\n}\n"
    );
}

#[test]
fn validate_rejects_bad_inputs_names_and_constants() {
    let x_meta = f32(&[st(2)]);
    // An input index gap.
    let mut g = Graph::new();
    let x = g.add_node(Node::new(
        NodeKind::Input {
            index: 1,
            name: "x".into(),
        },
        vec![x_meta.clone()],
    ));
    let out = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
    g.add_edge(
        x,
        out,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g.validate()),
        "input indices have a gap: there is no input 0 but input %x has index 1 (the 1 inputs must \
         be numbered 0..1)"
    );
    // Duplicate names and non-identifier names.
    let mut b = GraphBuilder::new();
    let a = b.input("x", x_meta.clone());
    let c = b.input("x", x_meta.clone());
    b.output(&[a, c]).unwrap();
    assert_eq!(
        compile_msg(b.finish()),
        "2 inputs are named `x`; input names must be distinct"
    );
    let mut b = GraphBuilder::new();
    let a = b.input("0", x_meta.clone());
    b.output(&[a]).unwrap();
    assert!(compile_msg(b.finish()).contains("not an identifier"));
    // Unqualified op names.
    let mut b = GraphBuilder::new();
    for bad in ["add", "tp::", "::add", "tp::add.", "tp::a-b", "tp::add.x.y"] {
        assert!(
            b.op(bad, OpClass::Elementwise, vec![], vec![]).is_err(),
            "{bad}"
        );
    }
    assert!(
        b.op("tp::add.Tensor", OpClass::Elementwise, vec![], vec![])
            .is_ok()
    );
    // Bad constants.
    assert!(
        b.constant(
            Constant::FloatTensor {
                data: vec![1.0],
                shape: vec![2],
                dtype: DType::F32
            },
            Device::Cpu
        )
        .is_err()
    );
    assert!(
        b.constant(
            Constant::Int {
                value: 1,
                dtype: DType::F64
            },
            Device::Cpu
        )
        .is_err()
    );
    let mut g = Graph::new();
    let k = g.add_node(Node::new(
        NodeKind::Constant(Constant::Float {
            value: 1.0,
            dtype: DType::F32,
        }),
        vec![f32(&[st(3)])],
    ));
    let out = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
    g.add_edge(
        k,
        out,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )
    .unwrap();
    assert_eq!(
        compile_msg(g.validate()),
        "%0 = constant(1.0): a constant must have one output of its own dtype and shape (f32[]), \
         got (f32[3])"
    );
    // Edges into an input.
    let mut b = GraphBuilder::new();
    let x = b.input("x", x_meta.clone());
    let n = ew(&mut b, "tp::neg", vec![x.into()], x_meta);
    b.output(&[n]).unwrap();
    let mut g = b.finish().unwrap();
    g.add_edge(n.node, x.node, Edge::Order).unwrap();
    assert_eq!(
        compile_msg(g.validate()),
        "input %x has an incoming order edge from %0 = tp::neg; inputs and constants take no edges"
    );
}

#[test]
fn topo_order_is_deterministic_and_printing_ignores_node_indices() {
    // Build the same diamond twice through the lower-level API, adding nodes in different orders.
    let build = |consumer_first: bool| {
        let mut g = Graph::new();
        let m = f32(&[st(2)]);
        let op = |name: &str, n: usize| {
            Node::new(
                NodeKind::Op(OpCall::new(
                    name,
                    OpClass::Elementwise,
                    vec![Arg::Tensor; n],
                )),
                vec![f32(&[st(2)])],
            )
        };
        let (join, out, l, r, x);
        if consumer_first {
            out = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
            join = g.add_node(op("tp::add", 2));
            r = g.add_node(op("tp::neg", 1));
            l = g.add_node(op("tp::exp", 1));
            x = g.add_node(Node::new(
                NodeKind::Input {
                    index: 0,
                    name: "x".into(),
                },
                vec![m],
            ));
        } else {
            x = g.add_node(Node::new(
                NodeKind::Input {
                    index: 0,
                    name: "x".into(),
                },
                vec![m],
            ));
            l = g.add_node(op("tp::exp", 1));
            r = g.add_node(op("tp::neg", 1));
            join = g.add_node(op("tp::add", 2));
            out = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
        }
        let data = |arg| Edge::Data {
            arg,
            item: 0,
            src_output: 0,
        };
        g.add_edge(x, l, data(0)).unwrap();
        g.add_edge(x, r, data(0)).unwrap();
        g.add_edge(l, join, data(0)).unwrap();
        g.add_edge(r, join, data(1)).unwrap();
        g.add_edge(join, out, data(0)).unwrap();
        g.validate().unwrap();
        g
    };
    let a = build(false);
    let b = build(true);
    assert_eq!(a.topo_order().unwrap(), a.topo_order().unwrap());
    assert_eq!(a.topo_order().unwrap(), a.clone().topo_order().unwrap());
    assert_eq!(a.to_string(), a.clone().to_string());
    assert_eq!(a.to_dot(None), a.clone().to_dot(None));
    let ids: Vec<usize> = a.topo_order().unwrap().iter().map(|n| n.index()).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    // Ties go to the smaller index: in `b` the neg (index 2) is numbered before the exp (index 3).
    let ids: Vec<usize> = b.topo_order().unwrap().iter().map(|n| n.index()).collect();
    assert_eq!(ids, vec![4, 2, 3, 1, 0]);
    insta::assert_snapshot!(b.to_string(), @r##"
        graph(%x: f32[2]) {
          %0 = tp::neg(%x) : f32[2]
          %1 = tp::exp(%x) : f32[2]
          %2 = tp::add(%1, %0) : f32[2]
          return (%2)
        }
        "##);
    // Both print their producers before their consumers.
    assert!(a.to_string().contains("%2 = tp::add(%0, %1)"));
}

/// A tiny DCE written against the public query API, as a pass would.
fn dce(mut g: Graph) -> Graph {
    loop {
        let dead: Vec<NodeId> = g
            .node_ids()
            .into_iter()
            .filter(|&id| {
                let n = g.node(id).unwrap();
                n.as_op().is_some_and(|op| op.class != OpClass::Mutating)
                    && g.users(id).is_empty()
                    && g.order_successors(id).is_empty()
            })
            .collect();
        if dead.is_empty() {
            return g;
        }
        for id in dead {
            g.remove_node(id).unwrap();
        }
    }
}

#[test]
fn replace_uses_remove_node_and_dce() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0]));
    let n1 = ew(&mut b, "tp::neg", vec![x.into()], f32(&[S0]));
    let n2 = ew(&mut b, "tp::neg", vec![n1.into()], f32(&[S0]));
    let e = ew(&mut b, "tp::exp", vec![n2.into()], f32(&[S0]));
    let unused = ew(&mut b, "tp::sin", vec![e.into()], f32(&[S0]));
    let unused2 = ew(&mut b, "tp::cos", vec![unused.into()], f32(&[S0]));
    b.output(&[e, n2]).unwrap();
    let g = b.finish().unwrap();
    assert_eq!(g.node_count(), 7);

    // neg(neg(x)) -> x.
    let mut g2 = g.clone();
    assert_eq!(g2.replace_uses(n2, x).unwrap(), 2);
    assert_eq!(g2.replace_uses(n2, x).unwrap(), 0);
    assert_eq!(g2.replace_uses(x, x).unwrap(), 0);
    assert!(g2.users(n2.node).is_empty());
    g2.validate().unwrap();
    let g2 = dce(g2);
    g2.validate().unwrap();
    assert!(!g2.contains(n1.node) && !g2.contains(n2.node));
    assert!(!g2.contains(unused.node) && !g2.contains(unused2.node));
    assert_eq!(g2.node_count(), 3);
    assert_eq!(g2.outputs().unwrap(), vec![e, x]);
    insta::assert_snapshot!(g2.to_string(), @r##"
        graph(%x: f32[s0]) {
          %0 = tp::exp(%x) : f32[s0]
          return (%0, %x)
        }
        "##);
    // The original is untouched (passes are Graph -> Graph).
    assert_eq!(g.node_count(), 7);

    // Replacing x by f(x) leaves f's own use of x alone.
    let mut g3 = g.clone();
    assert_eq!(g3.replace_uses(x, n1).unwrap(), 0);
    let mut b = GraphBuilder::new();
    let x = b.input("x", f32(&[S0]));
    let r = ew(&mut b, "tp::relu", vec![x.into()], f32(&[S0]));
    let s = ew(&mut b, "tp::sigmoid", vec![x.into()], f32(&[S0]));
    b.output(&[s, x]).unwrap();
    let mut g4 = b.finish().unwrap();
    assert_eq!(g4.replace_uses(x, r).unwrap(), 2);
    g4.validate().unwrap();
    assert_eq!(g4.args_of(r.node).unwrap(), vec![x]);
    assert_eq!(g4.outputs().unwrap(), vec![s, r]);
    // Removed ids stay dead; remove_node on them errors.
    assert!(g3.remove_node(unused.node).is_ok());
    assert!(g3.remove_node(unused.node).is_err());
    assert!(g3.node(unused.node).is_none());
    assert_eq!(
        g3.describe(unused.node),
        format!("node {} (removed)", unused.node)
    );
}

#[test]
fn attrs_key_a_cache() {
    use std::collections::HashSet;
    let set: HashSet<Attr> = [
        Attr::Float(f64::NAN),
        Attr::Float(f64::NAN),
        Attr::Float(0.0),
        Attr::Float(-0.0),
        Attr::Int(0),
        Attr::Bool(false),
        Attr::None,
    ]
    .into_iter()
    .collect();
    assert_eq!(set.len(), 6);
    // Whole nodes hash too.
    let g = brief_graph();
    let nodes: HashSet<&Node> = g
        .node_ids()
        .into_iter()
        .map(|id| g.node(id).unwrap())
        .collect();
    assert_eq!(nodes.len(), g.node_count());
}

/// A small deterministic generator (no external crates).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

#[test]
fn never_panics_on_arbitrary_edits() {
    for seed in 0..300u64 {
        let mut rng = Lcg(seed);
        let mut g = Graph::new();
        for _ in 0..(3 + rng.next(12)) {
            let kind = match rng.next(5) {
                0 => NodeKind::Input {
                    index: rng.next(3),
                    name: ["x", "y", "1"][rng.next(3)].into(),
                },
                1 => NodeKind::Constant(Constant::Float {
                    value: 1.0,
                    dtype: DType::F32,
                }),
                2 => NodeKind::Output { arity: rng.next(3) },
                _ => NodeKind::Op(OpCall::new(
                    "tp::f",
                    OpClass::Elementwise,
                    vec![
                        Arg::Tensor,
                        Arg::TensorList { len: rng.next(3) },
                        Arg::OptionalTensor {
                            present: rng.next(2) == 0,
                        },
                        Arg::attr(1i64),
                    ],
                )),
            };
            let outputs = (0..rng.next(3)).map(|_| f32(&[st(2)])).collect();
            g.add_node(Node::new(kind, outputs));
        }
        let ids = g.node_ids();
        for _ in 0..rng.next(20) {
            let (s, t) = (ids[rng.next(ids.len())], ids[rng.next(ids.len())]);
            let e = if rng.next(4) == 0 {
                Edge::Order
            } else {
                Edge::Data {
                    arg: rng.next(5),
                    item: rng.next(3),
                    src_output: rng.next(3),
                }
            };
            g.add_edge(s, t, e).unwrap();
        }
        for _ in 0..rng.next(3) {
            let _ = g.remove_node(ids[rng.next(ids.len())]);
        }
        let a = ValueRef::new(ids[rng.next(ids.len())], rng.next(2));
        let b2 = ValueRef::new(ids[rng.next(ids.len())], rng.next(2));
        let _ = g.replace_uses(a, b2);
        let _ = g.validate();
        let _ = g.topo_order();
        let _ = g.outputs();
        let _ = g.to_string();
        let _ = g.to_dot(Some(&[ids.clone(), vec![NodeId::new(1000)]]));
        for &id in &ids {
            let _ = g.args_of(id);
            let _ = g.describe(id);
            let _ = g.users(id);
        }
    }
}
