//! Scalar semantics of elementwise and reduction ops, as the code generators see them.
//!
//! Each builtin elementwise op lowers to one [`ScalarOp`]; the Cranelift and CUDA emitters
//! implement each variant once. Operands are first converted to the node's compute dtype (the
//! promoted dtype of its inputs, where scalar constants only raise the category), then the op
//! is applied; comparisons and logical ops produce bool.

use std::fmt;

/// One scalar operation of a fused elementwise region.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarOp {
    // Unary.
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    /// `0.5*x*(1+erf(x/sqrt(2)))`
    GeluErf,
    /// `0.5*x*(1+tanh(0.7978845608*(x+0.044715*x^3)))`
    GeluTanh,
    Silu,
    Erf,
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
}

impl ScalarOp {
    /// Number of tensor operands.
    pub fn arity(self) -> usize {
        use ScalarOp::*;
        match self {
            Add | Sub | Mul | Div | Pow | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge
            | LogicalAnd | LogicalOr | LogicalXor => 2,
            Where => 3,
            _ => 1,
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
            other => write!(f, "{}", format!("{other:?}").to_lowercase()),
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
