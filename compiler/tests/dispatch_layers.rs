//! Capture is the bottom layer of the dispatcher, so compiled functions see what autocast, vmap
//! and autograd do: compiled outside autocast and called inside gives eager's result;
//! `compile(vmap(f))` and `vmap(compile(f))` work for builtin and custom ops; inputs that require
//! grad give eager's gradients.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::compile;
use tensorplay_ir::{DType, Device, TensorMeta};
use tensorplay_runtime::autocast::autocast;
use tensorplay_runtime::library::{self, VmapInfo};
use tensorplay_runtime::vmap::vmap;
use tensorplay_runtime::{Error, Result, Tensor, Value};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_seeded(shape, DType::F32, seed).unwrap()
}

fn assert_close(what: &str, a: &[Tensor], b: &[Tensor]) {
    assert_eq!(a.len(), b.len(), "{what}: output count");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.shape(), y.shape(), "{what}: shape");
        assert_eq!(x.dtype(), y.dtype(), "{what}: dtype");
        assert!(x.allclose(y, 1e-5, 1e-5).unwrap(), "{what}: {x:?} vs {y:?}");
    }
}

fn mlp(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].matmul(&xs[1])?.add(&xs[2])?.relu()?.sum_all()?])
}

#[test]
fn compiled_outside_autocast_and_called_inside_matches_eager() -> Result<()> {
    let c = compile(mlp);
    let xs = [randn(&[4, 8], 1), randn(&[8, 3], 2), randn(&[3], 3)];
    assert_close("outside", &c.call(&xs)?, &mlp(&xs)?);
    {
        let _ac = autocast("cpu", DType::BF16)?;
        let want = mlp(&xs)?;
        let got = c.call(&xs)?;
        assert_close("inside", &got, &want);
        let text = c.latest().unwrap().graph().to_string();
        assert!(
            text.contains("tp::matmul(%0, %1) : bf16["),
            "the matmul ran in bf16: {text}"
        );
    }
    assert_eq!(
        c.num_compiled(),
        2,
        "the autocast state is part of the guards"
    );
    assert_close("outside again", &c.call(&xs)?, &mlp(&xs)?);
    assert_eq!(c.num_compiled(), 2);
    Ok(())
}

#[test]
fn autocast_casts_are_recorded_in_the_graph() -> Result<()> {
    let m = |s: &[usize]| TensorMeta::new(s, DType::F32, Device::Cpu);
    let _ac = autocast("cpu", DType::BF16)?;
    let g = capture(
        mlp,
        &[m(&[4, 8]), m(&[8, 3]), m(&[3])],
        CaptureOptions::default(),
    )?;
    let text = g.to_string();
    assert!(text.contains("bf16[4, 3]"), "{text}");
    Ok(())
}

fn dot(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].mul(&xs[1])?.sum_all()?.exp()?])
}

#[test]
fn compile_of_vmap_and_vmap_of_compile_with_builtin_ops() -> Result<()> {
    let (a, b) = (randn(&[5, 3], 4), randn(&[3], 5));
    let eager = vmap(dot, vec![Some(0), None], vec![0])(&[a.clone(), b.clone()])?;

    let cv = compile(|xs: &[Tensor]| vmap(dot, vec![Some(0), None], vec![0])(xs));
    assert_close("compile(vmap)", &cv.call(&[a.clone(), b.clone()])?, &eager);
    assert!(
        cv.latest().unwrap().num_kernels() >= 1,
        "the batched ops were fused"
    );

    let c = compile(dot);
    let vc = vmap(|xs: &[Tensor]| c.call(xs), vec![Some(0), None], vec![0]);
    assert_close("vmap(compile)", &vc(&[a.clone(), b.clone()])?, &eager);
    // Batch dim 1, and nested inside another vmap.
    let a2 = randn(&[3, 5], 6);
    let want = vmap(dot, vec![Some(1), None], vec![0])(&[a2.clone(), b.clone()])?;
    let vc1 = vmap(|xs: &[Tensor]| c.call(xs), vec![Some(1), None], vec![0]);
    assert_close("vmap(compile), in_dim 1", &vc1(&[a2, b.clone()])?, &want);
    let a3 = randn(&[2, 5, 3], 7);
    let inner = |xs: &[Tensor]| vmap(|ys: &[Tensor]| c.call(ys), vec![Some(0), None], vec![0])(xs);
    let got = vmap(inner, vec![Some(0), None], vec![0])(&[a3.clone(), b.clone()])?;
    let want = vmap(
        |xs: &[Tensor]| vmap(dot, vec![Some(0), None], vec![0])(xs),
        vec![Some(0), None],
        vec![0],
    )(&[a3, b])?;
    assert_close("vmap(vmap(compile))", &got, &want);
    Ok(())
}

#[test]
fn compile_of_vmap_and_vmap_of_compile_with_custom_ops() -> Result<()> {
    // Traced through (its body is builtin ops), with a vmap rule, and per-example.
    let traced = library::custom_op("dl_vmap::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    let rule_calls = Arc::new(AtomicUsize::new(0));
    let ruled = library::custom_op("dl_vmap::scale")
        .arg_names(&["x", "alpha"])
        .build(|x: Tensor, alpha: f64| -> Result<Tensor> { x.mul_scalar(alpha) })?;
    let rc = rule_calls.clone();
    ruled.register_vmap(
        move |_: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
            rc.fetch_add(1, Ordering::SeqCst);
            let (Value::Tensor(x), Value::Float(alpha)) = (&args[0], &args[1]) else {
                return Err(Error::unsupported("scale rule", "unexpected arguments"));
            };
            Ok((vec![x.mul_scalar(*alpha)?], vec![in_dims[0]]))
        },
    )?;
    let opaque = library::custom_op("dl_vmap::host_norm")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let s: f32 = x.to_vec::<f32>()?.iter().map(|v| v * v).sum();
            Ok(Tensor::scalar(s.sqrt()))
        })?;
    opaque.register_fake(|x: Tensor| -> Result<Tensor> { x.sum_all() })?;

    let (t, r, o) = (traced.clone(), ruled.clone(), opaque.clone());
    let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let s = r.call1(&[xs[0].clone().into(), Value::Float(3.0)])?;
        let w = t.call1(&[s.clone().into(), xs[1].clone().into()])?;
        let n = o.call1(&[s.into()])?;
        Ok(vec![w.add(&n)?])
    };
    let (a, b) = (randn(&[4, 3], 8), randn(&[3], 9));
    let eager = vmap(&f, vec![Some(0), None], vec![0])(&[a.clone(), b.clone()])?;
    let rules_eager = rule_calls.load(Ordering::SeqCst);
    assert!(rules_eager >= 1);

    let f2 = f.clone();
    let cv = compile(move |xs: &[Tensor]| vmap(&f2, vec![Some(0), None], vec![0])(xs));
    assert_close(
        "compile(vmap) custom",
        &cv.call(&[a.clone(), b.clone()])?,
        &eager,
    );
    assert!(
        rule_calls.load(Ordering::SeqCst) > rules_eager,
        "capture ran the vmap rule"
    );

    let c = compile(f);
    let vc = vmap(|xs: &[Tensor]| c.call(xs), vec![Some(0), None], vec![0]);
    assert_close("vmap(compile) custom", &vc(&[a, b])?, &eager);
    Ok(())
}

#[test]
fn inputs_that_require_grad_get_eager_gradients() -> Result<()> {
    let f =
        |xs: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![xs[0].mul(&xs[1])?.exp()?.sum_all()?]) };
    let c = compile(f);
    let grads = |run: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>| -> Result<Vec<Tensor>> {
        let a = randn(&[6], 10).requires_grad_(true)?;
        let b = randn(&[6], 11).requires_grad_(true)?;
        run(&[a.clone(), b.clone()])?[0].backward()?;
        Ok(vec![a.grad().unwrap(), b.grad().unwrap()])
    };
    assert_close("grads", &grads(&|xs| c.call(xs))?, &grads(&f)?);
    Ok(())
}

#[test]
fn custom_ops_are_autocast_under_compile_like_builtins() -> Result<()> {
    // Traced through (a default-slot kernel of builtin ops) and opaque (a cpu kernel + fake).
    let traced = library::custom_op("dl_ac::mm")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<Tensor> { a.matmul(&b) })?;
    traced.register_autocast("cpu", DType::BF16)?;
    let opaque = library::custom_op("dl_ac::host_sum")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> {
            let s: f32 = x.to_dtype(DType::F32)?.to_vec::<f32>()?.iter().sum();
            Tensor::scalar(s).to_dtype(x.dtype())
        })?;
    opaque.register_fake(|x: Tensor| -> Result<Tensor> { x.sum_all() })?;
    opaque.register_autocast("cpu", DType::BF16)?;
    let (t, o) = (traced.clone(), opaque.clone());
    let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = t.call1(&[xs[0].clone().into(), xs[1].clone().into()])?;
        Ok(vec![y.clone(), o.call1(&[y.to_dtype(DType::F32)?.into()])?])
    };
    let xs = [randn(&[4, 8], 12), randn(&[8, 3], 13)];
    let c = compile(f.clone());
    assert_close("outside", &c.call(&xs)?, &f(&xs)?);
    let _ac = autocast("cpu", DType::BF16)?;
    let want = f(&xs)?;
    assert_eq!(
        want[0].dtype(),
        DType::BF16,
        "eager casts the custom op's inputs"
    );
    assert_eq!(want[1].dtype(), DType::BF16);
    let got = c.call(&xs)?;
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.dtype(), w.dtype());
        assert_eq!(g.shape(), w.shape());
        assert!(g.allclose(w, 1e-2, 1e-2)?, "{g:?} vs {w:?}");
    }
    assert_eq!(c.num_compiled(), 2, "recompiled for the autocast region");
    let text = c.latest().unwrap().graph().to_string();
    assert!(
        text.contains("tp::to_dtype(%x0, dtype=bf16) : bf16["),
        "the cast was recorded: {text}"
    );
    assert!(text.contains("dl_ac::host_sum"), "the opaque node: {text}");
    Ok(())
}

#[test]
fn under_capture_builtin_and_custom_ops_pass_every_layer_and_stop_at_the_backend() -> Result<()> {
    use tensorplay_runtime::dispatch::{layer_names, trace_layers};
    let scale = library::custom_op("dl_trace::scale")
        .arg_names(&["x", "alpha"])
        .build(|x: Tensor, alpha: f64| -> Result<Tensor> { x.mul_scalar(alpha) })?;
    let s = scale.clone();
    let f = move |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let y = s.call1(&[xs[0].clone().into(), Value::Float(2.0)])?;
        Ok(vec![y.exp()?])
    };
    let m = TensorMeta::new(&[3], DType::F32, Device::Cpu);
    let (g, events) = trace_layers(|| capture(f, &[m], CaptureOptions::default()));
    let text = g?.to_string();
    let layers = |op: &str| -> Vec<&str> {
        events
            .iter()
            .filter(|e| e.op == op)
            .map(|e| e.layer)
            .collect()
    };
    // The custom op reaches the capture backend, which traces its body (a `mul`) through the
    // stack again; exp goes straight down.
    assert_eq!(layers("dl_trace::scale"), layer_names());
    assert_eq!(layers("tp::exp"), layer_names());
    assert_eq!(layers("tp::mul"), layer_names(), "{events:?}");
    let first = |op: &str| events.iter().position(|e| e.op == op);
    assert!(first("dl_trace::scale") < first("tp::mul"));
    assert!(text.contains("tp::exp"), "{text}");
    Ok(())
}
