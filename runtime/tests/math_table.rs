//! The math library's function tables (`MathFn`, `LibmFn`, `LibmFn2`) against the op table:
//! every declared function is what some builtin op lowers to, so a function declared without
//! its op (or an op whose `OPS` entry is missing, which capture would only notice at run time)
//! fails here; and the newest table entry, `sinc`, end to end in eager mode and under autograd.

use tensorplay_ir::graph::Attr;
use tensorplay_ir::{LibmFn, LibmFn2, MathFn, ScalarOp};
use tensorplay_runtime::ops::{self, Lower};
use tensorplay_runtime::{DType, Tensor};

/// Every scalar op some builtin op lowers to as a single op, with default attributes and with
/// `gelu`'s `approximate="tanh"`.
fn lowered_ops() -> Vec<(String, ScalarOp)> {
    let tanh = Attr::Str("tanh".into());
    let mut out = Vec::new();
    for op in ops::all_ops() {
        let Lower::Pointwise(p) = op.lower else {
            continue;
        };
        for attrs in [&[][..], &[&tanh][..]] {
            if let Ok(e) = (p.expr)(attrs)
                && let Some(s) = e.single_op()
            {
                out.push((op.name.to_string(), s));
            }
        }
    }
    out
}

#[test]
fn every_table_function_is_the_lowering_of_a_builtin_op() {
    let lowered = lowered_ops();
    let reached = |want: ScalarOp| lowered.iter().any(|(_, s)| *s == want);
    for f in MathFn::ALL {
        assert!(
            reached(ScalarOp::Math(f)),
            "no builtin op lowers to {}",
            f.name()
        );
    }
    for f in LibmFn::ALL {
        // A libm function is the op of the same name.
        assert!(
            lowered
                .iter()
                .any(|(n, s)| n == f.name() && *s == ScalarOp::Libm(f)),
            "no builtin op `{0}` lowering to libm `{0}`",
            f.name()
        );
    }
    for f in LibmFn2::ALL {
        assert!(
            reached(ScalarOp::Libm2(f)),
            "no builtin op lowers to {}",
            f.name()
        );
    }
}

#[test]
fn sinc_matches_pytorch_definition() {
    let x = Tensor::from_vec(vec![0.0f64, -0.0, 0.5, -1.5, 2.0, 1e-8, 3.25], &[7]).unwrap();
    let got = x.sinc().unwrap().to_vec::<f64>().unwrap();
    let pi = std::f64::consts::PI;
    for (v, g) in [0.0f64, -0.0, 0.5, -1.5, 2.0, 1e-8, 3.25].iter().zip(&got) {
        let want = if *v == 0.0 {
            1.0
        } else {
            (pi * v).sin() / (pi * v)
        };
        assert_eq!(g.to_bits(), want.to_bits(), "sinc({v})");
    }
    // f32 (and integers, in f32): the f64 function rounded once.
    let y = Tensor::from_vec(vec![0.25f32, 7.5], &[2])
        .unwrap()
        .sinc()
        .unwrap();
    assert_eq!(y.dtype(), DType::F32);
    let want: Vec<f32> = [0.25f32, 7.5]
        .iter()
        .map(|&v| LibmFn::Sinc.eval(v as f64) as f32)
        .collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    let i = Tensor::from_vec(vec![0i64, 1], &[2])
        .unwrap()
        .sinc()
        .unwrap();
    assert_eq!(i.dtype(), DType::F32);
    assert_eq!(i.to_vec::<f32>().unwrap()[0], 1.0);
    // By name, as capture and the library call it.
    let by_name = ops::call("tp::sinc", &[x.clone().into()]).unwrap();
    assert_eq!(by_name[0].to_vec::<f64>().unwrap(), got);
}

#[test]
fn sinc_gradient_is_the_derivative_and_zero_at_zero() {
    let points = [0.0f64, 0.3, -0.7, 1.0, 2.5, -4.2];
    let x = Tensor::from_vec(points.to_vec(), &[points.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    x.sinc().unwrap().sum_all().unwrap().backward().unwrap();
    let grad = x.grad().unwrap().to_vec::<f64>().unwrap();
    let h = 1e-6;
    for (v, g) in points.iter().zip(&grad) {
        let f = |t: f64| LibmFn::Sinc.eval(t);
        let numeric = (f(v + h) - f(v - h)) / (2.0 * h);
        assert!(
            (g - numeric).abs() < 1e-7,
            "sinc'({v}) = {g}, numeric {numeric}"
        );
    }
    assert_eq!(grad[0], 0.0);
}
