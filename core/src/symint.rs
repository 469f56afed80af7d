//! `SymInt`: a size as code sees it. Outside capture it is a plain integer (`SymInt::Lit`, no
//! overhead beyond the enum tag). During capture, sizes of the proxies (`Tensor::sym_size`,
//! `sym_shape`) are expressions over the graph's input dims (`s0 - 1`) carrying their example
//! value (the *hint*).
//!
//! Arithmetic builds expressions; passing a `SymInt` to a size-taking op (`narrow`, `view`,
//! `expand`, `select`, ...) records the expression in the graph, evaluated for each call's input
//! dims. Anything that turns a symbolic size into a plain fact — `to_i64()`/`to_usize()`, a
//! comparison returning `bool` — installs a guard (a [`SymGuard`] on the graph: the compiled
//! graph is used only while the fact still holds, otherwise the closure is captured again), unless
//! the fact holds for every size (`n - 1 + 1 == n`, `n + 1 > n`).
//!
//! ```
//! use tensorplay_core::{symint::SymInt, Tensor, DType};
//! let x = Tensor::zeros(&[8], DType::F32);
//! let n = x.sym_size(0)?; // a plain 8 outside capture
//! let y = x.narrow(0, 1, n - 1)?;
//! assert_eq!(y.shape(), &[7]);
//! assert!(n > 4 && (n - 1).to_usize()? == 7);
//! # Ok::<(), tensorplay_core::Error>(())
//! ```

use std::cmp::Ordering;
use std::fmt;

use tensorplay_ir::graph::{SymCmp, SymGuard};
use tensorplay_ir::symint::{floor_div_i as floor_div, mod_i as floor_mod};
use tensorplay_ir::{Error, Result, SymExpr};

use crate::tensor::Tensor;

/// A size: a literal, or (during capture) an expression over the input dims with its example
/// value.
#[derive(Clone, Copy)]
pub enum SymInt {
    Lit(i64),
    Sym { expr: SymExpr, hint: i64 },
}

impl SymInt {
    /// A symbolic size (what a tracer hands out for a proxy's dim).
    pub fn symbolic(expr: SymExpr, hint: i64) -> SymInt {
        match expr.as_lit() {
            Some(n) => SymInt::Lit(n),
            None => SymInt::Sym { expr, hint },
        }
    }

    /// The expression (a literal's is the literal).
    pub fn expr(self) -> SymExpr {
        match self {
            SymInt::Lit(n) => SymExpr::lit(n),
            SymInt::Sym { expr, .. } => expr,
        }
    }

    /// The example value. Reading it does NOT guard: use it for messages only, never to decide
    /// anything (that is what [`SymInt::to_i64`] and the comparisons are for).
    pub fn hint(self) -> i64 {
        match self {
            SymInt::Lit(n) | SymInt::Sym { hint: n, .. } => n,
        }
    }

    /// The value when it is a literal (no guard).
    pub fn as_literal(self) -> Option<i64> {
        match self {
            SymInt::Lit(n) => Some(n),
            SymInt::Sym { .. } => None,
        }
    }

    /// True for a symbolic size.
    pub fn is_symbolic(self) -> bool {
        matches!(self, SymInt::Sym { .. })
    }

    /// The value as a plain integer; a symbolic size is guarded to keep it.
    pub fn to_i64(self) -> i64 {
        match self {
            SymInt::Lit(n) => n,
            SymInt::Sym { expr, hint } => {
                crate::tensor::note_sym_guard(SymGuard {
                    expr,
                    cmp: SymCmp::Eq,
                    rhs: hint,
                });
                hint
            }
        }
    }

    /// The value as a `usize` (guarded like [`SymInt::to_i64`]); negative values are an error.
    pub fn to_usize(self) -> Result<usize> {
        let v = self.to_i64();
        usize::try_from(v).map_err(|_| {
            Error::argument(
                "SymInt::to_usize",
                "self",
                "a non-negative size",
                v.to_string(),
            )
        })
    }

    fn binary(
        self,
        rhs: SymInt,
        lit: impl Fn(i64, i64) -> Option<i64>,
        sym: impl Fn(SymExpr, SymExpr) -> SymExpr,
    ) -> Option<SymInt> {
        match (self, rhs) {
            (SymInt::Lit(a), SymInt::Lit(b)) => lit(a, b).map(SymInt::Lit),
            _ => {
                let hint = lit(self.hint(), rhs.hint())?;
                Some(SymInt::symbolic(sym(self.expr(), rhs.expr()), hint))
            }
        }
    }

    /// Floor division (`None` for a zero divisor or an overflow).
    pub fn checked_div(self, rhs: impl Into<SymInt>) -> Option<SymInt> {
        self.binary(rhs.into(), floor_div, SymExpr::floor_div)
    }

    /// Remainder with the divisor's sign (`None` for a zero divisor).
    pub fn checked_rem(self, rhs: impl Into<SymInt>) -> Option<SymInt> {
        self.binary(rhs.into(), floor_mod, SymExpr::modulo)
    }

    /// Exact division, as a reshape's inferred dim uses it: guards that `rhs` divides `self`
    /// and fails when it does not (or is zero).
    pub fn exact_div(self, rhs: impl Into<SymInt>) -> Result<SymInt> {
        let rhs = rhs.into();
        let bad = || {
            Error::argument(
                "SymInt::exact_div",
                "rhs",
                format!("a divisor of {}", self.hint()),
                rhs.hint().to_string(),
            )
        };
        let r = self.checked_rem(rhs).ok_or_else(bad)?;
        if r.ne(&SymInt::Lit(0)) {
            return Err(bad());
        }
        self.checked_div(rhs).ok_or_else(bad)
    }

    /// The smaller of two sizes (symbolic: a `min` expression unless decidable for all sizes).
    pub fn min(self, rhs: impl Into<SymInt>) -> SymInt {
        let rhs = rhs.into();
        self.binary(rhs, |a, b| Some(a.min(b)), SymExpr::min)
            .unwrap_or(rhs)
    }

    /// The larger of two sizes.
    pub fn max(self, rhs: impl Into<SymInt>) -> SymInt {
        let rhs = rhs.into();
        self.binary(rhs, |a, b| Some(a.max(b)), SymExpr::max)
            .unwrap_or(rhs)
    }

    /// `self <cmp> rhs` as a bool: decided statically when it holds for every size, otherwise
    /// by the example values, with a guard that keeps the answer.
    pub fn compare(self, cmp: SymCmp, rhs: impl Into<SymInt>) -> bool {
        let rhs = rhs.into();
        if let (SymInt::Lit(a), SymInt::Lit(b)) = (self, rhs) {
            return cmp.test(a, b);
        }
        let diff = self.expr().minus(rhs.expr());
        // Decided statically when it holds (or fails) for every size.
        if let Some(k) = cmp.decide_statically(diff) {
            return k;
        }
        let d = self.hint().saturating_sub(rhs.hint());
        let holds = cmp.test(d, 0);
        crate::tensor::note_sym_guard(SymGuard {
            expr: diff,
            cmp: if holds { cmp } else { cmp.negate() },
            rhs: 0,
        });
        holds
    }
}

impl fmt::Display for SymInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymInt::Lit(n) => write!(f, "{n}"),
            SymInt::Sym { expr, .. } => write!(f, "{expr}"),
        }
    }
}

impl fmt::Debug for SymInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymInt::Lit(n) => write!(f, "{n}"),
            SymInt::Sym { expr, hint } => write!(f, "{expr} (={hint})"),
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for SymInt {
            fn from(v: $t) -> Self {
                SymInt::Lit(v as i64)
            }
        }
        impl PartialEq<$t> for SymInt {
            fn eq(&self, other: &$t) -> bool {
                self.compare(SymCmp::Eq, SymInt::from(*other))
            }
        }
        impl PartialOrd<$t> for SymInt {
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                self.partial_cmp(&SymInt::from(*other))
            }
            fn lt(&self, other: &$t) -> bool {
                self.compare(SymCmp::Lt, SymInt::from(*other))
            }
            fn le(&self, other: &$t) -> bool {
                self.compare(SymCmp::Le, SymInt::from(*other))
            }
            fn gt(&self, other: &$t) -> bool {
                self.compare(SymCmp::Gt, SymInt::from(*other))
            }
            fn ge(&self, other: &$t) -> bool {
                self.compare(SymCmp::Ge, SymInt::from(*other))
            }
        }
        impl std::ops::Add<SymInt> for $t {
            type Output = SymInt;
            fn add(self, rhs: SymInt) -> SymInt {
                SymInt::from(self) + rhs
            }
        }
        impl std::ops::Sub<SymInt> for $t {
            type Output = SymInt;
            fn sub(self, rhs: SymInt) -> SymInt {
                SymInt::from(self) - rhs
            }
        }
        impl std::ops::Mul<SymInt> for $t {
            type Output = SymInt;
            fn mul(self, rhs: SymInt) -> SymInt {
                SymInt::from(self) * rhs
            }
        }
    )*};
}
from_int!(i64, i32, u32);

impl From<usize> for SymInt {
    /// Saturates past `i64::MAX` (no tensor has such a size; the op rejects it).
    fn from(v: usize) -> Self {
        SymInt::Lit(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl PartialEq<usize> for SymInt {
    fn eq(&self, other: &usize) -> bool {
        self.compare(SymCmp::Eq, SymInt::from(*other))
    }
}
impl PartialOrd<usize> for SymInt {
    fn partial_cmp(&self, other: &usize) -> Option<Ordering> {
        self.partial_cmp(&SymInt::from(*other))
    }
}
impl std::ops::Add<SymInt> for usize {
    type Output = SymInt;
    fn add(self, rhs: SymInt) -> SymInt {
        SymInt::from(self) + rhs
    }
}
impl std::ops::Sub<SymInt> for usize {
    type Output = SymInt;
    fn sub(self, rhs: SymInt) -> SymInt {
        SymInt::from(self) - rhs
    }
}
impl std::ops::Mul<SymInt> for usize {
    type Output = SymInt;
    fn mul(self, rhs: SymInt) -> SymInt {
        SymInt::from(self) * rhs
    }
}

/// Guarded like the other comparisons: `a == b` of symbolic sizes is a fact about the inputs.
impl PartialEq for SymInt {
    fn eq(&self, other: &SymInt) -> bool {
        self.compare(SymCmp::Eq, *other)
    }
}

impl PartialOrd for SymInt {
    /// A three-way comparison guards equality first, then order (so a symbolic compare may
    /// install two guards).
    fn partial_cmp(&self, other: &SymInt) -> Option<Ordering> {
        Some(if self.compare(SymCmp::Eq, *other) {
            Ordering::Equal
        } else if self.compare(SymCmp::Lt, *other) {
            Ordering::Less
        } else {
            Ordering::Greater
        })
    }
    fn lt(&self, other: &SymInt) -> bool {
        self.compare(SymCmp::Lt, *other)
    }
    fn le(&self, other: &SymInt) -> bool {
        self.compare(SymCmp::Le, *other)
    }
    fn gt(&self, other: &SymInt) -> bool {
        self.compare(SymCmp::Gt, *other)
    }
    fn ge(&self, other: &SymInt) -> bool {
        self.compare(SymCmp::Ge, *other)
    }
}

macro_rules! arith {
    ($($tr:ident $m:ident $lit:expr, $sym:expr);*) => {$(
        impl<T: Into<SymInt>> std::ops::$tr<T> for SymInt {
            type Output = SymInt;
            fn $m(self, rhs: T) -> SymInt {
                let rhs = rhs.into();
                // Saturating: a size past i64 cannot exist, and this must not panic.
                self.binary(rhs, |a, b| Some($lit(a, b)), $sym)
                    .unwrap_or(SymInt::Lit(i64::MAX))
            }
        }
    )*};
}
arith!(
    Add add i64::saturating_add, SymExpr::plus;
    Sub sub i64::saturating_sub, SymExpr::minus;
    Mul mul i64::saturating_mul, SymExpr::times
);

impl<T: Into<SymInt>> std::ops::Div<T> for SymInt {
    type Output = SymInt;
    /// Floor division. Panics on a zero divisor, like integer division (use
    /// [`SymInt::checked_div`] to handle it).
    fn div(self, rhs: T) -> SymInt {
        #[allow(clippy::expect_used)]
        self.checked_div(rhs)
            .expect("SymInt division by zero (use checked_div)")
    }
}

impl<T: Into<SymInt>> std::ops::Rem<T> for SymInt {
    type Output = SymInt;
    /// Remainder with the divisor's sign. Panics on a zero divisor, like integer `%`.
    fn rem(self, rhs: T) -> SymInt {
        #[allow(clippy::expect_used)]
        self.checked_rem(rhs)
            .expect("SymInt remainder by zero (use checked_rem)")
    }
}

impl std::ops::Neg for SymInt {
    type Output = SymInt;
    fn neg(self) -> SymInt {
        SymInt::Lit(0) - self
    }
}

/// Arguments of list-taking ops: hints precomputed so kernels can borrow them as `&[i64]`.
#[derive(Clone)]
pub struct SymIntList {
    items: Vec<SymInt>,
    hints: Vec<i64>,
}

impl SymIntList {
    /// A list of sizes.
    pub fn new(items: Vec<SymInt>) -> SymIntList {
        let hints = items.iter().map(|s| s.hint()).collect();
        SymIntList { items, hints }
    }

    /// The entries.
    pub fn items(&self) -> &[SymInt] {
        &self.items
    }

    /// The entries as plain integers, guarding the symbolic ones.
    pub fn to_ints(&self) -> &[i64] {
        for s in &self.items {
            s.to_i64();
        }
        &self.hints
    }
}

impl fmt::Debug for SymIntList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.items)
    }
}

/// A tensor's sizes as [`SymInt`]s: plain integers outside capture, expressions over the input
/// dims where the tracer knows them.
impl Tensor {
    /// Size of dimension `dim` as a [`SymInt`](SymInt): a plain integer outside
    /// capture; during capture an expression over the input dims when the tracer knows one
    /// (it is not guarded until code turns it into a plain fact), else the guarded size.
    pub fn sym_size(&self, dim: i64) -> Result<SymInt> {
        if self.rank() == 0 {
            return self.size(dim).map(SymInt::from);
        }
        let d = tensorplay_ir::shape::normalize_dim("sym_size", dim, self.rank())?;
        if self.is_fake()
            && let Some(e) = crate::tensor::traced_sym_size(self, d)
        {
            return Ok(SymInt::symbolic(e, self.shape_untracked()[d] as i64));
        }
        self.size(d as i64).map(SymInt::from)
    }

    /// Every dim as a [`SymInt`](SymInt) (see [`Tensor::sym_size`]).
    pub fn sym_shape(&self) -> Vec<SymInt> {
        if self.is_fake() {
            (0..self.rank())
                .map(|d| {
                    let hint = self.shape_untracked()[d];
                    match crate::tensor::traced_sym_size(self, d) {
                        Some(e) => SymInt::symbolic(e, hint as i64),
                        None => {
                            // A plain read: guarded like `size(d)`.
                            let _ = self.size(d as i64);
                            SymInt::from(hint)
                        }
                    }
                })
                .collect()
        } else {
            self.shape_untracked()
                .iter()
                .map(|&s| SymInt::from(s))
                .collect()
        }
    }

    /// The element count as a [`SymInt`](SymInt) (the product of [`Tensor::sym_shape`]).
    pub fn sym_numel(&self) -> SymInt {
        self.sym_shape()
            .into_iter()
            .fold(SymInt::Lit(1), |a, b| a * b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(hint: i64) -> SymInt {
        SymInt::symbolic(SymExpr::sym(0), hint)
    }

    #[test]
    fn literals_stay_plain_integers() {
        let a = SymInt::from(7usize);
        assert_eq!(a + 1, SymInt::Lit(8));
        assert_eq!((a / 2).as_literal(), Some(3));
        assert_eq!((SymInt::Lit(-7) / 2).as_literal(), Some(-4));
        assert_eq!((SymInt::Lit(-7) % 2).as_literal(), Some(1));
        assert!(SymInt::Lit(3).checked_div(0).is_none());
        assert!(a > 3 && a <= 7usize && a == 7);
        assert_eq!(SymInt::Lit(12).exact_div(4).unwrap(), SymInt::Lit(3));
        assert!(SymInt::Lit(12).exact_div(5).is_err());
    }

    #[test]
    fn symbolic_arithmetic_simplifies_and_tracks_hints() {
        let m = n(8) - 1 + 1;
        assert_eq!(m.to_string(), "s0");
        assert_eq!((n(8) - 1).hint(), 7);
        assert_eq!((n(8) * 2 / 2).to_string(), "s0");
        assert_eq!((n(8) - n(8)).as_literal(), Some(0));
        assert_eq!(n(8).min(n(8) + 3).to_string(), "s0");
        // Facts true for every size need no example value.
        assert!(n(8) + 1 > n(8));
        assert!(n(8) != 1);
        assert!((n(8) - 1).compare(SymCmp::Ge, 1));
        // Example-dependent answers (guarded under capture).
        assert!(n(8) > 4);
        assert!(n(3) <= 4);
        assert_eq!(n(8).to_i64(), 8);
        assert!((n(8) - 10).to_usize().is_err());
    }
}
