//! Element types and PyTorch's type-promotion lattice.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The element type of a tensor.
///
/// ```
/// use tensorplay_ir::DType;
/// assert_eq!(DType::promote(DType::I32, DType::F16), DType::F16);
/// assert_eq!(DType::promote(DType::F16, DType::BF16), DType::F32);
/// assert_eq!("float32".parse::<DType>().unwrap(), DType::F32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

/// The promotion category of a dtype: bool < integer < floating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Integer,
    Floating,
}

impl DType {
    /// Every dtype, in a stable order (handy for tests that sweep dtypes).
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The short name used in printed IR and error messages (`f32`, `bf16`, `i64`, `bool`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// bool, integer or floating.
    pub const fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::I32 | DType::I64 => Category::Integer,
            _ => Category::Floating,
        }
    }

    /// True for f16, bf16, f32 and f64.
    pub const fn is_float(self) -> bool {
        matches!(self.category(), Category::Floating)
    }

    /// True for i32 and i64 (not bool).
    pub const fn is_int(self) -> bool {
        matches!(self.category(), Category::Integer)
    }

    /// True for the 16-bit floats that compute in f32 and round at the end.
    pub const fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The dtype two tensor operands promote to, as in PyTorch: the higher category wins; within a
    /// category the wider type wins; f16 with bf16 gives f32.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a.category(), b.category()) {
            (x, y) if x > y => a,
            (x, y) if x < y => b,
            _ => match (a, b) {
                (F16, BF16) | (BF16, F16) => F32,
                _ => {
                    if a.size() >= b.size() {
                        a
                    } else {
                        b
                    }
                }
            },
        }
    }

    /// The dtype a tensor combined with a Rust scalar of `scalar` category gets: a scalar only
    /// raises the category (to f32 for floats, i64 for integers), never the width.
    pub fn promote_with_scalar(tensor: DType, scalar: Category) -> DType {
        if scalar > tensor.category() {
            match scalar {
                Category::Floating => DType::F32,
                Category::Integer => DType::I64,
                Category::Bool => DType::Bool,
            }
        } else {
            tensor
        }
    }

    /// The floating dtype an op on integer or bool input computes in (f32, PyTorch's default).
    pub fn to_float(self) -> DType {
        if self.is_float() { self } else { DType::F32 }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;

    /// Accepts our short names and PyTorch's (`float32`, `float`, `half`, `bfloat16`, `long`, ...).
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "i32" | "int32" | "int" => DType::I32,
            "i64" | "int64" | "long" => DType::I64,
            "bool" => DType::Bool,
            other => {
                return Err(Error::argument(
                    "dtype",
                    "name",
                    "one of f32, f64, f16, bf16, i32, i64, bool",
                    format!("`{other}`"),
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_follows_pytorch() {
        use DType::*;
        assert_eq!(DType::promote(I32, F32), F32);
        assert_eq!(DType::promote(I64, F16), F16);
        assert_eq!(DType::promote(Bool, I32), I32);
        assert_eq!(DType::promote(I32, I64), I64);
        assert_eq!(DType::promote(F16, F32), F32);
        assert_eq!(DType::promote(BF16, F16), F32);
        assert_eq!(DType::promote(F64, BF16), F64);
        assert_eq!(DType::promote_with_scalar(I32, Category::Floating), F32);
        assert_eq!(DType::promote_with_scalar(F16, Category::Floating), F16);
        assert_eq!(DType::promote_with_scalar(Bool, Category::Integer), I64);
        assert_eq!(DType::promote_with_scalar(I32, Category::Integer), I32);
    }

    #[test]
    fn parse_rejects_unknown_names() {
        assert!("float8".parse::<DType>().is_err());
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
    }
}
