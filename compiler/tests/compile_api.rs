//! The compile API: guards and re-capture, reuse across sizes, errors (never panics) for bad
//! graphs, `explain()` / `to_dot()`, and autograd through a compiled function.

use std::panic::{AssertUnwindSafe, catch_unwind};

use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::passes::fusion::NodeStepKind;
use tensorplay_compiler::{CompiledGraph, compile, compile_with, tp_compile};
use tensorplay_ir::graph::{Edge, Graph, GraphBuilder, Node, NodeKind};
use tensorplay_ir::{Device, OpClass, TensorMeta};
use tensorplay_runtime::autograd::no_grad;
use tensorplay_runtime::library::{self, CpuLauncher, LaunchArg, ProgramArg, wrap_triton};
use tensorplay_runtime::{DType, Error, Result, Tensor};

fn ramp(shape: &[usize], dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 3.0).collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Bit-identical (NaN-aware) float contents, same dtype and shape.
/// Equal within the numerics contract for f64 chains of transcendentals (compiled training runs
/// generated kernels, not eager's).
fn near(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && match (a.to_vec_f64(), b.to_vec_f64()) {
            (Ok(x), Ok(y)) => x.iter().zip(&y).all(|(p, q)| {
                (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-12 * (1.0 + q.abs())
            }),
            _ => false,
        }
}

fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.dtype() == b.dtype()
        && a.shape() == b.shape()
        && match (a.to_vec_f64(), b.to_vec_f64()) {
            (Ok(x), Ok(y)) => x
                .iter()
                .zip(&y)
                .all(|(p, q)| (p.is_nan() && q.is_nan()) || p.to_bits() == q.to_bits()),
            _ => false,
        }
}

/// Asserts that `f` returns an error, and does not panic.
fn assert_err<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Error {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(_)) => panic!("{what}: expected an error, got Ok"),
        Ok(Err(e)) => e,
        Err(_) => panic!("{what}: panicked instead of returning an error"),
    }
}

// ---- guards and re-capture ---------------------------------------------------------------------

#[test]
fn one_graph_serves_every_size_with_the_same_rank_and_dtype() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?.add_scalar(1.0)?.relu()?]));
    for n in [7usize, 33, 1000, 5, 70_000] {
        let (x, y) = (ramp(&[n], DType::F32), ramp(&[n], DType::F32).neg()?);
        let got = f.call(&[x.clone(), y.clone()])?;
        let want = x.mul(&y)?.add_scalar(1.0)?.relu()?;
        assert!(same_bits(&got[0], &want), "n={n}");
    }
    assert_eq!(f.num_compiled(), 1);
    Ok(())
}

#[test]
fn a_dtype_change_recaptures_and_the_old_graph_is_reused_later() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].exp()?.sub(&xs[0])?]));
    f.call(&[ramp(&[8], DType::F32)])?;
    assert_eq!(f.num_compiled(), 1);
    let y = f.call(&[ramp(&[8], DType::F64)])?;
    assert_eq!(f.num_compiled(), 2);
    assert_eq!(y[0].dtype(), DType::F64);
    // Back to f32 at another size: the first graph still accepts it.
    let z = f.call(&[ramp(&[19], DType::F32)])?;
    assert_eq!(f.num_compiled(), 2);
    assert_eq!((z[0].dtype(), z[0].shape()), (DType::F32, &[19usize][..]));
    // An integer input: the closure computes exp in f32, a third graph.
    let w = f.call(&[Tensor::from_vec(vec![1i64, 2, 3], &[3])?])?;
    assert_eq!(f.num_compiled(), 3);
    assert_eq!(w[0].dtype(), DType::F32);
    Ok(())
}

#[test]
fn a_rank_change_recaptures() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].neg()?.abs()?]));
    f.call(&[ramp(&[6], DType::F32)])?;
    let y = f.call(&[ramp(&[2, 3], DType::F32)])?;
    assert_eq!(f.num_compiled(), 2);
    assert!(same_bits(&y[0], &ramp(&[2, 3], DType::F32).abs()?));
    let z = f.call(&[ramp(&[], DType::F32)])?;
    assert_eq!(f.num_compiled(), 3);
    assert_eq!(z[0].shape(), &[] as &[usize]);
    f.call(&[ramp(&[4, 5], DType::F32)])?;
    assert_eq!(f.num_compiled(), 3);
    Ok(())
}

#[test]
fn a_size_one_pattern_change_recaptures() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?.mul_scalar(2.0)?]));
    let run = |a: &[usize], b: &[usize]| -> Result<()> {
        let (x, y) = (ramp(a, DType::F32), ramp(b, DType::F32).mul_scalar(0.5)?);
        let got = f.call(&[x.clone(), y.clone()])?;
        assert!(
            same_bits(&got[0], &x.add(&y)?.mul_scalar(2.0)?),
            "{a:?} + {b:?}"
        );
        Ok(())
    };
    run(&[3, 4], &[3, 4])?;
    assert_eq!(f.num_compiled(), 1);
    run(&[5, 7], &[5, 7])?; // other sizes, same pattern
    assert_eq!(f.num_compiled(), 1);
    run(&[3, 4], &[3, 1])?; // the second input now broadcasts along dim 1
    assert_eq!(f.num_compiled(), 2);
    run(&[3, 4], &[1, 4])?;
    assert_eq!(f.num_compiled(), 3);
    run(&[6, 2], &[6, 1])?; // the [s, 1] graph again
    assert_eq!(f.num_compiled(), 3);
    run(&[1, 1], &[1, 1])?;
    assert_eq!(f.num_compiled(), 4);
    Ok(())
}

#[test]
fn static_capture_recompiles_for_every_new_size() -> Result<()> {
    let f = compile_with(
        |xs: &[Tensor]| Ok(vec![xs[0].sqrt()?]),
        CaptureOptions { dynamic: false },
    );
    f.call(&[ramp(&[4], DType::F64).abs()?])?;
    f.call(&[ramp(&[4], DType::F64).abs()?])?;
    assert_eq!(f.num_compiled(), 1);
    f.call(&[ramp(&[5], DType::F64).abs()?])?;
    assert_eq!(f.num_compiled(), 2);
    Ok(())
}

#[test]
fn a_size_guard_failure_names_the_op_whose_inputs_disagree() -> Result<()> {
    let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    let g = capture(
        |xs| Ok(vec![xs[0].add(&xs[1])?]),
        &[m.clone(), m],
        CaptureOptions { dynamic: true },
    )?;
    let c = tp_compile(&g)?;
    let (x5, x7) = (ramp(&[5], DType::F32), ramp(&[7], DType::F32));
    let e = assert_err("sizes that cannot broadcast", || {
        c.run(&[x5.clone(), x7.clone()])
    });
    assert_eq!(
        e.compile_kind(),
        Some(tensorplay_ir::CompileKind::Guard),
        "{e}"
    );
    let msg = e.to_string();
    for needle in [
        "input 1 dim 0",
        "expected s0 (= 5",
        "got 7",
        "add",
        "[5]",
        "[7]",
    ] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
    // `guard_failure` says the same (what `TP_LOGS=recompiles` prints for each kept graph).
    let why = c
        .guard_failure(&[x5.clone(), x7])
        .expect("a size guard fails");
    assert!(
        why.contains("input 1 dim 0") && why.contains("add"),
        "{why}"
    );
    assert_eq!(c.guard_failure(&[x5.clone(), x5]), None);
    Ok(())
}

/// `TP_LOGS` is read once per process, so this test runs its body again in a child process of
/// this test binary with `TP_LOGS` set, and checks the child's stderr.
#[test]
fn tp_logs_warns_once_about_unknown_words_and_recompiles_name_the_guard() -> Result<()> {
    const NAME: &str = "tp_logs_warns_once_about_unknown_words_and_recompiles_name_the_guard";
    if std::env::var_os("TP_LOGS_TEST_CHILD").is_some() {
        let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?]));
        let (x5, x6, x7) = (
            ramp(&[5], DType::F32),
            ramp(&[6], DType::F32),
            ramp(&[7], DType::F32),
        );
        f.call(&[x5.clone(), x5.clone()])?;
        f.call(&[x6.clone(), x6])?; // dynamic sizes: the same graph
        // Sizes that disagree: graph 1's guard fails (logged), and eager's error comes back.
        assert!(f.call(&[x5, x7]).is_err());
        // A size read as a plain integer is a size guard on the input.
        let g = compile(|xs: &[Tensor]| {
            let n = xs[0].size(0)?;
            Ok(vec![xs[0].mul_scalar(n as f64)?])
        });
        g.call(&[ramp(&[4], DType::F32)])?;
        g.call(&[ramp(&[9], DType::F32)])?;
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| Error::Unsupported {
        op: "test".into(),
        msg: e.to_string(),
    })?;
    let out = std::process::Command::new(exe)
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env("TP_LOGS", "recompiles, recompile,NoSuchStage")
        .env("TP_LOGS_TEST_CHILD", "1")
        .output()
        .map_err(|e| Error::Unsupported {
            op: "test".into(),
            msg: e.to_string(),
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stderr}");
    assert_eq!(
        stderr.matches("TP_LOGS names no stage").count(),
        1,
        "one warning: {stderr}"
    );
    assert!(
        stderr.contains("`recompile`, `nosuchstage`")
            && stderr.contains("graph, fusion, clif, fallback, aot, recompiles"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "graph 1: size guard failed: input 1 dim 0: expected s0 (= 5 for these inputs), got 7"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("graph 1: size guard failed: input 0 dim 0: expected 4, got 9"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn a_compiled_graph_rejects_inputs_its_guards_do_not_accept() -> Result<()> {
    let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    let g = capture(
        |xs| Ok(vec![xs[0].mul(&xs[1])?]),
        &[m.clone(), m],
        CaptureOptions { dynamic: true },
    )?;
    let c = tp_compile(&g)?;
    let x = ramp(&[9], DType::F32);
    assert!(c.accepts(&[x.clone(), x.clone()]));
    let e = assert_err("one input missing", || c.run(std::slice::from_ref(&x)));
    assert!(e.to_string().contains("2 inputs"), "{e}");
    let e = assert_err("a wrong dtype", || {
        c.run(&[x.clone(), ramp(&[9], DType::F64)])
    });
    assert!(e.to_string().contains("guard failed for input 1"), "{e}");
    assert_err("a wrong rank", || {
        c.run(&[x.clone(), ramp(&[3, 3], DType::F32)])
    });
    assert_err("a size-1 dim where the graph has a dynamic one", || {
        c.run(&[x.clone(), ramp(&[1], DType::F32)])
    });
    assert_err("interpret checks the guards too", || {
        c.interpret(std::slice::from_ref(&x))
    });
    // Shapes that broadcast eagerly but not as the graph was captured are refused, not miscomputed.
    assert!(!c.accepts(&[ramp(&[3], DType::F32), ramp(&[1], DType::F32)]));
    Ok(())
}

#[test]
fn closure_errors_are_errors_and_compile_nothing() -> Result<()> {
    let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].add(&xs[1])?]));
    let e = assert_err("incompatible shapes", || {
        f.call(&[ramp(&[3], DType::F32), ramp(&[4], DType::F32)])
    });
    assert!(
        matches!(e, Error::Shape { .. }) || e.to_string().contains("add"),
        "{e}"
    );
    assert_eq!(f.num_compiled(), 0);
    assert_err("a bool subtraction", || {
        let g = compile(|xs: &[Tensor]| Ok(vec![xs[0].sub(&xs[0])?]));
        g.call(&[Tensor::from_vec(vec![true, false], &[2])?])
    });
    // An out-of-range reduction dim and a bad gelu attribute.
    assert_err("sum over dim 3 of a 1-d tensor", || {
        compile(|xs: &[Tensor]| Ok(vec![xs[0].sum(&[3], false)?])).call(&[ramp(&[4], DType::F32)])
    });
    assert_err("gelu('fast')", || {
        compile(|xs: &[Tensor]| Ok(vec![xs[0].gelu("fast")?])).call(&[ramp(&[4], DType::F32)])
    });
    // The closure still works for good inputs afterwards.
    let y = f.call(&[ramp(&[3], DType::F32), ramp(&[3], DType::F32)])?;
    assert_eq!(y[0].shape(), &[3]);
    assert_eq!(f.num_compiled(), 1);
    Ok(())
}

#[test]
fn outputs_that_are_inputs_duplicates_or_constants() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        let y = xs[0].exp()?;
        let c = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.mul_scalar(2.0)?;
        Ok(vec![xs[0].clone(), y.clone(), y, c])
    });
    let x = ramp(&[3], DType::F32);
    let out = f.call(std::slice::from_ref(&x))?;
    assert_eq!(out.len(), 4);
    assert!(same_bits(&out[0], &x));
    assert!(same_bits(&out[1], &out[2]));
    assert_eq!(out[3].to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
    let none = compile(|_: &[Tensor]| Ok(vec![]));
    assert!(none.call(&[x])?.is_empty());
    Ok(())
}

// ---- bad graphs through tp_compile -------------------------------------------------------------

/// `x -> exp -> neg -> output`, returning the graph and the exp and neg nodes.
fn exp_neg() -> Result<(
    Graph,
    tensorplay_ir::NodeId,
    tensorplay_ir::NodeId,
    tensorplay_ir::NodeId,
)> {
    let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    let mut b = GraphBuilder::new();
    let x = b.input("x", m.clone());
    let a = b.op(
        "tp::exp",
        OpClass::Elementwise,
        vec![x.into()],
        vec![m.clone()],
    )?;
    let n = b.op("tp::neg", OpClass::Elementwise, vec![a[0].into()], vec![m])?;
    b.output(&n)?;
    Ok((b.finish()?, x.node, a[0].node, n[0].node))
}

#[test]
fn a_cycle_is_a_compile_error() -> Result<()> {
    let (mut g, _, exp, neg) = exp_neg()?;
    g.add_edge(neg, exp, Edge::Order)?;
    let e = assert_err("a cycle through an order edge", || tp_compile(&g));
    assert!(e.to_string().contains("cycle"), "{e}");
    // A data cycle: exp reads neg's output in a second slot it does not have, and neg feeds back.
    let (mut g, _, exp, neg) = exp_neg()?;
    g.add_edge(
        neg,
        exp,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )?;
    assert_err("a data cycle", || tp_compile(&g));
    Ok(())
}

#[test]
fn a_dangling_argument_is_a_compile_error() -> Result<()> {
    let (mut g, x, exp, _) = exp_neg()?;
    assert!(g.remove_edge(
        x,
        exp,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0
        }
    ));
    let e = assert_err("a dangling argument", || tp_compile(&g));
    assert!(e.to_string().contains("dangling"), "{e}");
    // Removing the producer node entirely.
    let (mut g, _, exp, _) = exp_neg()?;
    g.remove_node(exp)?;
    assert_err("a removed producer", || tp_compile(&g));
    Ok(())
}

#[test]
fn missing_outputs_are_a_compile_error() -> Result<()> {
    let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    let mut b = GraphBuilder::new();
    let x = b.input("x", m.clone());
    b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m])?;
    let unfinished = b.graph().clone();
    let e = assert_err("no output sink", || tp_compile(&unfinished));
    assert!(e.to_string().contains("no outputs"), "{e}");
    // Two sinks.
    let (mut g, x, _, _) = exp_neg()?;
    let second = g.add_node(Node::new(NodeKind::Output { arity: 1 }, vec![]));
    g.add_edge(
        x,
        second,
        Edge::Data {
            arg: 0,
            item: 0,
            src_output: 0,
        },
    )?;
    assert_err("two output sinks", || tp_compile(&g));
    // An empty graph.
    assert_err("an empty graph", || tp_compile(&Graph::new()));
    Ok(())
}

#[test]
fn unknown_ops_and_wrong_metadata_are_errors() -> Result<()> {
    let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
    let mut b = GraphBuilder::new();
    let x = b.input("x", m.clone());
    let y = b.op(
        "nowhere::missing_op",
        OpClass::Opaque,
        vec![x.into()],
        vec![m.clone()],
    )?;
    b.output(&y)?;
    let g = b.finish()?;
    let e = assert_err("an unregistered op", || {
        tp_compile(&g).and_then(|c| c.run(&[ramp(&[4], DType::F32)]))
    });
    assert!(e.to_string().contains("nowhere::missing_op"), "{e}");
    // An add that claims an i32 result for f32 operands: rejected at compile or run time.
    let mut b = GraphBuilder::new();
    let x = b.input("x", m.clone());
    let y = b.op(
        "tp::add",
        OpClass::Elementwise,
        vec![x.into(), x.into()],
        vec![TensorMeta::new(&[4], DType::I32, Device::Cpu)],
    )?;
    b.output(&y)?;
    let g = b.finish()?;
    assert_err("metadata disagreeing with eager's dtype rules", || {
        tp_compile(&g).and_then(|c| c.run(&[ramp(&[4], DType::F32)]))
    });
    Ok(())
}

// ---- observability -----------------------------------------------------------------------------

#[test]
fn explain_names_every_barrier_and_its_reason_and_dot_has_clusters() -> Result<()> {
    let scale = library::custom_op("capi_explain::scale_")
        .arg_names(&["x"])
        .mutates_args(["x"])
        .build(|x: Tensor| -> Result<()> {
            x.mul_scalar_(2.0)?;
            Ok(())
        })?;
    let kernel = wrap_triton(CpuLauncher::new("capi_copy_kernel", |pid, args| {
        let (ProgramArg::Tensor(x), ProgramArg::Tensor(out)) = (&args[0], &args[1]) else {
            return Err(Error::argument(
                "capi_copy_kernel",
                "args",
                "(x, out)",
                format!("{args:?}"),
            ));
        };
        let i = pid[0] as usize;
        // SAFETY: contiguous f32 tensors of equal length, one program per element.
        unsafe { out.write::<f32>(i, x.read::<f32>(i)) };
        Ok(())
    }));
    let copy = library::triton_op("capi_explain::copy")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            let x = x.contiguous()?;
            let out = Tensor::empty(x.shape(), DType::F32);
            kernel.launch(
                [x.numel() as u32, 1, 1],
                &[LaunchArg::In(x), LaunchArg::Out(out.clone())],
            )?;
            Ok(out)
        })?;
    copy.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let with_grad = library::custom_op("capi_explain::double")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
    with_grad.register_autograd(
        |_, g| Ok(vec![g[0].as_ref().map(|g| g.mul_scalar(2.0)).transpose()?]),
        None,
    )?;
    with_grad.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let (s, c, w) = (scale.clone(), copy.clone(), with_grad.clone());
    let f = compile(move |xs: &[Tensor]| {
        let a = xs[0].exp()?.add_scalar(1.0)?;
        s.call_values(&[a.clone().into()])?;
        let b = c.call1(&[a.neg()?.into()])?;
        let d = w.call1(&[b.abs()?.into()])?;
        let m = d.reshape(&[2, 2])?.matmul(&xs[1])?;
        Ok(vec![m.relu()?.sum_all()?])
    });
    let out = f.call(&[ramp(&[4], DType::F32), ramp(&[2, 2], DType::F32)])?;
    assert_eq!(out[0].shape(), &[] as &[usize]);
    let g = f.latest().expect("a compiled graph");
    let text = g.explain();
    let barriers: Vec<_> = g
        .plan()
        .node_steps
        .values()
        .filter(|s| s.kind == NodeStepKind::Barrier)
        .collect();
    assert!(barriers.len() >= 4, "{text}");
    for b in &barriers {
        assert!(
            !b.reason.is_empty() && text.contains(&b.reason),
            "reason `{}` missing:\n{text}",
            b.reason
        );
    }
    for reason in ["mutates x", "triton op", "custom autograd"] {
        assert!(text.contains(reason), "`{reason}` missing:\n{text}");
    }
    assert!(text.contains("tp::matmul"), "{text}");
    let dot = g.to_dot();
    assert!(dot.contains("subgraph cluster_"), "{dot}");
    assert!(dot.starts_with("digraph"), "{dot}");
    // The compiled result equals eager's.
    let (x, y) = (ramp(&[4], DType::F32), ramp(&[2, 2], DType::F32));
    let want = {
        let a = x.exp()?.add_scalar(1.0)?;
        scale.call_values(&[a.clone().into()])?;
        let b = copy.call1(&[a.neg()?.into()])?;
        let d = with_grad.call1(&[b.abs()?.into()])?;
        d.reshape(&[2, 2])?.matmul(&y)?.relu()?.sum_all()?
    };
    let got = f.call(&[x, y])?;
    assert!(
        got[0].allclose(&want, 1e-5, 1e-5)?,
        "{:?} vs {:?}",
        got[0].to_vec_f64()?,
        want.to_vec_f64()?
    );
    Ok(())
}

#[test]
fn a_graph_with_no_fusible_op_has_no_kernels() -> Result<()> {
    let m = TensorMeta::new(&[3, 3], DType::F64, Device::Cpu);
    let g = capture(
        |xs| Ok(vec![xs[0].matmul(&xs[0])?]),
        &[m],
        CaptureOptions::default(),
    )?;
    let c: CompiledGraph = tp_compile(&g)?;
    assert_eq!(c.num_kernels(), 0);
    let x = ramp(&[3, 3], DType::F64);
    assert!(same_bits(
        &c.run(std::slice::from_ref(&x))?[0],
        &x.matmul(&x)?
    ));
    assert!(!c.to_dot().contains("subgraph cluster_"));
    Ok(())
}

// ---- autograd ----------------------------------------------------------------------------------

#[test]
fn gradients_through_a_compiled_function_equal_eager() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = xs[0].exp()?.mul(&xs[1])?.sin()?.add(&xs[0].tanh()?)?;
        Ok(vec![y.sum_all()?, y.amax(&[-1], false)?])
    };
    let f = compile(body);
    let (x0, w0) = (
        ramp(&[3, 5], DType::F64),
        ramp(&[5], DType::F64).mul_scalar(0.5)?,
    );
    // Eager, on leaves of their own (clones share the autograd state; detach() does not).
    let (x, w) = (
        x0.detach().requires_grad_(true)?,
        w0.detach().requires_grad_(true)?,
    );
    let eager = body(&[x.clone(), w.clone()])?;
    eager[0].add(&eager[1].sum_all()?)?.backward()?;
    // Compiled: inputs requiring grad get a compiled forward and a compiled backward.
    let (xc, wc) = (
        x0.detach().requires_grad_(true)?,
        w0.detach().requires_grad_(true)?,
    );
    let got = f.call(&[xc.clone(), wc.clone()])?;
    assert!(got[0].requires_grad() && got[1].requires_grad());
    assert_eq!(got[0].grad_fn_name(), Some("compiled_backward"));
    got[0].add(&got[1].sum_all()?)?.backward()?;
    for (k, (g, e)) in got.iter().zip(&eager).enumerate() {
        assert!(near(g, e), "output {k}");
    }
    let (gx, ex) = (xc.grad().expect("x.grad"), x.grad().expect("eager x.grad"));
    let (gw, ew) = (wc.grad().expect("w.grad"), w.grad().expect("eager w.grad"));
    assert!(near(&gx, &ex) && near(&gw, &ew));
    // Only one input requiring grad.
    let xc = x0.detach().requires_grad_(true)?;
    let got = f.call(&[xc.clone(), w0.clone()])?;
    got[0].backward()?;
    let x = x0.detach().requires_grad_(true)?;
    body(&[x.clone(), w0.clone()])?[0].backward()?;
    assert!(near(
        &xc.grad().expect("x.grad"),
        &x.grad().expect("eager x.grad")
    ));
    // Under no_grad, or without inputs requiring grad, the result has no history.
    {
        let _g = no_grad();
        let out = f.call(&[x0.detach().requires_grad_(true)?, w0.clone()])?;
        assert!(!out[0].requires_grad());
    }
    assert!(!x0.requires_grad(), "detach() leaves the original alone");
    let out = f.call(&[x0.clone(), w0.clone()])?;
    assert!(!out[0].requires_grad());
    // Two training graphs (which inputs require grad is part of their guards) and one
    // forward graph.
    assert_eq!(f.num_compiled(), 3);
    Ok(())
}

#[test]
fn gradients_through_a_fused_reduction_and_softmax() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![
            xs[0].mul_scalar(3.0)?.softmax(-1)?.mul(&xs[0])?.sum_all()?,
        ])
    };
    let f = compile(body);
    let x0 = ramp(&[4, 6], DType::F64);
    let x = x0.detach().requires_grad_(true)?;
    body(std::slice::from_ref(&x))?[0].backward()?;
    let xc = x0.detach().requires_grad_(true)?;
    f.call(std::slice::from_ref(&xc))?[0].backward()?;
    assert!(near(
        &xc.grad().expect("grad"),
        &x.grad().expect("eager grad")
    ));
    Ok(())
}

// ---- layouts, views and threads ----------------------------------------------------------------

#[test]
fn one_graph_serves_every_stride_layout_of_its_inputs() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![xs[0].mul(&xs[1])?.sub_scalar(0.5)?.abs()?])
    };
    let f = compile(body);
    let a = ramp(&[4, 6], DType::F32);
    let b = ramp(&[6, 4], DType::F32).t()?;
    let c = ramp(&[1, 6], DType::F32).expand(&[4, 6])?;
    let d = ramp(&[4, 12], DType::F32).slice(1, Some(1), None, 2)?;
    for (x, y) in [(&a, &a), (&a, &b), (&b, &c), (&c, &d), (&d, &d), (&c, &c)] {
        let got = f.call(&[x.clone(), y.clone()])?;
        assert!(same_bits(&got[0], &body(&[x.clone(), y.clone()])?[0]));
    }
    assert_eq!(f.num_compiled(), 1);
    Ok(())
}

#[test]
fn views_of_inputs_and_of_intermediates_as_outputs() -> Result<()> {
    let body = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = xs[0].exp()?.add_scalar(1.0)?;
        Ok(vec![
            xs[0].t()?,
            y.reshape(&[6, 2])?,
            y.t()?.neg()?,
            y.select(0, 1)?,
        ])
    };
    let f = compile(body);
    for x in [ramp(&[3, 4], DType::F32), ramp(&[4, 3], DType::F32).t()?] {
        let got = f.call(std::slice::from_ref(&x))?;
        let want = body(std::slice::from_ref(&x))?;
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), w.shape(), "output {k}");
            assert!(g.allclose(w, 1e-6, 0.0)?, "output {k}");
        }
    }
    Ok(())
}

#[test]
fn empty_inputs_run() -> Result<()> {
    let f = compile(|xs: &[Tensor]| {
        Ok(vec![
            xs[0].exp()?.add(&xs[1])?,
            xs[0].sum(&[-1], false)?,
            xs[1].amax(&[0], true)?,
        ])
    });
    let (x, y) = (ramp(&[3, 0], DType::F32), ramp(&[3, 0], DType::F32));
    let out = f.call(&[x, y])?;
    assert_eq!(out[0].shape(), &[3, 0]);
    assert_eq!(out[1].to_vec::<f32>()?, vec![0.0; 3]);
    assert_eq!(out[2].shape(), &[1, 0]);
    Ok(())
}

#[test]
fn one_compiled_function_called_from_many_threads() -> Result<()> {
    let f = std::sync::Arc::new(compile(|xs: &[Tensor]| {
        Ok(vec![xs[0].tanh()?.mul(&xs[0])?.sum(&[-1], false)?])
    }));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || -> Result<()> {
                for n in [5usize, 64, 1000] {
                    let x = ramp(&[3, n + t], DType::F64);
                    let got = f.call(std::slice::from_ref(&x))?;
                    let want = x.tanh()?.mul(&x)?.sum(&[-1], false)?;
                    assert!(got[0].allclose(&want, 1e-12, 1e-12)?, "thread {t} n={n}");
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().expect("no thread panics")?;
    }
    assert!(f.num_compiled() >= 1);
    Ok(())
}

/// Bool clamp bounds (valid in eager) lower like numbers.
#[test]
fn bool_clamp_bounds_compile() -> tensorplay_runtime::Result<()> {
    use tensorplay_runtime::Tensor;
    let f = tensorplay_compiler::compile(|xs: &[Tensor]| {
        Ok(vec![xs[0].clamp(Some(false), Some(true))?])
    });
    let x = Tensor::from_vec(vec![-2i64, 0, 1, 5], &[4])?;
    let want = x.clamp(Some(false), Some(true))?;
    let got = f.call(&[x])?.remove(0);
    assert_eq!(got.dtype(), want.dtype());
    assert!(got.equal(&want)?);
    Ok(())
}
