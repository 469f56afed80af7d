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

    /// PyTorch's `result_type` over operands in its three priority tiers: dimensioned tensors,
    /// 0-d tensors, and wrapped Rust scalars ([`Tier`]). Each tier promotes within itself (a
    /// wrapped float counts as f32, a wrapped integer as i64); a lower tier then only changes
    /// the result when it is of a higher category. So `f16[n] + f32 0-d` is f16,
    /// `i32[n] + i64 0-d` is i32, but `i32[n] + f64 0-d` is f64 and `f16[n] + 2.5` is f16.
    /// When every operand is a wrapped scalar they promote like tensors of their storage dtypes
    /// (f64, i64, bool). `None` for no operands.
    ///
    /// ```
    /// use tensorplay_ir::DType;
    /// use tensorplay_ir::dtype::Tier;
    /// let r = DType::result_type([(DType::F16, Tier::Dim), (DType::F32, Tier::ZeroDim)]);
    /// assert_eq!(r, Some(DType::F16));
    /// let r = DType::result_type([(DType::I32, Tier::Dim), (DType::F64, Tier::ZeroDim)]);
    /// assert_eq!(r, Some(DType::F64));
    /// ```
    pub fn result_type(operands: impl IntoIterator<Item = (DType, Tier)>) -> Option<DType> {
        let mut tiers: [Option<DType>; 3] = [None; 3];
        let mut storage: Option<DType> = None;
        for (d, tier) in operands {
            storage = Some(storage.map_or(d, |s| DType::promote(s, d)));
            let (slot, d) = match tier {
                Tier::Dim => (0, d),
                Tier::ZeroDim => (1, d),
                Tier::Wrapped => (
                    2,
                    match d.category() {
                        Category::Floating => DType::F32,
                        Category::Integer => DType::I64,
                        Category::Bool => DType::Bool,
                    },
                ),
            };
            tiers[slot] = Some(tiers[slot].map_or(d, |s| DType::promote(s, d)));
        }
        if tiers[0].is_none() && tiers[1].is_none() {
            return storage;
        }
        combine_categories(tiers[0], combine_categories(tiers[1], tiers[2]))
    }

    /// The floating dtype an op on integer or bool input computes in (f32, PyTorch's default).
    pub fn to_float(self) -> DType {
        if self.is_float() { self } else { DType::F32 }
    }
}

/// The priority tier of an operand in type promotion (see [`DType::result_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// A tensor with at least one dimension (shape `[1]` counts).
    Dim,
    /// A 0-d tensor that is not a wrapped Rust scalar.
    ZeroDim,
    /// A Rust scalar operand (a wrapped number, or a scalar constant in a graph).
    Wrapped,
}

/// Merges the result of a higher tier with that of a lower one: the lower tier only counts when
/// it is of a higher category (PyTorch's `combine_categories`).
fn combine_categories(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => Some(if h.is_float() {
            h
        } else if h == DType::Bool || l.is_float() {
            DType::promote(h, l)
        } else {
            h
        }),
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
    fn zero_dim_operands_do_not_widen_within_a_category() {
        use DType::*;
        use Tier::*;
        let rt = |ops: &[(DType, Tier)]| DType::result_type(ops.iter().copied()).unwrap();
        assert_eq!(rt(&[(F16, Dim), (F32, ZeroDim)]), F16);
        assert_eq!(rt(&[(I32, Dim), (I64, ZeroDim)]), I32);
        assert_eq!(rt(&[(BF16, Dim), (F16, ZeroDim)]), BF16);
        assert_eq!(rt(&[(I32, Dim), (F64, ZeroDim)]), F64);
        assert_eq!(rt(&[(Bool, Dim), (I32, ZeroDim)]), I32);
        assert_eq!(rt(&[(I64, Dim), (F16, ZeroDim), (F64, Wrapped)]), F16);
        assert_eq!(rt(&[(I32, Dim), (I64, ZeroDim), (F64, Wrapped)]), F32);
        assert_eq!(rt(&[(F32, ZeroDim), (F64, ZeroDim)]), F64);
        assert_eq!(rt(&[(F16, ZeroDim), (F64, Wrapped)]), F16);
        assert_eq!(rt(&[(I32, ZeroDim), (F64, Wrapped)]), F32);
        assert_eq!(rt(&[(F16, Dim), (F32, Dim)]), F32);
        assert_eq!(rt(&[(F64, Wrapped), (I64, Wrapped)]), F64);
        assert_eq!(DType::result_type([]), None);
    }

    #[test]
    fn parse_rejects_unknown_names() {
        assert!("float8".parse::<DType>().is_err());
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
    }
}
