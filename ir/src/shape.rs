//! Shapes: concrete (`Shape`, used by eager tensors) and symbolic (`Dim`, used by the IR), plus the
//! broadcasting and stride arithmetic both share.

use std::fmt;

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::symint::SymExpr;

/// A concrete shape. Six dims inline covers nearly every real tensor without a heap allocation.
pub type Shape = SmallVec<[usize; 6]>;

/// Strides in elements (not bytes). Signed so that views may one day walk backwards.
pub type Strides = SmallVec<[isize; 6]>;

/// One dimension of a symbolic shape: a known size, a named symbol (`s0`, `s1`, ...) whose value
/// is bound at run time, or an expression over symbols (`s0 - 1`, see [`SymExpr`]). Dynamic
/// capture turns every input size except 0 and 1 into a symbol; op results get the expressions
/// their sizes are of those symbols. Build dims from expressions with [`Dim::from_expr`], which
/// keeps the form canonical (a literal is `Static`, a bare symbol `Sym`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dim {
    Static(usize),
    Sym(u32),
    Expr(SymExpr),
}

impl Dim {
    /// The size if it is known.
    pub fn as_static(self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(n),
            Dim::Sym(_) | Dim::Expr(_) => None,
        }
    }

    /// The dim as an expression.
    pub fn to_expr(self) -> SymExpr {
        match self {
            Dim::Static(n) => SymExpr::lit(n as i64),
            Dim::Sym(k) => SymExpr::sym(k),
            Dim::Expr(e) => e,
        }
    }

    /// This dim with its symbols replaced (see [`SymExpr::substitute`]).
    pub fn substitute(self, f: &dyn Fn(u32) -> Option<SymExpr>) -> Dim {
        match self {
            Dim::Static(_) => self,
            Dim::Sym(_) | Dim::Expr(_) => Dim::from_expr(self.to_expr().substitute(f)),
        }
    }

    /// The canonical dim for an expression (`Static` for a non-negative literal, `Sym` for a
    /// bare symbol).
    ///
    /// ```
    /// use tensorplay_ir::{Dim, SymExpr};
    /// assert_eq!(Dim::from_expr(SymExpr::sym(0) + 1 - 1), Dim::Sym(0));
    /// assert_eq!(Dim::from_expr(SymExpr::lit(4)), Dim::Static(4));
    /// assert_eq!(Dim::from_expr(SymExpr::sym(0) - 1).to_string(), "s0 - 1");
    /// ```
    pub fn from_expr(e: SymExpr) -> Dim {
        if let Some(n) = e.as_lit().and_then(|n| usize::try_from(n).ok()) {
            return Dim::Static(n);
        }
        match e.as_sym() {
            Some(k) => Dim::Sym(k),
            None => Dim::Expr(e),
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => write!(f, "s{s}"),
            Dim::Expr(e) => write!(f, "{e}"),
        }
    }
}

/// A shape whose dims may be symbolic.
pub type SymShape = SmallVec<[Dim; 6]>;

/// Writes a shape as `[2, 3]`, the form every error message uses.
pub fn fmt_shape<T: fmt::Display>(dims: &[T]) -> String {
    let inner: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", inner.join(", "))
}

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major (C-contiguous) strides for `shape`.
///
/// ```
/// use tensorplay_ir::shape::contiguous_strides;
/// assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
/// ```
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(1, shape.len());
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    strides
}

/// True when `strides` are the row-major strides of `shape` (size-1 and empty dims are ignored).
pub fn is_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    if numel(shape) == 0 {
        return true;
    }
    let mut expected = 1isize;
    for i in (0..shape.len()).rev() {
        if shape[i] != 1 {
            if strides[i] != expected {
                return false;
            }
            expected *= shape[i] as isize;
        }
    }
    true
}

/// The shape two operands broadcast to (numpy/PyTorch rules: align right, 1 stretches).
///
/// ```
/// use tensorplay_ir::shape::broadcast_shapes;
/// assert_eq!(broadcast_shapes("add", &[4, 1, 3], &[2, 1]).unwrap().as_slice(), &[4, 2, 3]);
/// assert!(broadcast_shapes("add", &[2, 3], &[4]).is_err());
/// ```
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let rank = a.len().max(b.len());
    let mut out: Shape = SmallVec::with_capacity(rank);
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(
                    op,
                    format!(
                        "shapes {} and {} cannot be broadcast (dim {i}: {da} vs {db})",
                        fmt_shape(a),
                        fmt_shape(b)
                    ),
                ));
            }
        });
    }
    Ok(out)
}

/// Strides that read a tensor of `shape`/`strides` as if it had the broadcast shape `target`
/// (stride 0 along stretched and prepended dims). Fails if `shape` does not broadcast to `target`.
pub fn broadcast_strides(
    op: &str,
    shape: &[usize],
    strides: &[isize],
    target: &[usize],
) -> Result<Strides> {
    if shape.len() > target.len() {
        return Err(Error::shape(
            op,
            format!(
                "cannot broadcast {} to {}",
                fmt_shape(shape),
                fmt_shape(target)
            ),
        ));
    }
    let lead = target.len() - shape.len();
    let mut out: Strides = SmallVec::from_elem(0, target.len());
    for (i, (&d, &s)) in shape.iter().zip(strides).enumerate() {
        let t = target[lead + i];
        if d == t {
            out[lead + i] = if d == 1 { 0 } else { s };
        } else if d == 1 {
            out[lead + i] = 0;
        } else {
            return Err(Error::shape(
                op,
                format!(
                    "cannot broadcast {} to {}",
                    fmt_shape(shape),
                    fmt_shape(target)
                ),
            ));
        }
    }
    Ok(out)
}

/// Turns a possibly negative dim index into `0..rank`, or a shape error naming `op`.
///
/// ```
/// use tensorplay_ir::shape::normalize_dim;
/// assert_eq!(normalize_dim("sum", -1, 3).unwrap(), 2);
/// assert!(normalize_dim("sum", 3, 3).is_err());
/// ```
pub fn normalize_dim(op: &str, dim: i64, rank: usize) -> Result<usize> {
    // A 0-d tensor accepts dims -1 and 0, like PyTorch.
    let r = (rank as i64).max(1);
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(Error::shape(
            op,
            format!(
                "dim {dim} is out of range for a tensor of rank {rank} (expected -{r} to {})",
                r - 1
            ),
        ));
    }
    Ok(d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_ignores_unit_dims() {
        assert!(is_contiguous(&[2, 1, 3], &[3, 99, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
        assert!(is_contiguous(&[0, 3], &[7, 7]));
    }

    #[test]
    fn broadcast_strides_zero_stretched_dims() {
        let s = broadcast_strides("t", &[3, 1], &[1, 1], &[2, 3, 4]).unwrap();
        assert_eq!(s.as_slice(), &[0, 1, 0]);
        assert!(broadcast_strides("t", &[3], &[1], &[4]).is_err());
    }

    #[test]
    fn scalar_dim_zero_is_allowed() {
        assert_eq!(normalize_dim("sum", 0, 0).unwrap(), 0);
        assert_eq!(normalize_dim("sum", -1, 0).unwrap(), 0);
        assert!(normalize_dim("sum", 1, 0).is_err());
    }
}
