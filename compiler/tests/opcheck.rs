//! opcheck: each check passes for a sound op and catches the defect it is for.

use tensorplay_compiler::opcheck::{OpcheckOptions, opcheck};
use tensorplay_runtime::library::{self, MutatesArgs};
use tensorplay_runtime::{DType, Error, Result, Tensor, Value};

fn no_raise() -> OpcheckOptions {
    OpcheckOptions {
        raise_exception: false,
        ..OpcheckOptions::default()
    }
}

fn vecs(n: usize) -> Result<(Value, Value)> {
    Ok((
        Tensor::randn_seeded(&[n, 3], DType::F32, 1)?.into(),
        Tensor::randn_seeded(&[n, 3], DType::F32, 2)?.into(),
    ))
}

#[test]
fn a_sound_op_passes_every_check() -> Result<()> {
    let op = library::custom_op("oc_ok::scaled_gelu")
        .arg_names(&["x", "y", "alpha"])
        .build(|x: Tensor, y: Tensor, a: f64| -> Result<Tensor> {
            x.mul_scalar(a)?.add(&y)?.gelu("tanh")
        })?;
    op.register_fake(|x: Tensor, _y: Tensor, _a: f64| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, y) = vecs(4)?;
    let failures = opcheck(&op, &[x, y, 0.5.into()], &[], OpcheckOptions::default())?;
    assert!(failures.is_empty(), "{failures:?}");
    Ok(())
}

#[test]
fn undeclared_mutation_fails_test_schema() -> Result<()> {
    let op = library::custom_op("oc_mut::sneaky")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let _g = tensorplay_runtime::autograd::no_grad();
            x.mul_scalar_(2.0)?;
            x.clone_tensor()
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, _) = vecs(2)?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    assert!(
        failures["test_schema"].contains("not declared in mutates_args"),
        "{failures:?}"
    );
    Ok(())
}

#[test]
fn declared_mutation_passes() -> Result<()> {
    let op = library::custom_op("oc_mut::scale_")
        .arg_names(&["x"])
        .mutates_args(MutatesArgs::from(["x"]))
        .build(|x: Tensor| -> Result<()> {
            let _g = tensorplay_runtime::autograd::no_grad();
            x.mul_scalar_(2.0)?;
            Ok(())
        })?;
    let (x, _) = vecs(3)?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    assert!(failures.is_empty(), "{failures:?}");
    Ok(())
}

#[test]
fn raw_data_kernel_fails_autograd_registration() -> Result<()> {
    let op = library::custom_op("oc_grad::host_double")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let v: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| v * 2.0).collect();
            Tensor::from_vec(v, x.shape())
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, _) = vecs(2)?;
    let failures = opcheck(&op, std::slice::from_ref(&x), &[], no_raise())?;
    assert!(
        failures["test_autograd_registration"].contains("no autograd history"),
        "{failures:?}"
    );
    assert!(!failures.contains_key("test_faketensor"), "{failures:?}");
    // With a formula the op is sound.
    op.register_autograd(
        |_, g| Ok(vec![Some(g[0].clone().unwrap().mul_scalar(2.0)?)]),
        None,
    )?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    assert!(failures.is_empty(), "{failures:?}");
    Ok(())
}

#[test]
fn wrong_fake_kernel_fails_test_faketensor() -> Result<()> {
    let op = library::custom_op("oc_fake::rowsum")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.sum(&[1], false) })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.sum(&[0], false) })?;
    let (x, _) = vecs(4)?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    // Issue 10 item 14: the message says what differs (fake vs real).
    assert!(
        failures["test_faketensor"].contains("shape [3] vs [4]"),
        "{failures:?}"
    );
    Ok(())
}

#[test]
fn test_faketensor_names_the_differing_shape_and_dtype() -> Result<()> {
    let op = library::custom_op("oc_fake::flat_f64")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    op.register_fake(|x: &Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(&[7], DType::F64, x.device()))
    })?;
    let x: Value = Tensor::randn_seeded(&[2, 3], DType::F32, 3)?.into();
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    let msg = &failures["test_faketensor"];
    assert!(msg.contains("shape [7] vs [2, 3]"), "{msg}");
    assert!(msg.contains("dtype f64 vs f32"), "{msg}");
    Ok(())
}

#[test]
fn missing_fake_kernel_fails_fake_and_compiled_checks() -> Result<()> {
    let op = library::custom_op("oc_nofake::host_neg")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.neg() })?;
    let (x, _) = vecs(2)?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    assert!(
        failures["test_faketensor"].contains("fake kernel"),
        "{failures:?}"
    );
    assert!(
        failures["test_aot_dispatch_dynamic"].contains("register_fake"),
        "{failures:?}"
    );
    Ok(())
}

#[test]
fn raise_exception_turns_failures_into_an_error() -> Result<()> {
    let op = library::custom_op("oc_raise::rowsum")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.sum(&[1], false) })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, _) = vecs(4)?;
    let err = opcheck(&op, &[x], &[], OpcheckOptions::default()).unwrap_err();
    match &err {
        Error::Opcheck { op, failures } => {
            assert_eq!(op, "oc_raise::rowsum");
            assert!(failures.contains_key("test_faketensor"), "{failures:?}");
        }
        other => panic!("expected Error::Opcheck, got {other:#?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("opcheck of `oc_raise::rowsum` failed:")
            && text.contains("test_faketensor"),
        "{text}"
    );
    // Debug is the same text (a failing `fn main() -> Result<()>` prints it readably).
    assert_eq!(format!("{err:?}"), text);
    Ok(())
}

#[test]
fn bad_options_are_errors() -> Result<()> {
    let op = library::custom_op("oc_opts::id")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, _) = vecs(2)?;
    let unknown = OpcheckOptions {
        test_utils: vec!["test_nothing".into()],
        ..no_raise()
    };
    assert!(opcheck(&op, std::slice::from_ref(&x), &[], unknown).is_err());
    let half = OpcheckOptions {
        atol: Some(1e-3),
        ..no_raise()
    };
    assert!(opcheck(&op, std::slice::from_ref(&x), &[], half).is_err());
    let only_schema = OpcheckOptions {
        test_utils: vec!["test_schema".into()],
        ..no_raise()
    };
    assert!(opcheck(&op, &[x], &[], only_schema)?.is_empty());
    Ok(())
}

#[test]
fn keyword_arguments_and_defaults_are_bound() -> Result<()> {
    let op = library::custom_op("oc_kw::affine")
        .schema("(Tensor x, *, float scale=2.0) -> Tensor")
        .build(|x: Tensor, s: f64| -> Result<Tensor> { x.mul_scalar(s) })?;
    op.register_fake(|x: Tensor, _s: f64| -> Result<Tensor> { x.clone_tensor() })?;
    let (x, _) = vecs(3)?;
    let f = opcheck(&op, std::slice::from_ref(&x), &[], no_raise())?;
    assert!(f.is_empty(), "{f:?}");
    let f = opcheck(&op, &[x], &[("scale", 0.5.into())], no_raise())?;
    assert!(f.is_empty(), "{f:?}");
    Ok(())
}

#[test]
fn an_op_with_a_sound_autograd_formula_passes_the_compiled_backward_check() -> Result<()> {
    let op = library::custom_op("oc_aot::square")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul(&x) })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    op.register_autograd(
        |ctx, g| {
            let x = &ctx.saved_tensors()[0];
            Ok(vec![
                g[0].as_ref()
                    .map(|g| g.mul(&x.mul_scalar(2.0)?))
                    .transpose()?,
            ])
        },
        Some(Box::new(|ctx, inputs, _| {
            let x = inputs[0].tensors().next().cloned().expect("x");
            ctx.save_for_backward(&[&x]);
            Ok(())
        })),
    )?;
    let (x, _) = vecs(4)?;
    let failures = opcheck(&op, &[x], &[], OpcheckOptions::default())?;
    assert!(failures.is_empty(), "{failures:?}");
    Ok(())
}

/// A backward that reads its input through a side channel the kernel fills, instead of
/// saving it: right eagerly (the kernel ran on this call's input), wrong in a compiled backward
/// (captured once, it keeps the tensor of the call it was captured on).
#[test]
fn a_backward_reading_a_tensor_it_never_saved_fails_only_the_compiled_check() -> Result<()> {
    use std::sync::Mutex;
    static LAST_INPUT: Mutex<Option<Tensor>> = Mutex::new(None);
    let op = library::custom_op("oc_aot::square_unsaved")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> {
            *LAST_INPUT.lock().unwrap() = Some(x.detach());
            x.mul(&x)
        })?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(&x)) })?;
    op.register_autograd(
        |_ctx, g| {
            let x = LAST_INPUT.lock().unwrap().clone().expect("the kernel ran");
            Ok(vec![
                g[0].as_ref()
                    .map(|g| g.mul(&x.mul_scalar(2.0)?))
                    .transpose()?,
            ])
        },
        None,
    )?;
    let (x, _) = vecs(4)?;
    let failures = opcheck(&op, &[x], &[], no_raise())?;
    assert!(
        !failures.contains_key("test_autograd_registration"),
        "{failures:?}"
    );
    assert!(!failures.contains_key("test_faketensor"), "{failures:?}");
    let why = &failures["test_aot_dispatch_dynamic"];
    assert!(
        why.contains("at the first input size with other data") && why.contains("did not save"),
        "{why}"
    );
    Ok(())
}
