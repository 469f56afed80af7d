//! Size guards: the assumptions a captured graph makes about sizes it read as plain integers.
//!
//! Capture runs the user's closure on example sizes. When the closure (or a tensor method it
//! calls) reads a size as a plain `usize` — to branch on it, or to compute an argument like
//! `n - 1` — that integer is baked into the graph. A [`SizeGuard`] records the read: at run time
//! the executor recomputes the value's shape for the actual inputs and the graph is used only if
//! the guard holds (otherwise the closure is captured again).

use std::fmt;

use super::ValueRef;
use crate::shape::fmt_shape;
use crate::symint::SymExpr;

/// "Value `value` had this size when capture read it." `dim: None` guards the whole shape (what
/// `shape()` and `numel()` expose), `Some(d)` one dim (`size(d)`).
///
/// ```
/// use tensorplay_ir::graph::{NodeId, SizeGuard, ValueRef};
/// let g = SizeGuard { value: ValueRef::new(NodeId::new(0), 0), dim: Some(1), expected: vec![4] };
/// assert!(g.holds(&[3, 4]) && !g.holds(&[3, 5]));
/// assert_eq!(g.to_string(), "size(n0.0, 1) == 4");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SizeGuard {
    /// The value whose size was read.
    pub value: ValueRef,
    /// The dim read, or `None` for the whole shape.
    pub dim: Option<usize>,
    /// The sizes seen at capture: the whole shape, or one entry for `dim`.
    pub expected: Vec<usize>,
}

impl SizeGuard {
    /// Whether a value of shape `shape` satisfies the guard.
    pub fn holds(&self, shape: &[usize]) -> bool {
        match self.dim {
            None => shape == self.expected.as_slice(),
            Some(d) => shape.get(d).is_some_and(|&s| self.expected == [s]),
        }
    }
}

impl fmt::Display for SizeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = format!("n{}.{}", self.value.node.index(), self.value.output);
        match self.dim {
            None => write!(f, "shape({v}) == {}", fmt_shape(&self.expected)),
            Some(d) => write!(
                f,
                "size({v}, {d}) == {}",
                self.expected.first().copied().unwrap_or(0)
            ),
        }
    }
}

/// How a [`SymGuard`] compares its expression with its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SymCmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl SymCmp {
    /// Whether `a <op> b`.
    pub fn test(self, a: i64, b: i64) -> bool {
        match self {
            SymCmp::Eq => a == b,
            SymCmp::Ne => a != b,
            SymCmp::Lt => a < b,
            SymCmp::Le => a <= b,
            SymCmp::Gt => a > b,
            SymCmp::Ge => a >= b,
        }
    }

    /// The comparison that holds exactly when this one does not.
    pub fn negate(self) -> SymCmp {
        match self {
            SymCmp::Eq => SymCmp::Ne,
            SymCmp::Ne => SymCmp::Eq,
            SymCmp::Lt => SymCmp::Ge,
            SymCmp::Le => SymCmp::Gt,
            SymCmp::Gt => SymCmp::Le,
            SymCmp::Ge => SymCmp::Lt,
        }
    }

    /// Whether `e <cmp> 0` holds for every size: `Some` for a literal, or when the lower bound
    /// of `e` decides it (symbols are sizes >= 2); `None` when it depends on the sizes.
    ///
    /// ```
    /// use tensorplay_ir::graph::SymCmp;
    /// use tensorplay_ir::SymExpr;
    /// let n = SymExpr::sym(0);
    /// assert_eq!(SymCmp::Gt.decide_statically(n - 1), Some(true)); // n >= 2
    /// assert_eq!(SymCmp::Eq.decide_statically(n - 1), Some(false));
    /// assert_eq!(SymCmp::Gt.decide_statically(n - 4), None);
    /// ```
    pub fn decide_statically(self, e: SymExpr) -> Option<bool> {
        if let Some(v) = e.as_lit() {
            return Some(self.test(v, 0));
        }
        let lb = e.lower_bound()?;
        match self {
            SymCmp::Gt if lb > 0 => Some(true),
            SymCmp::Ge if lb >= 0 => Some(true),
            SymCmp::Lt if lb >= 0 => Some(false),
            SymCmp::Le if lb > 0 => Some(false),
            SymCmp::Eq if lb > 0 => Some(false),
            SymCmp::Ne if lb > 0 => Some(true),
            _ => None,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            SymCmp::Eq => "==",
            SymCmp::Ne => "!=",
            SymCmp::Lt => "<",
            SymCmp::Le => "<=",
            SymCmp::Gt => ">",
            SymCmp::Ge => ">=",
        }
    }
}

/// "Expression `expr` over the input dims compared as `cmp` with `rhs`": what capture assumed
/// when the closure branched on a symbolic size (`n > 4`) or turned one into a plain integer
/// (`n.to_usize()`, a guard `expr == value`). The executor checks these against each call's
/// input dims before anything runs; a failed one is a miss (capture again).
///
/// ```
/// use tensorplay_ir::graph::{SymCmp, SymGuard};
/// use tensorplay_ir::SymExpr;
/// let g = SymGuard { expr: SymExpr::sym(0) - 1, cmp: SymCmp::Ge, rhs: 5 };
/// assert_eq!(g.holds(&|_| Some(8)), Some(true));
/// assert_eq!(g.holds(&|_| Some(3)), Some(false));
/// assert_eq!(g.to_string(), "s0 - 1 >= 5");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SymGuard {
    pub expr: SymExpr,
    pub cmp: SymCmp,
    pub rhs: i64,
}

impl SymGuard {
    /// `Some((a, b))` when the guard says two symbols are equal (`s_a - s_b == 0`, `a < b`).
    pub fn equated_symbols(&self) -> Option<(u32, u32)> {
        if self.cmp == SymCmp::Eq && self.rhs == 0 {
            self.expr.symbol_difference()
        } else {
            None
        }
    }

    /// Whether the guard holds under a binding of the symbols (`None` when the expression
    /// cannot be evaluated).
    pub fn holds(&self, env: &dyn Fn(u32) -> Option<i64>) -> Option<bool> {
        Some(self.cmp.test(self.expr.eval(env)?, self.rhs))
    }
}

impl fmt::Display for SymGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.expr, self.cmp.symbol(), self.rhs)
    }
}
