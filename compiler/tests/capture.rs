//! Capture: what the tracer records for builtin ops, traced-through and opaque custom ops,
//! mutations and constants.

use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_ir::{DType, Device, Error, TensorMeta};
use tensorplay_runtime::library::{self, MutatesArgs};
use tensorplay_runtime::{Result, Tensor, Value};

fn f32s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(shape, DType::F32, Device::Cpu)
}

#[test]
fn builtin_chain_with_scalar_constant() -> Result<()> {
    let g = capture(
        |xs| Ok(vec![xs[0].mul_scalar(2.0)?.add(&xs[1])?.relu()?]),
        &[f32s(&[4, 8]), f32s(&[8])],
        CaptureOptions::default(),
    )?;
    insta::assert_snapshot!(g.to_string(), @r"
    graph(%x0: f32[4, 8], %x1: f32[8]) {
      %0 = constant(2.0) : f64[]
      %1 = tp::mul(%x0, %0) : f32[4, 8]
      %2 = tp::add(%1, %x1) : f32[4, 8]
      %3 = tp::relu(%2) : f32[4, 8]
      return (%3)
    }
    ");
    Ok(())
}

#[test]
fn dynamic_capture_makes_non_unit_dims_symbolic() -> Result<()> {
    let g = capture(
        |xs| Ok(vec![xs[0].add(&xs[1])?]),
        &[f32s(&[4, 1]), f32s(&[3])],
        CaptureOptions { dynamic: true },
    )?;
    assert!(
        g.to_string()
            .starts_with("graph(%x0: f32[s0, 1], %x1: f32[s1])"),
        "{g}"
    );
    Ok(())
}

#[test]
fn custom_op_made_of_builtins_is_traced_through() -> Result<()> {
    let op = library::custom_op("cap_trace::weighted_sum")
        .arg_names(&["x", "weight"])
        .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
    let g = capture(
        |xs| {
            Ok(vec![
                op.call1(&[xs[0].clone().into(), xs[1].clone().into()])?,
            ])
        },
        &[f32s(&[16]), f32s(&[16])],
        CaptureOptions::default(),
    )?;
    let text = g.to_string();
    assert!(
        text.contains("tp::mul") && text.contains("tp::sum"),
        "{text}"
    );
    assert!(!text.contains("cap_trace::"), "{text}");
    Ok(())
}

#[test]
fn custom_op_reading_data_falls_back_to_opaque_with_fake_kernel() -> Result<()> {
    let op = library::custom_op("cap_opaque::host_sum")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            let s: f32 = x.to_vec::<f32>()?.iter().sum();
            Ok(Tensor::scalar(s))
        })?;
    let run = |op: &library::CustomOpDef| {
        capture(
            |xs| Ok(vec![op.call1(&[xs[0].exp()?.into()])?]),
            &[f32s(&[5])],
            CaptureOptions::default(),
        )
    };
    let err = run(&op).unwrap_err();
    assert!(
        matches!(&err, Error::Compile { msg: m, .. } if m.contains("cap_opaque::host_sum") && m.contains("register_fake")),
        "{err}"
    );
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.sum_all() })?;
    let g = run(&op)?;
    insta::assert_snapshot!(g.to_string(), @r"
    graph(%x0: f32[5]) {
      %0 = tp::exp(%x0) : f32[5]
      %1 = cap_opaque::host_sum(%0) : f32[]  # barrier: body reads data; runs opaque with its fake kernel
      return (%1)
    }
    ");
    Ok(())
}

#[test]
fn mutating_custom_op_is_a_barrier_with_order_edges() -> Result<()> {
    let scale = library::custom_op("cap_mut::scale_")
        .arg_names(&["x"])
        .mutates_args(MutatesArgs::from(["x"]))
        .build(|x: Tensor| -> Result<()> {
            x.mul_scalar_(2.0)?;
            Ok(())
        })?;
    let g = capture(
        |xs| {
            let before = xs[0].exp()?;
            scale.call_values(&[xs[0].clone().into()])?;
            let after = xs[0].neg()?;
            Ok(vec![before, after])
        },
        &[f32s(&[3])],
        CaptureOptions::default(),
    )?;
    let text = g.to_string();
    assert!(text.contains("# barrier: mutates x"), "{text}");
    // exp runs before the mutation, neg after it.
    let pos = |s: &str| text.find(s).unwrap();
    assert!(
        pos("tp::exp") < pos("cap_mut::scale_") && pos("cap_mut::scale_") < pos("tp::neg"),
        "{text}"
    );
    assert!(text.contains("# after"), "order edges are printed: {text}");
    Ok(())
}

#[test]
fn ops_with_custom_autograd_or_cpu_kernels_stay_opaque() -> Result<()> {
    let op = library::custom_op("cap_grad::square")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul(&x) })?;
    op.register_autograd(|_, g| Ok(vec![g[0].clone()]), None)?;
    op.register_fake(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let cpu_only = library::custom_op("cap_grad::cpu_double")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
    cpu_only.register_fake(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let g = capture(
        |xs| {
            let y = op.call1(&[xs[0].clone().into()])?;
            Ok(vec![cpu_only.call1(&[Value::Tensor(y)])?])
        },
        &[f32s(&[2])],
        CaptureOptions::default(),
    )?;
    let text = g.to_string();
    assert!(
        text.contains("cap_grad::square(%x0) : f32[2]  # barrier: custom autograd"),
        "{text}"
    );
    assert!(
        text.contains("# barrier: cpu kernel (device-specific)"),
        "{text}"
    );
    Ok(())
}

#[test]
fn large_closure_constants_must_be_inputs() {
    let w = Tensor::ones(&[1000], DType::F32);
    let err = capture(
        |xs| Ok(vec![xs[0].add(&w)?]),
        &[f32s(&[1000])],
        CaptureOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Compile { msg: m, .. } if m.contains("must be passed as inputs")),
        "{err}"
    );
}

#[test]
fn builtin_in_place_ops_are_ordered() -> Result<()> {
    let g = capture(
        |xs| {
            let y = xs[0].exp()?;
            let _g = tensorplay_runtime::autograd::no_grad();
            y.add_scalar_(1.0)?;
            Ok(vec![y.neg()?])
        },
        &[f32s(&[3])],
        CaptureOptions::default(),
    )?;
    let text = g.to_string();
    let pos = |s: &str| text.find(s).unwrap();
    assert!(pos("tp::add_") < pos("tp::neg"), "{text}");
    Ok(())
}
