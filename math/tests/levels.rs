//! Every build of every kernel — AVX-512, AVX2 and the baseline-target loops eager ops fall
//! back to — returns the bits of the scalar definition (`MathFn::eval_f32`, `pow_f32` on one
//! `S32` lane), for every length (body, one-vector blocks, padded remainder) and in place. This
//! is what lets eager results not depend on the machine.

use tensorplay_math::MathFn;
use tensorplay_math::arith::S32;
use tensorplay_math::bulk::{self, BinaryFn, BulkOp, Level, UnaryFn};
use tensorplay_math::pow::pow_f32;

/// Bit patterns across the whole f32 range (every 104729th, a prime, so every exponent and
/// many mantissas), the special values, and a dense run around 1.
fn inputs() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX / 104_729)
        .map(|i| f32::from_bits(i.wrapping_mul(104_729)))
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    v.extend((0..2000).map(|i| 0.5 + i as f32 / 1000.0));
    v.extend((0..2000).map(|i| -10.0 + i as f32 / 100.0));
    v
}

/// Same bits, or both NaN (payloads are free).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

const UNARY: [MathFn; 10] = [
    MathFn::Exp,
    MathFn::Log,
    MathFn::Tanh,
    MathFn::Sigmoid,
    MathFn::Erf,
    MathFn::GeluErf,
    MathFn::GeluTanh,
    MathFn::Silu,
    MathFn::Log1p,
    MathFn::Expm1,
];

/// The builds to check: the levels this host supports, then the portable one.
fn unary_builds(op: BulkOp) -> Vec<(String, UnaryFn)> {
    let mut v: Vec<(String, UnaryFn)> = Level::ALL
        .into_iter()
        .filter_map(|l| Some((format!("{l:?}"), bulk::unary_at(op, l)?)))
        .collect();
    v.push((
        "portable".into(),
        bulk::unary_portable(op).expect("portable kernel"),
    ));
    v
}

fn binary_builds(op: BulkOp) -> Vec<(String, BinaryFn)> {
    let mut v: Vec<(String, BinaryFn)> = Level::ALL
        .into_iter()
        .filter_map(|l| Some((format!("{l:?}"), bulk::binary_at(op, l)?)))
        .collect();
    v.push((
        "portable".into(),
        bulk::binary_portable(op).expect("portable kernel"),
    ));
    v
}

#[test]
fn every_unary_build_returns_the_scalar_definitions_bits() {
    let x = inputs();
    for f in UNARY {
        let want: Vec<f32> = x.iter().map(|&v| f.eval_f32(v)).collect();
        for (name, k) in unary_builds(BulkOp::Math(f)) {
            let mut out = vec![0.0f32; x.len()];
            // SAFETY: both buffers hold `x.len()` elements.
            unsafe { k(x.as_ptr(), out.as_mut_ptr(), x.len()) };
            for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                assert!(
                    same(g, w),
                    "{} {name}: x = {:e}: {g:e} vs {w:e}",
                    f.name(),
                    x[i]
                );
            }
            // In place, at lengths that end in every position of a block.
            for n in (0..70).chain([511, 512, 513]) {
                let mut buf: Vec<f32> = x[..n].to_vec();
                let p = buf.as_mut_ptr();
                // SAFETY: `buf` holds `n` elements; in place is allowed.
                unsafe { k(p, p, n) };
                for (j, &g) in buf.iter().enumerate() {
                    assert!(
                        same(g, want[j]),
                        "{} {name} in place, n = {n}, j = {j}",
                        f.name()
                    );
                }
            }
        }
    }
}

#[test]
fn exp_is_zero_below_minus_104_in_every_build() {
    // The threshold below which `exp` skips its computation (an underflowing multiply, slow on
    // x86) and returns +0: e^-104 is under half the smallest subnormal, so the computed value
    // at -104 must be +0 too, or the shortcut would change results.
    let x = [
        -104.0f32,
        -104.000_01,
        -104.5,
        -1e4,
        -1e30,
        f32::MIN,
        f32::NEG_INFINITY,
    ];
    let f = MathFn::Exp;
    for &v in &x {
        assert_eq!(f.eval_f32(v).to_bits(), 0, "exp({v:e})");
    }
    // Just above: subnormal results, still computed.
    assert!(f.eval_f32(-103.0) > 0.0 && f.eval_f32(-103.0) < f32::MIN_POSITIVE);
    for (name, k) in unary_builds(BulkOp::Math(f)) {
        let mut out = vec![1.0f32; x.len()];
        // SAFETY: both buffers hold `x.len()` elements.
        unsafe { k(x.as_ptr(), out.as_mut_ptr(), x.len()) };
        assert!(out.iter().all(|g| g.to_bits() == 0), "{name}: {out:?}");
    }
}

#[test]
fn gelu_tanh_far_tails_take_the_values_of_its_clamp_points() {
    // gelu_tanh skips the computation for |x| > 11, where it used to clamp its argument (the
    // computation there underflows, slow on x86), and returns x or -0: what the computation
    // gives at the clamp points.
    let f = MathFn::GeluTanh;
    let neg0 = (-0.0f32).to_bits();
    assert_eq!(f.eval_f32(-11.0).to_bits(), neg0);
    assert_eq!(f.eval_f32(11.0).to_bits(), 11.0f32.to_bits());
    let far: [(f32, f32); 5] = [
        (-11.000_001, -0.0),
        (-11.5, -0.0),
        (-3e38, -0.0),
        (11.000_001, 11.000_001),
        (f32::INFINITY, f32::INFINITY),
    ];
    for (x, want) in far {
        assert_eq!(f.eval_f32(x).to_bits(), want.to_bits(), "gelu_tanh({x:e})");
        for (name, k) in unary_builds(BulkOp::Math(f)) {
            let mut out = [f32::NAN];
            // SAFETY: both buffers hold one element.
            unsafe { k([x].as_ptr(), out.as_mut_ptr(), 1) };
            assert_eq!(out[0].to_bits(), want.to_bits(), "gelu_tanh {name}({x:e})");
        }
    }
    assert!(f.eval_f32(f32::NEG_INFINITY).is_nan());
}

#[test]
fn every_binary_build_returns_the_scalar_definitions_bits() {
    let x = inputs();
    // Exponents: the same sweep reversed (all pairings of magnitudes), plus small integers.
    let mut y: Vec<f32> = x.iter().rev().copied().collect();
    for (i, v) in y.iter_mut().enumerate().step_by(7) {
        *v = (i % 9) as f32 - 4.0;
    }
    type Scalar2 = fn(f32, f32) -> f32;
    let cases: [(BulkOp, Scalar2); 2] = [
        (BulkOp::Pow, |a, b| pow_f32(&mut S32, a, b)),
        (BulkOp::Div, |a, b| a / b),
    ];
    for (op, f) in cases {
        let want: Vec<f32> = x.iter().zip(&y).map(|(&a, &b)| f(a, b)).collect();
        for (name, k) in binary_builds(op) {
            let mut out = vec![0.0f32; x.len()];
            // SAFETY: all three buffers hold `x.len()` elements.
            unsafe { k(x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), x.len()) };
            for (i, (&g, &w)) in out.iter().zip(&want).enumerate() {
                assert!(same(g, w), "{} {name}: {:e}, {:e}", op.name(), x[i], y[i]);
            }
        }
    }
}

#[test]
fn eager_kernels_exist_for_every_library_function_and_none_for_the_shim_ones() {
    for f in UNARY {
        assert!(bulk::eager_unary(BulkOp::Math(f)).is_some(), "{}", f.name());
    }
    assert!(bulk::eager_unary(BulkOp::Math(MathFn::Sin)).is_none());
    assert!(bulk::eager_unary(BulkOp::Pow).is_none());
    assert!(bulk::eager_binary(BulkOp::Pow).is_some());
    assert!(bulk::eager_binary(BulkOp::Sqrt).is_none());
    // The eager level is one the host supports, within the TP_BULK_ISA cap.
    if let Some(l) = bulk::eager_level() {
        assert!(l.is_supported());
        assert!(bulk::level_cap() == Level::Avx512 || l == Level::Avx2);
    }
}
