//! How the compiler sees a builtin op, declared in its `OpDef` ([`Lower`]): the scalar
//! expression and dtype rule of an elementwise op, the combine rule of a reduction, or softmax.
//! Code generators read these declarations through [`builtin`] (by the call's [`OpId`]); no
//! pass matches on op names.

use tensorplay_ir::graph::{Arg, Attr, OpCall};
use tensorplay_ir::{CompileKind, DType, Error, ReduceOp, Result, ScalarExpr, ScalarOp};

/// The namespace builtin ops are registered under.
pub const BUILTIN_NAMESPACE: &str = "tp";

/// How the compiler computes a builtin op.
#[derive(Clone, Copy)]
pub enum Lower {
    /// Not lowered: the op always runs through the dispatcher (a barrier in compiled graphs).
    None,
    /// An elementwise op: one scalar expression per element.
    Pointwise(Pointwise),
    /// A reduction combining elements with this rule (its `dim`/`keepdim` attributes follow).
    Reduce(ReduceOp),
    /// (Log-)softmax over its `dim` attribute.
    Softmax { log: bool },
}

/// The scalar lowering of an elementwise op.
#[derive(Clone, Copy)]
pub struct Pointwise {
    /// Builds the op's expression from the call's attribute arguments (in schema order), e.g.
    /// `leaky_relu`'s slope becomes a literal. Errors name the op and the attribute.
    pub expr: fn(&[&Attr]) -> Result<ScalarExpr>,
    /// How operand dtypes give the compute dtype (eager's rule, restated for codegen).
    pub dtype: DTypeRule,
    /// Compiled only when the result dtype is floating; integer results run through the
    /// dispatcher (ops whose integer form can fail, like integer division by zero).
    pub float_only: bool,
}

impl Pointwise {
    /// A lowering that is exactly `op` over the operands in order.
    pub const fn op(op: fn(&[&Attr]) -> Result<ScalarExpr>, dtype: DTypeRule) -> Self {
        Pointwise {
            expr: op,
            dtype,
            float_only: false,
        }
    }
}

/// How an elementwise op's operand dtypes give its compute dtype (the dtype its scalar ops run
/// in) — eager's type promotion, one rule per op family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DTypeRule {
    /// Floating math: computes in the input's floating dtype (integers and bool in f32).
    Float,
    /// Floating inputs only (integer or bool inputs are a dtype error, as in eager).
    FloatOnly,
    /// The input dtype; bool is a dtype error (neg, relu, floor...).
    NoBool,
    /// The input dtype, bool included (abs, sign).
    Same,
    /// The input dtype, with bool computed as i64 (square).
    BoolToI64,
    /// Bool operands and result (logical ops).
    Logical,
    /// The promoted dtype of all operands (add, mul, maximum, comparisons).
    Promote,
    /// The promoted dtype; two bool operands are a dtype error (sub, pow, remainder).
    PromoteNoBool,
    /// The promoted dtype raised to floating (true division).
    PromoteFloat,
    /// `where(cond, a, b)`: bool condition, the promoted dtype of `a` and `b`.
    Where,
    /// `clamp`: the input dtype raised by the bounds' categories.
    Clamp,
    /// A conversion to the node's output dtype (`to_dtype`, `clone`).
    Cast,
}

/// The attribute arguments of `call`, in order (tensor slots skipped).
pub fn attrs(call: &OpCall) -> Vec<&Attr> {
    call.args
        .iter()
        .filter_map(|a| match a {
            Arg::Attr { value, .. } => Some(value),
            _ => None,
        })
        .collect()
}

/// A number (or `None`) attribute as f64; errors name the op and the argument.
pub fn attr_f64(op: &str, arg: &str, a: Option<&&Attr>) -> Result<Option<f64>> {
    match a {
        None | Some(Attr::None) => Ok(None),
        Some(Attr::Float(v)) => Ok(Some(*v)),
        Some(Attr::Int(v)) => Ok(Some(*v as f64)),
        Some(Attr::Bool(b)) => Ok(Some(f64::from(u8::from(*b)))),
        Some(other) => Err(Error::argument(
            op,
            arg,
            "a number or None",
            other.to_string(),
        )),
    }
}

/// A number attribute with a default when absent.
pub fn attr_num(op: &str, arg: &str, a: Option<&&Attr>, default: f64) -> Result<f64> {
    Ok(attr_f64(op, arg, a)?.unwrap_or(default))
}

/// The op table as lowering reads it: the lowering each builtin op declares (`tensorplay-core`'s
/// table implements it; code generators are handed one).
pub trait OpLowerings: Sync {
    /// The lowering `call`'s op declares; `None` when the op is not a builtin.
    fn lowering(&self, call: &OpCall) -> Option<Lower>;
}

/// Whether a call of this builtin can fail on the *values* of its operands (not only on their
/// shapes and dtypes): an elementwise op declared `float_only` whose result dtype is not
/// floating (integer division by zero). Dead-code elimination keeps such calls, so a compiled
/// graph reports the same error eager does even when the result is unused.
pub fn fails_on_values(table: &dyn OpLowerings, call: &OpCall, result: DType) -> bool {
    matches!(
        table.lowering(call),
        Some(Lower::Pointwise(Pointwise {
            float_only: true,
            ..
        }))
    ) && !result.is_float()
}

/// `(op, dims, keepdim)` of a builtin reduction; `dims == None` means every dim.
pub type ReduceSpec = (ReduceOp, Option<Vec<i64>>, bool);

/// The scalar lowering of a builtin elementwise call: its expression (built from the call's
/// attributes) and declaration; `None` for calls that are not builtin elementwise ops.
pub fn pointwise(
    table: &dyn OpLowerings,
    call: &OpCall,
) -> Result<Option<(ScalarExpr, Pointwise)>> {
    match table.lowering(call) {
        Some(Lower::Pointwise(p)) => Ok(Some(((p.expr)(&attrs(call))?, p))),
        _ => Ok(None),
    }
}

/// The reduction a builtin reduction op performs: `(op, dims attribute, keepdim)`, where `dims`
/// is `None` for "all dims" and may hold negative dims. `None` for other ops.
pub fn reduce_op(table: &dyn OpLowerings, call: &OpCall) -> Result<Option<ReduceSpec>> {
    let Some(Lower::Reduce(op)) = table.lowering(call) else {
        return Ok(None);
    };
    let attrs = attrs(call);
    let dims = match attrs.first() {
        None | Some(Attr::None) => None,
        Some(Attr::IntList(d)) => Some(d.clone()),
        Some(Attr::Int(d)) => Some(vec![*d]),
        Some(other) => {
            return Err(Error::compile(
                CompileKind::Lowering,
                format!("{}: expected dims as an int list, got {other}", call.name),
            ));
        }
    };
    let keepdim = matches!(attrs.get(1), Some(Attr::Bool(true)));
    Ok(Some((op, dims, keepdim)))
}

/// `Some(log)` when the call is a builtin (log-)softmax.
pub fn softmax(table: &dyn OpLowerings, call: &OpCall) -> Option<bool> {
    match table.lowering(call) {
        Some(Lower::Softmax { log }) => Some(log),
        _ => None,
    }
}

/// Whether a compiled kernel computes a call of `p` whose result has dtype `out`.
pub fn compiles(p: &Pointwise, out: DType) -> bool {
    !p.float_only || out.is_float()
}

/// Lowering builders for the op table: one function per shape of expression, usable as
/// [`Pointwise::expr`].
pub mod expr {
    use super::*;

    macro_rules! single {
        ($($f:ident => $op:ident),* $(,)?) => {$(
            #[doc = concat!("`", stringify!($op), "` over the operands.")]
            pub fn $f(_: &[&Attr]) -> Result<ScalarExpr> {
                Ok(ScalarExpr::unary(ScalarOp::$op))
            }
        )*};
    }
    single! {
        neg => Neg, abs => Abs, exp => Exp, log => Log, log1p => Log1p, expm1 => Expm1,
        sqrt => Sqrt, rsqrt => Rsqrt, reciprocal => Reciprocal, sin => Sin, cos => Cos,
        tanh => Tanh, sigmoid => Sigmoid, relu => Relu, silu => Silu, erf => Erf,
        floor => Floor, ceil => Ceil, round => Round, sign => Sign, square => Square,
        logical_not => LogicalNot, cast => Cast, add => Add, sub => Sub, mul => Mul,
        div => Div, pow => Pow, maximum => Maximum, minimum => Minimum, eq => Eq, ne => Ne,
        lt => Lt, le => Le, gt => Gt, ge => Ge, logical_and => LogicalAnd,
        logical_or => LogicalOr, logical_xor => LogicalXor, where_ => Where,
    }

    /// `gelu(x, approximate)`: the erf form, or the tanh form for `approximate="tanh"`.
    pub fn gelu(attrs: &[&Attr]) -> Result<ScalarExpr> {
        Ok(ScalarExpr::unary(match attrs.first() {
            None => ScalarOp::GeluErf,
            Some(Attr::Str(s)) if s == "none" => ScalarOp::GeluErf,
            Some(Attr::Str(s)) if s == "tanh" => ScalarOp::GeluTanh,
            Some(other) => {
                return Err(Error::argument(
                    "gelu",
                    "approximate",
                    "\"none\" or \"tanh\"",
                    other.to_string(),
                ));
            }
        }))
    }

    /// `clamp(x, min, max)` with optional bounds.
    pub fn clamp(attrs: &[&Attr]) -> Result<ScalarExpr> {
        Ok(ScalarExpr::unary(ScalarOp::Clamp {
            min: attr_f64("clamp", "min", attrs.first())?,
            max: attr_f64("clamp", "max", attrs.get(1))?,
        }))
    }
}
