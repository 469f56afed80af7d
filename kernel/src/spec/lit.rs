//! [`Lit`]: the scalar literals of kernel specs, compared by bit pattern, and their conversion
//! to a dtype with the runtime's cast rules.

use std::hash::{Hash, Hasher};

use tensorplay_ir::{Category, DType};

use crate::half::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};

/// A scalar literal. Equality and hashing compare floats by bit pattern (so `-0.0 != 0.0` and a
/// NaN equals itself), which is what a cache key needs.
///
/// ```
/// use tensorplay_kernel::spec::Lit;
/// assert_eq!(Lit::Float(f64::NAN), Lit::Float(f64::NAN));
/// assert_ne!(Lit::Float(0.0), Lit::Float(-0.0));
/// assert_eq!(Lit::Int(3).to_string(), "3");
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Lit {
    /// A floating value (already rounded to the constant's dtype).
    Float(f64),
    /// An integer value (already wrapped to the constant's dtype).
    Int(i64),
    /// A truth value.
    Bool(bool),
}

impl Lit {
    fn key(&self) -> (u8, u64) {
        match *self {
            Lit::Float(v) => (0, v.to_bits()),
            Lit::Int(v) => (1, v as u64),
            Lit::Bool(v) => (2, v as u64),
        }
    }

    /// The category of the literal (what a scalar constant contributes to promotion).
    pub fn category(&self) -> Category {
        match self {
            Lit::Float(_) => Category::Floating,
            Lit::Int(_) => Category::Integer,
            Lit::Bool(_) => Category::Bool,
        }
    }

    /// The value converted to `dtype` with the runtime's cast rules (float to int truncates and
    /// saturates, NaN becomes 0; anything to bool is `!= 0`; f16/bf16 round to nearest even via
    /// f32, like eager's conversion of a wrapped scalar).
    ///
    /// ```
    /// use tensorplay_kernel::spec::Lit;
    /// use tensorplay_ir::DType;
    /// assert_eq!(Lit::Float(0.1).convert(DType::F16), Lit::Float(0.0999755859375));
    /// assert_eq!(Lit::Float(-2.7).convert(DType::I32), Lit::Int(-2));
    /// assert_eq!(Lit::Int(1 << 40).convert(DType::I32), Lit::Int(0));
    /// assert_eq!(Lit::Float(f64::NAN).convert(DType::Bool), Lit::Bool(true));
    /// ```
    pub fn convert(self, dtype: DType) -> Lit {
        let as_f64 = |l: Lit| match l {
            Lit::Float(v) => v,
            Lit::Int(v) => v as f64,
            Lit::Bool(v) => v as u8 as f64,
        };
        let as_f32 = |l: Lit| match l {
            Lit::Float(v) => v as f32,
            Lit::Int(v) => v as f32,
            Lit::Bool(v) => v as u8 as f32,
        };
        let as_i64 = |l: Lit| match l {
            Lit::Float(v) => v as i64,
            Lit::Int(v) => v,
            Lit::Bool(v) => v as i64,
        };
        match dtype {
            DType::F64 => Lit::Float(as_f64(self)),
            DType::F32 => Lit::Float(as_f32(self) as f64),
            DType::F16 => Lit::Float(f16_bits_to_f32(f32_to_f16_bits(as_f32(self))) as f64),
            DType::BF16 => Lit::Float(bf16_bits_to_f32(f32_to_bf16_bits(as_f32(self))) as f64),
            DType::I64 => Lit::Int(as_i64(self)),
            DType::I32 => Lit::Int(match self {
                Lit::Float(v) => v as i32 as i64,
                other => as_i64(other) as i32 as i64,
            }),
            DType::Bool => Lit::Bool(match self {
                Lit::Float(v) => v != 0.0,
                Lit::Int(v) => v != 0,
                Lit::Bool(v) => v,
            }),
        }
    }
}

impl PartialEq for Lit {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Lit {}

impl Hash for Lit {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}
