//! Errors name what the user did: the size, argument, op and index they passed, and the actual
//! rank, rather than an internal stand-in.

use tensorplay::compiler::compile;
use tensorplay::library::{self, Library};
use tensorplay::{DType, Error, Result, Tensor};

fn assert_mentions(err: &Error, needles: &[&str]) {
    let msg = err.to_string();
    for n in needles {
        assert!(msg.contains(n), "`{msg}` should mention `{n}`");
    }
}

#[test]
fn view_reports_the_size_given() {
    let x = Tensor::zeros(&[4], DType::F32);
    let err = x.view(&[usize::MAX, 2]).unwrap_err();
    assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    assert_mentions(&err, &["view", &usize::MAX.to_string()]);
    assert!(!err.to_string().contains("-1"), "{err}");
    let err = x.expand(&[usize::MAX, 4]).unwrap_err();
    assert_mentions(&err, &["expand", &usize::MAX.to_string()]);
}

#[test]
fn narrow_reports_an_overflowing_start_or_length() {
    let x = Tensor::zeros(&[4], DType::F32);
    for (start, len, arg) in [(usize::MAX, 1, "start"), (1, usize::MAX, "length")] {
        let err = x.narrow(0, start, len).unwrap_err();
        assert!(
            matches!(&err, Error::Shape { op, .. } if op == "narrow"),
            "{err}"
        );
        assert_mentions(&err, &[arg, "overflowed", "dim 0 of size 4"]);
    }
    // A sum past i64 says so instead of printing a saturated end.
    let err = x.narrow(0, i64::MAX - 1, 5i64).unwrap_err();
    assert_mentions(&err, &["narrow", "overflows i64", "size 4"]);
    // In range but past the end: the end is computed.
    let err = x.narrow(0, 3usize, 2usize).unwrap_err();
    assert_mentions(&err, &["start 3 + length 2 = 5", "size 4"]);
}

#[test]
fn debug_prints_the_display_text() {
    let err = Tensor::zeros(&[4], DType::F32).view(&[3]).unwrap_err();
    assert_eq!(format!("{err:?}"), err.to_string());
    // What `fn main() -> tensorplay::Result<()>` prints after `Error: `: the message, not the
    // variant's fields with escaped newlines.
    let err = library::define("em_debug::f", None, None).unwrap_err();
    let debug = format!("{err:?}");
    assert!(debug.starts_with("registration error: "), "{debug}");
    // The fields are still there for whoever asks.
    assert!(format!("{err:#?}").starts_with("Registration("), "{err:#?}");
}

#[test]
fn arg_names_with_the_wrong_count_names_the_op_and_arg_names() {
    let err = library::custom_op("em_argnames::mul")
        .arg_names(&["x"])
        .build(|x: Tensor, y: Tensor| -> Result<Tensor> { x.mul(&y) })
        .unwrap_err();
    assert_mentions(
        &err,
        &["em_argnames::mul", "arg_names", "2 names", "1 names"],
    );
}

#[test]
fn dispatch_key_errors_name_dispatch_key() -> Result<()> {
    let lib = Library::new("em_dispatch_key", "DEF")?;
    lib.define("twice(Tensor x) -> Tensor", "", &[])?;
    let kernel = |x: Tensor| -> Result<Tensor> { x.mul_scalar(2.0) };
    let err = lib
        .r#impl("twice", kernel, "CPU", "NoSuchKey", true)
        .unwrap_err();
    assert_mentions(&err, &["dispatch_key", "NoSuchKey"]);
    let err = lib.r#impl("twice", kernel, "tpu", "", true).unwrap_err();
    assert_mentions(&err, &["device_type", "tpu"]);
    Ok(())
}

#[test]
fn rank_errors_state_the_actual_rank() {
    let x = Tensor::zeros(&[2, 3, 4], DType::F32);
    assert_mentions(&x.t().unwrap_err(), &["rank 3"]);
    assert_mentions(&x.permute(&[1, 0]).unwrap_err(), &["rank-3", "2 dims"]);
    assert_mentions(&x.expand(&[3, 4]).unwrap_err(), &["rank 3", "rank 2"]);
    assert_mentions(&x.softmax(3).unwrap_err(), &["rank 3"]);
    assert_mentions(
        &x.sum_to_shape(&[1, 2, 3, 4]).unwrap_err(),
        &["rank 3", "rank 4"],
    );
}

#[test]
fn reading_data_inside_a_compiled_closure_says_what_to_do() {
    for read in [0, 1] {
        let f = compile(move |xs: &[Tensor]| {
            let s: f32 = if read == 0 {
                xs[0].sum_all()?.item::<f32>()?
            } else {
                xs[0].to_vec::<f32>()?[0]
            };
            Ok(vec![xs[0].mul_scalar(s as f64)?])
        });
        let err = f.call(&[Tensor::ones(&[3], DType::F32)]).unwrap_err();
        let op = if read == 0 { "item" } else { "to_vec" };
        assert_mentions(
            &err,
            &[
                op,
                "inside a compiled closure is not supported",
                "as an input",
            ],
        );
    }
}

#[test]
fn compile_errors_carry_a_matchable_kind() {
    use tensorplay::CompileKind;
    use tensorplay::ir::graph::GraphBuilder;
    use tensorplay::ir::{Device, TensorMeta};

    let mut b = GraphBuilder::new();
    b.input("x", TensorMeta::new(&[2], DType::F32, Device::Cpu));
    let err = b.graph().outputs().unwrap_err();
    assert_eq!(err.compile_kind(), Some(CompileKind::Graph), "{err:?}");

    // A tensor the closure closes over that is too large to become a constant.
    let big = Tensor::ones(&[1000], DType::F32);
    let f = compile(move |xs: &[Tensor]| Ok(vec![xs[0].add(&big)?]));
    let err = f.call(&[Tensor::ones(&[1000], DType::F32)]).unwrap_err();
    assert!(
        matches!(&err, Error::Compile { kind: CompileKind::Capture, msg } if msg.contains("inputs")),
        "{err:?}"
    );
    assert_eq!(err.compile_kind(), Some(CompileKind::Capture));
    assert_eq!(Error::shape("add", "x").compile_kind(), None);
}

#[test]
fn an_integer_divisor_that_is_zero_in_the_result_dtype_is_an_error_not_a_panic() -> Result<()> {
    // Found by the fuzzer: an i64 0-d divisor 2^32 of an i32 tensor is 0 once converted to i32;
    // the zero check ran on the i64 value and the kernel panicked.
    let x = Tensor::from_vec(vec![7i32, -9], &[2])?;
    let y = Tensor::from_vec(vec![1i64 << 32], &[])?;
    assert_eq!(x.add(&y)?.dtype(), DType::I32);
    for (name, r) in [
        ("fmod", x.fmod(&y)),
        ("remainder", x.remainder(&y)),
        ("floor_divide", x.floor_divide(&y)),
    ] {
        let err = r.unwrap_err();
        assert!(matches!(err, Error::Argument { .. }), "{err:?}");
        assert_mentions(&err, &[name, "other", "zero"]);
    }
    let ok = Tensor::from_vec(vec![(1i64 << 32) + 2], &[])?;
    assert_eq!(x.fmod(&ok)?.to_vec::<i32>()?, vec![1, -1]);
    Ok(())
}

#[test]
fn pad_and_interpolate_refuse_bad_sizes_with_errors_naming_the_argument() -> Result<()> {
    use tensorplay::nn::{self, InterpolateMode, PadMode};
    let x = Tensor::zeros(&[1, 2, 4], DType::F32);
    for (pad, mode, arg) in [
        (vec![1, 2, 3], PadMode::Constant, "pad"),
        (vec![i64::MAX, 1], PadMode::Constant, "pad"),
        (vec![i64::MIN, 0], PadMode::Constant, "pad"),
        (vec![-3, -2], PadMode::Constant, "pad"),
        (vec![4, 0], PadMode::Reflect, "pad"),
        (vec![5, 0], PadMode::Circular, "pad"),
        (vec![1 << 62, 0], PadMode::Replicate, "pad"),
        (vec![1, 1, 1, 1, 1, 1], PadMode::Reflect, "pad"),
    ] {
        let err = nn::pad(&x, &pad, mode, 0.0).unwrap_err();
        assert!(matches!(err, Error::Argument { .. }), "{pad:?}: {err:?}");
        assert_mentions(&err, &["pad", arg]);
    }
    let err = nn::pad(&x.to_dtype(DType::F16)?, &[1, 1], PadMode::Constant, 1e6).unwrap_err();
    assert_mentions(&err, &["pad", "value", "f16"]);
    let resize = |size: Option<&[usize]>, scale: Option<&[f64]>, mode, corners| {
        nn::interpolate(&x, size, scale, mode, corners, None).unwrap_err()
    };
    use InterpolateMode::*;
    for (err, arg) in [
        (
            resize(Some(&[3]), Some(&[2.0]), Nearest, None),
            "scale_factor",
        ),
        (resize(None, None, Nearest, None), "size"),
        (resize(Some(&[3, 3]), None, Nearest, None), "size"),
        (resize(Some(&[0]), None, Linear, None), "size"),
        (resize(None, Some(&[1e300]), Linear, None), "scale_factor"),
        (
            resize(None, Some(&[f64::NAN]), Linear, None),
            "scale_factor",
        ),
        (resize(Some(&[usize::MAX / 2]), None, Nearest, None), "size"),
        (
            resize(Some(&[8]), None, Nearest, Some(true)),
            "align_corners",
        ),
        (resize(Some(&[8, 8]), None, Bilinear, None), "input"),
    ] {
        assert!(matches!(err, Error::Argument { .. }), "{err:?}");
        assert_mentions(&err, &["interpolate", arg]);
    }
    assert!(InterpolateMode::parse("bicubic").is_err());
    let ints = Tensor::zeros(&[1, 2, 4], DType::I64);
    let err = nn::interpolate(&ints, Some(&[8]), None, Linear, None, None).unwrap_err();
    assert_mentions(&err, &["interpolate", "floating"]);
    Ok(())
}
