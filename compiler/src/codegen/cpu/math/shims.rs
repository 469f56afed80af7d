//! `f64` implementations of every math function, and the `extern "C"` shims
//! that JIT'd code calls for `f64` / `f64x2` values.
//!
//! Most wrap Rust's `std` `f64` methods. `erf` has no stable `std` method, so
//! it is implemented here: a positive-term series `erf(a) = 2/sqrt(pi)
//! e^(-a^2) sum 2^n a^(2n+1) / (1*3*...*(2n+1))` for |a| < 2.5 and the
//! continued fraction of erfc (evaluated backward, 200 levels for
//! 1 <= a < 2.5, 60 beyond) for erfc(a >= 1) and erf(|a| >= 2.5).

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, PI};

/// Threshold between the series and the continued fraction for erf.
const ERF_SPLIT: f64 = 2.5;
/// Below this, erfc is `1 - erf` (at most ~2.6 bits lost to cancellation).
const ERFC_SPLIT: f64 = 1.0;

/// `erfc(a)` for `a >= ERFC_SPLIT` by its continued fraction, where
/// `a2 = a2h + a2l` is `a^2` given in two parts (so that large arguments keep
/// full relative accuracy in `exp(-a^2)`).
fn erfc_cf(a: f64, a2h: f64, a2l: f64) -> f64 {
    if a >= 27.5 {
        return 0.0;
    }
    let levels = if a >= ERF_SPLIT { 60 } else { 200 };
    let mut f = a;
    for k in (1..=levels).rev() {
        f = a + (k as f64 * 0.5) / f;
    }
    (-a2h).exp() * (1.0 - a2l) / (f * PI.sqrt())
}

/// `erf(a)` for `0 <= a < ERF_SPLIT` by the positive-term series.
fn erf_series(a: f64) -> f64 {
    let a2 = a * a;
    let mut term = a;
    let mut sum = a;
    let mut n = 0.0;
    while term > sum * 1e-17 {
        n += 1.0;
        term *= 2.0 * a2 / (2.0 * n + 1.0);
        sum += term;
    }
    FRAC_2_SQRT_PI * (-a2).exp() * sum
}

/// The error function in `f64` (relative error ~1e-15).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::math::erf_f64;
/// assert!((erf_f64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
/// assert_eq!(erf_f64(-0.0).to_bits(), (-0.0f64).to_bits());
/// assert_eq!(erf_f64(f64::INFINITY), 1.0);
/// ```
pub fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < ERF_SPLIT {
        erf_series(a)
    } else {
        let h = a * a;
        1.0 - erfc_cf(a, h, a.mul_add(a, -h))
    };
    r.copysign(x)
}

/// The complementary error function `1 - erf(x)` in `f64`, accurate in the
/// far tail as well (relative error ~1e-14 down to the subnormal range).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::math::erfc_f64;
/// let v = erfc_f64(10.0); // 2.088487583762545e-45
/// assert!((v / 2.088_487_583_762_545e-45 - 1.0).abs() < 1e-13);
/// assert_eq!(erfc_f64(f64::NEG_INFINITY), 2.0);
/// ```
pub fn erfc_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < ERFC_SPLIT {
        1.0 - erf_f64(x)
    } else {
        let h = x * x;
        erfc_cf(x, h, x.mul_add(x, -h))
    }
}

/// `1 / (1 + e^-x)` without overflow or cancellation.
pub fn sigmoid_f64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `x * sigmoid(x)`; `silu(-inf)` is NaN (`-inf * 0`), as in eager.
pub fn silu_f64(x: f64) -> f64 {
    x * sigmoid_f64(x)
}

/// `0.5 x (1 + erf(x / sqrt 2))`, with the negative tail computed as
/// `0.5 x erfc(|x| / sqrt 2)` (no cancellation); `gelu_erf(-inf)` is NaN.
pub fn gelu_erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let phi = if x >= 0.0 {
        0.5 * (1.0 + erf_f64(x * FRAC_1_SQRT_2))
    } else {
        let z = -x * FRAC_1_SQRT_2;
        if z < ERFC_SPLIT {
            0.5 * (1.0 - erf_f64(z))
        } else {
            // z^2 = x^2 / 2 exactly from the two-product of x.
            let h = x * x;
            let l = x.mul_add(x, -h);
            0.5 * erfc_cf(z, 0.5 * h, 0.5 * l)
        }
    };
    x * phi
}

/// `0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))`, evaluated as the
/// equal `x * sigmoid(2 * 0.7978845608 (x + 0.044715 x^3))` (no cancellation
/// for negative x); `gelu_tanh(-inf)` is NaN.
pub fn gelu_tanh_f64(x: f64) -> f64 {
    let s = 2.0 * 0.797_884_560_8 * (x + 0.044_715 * x * x * x);
    x * sigmoid_f64(s)
}

macro_rules! shims {
    ($($name:ident => $body:expr;)*) => {
        $(
            #[doc = concat!("JIT shim `", stringify!($name), "`: the f64 function called per lane.")]
            pub extern "C" fn $name(x: f64) -> f64 {
                let f: fn(f64) -> f64 = $body;
                f(x)
            }
        )*
    };
}

shims! {
    tp_math_exp_f64 => f64::exp;
    tp_math_log_f64 => f64::ln;
    tp_math_tanh_f64 => f64::tanh;
    tp_math_sigmoid_f64 => sigmoid_f64;
    tp_math_erf_f64 => erf_f64;
    tp_math_gelu_erf_f64 => gelu_erf_f64;
    tp_math_gelu_tanh_f64 => gelu_tanh_f64;
    tp_math_silu_f64 => silu_f64;
    tp_math_sin_f64 => f64::sin;
    tp_math_cos_f64 => f64::cos;
}

/// JIT shim `tp_math_pow_f64`: `x.powf(y)` (C99 `pow` semantics).
pub extern "C" fn tp_math_pow_f64(x: f64, y: f64) -> f64 {
    x.powf(y)
}
