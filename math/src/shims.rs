//! `f64` implementations of every math function, and the `extern "C"` shims
//! that JIT'd code calls for `f64` / `f64x2` values.
//!
//! Most wrap Rust's `std` `f64` methods. `erf` has no stable `std` method, so
//! it is implemented here: its Taylor series `erf(a) = 2/sqrt(pi) sum (-1)^n
//! a^(2n+1) / (n! (2n+1))` (Horner in a^2) for |a| < 1.5, and `1 - erfc(a)`
//! beyond, with erfc by its continued fraction (evaluated backward: 200 levels
//! for erfc on 1 <= a < 2.5, fewer where only erf needs it, 60 beyond). Within
//! 3 ulps of a correctly rounded erf.

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

/// `1 / sqrt(pi)` (half the correctly rounded `2 / sqrt(pi)`, so exact too).
const FRAC_1_SQRT_PI: f64 = FRAC_2_SQRT_PI * 0.5;

/// Threshold between the Taylor series and `1 - erfc` for erf.
const ERF_SPLIT: f64 = 1.5;
/// Below this, erfc is `1 - erf` (at most ~2.6 bits lost to cancellation).
const ERFC_SPLIT: f64 = 1.0;
/// From here on 60 levels of the continued fraction give erfc to ~1e-15.
const ERFC_FEW_LEVELS: f64 = 2.5;

/// `erfc(a)` for `a >= 1` by its continued fraction
/// with `levels` levels, where `a2 = a2h + a2l` is `a^2` given in two parts (so
/// that large arguments keep full relative accuracy in `exp(-a^2)`).
fn erfc_cf_levels(a: f64, a2h: f64, a2l: f64, levels: u32) -> f64 {
    if a >= 27.5 {
        return 0.0;
    }
    let mut f = a;
    for k in (1..=levels).rev() {
        f = a + (k as f64 * 0.5) / f;
    }
    let e = (-a2h).exp();
    (e.mul_add(-a2l, e) / f) * FRAC_1_SQRT_PI
}

/// `erfc(a)` for `a >= ERFC_SPLIT` to full relative precision (~1e-14): 200
/// levels below [`ERFC_FEW_LEVELS`], where the fraction converges slowly.
fn erfc_cf(a: f64, a2h: f64, a2l: f64) -> f64 {
    let levels = if a >= ERFC_FEW_LEVELS { 60 } else { 200 };
    erfc_cf_levels(a, a2h, a2l, levels)
}

/// Terms of the Taylor series used below [`ERF_SPLIT`]: the first one left out
/// is below 2^-60 of erf there.
const ERF_TAYLOR_TERMS: usize = 27;

/// `c_n = (-1)^n 2/sqrt(pi) / (n! (2n+1))`, so that `erf(a) = sum c_n a^(2n+1)`.
const ERF_TAYLOR: [f64; ERF_TAYLOR_TERMS] = {
    let mut c = [0.0; ERF_TAYLOR_TERMS];
    let mut factorial = 1.0;
    let mut n = 0;
    while n < ERF_TAYLOR_TERMS {
        if n > 0 {
            factorial *= n as f64;
        }
        let v = FRAC_2_SQRT_PI / (factorial * (2 * n + 1) as f64);
        c[n] = if n % 2 == 0 { v } else { -v };
        n += 1;
    }
    c
};

/// `erf(a)` for `0 <= a < ERF_SPLIT` by its Taylor series (at most ~2 bits
/// lost to the alternating terms near the split; the earlier positive-term
/// series `e^(-a^2) sum ...` lost ~4 bits to the rounding of its recurrence).
fn erf_taylor(a: f64) -> f64 {
    let a2 = a * a;
    let mut p = ERF_TAYLOR[ERF_TAYLOR_TERMS - 1];
    for &c in ERF_TAYLOR[1..ERF_TAYLOR_TERMS - 1].iter().rev() {
        p = p.mul_add(a2, c);
    }
    a.mul_add(ERF_TAYLOR[0], a * a2 * p)
}

/// The error function in `f64` (within 3 ulps of the correctly rounded value).
///
/// ```
/// use tensorplay_math::shims::erf_f64;
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
        erf_taylor(a)
    } else {
        // erf only needs erfc to ~1e-16 absolute: 80 levels suffice from 1.5.
        let levels = if a >= 2.0 { 60 } else { 80 };
        let h = a * a;
        1.0 - erfc_cf_levels(a, h, a.mul_add(a, -h), levels)
    };
    r.copysign(x)
}

/// The complementary error function `1 - erf(x)` in `f64`, accurate in the
/// far tail as well (relative error ~1e-14 down to the subnormal range).
///
/// ```
/// use tensorplay_math::shims::erfc_f64;
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

/// `x * sigmoid(x)`; `silu(-inf)` is NaN (`-inf * 0`), as in eager. Below
/// -708, where `e^x` is subnormal, `x e^x` is formed scaled by 2^64 so the
/// result rounds once.
pub fn silu_f64(x: f64) -> f64 {
    if (-1024.0..-708.0).contains(&x) {
        x * exp_scaled(x, 0.0) * TWO_M64
    } else {
        x * sigmoid_f64(x)
    }
}

/// `64 ln 2` in two parts; the high part is a multiple of 2^-43, so adding it
/// to an f64 of magnitude in [512, 1024) (a multiple of 2^-43 too) is exact.
const LN2_X64_HI: f64 = 44.361_419_555_836_505;
/// `64 ln 2 - LN2_X64_HI`.
const LN2_X64_LO: f64 = -5.621_237_396_739_37e-15;
/// 2^-64, undoing [`exp_scaled`].
const TWO_M64: f64 = 1.0 / (1u128 << 64) as f64;
/// `1 / sqrt(2 pi)`.
const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `exp(y + t) * 2^64` for `y` in [-1024, -512] and `|t| < 1e-12`: the scale
/// keeps results that end up subnormal at full precision until the caller's
/// final multiply by [`TWO_M64`].
fn exp_scaled(y: f64, t: f64) -> f64 {
    let e = (y + LN2_X64_HI).exp();
    e.mul_add(t + LN2_X64_LO, e)
}

/// gelu_erf for `x < -36` (results below 1e-280, subnormal below -37.6) by
/// the asymptotic series of erfc: `-exp(-x^2 / 2) / sqrt(2 pi) * (1 - 1/x^2 +
/// 3/x^4 - 15/x^6 ...)` (8 terms reach 3e-19), with `x^2` exact in two parts
/// and `exp` scaled by 2^64 so subnormal results round once (`0.5 x erfc(..)`
/// rounds erfc to a subnormal first, ~10 ulps off there). Eager's f64 gelu
/// calls this too.
pub fn gelu_erf_far_tail(x: f64) -> f64 {
    if x < -40.0 {
        // Below -38.6 the result is under half the smallest subnormal: -0.0 (as PyTorch gives
        // for huge negative x), and NaN for -inf (x * erfc(inf) = -inf * 0, as PyTorch). The
        // series below would square x into inf and give NaN for any x under -1.3e154.
        return if x == f64::NEG_INFINITY {
            f64::NAN
        } else {
            -0.0
        };
    }
    let h = x * x;
    let l = x.mul_add(x, -h);
    let w = 1.0 / h;
    let mut s = 1.0;
    for k in (1..8).rev() {
        s = 1.0 - (2 * k - 1) as f64 * w * s;
    }
    -(exp_scaled(-0.5 * h, -0.5 * l) * s * FRAC_1_SQRT_2PI) * TWO_M64
}

/// `0.5 x (1 + erf(x / sqrt 2))`, with the negative tail computed as
/// `0.5 x erfc(|x| / sqrt 2)` (no cancellation); `gelu_erf(-inf)` is NaN.
pub fn gelu_erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < -36.0 {
        return gelu_erf_far_tail(x);
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

/// `sqrt(2 / pi)` rounded to f64 (the f32 kernels' truncated 0.7978845608 is ~4e-12 off:
/// invisible in f32, ~1e-8 relative in f64 where `exp` amplifies it).
const GELU_K: f64 = 0.797_884_560_802_865_4;
/// The rounding error of [`GELU_K`] (`sqrt(2 / pi) - GELU_K`).
const GELU_K_LO: f64 = -4.984_654_404_555_46e-17;
/// The cubic coefficient of the tanh approximation of gelu, rounded to f64.
const GELU_C: f64 = 0.044_715;
/// The rounding error of [`GELU_C`] (`0.044715 - GELU_C`).
const GELU_C_LO: f64 = 2.196_021_142_708_559_5e-18;

/// `2u = 2 sqrt(2/pi) (x + 0.044715 x^3)` as an unevaluated sum `hi + lo` (double-double): the
/// exp in gelu-tanh amplifies the relative error of `u` about `2|u|` times (5 ulps from one
/// rounding near x = -2.3), so `u` is carried to about 2^-100, constants included.
#[inline(always)]
fn gelu_tanh_2u(x: f64) -> (f64, f64) {
    let x2 = x * x;
    let x3 = x2 * x;
    let c3 = GELU_C * x3;
    let s = x + c3;
    let u = GELU_K * s;
    if x.abs() >= 1e100 || x.is_nan() {
        // Far out the result is ±0, ±inf, x itself or NaN: the low part does not matter.
        return (2.0 * u, 0.0);
    }
    let x2l = x.mul_add(x, -x2);
    let x3l = x2.mul_add(x, -x3) + x2l * x;
    let c3l = GELU_C.mul_add(x3, -c3) + GELU_C * x3l + GELU_C_LO * x3;
    // Two-sum of x + c3.
    let b = s - x;
    let sl = (x - (s - b)) + (c3 - b) + c3l;
    let ul = GELU_K.mul_add(s, -u) + GELU_K * sl + GELU_K_LO * s;
    (2.0 * u, 2.0 * ul)
}

/// Tanh-approximated gelu in f64 (eager's f64 `gelu(approximate="tanh")` and the compiler's f64
/// shim): `0.5 x (1 + tanh(u)) == x sigmoid(2u) == x / (1 + exp(-2u))`, with no cancellation for
/// negative x and `2u` in double-double ([`gelu_tanh_2u`]), so results are within 4 ulp of the
/// exact function (2 or less near x = -2, where one rounding of `u` alone cost 5). Where
/// `exp(-2u)` overflows (x below about -21.1) the quotient would be -0.0 although the result is
/// still about 1e-307: it is `x exp(2u)` there, scaled by 2^64 so it rounds once.
/// `gelu_tanh(-inf)` is NaN.
pub fn gelu_tanh_f64(x: f64) -> f64 {
    let (y, yl) = gelu_tanh_2u(x);
    let e = (-y).exp();
    // exp(-y - yl) = e (1 - yl) to first order (|yl| < 2^-50 |y|).
    let d = 1.0 + e.mul_add(-yl, e);
    if d.is_finite() {
        x / d
    } else if y >= -1024.0 {
        // exp(y) is subnormal or nearly: scaled until the last multiply, to round once.
        x * exp_scaled(y, yl) * TWO_M64
    } else {
        // -0.0, or NaN for x = -inf.
        x * y.exp()
    }
}

/// Declares the `extern "C" fn(f64) -> f64` shim of every row of a function table.
macro_rules! unary_shims {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr,
       $(f32 = $kind:ident $(($approx:ident))?,)? shim = $shim:ident, cuda = $cuda:literal;)*) => {
        $(
            #[doc = concat!("JIT shim of `", $name, "`: the f64 function called per lane.")]
            pub extern "C" fn $shim(x: f64) -> f64 {
                let f: fn(f64) -> f64 = $f64;
                f(x)
            }
        )*
    };
}

/// Declares the `extern "C" fn(f64, f64) -> f64` shim of every row of a function table.
macro_rules! binary_shims {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr, shim = $shim:ident,
       cuda = $cuda:literal;)*) => {
        $(
            #[doc = concat!("JIT shim of `", $name, "`: the f64 function called per lane.")]
            pub extern "C" fn $shim(x: f64, y: f64) -> f64 {
                let f: fn(f64, f64) -> f64 = $f64;
                f(x, y)
            }
        )*
    };
}

math_fns!(unary_shims);
libm_fns!(unary_shims);
libm2_fns!(binary_shims);

/// `sin(pi x) / (pi x)`, 1 at 0 (PyTorch's normalized sinc), in f64.
///
/// ```
/// use tensorplay_math::shims::sinc_f64;
/// assert_eq!(sinc_f64(0.0), 1.0);
/// assert!(sinc_f64(1.0).abs() < 1e-16);
/// assert!(sinc_f64(f64::INFINITY).is_nan());
/// ```
pub fn sinc_f64(x: f64) -> f64 {
    if x == 0.0 {
        return 1.0;
    }
    let px = std::f64::consts::PI * x;
    px.sin() / px
}

/// Above this magnitude `x² ± 1` is `x²` in f64, and `asinh`/`acosh` are `ln 2 + ln |x|`
/// (the square itself would overflow near `f64::MAX`).
const HUGE_ARG: f64 = 268_435_456.0; // 2^28

/// Inverse hyperbolic sine in f64, finite for every finite input: `ln 2 + ln |x|` past 2^28
/// (where `x + sqrt(x² + 1)` would overflow near `f64::MAX`), `std`'s formula below.
///
/// ```
/// use tensorplay_math::shims::asinh_f64;
/// assert!((asinh_f64(f64::MAX) - 710.475_860_073_943_9).abs() < 1e-12);
/// assert_eq!(asinh_f64(-1e300), -asinh_f64(1e300));
/// assert_eq!(asinh_f64(-0.0).to_bits(), (-0.0f64).to_bits());
/// ```
pub fn asinh_f64(x: f64) -> f64 {
    let a = x.abs();
    if a > HUGE_ARG {
        (a.ln() + std::f64::consts::LN_2).copysign(x)
    } else {
        x.asinh()
    }
}

/// Inverse hyperbolic cosine in f64: `ln 2 + ln x` past 2^28 (finite up to `f64::MAX`), NaN
/// below 1.
///
/// ```
/// use tensorplay_math::shims::acosh_f64;
/// assert!((acosh_f64(f64::MAX) - 710.475_860_073_943_9).abs() < 1e-12);
/// assert_eq!(acosh_f64(1.0), 0.0);
/// assert!(acosh_f64(0.5).is_nan());
/// ```
pub fn acosh_f64(x: f64) -> f64 {
    if x > HUGE_ARG {
        x.ln() + std::f64::consts::LN_2
    } else {
        x.acosh()
    }
}

/// Inverse hyperbolic tangent in f64, accurate near ±1: computed for `|x|` as
/// `0.5 log1p(2|x| / (1 - |x|))` (`1 - |x|` is exact there) and given `x`'s sign; below 0.5 as
/// `0.5 log1p(2|x| + 2|x|² / (1 - |x|))`.
///
/// ```
/// use tensorplay_math::shims::atanh_f64;
/// let x = -1.0 + f64::EPSILON;
/// assert!((atanh_f64(x) + 18.368_400_284_838_55).abs() < 1e-13);
/// assert_eq!(atanh_f64(-1.0), f64::NEG_INFINITY);
/// assert_eq!(atanh_f64(-0.0).to_bits(), (-0.0f64).to_bits());
/// assert!(atanh_f64(1.5).is_nan());
/// ```
pub fn atanh_f64(x: f64) -> f64 {
    let a = x.abs();
    let t = if a < 0.5 {
        let twice = a + a;
        0.5 * (twice + twice * a / (1.0 - a)).ln_1p()
    } else {
        0.5 * ((a + a) / (1.0 - a)).ln_1p()
    };
    t.copysign(x)
}

/// JIT shim `tp_math_pow_f64`: `x.powf(y)` (C99 `pow` semantics).
pub extern "C" fn tp_math_pow_f64(x: f64, y: f64) -> f64 {
    x.powf(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `|got - want|` in units of the last place of `want` (subnormal spacing down there).
    fn ulps(got: f64, want: f64) -> f64 {
        let a = want.abs();
        (got - want).abs() / (f64::from_bits(a.to_bits() + 1) - a)
    }

    // References: the exact functions evaluated to 60 digits and rounded once.

    #[test]
    fn erf_is_within_3_ulps_on_both_sides_of_the_split() {
        let table = [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (1.4, 0.952_285_119_762_648_8),
            (1.6, 0.976_348_383_344_644),
            (2.1, 0.997_020_533_343_667),
            (3.0, 0.999_977_909_503_001_4),
        ];
        for (x, want) in table {
            assert!(ulps(erf_f64(x), want) <= 3.0, "erf({x}) = {}", erf_f64(x));
            assert!(ulps(erf_f64(-x), -want) <= 3.0, "erf(-{x})");
        }
        assert_eq!(erf_f64(1e-300), 1e-300 * FRAC_2_SQRT_PI);
        assert!(erf_f64(f64::NAN).is_nan());
    }

    #[test]
    fn tails_round_once_into_the_subnormal_range() {
        assert!(ulps(gelu_erf_f64(-34.7), -1.366_874_908_961_576e-262) <= 2.0);
        assert!(ulps(gelu_erf_f64(-37.75), -1.419_762_775_486_36e-310) <= 1.0);
        assert!(ulps(gelu_erf_f64(-38.25), -7.9548e-319) <= 1.0);
        assert!(ulps(silu_f64(-720.0), -1.463_206_177_745_47e-310) <= 1.0);
        assert!(ulps(silu_f64(-745.5), -1.275e-321) <= 1.0);
        assert!(ulps(gelu_tanh_f64(-21.5), -2.8e-322) <= 1.0);
        for f in [gelu_erf_f64, silu_f64, gelu_tanh_f64] {
            assert!(f(f64::NEG_INFINITY).is_nan());
            assert_eq!(f(-1e4).to_bits(), (-0.0f64).to_bits());
        }
    }

    #[test]
    fn gelu_erf_tail_joins_the_continued_fraction() {
        // Both forms are accurate around the switch at -36.
        for x in [-35.99, -35.999_999, -36.0, -36.01] {
            let z = -x * FRAC_1_SQRT_2;
            let h = x * x;
            let cf = x * (0.5 * erfc_cf(z, 0.5 * h, 0.5 * x.mul_add(x, -h)));
            assert!(ulps(gelu_erf_far_tail(x), cf) <= 8.0, "{x}");
        }
    }
}
