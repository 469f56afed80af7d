//! Issue 10's ergonomics: typed spellings of the seed's string arguments (`Kind`, `ImplOptions`,
//! `DefineOptions` with alias analysis and tags, `GeluApproximate`), keyword arguments in
//! `ops::call_kw`, and `register_autograd_typed`. Every test uses its own namespace (`lopt_<n>`):
//! the registry is global and tests run in parallel.

use tensorplay_runtime::autograd::gradcheck::{GradcheckOptions, gradcheck};
use tensorplay_runtime::library::{
    self, AliasAnalysis, DefineOptions, ImplOptions, Kind, Library, SavedState, Slot, Tag,
    custom_op, op_handle,
};
use tensorplay_runtime::ops::{self, GeluApproximate};
use tensorplay_runtime::{DType, Result, Tensor, Value};

fn f64s(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn message(r: Result<impl std::fmt::Debug>) -> String {
    r.expect_err("expected an error").to_string()
}

// Library kinds --------------------------------------------------------------------------------

#[test]
fn library_kind_accepts_the_enum_and_the_seed_strings() {
    let lib = Library::new("lopt_kind", Kind::Def).unwrap();
    assert_eq!(lib.kind(), Kind::Def);
    // One live DEF per namespace, whichever spelling opened it.
    assert!(Library::new("lopt_kind", "DEF").is_err());
    let frag = Library::new("lopt_kind", Kind::Fragment).unwrap();
    assert_eq!(frag.kind(), Kind::Fragment);
    let err = message(Library::new("lopt_kind2", "def"));
    assert!(
        err.contains("\"def\"") && err.contains("\"DEF\"") && err.contains("Kind"),
        "{err}"
    );
    // The failed call claimed nothing: the namespace is still free.
    let _ok = Library::new("lopt_kind2", Kind::Def).unwrap();
}

// ImplOptions ----------------------------------------------------------------------------------

#[test]
fn impl_with_registers_in_the_selected_slot_and_respects_allow_override() {
    let lib = Library::new("lopt_impl", Kind::Def).unwrap();
    lib.define("f(Tensor x) -> Tensor", "", &[]).unwrap();
    let cpu = ImplOptions {
        device_type: Slot::Cpu,
        ..ImplOptions::default()
    };
    lib.impl_with("f", |x: &Tensor| x.add_scalar(1.0), cpu.clone())
        .unwrap();
    let op = op_handle("lopt_impl::f").unwrap();
    assert!(op.operator().kernel_in(Slot::Cpu).is_some());
    assert!(op.operator().kernel_in(Slot::Default).is_none());
    let err = message(lib.impl_with("f", |x: &Tensor| x.add_scalar(2.0), cpu.clone()));
    assert!(err.contains("allow_override"), "{err}");
    // The refused registration left the first kernel active.
    let x = f64s(&[1.0]);
    assert_eq!(op.call1((&x,)).unwrap().to_vec::<f64>().unwrap(), vec![2.0]);
    let over = ImplOptions {
        allow_override: true,
        ..cpu
    };
    lib.impl_with("f", |x: &Tensor| x.add_scalar(2.0), over)
        .unwrap();
    assert_eq!(op.call1((&x,)).unwrap().to_vec::<f64>().unwrap(), vec![3.0]);
}

#[test]
fn impl_with_dispatch_key_wins_and_bad_keys_name_the_field() {
    let lib = Library::new("lopt_key", Kind::Def).unwrap();
    lib.define("g(Tensor x) -> Tensor", "", &[]).unwrap();
    let composite = ImplOptions {
        device_type: Slot::Cuda,
        dispatch_key: Some("CompositeExplicitAutograd".into()),
        ..ImplOptions::default()
    };
    lib.impl_with("g", |x: &Tensor| x.neg(), composite).unwrap();
    let op = op_handle("lopt_key::g").unwrap().operator();
    assert!(op.kernel_in(Slot::Default).is_some());
    assert!(op.kernel_in(Slot::Cuda).is_none());
    let bad = ImplOptions {
        dispatch_key: Some("XLA".into()),
        ..ImplOptions::default()
    };
    let err = message(lib.impl_with("g", |x: &Tensor| x.neg(), bad));
    assert!(
        err.contains("lopt_key::g") && err.contains("dispatch_key") && err.contains("XLA"),
        "{err}"
    );
}

// DefineOptions: alias analysis and tags -------------------------------------------------------

#[test]
fn define_with_stores_tags_once_in_order() {
    let lib = Library::new("lopt_tags", Kind::Def).unwrap();
    let opts = DefineOptions {
        tags: vec![Tag::Pointwise, Tag::Pt2Compliant, Tag::Pointwise],
        ..DefineOptions::default()
    };
    let name = lib.define_with("h(Tensor x) -> Tensor", opts).unwrap();
    assert_eq!(name, "lopt_tags::h");
    assert_eq!(
        op_handle(name.as_str()).unwrap().tags(),
        vec![Tag::Pointwise, Tag::Pt2Compliant]
    );
    // The seed's string form parses into the same tags.
    lib.define(
        "k(Tensor x) -> Tensor",
        "FROM_SCHEMA",
        &["needs_fixed_stride_order", "torch.Tag.pt2_compliant_tag"],
    )
    .unwrap();
    assert_eq!(
        op_handle("lopt_tags::k").unwrap().tags(),
        vec![Tag::NeedsFixedStrideOrder, Tag::Pt2Compliant]
    );
    // An op defined without tags has none.
    lib.define("m(Tensor x) -> Tensor", "", &[]).unwrap();
    assert!(op_handle("lopt_tags::m").unwrap().tags().is_empty());
}

#[test]
fn bad_alias_analysis_or_tag_is_an_error_and_defines_nothing() {
    let lib = Library::new("lopt_bad", Kind::Def).unwrap();
    let err = message(lib.define("a(Tensor x) -> Tensor", "FROM_SCHEMAA", &[]));
    assert!(
        err.contains("alias_analysis") && err.contains("FROM_SCHEMAA"),
        "{err}"
    );
    let err = message(lib.define("a(Tensor x) -> Tensor", "", &["pointwize"]));
    assert!(err.contains("tags") && err.contains("pointwize"), "{err}");
    let err = message(lib.define("a(Tensor x) -> Tensor", "CONSERVATIVE", &[]));
    assert!(
        err.contains("CONSERVATIVE") && err.contains("FROM_SCHEMA"),
        "{err}"
    );
    // None of the failed calls defined the op.
    assert!(library::registry().find("lopt_bad::a").is_none());
    lib.define("a(Tensor x) -> Tensor", "", &[]).unwrap();
}

#[test]
fn pure_function_refuses_alias_annotations() {
    let lib = Library::new("lopt_pure", Kind::Def).unwrap();
    let pure = || DefineOptions {
        alias_analysis: AliasAnalysis::PureFunction,
        ..DefineOptions::default()
    };
    lib.define_with("ok(Tensor x) -> Tensor", pure()).unwrap();
    let err = message(lib.define_with("bump(Tensor(a!) x) -> ()", pure()));
    assert!(
        err.contains("lopt_pure::bump") && err.contains("PURE_FUNCTION") && err.contains("`x`"),
        "{err}"
    );
    let err = message(lib.define_with("view(Tensor(a) x) -> Tensor(a)", pure()));
    assert!(err.contains("PURE_FUNCTION"), "{err}");
    assert!(library::registry().find("lopt_pure::bump").is_none());
    // The same schema is fine under the default (from-schema) analysis.
    lib.define("bump(Tensor(a!) x) -> ()", "", &[]).unwrap();
}

#[test]
fn custom_op_builder_takes_tags() {
    let op = custom_op("lopt_builder::f")
        .arg_names(&["x"])
        .tags(&[Tag::NondeterministicSeeded])
        .build(|x: &Tensor| x.neg())
        .unwrap();
    assert_eq!(op.tags(), vec![Tag::NondeterministicSeeded]);
}

// GeluApproximate and keyword arguments --------------------------------------------------------

#[test]
fn gelu_takes_the_enum_or_the_seed_string() {
    let x = f64s(&[-1.5, 0.25, 3.0]);
    assert_eq!(
        x.gelu(GeluApproximate::Tanh)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        x.gelu("tanh").unwrap().to_vec::<f64>().unwrap()
    );
    assert_eq!(
        x.gelu(GeluApproximate::None)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        x.gelu("none").unwrap().to_vec::<f64>().unwrap()
    );
    assert_ne!(
        x.gelu(GeluApproximate::None)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        x.gelu(GeluApproximate::Tanh)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    );
    let err = message(x.gelu("Tanh"));
    assert!(
        err.contains("approximate") && err.contains("\"Tanh\""),
        "{err}"
    );
}

#[test]
fn ops_call_kw_binds_keywords_like_custom_op_handles() {
    let x = f64s(&[-2.0, 0.5, 4.0]);
    let y = ops::call_kw("tp::clamp", &[x.clone().into()], &[("min", (-1.0).into())]).unwrap();
    assert_eq!(y[0].to_vec::<f64>().unwrap(), vec![-1.0, 0.5, 4.0]);
    let y = ops::call_kw(
        "tp::sum",
        &[Tensor::ones(&[2, 3], DType::F64).into()],
        &[("dim", Value::IntList(vec![1])), ("keepdim", true.into())],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[2, 1]);
    let err = message(ops::call_kw(
        "tp::clamp",
        &[x.clone().into()],
        &[("minimum", 0.0.into())],
    ));
    assert!(err.contains("minimum"), "{err}");
    // Keyword and positional use of one parameter is refused, as in the seed.
    let err = message(ops::call_kw(
        "tp::clamp",
        &[x.into(), 0.0.into()],
        &[("min", 0.0.into())],
    ));
    assert!(err.contains("min"), "{err}");
}

// register_autograd_typed ----------------------------------------------------------------------

fn typed_mul(ns: &str) -> library::CustomOp<Tensor, (Tensor, Tensor, f64)> {
    custom_op(&format!("{ns}::mul"))
        .arg_names(&["x", "y", "scale"])
        .build(|x: &Tensor, y: &Tensor, s: f64| x.mul(y)?.mul_scalar(s))
        .unwrap()
}

#[test]
fn typed_autograd_passes_gradcheck() {
    let op = typed_mul("lopt_ag1");
    op.register_autograd_typed(
        |(x, y, s): &(Tensor, Tensor, f64), g| {
            let g = g.grad(0).expect("one output").mul_scalar(*s)?;
            Ok((Some(g.mul(y)?), Some(g.mul(x)?), None))
        },
        |(x, y, s): (Tensor, Tensor, f64), _outs| Ok((x, y, s)),
    )
    .unwrap();
    let x = f64s(&[0.5, -1.25, 2.0]).requires_grad_(true).unwrap();
    let y = f64s(&[3.0, 0.75, -0.5]).requires_grad_(true).unwrap();
    gradcheck(
        |ts| op.call((&ts[0], &ts[1], 1.5)),
        &[x, y],
        GradcheckOptions::default(),
    )
    .unwrap();
}

#[test]
fn typed_autograd_honours_needs_input_grad_and_per_input_grads() {
    let op = typed_mul("lopt_ag2");
    op.register_autograd_typed(
        |(x, y, s): &(Tensor, Tensor, f64), g| {
            let grad = g.grad(0).expect("one output").mul_scalar(*s)?;
            // One gradient per tensor input passed (x, y), skipping what is not needed.
            let gx = if g.needs_input_grad(0) {
                Some(grad.mul(y)?)
            } else {
                None
            };
            let gy = if g.needs_input_grad(1) {
                Some(grad.mul(x)?)
            } else {
                None
            };
            assert!(!g.needs_input_grad(2), "a float never needs a gradient");
            Ok(vec![gx, gy])
        },
        |(x, y, s): (Tensor, Tensor, f64), _outs| Ok((x, y, s)),
    )
    .unwrap();
    let x = f64s(&[2.0, 3.0]).requires_grad_(true).unwrap();
    let y = f64s(&[5.0, 7.0]);
    op.call((&x, &y, 2.0))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![10.0, 14.0]);
    assert!(y.grad().is_none());
}

struct Saved {
    x: Tensor,
    power: i64,
}

impl SavedState for Saved {
    fn tensors(&self) -> Vec<&Tensor> {
        vec![&self.x]
    }
}

fn typed_pow(ns: &str) -> library::CustomOp<Tensor, (Tensor, i64)> {
    let op = custom_op(&format!("{ns}::pow"))
        .arg_names(&["x", "n"])
        .build(|x: &Tensor, n: i64| x.pow_scalar(n as f64))
        .unwrap();
    op.register_autograd_typed(
        |s: &Saved, g| {
            let g = g.grad(0).expect("one output");
            let d =
                s.x.pow_scalar((s.power - 1) as f64)?
                    .mul_scalar(s.power as f64)?;
            Ok((Some(g.mul(&d)?), None))
        },
        |(x, n): (Tensor, i64), _outs| Ok(Saved { x, power: n }),
    )
    .unwrap();
    op
}

#[test]
fn typed_autograd_with_a_user_struct_state() {
    let op = typed_pow("lopt_ag3");
    let x = f64s(&[1.5, -2.0]).requires_grad_(true).unwrap();
    gradcheck(|ts| op.call((&ts[0], 3)), &[x], GradcheckOptions::default()).unwrap();
}

#[test]
fn typed_saved_tensors_are_checked_for_in_place_modification() {
    let op = typed_pow("lopt_ag4");
    let x = f64s(&[1.5, -2.0]).requires_grad_(true).unwrap();
    let base = x.mul_scalar(1.0).unwrap(); // a non-leaf the op saves
    let y = op.call((&base, 2)).unwrap();
    {
        let _no_grad = tensorplay_runtime::autograd::no_grad();
        base.fill_(1.0).unwrap();
    }
    let err = message(y.sum_all().unwrap().backward());
    assert!(err.contains("modified by an in-place operation"), "{err}");
}

#[test]
fn typed_setup_types_are_checked_against_the_schema_at_registration() {
    let op = typed_mul("lopt_ag5");
    let err = message(op.register_autograd_typed(
        |_: &(Tensor, Tensor, i64), _g| Ok(vec![None::<Tensor>, None, None]),
        |(x, y, s): (Tensor, Tensor, i64), _outs| Ok((x, y, s)),
    ));
    assert!(
        err.contains("lopt_ag5::mul") && err.contains("`scale`") && err.contains("float"),
        "{err}"
    );
    let err = message(op.register_autograd_typed(
        |_: &Tensor, _g| Ok(vec![None::<Tensor>]),
        |(x,): (Tensor,), _outs| Ok(x),
    ));
    assert!(
        err.contains("takes 1 parameters") && err.contains("has 3"),
        "{err}"
    );
    // The refused registrations left the op without a formula: backward differentiates through
    // the body's builtin ops (d(x*x)/dx = 2x).
    let x = f64s(&[1.5]).requires_grad_(true).unwrap();
    op.call((&x, &x, 1.0))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![3.0]);
}

#[test]
fn typed_autograd_scoped_to_a_library_is_removed_with_it() {
    let op = typed_mul("lopt_ag6");
    {
        let lib = Library::new("lopt_ag6", Kind::Fragment).unwrap();
        library::register_autograd_typed(
            &op,
            |(_, y, s): &(Tensor, Tensor, f64), g: &library::BackwardArgs<'_>| {
                // Deliberately 10x the true gradient, so the test sees which formula ran.
                let g = g.grad(0).expect("one output").mul_scalar(*s * 10.0)?;
                Ok((Some(g.mul(y)?), None::<Tensor>, None::<Tensor>))
            },
            |(x, y, s): (Tensor, Tensor, f64), _outs: &[Tensor]| Ok((x, y, s)),
            Some(&lib),
        )
        .unwrap();
        let x = f64s(&[2.0]).requires_grad_(true).unwrap();
        op.call((&x, &f64s(&[4.0]), 1.0))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![40.0]);
    }
    // Dropped with the library: backward goes through the body again.
    let x = f64s(&[2.0]).requires_grad_(true).unwrap();
    op.call((&x, &f64s(&[4.0]), 1.0))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![4.0]);
}
