//! PyTorch eager parity: replays the cases `scripts/parity/record.py` recorded from real PyTorch
//! (CPU) into `tests/data/parity.json` through TensorPlay's public API and compares the dtype,
//! shape and bit pattern of every output (NaN matches any NaN), or that both raise.
//!
//! Bit-exactness is the rule. Transcendental functions (and reductions, whose summation order
//! differs) are compared within [`ulp_tolerance`]: matching PyTorch's SLEEF/libm and its
//! accumulation order bit for bit is not a goal; their special values (NaN, ±inf, signed zeros)
//! must still match exactly. Every other mismatch fails the test unless it is one of the
//! [`DEVIATIONS`] (each with its reason; mirrored in docs/ops.md, "PyTorch parity"). A deviation
//! that no case exercises any more fails the test too, so the list stays honest.
//!
//! Gradient cases (`"grad"` in the file) run the op with some tensor arguments as leaves of
//! autograd and compare the gradients for PyTorch's recorded upstream gradient (`grad.rs`, with
//! its norm-wise tolerance); `coverage.rs` checks that every op of docs/ops.md's tables has a
//! forward case and, when differentiable, a gradient case.
//!
//! Needs neither Python nor PyTorch; regenerate the data as described in `record.py`.

use half::{bf16, f16};
use serde_json::Value as J;
use tensorplay::{DType, Result, Tensor};

use compare::{Mismatch, compare, ulp_tolerance};
use data::{Arg, Case, decode_tensor, describe};
use deviations::DEVIATIONS;
use run::run;

mod compare;
mod coverage;
mod data;
mod deviations;
mod grad;
mod run;

#[test]
fn replays_pytorch_cases() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/parity.json"
    ))
    .expect("tests/data/parity.json (regenerate with scripts/parity/record.py)");
    let data: J = serde_json::from_str(&text).unwrap();
    let pool: Vec<Tensor> = data["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(decode_tensor)
        .collect();
    let cases = data["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    let mut used = vec![0usize; DEVIATIONS.len()];
    for (index, j) in cases.iter().enumerate() {
        let c = Case::decode(index, j, &pool);
        let reference = c.reference;
        let gradient = c.grad.is_some();
        let whole = |problem: String| {
            Mismatch {
                index: None,
                got: f64::NAN,
                want: f64::NAN,
                input: None,
                ulps: None,
            }
            .with(problem)
        };
        let found: Vec<(Mismatch, String)> =
            match (if gradient { grad::run(&c) } else { run(&c) }, &c.expect) {
                (Err(_), None) => Vec::new(),
                (Err(e), Some(_)) => vec![whole(format!("error `{e}`, PyTorch returned a result"))],
                (Ok(outs), None) => vec![whole(format!(
                    "returned {} {:?} {:?}, PyTorch raised `{}`",
                    outs[0].dtype(),
                    outs[0].shape(),
                    outs[0].to_vec_f64().unwrap_or_default(),
                    c.error.as_deref().unwrap_or("")
                ))],
                (Ok(outs), Some(want)) if outs.len() != want.len() => {
                    vec![whole(format!(
                        "{} outputs, PyTorch {}",
                        outs.len(),
                        want.len()
                    ))]
                }
                (Ok(outs), Some(want)) => {
                    let input = c.args.iter().find_map(|a| match a {
                        Arg::Tensor(t) => Some(t),
                        _ => None,
                    });
                    let mut found = Vec::new();
                    for (k, (g, w)) in outs.iter().zip(want).enumerate() {
                        // Reference cases hold the exact function: 4 ulp, whatever the op.
                        let tol = if reference {
                            4
                        } else if gradient {
                            grad::tolerance(c.op, w.dtype())
                        } else {
                            ulp_tolerance(c.op, w.dtype())
                        };
                        let abs = if gradient { grad::abs_bound(w) } else { 0.0 };
                        match compare(g, w, input, tol, abs) {
                            Err(e) => found.push(whole(format!("output {k}: {e}"))),
                            Ok(ms) => found.extend(ms.into_iter().map(|m| {
                                let text = format!(
                                    "{} {k} element {}: {:e}, {} {:e}{}",
                                    if gradient { "gradient" } else { "output" },
                                    m.index.unwrap_or(0),
                                    m.got,
                                    if reference { "exact" } else { "PyTorch" },
                                    m.want,
                                    m.ulps
                                        .map(|u| format!(" ({u} ulp, tolerance {tol})"))
                                        .unwrap_or_default()
                                );
                                (m, text)
                            })),
                        }
                    }
                    found
                }
            };
        let mut undocumented = Vec::new();
        for (m, text) in found {
            let dev = if reference {
                None
            } else {
                DEVIATIONS
                    .iter()
                    .position(|d| d.op == c.op && d.gradient == gradient && (d.applies)(&c, &m))
            };
            match dev {
                Some(k) => used[k] += 1,
                None => undocumented.push(text),
            }
        }
        if !undocumented.is_empty() {
            let n = undocumented.len();
            undocumented.truncate(4);
            failures.push(format!(
                "{}{} -> {n} differences: {}",
                describe(&c),
                if reference { " [mpmath reference]" } else { "" },
                undocumented.join("; ")
            ));
        }
    }
    for (d, &n) in DEVIATIONS.iter().zip(&used) {
        assert!(
            n > 0,
            "deviation `{}: {}` matches no case any more; remove it (reason was: {})",
            d.op,
            d.what,
            d.reason
        );
    }
    let torch = data["torch"].as_str().unwrap_or("?");
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from PyTorch {torch} and are not documented deviations:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} PyTorch {torch} cases replayed; {} documented deviations matched",
        cases.len(),
        used.iter().sum::<usize>()
    );
}

// ---- the fixes the replay found, one test each (eager, and compiled where it applies) -------------

use tensorplay::compiler::compile;

fn f16s(t: &Tensor) -> Vec<u16> {
    t.to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// A 0-d tensor does not widen a dimensioned operand of its category (PyTorch's result_type),
/// in arithmetic, comparisons and where; compiled graphs agree.
#[test]
fn zero_dim_operands_only_raise_the_category() {
    let h = Tensor::from_vec(vec![f16::from_f32(0.1), f16::from_f32(2.0)], &[2]).unwrap();
    let s32 = Tensor::scalar(0.1f32);
    let i = Tensor::from_vec(vec![i32::MAX, 3], &[2]).unwrap();
    let s64 = Tensor::scalar(1i64);
    let c = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let eager = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        let (h, s32, i, s64, c) = (&xs[0], &xs[1], &xs[2], &xs[3], &xs[4]);
        Ok(vec![
            h.add(s32)?,
            s32.mul(h)?,
            i.add(s64)?,
            h.eq(s32)?,
            Tensor::where_cond(c, h, s32)?,
            i.add(&Tensor::scalar(0.5f64))?,
        ])
    };
    let xs = [h, s32, i, s64, c];
    let want = eager(&xs).unwrap();
    assert_eq!(want[0].dtype(), DType::F16);
    assert_eq!(want[1].dtype(), DType::F16);
    assert_eq!(want[2].dtype(), DType::I32);
    // i32::MAX + 1 wraps in i32 (it would not in i64).
    assert_eq!(want[2].to_vec::<i32>().unwrap(), vec![i32::MIN, 4]);
    // f16(0.1) == f32 0-d 0.1 compares in f16, where the two are equal.
    assert_eq!(want[3].to_vec::<bool>().unwrap(), vec![true, false]);
    assert_eq!(want[4].dtype(), DType::F16);
    // A higher category still wins: i32[n] + f64 0-d is f64.
    assert_eq!(want[5].dtype(), DType::F64);
    let f = compile(move |xs: &[Tensor]| eager(xs));
    let got = f.call(&xs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.dtype(), w.dtype());
        assert_eq!(g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
    }
}

/// `where(c, 2.5, 1)` takes the default float dtype; two integers give i64.
#[test]
fn where_of_two_scalars_takes_the_default_dtype() {
    let c = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let w = Tensor::where_scalar(&c, 2.5, 1).unwrap();
    assert_eq!(w.dtype(), DType::F32);
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![2.5, 1.0]);
    assert_eq!(Tensor::where_scalar(&c, 1, 2).unwrap().dtype(), DType::I64);
}

/// f16/bf16 times or divided by a Rust float: the scalar stays in f32 (not rounded to half).
#[test]
fn half_times_rust_scalar_keeps_the_scalar_in_f32() {
    let x = Tensor::from_vec(
        vec![f16::from_f32(1.0), f16::from_f32(0.0), f16::INFINITY],
        &[3],
    )
    .unwrap();
    let run = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![
            xs[0].div_scalar(70000.0)?,
            xs[0].mul_scalar(2f64.powi(40))?,
            xs[0].div_scalar(2f64.powi(40))?,
        ])
    };
    let want = run(std::slice::from_ref(&x)).unwrap();
    // 1/70000 = 1.43e-5 (not 1/inf = 0); 0·2^40 = 0 and inf/2^40 = inf (not NaN).
    assert_eq!(f16s(&want[0])[..2], [0x00f0, 0x0000]);
    assert_eq!(f16s(&want[1])[1], 0x0000);
    assert_eq!(f16s(&want[2])[2], 0x7c00);
    let b = x
        .to_dtype(DType::BF16)
        .unwrap()
        .div_scalar(70000.0)
        .unwrap();
    assert_eq!(b.to_vec::<bf16>().unwrap()[0].to_bits(), 0x3770);
    let f = compile(move |xs: &[Tensor]| run(xs));
    let got = f.call(std::slice::from_ref(&x)).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(f16s(g), f16s(w));
    }
}

/// A scalar the tensor dtype cannot hold is an argument error naming the op and the argument.
#[test]
fn overflowing_scalar_conversions_are_errors() {
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    let e = err(Tensor::try_full(&[2], 70000.0, DType::F16));
    assert!(
        e.contains("full") && e.contains("value") && e.contains("f16"),
        "{e}"
    );
    let e = err(Tensor::zeros(&[2], DType::I32).fill_(f64::NAN));
    assert!(
        e.contains("fill_") && e.contains("value") && e.contains("i32"),
        "{e}"
    );
    let e = err(Tensor::zeros(&[2], DType::I32).fill_(1i64 << 40));
    assert!(e.contains("fill_") && e.contains("1099511627776"), "{e}");
    let h = Tensor::zeros(&[2], DType::F16);
    let e = err(h.clamp(Some(-1e5), Some(1.0)));
    assert!(e.contains("clamp") && e.contains("min"), "{e}");
    let e = err(Tensor::zeros(&[2], DType::F32).clamp(None, Some(1e39)));
    assert!(e.contains("clamp") && e.contains("max"), "{e}");
    let e = err(h.pow_scalar(1e5));
    assert!(e.contains("pow") && e.contains("exponent"), "{e}");
    let e = err(Tensor::zeros(&[2], DType::I32).pow_scalar(1i64 << 31));
    assert!(e.contains("pow") && e.contains("exponent"), "{e}");
    // In range, rounding or ±inf/NaN for floats: fine.
    assert!(Tensor::try_full(&[2], 65504.0, DType::F16).is_ok());
    assert!(Tensor::try_full(&[2], 65505.0, DType::F16).is_err());
    assert!(Tensor::try_full(&[2], f64::NEG_INFINITY, DType::BF16).is_ok());
    assert!(h.clamp(Some(f64::NEG_INFINITY), Some(f64::NAN)).is_ok());
    assert!(Tensor::zeros(&[2], DType::F32).pow_scalar(1e39).is_ok());
    assert!(Tensor::zeros(&[2], DType::I64).fill_(1.5).is_ok());
}

/// f64 gelu of huge negative inputs is -0.0 (not NaN); -inf stays NaN.
#[test]
fn f64_gelu_of_huge_negative_inputs_is_negative_zero() {
    let x = Tensor::from_vec(
        vec![-1e300, -f64::MAX, -1e154, -45.0, f64::NEG_INFINITY],
        &[5],
    )
    .unwrap();
    for approx in ["none", "tanh"] {
        let y = x.gelu(approx).unwrap().to_vec::<f64>().unwrap();
        for v in &y[..4] {
            assert_eq!(v.to_bits(), (-0.0f64).to_bits(), "gelu {approx}: {y:?}");
        }
        assert!(y[4].is_nan());
    }
}

/// f16 matmul accumulates in f32 and rounds once in every shape, 1-D @ batched included.
#[test]
fn f16_matmul_accumulates_in_f32_in_every_shape() {
    let vals = |n: usize, seed: usize| -> Vec<f16> {
        (0..n)
            .map(|i| f16::from_f32((((i * 7919 + seed * 104_729) % 2001) as f32 - 1000.0) / 97.0))
            .collect()
    };
    for (sa, sb) in [
        (vec![16], vec![2, 16, 3]),
        (vec![16], vec![16, 3]),
        (vec![3, 16], vec![16]),
        (vec![2, 3, 16], vec![16]),
        (vec![3, 16], vec![16, 2]),
    ] {
        let a = Tensor::from_vec(vals(sa.iter().product(), 1), &sa).unwrap();
        let b = Tensor::from_vec(vals(sb.iter().product(), 2), &sb).unwrap();
        let got = a.matmul(&b).unwrap();
        let a32 = a.to_dtype(DType::F32).unwrap();
        let b32 = b.to_dtype(DType::F32).unwrap();
        let want = a32.matmul(&b32).unwrap().to_dtype(DType::F16).unwrap();
        assert_eq!(f16s(&got), f16s(&want), "{sa:?} @ {sb:?}");
    }
}

/// arange with an integer dtype steps by the truncated arguments (PyTorch); f64 values are
/// `start + i·step` rounded once.
#[test]
fn arange_integer_steps_and_f64_rounding() {
    let r = Tensor::arange(0.0, 5.0, 0.5, DType::I32).unwrap();
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![0; 10]);
    let r = Tensor::arange(-2.5, 2.5, 0.7, DType::I64).unwrap();
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![-2; 8]);
    let r = Tensor::arange(-3.0, 3.0, 1.5, DType::I32).unwrap();
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![-3, -2, -1, 0]);
    let r = Tensor::arange(-1.0, 1.0, 0.05, DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for (i, v) in r.iter().enumerate() {
        assert_eq!(*v, (i as f64).mul_add(0.05, -1.0));
    }
    // -1 + 15·0.05 rounds once to the f64 just above -0.25 (not -0.25).
    assert_eq!(r[15].to_bits(), 0xbfcf_ffff_ffff_fffe);
}

/// relu(-0.0) = -0.0 and sign(-0.0) = 0.0 (PyTorch); sign(NaN) = NaN (a documented deviation);
/// compiled code agrees.
#[test]
fn relu_and_sign_of_signed_zero_and_nan() {
    let x = Tensor::from_vec(vec![-0.0f32, f32::NAN, -2.0, 3.0, 0.0], &[5]).unwrap();
    let run = |xs: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![xs[0].relu()?, xs[0].sign()?]) };
    let want = run(std::slice::from_ref(&x)).unwrap();
    let bits = |t: &Tensor| -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    assert_eq!(
        bits(&want[0]),
        vec![0x8000_0000, 0x7fc0_0000, 0, 0x4040_0000, 0]
    );
    let s = bits(&want[1]);
    assert_eq!((s[0], s[2], s[3], s[4]), (0, 0xbf80_0000, 0x3f80_0000, 0));
    assert!(f32::from_bits(s[1]).is_nan());
    let f = compile(move |xs: &[Tensor]| run(xs));
    let got = f.call(std::slice::from_ref(&x)).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let (gb, wb) = (bits(g), bits(w));
        for (a, b) in gb.iter().zip(&wb) {
            assert!(
                a == b || (f32::from_bits(*a).is_nan() && f32::from_bits(*b).is_nan()),
                "{gb:x?} vs {wb:x?}"
            );
        }
    }
    let d = Tensor::from_vec(vec![-0.0f64], &[1]).unwrap();
    assert_eq!(
        d.relu().unwrap().to_vec::<f64>().unwrap()[0].to_bits(),
        (-0.0f64).to_bits()
    );
    assert_eq!(d.sign().unwrap().to_vec::<f64>().unwrap()[0].to_bits(), 0);
}

/// Float -> integer casts of NaN, ±inf and out-of-range values: Rust's `as` (truncate,
/// saturate, NaN -> 0), in eager and compiled code alike (PyTorch's result is
/// platform-dependent; see docs/ops.md, "PyTorch parity").
#[test]
fn float_to_int_casts_saturate_and_map_nan_to_zero() {
    let x = Tensor::from_vec(
        vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3e9, -2.7, 1e20],
        &[6],
    )
    .unwrap();
    let run = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![
            xs[0].to_dtype(DType::I32)?,
            xs[0].to_dtype(DType::I64)?,
        ])
    };
    let want = run(std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        want[0].to_vec::<i32>().unwrap(),
        vec![0, i32::MAX, i32::MIN, i32::MAX, -2, i32::MAX]
    );
    assert_eq!(
        want[1].to_vec::<i64>().unwrap(),
        vec![0, i64::MAX, i64::MIN, 3_000_000_000, -2, i64::MAX]
    );
    let f = compile(move |xs: &[Tensor]| {
        let y = xs[0].mul_scalar(1.0)?;
        run(std::slice::from_ref(&y))
    });
    let got = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(
        got[0].to_vec::<i32>().unwrap(),
        want[0].to_vec::<i32>().unwrap()
    );
    assert_eq!(
        got[1].to_vec::<i64>().unwrap(),
        want[1].to_vec::<i64>().unwrap()
    );
}
