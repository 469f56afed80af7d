//! `infer_schema` and `rust_type_to_schema`: the exact schema text for every supported type,
//! defaults, mutation annotations, returns, op names, and the errors.

use tensorplay::ir::schema::{DefaultValue, Schema};
use tensorplay::library::infer_schema::rust_type_to_schema;
use tensorplay::library::{MutatesArgs, Prototype, infer_schema};
use tensorplay::{DType, Device, Error, Result, Tensor};

/// `ns::op(<ty> a) -> Tensor` for a single parameter of Rust type `rust_ty`.
fn one_param(rust_ty: &str) -> Result<String> {
    let p = Prototype::new("Tensor").param("a", &rust_type_to_schema(rust_ty)?);
    infer_schema(&p, MutatesArgs::None, Some("ns::op"))
}

/// Asserts `err` is an argument error whose message mentions every one of `needles`.
fn assert_arg_error(err: Error, needles: &[&str]) {
    assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "`{msg}` should mention `{n}`");
    }
}

#[test]
fn every_supported_rust_type_maps_to_its_schema_type() -> Result<()> {
    let cases = [
        ("Tensor", "Tensor"),
        ("&Tensor", "Tensor"),
        ("&mut Tensor", "Tensor"),
        ("&'a Tensor", "Tensor"),
        ("&'a mut Tensor", "Tensor"),
        ("tensorplay::Tensor", "Tensor"),
        ("::tensorplay::Tensor", "Tensor"),
        ("Option<Tensor>", "Tensor?"),
        ("Option<&Tensor>", "Tensor?"),
        ("Option<&'a Tensor>", "Tensor?"),
        ("Option < & Tensor >", "Tensor?"),
        ("Vec<Tensor>", "Tensor[]"),
        ("&[Tensor]", "Tensor[]"),
        ("std::vec::Vec<Tensor>", "Tensor[]"),
        ("i64", "SymInt"),
        ("i32", "SymInt"),
        ("usize", "SymInt"),
        ("isize", "SymInt"),
        ("Option<i64>", "SymInt?"),
        ("f64", "float"),
        ("f32", "float"),
        ("Option<f64>", "float?"),
        ("bool", "bool"),
        ("&str", "str"),
        ("&'static str", "str"),
        ("String", "str"),
        ("std::string::String", "str"),
        ("Vec<i64>", "SymInt[]"),
        ("&[i64]", "SymInt[]"),
        ("Vec<f64>", "float[]"),
        ("&[f64]", "float[]"),
        ("Vec<bool>", "bool[]"),
        ("&[bool]", "bool[]"),
        ("Option<Vec<i64>>", "SymInt[]?"),
        ("DType", "ScalarType"),
        ("tensorplay::DType", "ScalarType"),
        ("Device", "Device"),
        ("Scalar", "Scalar"),
    ];
    for (rust, schema) in cases {
        assert_eq!(rust_type_to_schema(rust)?, schema, "for `{rust}`");
        assert_eq!(
            one_param(rust)?,
            format!("ns::op({schema} a) -> Tensor"),
            "for `{rust}`"
        );
    }
    Ok(())
}

#[test]
fn unsupported_rust_types_are_errors_naming_the_type() {
    for bad in [
        "HashMap<u8, u8>",
        "u8",
        "char",
        "(i64, i64)",
        "Option<Option<Tensor>>",
        "Vec<Vec<i64>>",
        "Vec<Option<i64>>",
        "&[Vec<f64>]",
        "Box<Tensor>",
        "Optional<Tensor>",
        "Option<Vec<i64>",
        "",
    ] {
        let err = rust_type_to_schema(bad).expect_err(bad);
        assert_arg_error(err, &["infer_schema", &format!("`{bad}`")]);
    }
    // Issue 10 item 13: the one list of optionals schemas have.
    assert_eq!(
        rust_type_to_schema("Vec<Option<Tensor>>").unwrap(),
        "Tensor?[]"
    );
    assert!(
        rust_type_to_schema("Option<Option<Tensor>>")
            .unwrap_err()
            .to_string()
            .contains("nested Option")
    );
}

#[test]
fn the_design_example() -> Result<()> {
    let p = Prototype::new("Tensor")
        .param("self", "Tensor")
        .param("n", "SymInt")
        .param_default("eps", "float", DefaultValue::Float(1e-5))
        .param_default("bias", "Tensor?", DefaultValue::None)
        .param("out", "Tensor");
    assert_eq!(
        infer_schema(&p, ["out"].into(), Some("ns::op"))?,
        "ns::op(Tensor self, SymInt n, float eps=1e-05, Tensor? bias=None, Tensor(a!) out) -> Tensor"
    );
    Ok(())
}

#[test]
fn defaults_print_python_style() -> Result<()> {
    let cases = [
        ("float", DefaultValue::Float(1e-5), "float d=1e-05"),
        ("float", DefaultValue::Float(0.5), "float d=0.5"),
        ("float", DefaultValue::Float(2.0), "float d=2.0"),
        ("float", DefaultValue::Float(1e20), "float d=1e+20"),
        (
            "float",
            DefaultValue::Float(f64::NEG_INFINITY),
            "float d=-inf",
        ),
        ("float", DefaultValue::Float(f64::NAN), "float d=nan"),
        ("float", DefaultValue::Int(3), "float d=3"),
        ("SymInt", DefaultValue::Int(2), "SymInt d=2"),
        ("SymInt", DefaultValue::Int(-1), "SymInt d=-1"),
        ("bool", DefaultValue::Bool(true), "bool d=True"),
        ("bool", DefaultValue::Bool(false), "bool d=False"),
        ("Tensor?", DefaultValue::None, "Tensor? d=None"),
        ("SymInt?", DefaultValue::None, "SymInt? d=None"),
        ("str", DefaultValue::Str("mean".into()), "str d=\"mean\""),
        ("str", DefaultValue::Str("a\"b".into()), "str d=\"a\\\"b\""),
        (
            "SymInt[]",
            DefaultValue::IntList(vec![1, 1]),
            "SymInt[] d=[1, 1]",
        ),
        ("SymInt[]", DefaultValue::IntList(vec![]), "SymInt[] d=[]"),
        (
            "float[]",
            DefaultValue::FloatList(vec![0.5, 1.0]),
            "float[] d=[0.5, 1.0]",
        ),
        (
            "bool[]",
            DefaultValue::BoolList(vec![true, false]),
            "bool[] d=[True, False]",
        ),
    ];
    for (ty, d, want) in cases {
        let p = Prototype::new("()").param_default("d", ty, d);
        let s = infer_schema(&p, MutatesArgs::None, None)?;
        assert_eq!(s, format!("({want}) -> ()"));
        // What infer_schema writes parses back and prints the same.
        let parsed = Schema::parse(&format!("ns::op{s}"))?;
        assert_eq!(parsed.to_string(), format!("ns::op{s}"));
    }
    Ok(())
}

#[test]
fn mutation_letters_follow_parameter_order() -> Result<()> {
    let p = Prototype::new("()")
        .param("a", "Tensor")
        .param("b", "Tensor")
        .param("n", "SymInt")
        .param("c", "Tensor");
    // Declared out of order: letters still go a, b in parameter order.
    assert_eq!(
        infer_schema(&p, ["c", "a"].into(), Some("ns::op"))?,
        "ns::op(Tensor(a!) a, Tensor b, SymInt n, Tensor(b!) c) -> ()"
    );
    assert_eq!(
        infer_schema(&p, ["b"].into(), Some("ns::op"))?,
        "ns::op(Tensor a, Tensor(a!) b, SymInt n, Tensor c) -> ()"
    );
    Ok(())
}

#[test]
fn mutates_unknown_marks_every_tensor_like_parameter() -> Result<()> {
    let p = Prototype::new("()")
        .param("a", "Tensor")
        .param("n", "SymInt")
        .param("b", "Tensor?")
        .param("cs", "Tensor[]")
        .param("eps", "float");
    assert_eq!(
        infer_schema(&p, MutatesArgs::Unknown, Some("ns::op"))?,
        "ns::op(Tensor(a!) a, SymInt n, Tensor(b!)? b, Tensor(c!)[] cs, float eps) -> ()"
    );
    // Nothing to mark: no annotation at all.
    let scalars = Prototype::new("Tensor").param("n", "SymInt");
    assert_eq!(
        infer_schema(&scalars, MutatesArgs::Unknown, None)?,
        "(SymInt n) -> Tensor"
    );
    Ok(())
}

#[test]
fn mutating_optional_and_list_tensors() -> Result<()> {
    let p = Prototype::new("()")
        .param("bufs", "Tensor[]")
        .param_default("maybe", "Tensor?", DefaultValue::None);
    assert_eq!(
        infer_schema(&p, ["bufs", "maybe"].into(), Some("ns::op"))?,
        "ns::op(Tensor(a!)[] bufs, Tensor(b!)? maybe=None) -> ()"
    );
    Ok(())
}

#[test]
fn empty_mutates_args_spellings_mean_none() -> Result<()> {
    let empty: [&str; 0] = [];
    assert_eq!(MutatesArgs::from(empty), MutatesArgs::None);
    assert_eq!(MutatesArgs::from(Vec::<String>::new()), MutatesArgs::None);
    assert_eq!(MutatesArgs::from(&["x"][..]).names(), ["x".to_string()]);
    let p = Prototype::new("Tensor").param("x", "Tensor");
    assert_eq!(
        infer_schema(&p, empty.into(), None)?,
        "(Tensor x) -> Tensor"
    );
    Ok(())
}

#[test]
fn returns() -> Result<()> {
    for ret in [
        "()",
        "Tensor",
        "Tensor[]",
        "(Tensor, Tensor)",
        "(Tensor, Tensor, Tensor)",
    ] {
        let p = Prototype::new(ret).param("x", "Tensor");
        assert_eq!(
            infer_schema(&p, MutatesArgs::None, Some("ns::op"))?,
            format!("ns::op(Tensor x) -> {ret}")
        );
    }
    // No parameters at all.
    assert_eq!(
        infer_schema(
            Prototype::new("Tensor"),
            MutatesArgs::None,
            Some("ns::make")
        )?,
        "ns::make() -> Tensor"
    );
    Ok(())
}

#[test]
fn op_name_none_vs_some() -> Result<()> {
    let p = Prototype::new("Tensor").param("x", "Tensor");
    assert_eq!(
        infer_schema(&p, MutatesArgs::None, None)?,
        "(Tensor x) -> Tensor"
    );
    assert_eq!(
        infer_schema(&p, MutatesArgs::None, Some("ns::op"))?,
        "ns::op(Tensor x) -> Tensor"
    );
    assert_eq!(
        infer_schema(&p, MutatesArgs::None, Some("ns::op.out"))?,
        "ns::op.out(Tensor x) -> Tensor"
    );
    Ok(())
}

#[test]
fn mutates_args_naming_a_missing_parameter_is_an_error() {
    let p = Prototype::new("()")
        .param("x", "Tensor")
        .param("y", "Tensor");
    let err = infer_schema(&p, ["out"].into(), Some("ns::op")).unwrap_err();
    assert_arg_error(err, &["ns::op", "mutates_args", "`out`", "x, y"]);
    // Without an op name the error names infer_schema.
    let err = infer_schema(&p, ["z"].into(), None).unwrap_err();
    assert_arg_error(err, &["infer_schema", "`z`"]);
}

#[test]
fn mutates_args_naming_a_non_tensor_parameter_is_an_error() {
    let p = Prototype::new("()")
        .param("x", "Tensor")
        .param("n", "SymInt")
        .param("dims", "SymInt[]");
    for name in ["n", "dims"] {
        let err = infer_schema(&p, [name].into(), Some("ns::op")).unwrap_err();
        assert_arg_error(err, &["ns::op", "mutates_args", "tensor parameters", name]);
    }
}

#[test]
fn more_than_26_mutated_tensors_is_an_error() -> Result<()> {
    let names: Vec<String> = (0..27).map(|i| format!("t{i}")).collect();
    let mut p = Prototype::new("()");
    for n in &names {
        p = p.param(n, "Tensor");
    }
    let err = infer_schema(&p, MutatesArgs::Unknown, Some("ns::op")).unwrap_err();
    assert_arg_error(err, &["ns::op", "mutates_args"]);
    // 26 is fine: the last one is `z`.
    p.params.pop();
    let s = infer_schema(&p, MutatesArgs::Unknown, Some("ns::op"))?;
    assert!(s.contains("Tensor(z!) t25"), "{s}");
    Ok(())
}

#[test]
fn prototype_of_a_typed_closure() -> Result<()> {
    fn proto_of<M, F: tensorplay::library::IntoKernel<M>>(
        _f: F,
        names: &[&str],
    ) -> Result<Prototype> {
        Prototype::of::<F, M>(names)
    }
    let f = |_x: Tensor,
             _w: Option<Tensor>,
             _n: i64,
             _e: f64,
             _s: String,
             _d: DType,
             _dev: Device|
     -> Result<Tensor> { unreachable!("only the type is used") };
    let p = proto_of(f, &["x", "w", "n", "eps", "mode", "dtype", "device"])?;
    assert_eq!(
        infer_schema(&p, MutatesArgs::None, Some("ns::typed"))?,
        "ns::typed(Tensor x, Tensor? w, SymInt n, float eps, str mode, ScalarType dtype, Device device) -> Tensor"
    );
    let g = |_xs: Vec<Tensor>,
             _v: Vec<i64>,
             _w: Vec<f64>,
             _b: Vec<bool>,
             _o: Option<i64>,
             _p: Option<f64>,
             _f: bool|
     -> Result<(Tensor, Tensor)> { unreachable!("only the type is used") };
    let p = proto_of(g, &["xs", "v", "w", "b", "o", "p", "f"])?;
    assert_eq!(
        infer_schema(&p, ["xs"].into(), None)?,
        "(Tensor(a!)[] xs, SymInt[] v, float[] w, bool[] b, SymInt? o, float? p, bool f) -> (Tensor, Tensor)"
    );
    // Wrong number of names.
    let h = |_x: Tensor| -> Result<()> { Ok(()) };
    assert_arg_error(
        proto_of(h, &["x", "y"]).unwrap_err(),
        &["names", "1 parameter names"],
    );
    // A boxed kernel has no types to read.
    let boxed = |_args: &[tensorplay::Value]| -> Result<Vec<Tensor>> { Ok(vec![]) };
    assert_arg_error(proto_of(boxed, &[]).unwrap_err(), &["prototype_function"]);
    Ok(())
}

#[test]
fn inferred_schemas_parse_with_their_mutations() -> Result<()> {
    let p = Prototype::new("()")
        .param("x", "Tensor")
        .param("out", "Tensor")
        .param("outs", "Tensor[]");
    let s = infer_schema(&p, ["outs", "out"].into(), Some("ns::op"))?;
    let parsed = Schema::parse(&s)?;
    assert_eq!(parsed.mutated_params(), vec!["out", "outs"]);
    assert_eq!(parsed.to_string(), s);
    Ok(())
}
