//! `Graph::parse`: hand-written edge cases of the round trip print → parse → print, and the
//! parser's error messages. (The property test over random captured graphs lives in
//! `compiler/tests/ir_roundtrip.rs`, where the runtime's ops are available.)

use std::collections::BTreeMap;

use tensorplay_ir::graph::{Attr, BuilderArg, Constant, Graph, GraphBuilder, NodeKind};
use tensorplay_ir::{DType, Device, Dim, OpClass, TensorMeta};

fn meta(dtype: DType, dims: &[Dim]) -> TensorMeta {
    TensorMeta {
        shape: dims.iter().copied().collect(),
        dtype,
        device: Device::Cpu,
    }
}

fn st(n: usize) -> Dim {
    Dim::Static(n)
}

/// The class of every op in `g`, by name, for a resolver that knows exactly those ops.
fn classes(g: &Graph) -> BTreeMap<String, OpClass> {
    g.node_ids()
        .into_iter()
        .filter_map(|id| g.node(id)?.as_op().map(|c| (c.name.clone(), c.class)))
        .collect()
}

/// Parses `g`'s text back and checks that it prints the same, validates, and that every node
/// (in printed order) is equal to the original one.
fn round_trip(g: &Graph) -> Graph {
    let text = g.to_string();
    let known = classes(g);
    let parsed = Graph::parse(&text, |name| known.get(name).copied())
        .unwrap_or_else(|e| panic!("{e}\n--- text:\n{text}"));
    assert_eq!(parsed.to_string(), text);
    parsed.validate().unwrap();
    let order = |g: &Graph| -> Vec<_> {
        g.topo_order()
            .unwrap()
            .into_iter()
            .map(|id| g.node(id).unwrap().clone())
            .collect()
    };
    // Nodes compare by value (floats by bits); NaN payloads other than the default would not
    // survive, and none are used here.
    assert_eq!(order(&parsed), order(g));
    parsed
}

#[test]
fn every_constant_kind_round_trips() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", meta(DType::F32, &[Dim::Sym(0), st(3)]));
    let consts = [
        Constant::Float {
            value: 0.5,
            dtype: DType::F32,
        },
        Constant::Float {
            value: -0.0,
            dtype: DType::F64,
        },
        Constant::Float {
            value: f64::NEG_INFINITY,
            dtype: DType::F16,
        },
        Constant::Float {
            value: f64::NAN,
            dtype: DType::BF16,
        },
        Constant::Float {
            value: 1e-300,
            dtype: DType::F64,
        },
        Constant::Int {
            value: i64::MIN,
            dtype: DType::I64,
        },
        Constant::Int {
            value: 7,
            dtype: DType::I32,
        },
        Constant::Int {
            value: 1,
            dtype: DType::Bool,
        },
        Constant::Bool(false),
        Constant::FloatTensor {
            data: (0..12).map(|i| i as f64 * 0.25).collect(),
            shape: vec![3, 4],
            dtype: DType::F64,
        },
        Constant::FloatTensor {
            data: vec![2.0],
            shape: vec![],
            dtype: DType::F32,
        },
        Constant::FloatTensor {
            data: vec![],
            shape: vec![0, 2],
            dtype: DType::F32,
        },
        Constant::IntTensor {
            data: vec![1, -2, 3, 4],
            shape: vec![2, 2],
            dtype: DType::I64,
        },
        Constant::IntTensor {
            data: vec![1, 0, 1],
            shape: vec![3],
            dtype: DType::Bool,
        },
    ];
    let mut outs = vec![x];
    for (i, c) in consts.into_iter().enumerate() {
        let device = if i % 4 == 3 {
            Device::Cuda(1)
        } else {
            Device::Cpu
        };
        outs.push(b.constant(c, device).unwrap());
    }
    b.output(&outs).unwrap();
    let g = b.finish().unwrap();
    let text = g.to_string();
    assert!(
        text.contains("constant([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75]) : f64[3, 4]"),
        "tensor literals print in full:\n{text}"
    );
    assert!(text.contains("constant(nan) : bf16[]@cuda:1"), "{text}");
    round_trip(&g);
}

#[test]
fn every_argument_kind_round_trips() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", meta(DType::F32, &[Dim::Sym(0), st(8)]));
    let y = b.input("y_2", meta(DType::F32, &[st(8)]));
    let m = meta(DType::F32, &[Dim::Sym(0), st(8)]);
    let attrs: Vec<BuilderArg> = vec![
        BuilderArg::named("i", -3i64),
        BuilderArg::named("f", 1e-5),
        BuilderArg::named("big", 1.5e16),
        BuilderArg::named("inf", f64::INFINITY),
        BuilderArg::named("flag", true),
        BuilderArg::named("s", "a \"quoted\" # not a comment\n\\ é"),
        BuilderArg::named("ints", vec![1i64, -2]),
        BuilderArg::named("floats", vec![0.5, -1.0]),
        BuilderArg::named("bools", vec![true, false]),
        BuilderArg::named("no_ints", Vec::<i64>::new()),
        BuilderArg::named("no_floats", Vec::<f64>::new()),
        BuilderArg::named("no_bools", Vec::<bool>::new()),
        BuilderArg::named("dtype", DType::BF16),
        BuilderArg::named("device", Device::Cuda(3)),
        BuilderArg::named("cpu", Device::Cpu),
        BuilderArg::named("nothing", Attr::None),
        BuilderArg::attr(2i64),
        BuilderArg::attr(Attr::None),
        BuilderArg::attr(DType::I64),
        BuilderArg::attr(vec![0.25]),
    ];
    let mut args = vec![
        x.into(),
        BuilderArg::OptionalTensor(Some(y)),
        BuilderArg::OptionalTensor(None),
        BuilderArg::TensorList(vec![y, x, y]),
        BuilderArg::TensorList(vec![]),
    ];
    args.extend(attrs);
    let r = b
        .op(
            "mylib::everything.out",
            OpClass::Opaque,
            args,
            vec![m.clone()],
        )
        .unwrap();
    b.output(&r).unwrap();
    let g = b.finish().unwrap();
    let text = g.to_string();
    for piece in [
        "Some(%y_2), None:Tensor, [%y_2, %x, %y_2], []:Tensor",
        "no_ints=[]",
        "no_floats=[]:float",
        "no_bools=[]:bool",
        "nothing=None",
        "device=cuda:3",
    ] {
        assert!(text.contains(piece), "{piece} in\n{text}");
    }
    let parsed = round_trip(&g);
    let call = parsed
        .node_ids()
        .into_iter()
        .find_map(|id| parsed.node(id).unwrap().as_op().cloned())
        .unwrap();
    assert_eq!(call.name, "mylib::everything.out");
    assert_eq!(
        call.args[10],
        tensorplay_ir::graph::Arg::named("s", "a \"quoted\" # not a comment\n\\ é")
    );
}

#[test]
fn multi_output_zero_output_barriers_and_order_edges_round_trip() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", meta(DType::F32, &[st(4)]));
    let m = meta(DType::F32, &[st(2)]);
    let parts = b
        .op(
            "tp::split",
            OpClass::View,
            vec![x.into(), BuilderArg::named("split_size", 2i64)],
            vec![m.clone(), m.clone()],
        )
        .unwrap();
    let e = b
        .op(
            "tp::exp",
            OpClass::Elementwise,
            vec![parts[1].into()],
            vec![m.clone()],
        )
        .unwrap();
    let w = b
        .op_node(
            "mylib::scale_",
            OpClass::Mutating,
            vec![x.into(), BuilderArg::named("alpha", 2.0)],
            vec![],
        )
        .unwrap();
    b.set_barrier_reason(w, "body reads data; runs opaque; after all")
        .unwrap();
    b.order_after_readers(w, x).unwrap();
    let after = b
        .op(
            "tp::neg",
            OpClass::Elementwise,
            vec![x.into()],
            vec![meta(DType::F32, &[st(4)])],
        )
        .unwrap();
    b.order(after[0].node, w).unwrap();
    b.output(&[parts[0], e[0], after[0]]).unwrap();
    let mut g = b.finish().unwrap();
    // An order edge into the sink prints on the `return` line.
    let sink = g.output_node().unwrap();
    g.add_edge(w, sink, tensorplay_ir::graph::Edge::Order)
        .unwrap();
    let text = g.to_string();
    assert!(text.contains("%0.0, %0.1 = tp::split"), "{text}");
    assert!(
        text.contains("# barrier: body reads data; runs opaque; after all; after %0"),
        "{text}"
    );
    assert!(text.contains("return (%0.0, %1, %3)  # after %2"), "{text}");
    round_trip(&g);
}

#[test]
fn graphs_without_inputs_or_results_round_trip() {
    let mut b = GraphBuilder::new();
    b.output(&[]).unwrap();
    let g = b.finish().unwrap();
    assert_eq!(g.to_string(), "graph() {\n  return ()\n}\n");
    round_trip(&g);
    let mut b = GraphBuilder::new();
    let c = b.constant(Constant::Bool(true), Device::Meta).unwrap();
    b.output(&[c, c]).unwrap();
    round_trip(&b.finish().unwrap());
}

#[test]
fn hand_written_text_may_state_classes_and_skip_numbers() {
    // Numbers need not be dense; a `class:` comment names an op the resolver does not know.
    let text = "
graph(%a: f32[s0, s1], %b: f32[s1]@cpu) {
  %7 = tp::mul(%a, %b) : f32[s0, s1]
  %2 = mylib::k(%7) : f32[s0, s1]  # class: opaque; barrier: triton op
  %9 = mylib::w_(%a) : ()  # class: mutating; after %2
  return (%2)  # after %9
}
";
    let g = Graph::parse(text, |n| (n == "tp::mul").then_some(OpClass::Elementwise)).unwrap();
    assert_eq!(
        g.to_string(),
        "graph(%a: f32[s0, s1], %b: f32[s1]) {
  %0 = tp::mul(%a, %b) : f32[s0, s1]
  %1 = mylib::k(%0) : f32[s0, s1]  # barrier: triton op
  %2 = mylib::w_(%a) : ()  # after %1
  return (%1)  # after %2
}
"
    );
    let classes: Vec<OpClass> = g
        .topo_order()
        .unwrap()
        .into_iter()
        .filter_map(|id| g.node(id).unwrap().as_op().map(|c| c.class))
        .collect();
    assert_eq!(
        classes,
        vec![OpClass::Elementwise, OpClass::Opaque, OpClass::Mutating]
    );
    let inputs = g.inputs();
    assert!(matches!(
        &g.node(inputs[1].node).unwrap().kind,
        NodeKind::Input { index: 1, name } if name == "b"
    ));
}

#[test]
fn symbolic_shapes_and_size_arguments_round_trip() {
    let text = "graph(%x0: f32[s0, s1]) {
  %0 = tp::slice(%x0, 0, 1, s0 - 1, 1) : f32[s0 - 2, s1]
  %1 = tp::view(%0, [s1*(s0 - 2)]) : f32[s1*(s0 - 2)]
  %2 = tp::narrow(%1, 0, min(s0, 4), s1 // 2 + 1) : f32[s1 // 2 + 1]
  return (%2)
}
";
    let g = Graph::parse(text, |n| n.starts_with("tp::").then_some(OpClass::View)).unwrap();
    assert_eq!(g.to_string(), text);
    let node = g.node(g.outputs().unwrap()[0].node).unwrap();
    assert!(matches!(node.outputs[0].shape[0], Dim::Expr(_)));
    // A malformed expression names its line and column.
    let e = error("graph(%x: f32[s0]) {\n  %0 = tp::neg(%x) : f32[s0 +]\n  return (%0)\n}");
    assert!(e.contains("line 2") && e.contains("size expression"), "{e}");
}

/// The message of a parse error.
fn error(text: &str) -> String {
    Graph::parse(text, |n| {
        n.starts_with("tp::").then_some(OpClass::Elementwise)
    })
    .unwrap_err()
    .to_string()
}

#[test]
fn errors_name_line_and_column() {
    let cases: [(&str, &str); 16] = [
        ("", "graph text is empty"),
        (
            "graph(%x: f32[4]) {\n  return (%y)\n}",
            "line 2, column 11: `%y` is not defined",
        ),
        (
            "graph(%x: f33[4]) {\n  return (%x)\n}",
            "line 1, column 11: unknown dtype `f33`",
        ),
        (
            "graph(%x: f32[4, q]) {\n  return (%x)\n}",
            "line 1, column 18: expected a size or a symbol",
        ),
        (
            "graph(%x: f32[4]@tpu) {\n  return (%x)\n}",
            "line 1, column 18: unknown device `tpu`",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = mylib::f(%x) : f32[4]\n  return (%0)\n}",
            "line 2, column 8: unknown op `mylib::f`: the resolver knows no class",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = tp::f(%x) : f32[4]\n  %0 = tp::f(%x) : f32[4]\n  return (%0)\n}",
            "line 3, column 3: `%0` is defined twice",
        ),
        (
            "graph(%x: f32[4]) {\n  %0.0, %0.1 = tp::f(%x) : (f32[4], f32[4])\n  return (%0)\n}",
            "line 3, column 11: `%0` has 2 outputs; name one as `%0.0`",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = tp::f(%?) : f32[4]\n  return (%0)\n}",
            "line 2, column 15: `%?` marks a missing argument",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = constant(1.5) : i64[]\n  return (%0)\n}",
            "line 2, column 8: constant 1.5: a float literal needs a floating dtype",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = constant([1.0, 2.0]) : f32[3]\n  return (%0)\n}",
            "holds 3 elements but 2 were given",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = tp::f(%x) : f32[4]  # class: weird\n  return (%0)\n}",
            "line 2, column 30: unknown op class `weird`",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = tp::f(%x, s=\"open) : f32[4]\n  return (%0)\n}",
            "unterminated string",
        ),
        (
            "graph(%x: f32[4]) {\n  return (%x)\n",
            "the graph is not closed",
        ),
        (
            "graph(%x: f32[4]) {\n  return (%x)\n}\n  %0 = tp::f(%x) : f32[4]",
            "line 4, column 3: text after the closing `}`",
        ),
        (
            "graph(%x: f32[4]) {\n  %0 = tp::f(%x) : f32[4]  # after %0\n  return (%0)\n}",
            "`%0` is not defined before this line",
        ),
    ];
    for (text, want) in cases {
        let got = error(text);
        assert!(
            got.contains(want),
            "for\n{text}\nwant `{want}`, got:\n{got}"
        );
    }
    // The message shows the line with a caret under the column.
    let got = error("graph(%x: f32[4]) {\n  return (%y)\n}");
    assert!(got.ends_with("  |   return (%y)\n  |           ^"), "{got}");
    // A graph that parses but does not validate reports the validator's message.
    let got = error("graph(%x: f32[4]) {\n  return <unset>\n}");
    assert!(got.contains("cannot be parsed"), "{got}");
}
