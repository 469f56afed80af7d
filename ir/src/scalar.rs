//! Scalar semantics of elementwise and reduction ops, as the code generators see them.
//!
//! Each builtin elementwise op lowers to one [`ScalarOp`]; the Cranelift and CUDA emitters
//! implement each variant once. Operands are first converted to the node's compute dtype (the
//! promoted dtype of its inputs, where scalar constants only raise the category), then the op
//! is applied; comparisons and logical ops produce bool.

use std::fmt;

pub use tensorplay_math::{LibmFn, LibmFn2, MathFn};

/// One scalar operation of a fused elementwise region.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarOp {
    // Unary.
    Neg,
    Abs,
    /// A function of the math library's table (`exp`, `log`, `tanh`, the GELUs, ...): its f32
    /// approximation, or its f64 form rounded once (see [`MathFn`]).
    Math(MathFn),
    Sqrt,
    Rsqrt,
    Reciprocal,
    Relu,
    Floor,
    Ceil,
    /// Round half to even.
    Round,
    Sign,
    Square,
    LogicalNot,
    /// Converts to the node's output dtype (PyTorch cast rules); also `clone`.
    Cast,
    // Binary.
    Add,
    Sub,
    Mul,
    /// True division.
    Div,
    Pow,
    /// NaN-propagating maximum.
    Maximum,
    /// NaN-propagating minimum.
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    // Ternary.
    /// `where(cond, a, b)`.
    Where,
    /// `clamp(x, min, max)` with optional bounds (NaN propagates; min > max gives max).
    Clamp {
        min: Option<f64>,
        max: Option<f64>,
    },
    /// A libm function of one operand, evaluated in f64 and rounded once to the compute dtype
    /// (so f32 results are correctly rounded in practice, and eager computes the same bits).
    Libm(LibmFn),
    /// A libm function of two operands, evaluated in f64 and rounded once (as [`ScalarOp::Libm`]).
    Libm2(LibmFn2),
    /// `nan_to_num`: NaN, +inf and -inf replaced; an absent replacement of an infinity is the
    /// compute dtype's largest (or lowest) finite value. Integers and bools pass unchanged.
    NanToNum {
        nan: f64,
        posinf: Option<f64>,
        neginf: Option<f64>,
    },
    // Integer and bool bit operations (bools: logical).
    BitAnd,
    BitOr,
    BitXor,
    BitNot,
    /// `a << b`; a shift by a negative amount or by the bit width or more gives 0 (PyTorch).
    Shl,
    /// Arithmetic `a >> b`; a negative or too-wide shift fills with the sign bit (PyTorch).
    Shr,
}

/// The math functions under their former variant names (`ScalarOp::Exp` is
/// `ScalarOp::Math(MathFn::Exp)`), so code written against the old variants keeps compiling.
#[allow(non_upper_case_globals)]
impl ScalarOp {
    pub const Exp: ScalarOp = ScalarOp::Math(MathFn::Exp);
    pub const Log: ScalarOp = ScalarOp::Math(MathFn::Log);
    pub const Log1p: ScalarOp = ScalarOp::Math(MathFn::Log1p);
    pub const Expm1: ScalarOp = ScalarOp::Math(MathFn::Expm1);
    pub const Sin: ScalarOp = ScalarOp::Math(MathFn::Sin);
    pub const Cos: ScalarOp = ScalarOp::Math(MathFn::Cos);
    pub const Tanh: ScalarOp = ScalarOp::Math(MathFn::Tanh);
    pub const Sigmoid: ScalarOp = ScalarOp::Math(MathFn::Sigmoid);
    pub const GeluErf: ScalarOp = ScalarOp::Math(MathFn::GeluErf);
    pub const GeluTanh: ScalarOp = ScalarOp::Math(MathFn::GeluTanh);
    pub const Silu: ScalarOp = ScalarOp::Math(MathFn::Silu);
    pub const Erf: ScalarOp = ScalarOp::Math(MathFn::Erf);
}

impl ScalarOp {
    /// Number of tensor operands.
    pub fn arity(self) -> usize {
        use ScalarOp::*;
        match self {
            Add | Sub | Mul | Div | Pow | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge
            | LogicalAnd | LogicalOr | LogicalXor | Libm2(_) | BitAnd | BitOr | BitXor | Shl
            | Shr => 2,
            Where => 3,
            _ => 1,
        }
    }

    /// Extra per-element work weight of the op on floats, in units of a cheap memory-bound
    /// element (the launcher splits work by the sum over a kernel): 8 per transcendental, 12
    /// for the general `pow`, 1 for division and square roots, 0 for cheap ops. Exhaustive on
    /// purpose: a new variant must state its cost.
    pub fn cost(self) -> usize {
        use ScalarOp::*;
        match self {
            Math(_) | Libm(_) => 8,
            Libm2(f) => {
                if f.is_exact() {
                    1
                } else {
                    8
                }
            }
            Pow => 12,
            Div | Sqrt | Rsqrt | Reciprocal => 1,
            Neg
            | Abs
            | Relu
            | Floor
            | Ceil
            | Round
            | Sign
            | Square
            | LogicalNot
            | Cast
            | Add
            | Sub
            | Mul
            | Maximum
            | Minimum
            | Eq
            | Ne
            | Lt
            | Le
            | Gt
            | Ge
            | LogicalAnd
            | LogicalOr
            | LogicalXor
            | Where
            | Clamp { .. }
            | NanToNum { .. }
            | BitAnd
            | BitOr
            | BitXor
            | BitNot
            | Shl
            | Shr => 0,
        }
    }

    /// True when the result is bool whatever the operand dtype.
    pub fn is_predicate(self) -> bool {
        use ScalarOp::*;
        matches!(
            self,
            Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr | LogicalXor | LogicalNot
        )
    }
}

impl fmt::Display for ScalarOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarOp::Clamp { min, max } => write!(f, "clamp({min:?}, {max:?})"),
            ScalarOp::Math(g) => write!(f, "{}", format!("{g:?}").to_lowercase()),
            ScalarOp::Libm(g) => f.write_str(g.name()),
            ScalarOp::Libm2(g) => f.write_str(g.name()),
            ScalarOp::NanToNum {
                nan,
                posinf,
                neginf,
            } => write!(f, "nan_to_num({nan:?}, {posinf:?}, {neginf:?})"),
            other => write!(f, "{}", format!("{other:?}").to_lowercase()),
        }
    }
}

/// The scalar lowering of an elementwise op: an expression over the call's tensor operands,
/// literals and [`ScalarOp`]s, computed in the op's compute dtype. Target-independent data, so
/// every code generator reads the same definition.
///
/// ```
/// use tensorplay_ir::scalar::ScalarExpr;
/// use tensorplay_ir::ScalarOp;
/// // leaky_relu(x, 0.1) = where(x > 0, x, x * 0.1)
/// let x = ScalarExpr::arg(0);
/// let e = ScalarExpr::op(ScalarOp::Where, [
///     ScalarExpr::op(ScalarOp::Gt, [x.clone(), ScalarExpr::lit(0.0)]),
///     x.clone(),
///     ScalarExpr::op(ScalarOp::Mul, [x, ScalarExpr::lit(0.1)]),
/// ]);
/// assert_eq!(e.arity(), 1);
/// assert_eq!(e.to_string(), "where(gt(%0, 0), %0, mul(%0, 0.1))");
/// assert_eq!(e.single_op(), None);
/// assert_eq!(ScalarExpr::unary(ScalarOp::Exp).single_op(), Some(ScalarOp::Exp));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ScalarExpr {
    /// Tensor operand `i` of the call.
    Arg(usize),
    /// A literal, converted to the compute dtype.
    Lit(f64),
    /// A scalar op applied to sub-expressions.
    Op(ScalarOp, Vec<ScalarExpr>),
}

impl ScalarExpr {
    /// Tensor operand `i`.
    pub fn arg(i: usize) -> Self {
        ScalarExpr::Arg(i)
    }

    /// A literal.
    pub fn lit(v: f64) -> Self {
        ScalarExpr::Lit(v)
    }

    /// `op` applied to `args`.
    pub fn op<const N: usize>(op: ScalarOp, args: [ScalarExpr; N]) -> Self {
        ScalarExpr::Op(op, args.into())
    }

    /// `op` applied to the first `op.arity()` operands in order: the lowering of an op that is
    /// exactly one scalar op.
    pub fn unary(op: ScalarOp) -> Self {
        ScalarExpr::Op(op, (0..op.arity()).map(ScalarExpr::Arg).collect())
    }

    /// Number of tensor operands the expression reads (highest operand index + 1).
    pub fn arity(&self) -> usize {
        match self {
            ScalarExpr::Arg(i) => i + 1,
            ScalarExpr::Lit(_) => 0,
            ScalarExpr::Op(_, args) => args.iter().map(ScalarExpr::arity).max().unwrap_or(0),
        }
    }

    /// The op when the expression is one op over the operands in order (`Op(op, [%0, %1..])`).
    pub fn single_op(&self) -> Option<ScalarOp> {
        match self {
            ScalarExpr::Op(op, args)
                if args.len() == op.arity()
                    && args
                        .iter()
                        .enumerate()
                        .all(|(i, a)| *a == ScalarExpr::Arg(i)) =>
            {
                Some(*op)
            }
            _ => None,
        }
    }

    /// Sum of [`ScalarOp::cost`] over the expression's ops.
    pub fn cost(&self) -> usize {
        match self {
            ScalarExpr::Op(op, args) => {
                op.cost() + args.iter().map(ScalarExpr::cost).sum::<usize>()
            }
            _ => 0,
        }
    }
}

impl fmt::Display for ScalarExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarExpr::Arg(i) => write!(f, "%{i}"),
            ScalarExpr::Lit(v) => write!(f, "{v}"),
            ScalarExpr::Op(op, args) => {
                write!(f, "{op}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// How a reduction combines elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Prod,
    Amax,
    Amin,
}

/// A `pow` by a Rust-scalar exponent that eager kernels and compiled code both replace by
/// cheaper code (PyTorch's eager kernel special-cases the same exponents): the general `pow` costs
/// several times a multiplication chain. One table for both sides ([`PowBy::of_float`],
/// [`PowBy::of_int`]; `tensorplay-core`'s `pow` kernel and the kernel lowering read it), so both
/// compute the same bits.
///
/// Only exponents whose replacement matches `pow` within its contract for every input qualify.
/// Integers: 0..=4, whose wrapping products equal `int_pow`'s wrapping repeated squaring
/// (multiplication modulo 2^bits is associative; i32 `int_pow` computes in i64 and truncates,
/// which is the same residue); negative integer exponents keep the general code. Floats: 0..=4
/// as products, with at most two extra roundings (the sign and infinity/zero/NaN cases of `pow`
/// by an integer are exactly those of the product), `-1` as a correctly rounded division
/// (`pow(±0, -1) = ±inf`, `pow(±inf, -1) = ±0`, like `1 / x`), `0.5` as
/// `where(x == -inf, +inf, maximum(sqrt(x), +0))` (`sqrt` alone differs at `-0` and `-inf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowBy {
    /// `x^0 = 1` for every `x`, NaN included (C's `pow`, `int_pow`).
    Zero,
    /// `x^1 = x`.
    One,
    /// `x * x`.
    Two,
    /// `(x * x) * x`.
    Three,
    /// `(x * x) * (x * x)`.
    Four,
    /// `1 / x` (floats only).
    MinusOne,
    /// `sqrt(x)`, patched for `-0` and `-inf` (floats only).
    Half,
}

impl PowBy {
    /// The replacement for a float exponent `y` (already rounded to the compute dtype), if any.
    /// `-0.0` selects `Zero` as `0.0` does.
    ///
    /// ```
    /// use tensorplay_ir::PowBy;
    /// assert_eq!(PowBy::of_float(3.0), Some(PowBy::Three));
    /// assert_eq!(PowBy::of_float(0.5), Some(PowBy::Half));
    /// assert_eq!(PowBy::of_float(2.5), None);
    /// ```
    pub fn of_float(y: f64) -> Option<PowBy> {
        Some(match y {
            0.0 => PowBy::Zero,
            1.0 => PowBy::One,
            2.0 => PowBy::Two,
            3.0 => PowBy::Three,
            4.0 => PowBy::Four,
            -1.0 => PowBy::MinusOne,
            0.5 => PowBy::Half,
            _ => return None,
        })
    }

    /// The replacement for an integer exponent (integer compute dtypes), if any: 0..=4.
    pub fn of_int(y: i64) -> Option<PowBy> {
        Some(match y {
            0 => PowBy::Zero,
            1 => PowBy::One,
            2 => PowBy::Two,
            3 => PowBy::Three,
            4 => PowBy::Four,
            _ => return None,
        })
    }
}
