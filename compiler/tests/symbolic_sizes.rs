//! Sizes under compile: a compiled function never returns a result that differs from eager at
//! any input size, and an input that makes eager fail makes the compiled call fail with the same
//! error. Sizes the closure reads as plain integers are guarded (a change recompiles).

use proptest::prelude::*;
use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::{CompiledFn, compile};
use tensorplay_ir::{DType, Device, TensorMeta};
use tensorplay_runtime::{Result, Tensor};

type Body = fn(&[Tensor]) -> Result<Vec<Tensor>>;

fn ramp(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
    Tensor::from_vec(v, shape).unwrap()
}

/// Eager and compiled agree on `inputs`: the same values (to a few ulp: transcendental functions
/// meet the numerics contract, not bit equality), or the same error.
fn agree(name: &str, f: Body, c: &CompiledFn, inputs: &[Tensor]) {
    let want = f(inputs);
    let got = c.call(inputs);
    let shapes: Vec<_> = inputs.iter().map(|t| t.shape().to_vec()).collect();
    match (want, got) {
        (Ok(w), Ok(g)) => {
            assert_eq!(w.len(), g.len(), "{name} at {shapes:?}: output count");
            for (a, b) in w.iter().zip(&g) {
                assert_eq!(a.shape(), b.shape(), "{name} at {shapes:?}: shape");
                assert_eq!(a.dtype(), b.dtype(), "{name} at {shapes:?}: dtype");
                let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
                let same = a.iter().zip(&b).all(|(p, q)| {
                    (p - q).abs() <= 1e-6 * p.abs().max(1.0) || (p.is_nan() && q.is_nan())
                });
                assert!(same, "{name} at {shapes:?}: {a:?} vs {b:?}");
            }
        }
        (Err(w), Err(g)) => {
            assert_eq!(
                w.to_string(),
                g.to_string(),
                "{name} at {shapes:?}: errors differ"
            )
        }
        (Ok(_), Err(g)) => panic!("{name} at {shapes:?}: eager works, compiled fails: {g}"),
        (Err(w), Ok(_)) => panic!("{name} at {shapes:?}: eager fails ({w}), compiled works"),
    }
}

fn narrow_from_shape(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].shape()[0];
    Ok(vec![xs[0].narrow(0, 1, n.saturating_sub(1))?.exp()?])
}

fn narrow_fixed(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].narrow(0, 0, 5)?.neg()?])
}

fn select_fixed(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].select(0, 5)?.mul_scalar(2.0)?])
}

fn branch_on_size(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = if xs[0].size(0)? > 4 {
        xs[0].exp()?
    } else {
        xs[0].neg()?
    };
    Ok(vec![y.add(&xs[1])?])
}

fn reshape_from_shape(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let s = xs[0].shape().to_vec();
    let y = xs[0].reshape(&[s[0] * s[1]])?;
    Ok(vec![y.relu()?.sum(&[0], false)?])
}

fn mean_and_softmax(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let m = xs[0].mean(&[-1], true)?;
    Ok(vec![xs[0].sub(&m)?.softmax(-1)?])
}

fn expand_and_cat(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].shape()[0];
    let row = xs[1].unsqueeze(0)?.expand(&[n, xs[1].shape()[0]])?;
    Ok(vec![Tensor::cat(&[xs[0].clone(), row], 0)?.tanh()?])
}

fn full_from_size(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].size(0)?;
    let ones = Tensor::full(&[n], 2.0, DType::F32);
    Ok(vec![xs[0].mul(&ones)?])
}

fn flatten_and_narrow(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = xs[0].flatten(0, -1)?;
    let k = y.numel() / 2;
    Ok(vec![y.narrow(0, k, y.numel() - k)?.abs()?])
}

fn narrow_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].sym_size(0)?;
    Ok(vec![xs[0].narrow(0, 1, n - 1)?.exp()?])
}

fn select_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].sym_size(0)?;
    Ok(vec![xs[0].select(0, n - 1)?.mul_scalar(2.0)?])
}

fn view_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let s = xs[0].sym_shape();
    let y = xs[0].view_sym(&[s[0] * s[1]])?;
    let half = y.sym_size(0)? / 2;
    Ok(vec![y.narrow(0, half, y.sym_size(0)? - half)?.relu()?])
}

fn expand_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].sym_size(0)?;
    let row = xs[1].unsqueeze(0)?.expand_sym(&[n, xs[1].sym_size(0)?])?;
    Ok(vec![xs[0].add(&row)?.tanh()?])
}

fn branch_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = if xs[0].sym_size(0)? > 4 {
        xs[0].exp()?
    } else {
        xs[0].neg()?
    };
    Ok(vec![y.add(&xs[1])?])
}

fn full_sym(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = xs[0].sym_size(0)?;
    let twos = Tensor::full_sym(&[n], 2.0, DType::F32)?;
    Ok(vec![
        xs[0]
            .mul(&twos)?
            .add(&Tensor::ones_sym(&[n], DType::F32)?)?,
    ])
}

fn reads_layout(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let y = xs[0].t()?;
    let z = if y.is_contiguous() {
        y.exp()?
    } else {
        y.contiguous()?.neg()?
    };
    Ok(vec![z.mul_scalar(y.strides()[0] as f64)?])
}

/// Sizes read from the results of reductions, softmax, matmul, cat and stack stay symbolic.
fn sizes_of_reductions(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let rows = xs[0].sum(&[1], false)?; // [a]
    let (vals, _) = xs[0].softmax(-1)?.max_dim(1, true)?; // [a, 1]
    let n = rows.sym_size(0)?;
    let half = vals.sym_size(0)? / 2;
    Ok(vec![
        rows.narrow(0, half, n - half)?,
        xs[0].argmax(Some(1), false)?.to_dtype(DType::F32)?,
    ])
}

fn sizes_of_matmul(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let g = xs[0].matmul(&xs[0].t()?)?; // [a, a]
    let n = g.sym_size(1)?;
    Ok(vec![g.narrow(1, 1, n - 1)?.tanh()?])
}

fn sizes_of_cat(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let c = Tensor::cat(&[xs[0].clone(), xs[0].neg()?], 0)?; // [2a, b]
    let s = Tensor::stack(&[xs[0].clone(), xs[0].exp()?], 1)?; // [a, 2, b]
    let n = c.sym_size(0)?;
    let m = s.sym_size(0)?;
    Ok(vec![c.narrow(0, m, n - m)?, s.select(1, 1)?])
}

fn plain(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].mul(&xs[1])?.add_scalar(1.0)?.relu()?])
}

#[test]
fn the_issue_examples_match_eager() -> Result<()> {
    // Captured on [8], called on [12]: 11 elements, as eager.
    let c = compile(narrow_from_shape);
    c.call(&[ramp(&[8])])?;
    let y = c.call(&[ramp(&[12])])?;
    assert_eq!(y[0].shape(), &[11]);
    assert_eq!(
        c.num_compiled(),
        2,
        "the read size is guarded: a new size recompiles"
    );

    // Captured on [8], called on [3]: eager's error, naming narrow.
    let c = compile(narrow_fixed);
    c.call(&[ramp(&[8])])?;
    let e = c.call(&[ramp(&[3])]).unwrap_err().to_string();
    let want = narrow_fixed(&[ramp(&[3])]).unwrap_err().to_string();
    assert_eq!(e, want);
    assert!(e.contains("narrow"), "{e}");

    // select(0, 5) captured on [8, 2], run on [3, 2]: eager's error, naming select.
    let c = compile(select_fixed);
    c.call(&[ramp(&[8, 2])])?;
    let e = c.call(&[ramp(&[3, 2])]).unwrap_err().to_string();
    assert_eq!(e, select_fixed(&[ramp(&[3, 2])]).unwrap_err().to_string());
    assert!(e.contains("select"), "{e}");
    Ok(())
}

#[test]
fn closures_that_never_read_sizes_stay_dynamic() -> Result<()> {
    let c = compile(plain);
    for n in [3, 17, 64, 5] {
        agree("plain", plain, &c, &[ramp(&[n, 2]), ramp(&[n, 2])]);
    }
    assert_eq!(c.num_compiled(), 1);
    let g = c.latest().unwrap();
    assert!(g.graph().size_guards().is_empty());
    Ok(())
}

#[test]
fn a_size_read_becomes_a_guard_of_the_graph() -> Result<()> {
    let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
    let g = capture(narrow_from_shape, &[m], CaptureOptions { dynamic: true })?;
    let guards: Vec<String> = g.size_guards().iter().map(|g| g.to_string()).collect();
    assert!(guards.iter().any(|s| s.ends_with("== [8]")), "{guards:?}");
    // A graph run directly on inputs that break a guard says so.
    let c = tensorplay_compiler::tp_compile(&g)?;
    let e = c.run(&[ramp(&[12])]).unwrap_err().to_string();
    assert!(e.contains("size guard") && e.contains("[12]"), "{e}");
    assert_eq!(c.run(&[ramp(&[8])])?[0].shape(), &[7]);
    Ok(())
}

#[test]
fn branching_on_a_size_recompiles_when_the_branch_changes() -> Result<()> {
    let c = compile(branch_on_size);
    for n in [6, 2, 6, 2] {
        agree("branch", branch_on_size, &c, &[ramp(&[n]), ramp(&[n])]);
    }
    assert_eq!(c.num_compiled(), 2);
    Ok(())
}

#[test]
fn symbolic_sizes_flow_into_ops_without_recompiling() -> Result<()> {
    // The issue's first example written with sym_size: one graph serves every size.
    let c = compile(narrow_sym);
    for n in [8, 12, 5, 2, 31] {
        agree("narrow_sym", narrow_sym, &c, &[ramp(&[n])]);
    }
    assert_eq!(c.num_compiled(), 1);
    let y = c.call(&[ramp(&[12])])?;
    assert_eq!(y[0].shape(), &[11]);
    let g = c.latest().unwrap();
    let text = g.graph().to_string();
    assert!(text.contains("f32[s0 - 1]"), "{text}");
    assert!(g.explain().contains("s0 - 1"), "{}", g.explain());
    assert!(g.graph().size_guards().is_empty());

    for (name, body) in [("select_sym", select_sym as Body), ("view_sym", view_sym)] {
        let c = compile(body);
        for n in [8, 3, 12, 2] {
            agree(name, body, &c, &[ramp(&[n, 3])]);
        }
        assert_eq!(c.num_compiled(), 1, "{name}");
    }
    let c = compile(expand_sym);
    for n in [8, 3, 12] {
        agree("expand_sym", expand_sym, &c, &[ramp(&[n, 3]), ramp(&[3])]);
    }
    assert_eq!(c.num_compiled(), 1);
    Ok(())
}

#[test]
fn reductions_matmul_and_cat_have_symbolic_result_shapes() -> Result<()> {
    for (name, body) in [
        ("sizes_of_reductions", sizes_of_reductions as Body),
        ("sizes_of_matmul", sizes_of_matmul),
        ("sizes_of_cat", sizes_of_cat),
    ] {
        let c = compile(body);
        for a in [6, 3, 11, 2] {
            agree(name, body, &c, &[ramp(&[a, 4])]);
        }
        assert_eq!(c.num_compiled(), 1, "{name} recompiled");
        let g = c.latest().unwrap();
        assert!(g.graph().size_guards().is_empty(), "{name}: {}", g.graph());
    }
    let m = TensorMeta::new(&[6, 4], DType::F32, Device::Cpu);
    let text = capture(
        sizes_of_matmul,
        std::slice::from_ref(&m),
        CaptureOptions { dynamic: true },
    )?
    .to_string();
    assert!(text.contains("f32[s0, s0]"), "{text}");
    let text = capture(sizes_of_cat, &[m], CaptureOptions { dynamic: true })?.to_string();
    assert!(text.contains("f32[2*s0, s1]"), "{text}");
    assert!(text.contains("f32[s0, 2, s1]"), "{text}");
    Ok(())
}

#[test]
fn matmul_of_sizes_that_differ_later_fails_like_eager() -> Result<()> {
    // Captured where the contracted sizes happen to be equal: the graph guards them, so other
    // sizes give eager's error (or a recompiled graph), never a wrong result.
    fn mm(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![xs[0].matmul(&xs[1])?.relu()?])
    }
    let c = compile(mm);
    agree("mm", mm, &c, &[ramp(&[3, 4]), ramp(&[4, 5])]);
    agree("mm", mm, &c, &[ramp(&[3, 4]), ramp(&[6, 5])]);
    agree("mm", mm, &c, &[ramp(&[7, 6]), ramp(&[6, 2])]);
    Ok(())
}

#[test]
fn a_factory_of_symbolic_sizes_is_a_graph_node_not_a_constant() -> Result<()> {
    // 100 elements: more than a captured constant may hold.
    let c = compile(full_sym);
    for n in [100, 8, 300] {
        agree("full_sym", full_sym, &c, &[ramp(&[n])]);
    }
    assert_eq!(c.num_compiled(), 1);
    let text = c.latest().unwrap().graph().to_string();
    assert!(
        text.contains("tp::expand") && text.contains("f32[s0]"),
        "{text}"
    );
    Ok(())
}

#[test]
fn layout_reads_are_guarded() -> Result<()> {
    let m = TensorMeta::new(&[4, 3], DType::F32, Device::Cpu);
    let g = capture(reads_layout, &[m], CaptureOptions { dynamic: true })?;
    assert!(!g.size_guards().is_empty());
    let c = compile(reads_layout);
    for (a, b) in [(4, 3), (5, 3), (4, 6)] {
        agree("reads_layout", reads_layout, &c, &[ramp(&[a, b])]);
    }
    Ok(())
}

#[test]
fn branching_on_a_symbolic_size_installs_a_guard() -> Result<()> {
    let c = compile(branch_sym);
    for n in [6, 7, 2, 3, 9] {
        agree("branch_sym", branch_sym, &c, &[ramp(&[n]), ramp(&[n])]);
    }
    // One graph per side of `n > 4`.
    assert_eq!(c.num_compiled(), 2);
    let g = c.latest().unwrap();
    assert!(
        g.explain().contains("s0 - 4 <= 0") || g.explain().contains("s0 - 4 > 0"),
        "{}",
        g.explain()
    );
    Ok(())
}

#[test]
fn symbolic_graphs_print_and_parse_back() -> Result<()> {
    let m = TensorMeta::new(&[8, 3], DType::F32, Device::Cpu);
    let g = capture(view_sym, &[m], CaptureOptions { dynamic: true })?;
    let text = g.to_string();
    assert!(text.contains("f32[s0*s1]"), "{text}");
    assert!(text.contains("s0*s1 // 2"), "{text}");
    let class_of = |name: &str| {
        tensorplay_runtime::library::registry()
            .find(name)
            .map(|op| op.class())
    };
    let back = tensorplay_ir::Graph::parse(&text, class_of)?;
    assert_eq!(back.to_string(), text);
    Ok(())
}

const BODIES: &[(&str, Body, usize)] = &[
    ("narrow_sym", narrow_sym, 1),
    ("select_sym", select_sym, 2),
    ("view_sym", view_sym, 2),
    ("expand_sym", expand_sym, 2),
    ("branch_sym", branch_sym, 1),
    ("full_sym", full_sym, 1),
    ("reads_layout", reads_layout, 2),
    ("narrow_from_shape", narrow_from_shape, 1),
    ("narrow_fixed", narrow_fixed, 1),
    ("select_fixed", select_fixed, 2),
    ("branch_on_size", branch_on_size, 1),
    ("reshape_from_shape", reshape_from_shape, 2),
    ("mean_and_softmax", mean_and_softmax, 2),
    ("expand_and_cat", expand_and_cat, 2),
    ("full_from_size", full_from_size, 1),
    ("flatten_and_narrow", flatten_and_narrow, 2),
    ("plain", plain, 2),
    ("sizes_of_reductions", sizes_of_reductions, 2),
    ("sizes_of_matmul", sizes_of_matmul, 2),
    ("sizes_of_cat", sizes_of_cat, 2),
];

/// Inputs for body `i` at sizes (a, b): rank-1 bodies take [a] (twice where they need two).
fn inputs_for(name: &str, rank: usize, a: usize, b: usize) -> Vec<Tensor> {
    match (name, rank) {
        ("branch_on_size" | "branch_sym", _) => vec![ramp(&[a]), ramp(&[a])],
        ("expand_sym", _) => vec![ramp(&[a, b]), ramp(&[b])],
        ("expand_and_cat", _) => vec![ramp(&[a, b]), ramp(&[b])],
        ("plain", _) => vec![ramp(&[a, b]), ramp(&[a, b])],
        (_, 1) => vec![ramp(&[a])],
        _ => vec![ramp(&[a, b])],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The invariant, at many sizes: each body is compiled once and called on a sequence of
    /// sizes (so graphs captured at one size meet others); every call agrees with eager.
    #[test]
    fn compiled_agrees_with_eager_at_every_size(
        sizes in proptest::collection::vec((0usize..13, 1usize..5), 1..6)
    ) {
        for &(name, body, rank) in BODIES {
            let c = compile(body);
            for &(a, b) in &sizes {
                agree(name, body, &c, &inputs_for(name, rank, a, b));
            }
        }
    }
}

fn with_unit_dims(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    // [n, 2] -> [n, 1, 2] and [1, n, 2]: size-1 dims inserted, broadcast back together.
    let (a, b) = (xs[0].unsqueeze(1)?, xs[1].unsqueeze(0)?);
    Ok(vec![a.add(&b)?.sum(&[1], false)?])
}

#[test]
fn unsqueeze_keeps_sizes_symbolic() -> Result<()> {
    let c = compile(with_unit_dims);
    for n in [3, 17, 5] {
        agree(
            "unsqueeze",
            with_unit_dims,
            &c,
            &[ramp(&[n, 2]), ramp(&[n, 2])],
        );
    }
    assert_eq!(c.num_compiled(), 1);
    assert!(c.latest().unwrap().graph().size_guards().is_empty());
    Ok(())
}

fn diagonal_sizes(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    // [a, 4]: the main diagonal has min(a, 4) elements, the one above min(a, 3), the one below
    // min(a - 1, 4); sizes read from them stay symbolic.
    let d = xs[0].diagonal(0, 0, 1)?;
    let above = xs[0].diagonal(1, 1, 0)?; // dims swapped: offset counts along dim 0
    let below = xs[0].diagonal(-1, 0, 1)?;
    let n = d.sym_size(0)?;
    Ok(vec![
        d.narrow(0, 1, n - 1)?.exp()?,
        above.mul_scalar(2.0)?,
        below.neg()?,
    ])
}

#[test]
fn diagonal_keeps_sizes_symbolic() -> Result<()> {
    let c = compile(diagonal_sizes);
    // Every diagonal has at least 2 elements (a length-1 result would be specialised as a
    // broadcastable dim, as any size 1 is).
    for a in [6, 3, 11, 5] {
        agree("diagonal", diagonal_sizes, &c, &[ramp(&[a, 4])]);
    }
    assert_eq!(c.num_compiled(), 1, "diagonal recompiled");
    let g = c.latest().unwrap();
    assert!(g.graph().size_guards().is_empty(), "{}", g.graph());
    let m = TensorMeta::new(&[6, 4], DType::F32, Device::Cpu);
    let text = capture(diagonal_sizes, &[m], CaptureOptions { dynamic: true })?.to_string();
    assert!(text.contains("min("), "{text}");
    Ok(())
}

fn indexing_body(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    use tensorplay_runtime::Idx;
    // x[:, 1:3], x[[2, 0], ::2] and x with x[0, [1, -1]] += 1 (the index tensor is a constant).
    let i = Tensor::from_vec(vec![2i64, 0], &[2])?;
    let j = Tensor::from_vec(vec![1i64, -1], &[2])?;
    let v = Tensor::from_vec(vec![1.0f32, 1.0], &[2])?;
    let x = &xs[0];
    Ok(vec![
        x.index(&[Idx::Full, Idx::range(1, 3)])?.exp()?,
        x.index(&[
            Idx::Tensor(i),
            Idx::Slice {
                start: None,
                end: None,
                step: 2,
            },
        ])?,
        x.index_put(&[Idx::Int(0), Idx::Tensor(j)], &v, true)?,
    ])
}

#[test]
fn indexing_compiles_and_data_dependent_sizes_refuse_capture() -> Result<()> {
    let c = compile(indexing_body);
    for a in [4, 3, 6] {
        agree("indexing", indexing_body, &c, &[ramp(&[a, 4])]);
    }
    // masked_select's size depends on the data: capturing it is an error naming the op.
    fn select_positive(xs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![xs[0].masked_select(&xs[0].gt_scalar(0.0)?)?])
    }
    let m = TensorMeta::new(&[3, 4], DType::F32, Device::Cpu);
    let e = capture(select_positive, &[m], CaptureOptions { dynamic: false })
        .expect_err("masked_select under capture")
        .to_string();
    assert!(
        e.contains("masked_select") && e.contains("depends on the data"),
        "{e}"
    );
    Ok(())
}

/// An opaque custom op's output sizes are bound to input sizes that equal them at capture (so
/// the graph stays size-generic), and the binding is checked: here the output `[2n]` equals the
/// other input's `[m]` at the first call only, and later sizes must not trust that.
#[test]
fn an_opaque_ops_output_sizes_bound_at_capture_are_checked() -> Result<()> {
    use tensorplay_runtime::library;
    let op = library::custom_op("sym_test::tile2")
        .arg_names(&["x", "y"])
        .device_types(&["cpu"]) // a device kernel: opaque under capture
        .build(|x: Tensor, _y: Tensor| -> Result<Tensor> { Tensor::cat(&[x.clone(), x], 0) })?;
    op.register_fake(|x: Tensor, _y: Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(
            &[x.shape()[0] * 2],
            x.dtype(),
            x.device(),
        ))
    })?;
    let o = op.clone();
    let body = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let t = o.call1(&[xs[0].clone().into(), xs[1].clone().into()])?;
        Ok(vec![t.exp()?, xs[1].neg()?])
    };
    let c = compile(body.clone());
    for (n, m) in [(8, 16), (8, 20), (10, 20), (5, 16), (8, 16)] {
        let inputs = [ramp(&[n]), ramp(&[m])];
        let want = body(&inputs)?;
        let got = c.call(&inputs)?;
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(w.shape(), g.shape(), "at n = {n}, m = {m}");
            assert_eq!(
                w.to_vec::<f32>()?,
                g.to_vec::<f32>()?,
                "at n = {n}, m = {m}"
            );
        }
    }
    // (8, 20) breaks the binding `2n = m` made at (8, 16) and recompiles; the second graph binds
    // nothing wrong again until (5, 16).
    assert!(c.num_compiled() >= 2, "{}", c.num_compiled());
    Ok(())
}
