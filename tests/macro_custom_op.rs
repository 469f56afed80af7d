//! The `#[custom_op]` attribute macro end to end: the generated `op()`/`call()` module, schemas
//! inferred from signatures (with defaults and mutation), dispatch through autograd, autocast and
//! fake tensors, and errors (never panics) for bad definitions.

use std::sync::Arc;

use tensorplay::autocast::autocast;
use tensorplay::library::{self, Slot, custom_op, registry};
use tensorplay::{DType, Device, Error, Result, Tensor};

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

// ---------------------------------------------------------------------------------------------
// The seed's example.

#[custom_op("mylib::weighted_sum")]
fn weighted_sum(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    x.mul(weight)?.sum_all()
}

#[test]
fn weighted_sum_end_to_end() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.requires_grad_(true)?;
    let w = Tensor::from_vec(vec![0.5f32, 0.5, 2.0], &[3])?.requires_grad_(true)?;

    // The schema comes from the signature.
    assert_eq!(
        weighted_sum::op()?.schema().to_string(),
        "mylib::weighted_sum(Tensor x, Tensor weight) -> Tensor"
    );
    assert_eq!(weighted_sum::op()?.name(), "mylib::weighted_sum");

    // Through the dispatcher.
    let y = weighted_sum::call(&x, &w)?;
    assert_eq!(y.item::<f32>()?, 7.5);
    assert!(y.requires_grad());

    // Gradients flow implicitly through the builtin ops the body used.
    y.backward()?;
    assert_eq!(f32s(&x.grad().unwrap()), vec![0.5, 0.5, 2.0]);
    assert_eq!(f32s(&w.grad().unwrap()), vec![1.0, 2.0, 3.0]);

    // The plain function is kept as written.
    assert_eq!(weighted_sum(&x, &w)?.item::<f32>()?, 7.5);

    // Also reachable by name through the registry and the boxed call.
    let by_name = library::get_kernel("mylib::weighted_sum", "cpu")?;
    let out = by_name(&[x.detach().into(), w.detach().into()])?;
    assert_eq!(out[0].item::<f32>()?, 7.5);

    // A kernel error comes back as an error, not a panic.
    let bad = Tensor::ones(&[4], DType::F32);
    assert!(matches!(
        weighted_sum::call(&x, &bad),
        Err(Error::Shape { .. })
    ));

    // Fake inputs need a fake kernel; registered on the handle `op()` returns.
    let fx = Tensor::empty_fake(&[3], DType::F32, Device::Cpu);
    assert!(weighted_sum::call(&fx, &fx).is_err());
    weighted_sum::op()?.register_fake(|x: Tensor, _w: Tensor| -> Result<Tensor> { x.sum_all() })?;
    assert!(registry().get("mylib::weighted_sum")?.has_fake());
    let out = weighted_sum::call(&fx, &fx)?;
    assert!(out.is_fake());
    assert!(out.shape().is_empty());
    assert_eq!(out.dtype(), DType::F32);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Mutation.

#[custom_op("macro_test::add_into", mutates_args = ["out"])]
fn add_into(x: &Tensor, out: &Tensor) -> Result<()> {
    out.add_(x)?;
    Ok(())
}

#[custom_op("macro_test::scale_all", mutates_args = "unknown")]
fn scale_all(a: &Tensor, b: &Tensor, factor: f64) -> Result<()> {
    a.mul_scalar_(factor)?;
    b.mul_scalar_(factor)?;
    Ok(())
}

#[custom_op("macro_test::zero_list", mutates_args = ["bufs"])]
fn zero_list(bufs: &[Tensor]) -> Result<()> {
    for b in bufs {
        b.zero_()?;
    }
    Ok(())
}

#[test]
fn mutating_op_schema_and_effect() -> Result<()> {
    let op = add_into::op()?;
    assert_eq!(
        op.schema().to_string(),
        "macro_test::add_into(Tensor x, Tensor(a!) out) -> ()"
    );
    assert_eq!(op.operator().mutated_params(), vec!["out"]);
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    let out = Tensor::from_vec(vec![10.0f32, 20.0], &[2])?;
    add_into::call(&x, &out)?;
    assert_eq!(f32s(&out), vec![11.0, 22.0]);
    assert_eq!(f32s(&x), vec![1.0, 2.0]);
    Ok(())
}

#[test]
fn mutates_unknown_marks_every_tensor() -> Result<()> {
    let op = scale_all::op()?;
    assert_eq!(
        op.schema().to_string(),
        "macro_test::scale_all(Tensor(a!) a, Tensor(b!) b, float factor) -> ()"
    );
    assert_eq!(op.operator().mutated_params(), vec!["a", "b"]);
    let a = Tensor::ones(&[2], DType::F32);
    let b = Tensor::ones(&[3], DType::F32);
    scale_all::call(&a, &b, 4.0)?;
    assert_eq!(f32s(&a), vec![4.0, 4.0]);
    assert_eq!(f32s(&b), vec![4.0, 4.0, 4.0]);
    Ok(())
}

#[test]
fn mutating_a_tensor_list() -> Result<()> {
    assert_eq!(
        zero_list::op()?.schema().to_string(),
        "macro_test::zero_list(Tensor(a!)[] bufs) -> ()"
    );
    let bufs = vec![
        Tensor::ones(&[2], DType::F32),
        Tensor::ones(&[1], DType::F64),
    ];
    zero_list::call(&bufs)?;
    assert_eq!(f32s(&bufs[0]), vec![0.0, 0.0]);
    assert_eq!(bufs[1].to_vec::<f64>()?, vec![0.0]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Device types.

#[custom_op("macro_test::cpu_only", device_types = ["cpu"])]
fn cpu_only(x: &Tensor) -> Result<Tensor> {
    x.mul_scalar(2.0)
}

#[test]
fn device_types_fill_only_those_slots() -> Result<()> {
    let op = cpu_only::op()?;
    assert_eq!(op.operator().device_types(), Some(&[Slot::Cpu][..]));
    assert!(library::get_kernel(&op, "cpu").is_ok());
    assert!(matches!(
        library::get_kernel(&op, "default"),
        Err(Error::Lookup(_))
    ));
    assert!(matches!(
        library::get_kernel(&op, "cuda"),
        Err(Error::Lookup(_))
    ));
    let y = cpu_only::call(&Tensor::ones(&[2], DType::F32))?;
    assert_eq!(f32s(&y), vec![2.0, 2.0]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Defaults.

#[custom_op("mylib::op")]
fn eps_op(
    x: &Tensor,
    #[default(1e-5)] eps: f64,
    #[default(None)] bias: Option<&Tensor>,
) -> Result<Tensor> {
    let y = x.add_scalar(eps)?;
    match bias {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

#[test]
fn defaults_print_and_apply() -> Result<()> {
    let op = eps_op::op()?;
    assert_eq!(
        op.schema().to_string(),
        "mylib::op(Tensor x, float eps=1e-05, Tensor? bias=None) -> Tensor"
    );
    let x = Tensor::zeros(&[2], DType::F64);
    // Positional only: the defaults fill the rest.
    let y = op.call1(&[x.clone().into()])?;
    assert_eq!(y.to_vec::<f64>()?, vec![1e-5, 1e-5]);
    // A keyword overrides one default.
    let b = Tensor::ones(&[2], DType::F64);
    let y = op.call_kw(&[x.clone().into()], &[("bias", b.clone().into())])?;
    assert_eq!(y[0].to_vec::<f64>()?, vec![1.0 + 1e-5, 1.0 + 1e-5]);
    // The generated `call` takes every parameter.
    let y = eps_op::call(&x, 0.5, Some(&b))?;
    assert_eq!(y.to_vec::<f64>()?, vec![1.5, 1.5]);
    let y = eps_op::call(&x, 0.25, None)?;
    assert_eq!(y.to_vec::<f64>()?, vec![0.25, 0.25]);
    Ok(())
}

#[custom_op("macro_test::many_defaults")]
#[allow(clippy::too_many_arguments)]
fn many_defaults(
    x: &Tensor,
    #[default(2)] n: i64,
    #[default(-1)] k: i64,
    #[default(true)] flag: bool,
    #[default("mean")] mode: &str,
    #[default([1, 2])] dims: &[i64],
    #[default([0.5, 1])] ws: &[f64],
    #[default(f64::NEG_INFINITY)] lo: f64,
    #[default(None)] maybe: Option<i64>,
    #[default(3)] f: f64,
    #[default([true, false])] mask: Vec<bool>,
    #[default(-2.5)] neg: Option<f64>,
) -> Result<Tensor> {
    let vals = vec![
        n as f64,
        k as f64,
        flag as u8 as f64,
        mode.len() as f64,
        dims.iter().sum::<i64>() as f64,
        ws.iter().sum::<f64>(),
        lo,
        maybe.unwrap_or(7) as f64,
        f,
        mask.iter().filter(|b| **b).count() as f64,
        neg.unwrap_or(0.0),
    ];
    Tensor::from_vec(vals, &[11])?.add(&x.sum_all()?.to_dtype(DType::F64)?)
}

#[test]
fn every_kind_of_default() -> Result<()> {
    let op = many_defaults::op()?;
    assert_eq!(
        op.schema().to_string(),
        "macro_test::many_defaults(Tensor x, SymInt n=2, SymInt k=-1, bool flag=True, \
         str mode=\"mean\", SymInt[] dims=[1, 2], float[] ws=[0.5, 1.0], float lo=-inf, \
         SymInt? maybe=None, float f=3, bool[] mask=[True, False], float? neg=-2.5) -> Tensor"
    );
    let x = Tensor::zeros(&[1], DType::F32);
    let got = op.call1(&[x.clone().into()])?.to_vec::<f64>()?;
    assert_eq!(
        got,
        vec![
            2.0,
            -1.0,
            1.0,
            4.0,
            3.0,
            1.5,
            f64::NEG_INFINITY,
            7.0,
            3.0,
            1.0,
            -2.5
        ]
    );
    // Every value given explicitly through `call`.
    let got = many_defaults::call(
        &x,
        5,
        6,
        false,
        "sum",
        &[4],
        &[0.25],
        1.0,
        Some(9),
        8.0,
        vec![true, true, true],
        None,
    )?
    .to_vec::<f64>()?;
    assert_eq!(
        got,
        vec![5.0, 6.0, 0.0, 3.0, 4.0, 0.25, 1.0, 9.0, 8.0, 3.0, 0.0]
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Option, list and scalar parameters.

/// Seven owned parameters: the typed-closure kernel path.
#[custom_op("macro_test::owned_params")]
fn owned_params(
    x: Tensor,
    bias: Option<Tensor>,
    xs: Vec<Tensor>,
    n: i64,
    dims: Vec<i64>,
    label: String,
    flag: bool,
) -> Result<Tensor> {
    let mut y = x.mul_scalar(n)?;
    if let Some(b) = bias {
        y = y.add(&b)?;
    }
    for t in &xs {
        y = y.add(t)?;
    }
    let extra = dims.len() as f64 + label.len() as f64 + if flag { 100.0 } else { 0.0 };
    y.add_scalar(extra)
}

/// Seventeen parameters of every supported type: the boxed kernel path (more than eight).
#[custom_op("macro_test::kitchen_sink")]
#[allow(clippy::too_many_arguments)]
fn kitchen_sink(
    x: &Tensor,
    bias: Option<&Tensor>,
    extra: Option<Tensor>,
    xs: &[Tensor],
    ys: Vec<Tensor>,
    n: i64,
    scale: f64,
    flag: bool,
    mode: &str,
    label: String,
    dims: &[i64],
    weights: Vec<f64>,
    dtype: DType,
    device: Device,
    maybe_n: Option<i64>,
    maybe_f: Option<f64>,
    r#type: &[bool],
) -> Result<Vec<Tensor>> {
    let mut main = x.mul_scalar(scale)?.add_scalar(n)?;
    for t in bias.into_iter().chain(extra.as_ref()).chain(xs).chain(&ys) {
        main = main.add(t)?;
    }
    let info = Tensor::from_vec(
        vec![
            flag as u8 as f64,
            mode.len() as f64,
            label.len() as f64,
            dims.iter().sum::<i64>() as f64,
            weights.iter().sum::<f64>(),
            (dtype == DType::F64) as u8 as f64,
            (device == Device::Cpu) as u8 as f64,
            maybe_n.unwrap_or(-1) as f64,
            maybe_f.unwrap_or(-1.0),
            r#type.iter().filter(|b| **b).count() as f64,
        ],
        &[10],
    )?;
    Ok(vec![main, info])
}

#[test]
fn owned_option_list_and_scalar_parameters() -> Result<()> {
    assert_eq!(
        owned_params::op()?.schema().to_string(),
        "macro_test::owned_params(Tensor x, Tensor? bias, Tensor[] xs, SymInt n, SymInt[] dims, \
         str label, bool flag) -> Tensor"
    );
    let x = Tensor::ones(&[2], DType::F32);
    let b = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    let y = owned_params::call(
        x.clone(),
        Some(b),
        vec![x.clone(), x.clone()],
        3,
        vec![7, 8],
        "abc".to_string(),
        true,
    )?;
    assert_eq!(
        f32s(&y),
        vec![3.0 + 1.0 + 2.0 + 105.0, 3.0 + 2.0 + 2.0 + 105.0]
    );
    let y = owned_params::call(x, None, vec![], 1, vec![], String::new(), false)?;
    assert_eq!(f32s(&y), vec![1.0, 1.0]);
    Ok(())
}

#[test]
fn every_parameter_type_through_the_boxed_path() -> Result<()> {
    assert_eq!(
        kitchen_sink::op()?.schema().to_string(),
        "macro_test::kitchen_sink(Tensor x, Tensor? bias, Tensor? extra, Tensor[] xs, \
         Tensor[] ys, SymInt n, float scale, bool flag, str mode, str label, SymInt[] dims, \
         float[] weights, ScalarType dtype, Device device, SymInt? maybe_n, float? maybe_f, \
         bool[] type) -> Tensor[]"
    );
    let x = Tensor::from_vec(vec![1.0f64, 2.0], &[2])?.requires_grad_(true)?;
    let one = Tensor::ones(&[2], DType::F64);
    let outs = kitchen_sink::call(
        &x,
        Some(&one),
        None,
        std::slice::from_ref(&one),
        vec![one.clone(), one.clone()],
        10,
        2.0,
        true,
        "mean",
        "label".to_string(),
        &[1, 2, 3],
        vec![0.5, 0.25],
        DType::F64,
        Device::Cpu,
        Some(4),
        None,
        &[true, false, true],
    )?;
    assert_eq!(outs.len(), 2);
    // x * 2 + 10, plus bias, xs and both ys (each one).
    assert_eq!(outs[0].to_vec::<f64>()?, vec![16.0, 18.0]);
    assert_eq!(
        outs[1].to_vec::<f64>()?,
        vec![1.0, 4.0, 5.0, 6.0, 0.75, 1.0, 1.0, 4.0, -1.0, 2.0]
    );
    // Gradients flow through the boxed kernel as well.
    outs[0].sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![2.0, 2.0]);

    // A wrongly typed boxed call is an error naming the parameter.
    let err = kitchen_sink::op()?
        .call(&[x.detach().into(), 3i64.into()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("bias"), "{err}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Returns.

#[custom_op("macro_test::pair")]
fn pair(x: &Tensor) -> Result<(Tensor, Tensor)> {
    Ok((x.mul_scalar(2.0)?, x.mul_scalar(3.0)?))
}

#[custom_op("macro_test::triple")]
fn triple(x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    Ok((x.add_scalar(1.0)?, x.add_scalar(2.0)?, x.add_scalar(3.0)?))
}

#[custom_op("macro_test::fanout")]
fn fanout(x: &Tensor, n: i64) -> Result<Vec<Tensor>> {
    (0..n).map(|i| x.add_scalar(i)).collect()
}

#[custom_op("macro_test::explicit_error_type")]
fn explicit_error_type(x: &Tensor) -> std::result::Result<Tensor, tensorplay::Error> {
    x.mul_scalar(-1.0)
}

#[test]
fn multiple_returns() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    assert_eq!(
        pair::op()?.schema().to_string(),
        "macro_test::pair(Tensor x) -> (Tensor, Tensor)"
    );
    let (a, b) = pair::call(&x)?;
    assert_eq!((f32s(&a), f32s(&b)), (vec![2.0, 4.0], vec![3.0, 6.0]));

    assert_eq!(
        triple::op()?.schema().to_string(),
        "macro_test::triple(Tensor x) -> (Tensor, Tensor, Tensor)"
    );
    let (a, b, c) = triple::call(&x)?;
    assert_eq!(f32s(&a), vec![2.0, 3.0]);
    assert_eq!(f32s(&b), vec![3.0, 4.0]);
    assert_eq!(f32s(&c), vec![4.0, 5.0]);

    assert_eq!(
        fanout::op()?.schema().to_string(),
        "macro_test::fanout(Tensor x, SymInt n) -> Tensor[]"
    );
    let outs = fanout::call(&x, 3)?;
    assert_eq!(outs.len(), 3);
    assert_eq!(f32s(&outs[2]), vec![3.0, 4.0]);
    assert!(fanout::call(&x, 0)?.is_empty());

    assert_eq!(f32s(&explicit_error_type::call(&x)?), vec![-1.0, -2.0]);
    Ok(())
}

#[custom_op("macro_test::count_check")]
fn count_check(x: &Tensor) -> Result<Tensor> {
    x.mul_scalar(2.0)
}

#[test]
fn a_kernel_returning_the_wrong_count_is_an_error() -> Result<()> {
    let op = count_check::op()?;
    // Replace the cpu kernel with one returning two tensors.
    op.register_kernel(&["cpu"], |x: Tensor| -> Result<(Tensor, Tensor)> {
        Ok((x.add_scalar(1.0)?, x.add_scalar(2.0)?))
    })?;
    let err = count_check::call(&Tensor::ones(&[1], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(err.contains("macro_test::count_check"), "{err}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Definition: once per process, errors instead of panics.

#[custom_op("macro_test::once")]
fn once(x: &Tensor) -> Result<Tensor> {
    x.add_scalar(1.0)
}

#[custom_op("macro_test::concurrent")]
fn concurrent(x: &Tensor) -> Result<Tensor> {
    x.add_scalar(1.0)
}

#[test]
fn op_is_defined_once() -> Result<()> {
    let a = once::op()?;
    let b = once::op()?;
    assert!(Arc::ptr_eq(&a.operator(), &b.operator()));
    assert!(Arc::ptr_eq(
        &a.operator(),
        &registry().get("macro_test::once")?
    ));
    Ok(())
}

#[test]
fn concurrent_first_calls_define_one_operator() -> Result<()> {
    let handles: Vec<_> = (0..8).map(|_| std::thread::spawn(concurrent::op)).collect();
    let ops: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("thread panicked"))
        .collect::<Result<_>>()?;
    let registered = registry().get("macro_test::concurrent")?;
    for op in &ops {
        assert!(Arc::ptr_eq(&op.operator(), &registered));
    }
    Ok(())
}

#[custom_op("no_namespace")]
fn no_namespace(x: &Tensor) -> Result<Tensor> {
    x.add_scalar(1.0)
}

#[custom_op("prim::reserved_by_runtime")]
fn reserved(x: &Tensor) -> Result<Tensor> {
    x.add_scalar(1.0)
}

#[test]
fn a_bad_name_is_an_error_from_op_not_a_panic() -> Result<()> {
    let err = no_namespace::op().unwrap_err();
    assert!(matches!(err, Error::Registration(_)), "{err}");
    assert!(err.to_string().contains("no_namespace"), "{err}");
    // Retried (and failing again) on the next call.
    assert!(no_namespace::op().is_err());
    let x = Tensor::ones(&[1], DType::F32);
    assert!(no_namespace::call(&x).is_err());
    // The plain function still works.
    assert_eq!(no_namespace(&x)?.item::<f32>()?, 2.0);

    let err = reserved::op().unwrap_err().to_string();
    assert!(err.contains("reserved"), "{err}");
    Ok(())
}

#[custom_op("macro_test::overloaded.out")]
fn overloaded(x: &Tensor) -> Result<Tensor> {
    x.add_scalar(1.0)
}

#[test]
fn overload_names() -> Result<()> {
    assert_eq!(
        overloaded::op()?.schema().to_string(),
        "macro_test::overloaded.out(Tensor x) -> Tensor"
    );
    assert_eq!(
        overloaded::call(&Tensor::zeros(&[1], DType::F32))?.item::<f32>()?,
        1.0
    );
    Ok(())
}

/// Parameters named like the generated items (`op`, `call`, `define`) do not shadow them.
#[custom_op("macro_test::shadowing")]
fn shadowing(op: &Tensor, call: i64, outs: bool, mut define: f64) -> Result<Tensor> {
    define += call as f64;
    op.add_scalar(if outs { define } else { 0.0 })
}

#[test]
fn parameter_names_do_not_shadow_generated_items() -> Result<()> {
    assert_eq!(
        shadowing::op()?.schema().to_string(),
        "macro_test::shadowing(Tensor op, SymInt call, bool outs, float define) -> Tensor"
    );
    let y = shadowing::call(&Tensor::zeros(&[1], DType::F32), 2, true, 0.5)?;
    assert_eq!(y.item::<f32>()?, 2.5);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The dispatcher's layers apply to `call`.

#[custom_op("macro_test::autocast_probe")]
fn autocast_probe(x: &Tensor) -> Result<Tensor> {
    x.mul_scalar(1.0)
}

#[test]
fn autocast_applies_to_call() -> Result<()> {
    autocast_probe::op()?.register_autocast("cpu", DType::BF16)?;
    let x = Tensor::ones(&[2], DType::F32);
    assert_eq!(autocast_probe::call(&x)?.dtype(), DType::F32);
    let _g = autocast("cpu", DType::BF16)?;
    assert_eq!(autocast_probe::call(&x)?.dtype(), DType::BF16);
    // The plain function bypasses the op (mul_scalar has no autocast policy).
    assert_eq!(autocast_probe(&x)?.dtype(), DType::F32);
    Ok(())
}

#[custom_op("macro_test::with_formula")]
fn with_formula(x: &Tensor) -> Result<Tensor> {
    x.mul_scalar(3.0)
}

#[test]
fn an_explicit_autograd_formula_replaces_the_implicit_one() -> Result<()> {
    // A deliberately different formula, to see which one runs.
    with_formula::op()?.register_autograd(
        |_ctx, grads| Ok(vec![Some(grads[0].clone().unwrap().mul_scalar(10.0)?)]),
        None,
    )?;
    let x = Tensor::ones(&[2], DType::F64).requires_grad_(true)?;
    with_formula::call(&x)?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![10.0, 10.0]);
    Ok(())
}
