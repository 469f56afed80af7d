//! The Rust types behind each [`DType`] and the casts between them.

use std::fmt::Debug;

use half::{bf16, f16};
use tensorplay_ir::DType;

/// A Rust type that can be a tensor element.
///
/// Casts follow PyTorch: float to int truncates toward zero (NaN becomes 0, out-of-range saturates),
/// anything to bool is `!= 0` (NaN is true), bool to number is 0 or 1. Conversions into f16 and
/// bf16 from f64 or i64 go through f32 first, exactly like PyTorch's `Half(float)` and
/// `BFloat16(float)` constructors (so a value can round twice).
pub trait Element: Copy + Send + Sync + Debug + PartialEq + 'static {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// Widens to f64 (exact for every type but i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Narrows from f64 with round-to-nearest-even (or truncation for integers).
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
        f16::from_f64(v)
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
        bf16::from_f64(v)
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
/// use tensorplay_runtime::{Tensor, element::cast, with_dtype};
/// let t = Tensor::from_vec(vec![1i32, -2], &[2])?;
/// let doubled: Vec<f64> = with_dtype!(t.dtype(), T => {
///     t.to_vec::<T>()?.into_iter().map(|v| 2.0 * cast::<T, f64>(v)).collect()
/// });
/// assert_eq!(doubled, vec![2.0, -4.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
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
}
