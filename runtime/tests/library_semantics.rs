//! The seed's `torch.library` semantics that issue 10 pins down, one test (or a few) per
//! numbered item. Every test uses its own namespace (`lsem_<item>`): the registry is global
//! and tests run in parallel.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorplay_ir::schema::DefaultValue;
use tensorplay_runtime::library::{
    self, AutogradCtx, CpuLauncher, Grad, LaunchArg, Library, MutatesArgs, Prototype, Slot,
    get_ctx, infer_schema, wrap_triton,
};
use tensorplay_runtime::{DType, Device, Error, Result, Tensor, Value};

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn message(r: Result<impl std::fmt::Debug>) -> String {
    r.expect_err("expected an error").to_string()
}

fn boxed_add(delta: f64) -> impl Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync + 'static {
    move |args: &[Value]| match &args[0] {
        Value::Tensor(t) => Ok(vec![t.add_scalar(delta)?]),
        other => Err(Error::argument(
            "test",
            "x",
            "a tensor",
            format!("{other:?}"),
        )),
    }
}

// 1 -------------------------------------------------------------------------------------------

#[test]
fn item01_redefinition_replaces_the_op_for_every_handle() -> Result<()> {
    let old = library::custom_op("lsem_1::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let old_untyped = library::op_handle("lsem_1::op")?;
    let x = f32s(&[1.0]);
    assert_eq!(vals(&old.call((&x,))?), vec![2.0]);
    library::custom_op("lsem_1::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(10.0) })?;
    assert_eq!(vals(&old.call((&x,))?), vec![10.0]);
    assert_eq!(vals(&old_untyped.call1((&x,))?), vec![10.0]);
    // Registrations through an old handle land on the new op.
    old.register_fake(|x: &Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(x)) })?;
    assert!(library::registry().get("lsem_1::op")?.has_fake());
    Ok(())
}

// 2 -------------------------------------------------------------------------------------------

#[test]
fn item02_keyword_only_tensor_parameters_are_accepted() -> Result<()> {
    // Issue 10 refused them; issue 31 accepts them as PyTorch 2.15 does (the out= convention).
    // `library_issue31.rs` runs them through every layer.
    library::custom_op("lsem_2::op")
        .schema("(Tensor x, *, SymInt y, Tensor z) -> Tensor")
        .build(boxed_add(1.0))?;
    library::define("lsem_2::d(Tensor x, *, Tensor z) -> Tensor", None, None)?;
    let z = library::registry().get("lsem_2::d")?;
    assert!(z.schema().params[1].kwarg_only);
    // Keyword-only non-tensors are fine too.
    library::define("lsem_2::ok(Tensor x, *, SymInt y=1) -> Tensor", None, None)?;
    Ok(())
}

// 3 -------------------------------------------------------------------------------------------

#[test]
fn item03_register_kernel_takes_lower_case_device_types_or_devices() -> Result<()> {
    let op = library::custom_op("lsem_3::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let err = message(op.register_kernel(&["CUDA"], boxed_add(2.0)));
    assert!(
        err.contains("`cpu` or `cuda`") && err.contains("CUDA"),
        "{err}"
    );
    let err = message(library::register_kernel(
        &op,
        &["CPU"],
        boxed_add(2.0),
        None,
    ));
    assert!(err.contains("`cpu` or `cuda`"), "{err}");
    assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    op.register_kernel(Device::Cuda(0), boxed_add(3.0))?;
    op.register_kernel([Device::Cpu], boxed_add(4.0))?;
    assert_eq!(
        op.operator().kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Cuda, true), (Slot::Default, true)]
    );
    assert_eq!(vals(&op.call((f32s(&[0.0]),))?), vec![4.0]);
    // impl keeps its documented upper-case spellings.
    library::r#impl("lsem_3::op", &["CPU"], boxed_add(5.0), None)?;
    assert_eq!(vals(&op.call((f32s(&[0.0]),))?), vec![5.0]);
    Ok(())
}

// 4 -------------------------------------------------------------------------------------------

#[test]
fn item04_ops_without_tensors_dispatch_on_their_device_argument() -> Result<()> {
    let make = library::custom_op("lsem_4::make")
        .arg_names(&["n", "device"])
        .device_types(&["cpu"])
        .build(|n: i64, device: Device| -> Result<Tensor> {
            assert_eq!(device, Device::Cpu);
            Ok(Tensor::ones(&[n as usize], DType::F32))
        })?;
    assert_eq!(vals(&make.call((3i64, Device::Cpu))?), vec![1.0; 3]);
    let err = make.call((3i64, Device::Cuda(0))).unwrap_err();
    assert!(matches!(err, Error::Lookup(_)), "{err}");
    assert!(err.to_string().contains("cuda"), "{err}");
    // Meta asks for the fake kernel, which this op does not have.
    assert!(matches!(
        make.call((3i64, Device::Meta)).unwrap_err(),
        Error::Lookup(_)
    ));
    // Without a Device parameter there is nothing to dispatch on.
    let err = message(
        library::custom_op("lsem_4::nodevice")
            .arg_names(&["n"])
            .device_types(&["cpu"])
            .build(|n: i64| -> Result<Tensor> { Ok(Tensor::ones(&[n as usize], DType::F32)) }),
    );
    assert!(err.contains("Device"), "{err}");
    Ok(())
}

// 5 -------------------------------------------------------------------------------------------

#[test]
fn item05_disabling_a_missing_kernel_warns_and_sticks_to_later_registrations() -> Result<()> {
    let op = library::custom_op("lsem_5::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let x = f32s(&[0.0]);
    {
        let guard = op.set_kernel_enabled("cpu", false)?;
        assert!(guard.previous());
        let warning = guard
            .warning()
            .expect("a warning for a slot without a kernel");
        assert!(warning.contains("no cpu kernel"), "{warning}");
        // Registered while disabled: stays disabled, the default kernel runs.
        op.register_kernel(&["cpu"], boxed_add(100.0))?;
        assert_eq!(
            op.operator().kernel_slots(),
            vec![(Slot::Cpu, false), (Slot::Default, true)]
        );
        assert_eq!(vals(&op.call((&x,))?), vec![1.0]);
    }
    assert_eq!(vals(&op.call((&x,))?), vec![100.0]);
    let guard = op.set_kernel_enabled(Device::Cpu, false)?;
    assert!(guard.warning().is_none());
    Ok(())
}

// 6 -------------------------------------------------------------------------------------------

#[test]
fn item06_only_mutating_ops_returning_nothing_skip_the_fake_kernel() -> Result<()> {
    let log = library::custom_op("lsem_6::log")
        .arg_names(&["x"])
        .build(|_x: &Tensor| -> Result<()> { Ok(()) })?;
    let fake = Tensor::empty_fake(&[3], DType::F32, Device::Cpu);
    let err = log.call((&fake,)).unwrap_err();
    assert!(err.to_string().contains("no fake kernel"), "{err}");
    assert!(!log.operator().runs_on_fake());
    let fill = library::custom_op("lsem_6::fill")
        .arg_names(&["x"])
        .mutates_args(["x"])
        .build(|x: &Tensor| -> Result<()> { x.fill_(1.0).map(|_| ()) })?;
    fill.call((&fake,))?;
    assert!(fill.operator().runs_on_fake());
    Ok(())
}

// 7 -------------------------------------------------------------------------------------------

#[test]
fn item07_dropping_a_library_restores_what_it_overrode() -> Result<()> {
    let op = library::custom_op("lsem_7::op")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    op.register_kernel(&["cpu"], boxed_add(2.0))?;
    op.register_fake(|x: &Tensor| -> Result<Tensor> { Ok(Tensor::empty_like(x)) })?;
    let backward_calls = Arc::new(AtomicUsize::new(0));
    let calls = backward_calls.clone();
    op.register_autograd(
        move |_ctx: &AutogradCtx, g: &[Option<Tensor>]| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(vec![g[0].clone()])
        },
        None,
    )?;
    op.register_autocast("cpu", DType::F16)?;
    let x = f32s(&[0.0]);
    let fake = Tensor::empty_fake(&[4], DType::F32, Device::Cpu);
    {
        let lib = Library::new("lsem_7", "FRAGMENT")?;
        library::register_kernel(&op, &["cpu"], boxed_add(20.0), Some(&lib))?;
        library::register_fake(
            &op,
            |x: &Tensor| -> Result<Tensor> { Ok(Tensor::empty_fake(&[9], x.dtype(), x.device())) },
            Some(&lib),
            true,
        )?;
        library::register_autograd(
            &op,
            |_ctx: &AutogradCtx, g: &[Option<Tensor>]| Ok(vec![g[0].clone()]),
            None,
            Some(&lib),
        )?;
        library::register_autocast(&op, "cpu", DType::BF16, Some(&lib))?;
        assert_eq!(vals(&op.call((&x,))?), vec![20.0]);
        assert_eq!(op.call((&fake,))?.shape(), &[9]);
        let stale = library::get_kernel(&op, "cpu")?;
        assert_eq!(vals(&stale(&[x.clone().into()])?[0]), vec![20.0]);
        drop(lib);
        let err = stale(&[x.clone().into()]).unwrap_err();
        assert!(err.to_string().contains("invalidated"), "{err}");
    }
    // Everything the library overrode is back.
    assert_eq!(vals(&op.call((&x,))?), vec![2.0]);
    assert_eq!(op.call((&fake,))?.shape(), &[4]);
    let xg = f32s(&[0.0]).requires_grad_(true)?;
    op.call((&xg,))?.sum_all()?.backward()?;
    assert_eq!(backward_calls.load(Ordering::SeqCst), 1);
    assert_eq!(op.operator().autocast_dtype(Slot::Cpu), Some(DType::F16));
    let k = library::get_kernel(&op, "cpu")?;
    assert_eq!(vals(&k(&[x.into()])?[0]), vec![2.0]);
    Ok(())
}

// 8 -------------------------------------------------------------------------------------------

#[test]
fn item08_fake_kernels_make_data_dependent_sizes() -> Result<()> {
    let nonzero = library::custom_op("lsem_8::nonzero")
        .arg_names(&["x"])
        .build(|x: &Tensor| -> Result<Tensor> {
            let idx: Vec<i64> = x
                .to_vec::<f32>()?
                .iter()
                .enumerate()
                .filter(|(_, v)| **v != 0.0)
                .map(|(i, _)| i as i64)
                .collect();
            let n = idx.len();
            Tensor::from_vec(idx, &[n, 1])
        })?;
    nonzero.register_fake(|x: &Tensor| -> Result<Tensor> {
        let ctx = get_ctx()?;
        assert_eq!(ctx.op(), "lsem_8::nonzero");
        let n = ctx.new_dynamic_size(0, Some(x.numel()))?;
        let m = ctx.new_dynamic_size(0, None)?;
        assert_ne!(n.id(), m.id());
        assert_eq!((n.min(), n.max()), (0, Some(x.numel())));
        Ok(Tensor::empty_fake(&[n.into(), 1], DType::I64, x.device()))
    })?;
    assert!(get_ctx().is_err());
    let real = nonzero.call((f32s(&[0.0, 1.0, 2.0, 0.0, 3.0]),))?;
    assert_eq!(real.shape(), &[3, 1]);
    let fake = nonzero.call((Tensor::empty_fake(&[5], DType::F32, Device::Cpu),))?;
    assert!(fake.is_fake());
    assert_eq!(fake.shape(), &[2, 1]);
    // A one-element input caps the hint at its max.
    let one = nonzero.call((Tensor::empty_fake(&[1], DType::F32, Device::Cpu),))?;
    assert_eq!(one.shape(), &[1, 1]);
    Ok(())
}

// 9 -------------------------------------------------------------------------------------------

#[test]
fn item09_backward_returns_per_passed_input_and_lists_for_tensor_lists() -> Result<()> {
    let op = library::custom_op("lsem_9::affine")
        .schema("(Tensor x, Tensor? bias, float alpha) -> Tensor")
        .build(
            |x: &Tensor, bias: Option<&Tensor>, alpha: f64| -> Result<Tensor> {
                let y = x.mul_scalar(alpha)?;
                match bias {
                    Some(b) => y.add(b),
                    None => Ok(y),
                }
            },
        )?;
    op.register_autograd(
        |ctx: &AutogradCtx, g: &[Option<Tensor>]| {
            let alpha = match ctx.value("alpha")? {
                Value::Float(a) => *a,
                _ => 1.0,
            };
            let gx = g[0].as_ref().map(|g| g.mul_scalar(alpha)).transpose()?;
            // One gradient per tensor input passed (bias was None): just x.
            Ok(vec![gx])
        },
        Some(Box::new(|ctx: &mut AutogradCtx, inputs: &[Value], _| {
            ctx.save_value("alpha", inputs[2].clone());
            Ok(())
        })),
    )?;
    let x = f32s(&[1.0, 2.0]).requires_grad_(true)?;
    op.call((&x, None::<&Tensor>, 3.0))?.sum_all()?.backward()?;
    assert_eq!(vals(&x.grad().unwrap()), vec![3.0, 3.0]);

    let total = library::custom_op("lsem_9::total")
        .arg_names(&["xs"])
        .build(|xs: &[Tensor]| -> Result<Tensor> {
            let mut acc = xs[0].sum_all()?;
            for (i, x) in xs.iter().enumerate().skip(1) {
                acc = acc.add(&x.sum_all()?.mul_scalar((i + 1) as f64)?)?;
            }
            Ok(acc)
        })?;
    total.register_autograd(
        |_ctx: &AutogradCtx, g: &[Option<Tensor>]| {
            let g = g[0].clone().unwrap();
            Ok(vec![Grad::List(vec![
                Some(g.expand(&[2])?),
                Some(g.mul_scalar(2.0)?.expand(&[3])?),
            ])])
        },
        None,
    )?;
    let a = f32s(&[1.0, 1.0]).requires_grad_(true)?;
    let b = f32s(&[1.0, 1.0, 1.0]).requires_grad_(true)?;
    let y = total.call((vec![a.clone(), b.clone()],))?;
    assert_eq!(y.item::<f32>()?, 8.0);
    y.backward()?;
    assert_eq!(vals(&a.grad().unwrap()), vec![1.0, 1.0]);
    assert_eq!(vals(&b.grad().unwrap()), vec![2.0, 2.0, 2.0]);

    // A single tensor for a Tensor[] input is refused with a message naming it.
    total.register_autograd(
        |_ctx: &AutogradCtx, g: &[Option<Tensor>]| Ok(vec![g[0].clone()]),
        None,
    )?;
    let y = total.call((vec![a.clone(), b.clone()],))?;
    let err = y.backward().unwrap_err().to_string();
    assert!(err.contains("`xs`") && err.contains("list"), "{err}");
    Ok(())
}

// 10 ------------------------------------------------------------------------------------------

#[test]
fn item10_register_autograd_refuses_no_output_and_aliasing_outputs() -> Result<()> {
    let none = library::custom_op("lsem_10::none")
        .arg_names(&["x"])
        .build(|_x: &Tensor| -> Result<()> { Ok(()) })?;
    let err = message(none.register_autograd(
        |_ctx: &AutogradCtx, g: &[Option<Tensor>]| Ok(g.to_vec()),
        None,
    ));
    assert!(err.contains("returns nothing"), "{err}");
    library::define("lsem_10::view(Tensor(a) x) -> Tensor(a)", None, None)?;
    let err = message(library::register_autograd(
        "lsem_10::view",
        |_ctx: &AutogradCtx, g: &[Option<Tensor>]| Ok(g.to_vec()),
        None,
        None,
    ));
    assert!(err.contains("aliases an input"), "{err}");
    assert!(!library::registry().get("lsem_10::view")?.has_autograd());
    Ok(())
}

// 11 ------------------------------------------------------------------------------------------

#[test]
fn item11_define_checks_the_schema_name_and_accepts_the_seed_spelling() -> Result<()> {
    let err = message(library::define(
        "lsem_11::a",
        Some("foo(Tensor x) -> Tensor"),
        None,
    ));
    assert!(err.contains("foo"), "{err}");
    assert!(library::registry().find("lsem_11::afoo").is_none());
    assert!(library::registry().find("lsem_11::a").is_none());
    // The same name (bare or qualified) is fine.
    library::define("lsem_11::b", Some("b(Tensor x) -> Tensor"), None)?;
    library::define("lsem_11::c", Some("lsem_11::c(Tensor x) -> Tensor"), None)?;
    // The seed's `Library.define("ns::add(Tensor, Tensor)")`.
    let lib = Library::new("lsem_11", "FRAGMENT")?;
    let name = lib.define("lsem_11::add(Tensor, Tensor)", "", &[])?;
    assert_eq!(name, "lsem_11::add");
    let op = library::registry().get("lsem_11::add")?;
    assert_eq!(op.schema().params.len(), 2);
    assert!(op.schema().returns.is_empty());
    Ok(())
}

// 12 ------------------------------------------------------------------------------------------

#[test]
fn item12_impl_libraries_may_target_prim() -> Result<()> {
    let lib = Library::new("prim", "IMPL")?;
    assert_eq!(lib.namespace(), "prim");
    assert!(Library::new("prim", "DEF").is_err());
    assert!(Library::new("prim", "FRAGMENT").is_err());
    assert!(lib.define("x(Tensor a) -> Tensor", "", &[]).is_err());
    Ok(())
}

// 13 ------------------------------------------------------------------------------------------

#[test]
fn item13_infer_schema_covers_optional_lists_kwargs_and_mixed_tuples() -> Result<()> {
    let s = infer_schema(
        (
            ["xs", "y"],
            |_xs: Vec<Option<Tensor>>, y: &Tensor| -> Result<Tensor> { Ok(y.clone()) },
        ),
        MutatesArgs::None,
        Some("ns::op"),
    )?;
    assert_eq!(s, "ns::op(Tensor?[] xs, Tensor y) -> Tensor");
    let s = infer_schema(
        Prototype::new("()")
            .param("a", "Tensor")
            .param("b", "Tensor")
            .param("c", "Tensor")
            .param("d", "Tensor?[]"),
        ["a", "b", "c", "d"].into(),
        Some("ns::m"),
    )?;
    assert_eq!(
        s,
        "ns::m(Tensor(a!) a, Tensor(b!) b, Tensor(c!) c, Tensor(d!)?[] d) -> ()"
    );
    let s = infer_schema(
        Prototype::new("Tensor")
            .param("x", "Tensor")
            .kwarg("n", "SymInt")
            .kwarg_default("eps", "float", DefaultValue::Float(1e-5)),
        MutatesArgs::None,
        Some("ns::k"),
    )?;
    assert_eq!(s, "ns::k(Tensor x, *, SymInt n, float eps=1e-05) -> Tensor");
    tensorplay_ir::schema::Schema::parse(&s)?;
    assert!(
        infer_schema(
            Prototype::new("Tensor")
                .kwarg("n", "SymInt")
                .param("x", "Tensor"),
            MutatesArgs::None,
            None
        )
        .is_err()
    );
    type Mixed = (Tensor, i64, f64, bool, Vec<Tensor>);
    let s = infer_schema(
        (["x"], |x: &Tensor| -> Result<Mixed> {
            Ok((x.clone(), 1, 2.0, true, vec![]))
        }),
        MutatesArgs::None,
        None,
    )?;
    assert_eq!(s, "(Tensor x) -> (Tensor, SymInt, float, bool, Tensor[])");

    // Ops built from such closures run and return typed results.
    let stats = library::custom_op("lsem_13::stats")
        .arg_names(&["x", "parts"])
        .build(|x: &Tensor, parts: Vec<Option<Tensor>>| -> Result<Mixed> {
            let present: Vec<Tensor> = parts.into_iter().flatten().collect();
            Ok((
                x.mul_scalar(2.0)?,
                x.numel() as i64,
                x.sum_all()?.item::<f32>()? as f64,
                present.is_empty(),
                present
                    .iter()
                    .map(|t| t.add_scalar(1.0))
                    .collect::<Result<_>>()?,
            ))
        })?;
    assert_eq!(
        stats.schema().to_string(),
        "lsem_13::stats(Tensor x, Tensor?[] parts) -> (Tensor, SymInt, float, bool, Tensor[])"
    );
    let x = f32s(&[1.0, 2.0]);
    let parts: Vec<Option<Tensor>> = vec![None, Some(f32s(&[5.0]))];
    let (y, n, sum, empty, rest) = stats.call((&x, parts))?;
    assert_eq!(vals(&y), vec![2.0, 4.0]);
    assert_eq!((n, sum, empty), (2, 3.0, false));
    assert_eq!(rest.len(), 1);
    assert_eq!(vals(&rest[0]), vec![6.0]);
    Ok(())
}

// 15 ------------------------------------------------------------------------------------------

#[test]
fn item15_triton_ops_without_fake_run_their_body_on_fake_tensors() -> Result<()> {
    let launched = Arc::new(AtomicUsize::new(0));
    let count = launched.clone();
    let kernel = wrap_triton(CpuLauncher::new("lsem_double", move |pid, args| {
        count.fetch_add(1, Ordering::SeqCst);
        let (
            tensorplay_runtime::library::ProgramArg::Tensor(x),
            tensorplay_runtime::library::ProgramArg::Tensor(out),
        ) = (&args[0], &args[1])
        else {
            return Ok(());
        };
        let i = pid[0] as usize;
        if i < x.numel() {
            // SAFETY: `i < numel` of both f32 tensors (same shape), and each program id writes
            // only its own element.
            unsafe { out.write::<f32>(i, x.read::<f32>(i) * 2.0) };
        }
        Ok(())
    }));
    let op = library::triton_op("lsem_15::double")
        .arg_names(&["x"])
        .build(move |x: &Tensor| -> Result<Tensor> {
            let out = Tensor::empty(&[x.numel(), 2], x.dtype());
            let flat = out.reshape(&[x.numel() * 2])?;
            kernel.launch(
                [x.numel() as u32, 1, 1],
                &[LaunchArg::In(x.clone()), LaunchArg::Out(flat)],
            )?;
            Ok(out)
        })?;
    assert!(!op.operator().has_fake());
    assert!(op.operator().runs_on_fake());
    let real = op.call((f32s(&[1.0, 2.0]),))?;
    assert_eq!(real.shape(), &[2, 2]);
    let before = launched.load(Ordering::SeqCst);
    assert!(before > 0);
    let fake = op.call((Tensor::empty_fake(&[3], DType::F32, Device::Cpu),))?;
    assert!(fake.is_fake());
    assert_eq!(fake.shape(), &[3, 2]);
    assert_eq!(
        launched.load(Ordering::SeqCst),
        before,
        "launches are skipped"
    );
    Ok(())
}

// 16 ------------------------------------------------------------------------------------------

#[test]
fn item16_undeclared_mutation_is_an_error_naming_the_argument() -> Result<()> {
    let sneaky = library::custom_op("lsem_16::sneaky")
        .arg_names(&["x", "y"])
        .build(|x: &Tensor, y: &Tensor| -> Result<Tensor> {
            y.fill_(0.0)?;
            x.add_scalar(1.0)
        })?;
    let x = f32s(&[1.0]);
    let y = f32s(&[5.0]);
    let err = sneaky.call((&x, &y)).unwrap_err().to_string();
    assert!(
        err.contains("lsem_16::sneaky") && err.contains("y") && err.contains("mutates_args"),
        "{err}"
    );
    // Declared: fine.
    let honest = library::custom_op("lsem_16::honest")
        .arg_names(&["x", "y"])
        .mutates_args(["y"])
        .build(|x: &Tensor, y: &Tensor| -> Result<Tensor> {
            y.fill_(0.0)?;
            x.add_scalar(1.0)
        })?;
    honest.call((&x, &y))?;
    assert_eq!(vals(&y), vec![0.0]);
    Ok(())
}

// 17 ------------------------------------------------------------------------------------------

#[test]
fn item17_defaults_of_the_wrong_type_are_definition_errors() {
    let err = message(
        library::custom_op("lsem_17::a")
            .schema("(Tensor x, int a=1.5) -> Tensor")
            .build(boxed_add(1.0)),
    );
    assert!(err.contains("`a`") && err.contains("1.5"), "{err}");
    let err = message(library::define(
        "lsem_17::b(Tensor x, bool b=maybe) -> Tensor",
        None,
        None,
    ));
    assert!(err.contains("`b`") && err.contains("maybe"), "{err}");
    assert!(library::registry().find("lsem_17::a").is_none());
    assert!(library::registry().find("lsem_17::b").is_none());
}
