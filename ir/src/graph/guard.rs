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
