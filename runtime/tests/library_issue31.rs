//! Issue 31's library findings, one section per item. Every test uses its own namespace
//! (`li31_<item>_…`): the registry is global and tests run in parallel.

use tensorplay_runtime::library::{self, Slot};
use tensorplay_runtime::{Error, Result, Tensor};

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

// 1: composite spellings in register_kernel ---------------------------------------------------

#[test]
fn item1_register_kernel_maps_composite_keys_to_the_default_slot() -> Result<()> {
    for (i, key) in [
        "CompositeExplicitAutograd",
        "CompositeImplicitAutograd",
        "CompositeExplicitAutogradNonFunctional",
        "default",
    ]
    .into_iter()
    .enumerate()
    {
        // The method on a handle ...
        let op = library::custom_op(&format!("li31_1_m{i}::op"))
            .arg_names(&["x"])
            .device_types("cpu")
            .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
        op.register_kernel(key, |x: &Tensor| -> Result<Tensor> { x.add_scalar(2.0) })?;
        assert_eq!(
            op.operator().kernel_slots(),
            vec![(Slot::Cpu, true), (Slot::Default, true)],
            "{key}"
        );
        // ... the default kernel runs when the cpu slot is off.
        let _off = op.set_kernel_enabled("cpu", false)?;
        assert_eq!(vals(&op.call1((f32s(&[1.0]),))?), vec![3.0], "{key}");

        // ... and the free function on a `define`d op, with a list.
        let name = format!("li31_1_f{i}::op");
        library::define(&name, Some("(Tensor x) -> Tensor"), None)?;
        library::register_kernel(
            name.as_str(),
            &[key],
            |x: &Tensor| -> Result<Tensor> { x.mul_scalar(4.0) },
            None,
        )?;
        let op = library::op_handle(name.as_str())?;
        assert_eq!(
            op.operator().kernel_slots(),
            vec![(Slot::Default, true)],
            "{key}"
        );
        assert_eq!(vals(&op.call1((f32s(&[1.0]),))?), vec![4.0], "{key}");
    }
    Ok(())
}

#[test]
fn item1_register_kernel_still_refuses_other_spellings() -> Result<()> {
    let op = library::custom_op("li31_1_bad::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    for bad in ["CPU", "cuda:0", "tpu", "Autograd", ""] {
        let err = op
            .register_kernel(&[bad], |x: &Tensor| -> Result<Tensor> { x.add_scalar(2.0) })
            .unwrap_err();
        match &err {
            Error::Argument {
                arg, expected, got, ..
            } => {
                assert_eq!(arg, "device_types");
                assert!(expected.contains("Composite"), "{err}");
                assert_eq!(got, &format!("`{bad}`"));
            }
            other => panic!("{bad}: {other}"),
        }
    }
    assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    // custom_op's device_types names concrete devices only (the device-agnostic slot is what
    // leaving it out means).
    let err = library::custom_op("li31_1_bad::dt")
        .arg_names(&["x"])
        .device_types("CompositeExplicitAutograd")
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })
        .unwrap_err();
    assert!(matches!(err, Error::Argument { .. }), "{err}");
    Ok(())
}

// 2: keyword-only tensor parameters -----------------------------------------------------------

#[test]
fn item2_out_convention_writes_the_keyword_only_tensor() -> Result<()> {
    library::define(
        "li31_2_out::f(Tensor x, *, Tensor(a!) out) -> ()",
        None,
        None,
    )?;
    // The kernel takes the keyword-only tensor as its trailing parameter, in schema order.
    library::r#impl(
        "li31_2_out::f",
        &["CompositeExplicitAutograd"],
        |x: &Tensor, out: &Tensor| -> Result<()> {
            let _g = tensorplay_runtime::autograd::no_grad();
            out.copy_(&x.mul_scalar(2.0)?)?;
            Ok(())
        },
        None,
    )?;
    let op = library::op_handle("li31_2_out::f")?;
    let x = f32s(&[1.0, 2.0]);
    let out = f32s(&[0.0, 0.0]);
    let outs = op.call_kw((&x,), &[("out", out.clone().into())])?;
    assert!(outs.is_empty());
    assert_eq!(vals(&out), vec![2.0, 4.0]);
    // Keyword-only: passing it positionally is the usual arity error, naming the limit.
    let err = op.call((&x, &out)).unwrap_err();
    assert!(
        matches!(&err, Error::Argument { arg, expected, .. } if arg == "args" && expected.contains("at most 1 positional")),
        "{err}"
    );
    // Leaving it out names it.
    let err = op.call((&x,)).unwrap_err();
    assert!(
        matches!(&err, Error::Argument { arg, .. } if arg == "out"),
        "{err}"
    );
    Ok(())
}

#[test]
fn item2_keyword_only_tensor_input_reaches_kernel_fake_autograd_and_vmap() -> Result<()> {
    library::define("li31_2_kw::kw(Tensor x, *, Tensor y) -> Tensor", None, None)?;
    library::register_kernel(
        "li31_2_kw::kw",
        &[] as &[&str],
        |x: &Tensor, y: &Tensor| -> Result<Tensor> { x.mul(y)?.add(x) },
        None,
    )?;
    library::register_fake(
        "li31_2_kw::kw",
        |x: &Tensor, _y: &Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(x)) },
        None,
        true,
    )?;
    let op = library::op_handle("li31_2_kw::kw")?;
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    let y = f32s(&[3.0, 5.0]).requires_grad_(true)?;
    let z = op.call_kw((&x,), &[("y", y.clone().into())])?.remove(0);
    assert_eq!(vals(&z), vec![4.0, 12.0]);
    // Gradients reach the keyword-only tensor (implicitly, through the builtin ops used).
    z.sum_all()?.backward()?;
    assert_eq!(vals(&x.grad().unwrap()), vec![4.0, 6.0]);
    assert_eq!(vals(&y.grad().unwrap()), vec![1.0, 2.0]);
    // Fake tensors go through the fake kernel.
    let fx = Tensor::empty_fake(
        &[7],
        tensorplay_runtime::DType::F32,
        tensorplay_runtime::Device::Cpu,
    );
    let fz = op.call_kw((&fx,), &[("y", fx.clone().into())])?.remove(0);
    assert!(fz.is_fake());
    assert_eq!(fz.shape(), &[7]);
    // vmap over the keyword-only tensor (the per-example fallback sees it as an argument).
    let xs = f32s(&[1.0, 2.0]);
    let ys = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    let f = |args: &[Tensor]| -> Result<Vec<Tensor>> {
        op.call_kw((&args[0],), &[("y", args[1].clone().into())])
    };
    let out = tensorplay_runtime::vmap::vmap(f, vec![None, Some(0)], vec![0])(&[xs, ys])?;
    assert_eq!(vals(&out[0]), vec![2.0, 6.0, 4.0, 10.0]);
    Ok(())
}

// 4: kernels of any `Fn` type -----------------------------------------------------------------
//
// Compiling this section is most of the test: before issue 31 the generic and opaque forms did
// not satisfy `IntoKernel` (rustc suggested `&f`, which cannot work).

fn scaled_by(k: f64) -> impl Fn(Tensor) -> Result<Tensor> + Send + Sync + 'static {
    move |x| x.mul_scalar(k)
}

fn borrowing_scaled_by(k: f64) -> impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static {
    move |x| x.mul_scalar(k)
}

fn fake_like(x: &Tensor, _w: &Tensor) -> Result<Tensor> {
    Ok(Tensor::empty_like(x))
}

fn weighted(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    x.mul(w)
}

/// Registers a generic kernel everywhere a kernel goes.
fn register_generic<F>(name: &str, kernel: F) -> Result<library::CustomOp<Tensor, (Tensor, Tensor)>>
where
    F: Fn(&Tensor, &Tensor) -> Result<Tensor> + Clone + Send + Sync + 'static,
{
    let op = library::custom_op(name)
        .arg_names(&["x", "w"])
        .build(kernel.clone())?;
    op.register_kernel("cpu", kernel.clone())?;
    op.register_fake(kernel.clone())?;
    library::register_kernel(&op, "CompositeExplicitAutograd", kernel.clone(), None)?;
    library::register_fake(&op, kernel.clone(), None, true)?;
    library::r#impl(name, &["CPU"], kernel, None)?;
    Ok(op)
}

fn register_generic_owned<F>(name: &str, kernel: F) -> Result<library::CustomOp<Tensor, (Tensor,)>>
where
    F: Fn(Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    library::custom_op(name).arg_names(&["x"]).build(kernel)
}

type BoxedBinary = Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync>;

#[test]
fn item4_kernels_of_every_fn_type() -> Result<()> {
    let x = f32s(&[1.0, 2.0]);
    let w = f32s(&[3.0, 4.0]);
    // A closure, a fn item and a generic F with a declared bound.
    let op = register_generic("li31_4::closure", |x: &Tensor, w: &Tensor| x.mul(w))?;
    assert_eq!(vals(&op.call1((&x, &w))?), vec![3.0, 8.0]);
    let op = register_generic("li31_4::fn_item", weighted)?;
    assert_eq!(vals(&op.call1((&x, &w))?), vec![3.0, 8.0]);
    op.register_fake(fake_like)?;
    // Opaque `impl Fn` returned by a helper, by value and borrowing.
    let op = library::custom_op("li31_4::opaque")
        .arg_names(&["x"])
        .build(scaled_by(2.0))?;
    op.register_kernel("cpu", scaled_by(3.0))?;
    op.register_fake(borrowing_scaled_by(0.0))?;
    assert_eq!(vals(&op.call1((&x,))?), vec![3.0, 6.0]);
    let op = library::custom_op("li31_4::opaque_ref")
        .arg_names(&["x"])
        .build(borrowing_scaled_by(5.0))?;
    assert_eq!(vals(&op.call1((&x,))?), vec![5.0, 10.0]);
    // A generic owning F.
    let op = register_generic_owned("li31_4::generic_owned", scaled_by(4.0))?;
    assert_eq!(vals(&op.call1((&x,))?), vec![4.0, 8.0]);
    // Boxed `dyn Fn`, typed.
    let boxed: BoxedBinary = Box::new(|x, w| x.add(w));
    let op = library::custom_op("li31_4::boxed")
        .arg_names(&["x", "w"])
        .build(boxed)?;
    assert_eq!(vals(&op.call1((&x, &w))?), vec![4.0, 6.0]);
    assert_eq!(
        op.schema().to_string(),
        "li31_4::boxed(Tensor x, Tensor w) -> Tensor"
    );
    Ok(())
}

// 6: registration checks typed kernels against the schema -------------------------------------

fn registration_message(err: Error) -> String {
    assert!(matches!(err, Error::Registration(_)), "{err}");
    err.to_string()
}

#[test]
fn item6_mismatched_parameter_types_are_refused_at_registration() -> Result<()> {
    library::define("li31_6::ws(Tensor x, float weight) -> Tensor", None, None)?;
    let op = library::op_handle("li31_6::ws")?;
    let msg = registration_message(
        op.register_fake(|x: &Tensor, _w: &Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(x)) })
            .unwrap_err(),
    );
    assert!(
        msg.contains(
            "`li31_6::ws`: register_fake: parameter `weight` is float in the schema, Tensor in \
             the kernel"
        ) && msg.contains("f64"),
        "{msg}"
    );
    let msg = registration_message(
        op.register_kernel("cpu", |x: &Tensor, _w: bool| -> Result<Tensor> {
            x.mul_scalar(1.0)
        })
        .unwrap_err(),
    );
    assert!(
        msg.contains("register_kernel") && msg.contains("`weight`"),
        "{msg}"
    );
    let msg = registration_message(
        library::r#impl(
            "li31_6::ws",
            &["CPU"],
            |x: f64, _w: f64| -> Result<Tensor> { Ok(Tensor::scalar(x)) },
            None,
        )
        .unwrap_err(),
    );
    assert!(
        msg.contains("parameter `x` is Tensor in the schema, float"),
        "{msg}"
    );
    // Nothing was registered by the refused calls.
    assert!(!op.operator().has_fake());
    assert!(op.operator().kernel_slots().is_empty());
    // Types that read the schema's values are fine: an int kernel parameter may be f64, an
    // optional one takes present values.
    op.register_kernel("cpu", |x: &Tensor, w: f64| -> Result<Tensor> {
        x.mul_scalar(w)
    })?;
    assert_eq!(vals(&op.call1((f32s(&[2.0]), 3.0))?), vec![6.0]);

    library::define("li31_6::opt(Tensor x, Tensor? bias) -> Tensor", None, None)?;
    let opt = library::op_handle("li31_6::opt")?;
    let msg = registration_message(
        opt.register_kernel("cpu", |x: &Tensor, _b: &Tensor| -> Result<Tensor> {
            x.mul_scalar(1.0)
        })
        .unwrap_err(),
    );
    assert!(msg.contains("Option<&Tensor>"), "{msg}");
    opt.register_kernel("cpu", |x: &Tensor, b: Option<&Tensor>| -> Result<Tensor> {
        match b {
            Some(b) => x.add(b),
            None => x.mul_scalar(1.0),
        }
    })?;
    Ok(())
}

#[test]
fn item6_custom_op_with_an_explicit_schema_and_typed_autograd_are_checked() -> Result<()> {
    let err = library::custom_op("li31_6::explicit")
        .schema("(Tensor x, SymInt n) -> Tensor")
        .build(|x: &Tensor, _n: &Tensor| -> Result<Tensor> { x.mul_scalar(1.0) })
        .unwrap_err();
    let msg = registration_message(err);
    assert!(
        msg.contains("custom_op") && msg.contains("parameter `n` is SymInt"),
        "{msg}"
    );
    assert!(library::registry().find("li31_6::explicit").is_none());

    let op = library::custom_op("li31_6::setup")
        .arg_names(&["x", "k"])
        .build(|x: &Tensor, k: f64| -> Result<Tensor> { x.mul_scalar(k) })?;
    let err = op
        .register_autograd_typed(
            |(_x,): &(Tensor,), _g| Ok((None::<Tensor>, None::<Tensor>)),
            |(x, _k): (Tensor, Tensor), _outs| Ok((x,)),
        )
        .unwrap_err();
    let msg = registration_message(err);
    assert!(
        msg.contains("parameter `k` is float in the schema, Tensor"),
        "{msg}"
    );
    Ok(())
}

// 7: typed vmap rules ---------------------------------------------------------------------------

#[test]
fn item7_typed_vmap_rules_check_types_and_return_several_outputs() -> Result<()> {
    use tensorplay_runtime::library::VmapInfo;
    use tensorplay_runtime::vmap::{fallback_calls, vmap};
    // Two outputs: x + 1 and x * w.
    let op = library::custom_op("li31_7_two::op")
        .arg_names(&["x", "w"])
        .build(|x: &Tensor, w: f64| -> Result<(Tensor, Tensor)> {
            Ok((x.add_scalar(1.0)?, x.mul_scalar(w)?))
        })?;
    // Types that do not match the schema are refused when registering, naming the method.
    let Err(err) = op.register_vmap_typed(
        |_: &VmapInfo, (x, _w): (Tensor, Tensor), (d, _): (Option<usize>, Option<usize>)| {
            Ok((x, d))
        },
    ) else {
        panic!("a (Tensor, Tensor) rule for a (Tensor, float) op must be refused");
    };
    assert!(err.to_string().contains("register_vmap_typed"), "{err}");
    op.register_vmap_typed(
        |_: &VmapInfo, (x, w): (Tensor, f64), (d, _): (Option<usize>, Option<usize>)| {
            Ok(((x.add_scalar(1.0)?, x.mul_scalar(w)?), (d, d)))
        },
    )?;
    let f = vmap(
        |xs: &[Tensor]| {
            let (a, b) = op.call((&xs[0], 2.0))?;
            Ok(vec![a, b])
        },
        vec![Some(1)],
        vec![0, 0],
    );
    let before = fallback_calls();
    let out = f(&[Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?])?;
    assert_eq!(fallback_calls(), before, "the rule ran for the whole batch");
    // Batched along dim 1 of [[1, 2], [3, 4]]: examples are the columns [1, 3] and [2, 4].
    assert_eq!(vals(&out[0]), vec![2.0, 4.0, 3.0, 5.0]);
    assert_eq!(vals(&out[1]), vec![2.0, 6.0, 4.0, 8.0]);
    Ok(())
}
