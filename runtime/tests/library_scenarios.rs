//! Scenario suite of the custom-operator library (DESIGN.md §4), part 1: names and definitions,
//! `mutates_args`, device types, kernel slots and their selection, `set_kernel_enabled`,
//! `get_kernel`, the output rules, the `Library` class (DEF/FRAGMENT/IMPL, `impl`, `fallback`,
//! RAII removal), schemas given to `define`, calls with keyword arguments, `ops::call`,
//! `infer_schema` on typed closures, and concurrent use of the registry.
//!
//! Fake kernels, autograd, autocast and triton ops are in `library_features.rs`.
//!
//! Tests run in parallel in one process and the registry is global, so every test uses its own
//! namespace (`ls_<test>`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tensorplay_ir::OpClass;
use tensorplay_runtime::library::{
    self, CustomOpDef, Library, LibraryKind, MutatesArgs, Prototype, Slot, infer_schema, registry,
};
use tensorplay_runtime::{DType, Device, Error, Result, Tensor, Value, ops};

// ---- helpers ---------------------------------------------------------------------------------

/// Tensor argument `i` of a boxed kernel call.
fn tensor_at(args: &[Value], i: usize) -> Result<Tensor> {
    match args.get(i) {
        Some(Value::Tensor(t)) => Ok(t.clone()),
        other => Err(Error::argument(
            "test kernel",
            format!("#{i}"),
            "a tensor",
            format!("{other:?}"),
        )),
    }
}

fn f32s(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// An op `ns::name(Tensor x) -> Tensor` whose default kernel adds `delta`.
fn add_op(name: &str, delta: f64) -> Result<CustomOpDef> {
    library::custom_op(name)
        .arg_names(&["x"])
        .build(move |x: Tensor| -> Result<Tensor> { x.add_scalar(delta) })
        .map(Into::into)
}

/// A boxed kernel adding `delta` to its single tensor argument.
fn boxed_add(delta: f64) -> impl Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync + 'static {
    move |args: &[Value]| Ok(vec![tensor_at(args, 0)?.add_scalar(delta)?])
}

/// Calls a one-tensor op by name and returns the single output's values.
fn call_name(name: &str, x: &Tensor) -> Result<Vec<f32>> {
    let outs = ops::call(name, &[x.into()])?;
    Ok(vals(&outs[0]))
}

fn assert_registration(err: Error, needle: &str) {
    assert!(
        matches!(err, Error::Registration(_)),
        "expected a registration error, got {err:?}"
    );
    assert!(
        err.to_string().contains(needle),
        "`{err}` should mention `{needle}`"
    );
}

fn assert_lookup(err: Error, needle: &str) {
    assert!(
        matches!(err, Error::Lookup(_)),
        "expected a lookup error, got {err:?}"
    );
    assert!(
        err.to_string().contains(needle),
        "`{err}` should mention `{needle}`"
    );
}

fn assert_argument(err: Error, arg_name: &str, needle: &str) {
    match &err {
        Error::Argument { arg, .. } => assert_eq!(arg, arg_name, "{err}"),
        other => panic!("expected an argument error about `{arg_name}`, got {other:?}"),
    }
    assert!(
        err.to_string().contains(needle),
        "`{err}` should mention `{needle}`"
    );
}

// ---- qualified names -------------------------------------------------------------------------

#[test]
fn custom_op_bad_qualnames_register_nothing() {
    let bad = [
        ("ls_badname_op", "no `::`"),
        ("ls_badname::bad-name", "'-' in the operator name"),
        ("ls bad::op", "' ' in the namespace"),
        ("::ls_badname_empty_ns", "namespace is empty"),
        ("ls_badname::", "operator name is empty"),
        ("ls_badname::op.", "overload name is empty"),
        ("1ls_badname::op", "'1'"),
        ("ls_badname::op.v-1", "'-' in the overload name"),
        ("ls_badname::é", "'é'"),
    ];
    for (name, why) in bad {
        let err = add_op(name, 1.0).unwrap_err();
        assert_registration(err, why);
        assert!(
            registry().find(name).is_none(),
            "`{name}` must not be registered"
        );
    }
    // The valid parts of those names are not registered either.
    for name in ["ls_badname::op", "ls_badname::bad", "ls_badname::op.v"] {
        assert!(
            registry().find(name).is_none(),
            "`{name}` must not be registered"
        );
    }
}

#[test]
fn reserved_namespaces_are_rejected_everywhere() {
    assert_registration(add_op("prim::ls_reserved", 1.0).unwrap_err(), "reserved");
    assert_registration(add_op("tp::ls_reserved", 1.0).unwrap_err(), "reserved");
    assert_registration(add_op("tp::add", 1.0).unwrap_err(), "reserved");
    assert_registration(
        library::define("prim::ls_reserved_def(Tensor x) -> Tensor", None, None).unwrap_err(),
        "reserved",
    );
    assert_registration(
        library::define("tp::ls_reserved_def", Some("(Tensor x) -> Tensor"), None).unwrap_err(),
        "reserved",
    );
    for kind in ["DEF", "FRAGMENT", "IMPL"] {
        assert_registration(Library::new("tp", kind).unwrap_err(), "reserved");
    }
    // Only defining into `prim` is reserved: an IMPL library there is fine.
    for kind in ["DEF", "FRAGMENT"] {
        assert_registration(Library::new("prim", kind).unwrap_err(), "reserved");
    }
    Library::new("prim", "IMPL").unwrap();
    for name in [
        "prim::ls_reserved",
        "tp::ls_reserved",
        "prim::ls_reserved_def",
        "tp::ls_reserved_def",
    ] {
        assert!(
            registry().find(name).is_none(),
            "`{name}` must not be registered"
        );
    }
    // The builtin is untouched.
    let add = registry().find("tp::add").expect("builtin add");
    assert_eq!(add.origin(), library::registry::Origin::Builtin);
    let a = f32s(&[1.0, 2.0]);
    assert_eq!(call_name_2("tp::add", &a, &a), vec![2.0, 4.0]);
}

fn call_name_2(name: &str, a: &Tensor, b: &Tensor) -> Vec<f32> {
    vals(&ops::call(name, &[a.into(), b.into()]).unwrap()[0])
}

#[test]
fn define_bad_names_register_nothing() {
    // No namespace, a bad namespace, no schema at all.
    assert_registration(
        library::define("ls_defbad_op(Tensor x) -> Tensor", None, None).unwrap_err(),
        "namespace",
    );
    assert!(library::define("ls-defbad::op(Tensor x) -> Tensor", None, None).is_err());
    assert_registration(
        library::define("ls_defbad::op", None, None).unwrap_err(),
        "needs a schema",
    );
    assert!(library::define("ls_defbad::op-x", Some("(Tensor x) -> Tensor"), None).is_err());
    for name in [
        "ls_defbad_op",
        "ls-defbad::op",
        "ls_defbad::op",
        "ls_defbad::op-x",
    ] {
        assert!(
            registry().find(name).is_none(),
            "`{name}` must not be registered"
        );
    }
    // Library namespaces are checked the same way.
    assert_registration(
        Library::new("ls-defbad", "DEF").unwrap_err(),
        "invalid library namespace",
    );
    assert_registration(
        Library::new("", "FRAGMENT").unwrap_err(),
        "invalid library namespace",
    );
}

#[test]
fn overload_names_are_separate_operators() -> Result<()> {
    let fast = add_op("ls_overload::op.fast", 5.0)?;
    assert_eq!(fast.name(), "ls_overload::op.fast");
    assert_eq!(
        fast.schema().to_string(),
        "ls_overload::op.fast(Tensor x) -> Tensor"
    );
    assert!(registry().find("ls_overload::op").is_none());
    let base = add_op("ls_overload::op", 1.0)?;
    let x = f32s(&[1.0]);
    assert_eq!(call_name("ls_overload::op.fast", &x)?, vec![6.0]);
    assert_eq!(vals(&base.call1(&[x.into()])?), vec![2.0]);
    Ok(())
}

// ---- custom_op redefinition and mixing with define --------------------------------------------

#[test]
fn custom_op_redefinition_replaces_the_op() -> Result<()> {
    let v1 = add_op("ls_redef::op", 1.0)?;
    let x = f32s(&[1.0, 2.0]);
    assert_eq!(call_name("ls_redef::op", &x)?, vec![2.0, 3.0]);
    // Redefine with a different body and a different schema.
    let v2 = library::custom_op("ls_redef::op")
        .arg_names(&["x", "scale"])
        .build(|x: Tensor, s: f64| -> Result<Tensor> { x.mul_scalar(s) })?;
    assert_eq!(
        v2.schema().to_string(),
        "ls_redef::op(Tensor x, float scale) -> Tensor"
    );
    let found = registry().get("ls_redef::op")?;
    assert!(Arc::ptr_eq(&found, &v2.operator()));
    // Item 1: the old handle follows the redefinition (schema and body) instead of keeping
    // the op it was created with.
    assert!(Arc::ptr_eq(&found, &v1.operator()));
    assert_eq!(v1.schema(), v2.schema());
    let y = v1.call((&x, 10.0))?;
    assert_eq!(vals(&y[0]), vec![10.0, 20.0]);
    let y = ops::call("ls_redef::op", &[x.clone().into(), 10.0.into()])?;
    assert_eq!(vals(&y[0]), vec![10.0, 20.0]);
    // The old schema no longer binds through the registry.
    assert!(ops::call("ls_redef::op", &[]).is_err());
    Ok(())
}

#[test]
fn mixing_custom_op_and_define_for_one_name_is_an_error() -> Result<()> {
    // custom_op first, then define: error, the custom op is intact.
    add_op("ls_mix::a", 1.0)?;
    assert_registration(
        library::define("ls_mix::a(Tensor x) -> Tensor", None, None).unwrap_err(),
        "custom_op",
    );
    let lib = Library::new("ls_mix", "FRAGMENT")?;
    assert_registration(
        lib.define("a(Tensor x) -> Tensor", "", &[]).unwrap_err(),
        "custom_op",
    );
    assert_eq!(call_name("ls_mix::a", &f32s(&[1.0]))?, vec![2.0]);
    assert_eq!(
        registry().get("ls_mix::a")?.origin(),
        library::registry::Origin::CustomOp
    );

    // define first, then custom_op: error, the defined op is intact.
    library::define("ls_mix::b(Tensor x) -> Tensor", None, None)?;
    library::r#impl(
        "ls_mix::b",
        &["CompositeExplicitAutograd"],
        boxed_add(7.0),
        None,
    )?;
    assert_registration(add_op("ls_mix::b", 1.0).unwrap_err(), "define");
    assert_eq!(call_name("ls_mix::b", &f32s(&[1.0]))?, vec![8.0]);
    assert_eq!(
        registry().get("ls_mix::b")?.origin(),
        library::registry::Origin::Defined
    );
    Ok(())
}

// ---- mutates_args ----------------------------------------------------------------------------

#[test]
fn mutates_args_naming_a_missing_argument_is_an_error() {
    let err = library::custom_op("ls_mut_missing::op")
        .arg_names(&["x", "out"])
        .mutates_args(["outt"])
        .build(|x: Tensor, out: Tensor| -> Result<()> {
            out.copy_(&x)?;
            Ok(())
        })
        .unwrap_err();
    assert_argument(err, "mutates_args", "`outt`");
    assert!(registry().find("ls_mut_missing::op").is_none());
}

#[test]
fn mutates_args_naming_a_non_tensor_argument_is_an_error() {
    let err = library::custom_op("ls_mut_nontensor::op")
        .arg_names(&["x", "n"])
        .mutates_args(["n"])
        .build(|x: Tensor, n: i64| -> Result<Tensor> { x.add_scalar(n) })
        .unwrap_err();
    assert_argument(err, "mutates_args", "SymInt");
    assert!(registry().find("ls_mut_nontensor::op").is_none());
    // Through an explicit schema as well.
    let err = library::custom_op("ls_mut_nontensor::op2")
        .schema("(Tensor x, int n) -> Tensor")
        .mutates_args(["n"])
        .build(boxed_add(1.0))
        .unwrap_err();
    assert_argument(err, "mutates_args", "int");
    assert!(registry().find("ls_mut_nontensor::op2").is_none());
}

#[test]
fn declared_mutation_runs_in_place() -> Result<()> {
    let op = library::custom_op("ls_mut_inplace::fill")
        .arg_names(&["out", "value"])
        .mutates_args(["out"])
        .build(|out: Tensor, v: f64| -> Result<()> {
            out.fill_(v)?;
            Ok(())
        })?;
    assert_eq!(
        op.schema().to_string(),
        "ls_mut_inplace::fill(Tensor(a!) out, float value) -> ()"
    );
    assert_eq!(op.operator().class(), OpClass::Mutating);
    assert_eq!(op.operator().mutated_params(), vec!["out"]);
    let t = Tensor::zeros(&[3], DType::F32);
    let v0 = t.version();
    let outs = op.def().call(&[t.clone().into(), 2.5.into()])?;
    assert!(outs.is_empty());
    assert_eq!(vals(&t), vec![2.5; 3]);
    assert!(t.version() > v0, "an in-place write bumps the version");
    Ok(())
}

#[test]
fn mutates_args_unknown_marks_every_tensor_argument() -> Result<()> {
    let op = library::custom_op("ls_mut_unknown::op")
        .arg_names(&["x", "n", "y", "maybe"])
        .mutates_args(MutatesArgs::Unknown)
        .build(
            |x: Tensor, n: i64, y: Tensor, _m: Option<Tensor>| -> Result<()> {
                x.fill_(n)?;
                y.copy_(&x)?;
                Ok(())
            },
        )?;
    assert_eq!(
        op.schema().to_string(),
        "ls_mut_unknown::op(Tensor(a!) x, SymInt n, Tensor(b!) y, Tensor(c!)? maybe) -> ()"
    );
    assert_eq!(op.operator().mutated_params(), vec!["x", "y", "maybe"]);
    assert_eq!(op.operator().class(), OpClass::Mutating);
    let x = Tensor::zeros(&[2], DType::F32);
    let y = Tensor::zeros(&[2], DType::F32);
    op.call_values(&[x.clone().into(), 4i64.into(), y.clone().into(), Value::None])?;
    assert_eq!(vals(&y), vec![4.0, 4.0]);
    // With an explicit schema, Unknown must match every tensor being written.
    let err = library::custom_op("ls_mut_unknown::partial")
        .schema("(Tensor(a!) x, Tensor y) -> ()")
        .mutates_args(MutatesArgs::Unknown)
        .build(|_: &[Value]| -> Result<Vec<Tensor>> { Ok(vec![]) })
        .unwrap_err();
    assert_registration(err, "mutates_args");
    Ok(())
}

#[test]
fn explicit_schema_disagreeing_with_mutates_args_is_an_error() -> Result<()> {
    let noop = |_: &[Value]| -> Result<Vec<Tensor>> { Ok(vec![]) };
    // The schema writes `x`, mutates_args says nothing.
    let err = library::custom_op("ls_schema_mut::a")
        .schema("(Tensor(a!) x) -> ()")
        .build(noop)
        .unwrap_err();
    assert_registration(err, "marks [x] as mutated but mutates_args is []");
    // mutates_args names `x`, the schema writes nothing.
    let err = library::custom_op("ls_schema_mut::b")
        .schema("(Tensor x, Tensor y) -> ()")
        .mutates_args(["x"])
        .build(noop)
        .unwrap_err();
    assert_registration(err, "marks [] as mutated but mutates_args is [x]");
    // They name different tensors.
    let err = library::custom_op("ls_schema_mut::c")
        .schema("(Tensor(a!) x, Tensor y) -> ()")
        .mutates_args(["y"])
        .build(noop)
        .unwrap_err();
    assert_registration(err, "mutates_args");
    for n in ["a", "b", "c"] {
        assert!(registry().find(&format!("ls_schema_mut::{n}")).is_none());
    }
    // Agreement (with a pasted full schema) is fine.
    let ok = library::custom_op("ls_schema_mut::d")
        .schema("ls_schema_mut::d(Tensor(a!) x, Tensor y) -> ()")
        .mutates_args(["x"])
        .build(noop)?;
    assert_eq!(ok.operator().mutated_params(), vec!["x"]);
    Ok(())
}

#[test]
fn explicit_schema_must_name_the_op_and_match_the_kernel() {
    let err = library::custom_op("ls_schema_name::a")
        .schema("ls_schema_name::b(Tensor x) -> Tensor")
        .build(boxed_add(1.0))
        .unwrap_err();
    assert_registration(err, "ls_schema_name::b");
    let err = library::custom_op("ls_schema_name::c")
        .schema("(Tensor x, Tensor y) -> Tensor")
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })
        .unwrap_err();
    assert_registration(err, "1 parameters but the schema has 2");
    // A boxed kernel cannot be inferred.
    let err = library::custom_op("ls_schema_name::d")
        .build(boxed_add(1.0))
        .unwrap_err();
    assert_registration(err, "explicit schema");
    // A malformed explicit schema is a schema error.
    let err = library::custom_op("ls_schema_name::e")
        .schema("(Tensor x -> Tensor")
        .build(boxed_add(1.0))
        .unwrap_err();
    assert!(matches!(err, Error::Schema { .. }), "{err:?}");
    for n in ["a", "b", "c", "d", "e"] {
        assert!(registry().find(&format!("ls_schema_name::{n}")).is_none());
    }
}

// ---- device_types ----------------------------------------------------------------------------

#[test]
fn device_types_accept_only_lower_case_cpu_and_cuda() {
    for bad in [
        "CPU",
        "cuda:0",
        "tpu",
        "",
        "Cuda",
        "default",
        "CompositeExplicitAutograd",
    ] {
        let err = library::custom_op("ls_devtypes_bad::op")
            .arg_names(&["x"])
            .device_types(&[bad])
            .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })
            .unwrap_err();
        assert_argument(err, "device_types", &format!("`{bad}`"));
        assert!(
            registry().find("ls_devtypes_bad::op").is_none(),
            "after `{bad}`"
        );
    }
}

#[test]
fn device_types_restrict_the_slots_the_body_fills() -> Result<()> {
    let cpu_only = library::custom_op("ls_devtypes::cpu_only")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let op = cpu_only.operator();
    assert_eq!(op.device_types(), Some(&[Slot::Cpu][..]));
    assert_eq!(op.kernel_slots(), vec![(Slot::Cpu, true)]);
    assert_eq!(op.selected_slot(Device::Cpu), Some(Slot::Cpu));
    assert_eq!(op.selected_slot(Device::Cuda(0)), None);
    assert_eq!(vals(&cpu_only.call1(&[f32s(&[1.0]).into()])?), vec![2.0]);
    assert_lookup(
        library::get_kernel(&cpu_only, "cuda").err().unwrap(),
        "no usable kernel",
    );

    let both = library::custom_op("ls_devtypes::both")
        .arg_names(&["x"])
        .device_types(&["cpu", "cuda"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    assert_eq!(
        both.operator().kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Cuda, true)]
    );
    assert_eq!(
        both.operator().selected_slot(Device::Cuda(1)),
        Some(Slot::Cuda)
    );

    // Omitted: every device, through the default slot.
    let all = add_op("ls_devtypes::all", 1.0)?;
    assert_eq!(all.operator().device_types(), None);
    assert_eq!(all.operator().kernel_slots(), vec![(Slot::Default, true)]);
    assert_eq!(
        all.operator().selected_slot(Device::Cuda(0)),
        Some(Slot::Default)
    );
    Ok(())
}

#[test]
fn empty_device_types_mean_every_device() -> Result<()> {
    // Like register_kernel(op, []), an empty list is the device-agnostic slot, never an op
    // without any kernel.
    let op = library::custom_op("ls_devtypes_empty::op")
        .arg_names(&["x"])
        .device_types(&[])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    assert_eq!(vals(&op.call1(&[f32s(&[1.0]).into()])?), vec![2.0]);
    Ok(())
}

// ---- kernel slots and selection --------------------------------------------------------------

#[test]
fn cpu_kernel_wins_over_default_on_cpu_tensors() -> Result<()> {
    let op = add_op("ls_select::op", 1.0)?;
    let x = f32s(&[1.0]);
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![2.0]);
    op.register_kernel(&["cpu"], |x: Tensor| -> Result<Tensor> {
        x.add_scalar(100.0)
    })?;
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![101.0]);
    let o = op.operator();
    assert_eq!(o.selected_slot(Device::Cpu), Some(Slot::Cpu));
    // Tensors on cuda would still use the default kernel; meta tensors have no device slot.
    assert_eq!(o.selected_slot(Device::Cuda(0)), Some(Slot::Default));
    assert_eq!(o.selected_slot(Device::Meta), Some(Slot::Default));
    // A cuda kernel does not affect cpu calls.
    op.register_kernel(&["cuda"], |x: Tensor| -> Result<Tensor> {
        x.add_scalar(1000.0)
    })?;
    assert_eq!(o.selected_slot(Device::Cuda(0)), Some(Slot::Cuda));
    assert_eq!(vals(&op.call1(&[x.into()])?), vec![101.0]);
    Ok(())
}

#[test]
fn last_registration_wins_and_composite_spellings_fill_the_default_slot() -> Result<()> {
    let op = add_op("ls_last::op", 1.0)?;
    let x = f32s(&[0.0]);
    op.register_kernel(&[], |x: Tensor| -> Result<Tensor> { x.add_scalar(2.0) })?;
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![2.0]);
    library::r#impl(
        "ls_last::op",
        &["CompositeImplicitAutograd"],
        |x: Tensor| -> Result<Tensor> { x.add_scalar(3.0) },
        None,
    )?;
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![3.0]);
    library::r#impl(
        "ls_last::op",
        &["CompositeExplicitAutograd"],
        boxed_add(4.0),
        None,
    )?;
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![4.0]);
    library::register_kernel(&op, Slot::Default, boxed_add(5.0), None)?;
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![5.0]);
    assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    // register_kernel takes lower-case device types only (impl keeps `CPU`/`CUDA`).
    assert_argument(
        op.register_kernel(&["CPU"], boxed_add(6.0)).unwrap_err(),
        "device_types",
        "`cpu` or `cuda`",
    );
    op.register_kernel(&["cpu"], boxed_add(6.0))?;
    assert_eq!(vals(&op.call1(&[x.into()])?), vec![6.0]);
    assert_argument(
        op.register_kernel(&["cuda:0"], boxed_add(7.0)).unwrap_err(),
        "device_types",
        "cuda:0",
    );
    assert_argument(
        op.register_kernel(&["tpu"], boxed_add(7.0)).unwrap_err(),
        "device_types",
        "tpu",
    );
    // A typed kernel with the wrong arity is refused.
    let err = op
        .register_kernel(&["cpu"], |x: Tensor, _y: Tensor| -> Result<Tensor> {
            x.add_scalar(1.0)
        })
        .unwrap_err();
    assert_registration(err, "takes 2 parameters");
    assert_eq!(
        op.operator().kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Default, true)]
    );
    Ok(())
}

#[test]
fn cuda_only_kernel_on_cpu_tensors_is_a_clear_error() -> Result<()> {
    let op = library::custom_op("ls_cuda_only::op")
        .arg_names(&["x"])
        .device_types(&["cuda"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let err = op.call_values(&[f32s(&[1.0]).into()]).unwrap_err();
    assert_lookup(err.clone(), "ls_cuda_only::op");
    assert!(
        err.to_string().contains("device cpu") && err.to_string().contains("[cuda]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn fake_and_meta_tensors_keep_their_device() -> Result<()> {
    let op = add_op("ls_fake_device::op", 1.0)?;
    op.register_fake(|x: Tensor| -> Result<Tensor> {
        Ok(Tensor::empty_fake(x.shape(), x.dtype(), x.device()))
    })?;
    for device in [Device::Cpu, Device::Cuda(0), Device::Cuda(3), Device::Meta] {
        let x = Tensor::empty_fake(&[2, 5], DType::F16, device);
        let y = op.call1(&[x.into()])?;
        assert!(y.is_fake());
        assert_eq!(
            (y.shape(), y.dtype(), y.device()),
            (&[2usize, 5][..], DType::F16, device)
        );
    }
    Ok(())
}

#[test]
fn mixed_devices_are_an_error() -> Result<()> {
    let op = library::custom_op("ls_mixed_dev::op")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<Tensor> { a.add(&b) })?;
    let cpu = f32s(&[1.0]);
    let cuda = Tensor::empty_fake(&[1], DType::F32, Device::Cuda(0));
    let err = op.call_values(&[cpu.into(), cuda.into()]).unwrap_err();
    assert!(matches!(err, Error::Device { .. }), "{err:?}");
    assert!(err.to_string().contains("ls_mixed_dev::op"), "{err}");
    Ok(())
}

// ---- set_kernel_enabled ----------------------------------------------------------------------

#[test]
fn disabling_a_concrete_kernel_falls_back_to_default_and_the_guard_restores() -> Result<()> {
    let op = add_op("ls_enable::op", 1.0)?;
    op.register_kernel(&["cpu"], boxed_add(100.0))?;
    let x = f32s(&[0.0]);
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![100.0]);
    {
        let guard = op.set_kernel_enabled("cpu", false)?;
        assert!(guard.previous());
        assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![1.0]);
        assert_eq!(
            op.operator().kernel_slots(),
            vec![(Slot::Cpu, false), (Slot::Default, true)]
        );
        assert_eq!(
            op.operator().selected_slot(Device::Cpu),
            Some(Slot::Default)
        );
        {
            // Nested: disabling again reports the flag is already off; its guard restores off.
            let inner = op.set_kernel_enabled(Device::Cpu, false)?;
            assert!(!inner.previous());
        }
        assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![1.0]);
    }
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![100.0]);
    assert_eq!(
        op.operator().kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Default, true)]
    );
    // Re-enabling explicitly (and keeping the guard's flag by forgetting nothing) works too.
    let g = op.set_kernel_enabled("cpu", true)?;
    assert!(g.previous());
    drop(g);
    assert_eq!(vals(&op.call1(&[x.into()])?), vec![100.0]);
    Ok(())
}

#[test]
fn the_default_kernel_cannot_be_disabled() -> Result<()> {
    let op = add_op("ls_enable_default::op", 1.0)?;
    for key in [
        "default",
        "CompositeExplicitAutograd",
        "CompositeImplicitAutograd",
    ] {
        let err = op.set_kernel_enabled(key, false).err().unwrap();
        assert_argument(err, "device_type", "cannot be disabled");
    }
    assert_argument(
        op.set_kernel_enabled("tpu", false).err().unwrap(),
        "device_type",
        "`tpu`",
    );
    // No cuda kernel to toggle: a warning, and the flag waits for one.
    let g = op.set_kernel_enabled("cuda", false)?;
    assert!(g.warning().is_some_and(|w| w.contains("no cuda kernel")));
    drop(g);
    assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    assert_eq!(vals(&op.call1(&[f32s(&[1.0]).into()])?), vec![2.0]);
    Ok(())
}

#[test]
fn disabled_kernel_without_default_is_an_error_naming_the_slots() -> Result<()> {
    let op = library::custom_op("ls_enable_nodefault::op")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    let _g = op.set_kernel_enabled("cpu", false)?;
    let err = op.call_values(&[f32s(&[1.0]).into()]).unwrap_err();
    assert_lookup(err.clone(), "cpu (disabled)");
    assert!(err.to_string().contains("ls_enable_nodefault::op"), "{err}");
    Ok(())
}

// ---- get_kernel ------------------------------------------------------------------------------

#[test]
fn get_kernel_resolves_every_spelling() -> Result<()> {
    let op = add_op("ls_getk::op", 1.0)?;
    op.register_kernel(&["cpu"], boxed_add(10.0))?;
    op.register_kernel(&["cuda"], boxed_add(20.0))?;
    let x = f32s(&[0.0]);
    let run = |key: &str| -> Result<f32> {
        let k = library::get_kernel("ls_getk::op", key)?;
        Ok(vals(&k(&[x.clone().into()])?[0])[0])
    };
    assert_eq!(run("cpu")?, 10.0);
    assert_eq!(run("CPU")?, 10.0);
    assert_eq!(run("cuda")?, 20.0);
    assert_eq!(run("CUDA")?, 20.0);
    assert_eq!(run("default")?, 1.0);
    assert_eq!(run("CompositeExplicitAutograd")?, 1.0);
    assert_eq!(run("CompositeImplicitAutograd")?, 1.0);
    // A disabled concrete kernel counts as absent: the default kernel is returned.
    {
        let _g = op.set_kernel_enabled("cuda", false)?;
        assert_eq!(run("cuda")?, 1.0);
    }
    assert_eq!(run("cuda")?, 20.0);
    // Through a handle and an owned String.
    let k = library::get_kernel(&op, "cpu")?;
    assert_eq!(vals(&k(&[x.clone().into()])?[0]), vec![10.0]);
    let k = library::get_kernel(String::from("ls_getk::op"), "default")?;
    assert_eq!(vals(&k(&[x.into()])?[0]), vec![1.0]);
    Ok(())
}

#[test]
fn get_kernel_lookup_errors() -> Result<()> {
    // Nothing registered at all.
    library::define("ls_getk_err::bare(Tensor x) -> Tensor", None, None)?;
    assert_lookup(
        library::get_kernel("ls_getk_err::bare", "cpu")
            .err()
            .unwrap(),
        "no usable kernel",
    );
    assert_lookup(
        library::get_kernel("ls_getk_err::bare", "default")
            .err()
            .unwrap(),
        "registered: []",
    );
    // Only a cpu kernel: `default` and `cuda` find nothing; disabled cpu counts as absent.
    let op = library::custom_op("ls_getk_err::cpu")
        .arg_names(&["x"])
        .device_types(&["cpu"])
        .build(|x: Tensor| -> Result<Tensor> { x.add_scalar(1.0) })?;
    assert!(library::get_kernel(&op, "cpu").is_ok());
    assert_lookup(
        library::get_kernel(&op, "default").err().unwrap(),
        "`default`",
    );
    assert_lookup(
        library::get_kernel(&op, "cuda").err().unwrap(),
        "registered: [cpu]",
    );
    {
        let _g = op.set_kernel_enabled("cpu", false)?;
        assert_lookup(
            library::get_kernel(&op, "cpu").err().unwrap(),
            "cpu (disabled)",
        );
    }
    assert!(library::get_kernel(&op, "cpu").is_ok());
    // Unknown op, builtin op, bad key.
    assert_lookup(
        library::get_kernel("ls_getk_err::nope", "cpu")
            .err()
            .unwrap(),
        "ls_getk_err::nope",
    );
    assert_lookup(
        library::get_kernel("tp::add", "cpu").err().unwrap(),
        "builtin",
    );
    assert_argument(
        library::get_kernel(&op, "tpu").err().unwrap(),
        "dispatch_key",
        "`tpu`",
    );
    assert_argument(
        library::get_kernel(&op, "cuda:0").err().unwrap(),
        "dispatch_key",
        "`cuda:0`",
    );
    Ok(())
}

// ---- output rules ----------------------------------------------------------------------------

#[test]
fn an_output_aliasing_an_input_is_an_error() -> Result<()> {
    let same = library::custom_op("ls_alias::same")
        .schema("(Tensor x) -> Tensor")
        .build(|args: &[Value]| -> Result<Vec<Tensor>> { Ok(vec![tensor_at(args, 0)?]) })?;
    let x = f32s(&[1.0, 2.0]);
    let err = same.call(&[x.clone().into()]).unwrap_err();
    assert_argument(err, "returns", "do not alias inputs");
    // A view of an input aliases it too.
    let view = library::custom_op("ls_alias::view")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.reshape(&[2, 1]) })?;
    assert_argument(
        view.call_values(&[x.clone().into()]).unwrap_err(),
        "returns",
        "shares storage with input",
    );
    // Returning a copy is fine.
    let copy = library::custom_op("ls_alias::copy")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> { x.clone_tensor() })?;
    let y = copy.call1(&[x.clone().into()])?;
    assert_eq!(vals(&y), vec![1.0, 2.0]);
    assert!(!y.storage().same(x.storage()));
    Ok(())
}

#[test]
fn two_outputs_aliasing_each_other_is_an_error() -> Result<()> {
    let op = library::custom_op("ls_alias_pair::op")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<(Tensor, Tensor)> {
            let y = x.add_scalar(1.0)?;
            Ok((y.clone(), y.reshape(&[2])?))
        })?;
    assert_eq!(
        op.schema().to_string(),
        "ls_alias_pair::op(Tensor x) -> (Tensor, Tensor)"
    );
    let err = op.call_values(&[f32s(&[1.0, 2.0]).into()]).unwrap_err();
    assert_argument(err, "returns", "do not alias each other");
    // Two distinct outputs are fine.
    let ok = library::custom_op("ls_alias_pair::ok")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<(Tensor, Tensor)> {
            Ok((x.add_scalar(1.0)?, x.add_scalar(2.0)?))
        })?;
    let outs = ok.call((f32s(&[1.0]),))?;
    assert_eq!((vals(&outs.0), vals(&outs.1)), (vec![2.0], vec![3.0]));
    Ok(())
}

#[test]
fn wrong_output_count_is_an_error() -> Result<()> {
    let two = library::custom_op("ls_count::two")
        .schema("(Tensor x) -> Tensor")
        .build(|args: &[Value]| -> Result<Vec<Tensor>> {
            let x = tensor_at(args, 0)?;
            Ok(vec![x.add_scalar(1.0)?, x.add_scalar(2.0)?])
        })?;
    assert_argument(
        two.call(&[f32s(&[1.0]).into()]).unwrap_err(),
        "returns",
        "1 outputs",
    );
    let none = library::custom_op("ls_count::none")
        .schema("(Tensor x) -> (Tensor, Tensor)")
        .build(|_: &[Value]| -> Result<Vec<Tensor>> { Ok(vec![]) })?;
    assert_argument(
        none.call(&[f32s(&[1.0]).into()]).unwrap_err(),
        "returns",
        "2 outputs",
    );
    // call1 on a two-output op is a clear error too.
    let pair = library::custom_op("ls_count::pair")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<(Tensor, Tensor)> {
            Ok((x.add_scalar(1.0)?, x.add_scalar(2.0)?))
        })?;
    assert_argument(
        pair.call1(&[f32s(&[1.0]).into()]).unwrap_err(),
        "returns",
        "2 tensors",
    );
    // A list return takes any count.
    let list = library::custom_op("ls_count::list")
        .arg_names(&["x", "n"])
        .build(|x: Tensor, n: i64| -> Result<Vec<Tensor>> {
            (0..n).map(|i| x.add_scalar(i)).collect()
        })?;
    assert_eq!(
        list.schema().to_string(),
        "ls_count::list(Tensor x, SymInt n) -> Tensor[]"
    );
    assert_eq!(
        list.call_values(&[f32s(&[1.0]).into(), 3i64.into()])?.len(),
        3
    );
    assert_eq!(
        list.call_values(&[f32s(&[1.0]).into(), 0i64.into()])?.len(),
        0
    );
    Ok(())
}

// ---- Library ---------------------------------------------------------------------------------

#[test]
fn one_live_def_library_per_namespace() -> Result<()> {
    let first = Library::new("ls_def_twice", "DEF")?;
    assert_eq!(first.kind(), LibraryKind::Def);
    assert_eq!(first.namespace(), "ls_def_twice");
    assert_registration(Library::new("ls_def_twice", "DEF").unwrap_err(), "FRAGMENT");
    // FRAGMENT and IMPL libraries can coexist with the DEF.
    let frag = Library::new("ls_def_twice", "FRAGMENT")?;
    let imp = Library::new("ls_def_twice", "IMPL")?;
    assert_eq!(
        (frag.kind(), imp.kind()),
        (LibraryKind::Fragment, LibraryKind::Impl)
    );
    drop(first);
    // The namespace is free again.
    let again = Library::new("ls_def_twice", "DEF")?;
    drop(again);
    // Unknown kinds (case-sensitive, like PyTorch).
    assert_argument(
        Library::new("ls_def_twice", "def").unwrap_err(),
        "kind",
        "\"def\"",
    );
    assert_argument(
        Library::new("ls_def_twice", "CUSTOM").unwrap_err(),
        "kind",
        "\"CUSTOM\"",
    );
    Ok(())
}

#[test]
fn fragment_libraries_extend_a_namespace_from_two_places() -> Result<()> {
    let def = Library::new("ls_frag", "DEF")?;
    def.define("base(Tensor x) -> Tensor", "", &[])?;
    def.r#impl(
        "base",
        boxed_add(1.0),
        "CompositeExplicitAutograd",
        "",
        true,
    )?;
    let a = Library::new("ls_frag", "FRAGMENT")?;
    let b = Library::new("ls_frag", "FRAGMENT")?;
    assert_eq!(
        a.define("from_a(Tensor x) -> Tensor", "", &[])?,
        "ls_frag::from_a"
    );
    assert_eq!(
        b.define(
            "ls_frag::from_b(Tensor x) -> Tensor",
            "FROM_SCHEMA",
            &["pt2_compliant_tag"]
        )?,
        "ls_frag::from_b"
    );
    a.r#impl("from_a", boxed_add(10.0), "CPU", "", true)?;
    b.r#impl(
        "ls_frag::from_b",
        boxed_add(20.0),
        "CompositeImplicitAutograd",
        "",
        true,
    )?;
    let x = f32s(&[0.0]);
    assert_eq!(call_name("ls_frag::base", &x)?, vec![1.0]);
    assert_eq!(call_name("ls_frag::from_a", &x)?, vec![10.0]);
    assert_eq!(call_name("ls_frag::from_b", &x)?, vec![20.0]);
    // Dropping one fragment removes only what it registered.
    drop(a);
    assert!(registry().find("ls_frag::from_a").is_none());
    assert_eq!(call_name("ls_frag::from_b", &x)?, vec![20.0]);
    assert_eq!(call_name("ls_frag::base", &x)?, vec![1.0]);
    // A fragment cannot define an op that exists; defining in a foreign namespace is an error.
    assert_registration(
        b.define("base(Tensor x) -> Tensor", "", &[]).unwrap_err(),
        "already defined",
    );
    assert_registration(
        b.define("ls_other::op(Tensor x) -> Tensor", "", &[])
            .unwrap_err(),
        "namespace",
    );
    drop(def);
    assert!(registry().find("ls_frag::base").is_none());
    assert!(registry().find("ls_frag::from_b").is_some());
    drop(b);
    assert!(registry().find("ls_frag::from_b").is_none());
    Ok(())
}

#[test]
fn impl_libraries_cannot_define() -> Result<()> {
    let imp = Library::new("ls_impl_nodef", "IMPL")?;
    assert_registration(
        imp.define("op(Tensor x) -> Tensor", "", &[]).unwrap_err(),
        "IMPL",
    );
    // Not through the free function with `lib` either.
    assert_registration(
        library::define("ls_impl_nodef::op(Tensor x) -> Tensor", None, Some(&imp)).unwrap_err(),
        "IMPL",
    );
    assert!(registry().find("ls_impl_nodef::op").is_none());
    // It does add kernels to ops defined elsewhere.
    library::define("ls_impl_nodef::op(Tensor x) -> Tensor", None, None)?;
    imp.r#impl("op", boxed_add(3.0), "CPU", "", true)?;
    assert_eq!(call_name("ls_impl_nodef::op", &f32s(&[1.0]))?, vec![4.0]);
    Ok(())
}

#[test]
fn library_impl_dispatch_key_wins_over_device_type() -> Result<()> {
    let lib = Library::new("ls_impl_key", "DEF")?;
    lib.define("op(Tensor x) -> Tensor", "", &[])?;
    let op = registry().get("ls_impl_key::op")?;
    // device_type says CPU, the non-empty dispatch_key says the default slot.
    lib.r#impl(
        "op",
        boxed_add(1.0),
        "CPU",
        "CompositeImplicitAutograd",
        true,
    )?;
    assert_eq!(op.kernel_slots(), vec![(Slot::Default, true)]);
    // device_type says default, dispatch_key says CUDA.
    lib.r#impl(
        "op",
        boxed_add(2.0),
        "CompositeExplicitAutograd",
        "CUDA",
        true,
    )?;
    assert_eq!(
        op.kernel_slots(),
        vec![(Slot::Cuda, true), (Slot::Default, true)]
    );
    // An empty dispatch_key defers to device_type.
    lib.r#impl("op", boxed_add(3.0), "CPU", "", true)?;
    assert_eq!(
        op.kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Cuda, true), (Slot::Default, true)]
    );
    assert_eq!(call_name("ls_impl_key::op", &f32s(&[0.0]))?, vec![3.0]);
    // A bad key is an argument error, even when device_type is fine.
    assert!(
        lib.r#impl("op", boxed_add(4.0), "CPU", "XLA", true)
            .is_err()
    );
    assert_eq!(call_name("ls_impl_key::op", &f32s(&[0.0]))?, vec![3.0]);
    Ok(())
}

#[test]
fn library_impl_allow_override_false_refuses_an_occupied_slot() -> Result<()> {
    let lib = Library::new("ls_impl_override", "DEF")?;
    lib.define("op(Tensor x) -> Tensor", "", &[])?;
    lib.r#impl("op", boxed_add(1.0), "CPU", "", false)?; // empty slot: fine
    let err = lib
        .r#impl("op", boxed_add(2.0), "CPU", "", false)
        .unwrap_err();
    assert_registration(err, "already has a cpu kernel");
    assert_eq!(call_name("ls_impl_override::op", &f32s(&[0.0]))?, vec![1.0]);
    // Another slot is still free.
    lib.r#impl("op", boxed_add(5.0), "CompositeExplicitAutograd", "", false)?;
    // Overriding is the default behaviour.
    lib.r#impl("op", boxed_add(2.0), "CPU", "", true)?;
    assert_eq!(call_name("ls_impl_override::op", &f32s(&[0.0]))?, vec![2.0]);
    Ok(())
}

#[test]
fn library_impl_lookup_and_namespace_errors() -> Result<()> {
    let lib = Library::new("ls_impl_err", "FRAGMENT")?;
    assert_lookup(
        lib.r#impl("missing", boxed_add(1.0), "CPU", "", true)
            .unwrap_err(),
        "ls_impl_err::missing",
    );
    add_op("ls_impl_err_other::op", 1.0)?;
    assert_registration(
        lib.r#impl("ls_impl_err_other::op", boxed_add(1.0), "CPU", "", true)
            .unwrap_err(),
        "not in this library's namespace",
    );
    assert_eq!(
        registry().get("ls_impl_err_other::op")?.kernel_slots(),
        vec![(Slot::Default, true)]
    );
    Ok(())
}

#[test]
fn library_fallback_always_errors() -> Result<()> {
    for kind in ["DEF", "IMPL", "FRAGMENT"] {
        let lib = Library::new("ls_fallback", kind)?;
        for key in ["CPU", "CompositeExplicitAutograd", "Autocast", ""] {
            let err = lib.fallback(key).unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
            assert!(err.to_string().contains("fallthrough"), "{err}");
        }
    }
    Ok(())
}

#[test]
fn dropping_a_library_removes_its_ops_and_the_name_can_be_defined_again() -> Result<()> {
    let lib = Library::new("ls_drop_ops", "DEF")?;
    lib.define("op(Tensor x) -> Tensor", "", &[])?;
    lib.r#impl("op", boxed_add(1.0), "CompositeExplicitAutograd", "", true)?;
    let handle = registry().get("ls_drop_ops::op")?;
    assert_eq!(call_name("ls_drop_ops::op", &f32s(&[0.0]))?, vec![1.0]);
    drop(lib);
    assert!(registry().find("ls_drop_ops::op").is_none());
    assert!(
        !registry()
            .names()
            .iter()
            .any(|n| n.starts_with("ls_drop_ops::"))
    );
    assert_lookup(
        ops::call("ls_drop_ops::op", &[f32s(&[0.0]).into()]).unwrap_err(),
        "ls_drop_ops::op",
    );
    // Its registrations went with it, even on a handle kept alive.
    assert!(handle.kernel_slots().is_empty());
    // The op and the namespace can be defined again, with another schema.
    let lib = Library::new("ls_drop_ops", "DEF")?;
    lib.define("op(Tensor x, float s) -> Tensor", "", &[])?;
    lib.r#impl(
        "op",
        |x: Tensor, s: f64| -> Result<Tensor> { x.mul_scalar(s) },
        "CompositeExplicitAutograd",
        "",
        true,
    )?;
    let y = ops::call("ls_drop_ops::op", &[f32s(&[2.0]).into(), 3.0.into()])?;
    assert_eq!(vals(&y[0]), vec![6.0]);
    Ok(())
}

#[test]
fn dropping_a_library_removes_its_registrations_on_other_ops() -> Result<()> {
    let op = add_op("ls_drop_regs::op", 1.0)?;
    let x = f32s(&[0.0]);
    {
        let imp = Library::new("ls_drop_regs", "IMPL")?;
        imp.r#impl("op", boxed_add(50.0), "CPU", "", true)?;
        library::register_fake(
            &op,
            |x: Tensor| -> Result<Tensor> { x.clone_tensor() },
            Some(&imp),
            true,
        )?;
        library::register_autograd(&op, |_, g| Ok(vec![g[0].clone()]), None, Some(&imp))?;
        library::register_autocast(&op, "cpu", DType::F16, Some(&imp))?;
        library::register_vmap(&op, |_, _, _| Err(Error::Lookup("rule".into())), Some(&imp))?;
        library::register_kernel(&op, &["cuda"], boxed_add(60.0), Some(&imp))?;
        let o = op.operator();
        assert_eq!(
            o.kernel_slots(),
            vec![(Slot::Cpu, true), (Slot::Cuda, true), (Slot::Default, true)]
        );
        assert!(o.has_fake() && o.has_autograd());
        assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![50.0]);
    }
    // Everything the IMPL library registered is gone; the op and its own kernel stay.
    let o = op.operator();
    assert_eq!(o.kernel_slots(), vec![(Slot::Default, true)]);
    assert!(!o.has_fake() && !o.has_autograd());
    assert_eq!(vals(&op.call1(&[x.clone().into()])?), vec![1.0]);
    assert!(
        op.call(&[Tensor::empty_fake(&[1], DType::F32, Device::Cpu).into()])
            .is_err()
    );
    // The autocast rule went too: inside autocast the f32 input stays f32.
    let _ac = tensorplay_runtime::autocast::autocast("cpu", DType::BF16)?;
    assert_eq!(op.call1(&[x.into()])?.dtype(), DType::F32);
    Ok(())
}

#[test]
fn free_define_and_impl_with_a_library_are_owned_by_it() -> Result<()> {
    let lib = Library::new("ls_free_lib", "FRAGMENT")?;
    library::define("ls_free_lib::op", Some("(Tensor x) -> Tensor"), Some(&lib))?;
    library::r#impl("ls_free_lib::op", &["CPU"], boxed_add(2.0), Some(&lib))?;
    assert_eq!(call_name("ls_free_lib::op", &f32s(&[0.0]))?, vec![2.0]);
    // A schema naming another namespace does not belong in this library.
    assert_registration(
        library::define("ls_free_other::op(Tensor x) -> Tensor", None, Some(&lib)).unwrap_err(),
        "namespace",
    );
    drop(lib);
    assert!(registry().find("ls_free_lib::op").is_none());
    Ok(())
}

// ---- define and schemas ----------------------------------------------------------------------

#[test]
fn define_accepts_pasted_full_schemas_and_is_idempotent() -> Result<()> {
    library::define(
        "ls_define::op(Tensor x, *, float alpha=1.0) -> Tensor",
        None,
        None,
    )?;
    let op = registry().get("ls_define::op")?;
    assert_eq!(
        op.schema().to_string(),
        "ls_define::op(Tensor x, *, float alpha=1.0) -> Tensor"
    );
    assert_eq!(op.origin(), library::registry::Origin::Defined);
    assert!(op.kernel_slots().is_empty());
    // The same schema again (pasted or split): a no-op, the op is not replaced.
    library::define(
        "ls_define::op(Tensor x, *, float alpha=1.0) -> Tensor",
        None,
        None,
    )?;
    library::define(
        "ls_define::op",
        Some("(Tensor x, *, float alpha=1.0) -> Tensor"),
        None,
    )?;
    assert!(Arc::ptr_eq(&op, &registry().get("ls_define::op")?));
    // A different schema: an error; the original stays.
    assert_registration(
        library::define("ls_define::op", Some("(Tensor x) -> Tensor"), None).unwrap_err(),
        "already defined",
    );
    assert!(Arc::ptr_eq(&op, &registry().get("ls_define::op")?));
    // A defined op without kernels cannot run.
    library::r#impl(
        "ls_define::op",
        &[],
        |args: &[Value]| -> Result<Vec<Tensor>> {
            let Value::Float(a) = args[1] else {
                return Err(Error::Lookup("alpha".into()));
            };
            Ok(vec![tensor_at(args, 0)?.mul_scalar(a)?])
        },
        None,
    )?;
    let y = ops::call("ls_define::op", &[f32s(&[2.0]).into()])?;
    assert_eq!(vals(&y[0]), vec![2.0]);
    Ok(())
}

#[test]
fn define_without_kernels_cannot_run() -> Result<()> {
    library::define("ls_define_nok::op(Tensor x) -> Tensor", None, None)?;
    let err = ops::call("ls_define_nok::op", &[f32s(&[1.0]).into()]).unwrap_err();
    assert_lookup(err, "no kernel for device cpu; registered slots: []");
    Ok(())
}

#[test]
fn malformed_schemas_are_errors_with_their_column() {
    let cases = [
        ("ls_malformed::a(Tensor x -> Tensor", 26),
        ("ls_malformed::b(Tensor x) => Tensor", 27),
        ("ls_malformed::c(Tensor x) ->", 29),
        ("ls_malformed::d(Tensor(a! x) -> ()", 27),
        ("ls_malformed::e(Tensor x, int n=) -> Tensor", 33),
        ("ls_malformed::f(Tensor x, Tensor x) -> Tensor", 34),
    ];
    for (schema, col) in cases {
        let err = library::define(schema, None, None).unwrap_err();
        match &err {
            Error::Schema { column, .. } => assert_eq!(*column, col, "{schema}: {err}"),
            other => panic!("{schema}: expected a schema error, got {other:?}"),
        }
        assert!(err.to_string().contains(&format!("column {col}")), "{err}");
        let name = schema.split('(').next().unwrap();
        assert!(
            registry().find(name).is_none(),
            "`{name}` must not be registered"
        );
    }
    // Through Library::define too (the column counts in the text given).
    let lib = Library::new("ls_malformed_lib", "DEF").unwrap();
    let err = lib.define("op(Tensor x,) -> Tensor", "", &[]).unwrap_err();
    assert!(matches!(err, Error::Schema { column: 13, .. }), "{err:?}");
    assert!(registry().find("ls_malformed_lib::op").is_none());
}

#[test]
fn unknown_type_names_in_pasted_schemas_are_kept() -> Result<()> {
    library::define(
        "ls_unknown_ty::op(Tensor x, Layout? layout=None, Foo bar) -> Tensor",
        None,
        None,
    )?;
    let op = registry().get("ls_unknown_ty::op")?;
    assert_eq!(
        op.schema().to_string(),
        "ls_unknown_ty::op(Tensor x, Layout? layout=None, Foo bar) -> Tensor"
    );
    // Unknown types pass through binding unchecked.
    library::r#impl("ls_unknown_ty::op", &["cpu"], boxed_add(1.0), None)?;
    let y = ops::call(
        "ls_unknown_ty::op",
        &[f32s(&[1.0]).into(), Value::None, "anything".into()],
    )?;
    assert_eq!(vals(&y[0]), vec![2.0]);
    Ok(())
}

#[test]
fn free_impl_accepts_device_and_composite_spellings() -> Result<()> {
    library::define("ls_free_impl::op(Tensor x) -> Tensor", None, None)?;
    library::r#impl(
        "ls_free_impl::op",
        &["CompositeExplicitAutograd"],
        boxed_add(1.0),
        None,
    )?;
    library::r#impl("ls_free_impl::op", &["CPU", "CUDA"], boxed_add(2.0), None)?;
    let op = registry().get("ls_free_impl::op")?;
    assert_eq!(
        op.kernel_slots(),
        vec![(Slot::Cpu, true), (Slot::Cuda, true), (Slot::Default, true)]
    );
    assert_eq!(call_name("ls_free_impl::op", &f32s(&[0.0]))?, vec![2.0]);
    assert!(library::r#impl("ls_free_impl::op", &["TPU"], boxed_add(3.0), None).is_err());
    assert_lookup(
        library::r#impl("ls_free_impl::missing", &["CPU"], boxed_add(3.0), None).unwrap_err(),
        "ls_free_impl::missing",
    );
    // Builtins take no registrations.
    assert_registration(
        library::r#impl("tp::add", &["CPU"], boxed_add(3.0), None).unwrap_err(),
        "builtin",
    );
    Ok(())
}

// ---- calls: keyword arguments, defaults, types, arity ----------------------------------------

fn axpy_op(ns: &str) -> Result<CustomOpDef> {
    library::custom_op(&format!("{ns}::axpy"))
        .schema("(Tensor x, Tensor y, float alpha=2.0, *, bool negate=False) -> Tensor")
        .build(
            |x: Tensor, y: Tensor, alpha: f64, negate: bool| -> Result<Tensor> {
                let r = x.mul_scalar(alpha)?.add(&y)?;
                if negate { r.mul_scalar(-1.0) } else { Ok(r) }
            },
        )
        .map(Into::into)
}

#[test]
fn call_kw_binds_keywords_and_defaults() -> Result<()> {
    let op = axpy_op("ls_kw")?;
    let x = f32s(&[1.0, 2.0]);
    let y = f32s(&[10.0, 20.0]);
    // Defaults: alpha=2, negate=false.
    assert_eq!(
        vals(&op.call1(&[x.clone().into(), y.clone().into()])?),
        vec![12.0, 24.0]
    );
    // Positional alpha (an int widens to float), keyword-only negate.
    let r = op.call_kw(
        &[x.clone().into(), y.clone().into(), 3i64.into()],
        &[("negate", true.into())],
    )?;
    assert_eq!(vals(&r[0]), vec![-13.0, -26.0]);
    // Everything by keyword, in any order.
    let r = op.call_kw(
        &[],
        &[
            ("negate", false.into()),
            ("y", y.clone().into()),
            ("alpha", 0.5.into()),
            ("x", x.clone().into()),
        ],
    )?;
    assert_eq!(vals(&r[0]), vec![10.5, 21.0]);
    Ok(())
}

#[test]
fn call_kw_errors_name_the_parameter() -> Result<()> {
    let op = axpy_op("ls_kw_err")?;
    let x = f32s(&[1.0]);
    // Unknown keyword.
    assert_argument(
        op.call_kw(
            &[x.clone().into(), x.clone().into()],
            &[("beta", 1.0.into())],
        )
        .unwrap_err(),
        "beta",
        "unknown keyword",
    );
    // Positional and keyword for one parameter.
    assert_argument(
        op.call_kw(
            &[x.clone().into(), x.clone().into()],
            &[("y", x.clone().into())],
        )
        .unwrap_err(),
        "y",
        "both",
    );
    // The same keyword twice.
    assert_argument(
        op.call_kw(
            &[x.clone().into(), x.clone().into()],
            &[("alpha", 1.0.into()), ("alpha", 2.0.into())],
        )
        .unwrap_err(),
        "alpha",
        "twice",
    );
    // Too many positional arguments (negate is keyword-only).
    assert_argument(
        op.call(&[x.clone().into(), x.clone().into(), 1.0.into(), true.into()])
            .unwrap_err(),
        "args",
        "at most 3 positional",
    );
    // A missing required argument.
    assert_argument(op.call(&[x.clone().into()]).unwrap_err(), "y", "no default");
    // Wrong types.
    assert_argument(
        op.call(&[x.clone().into(), "y".into()]).unwrap_err(),
        "y",
        "Tensor",
    );
    assert_argument(
        op.call(&[x.clone().into(), x.clone().into(), "2".into()])
            .unwrap_err(),
        "alpha",
        "float",
    );
    assert_argument(
        op.call_kw(
            &[x.clone().into(), x.clone().into()],
            &[("negate", 1i64.into())],
        )
        .unwrap_err(),
        "negate",
        "bool",
    );
    assert_argument(
        op.call(&[5i64.into(), x.into()]).unwrap_err(),
        "x",
        "Tensor",
    );
    Ok(())
}

#[test]
fn optional_and_list_arguments_bind() -> Result<()> {
    let op = library::custom_op("ls_kw_opt::op")
        .arg_names(&["x", "bias", "dims"])
        .build(
            |x: Tensor, bias: Option<Tensor>, dims: Vec<i64>| -> Result<Tensor> {
                let s = x.sum(&dims, false)?;
                match bias {
                    Some(b) => s.add(&b),
                    None => Ok(s),
                }
            },
        )?;
    assert_eq!(
        op.schema().to_string(),
        "ls_kw_opt::op(Tensor x, Tensor? bias, SymInt[] dims) -> Tensor"
    );
    let x = Tensor::ones(&[2, 3], DType::F32);
    let r = op.call_values(&[x.clone().into(), Value::None, vec![1i64].into()])?;
    assert_eq!(vals(&r), vec![3.0, 3.0]);
    let r = op.call_kw(
        &[x.clone().into()],
        &[
            ("dims", vec![0i64].into()),
            ("bias", Some(f32s(&[1.0])).into()),
        ],
    )?;
    assert_eq!(vals(&r), vec![3.0, 3.0, 3.0]);
    // An optional without default may be omitted.
    let r = op.call_kw(&[x.clone().into()], &[("dims", vec![0i64, 1].into())])?;
    assert_eq!(vals(&r), vec![6.0]);
    assert_argument(
        op.call_values(&[x.into(), Value::None, 1.5.into()])
            .unwrap_err(),
        "dims",
        "SymInt[]",
    );
    Ok(())
}

#[test]
fn ops_call_reaches_builtins_and_custom_ops_by_name() -> Result<()> {
    let a = f32s(&[1.0, 2.0]);
    let b = f32s(&[3.0, 4.0]);
    assert_eq!(
        vals(&ops::call("tp::add", &[a.clone().into(), b.clone().into()])?[0]),
        vec![4.0, 6.0]
    );
    assert_eq!(
        vals(&ops::call("tp::mul", &[a.clone().into(), b.clone().into()])?[0]),
        vec![3.0, 8.0]
    );
    // The same as the typed method.
    assert!(ops::call("tp::add", &[a.clone().into(), b.clone().into()])?[0].equal(&a.add(&b)?)?);
    // A builtin through the registry entry, as CustomOpDef::call does.
    let add = registry().get("tp::add")?;
    let r = tensorplay_runtime::dispatch::call_operator(
        &add,
        &[a.clone().into(), b.clone().into()],
        &[],
    )?;
    assert_eq!(vals(&r[0]), vec![4.0, 6.0]);
    assert_eq!(add.class(), OpClass::Elementwise);
    // A custom op by name.
    add_op("ls_opscall::inc", 1.0)?;
    assert_eq!(call_name("ls_opscall::inc", &a)?, vec![2.0, 3.0]);
    // Errors: unknown name, wrong arity, wrong type.
    assert_lookup(
        ops::call("tp::no_such_op", &[]).unwrap_err(),
        "tp::no_such_op",
    );
    assert_lookup(
        ops::call("ls_opscall::nope", &[]).unwrap_err(),
        "ls_opscall::nope",
    );
    assert!(matches!(
        ops::call("tp::add", &[a.clone().into()]).unwrap_err(),
        Error::Argument { .. }
    ));
    assert!(matches!(
        ops::call("ls_opscall::inc", &[a.clone().into(), a.into()]).unwrap_err(),
        Error::Argument { .. }
    ));
    assert!(matches!(
        ops::call("ls_opscall::inc", &[1.0.into()]).unwrap_err(),
        Error::Argument { .. }
    ));
    Ok(())
}

// ---- infer_schema on typed closures ----------------------------------------------------------

fn schema_of<M, F: library::IntoKernel<M>>(
    _f: F,
    names: &[&str],
    mutates: MutatesArgs,
    name: &str,
) -> Result<String> {
    infer_schema(&Prototype::of::<F, M>(names)?, mutates, Some(name))
}

#[test]
fn infer_schema_of_typed_closures() -> Result<()> {
    assert_eq!(
        schema_of(
            |x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w) },
            &["x", "weight"],
            MutatesArgs::None,
            "mylib::weighted_sum"
        )?,
        "mylib::weighted_sum(Tensor x, Tensor weight) -> Tensor"
    );
    assert_eq!(
        schema_of(
            |_s: Tensor, _n: i64, _e: f64, _b: Option<Tensor>, _o: Tensor| -> Result<()> { Ok(()) },
            &["self", "n", "eps", "bias", "out"],
            ["out"].into(),
            "ns::op",
        )?,
        "ns::op(Tensor self, SymInt n, float eps, Tensor? bias, Tensor(a!) out) -> ()"
    );
    assert_eq!(
        schema_of(
            |_a: Tensor, _b: Tensor, _f: bool, _s: String| -> Result<(Tensor, Tensor)> {
                Err(Error::Lookup("x".into()))
            },
            &["a", "b", "flag", "mode"],
            ["b", "a"].into(),
            "ns::pair",
        )?,
        "ns::pair(Tensor(a!) a, Tensor(b!) b, bool flag, str mode) -> (Tensor, Tensor)"
    );
    assert_eq!(
        schema_of(
            |_xs: Vec<Tensor>,
             _d: Vec<i64>,
             _f: Vec<f64>,
             _t: DType,
             _dev: Device|
             -> Result<Vec<Tensor>> { Ok(vec![]) },
            &["xs", "dims", "scales", "dtype", "device"],
            MutatesArgs::None,
            "ns::many",
        )?,
        "ns::many(Tensor[] xs, SymInt[] dims, float[] scales, ScalarType dtype, Device device) -> Tensor[]"
    );
    assert_eq!(
        schema_of(
            |_x: Tensor, _n: i64| -> Result<()> { Ok(()) },
            &["x", "n"],
            MutatesArgs::Unknown,
            "ns::u"
        )?,
        "ns::u(Tensor(a!) x, SymInt n) -> ()"
    );
    // Errors: wrong name count, boxed kernels, mutating a non-tensor.
    assert_argument(
        schema_of(
            |x: Tensor| -> Result<Tensor> { Ok(x) },
            &["x", "y"],
            MutatesArgs::None,
            "ns::e",
        )
        .unwrap_err(),
        "names",
        "2",
    );
    assert_argument(
        schema_of(
            |_: &[Value]| -> Result<Vec<Tensor>> { Ok(vec![]) },
            &[],
            MutatesArgs::None,
            "ns::e",
        )
        .unwrap_err(),
        "prototype_function",
        "boxed",
    );
    assert_argument(
        schema_of(
            |x: Tensor, _n: i64| -> Result<Tensor> { Ok(x) },
            &["x", "n"],
            ["n"].into(),
            "ns::e",
        )
        .unwrap_err(),
        "mutates_args",
        "SymInt",
    );
    Ok(())
}

#[test]
fn custom_op_default_parameter_names() -> Result<()> {
    let op = library::custom_op("ls_argnames::op")
        .build(|x: Tensor, _k: i64, _on: bool| -> Result<Tensor> { x.clone_tensor() })?;
    assert_eq!(
        op.schema().to_string(),
        "ls_argnames::op(Tensor arg0, SymInt arg1, bool arg2) -> Tensor"
    );
    let err = library::custom_op("ls_argnames::bad")
        .arg_names(&["x"])
        .build(|x: Tensor, _y: Tensor| -> Result<Tensor> { Ok(x) })
        .unwrap_err();
    // The error names the op and the builder method the caller used.
    assert_argument(
        err,
        "arg_names",
        "ls_argnames::bad: invalid argument `arg_names`: expected 2 names",
    );
    assert!(registry().find("ls_argnames::bad").is_none());
    let nothing = library::custom_op("ls_argnames::nothing")
        .build(|| -> Result<Tensor> { Ok(Tensor::ones(&[1], DType::F32)) })?;
    assert_eq!(
        nothing.schema().to_string(),
        "ls_argnames::nothing() -> Tensor"
    );
    assert_eq!(vals(&nothing.call1(&[])?), vec![1.0]);
    Ok(())
}

// ---- concurrency -----------------------------------------------------------------------------

#[test]
fn concurrent_registration_calls_and_library_churn() -> Result<()> {
    const THREADS: usize = 8;
    const CALLS: usize = 1000;
    let shared = library::custom_op("ls_conc::shared")
        .arg_names(&["x", "k"])
        .build(|x: Tensor, k: f64| -> Result<Tensor> { x.mul_scalar(k) })?;
    let stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicUsize::new(0));

    // One thread creates and drops libraries: defines, kernels, and a fake kernel on the shared
    // op (a write to its registrations that does not change real calls).
    let churn = {
        let stop = stop.clone();
        let churned = churned.clone();
        let shared = shared.clone();
        std::thread::spawn(move || -> Result<()> {
            let x = f32s(&[1.0]);
            while !stop.load(Ordering::Relaxed) || churned.load(Ordering::Relaxed) < 10 {
                let lib = Library::new("ls_conc_churn", "DEF")?;
                lib.define("op(Tensor x) -> Tensor", "", &[])?;
                lib.r#impl("op", boxed_add(2.0), "CPU", "", true)?;
                library::register_fake(
                    &shared,
                    |x: Tensor, _k: f64| -> Result<Tensor> { x.clone_tensor() },
                    Some(&lib),
                    true,
                )?;
                if call_name("ls_conc_churn::op", &x)? != vec![3.0] {
                    return Err(Error::Lookup("churn op computed a wrong value".into()));
                }
                drop(lib);
                if registry().find("ls_conc_churn::op").is_some() {
                    return Err(Error::Lookup("dropped library left its op".into()));
                }
                churned.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };

    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let shared = shared.clone();
            std::thread::spawn(move || -> Result<()> {
                let name = format!("ls_conc_{i}::op");
                let op = add_op(&name, i as f64)?;
                let x = f32s(&[1.0, 2.0]);
                for n in 0..CALLS {
                    let mine = op.call1(&[x.clone().into()])?;
                    let by_name = call_name(&name, &x)?;
                    let k = (n % 7) as f64;
                    let s = shared.call1(&[x.clone().into(), k.into()])?;
                    let want_mine = vec![1.0 + i as f32, 2.0 + i as f32];
                    if vals(&mine) != want_mine
                        || by_name != want_mine
                        || vals(&s) != vec![k as f32, 2.0 * k as f32]
                    {
                        return Err(Error::Lookup(format!("thread {i} call {n}: wrong result")));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked")?;
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn thread panicked")?;
    assert!(churned.load(Ordering::Relaxed) >= 10);

    // The registry is consistent: every worker's op is there with its one kernel, the churned
    // namespace is empty and free, and the shared op lost the churned fake kernels.
    for i in 0..THREADS {
        let op = registry().get(&format!("ls_conc_{i}::op"))?;
        assert_eq!(op.kernel_slots(), vec![(Slot::Default, true)]);
        assert_eq!(
            call_name(&format!("ls_conc_{i}::op"), &f32s(&[0.0]))?,
            vec![i as f32]
        );
    }
    assert!(registry().find("ls_conc_churn::op").is_none());
    assert!(
        !registry()
            .names()
            .iter()
            .any(|n| n.starts_with("ls_conc_churn::"))
    );
    drop(Library::new("ls_conc_churn", "DEF")?);
    assert!(!shared.operator().has_fake());
    assert_eq!(
        shared.operator().kernel_slots(),
        vec![(Slot::Default, true)]
    );
    Ok(())
}
