//! Scenario suite of the custom-operator library (DESIGN.md §4), part 2: fake kernels
//! (`register_fake`, `impl_abstract`), autograd formulas (`register_autograd`) and implicit
//! autograd, autocast (`register_autocast` and the builtin policy), and triton ops
//! (`triton_op`, `wrap_triton`, grid launchers).
//!
//! Every test uses its own namespace (`lf_<test>`): the registry is global and tests run in
//! parallel in one process.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tensorplay_ir::OpClass;
use tensorplay_runtime::autocast::{active_dtype, any_active, autocast};
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck, no_grad};
use tensorplay_runtime::library::{
    self, AutogradCtx, CpuLauncher, CustomOpDef, GpuImage, GpuKernel, LaunchArg, ProgramArg,
    registry, wrap_triton,
};
use tensorplay_runtime::{DType, Device, Error, Result, Tensor, Value};

// ---- helpers ---------------------------------------------------------------------------------

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn tensor_at(args: &[Value], i: usize) -> Result<Tensor> {
    match args.get(i) {
        Some(Value::Tensor(t)) => Ok(t.clone()),
        other => Err(Error::argument(
            "test",
            format!("#{i}"),
            "a tensor",
            format!("{other:?}"),
        )),
    }
}

fn float_at(args: &[Value], i: usize) -> Result<f64> {
    match args.get(i) {
        Some(Value::Float(f)) => Ok(*f),
        other => Err(Error::argument(
            "test",
            format!("#{i}"),
            "a float",
            format!("{other:?}"),
        )),
    }
}

fn fake(shape: &[usize], dtype: DType, device: Device) -> Tensor {
    Tensor::empty_fake(shape, dtype, device)
}

fn assert_contains(err: &Error, needle: &str) {
    assert!(
        err.to_string().contains(needle),
        "`{err}` should mention `{needle}`"
    );
}

/// `ns::weighted_sum(Tensor x, Tensor weight) -> Tensor`, the seed's example.
fn weighted_sum(ns: &str) -> Result<CustomOpDef> {
    library::custom_op(&format!("{ns}::weighted_sum"))
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })
        .map(Into::into)
}

// ---- register_fake ---------------------------------------------------------------------------

#[test]
fn fake_kernel_computes_output_metadata() -> Result<()> {
    let op = library::custom_op("lf_fake_meta::rowsum")
        .arg_names(&["x", "dim"])
        .build(|x: Tensor, dim: i64| -> Result<Tensor> { x.sum(&[dim], false) })?;
    op.register_fake(|x: Tensor, dim: i64| -> Result<Tensor> {
        let mut shape = x.shape().to_vec();
        shape.remove(dim as usize);
        Ok(Tensor::empty_fake(&shape, x.dtype(), x.device()))
    })?;
    assert!(op.operator().has_fake());
    for device in [Device::Cpu, Device::Cuda(0), Device::Meta] {
        let y = op.call1(&[fake(&[4, 5, 6], DType::BF16, device).into(), 1i64.into()])?;
        assert!(y.is_fake());
        assert_eq!(y.shape(), &[4, 6]);
        assert_eq!(y.dtype(), DType::BF16);
        assert_eq!(y.device(), device);
        // No data behind it.
        assert!(y.to_vec_f64().is_err());
    }
    // The real kernel agrees on the metadata.
    let real = op.call1(&[Tensor::ones(&[4, 5, 6], DType::F32).into(), 1i64.into()])?;
    assert_eq!(real.shape(), &[4, 6]);
    assert!(!real.is_fake());
    Ok(())
}

#[test]
fn fake_kernel_made_of_builtin_ops() -> Result<()> {
    let op = weighted_sum("lf_fake_builtin")?;
    op.register_fake(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    let y = op.call1(&[
        fake(&[8], DType::F32, Device::Cuda(0)).into(),
        fake(&[8], DType::F32, Device::Cuda(0)).into(),
    ])?;
    assert!(y.is_fake());
    assert_eq!(
        (y.shape(), y.dtype(), y.device()),
        (&[][..], DType::F32, Device::Cuda(0))
    );
    // Broadcasting errors surface from the meta rules as shape errors.
    let err = op
        .call(&[
            fake(&[8], DType::F32, Device::Cpu).into(),
            fake(&[3], DType::F32, Device::Cpu).into(),
        ])
        .unwrap_err();
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    Ok(())
}

#[test]
fn register_fake_allow_override_false_refuses_a_second_registration() -> Result<()> {
    let op = weighted_sum("lf_fake_override")?;
    let scalar = |x: Tensor, _w: Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(&[], x.dtype(), x.device()))
    };
    let vector = |x: Tensor, _w: Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(&[7], x.dtype(), x.device()))
    };
    // The first registration is fine even with allow_override = false.
    library::register_fake("lf_fake_override::weighted_sum", scalar, None, false)?;
    let err =
        library::register_fake("lf_fake_override::weighted_sum", vector, None, false).unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    assert_contains(&err, "allow_override");
    let x = fake(&[3], DType::F32, Device::Cpu);
    assert_eq!(
        op.call1(&[x.clone().into(), x.clone().into()])?.shape(),
        &[] as &[usize]
    );
    // allow_override = true (and the method) replace it.
    library::register_fake(&op, vector, None, true)?;
    assert_eq!(
        op.call1(&[x.clone().into(), x.clone().into()])?.shape(),
        &[7]
    );
    op.register_fake(scalar)?;
    assert_eq!(
        op.call1(&[x.clone().into(), x.into()])?.shape(),
        &[] as &[usize]
    );
    Ok(())
}

#[test]
fn a_fake_kernel_that_reads_data_errors_clearly() -> Result<()> {
    let op = weighted_sum("lf_fake_reads")?;
    op.register_fake(|x: Tensor, _w: Tensor| -> Result<Tensor> {
        let data = x.to_vec::<f32>()?; // not allowed: fake tensors have no data
        Ok(Tensor::empty_fake(&[data.len()], x.dtype(), x.device()))
    })?;
    let x = fake(&[3], DType::F32, Device::Cpu);
    let err = op.call(&[x.clone().into(), x.into()]).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_contains(&err, "fake kernel must not read data");
    // item() too.
    let op2 = weighted_sum("lf_fake_reads2")?;
    op2.register_fake(|x: Tensor, _w: Tensor| -> Result<Tensor> {
        let n = x.sum_all()?.item::<f32>()?;
        Ok(Tensor::empty_fake(&[n as usize], x.dtype(), x.device()))
    })?;
    let x = fake(&[3], DType::F32, Device::Cpu);
    assert_contains(
        &op2.call(&[x.clone().into(), x.into()]).unwrap_err(),
        "no data",
    );
    Ok(())
}

#[test]
fn an_op_without_fake_kernel_on_fake_inputs_errors() -> Result<()> {
    let op = weighted_sum("lf_fake_missing")?;
    assert!(!op.operator().has_fake());
    for device in [Device::Cpu, Device::Meta] {
        let x = fake(&[3], DType::F32, device);
        let err = op.call(&[x.clone().into(), x.into()]).unwrap_err();
        assert!(matches!(err, Error::Lookup(_)), "{err:?}");
        assert_contains(&err, "lf_fake_missing::weighted_sum");
        assert_contains(&err, "register_fake");
    }
    // One fake input is enough to need the fake kernel.
    let err = op
        .call(&[
            Tensor::ones(&[3], DType::F32).into(),
            fake(&[3], DType::F32, Device::Cpu).into(),
        ])
        .unwrap_err();
    assert_contains(&err, "no fake kernel");
    Ok(())
}

#[test]
fn a_mutating_op_returning_nothing_needs_no_fake_kernel() -> Result<()> {
    let op = library::custom_op("lf_fake_mut::scale_")
        .arg_names(&["x", "s"])
        .mutates_args(["x"])
        .build(|x: Tensor, s: f64| -> Result<()> {
            let scaled = x.mul_scalar(s)?;
            x.copy_(&scaled)?;
            Ok(())
        })?;
    assert!(!op.operator().has_fake());
    for device in [Device::Cpu, Device::Cuda(0), Device::Meta] {
        let outs = op
            .def()
            .call(&[fake(&[3], DType::F32, device).into(), 2.0.into()])?;
        assert!(outs.is_empty());
    }
    // A mutating op that returns something does need one.
    let ret = library::custom_op("lf_fake_mut::scale_ret")
        .arg_names(&["x", "s"])
        .mutates_args(["x"])
        .build(|x: Tensor, s: f64| -> Result<Tensor> { x.mul_scalar(s) })?;
    assert!(
        ret.call_values(&[fake(&[3], DType::F32, Device::Cpu).into(), 2.0.into()])
            .is_err()
    );
    // Real calls still mutate.
    let x = f32s(&[1.0, 2.0]);
    op.call_values(&[x.clone().into(), 3.0.into()])?;
    assert_eq!(vals(&x), vec![3.0, 6.0]);
    Ok(())
}

#[test]
fn a_fake_kernel_returning_real_tensors_is_an_error() -> Result<()> {
    let op = weighted_sum("lf_fake_real")?;
    op.register_fake(|_x: Tensor, _w: Tensor| -> Result<Tensor> {
        Ok(Tensor::zeros(&[], DType::F32))
    })?;
    let x = fake(&[3], DType::F32, Device::Cpu);
    let err = op.call(&[x.clone().into(), x.into()]).unwrap_err();
    match &err {
        Error::Argument { arg, .. } => assert_eq!(arg, "fake kernel"),
        other => panic!("{other:?}"),
    }
    assert_contains(&err, "real tensor for output 0");
    Ok(())
}

#[test]
fn impl_abstract_is_an_alias_of_register_fake() -> Result<()> {
    library::define(
        "lf_impl_abstract::op(Tensor x, SymInt n) -> Tensor",
        None,
        None,
    )?;
    library::r#impl(
        "lf_impl_abstract::op",
        &["cpu"],
        |x: Tensor, n: i64| -> Result<Tensor> { x.reshape_infer(&[n, -1])?.clone_tensor() },
        None,
    )?;
    assert!(!registry().get("lf_impl_abstract::op")?.has_fake());
    library::impl_abstract(
        "lf_impl_abstract::op",
        |x: Tensor, n: i64| -> Result<Tensor> {
            Ok(Tensor::empty_fake(
                &[n as usize, x.numel() / n as usize],
                x.dtype(),
                x.device(),
            ))
        },
        None,
    )?;
    assert!(registry().get("lf_impl_abstract::op")?.has_fake());
    let y = tensorplay_runtime::ops::call(
        "lf_impl_abstract::op",
        &[fake(&[12], DType::F32, Device::Cpu).into(), 3i64.into()],
    )?;
    assert_eq!(y[0].shape(), &[3, 4]);
    // Overrides are allowed (the deprecated alias never refuses).
    library::impl_abstract(
        "lf_impl_abstract::op",
        |x: Tensor, _n: i64| -> Result<Tensor> {
            Ok(Tensor::empty_fake(&[1], x.dtype(), x.device()))
        },
        None,
    )?;
    let y = tensorplay_runtime::ops::call(
        "lf_impl_abstract::op",
        &[fake(&[12], DType::F32, Device::Cpu).into(), 3i64.into()],
    )?;
    assert_eq!(y[0].shape(), &[1]);
    assert!(
        library::impl_abstract(
            "lf_impl_abstract::missing",
            |x: Tensor| -> Result<Tensor> { Ok(x) },
            None
        )
        .is_err()
    );
    Ok(())
}

#[test]
fn register_fake_checks_arity_and_refuses_builtins() -> Result<()> {
    let op = weighted_sum("lf_fake_arity")?;
    let err = op
        .register_fake(|x: Tensor| -> Result<Tensor> { Ok(x) })
        .unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    assert_contains(&err, "takes 1 parameters");
    assert!(!op.operator().has_fake());
    let err = library::register_fake(
        "tp::add",
        |x: Tensor, _y: Tensor| -> Result<Tensor> { Ok(x) },
        None,
        true,
    )
    .unwrap_err();
    assert_contains(&err, "builtin");
    // Builtins have fake kernels from their meta rules.
    assert!(registry().get("tp::add")?.has_fake());
    Ok(())
}

// ---- register_autograd -----------------------------------------------------------------------

/// `ns::scaled_mul(Tensor x, Tensor w, float scale) -> Tensor` with a formula; `needs` records
/// what backward saw in `needs_input_grad`, `setups` counts setup_context runs.
fn scaled_mul(
    ns: &str,
    needs: Arc<Mutex<Vec<bool>>>,
    setups: Arc<AtomicUsize>,
) -> Result<CustomOpDef> {
    let op = library::custom_op(&format!("{ns}::scaled_mul"))
        .arg_names(&["x", "w", "scale"])
        .build(|x: Tensor, w: Tensor, scale: f64| -> Result<Tensor> {
            x.mul(&w)?.mul_scalar(scale)
        })?;
    op.register_autograd(
        move |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            let (x, w) = (&ctx.saved_tensors()[0], &ctx.saved_tensors()[1]);
            let Value::Float(scale) = ctx.value("scale")? else {
                return Err(Error::Autograd("scale is not a float".into()));
            };
            let g = grads[0].clone().expect("one output, used");
            needs.lock().clone_from(&ctx.needs_input_grad().to_vec());
            let gx = ctx.needs_input_grad()[0]
                .then(|| g.mul(w)?.mul_scalar(*scale))
                .transpose()?;
            let gw = ctx.needs_input_grad()[1]
                .then(|| g.mul(x)?.mul_scalar(*scale))
                .transpose()?;
            Ok(vec![gx, gw, None])
        },
        Some(Box::new(
            move |ctx: &mut AutogradCtx, inputs: &[Value], _outputs: &[Tensor]| -> Result<()> {
                setups.fetch_add(1, Ordering::SeqCst);
                let (x, w) = (tensor_at(inputs, 0)?, tensor_at(inputs, 1)?);
                ctx.save_for_backward(&[&x, &w]);
                ctx.save_value("scale", float_at(inputs, 2)?);
                Ok(())
            },
        )),
    )?;
    Ok(op.into())
}

#[test]
fn register_autograd_with_setup_context_saved_tensors_and_values() -> Result<()> {
    let needs = Arc::new(Mutex::new(vec![]));
    let setups = Arc::new(AtomicUsize::new(0));
    let op = scaled_mul("lf_ag_full", needs.clone(), setups.clone())?;
    assert!(op.operator().has_autograd());
    let x = f32s(&[1.0, 2.0, 3.0]).requires_grad_(true)?;
    let w = f32s(&[4.0, 5.0, 6.0]);
    let y = op.call1(&[x.clone().into(), w.clone().into(), 0.5.into()])?;
    assert_eq!(vals(&y), vec![2.0, 5.0, 9.0]);
    assert_eq!(y.grad_fn_name(), Some("lf_ag_full::scaled_mul"));
    y.sum_all()?.backward()?;
    assert_eq!(*needs.lock(), vec![true, false, false]);
    assert_eq!(vals(&x.grad().unwrap()), vec![2.0, 2.5, 3.0]);
    assert!(w.grad().is_none());
    // Both tensors requiring grad.
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    let w = f32s(&[3.0, 4.0]).requires_grad_(true)?;
    let y = op.call1(&[x.clone().into(), w.clone().into(), 2.0.into()])?;
    y.backward_with(&f32s(&[1.0, 10.0]))?;
    assert_eq!(*needs.lock(), vec![true, true, false]);
    assert_eq!(vals(&x.grad().unwrap()), vec![6.0, 80.0]);
    assert_eq!(vals(&w.grad().unwrap()), vec![2.0, 40.0]);
    assert_eq!(setups.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn register_autograd_formula_passes_gradcheck() -> Result<()> {
    let op = scaled_mul(
        "lf_ag_gradcheck",
        Arc::new(Mutex::new(vec![])),
        Arc::new(AtomicUsize::new(0)),
    )?;
    let x = Tensor::randn_seeded(&[3, 4], DType::F64, 1)?.requires_grad_(true)?;
    let w = Tensor::randn_seeded(&[3, 4], DType::F64, 2)?.requires_grad_(true)?;
    gradcheck(
        |xs| op.call1(&[xs[0].clone().into(), xs[1].clone().into(), 1.5.into()]),
        &[x, w],
        GradcheckOptions::default(),
    )
}

#[test]
fn setup_context_runs_only_when_grad_is_on_and_an_input_requires_grad() -> Result<()> {
    let setups = Arc::new(AtomicUsize::new(0));
    let op = scaled_mul("lf_ag_setups", Arc::new(Mutex::new(vec![])), setups.clone())?;
    let plain = f32s(&[1.0, 2.0]);
    let leaf = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    // Nothing requires grad.
    let y = op.call1(&[plain.clone().into(), plain.clone().into(), 1.0.into()])?;
    assert!(!y.requires_grad() && y.grad_fn_name().is_none());
    assert_eq!(setups.load(Ordering::SeqCst), 0);
    // Grad mode off.
    {
        let _g = no_grad();
        let y = op.call1(&[leaf.clone().into(), plain.clone().into(), 1.0.into()])?;
        assert!(!y.requires_grad());
    }
    assert_eq!(setups.load(Ordering::SeqCst), 0);
    // Grad on and an input requires grad: exactly once per call.
    op.call1(&[leaf.clone().into(), plain.clone().into(), 1.0.into()])?;
    assert_eq!(setups.load(Ordering::SeqCst), 1);
    op.call1(&[plain.clone().into(), leaf.clone().into(), 1.0.into()])?;
    assert_eq!(setups.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn backward_returning_the_wrong_gradient_count_is_an_error() -> Result<()> {
    let op = weighted_sum("lf_ag_count")?;
    op.register_autograd(|_ctx, grads| Ok(vec![grads[0].clone()]), None)?;
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    let y = op.call1(&[x.clone().into(), f32s(&[1.0, 1.0]).into()])?;
    let err = y.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd(_)), "{err:?}");
    assert_contains(&err, "returned 1 gradients, expected 2");
    assert_contains(&err, "lf_ag_count::weighted_sum");
    assert!(x.grad().is_none());
    Ok(())
}

#[test]
fn a_gradient_for_a_non_tensor_argument_is_an_error() -> Result<()> {
    let op = library::custom_op("lf_ag_nontensor::scale")
        .arg_names(&["x", "s"])
        .build(|x: Tensor, s: f64| -> Result<Tensor> { x.mul_scalar(s) })?;
    op.register_autograd(
        |_ctx, grads| Ok(vec![grads[0].clone(), grads[0].clone()]),
        None,
    )?;
    let x = f32s(&[1.0]).requires_grad_(true)?;
    let err = op.call1(&[x.into(), 2.0.into()])?.backward().unwrap_err();
    assert!(matches!(err, Error::Autograd(_)), "{err:?}");
    assert_contains(&err, "`s`, which is not a tensor");
    // A gradient for an optional tensor that was None is refused too.
    let opt = library::custom_op("lf_ag_nontensor::maybe_add")
        .arg_names(&["x", "b"])
        .build(|x: Tensor, b: Option<Tensor>| -> Result<Tensor> {
            match b {
                Some(b) => x.add(&b),
                None => x.clone_tensor(),
            }
        })?;
    opt.register_autograd(
        |_ctx, grads| Ok(vec![grads[0].clone(), grads[0].clone()]),
        None,
    )?;
    let x = f32s(&[1.0]).requires_grad_(true)?;
    let err = opt.call1(&[x.into(), Value::None])?.backward().unwrap_err();
    assert_contains(&err, "`b`, which was None");
    Ok(())
}

#[test]
fn register_autograd_on_a_mutating_op_is_an_error() -> Result<()> {
    let op = library::custom_op("lf_ag_mut::fill_")
        .arg_names(&["x", "v"])
        .mutates_args(["x"])
        .build(|x: Tensor, v: f64| -> Result<()> {
            x.fill_(v)?;
            Ok(())
        })?;
    let err = op
        .register_autograd(|_ctx, g| Ok(g.to_vec()), None)
        .unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err:?}");
    assert_contains(&err, "mutates its inputs (x)");
    let err = library::register_autograd("lf_ag_mut::fill_", |_ctx, g| Ok(g.to_vec()), None, None)
        .unwrap_err();
    assert_contains(&err, "not supported");
    assert!(!op.operator().has_autograd());
    // Builtins take no formula either.
    assert!(library::register_autograd("tp::mul", |_ctx, g| Ok(g.to_vec()), None, None).is_err());
    Ok(())
}

#[test]
fn a_missing_saved_value_surfaces_in_backward() -> Result<()> {
    let op = weighted_sum("lf_ag_missing_value")?;
    op.register_autograd(
        |ctx, _grads| {
            ctx.value("nothing_saved")?;
            Ok(vec![None, None])
        },
        None,
    )?;
    let x = f32s(&[1.0]).requires_grad_(true)?;
    let err = op
        .call1(&[x.into(), f32s(&[1.0]).into()])?
        .backward()
        .unwrap_err();
    assert!(matches!(err, Error::Lookup(_)), "{err:?}");
    assert_contains(&err, "nothing_saved");
    Ok(())
}

#[test]
fn a_formula_replaces_the_kernels_own_graph() -> Result<()> {
    // The kernel is made of builtin ops, but with a formula they record nothing: the output's
    // node is the custom op's, and the formula (which doubles the true gradient) is what runs.
    let op = weighted_sum("lf_ag_replaces")?;
    let ran = Arc::new(AtomicUsize::new(0));
    let ran2 = ran.clone();
    op.register_autograd(
        move |ctx, grads| {
            ran2.fetch_add(1, Ordering::SeqCst);
            let w = &ctx.saved_tensors()[0];
            let g = grads[0].clone().unwrap();
            Ok(vec![Some(w.mul(&g)?.mul_scalar(2.0)?), None])
        },
        Some(Box::new(
            |ctx: &mut AutogradCtx, inputs: &[Value], _: &[Tensor]| -> Result<()> {
                let w = tensor_at(inputs, 1)?;
                ctx.save_for_backward(&[&w]);
                Ok(())
            },
        )),
    )?;
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    let y = op.call1(&[x.clone().into(), f32s(&[3.0, 4.0]).into()])?;
    assert_eq!(y.grad_fn_name(), Some("lf_ag_replaces::weighted_sum"));
    y.backward()?;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(vals(&x.grad().unwrap()), vec![6.0, 8.0]);
    Ok(())
}

#[test]
fn multi_output_formula_sees_none_for_unused_outputs() -> Result<()> {
    let op = library::custom_op("lf_ag_multi::split")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<(Tensor, Tensor)> {
            Ok((x.mul_scalar(2.0)?, x.mul_scalar(3.0)?))
        })?;
    let seen = Arc::new(Mutex::new(vec![]));
    let seen2 = seen.clone();
    op.register_autograd(
        move |_ctx, grads| {
            seen2
                .lock()
                .clone_from(&grads.iter().map(Option::is_some).collect::<Vec<_>>());
            let mut g = Tensor::zeros(&[2], DType::F32);
            if let Some(g0) = &grads[0] {
                g = g.add(&g0.mul_scalar(2.0)?)?;
            }
            if let Some(g1) = &grads[1] {
                g = g.add(&g1.mul_scalar(3.0)?)?;
            }
            Ok(vec![Some(g)])
        },
        None,
    )?;
    let x = f32s(&[1.0, 1.0]).requires_grad_(true)?;
    let outs = op.call((&x,))?;
    outs.1.sum_all()?.backward()?;
    assert_eq!(*seen.lock(), vec![false, true]);
    assert_eq!(vals(&x.grad().unwrap()), vec![3.0, 3.0]);
    Ok(())
}

#[test]
fn implicit_autograd_through_builtin_ops() -> Result<()> {
    let op = weighted_sum("lf_ag_implicit")?;
    assert!(!op.operator().has_autograd());
    let x = f32s(&[1.0, 2.0, 3.0]).requires_grad_(true)?;
    let w = f32s(&[0.5, -1.0, 2.0]).requires_grad_(true)?;
    let y = op.call1(&[x.clone().into(), w.clone().into()])?;
    assert!(y.requires_grad());
    // The graph is the builtin ops' (sum over mul), not a custom node.
    assert!(
        y.grad_fn_name()
            .is_some_and(|n| !n.contains("weighted_sum")),
        "{:?}",
        y.grad_fn_name()
    );
    y.backward()?;
    assert_eq!(vals(&x.grad().unwrap()), vec![0.5, -1.0, 2.0]);
    assert_eq!(vals(&w.grad().unwrap()), vec![1.0, 2.0, 3.0]);
    let a = Tensor::randn_seeded(&[5], DType::F64, 7)?.requires_grad_(true)?;
    let b = Tensor::randn_seeded(&[5], DType::F64, 8)?.requires_grad_(true)?;
    gradcheck(
        |xs| op.call1(&[xs[0].clone().into(), xs[1].clone().into()]),
        &[a, b],
        GradcheckOptions::default(),
    )
}

#[test]
fn a_kernel_computing_on_raw_data_leaves_no_grad_history() -> Result<()> {
    let op = library::custom_op("lf_ag_raw::square")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let data: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| v * v).collect();
            Tensor::from_vec(data, x.shape())
        })?;
    let x = f32s(&[2.0, 3.0]).requires_grad_(true)?;
    let y = op.call1(&[x.clone().into()])?;
    assert_eq!(vals(&y), vec![4.0, 9.0]);
    assert!(!y.requires_grad());
    assert!(y.grad_fn_name().is_none());
    assert!(y.sum_all()?.backward().is_err());
    assert!(x.grad().is_none());
    Ok(())
}

// ---- autocast --------------------------------------------------------------------------------

/// `ns::probe(Tensor a, Tensor b, Tensor c, Tensor i) -> Tensor` recording the dtypes its
/// kernels (real and fake) see.
fn dtype_probe(ns: &str, seen: Arc<Mutex<Vec<DType>>>) -> Result<CustomOpDef> {
    let seen_fake = seen.clone();
    let op = library::custom_op(&format!("{ns}::probe"))
        .arg_names(&["a", "b", "c", "i"])
        .build(
            move |a: Tensor, b: Tensor, c: Tensor, i: Tensor| -> Result<Tensor> {
                *seen.lock() = vec![a.dtype(), b.dtype(), c.dtype(), i.dtype()];
                Ok(Tensor::zeros(&[1], DType::F32))
            },
        )?;
    op.register_fake(
        move |a: Tensor, b: Tensor, c: Tensor, i: Tensor| -> Result<Tensor> {
            *seen_fake.lock() = vec![a.dtype(), b.dtype(), c.dtype(), i.dtype()];
            Ok(Tensor::empty_fake(&[1], DType::F32, a.device()))
        },
    )?;
    Ok(op.into())
}

fn probe_args(device: Option<Device>) -> Vec<Value> {
    let make = |dtype: DType| match device {
        None => Tensor::ones(&[2], dtype),
        Some(d) => fake(&[2], dtype, d),
    };
    vec![
        make(DType::F32).into(),
        make(DType::F64).into(),
        make(DType::BF16).into(),
        make(DType::I64).into(),
    ]
}

#[test]
fn register_autocast_casts_floating_inputs_inside_the_region_only() -> Result<()> {
    let seen = Arc::new(Mutex::new(vec![]));
    let op = dtype_probe("lf_ac_table", seen.clone())?;
    op.register_autocast("cpu", DType::F16)?;
    let untouched = vec![DType::F32, DType::F64, DType::BF16, DType::I64];
    // Outside autocast nothing changes.
    op.call(probe_args(None))?;
    assert_eq!(*seen.lock(), untouched);
    {
        let _ac = autocast("cpu", DType::BF16)?;
        op.call(probe_args(None))?;
        // f32 and bf16 -> the registered f16 (not the region's bf16); f64 and ints untouched.
        assert_eq!(
            *seen.lock(),
            vec![DType::F16, DType::F64, DType::F16, DType::I64]
        );
        // Fake cpu tensors are cast the same way.
        op.call(probe_args(Some(Device::Cpu)))?;
        assert_eq!(
            *seen.lock(),
            vec![DType::F16, DType::F64, DType::F16, DType::I64]
        );
    }
    op.call(probe_args(None))?;
    assert_eq!(*seen.lock(), untouched);
    Ok(())
}

#[test]
fn autocast_leaves_tensors_on_other_devices_alone() -> Result<()> {
    let seen = Arc::new(Mutex::new(vec![]));
    let op = dtype_probe("lf_ac_devices", seen.clone())?;
    op.register_autocast("cpu", DType::F16)?;
    let untouched = vec![DType::F32, DType::F64, DType::BF16, DType::I64];
    // A cpu region, tensors on cuda: no cast.
    {
        let _ac = autocast("cpu", DType::BF16)?;
        op.call(probe_args(Some(Device::Cuda(0))))?;
        assert_eq!(*seen.lock(), untouched);
    }
    // A cuda region without a cuda rule: no cast either.
    {
        let _ac = autocast("cuda", DType::F16)?;
        op.call(probe_args(Some(Device::Cuda(0))))?;
        assert_eq!(*seen.lock(), untouched);
        op.call(probe_args(None))?; // cpu tensors, no cpu region
        assert_eq!(*seen.lock(), untouched);
    }
    // With a cuda rule, a cuda region casts cuda tensors.
    op.register_autocast("cuda", DType::BF16)?;
    {
        let _ac = autocast("cuda", DType::F16)?;
        op.call(probe_args(Some(Device::Cuda(1))))?;
        assert_eq!(
            *seen.lock(),
            vec![DType::BF16, DType::F64, DType::BF16, DType::I64]
        );
    }
    Ok(())
}

#[test]
fn autocast_is_off_inside_the_kernel() -> Result<()> {
    let inside = Arc::new(Mutex::new(None));
    let inside2 = inside.clone();
    let op = library::custom_op("lf_ac_off::mm")
        .arg_names(&["a", "b"])
        .build(move |a: Tensor, b: Tensor| -> Result<Tensor> {
            *inside2.lock() = Some((any_active(), active_dtype(Device::Cpu)));
            a.matmul(&b)
        })?;
    op.register_autocast("cpu", DType::F32)?;
    let a = Tensor::ones(&[2, 2], DType::F32);
    let _ac = autocast("cpu", DType::BF16)?;
    // A builtin matmul here would run in bf16 ...
    assert_eq!(a.matmul(&a)?.dtype(), DType::BF16);
    // ... but inside the kernel autocast is off, so it keeps the kernel's (f32) inputs.
    let y = op.call1(&[a.clone().into(), a.clone().into()])?;
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(vals(&y), vec![2.0; 4]);
    assert_eq!(*inside.lock(), Some((false, None)));
    // The region is back after the call.
    assert_eq!(active_dtype(Device::Cpu), Some(DType::BF16));
    // bf16 inputs are cast up to the registered f32 first.
    let h = Tensor::ones(&[2, 2], DType::BF16);
    assert_eq!(op.call1(&[h.clone().into(), h.into()])?.dtype(), DType::F32);
    Ok(())
}

#[test]
fn autocast_casts_are_differentiable() -> Result<()> {
    let op = weighted_sum("lf_ac_grad")?;
    op.register_autocast("cpu", DType::F64)?;
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    let w = f32s(&[3.0, 4.0]);
    let y = {
        let _ac = autocast("cpu", DType::BF16)?;
        op.call1(&[x.clone().into(), w.into()])?
    };
    assert_eq!(y.dtype(), DType::F64);
    y.backward()?;
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(vals(&g), vec![3.0, 4.0]);
    Ok(())
}

#[test]
fn register_autocast_errors() -> Result<()> {
    let op = weighted_sum("lf_ac_err")?;
    for device in ["default", "CompositeExplicitAutograd", "tpu", "cuda:0"] {
        let err = op.register_autocast(device, DType::F16).unwrap_err();
        assert!(matches!(err, Error::Argument { .. }), "{device}: {err:?}");
    }
    let err = op.register_autocast("cpu", DType::I32).unwrap_err();
    assert_contains(&err, "floating dtype");
    assert!(library::register_autocast("tp::matmul", "cpu", DType::F16, None).is_err());
    assert!(matches!(
        library::register_autocast("lf_ac_err::missing", "cpu", DType::F16, None).unwrap_err(),
        Error::Lookup(_)
    ));
    // The op is unchanged: no rule applies.
    let x = f32s(&[1.0]);
    let _ac = autocast("cpu", DType::BF16)?;
    assert_eq!(op.call1(&[x.clone().into(), x.into()])?.dtype(), DType::F32);
    // Upper-case device names are accepted (the registration form, unlike custom_op's device_types).
    op.register_autocast("CPU", DType::F64)?;
    let x = f32s(&[1.0]);
    assert_eq!(op.call1(&[x.clone().into(), x.into()])?.dtype(), DType::F64);
    Ok(())
}

#[test]
fn autocast_region_errors_and_nesting() -> Result<()> {
    assert!(autocast("default", DType::BF16).is_err());
    assert!(autocast("tpu", DType::BF16).is_err());
    assert!(autocast("cpu", DType::F32).is_err());
    assert!(autocast("cpu", DType::F64).is_err());
    assert!(!any_active());
    let a = Tensor::ones(&[2, 2], DType::F32);
    {
        let _outer = autocast("cpu", DType::BF16)?;
        assert_eq!(a.matmul(&a)?.dtype(), DType::BF16);
        {
            let _inner = autocast("cpu", DType::F16)?;
            assert_eq!(a.matmul(&a)?.dtype(), DType::F16);
        }
        assert_eq!(a.matmul(&a)?.dtype(), DType::BF16);
        // A cuda region does not touch cpu ops.
        let _cuda = autocast("cuda", DType::F16)?;
        assert_eq!(active_dtype(Device::Cuda(0)), Some(DType::F16));
        assert_eq!(a.matmul(&a)?.dtype(), DType::BF16);
    }
    assert!(!any_active());
    assert_eq!(a.matmul(&a)?.dtype(), DType::F32);
    Ok(())
}

#[test]
fn builtin_autocast_policy() -> Result<()> {
    let f = Tensor::ones(&[2, 3], DType::F32);
    let d = Tensor::ones(&[2, 3], DType::F64);
    let h = Tensor::ones(&[2, 3], DType::BF16);
    let _ac = autocast("cpu", DType::BF16)?;
    // Low precision: matmul of f32 runs in the region dtype; f64 is left alone.
    assert_eq!(f.matmul(&f.t()?)?.dtype(), DType::BF16);
    assert_eq!(d.matmul(&d.t()?)?.dtype(), DType::F64);
    // Mixed f32 x bf16 matmul: both cast to bf16.
    assert_eq!(f.matmul(&h.t()?)?.dtype(), DType::BF16);
    // f32 policy: reductions and softmax of bf16 run on f32 inputs.
    assert_eq!(h.sum_all()?.dtype(), DType::F32);
    assert_eq!(h.sum(&[1], false)?.dtype(), DType::F32);
    assert_eq!(h.softmax(1)?.dtype(), DType::F32);
    assert_eq!(h.exp()?.dtype(), DType::F32);
    // f32 inputs of those stay f32; f64 stays f64.
    assert_eq!(f.sum_all()?.dtype(), DType::F32);
    assert_eq!(d.softmax(1)?.dtype(), DType::F64);
    // Other ops run in their input dtypes.
    assert_eq!(f.add(&f)?.dtype(), DType::F32);
    assert_eq!(h.add(&h)?.dtype(), DType::BF16);
    let s = h.softmax(1)?;
    assert!(
        s.sum(&[1], false)?
            .allclose(&Tensor::ones(&[2], DType::F32), 1e-6, 1e-6)?
    );
    Ok(())
}

// ---- triton ops ------------------------------------------------------------------------------

const BLOCK: usize = 64;

/// A grid kernel `out[i] = x[i] + y[i]` over blocks of `BLOCK`, recording its program ids.
fn add_launcher(pids: Arc<Mutex<Vec<u32>>>) -> CpuLauncher {
    CpuLauncher::new("add_kernel", move |pid, args| {
        let (
            ProgramArg::Tensor(x),
            ProgramArg::Tensor(y),
            ProgramArg::Tensor(out),
            ProgramArg::Int(n),
        ) = (&args[0], &args[1], &args[2], &args[3])
        else {
            return Err(Error::argument(
                "add_kernel",
                "args",
                "(x, y, out, n)",
                format!("{args:?}"),
            ));
        };
        pids.lock().push(pid[0]);
        let start = pid[0] as usize * BLOCK;
        let end = (start + BLOCK).min(*n as usize);
        for i in start..end {
            // SAFETY: f32 tensors of n elements; each program writes its own block of `out`.
            unsafe { out.write::<f32>(i, x.read::<f32>(i) + y.read::<f32>(i)) };
        }
        Ok(())
    })
}

#[test]
fn triton_op_vector_add_over_a_grid() -> Result<()> {
    let pids = Arc::new(Mutex::new(vec![]));
    let kernel = wrap_triton(add_launcher(pids.clone()));
    let op = library::triton_op("lf_tr_add::add")
        .arg_names(&["x", "y"])
        .build(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            let n = x.numel();
            let out = Tensor::empty(x.shape(), DType::F32);
            let grid = [n.div_ceil(BLOCK) as u32, 1, 1];
            kernel.launch(
                grid,
                &[
                    LaunchArg::In(x),
                    LaunchArg::In(y),
                    LaunchArg::Out(out.clone()),
                    LaunchArg::Int(n as i64),
                ],
            )?;
            Ok(out)
        })?;
    assert!(op.operator().is_triton());
    assert_eq!(op.operator().class(), OpClass::Opaque);
    let n = 1000;
    let x = Tensor::randn_seeded(&[n], DType::F32, 3)?;
    let y = Tensor::randn_seeded(&[n], DType::F32, 4)?;
    let out = op.call1(&[x.clone().into(), y.clone().into()])?;
    assert!(out.equal(&x.add(&y)?)?);
    // Every program id ran exactly once.
    let mut ran = pids.lock().clone();
    ran.sort_unstable();
    assert_eq!(ran, (0..n.div_ceil(BLOCK) as u32).collect::<Vec<_>>());
    // Inputs are untouched.
    assert!(x.equal(&Tensor::randn_seeded(&[n], DType::F32, 3)?)?);
    Ok(())
}

#[test]
fn triton_op_two_dimensional_grid() -> Result<()> {
    let launcher = CpuLauncher::new("iota2d", |pid, args| {
        let ProgramArg::Tensor(out) = &args[0] else {
            return Err(Error::Lookup("out".into()));
        };
        // SAFETY: a 3x4 f32 tensor; program (x, y) writes element y * 4 + x only.
        unsafe {
            out.write::<f32>(
                pid[1] as usize * 4 + pid[0] as usize,
                (pid[0] + 10 * pid[1]) as f32,
            )
        };
        if pid[2] != 0 {
            return Err(Error::Lookup("a 2-D grid has z = 0".into()));
        }
        Ok(())
    });
    let kernel = wrap_triton(launcher);
    let op = library::triton_op("lf_tr_2d::iota").build(move || -> Result<Tensor> {
        let out = Tensor::zeros(&[3, 4], DType::F32);
        kernel.launch([4, 3, 1], &[LaunchArg::Out(out.clone())])?;
        Ok(out)
    })?;
    let out = op.call1(&[])?;
    assert_eq!(
        vals(&out),
        vec![
            0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0
        ]
    );
    Ok(())
}

#[test]
fn a_launch_writing_an_undeclared_input_is_an_error() -> Result<()> {
    let kernel = wrap_triton(CpuLauncher::new("zero_kernel", |pid, args| {
        let ProgramArg::Tensor(t) = &args[0] else {
            return Err(Error::Lookup("t".into()));
        };
        // SAFETY: one program per element of an f32 tensor.
        unsafe { t.write::<f32>(pid[0] as usize, 0.0) };
        Ok(())
    }));
    let k = kernel.clone();
    let op = library::triton_op("lf_tr_undeclared::zero")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            k.launch([x.numel() as u32, 1, 1], &[LaunchArg::Out(x.clone())])?;
            x.clone_tensor()
        })?;
    let x = f32s(&[1.0, 2.0]);
    let err = op.call_values(&[x.clone().into()]).unwrap_err();
    match &err {
        Error::Argument { op, arg, .. } => assert_eq!(
            (op.as_str(), arg.as_str()),
            ("lf_tr_undeclared::zero", "mutates_args")
        ),
        other => panic!("{other:?}"),
    }
    assert_contains(&err, "zero_kernel");
    assert_eq!(vals(&x), vec![1.0, 2.0], "nothing was written");
    // Writing through a view of the input is caught too.
    let k = kernel.clone();
    let view_op = library::triton_op("lf_tr_undeclared::zero_view")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            k.launch(
                [1, 1, 1],
                &[LaunchArg::Out(x.slice(0, Some(0), Some(1), 1)?)],
            )?;
            x.clone_tensor()
        })?;
    assert!(view_op.call_values(&[x.clone().into()]).is_err());
    assert_eq!(vals(&x), vec![1.0, 2.0]);
    // Declaring the mutation allows it.
    let declared = library::triton_op("lf_tr_undeclared::zero_")
        .arg_names(&["x"])
        .mutates_args(["x"])
        .build(move |x: Tensor| -> Result<()> {
            kernel.launch([x.numel() as u32, 1, 1], &[LaunchArg::Out(x)])
        })?;
    let v0 = x.version();
    declared.call_values(&[x.clone().into()])?;
    assert_eq!(vals(&x), vec![0.0, 0.0]);
    assert!(x.version() > v0);
    Ok(())
}

#[test]
fn launching_outside_a_triton_op_is_an_error() -> Result<()> {
    let runs = Arc::new(AtomicUsize::new(0));
    let runs2 = runs.clone();
    let kernel = wrap_triton(CpuLauncher::new("counted", move |_, _| {
        runs2.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }));
    let err = kernel.launch([4, 1, 1], &[]).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_contains(&err, "triton_op");
    // Nor from the body of a plain custom op.
    let k = kernel.clone();
    let plain = library::custom_op("lf_tr_outside::plain")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            k.launch([1, 1, 1], &[])?;
            x.clone_tensor()
        })?;
    assert_contains(
        &plain.call_values(&[f32s(&[1.0]).into()]).unwrap_err(),
        "triton_op",
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Inside a triton op it runs; an empty grid runs no program.
    let op = library::triton_op("lf_tr_outside::ok")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            kernel.launch([0, 1, 1], &[])?;
            kernel.launch([2, 2, 2], &[])?;
            x.clone_tensor()
        })?;
    op.call_values(&[f32s(&[1.0]).into()])?;
    assert_eq!(runs.load(Ordering::SeqCst), 8);
    // After the op returned, the scope is gone again.
    assert!(
        wrap_triton(CpuLauncher::new("again", |_, _| Ok(())))
            .launch([1, 1, 1], &[])
            .is_err()
    );
    Ok(())
}

#[test]
fn wrap_triton_is_idempotent() {
    let k = wrap_triton(CpuLauncher::new("noop", |_, _| Ok(())));
    let again = wrap_triton(k.clone());
    let thrice = wrap_triton(wrap_triton(again.clone()));
    assert!(k.same(&again) && k.same(&thrice));
    assert_eq!(thrice.name(), "noop");
    let other = wrap_triton(CpuLauncher::new("noop", |_, _| Ok(())));
    assert!(!k.same(&other));
    assert_eq!(format!("{k:?}"), "TritonKernel(noop)");
}

#[test]
fn gpu_kernel_launch_without_cuda_is_a_clean_error() -> Result<()> {
    let gpu = GpuKernel {
        name: "add_kernel_ptx".into(),
        entry: "add_kernel".into(),
        image: GpuImage::Ptx(".version 8.0\n.target sm_90\n".into()),
        num_warps: 4,
        shared_mem_bytes: 0,
    };
    let kernel = wrap_triton(gpu);
    assert_eq!(kernel.name(), "add_kernel_ptx");
    let op = library::triton_op("lf_tr_gpu::add")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            let out = Tensor::empty(x.shape(), x.dtype());
            kernel.launch([1, 1, 1], &[LaunchArg::In(x), LaunchArg::Out(out.clone())])?;
            Ok(out)
        })?;
    let err = op.call_values(&[f32s(&[1.0]).into()]).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_contains(&err, "add_kernel_ptx");
    assert_contains(&err, "CUDA");
    Ok(())
}

#[test]
fn grid_launch_argument_errors_propagate() -> Result<()> {
    let kernel = wrap_triton(CpuLauncher::new("failing", |pid, _| {
        if pid[0] == 3 {
            Err(Error::Lookup("program 3 failed".into()))
        } else {
            Ok(())
        }
    }));
    let k = kernel.clone();
    let op = library::triton_op("lf_tr_errors::fail")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            k.launch([8, 1, 1], &[LaunchArg::In(x.clone())])?;
            x.clone_tensor()
        })?;
    assert_contains(
        &op.call_values(&[f32s(&[1.0]).into()]).unwrap_err(),
        "program 3 failed",
    );
    // Non-contiguous tensors are refused before any program runs.
    let strided = library::triton_op("lf_tr_errors::strided")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            kernel.launch([1, 1, 1], &[LaunchArg::In(x.t()?), LaunchArg::Float(1.0)])?;
            x.clone_tensor()
        })?;
    let err = strided
        .call_values(&[Tensor::ones(&[2, 3], DType::F32).into()])
        .unwrap_err();
    assert_contains(&err, "contiguous");
    Ok(())
}

#[test]
fn triton_ops_use_their_fake_kernel_on_fake_inputs() -> Result<()> {
    let launched = Arc::new(AtomicUsize::new(0));
    let l2 = launched.clone();
    let kernel = wrap_triton(CpuLauncher::new("never", move |_, _| {
        l2.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }));
    let op = library::triton_op("lf_tr_fake::op")
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> {
            kernel.launch([1, 1, 1], &[])?;
            x.clone_tensor()
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(x.shape(), x.dtype(), x.device()))
    })?;
    let y = op.call1(&[fake(&[5], DType::F16, Device::Cuda(0)).into()])?;
    assert!(y.is_fake() && y.device() == Device::Cuda(0));
    assert_eq!(launched.load(Ordering::SeqCst), 0);
    op.call1(&[f32s(&[1.0]).into()])?;
    assert_eq!(launched.load(Ordering::SeqCst), 1);
    Ok(())
}

#[test]
fn triton_programs_run_in_parallel_ids_once_each() -> Result<()> {
    // Many programs: each id exactly once, whatever thread runs it.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let seen2 = seen.clone();
    let kernel = wrap_triton(CpuLauncher::new("ids", move |pid, _| {
        if seen2.lock().insert(pid) {
            Ok(())
        } else {
            Err(Error::Lookup(format!("program {pid:?} ran twice")))
        }
    }));
    let op = library::triton_op("lf_tr_ids::op").build(move || -> Result<Tensor> {
        kernel.launch([16, 8, 4], &[])?;
        Ok(Tensor::zeros(&[1], DType::F32))
    })?;
    op.call1(&[])?;
    let seen = seen.lock();
    assert_eq!(seen.len(), 16 * 8 * 4);
    assert!(seen.iter().all(|p| p[0] < 16 && p[1] < 8 && p[2] < 4));
    Ok(())
}

/// A schema whose return is annotated with the mutated argument's alias set may return that
/// argument (PyTorch's in-place convention); other aliasing stays an error.
#[test]
fn annotated_in_place_returns_may_alias_their_argument() -> Result<()> {
    let op = library::custom_op("lf_alias::scale_")
        .schema("(Tensor(a!) x) -> Tensor(a!)")
        .mutates_args(tensorplay_runtime::library::MutatesArgs::from(["x"]))
        .build(|x: Tensor| -> Result<Tensor> {
            let _g = tensorplay_runtime::autograd::no_grad();
            x.mul_scalar_(2.0)
        })?;
    let x = Tensor::ones(&[3], DType::F32);
    let y = op.call1(&[x.clone().into()])?;
    assert!(y.storage().same(x.storage()));
    assert_eq!(x.to_vec::<f32>()?, vec![2.0, 2.0, 2.0]);
    Ok(())
}

/// `*_like` factories keep fake inputs fake (and on their device), so fake kernels can use them.
#[test]
fn like_factories_work_in_fake_kernels() -> Result<()> {
    let op = library::custom_op("lf_like::zeros")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { Ok(Tensor::zeros_like(&x)) })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    let fx = Tensor::empty_fake(&[2, 5], DType::F16, tensorplay_runtime::Device::Cuda(0));
    let out = op.call1(&[fx.into()])?;
    assert!(out.is_fake());
    assert_eq!(
        (out.shape(), out.device()),
        (&[2usize, 5][..], tensorplay_runtime::Device::Cuda(0))
    );
    Ok(())
}
