//! Eager transcendentals run the math library's kernels: for every op declared `bulk = F`, the
//! result is the library's scalar definition bit for bit — contiguous or strided, on one thread
//! or split across the pool, for f32 and for f16/bf16 (computed in f32, rounded once) — and
//! stays within the library's accuracy bound against f64.

use half::{bf16, f16};
use tensorplay_math::MathFn;
use tensorplay_math::arith::S32;
use tensorplay_math::pow::pow_f32;
use tensorplay_runtime::{DType, Result, Tensor};

/// A deterministic spread of inputs: bit patterns across the f32 range (every 1000003rd), the
/// special values, and a dense run over [-12, 12].
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX / 1_000_003)
        .map(|i| f32::from_bits(i.wrapping_mul(1_000_003)))
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-45,
        -1e-45,
    ]);
    v.extend((0..6000).map(|i| -12.0 + i as f32 / 250.0));
    v
}

type Op = fn(&Tensor) -> Result<Tensor>;

/// Each eager op with the library function it must equal.
fn ops() -> Vec<(&'static str, Op, MathFn)> {
    vec![
        ("exp", Tensor::exp, MathFn::Exp),
        ("log", Tensor::log, MathFn::Log),
        ("tanh", Tensor::tanh, MathFn::Tanh),
        ("sigmoid", Tensor::sigmoid, MathFn::Sigmoid),
        ("erf", Tensor::erf, MathFn::Erf),
        ("gelu", |t| t.gelu("none"), MathFn::GeluErf),
        ("gelu_tanh", |t| t.gelu("tanh"), MathFn::GeluTanh),
        ("silu", Tensor::silu, MathFn::Silu),
        ("log1p", Tensor::log1p, MathFn::Log1p),
        ("expm1", Tensor::expm1, MathFn::Expm1),
    ]
}

/// Same bits, or both NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Error of `got` against the f64 value `want`, in f32 ulps at `want`'s magnitude (2^-149 in
/// the subnormal range); 0 when both are NaN or `got` is `want` rounded (which covers overflow to
/// ±inf).
fn ulps(got: f32, want: f64) -> f64 {
    if got.is_nan() && want.is_nan() || got == want as f32 {
        return 0.0;
    }
    let w = want.abs().max(f32::MIN_POSITIVE as f64);
    let spacing = 2f64.powi(w.log2().floor() as i32 - 23).max(2f64.powi(-149));
    ((got as f64) - want).abs() / spacing
}

#[test]
fn eager_f32_is_the_library_definition_bit_for_bit() {
    let x = inputs();
    let t = Tensor::from_vec(x.clone(), &[x.len()]).unwrap();
    for (name, op, f) in ops() {
        let got = op(&t).unwrap().to_vec::<f32>().unwrap();
        for (&v, &g) in x.iter().zip(&got) {
            assert!(
                same(g, f.eval_f32(v)),
                "{name}({v:e}) = {g:e}, library {:e}",
                f.eval_f32(v)
            );
        }
    }
}

#[test]
fn eager_f32_transcendentals_are_within_4_ulp_of_f64() {
    let x: Vec<f32> = inputs().into_iter().filter(|v| v.is_finite()).collect();
    let t = Tensor::from_vec(x.clone(), &[x.len()]).unwrap();
    for (name, op, f) in ops() {
        let got = op(&t).unwrap().to_vec::<f32>().unwrap();
        let worst = x
            .iter()
            .zip(&got)
            .map(|(&v, &g)| (ulps(g, f.eval_f64(v as f64)), v))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
        assert!(
            worst.0 <= 4.0,
            "{name}: {} ulp at x = {:e}",
            worst.0,
            worst.1
        );
    }
}

#[test]
fn strided_broadcast_and_pool_split_runs_give_the_same_bits() {
    // 2^17 elements as [512, 256]: large enough for the pool to split the range.
    let n = 1 << 17;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 20011) as f32 / 1000.0 - 10.0)
        .collect();
    let t = Tensor::from_vec(x.clone(), &[512, 256]).unwrap();
    let tt = t.transpose(0, 1).unwrap(); // strided view, [256, 512]
    let col = t
        .slice(1, Some(3), Some(4), 1)
        .unwrap()
        .expand(&[512, 8])
        .unwrap(); // broadcast
    for (name, op, f) in ops() {
        let full = op(&t).unwrap().to_vec::<f32>().unwrap();
        for (i, &g) in full.iter().enumerate() {
            assert!(same(g, f.eval_f32(x[i])), "{name} contiguous at {i}");
        }
        let strided = op(&tt).unwrap().to_vec::<f32>().unwrap();
        for (k, &g) in strided.iter().enumerate() {
            let (r, c) = (k / 512, k % 512);
            assert!(
                same(g, full[c * 256 + r]),
                "{name} transposed at ({r}, {c})"
            );
        }
        let b = op(&col).unwrap().to_vec::<f32>().unwrap();
        for (k, &g) in b.iter().enumerate() {
            assert!(same(g, full[(k / 8) * 256 + 3]), "{name} broadcast at {k}");
        }
    }
}

#[test]
fn half_precision_computes_in_f32_and_rounds_once() {
    let x: Vec<f32> = (0..3000).map(|i| -15.0 + i as f32 / 100.0).collect();
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let th = Tensor::from_vec(h.clone(), &[h.len()]).unwrap();
    let tb = Tensor::from_vec(b.clone(), &[b.len()]).unwrap();
    for (name, op, f) in ops() {
        let gh = op(&th).unwrap();
        assert_eq!(gh.dtype(), DType::F16);
        for (&v, g) in h.iter().zip(gh.to_vec::<f16>().unwrap()) {
            let want = f16::from_f32(f.eval_f32(v.to_f32()));
            assert!(
                g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan(),
                "{name} f16"
            );
        }
        let gb = op(&tb).unwrap();
        assert_eq!(gb.dtype(), DType::BF16);
        for (&v, g) in b.iter().zip(gb.to_vec::<bf16>().unwrap()) {
            let want = bf16::from_f32(f.eval_f32(v.to_f32()));
            assert!(
                g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan(),
                "{name} bf16"
            );
        }
    }
}

#[test]
fn integer_inputs_compute_in_f32_through_the_same_kernel() {
    let i = Tensor::from_vec((-50i64..50).collect::<Vec<_>>(), &[100]).unwrap();
    let got = i.exp().unwrap();
    assert_eq!(got.dtype(), DType::F32);
    for (k, g) in got.to_vec::<f32>().unwrap().into_iter().enumerate() {
        assert!(same(g, MathFn::Exp.eval_f32(k as f32 - 50.0)));
    }
}

#[test]
fn pow_is_the_library_pow_for_tensor_and_scalar_exponents() {
    let x = inputs();
    let y: Vec<f32> = x.iter().rev().map(|v| v.clamp(-40.0, 40.0)).collect();
    let tx = Tensor::from_vec(x.clone(), &[x.len()]).unwrap();
    let ty = Tensor::from_vec(y.clone(), &[y.len()]).unwrap();
    let got = tx.pow(&ty).unwrap().to_vec::<f32>().unwrap();
    for ((&a, &b), &g) in x.iter().zip(&y).zip(&got) {
        assert!(
            same(g, pow_f32(&mut S32, a, b)),
            "pow({a:e}, {b:e}) = {g:e}"
        );
        let want = (a as f64).powf(b as f64);
        assert!(
            ulps(g, want) <= 1.0,
            "pow({a:e}, {b:e}) = {g:e}, f64 {want:e}"
        );
    }
    // A Rust scalar exponent without a cheaper form broadcasts (a stride-0 operand: the tiled
    // path) through the library pow.
    for e in [2.5f32, -0.75, 7.0] {
        let got = tx.pow_scalar(e as f64).unwrap().to_vec::<f32>().unwrap();
        for (&a, &g) in x.iter().zip(&got) {
            assert!(same(g, pow_f32(&mut S32, a, e)), "pow({a:e}, {e}) = {g:e}");
        }
    }
    // C99 special cases survive.
    let s = Tensor::from_vec(vec![f32::NAN, 1.0, -1.0, 0.0], &[4]).unwrap();
    let e = Tensor::from_vec(vec![0.0, f32::NAN, f32::INFINITY, -1.0], &[4]).unwrap();
    assert_eq!(
        s.pow(&e).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 1.0, 1.0, f32::INFINITY]
    );
}

#[test]
fn small_scalar_exponents_are_the_compilers_products_bit_for_bit() {
    // The compiler lowers these exponents to products / a division / a patched sqrt (PowBy);
    // eager computes exactly the same expressions, as PyTorch's eager kernel special-cases them.
    let x = inputs();
    let t = Tensor::from_vec(x.clone(), &[x.len()]).unwrap();
    type Want = fn(f32) -> f32;
    let cases: [(f64, Want); 7] = [
        (0.0, |_| 1.0),
        (1.0, |v| v),
        (2.0, |v| v * v),
        (3.0, |v| (v * v) * v),
        (4.0, |v| (v * v) * (v * v)),
        (-1.0, |v| 1.0 / v),
        (0.5, |v| {
            let s = v.sqrt();
            let m = if s > 0.0 || s.is_nan() { s } else { 0.0 };
            if v == f32::NEG_INFINITY {
                f32::INFINITY
            } else {
                m
            }
        }),
    ];
    for (e, want) in cases {
        let got = t.pow_scalar(e).unwrap().to_vec::<f32>().unwrap();
        for (&v, &g) in x.iter().zip(&got) {
            assert!(
                same(g, want(v)),
                "pow({v:e}, {e}) = {g:e}, want {:e}",
                want(v)
            );
        }
    }
    // pow's special values hold for the replacements: pow(NaN, 0) = 1, pow(-0, 0.5) = +0,
    // pow(-inf, 0.5) = +inf, pow(-0, -1) = -inf.
    let s = Tensor::from_vec(vec![f32::NAN, -0.0, f32::NEG_INFINITY], &[3]).unwrap();
    assert_eq!(
        s.pow_scalar(0.0).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0; 3]
    );
    let h = s.pow_scalar(0.5).unwrap().to_vec::<f32>().unwrap();
    assert!(h[0].is_nan() && h[1].to_bits() == 0 && h[2] == f32::INFINITY);
    let r = s.pow_scalar(-1.0).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(r[1], f32::NEG_INFINITY);
    // Integers: wrapping products, as the general integer pow.
    let i = Tensor::from_vec(vec![3i32, -2, 46341], &[3]).unwrap();
    assert_eq!(
        i.pow_scalar(2).unwrap().to_vec::<i32>().unwrap(),
        vec![9, 4, 46341i32.wrapping_mul(46341)]
    );
    // f16 rounds the f32 product once.
    let hx = Tensor::from_vec(vec![f16::from_f32(1.1), f16::from_f32(-3.3)], &[2]).unwrap();
    let got = hx.pow_scalar(3.0).unwrap().to_vec::<f16>().unwrap();
    for (v, g) in [1.1f32, -3.3].into_iter().zip(got) {
        let v = f16::from_f32(v).to_f32();
        assert_eq!(g, f16::from_f32((v * v) * v));
    }
}
