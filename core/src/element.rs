//! The Rust types behind each [`DType`] and the casts between them.

use std::fmt::Debug;

use half::{bf16, f16};
use tensorplay_ir::DType;

/// A Rust type that can be a tensor element.
///
/// Casts follow PyTorch: float to int truncates toward zero (NaN becomes 0, out-of-range saturates),
/// anything to bool is `!= 0` (NaN is true), bool to number is 0 or 1. [`cast`] into f16 and
/// bf16 from f64 or i64 goes through f32 first, exactly like PyTorch's `Half(float)` and
/// `BFloat16(float)` constructors (so a value can round twice); [`Element::from_f64`] itself
/// rounds once.
pub trait Element: Copy + Send + Sync + Debug + PartialEq + 'static {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// Widens to f64 (exact for every type but i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Narrows from f64 with a single round-to-nearest-even (or truncation for integers), so
    /// an f64 holding an f32 value converts exactly like that f32.
    fn from_f64(v: f64) -> Self;
    /// Exact integer value (floats truncate toward zero).
    fn to_i64(self) -> i64;
    /// From an integer, rounding to nearest for floats.
    fn from_i64(v: i64) -> Self;
    /// `!= 0`.
    fn to_bool(self) -> bool;
    /// 0 or 1.
    fn from_bool(v: bool) -> Self {
        Self::from_i64(v as i64)
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as f32
    }
    fn to_bool(self) -> bool {
        self != 0.0
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as f64
    }
    fn to_bool(self) -> bool {
        self != 0.0
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        // Not `f16::from_f64`: depending on the CPU it rounds through f32 or drops the low 32
        // bits of the f64 before rounding (losing sticky bits of f32 values).
        f16::from_f32(f64_to_f32_round_to_odd(v))
    }
    fn to_i64(self) -> i64 {
        f16::to_f32(self) as i64
    }
    fn from_i64(v: i64) -> Self {
        f16::from_f32(v as f32)
    }
    fn to_bool(self) -> bool {
        f16::to_f32(self) != 0.0
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        // Not `bf16::from_f64`: it drops the low 32 bits of the f64 before rounding, so an f32
        // just above a tie (bits `0x40308001`, 2.7578127) rounds down.
        bf16::from_f32(f64_to_f32_round_to_odd(v))
    }
    fn to_i64(self) -> i64 {
        bf16::to_f32(self) as i64
    }
    fn from_i64(v: i64) -> Self {
        bf16::from_f32(v as f32)
    }
    fn to_bool(self) -> bool {
        bf16::to_f32(self) != 0.0
    }
}

/// `v` rounded to f32 toward zero, with the last bit set when that lost anything ("round to
/// odd"). f32 keeps at least 2 more bits than f16 and bf16 at every magnitude (and the same
/// exponent range as bf16), so rounding this result to nearest even once more gives exactly the
/// single rounding of `v`: the set bit stands in for everything below it and never forms a tie.
fn f64_to_f32_round_to_odd(v: f64) -> f32 {
    let r = v as f32;
    if r.is_nan() || r as f64 == v {
        return r;
    }
    // Inexact (`v` is finite): step `r` back toward zero if it rounded away, then mark the loss.
    // Bits are sign-magnitude, so `- 1` shrinks the magnitude; `r` is not zero there.
    let mut bits = r.to_bits();
    if (r as f64).abs() > v.abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

impl Element for i32 {
    const DTYPE: DType = DType::I32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as i32
    }
    fn to_bool(self) -> bool {
        self != 0
    }
}

impl Element for i64 {
    const DTYPE: DType = DType::I64;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i64
    }
    fn to_i64(self) -> i64 {
        self
    }
    fn from_i64(v: i64) -> Self {
        v
    }
    fn to_bool(self) -> bool {
        self != 0
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn to_bool(self) -> bool {
        self
    }
}

/// Converts one element between any two element types with PyTorch's cast semantics.
#[inline]
pub fn cast<S: Element, D: Element>(s: S) -> D {
    if D::DTYPE == DType::Bool {
        D::from_bool(s.to_bool())
    } else if D::DTYPE.is_float() {
        if S::DTYPE.is_int() && D::DTYPE != DType::F64 {
            // Round once to f32 (not i64 -> f64 -> f32); f16/bf16 then round from that f32,
            // as PyTorch's integer -> half conversions do.
            D::from_f64(s.to_i64() as f32 as f64)
        } else if S::DTYPE == DType::F64 && D::DTYPE.is_half() {
            // PyTorch converts double to half types through float.
            D::from_f64(s.to_f64() as f32 as f64)
        } else {
            D::from_f64(s.to_f64())
        }
    } else if S::DTYPE.is_float() {
        D::from_f64(s.to_f64().trunc())
    } else {
        D::from_i64(s.to_i64())
    }
}

/// The `half` crate, so that [`with_dtype!`](crate::with_dtype) works in crates that do not
/// depend on it themselves.
#[doc(hidden)]
pub use half as half_crate;

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`.
///
/// ```
/// use tensorplay_core::{Tensor, element::cast, with_dtype};
/// let t = Tensor::from_vec(vec![1i32, -2], &[2])?;
/// let doubled: Vec<f64> = with_dtype!(t.dtype(), T => {
///     t.to_vec::<T>()?.into_iter().map(|v| 2.0 * cast::<T, f64>(v)).collect()
/// });
/// assert_eq!(doubled, vec![2.0, -4.0]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::element::half_crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::element::half_crate::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_follow_pytorch() {
        assert_eq!(cast::<f32, i32>(-2.7), -2);
        assert_eq!(cast::<f32, i64>(f32::NAN), 0);
        assert!(cast::<f32, bool>(f32::NAN));
        assert!(!cast::<f32, bool>(-0.0));
        assert_eq!(cast::<bool, f32>(true), 1.0);
        assert_eq!(cast::<i64, f32>(16_777_217), 16_777_216.0);
        assert_eq!(cast::<f64, f16>(65520.0), f16::INFINITY);
        assert_eq!(cast::<i32, bf16>(3), bf16::from_f32(3.0));
        assert_eq!(cast::<i64, i32>(1 << 33), 0);
    }

    #[test]
    fn f64_to_half_rounds_through_f32_like_pytorch() {
        // 1 + 2^-8 + 2^-30 rounds to the bf16 tie 1 + 2^-8 in f32, then to even (1.0).
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(cast::<f64, bf16>(x), bf16::ONE);
        let y = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(cast::<f64, f16>(y), f16::ONE);
        // Above the tie in f32 already: rounds up.
        let z = 1.0 + 2f64.powi(-8) + 2f64.powi(-20);
        assert_eq!(cast::<f64, bf16>(z), bf16::from_f32(1.0078125));
        assert_eq!(cast::<i64, bf16>(257), bf16::from_f32(256.0));
        // 2^24 + 2^16 + 1 rounds to the tie 2^24 + 2^16 in f32, then to even in bf16.
        assert_eq!(cast::<i32, bf16>(16_842_753), bf16::from_f32(16_777_216.0));
    }

    /// The nearest value to `x` among the non-negative bit patterns `0..inf` of a 16-bit float
    /// (ties to the even pattern), found by bisection over the patterns and comparison with the
    /// exact midpoint: an implementation independent of the one under test. `top_ulp` is the
    /// spacing just below infinity, `value` widens a pattern to f64.
    fn nearest(x: f64, inf: u16, top_ulp: f64, value: fn(u16) -> f64) -> u16 {
        if x.is_nan() {
            return u16::MAX;
        }
        let (sign, a) = (if x.is_sign_negative() { 0x8000 } else { 0 }, x.abs());
        if a == f64::INFINITY {
            return sign | inf;
        }
        // Largest pattern `lo` below infinity with value(lo) <= a.
        let (mut lo, mut hi) = (0u16, inf);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if value(mid) <= a { lo = mid } else { hi = mid }
        }
        let ulp = if lo + 1 == inf {
            top_ulp
        } else {
            value(lo + 1) - value(lo)
        };
        let half_way = value(lo) + ulp / 2.0;
        let up = a > half_way || (a == half_way && lo & 1 == 1);
        sign | (lo + up as u16)
    }

    fn bf16_ref(x: f64) -> u16 {
        nearest(x, 0x7f80, 2f64.powi(120), |b| bf16::from_bits(b).to_f64())
    }

    fn f16_ref(x: f64) -> u16 {
        nearest(x, 0x7c00, 32.0, |b| f16::from_bits(b).to_f64())
    }

    fn bf16_bits(v: f64) -> u16 {
        <bf16 as Element>::from_f64(v).to_bits()
    }

    fn f16_bits(v: f64) -> u16 {
        <f16 as Element>::from_f64(v).to_bits()
    }

    #[test]
    fn f32_to_bf16_rounds_once() {
        // Just above a tie: the dropped low bit of the f32 decides (2.7578127 -> 2.765625).
        let x = f32::from_bits(0x4030_8001);
        assert_eq!(x, 2.757_812_7);
        assert_eq!(cast::<f32, bf16>(x).to_f32(), 2.765_625);
        assert_eq!(cast::<f32, bf16>(-x).to_f32(), -2.765_625);
        // Exact ties go to even; just below a tie rounds down.
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x3f80_8000)).to_bits(),
            0x3f80
        );
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x3f81_8000)).to_bits(),
            0x3f82
        );
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x3f80_7fff)).to_bits(),
            0x3f80
        );
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x3f80_8001)).to_bits(),
            0x3f81
        );
        // NaN stays NaN with its sign; infinities stay.
        assert!(cast::<f32, bf16>(f32::NAN).is_nan());
        assert!(cast::<f32, bf16>(-f32::NAN).is_sign_negative());
        assert!(cast::<f64, bf16>(f64::NAN).is_nan());
        assert_eq!(cast::<f32, bf16>(f32::INFINITY), bf16::INFINITY);
        assert_eq!(cast::<f32, bf16>(f32::NEG_INFINITY), bf16::NEG_INFINITY);
        // Overflow: at and above half an ulp past bf16::MAX becomes infinite, below stays MAX.
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x7f7f_8000)),
            bf16::INFINITY
        );
        assert_eq!(cast::<f32, bf16>(f32::from_bits(0x7f7f_7fff)), bf16::MAX);
        assert_eq!(cast::<f32, bf16>(f32::MAX), bf16::INFINITY);
        assert_eq!(cast::<f32, bf16>(-3.0e38), bf16::from_f32(-2.997_635_7e38));
        // Subnormals: f32 subnormals round to bf16 subnormals (ties to even, sign kept).
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x0000_8000)).to_bits(),
            0x0000
        );
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x0000_8001)).to_bits(),
            0x0001
        );
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x8001_8000)).to_bits(),
            0x8002
        );
        assert_eq!(cast::<f32, bf16>(-f32::from_bits(1)).to_bits(), 0x8000);
        assert_eq!(
            cast::<f32, bf16>(f32::from_bits(0x007f_ffff)).to_bits(),
            0x0080
        );
    }

    #[test]
    fn f32_to_f16_rounds_once() {
        // Just above, at and below the tie between 1 and 1 + 2^-10.
        let tie = 1.0 + 2f32.powi(-11);
        assert_eq!(cast::<f32, f16>(tie), f16::ONE);
        assert_eq!(
            cast::<f32, f16>(f32::from_bits(tie.to_bits() + 1)).to_bits(),
            0x3c01
        );
        assert_eq!(
            cast::<f32, f16>(f32::from_bits(tie.to_bits() - 1)),
            f16::ONE
        );
        assert_eq!(
            cast::<f32, f16>(1.0 + 3.0 * 2f32.powi(-11)).to_bits(),
            0x3c02
        );
        assert!(cast::<f32, f16>(f32::NAN).is_nan());
        assert_eq!(cast::<f32, f16>(f32::NEG_INFINITY), f16::NEG_INFINITY);
        assert_eq!(cast::<f32, f16>(65_519.996), f16::MAX);
        assert_eq!(cast::<f32, f16>(65_520.0), f16::INFINITY);
        assert_eq!(cast::<f32, f16>(-1e30), f16::NEG_INFINITY);
        // Subnormals: 2^-25 is the tie between 0 and the smallest subnormal.
        assert_eq!(cast::<f32, f16>(2f32.powi(-25)).to_bits(), 0x0000);
        assert_eq!(cast::<f32, f16>(-2f32.powi(-25)).to_bits(), 0x8000);
        assert_eq!(
            cast::<f32, f16>(f32::from_bits(2f32.powi(-25).to_bits() + 1)).to_bits(),
            1
        );
        assert_eq!(cast::<f32, f16>(3.0 * 2f32.powi(-25)).to_bits(), 0x0002);
    }

    #[test]
    fn f64_from_f64_rounds_once() {
        // `from_f64` itself rounds once; `cast` from f64 rounds through f32 (see above).
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(bf16_bits(x), 0x3f81);
        assert_eq!(bf16_bits(-x), 0xbf81);
        let y = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f16_bits(y), 0x3c01);
        // Beyond f32's range: still infinite, or the largest finite value, as it should be.
        assert_eq!(bf16_bits(1e300), 0x7f80);
        assert_eq!(f16_bits(-1e300), 0xfc00);
        assert_eq!(
            bf16_bits(bf16::MAX.to_f64() + 2f64.powi(119) - 2f64.powi(80)),
            0x7f7f
        );
        assert_eq!(bf16_bits(bf16::MAX.to_f64() + 2f64.powi(119)), 0x7f80);
        // f64 subnormals are far below both types: signed zero.
        assert_eq!(bf16_bits(5e-324), 0x0000);
        assert_eq!(f16_bits(-5e-324), 0x8000);
        // Just above half the smallest bf16 subnormal (below f32's subnormals): rounds up.
        assert_eq!(bf16_bits(2f64.powi(-134) * (1.0 + 2f64.powi(-40))), 0x0001);
        assert_eq!(bf16_bits(2f64.powi(-134)), 0x0000);
        assert_eq!(bf16_bits(f64::NEG_INFINITY), 0xff80);
        assert!(<bf16 as Element>::from_f64(f64::NAN).is_nan());
        assert!(<f16 as Element>::from_f64(-f64::NAN).is_nan());
    }

    /// Every 97th f32 bit pattern (all exponents, both signs): `from_f64` of an f32 value agrees
    /// with the independent nearest-value search and with `from_f32`.
    #[test]
    fn f32_values_convert_like_the_reference() {
        for bits in (0..=u32::MAX).step_by(97) {
            let x = f32::from_bits(bits);
            let v = x as f64;
            if x.is_nan() {
                assert!(<bf16 as Element>::from_f64(v).is_nan());
                assert!(<f16 as Element>::from_f64(v).is_nan());
                continue;
            }
            assert_eq!(bf16_bits(v), bf16_ref(v), "bf16 from {x:e} ({bits:#x})");
            assert_eq!(f16_bits(v), f16_ref(v), "f16 from {x:e} ({bits:#x})");
            assert_eq!(bf16_bits(v), bf16::from_f32(x).to_bits(), "{x:e}");
            assert_eq!(f16_bits(v), f16::from_f32(x).to_bits(), "{x:e}");
        }
    }

    /// f64 values with bits below f32's precision: random ones across the exponent range of the
    /// 16-bit types, and ties between neighbours nudged by less than an f32 ulp.
    #[test]
    fn f64_values_convert_like_the_reference() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..200_000 {
            let r = next();
            // Exponents 2^-150 .. 2^130 around bf16's range, with a random 52-bit mantissa.
            let exp = 1023 - 150 + (r >> 52) % 281;
            let v =
                f64::from_bits((r & 0x8000_0000_0000_0000) | (exp << 52) | (r & ((1 << 52) - 1)));
            assert_eq!(bf16_bits(v), bf16_ref(v), "bf16 from {v:e}");
            assert_eq!(f16_bits(v), f16_ref(v), "f16 from {v:e}");
        }
        for _ in 0..20_000 {
            let r = next();
            let nudge = [0.0, 2f64.powi(-40), -2f64.powi(-40), 2f64.powi(-30)][(r & 3) as usize];
            let b = (r >> 8) as u16 & 0x7f7e;
            let (lo, hi) = (bf16::from_bits(b).to_f64(), bf16::from_bits(b + 1).to_f64());
            let v = (lo + hi) / 2.0 + (hi - lo) * nudge;
            assert_eq!(bf16_bits(v), bf16_ref(v), "bf16 from {v:e}");
            let h = (r >> 24) as u16 & 0x7bfe;
            let (lo, hi) = (f16::from_bits(h).to_f64(), f16::from_bits(h + 1).to_f64());
            let v = (lo + hi) / 2.0 + (hi - lo) * nudge;
            assert_eq!(f16_bits(v), f16_ref(v), "f16 from {v:e}");
        }
    }
}
