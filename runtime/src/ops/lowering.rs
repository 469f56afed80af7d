//! How the compiler sees each builtin op: the scalar operation an elementwise op lowers to, and
//! the combine rule of a reduction. Read from IR op calls (`tp::<name>` plus attributes).

use tensorplay_ir::CompileKind;
use tensorplay_ir::graph::{Arg, Attr, OpCall};
use tensorplay_ir::{Error, ReduceOp, Result, ScalarOp};

/// The namespace builtin ops are registered under.
pub const BUILTIN_NAMESPACE: &str = "tp";

/// The attribute arguments of `call`, in order (tensor slots skipped).
fn attrs(call: &OpCall) -> Vec<&Attr> {
    call.args
        .iter()
        .filter_map(|a| match a {
            Arg::Attr { value, .. } => Some(value),
            _ => None,
        })
        .collect()
}

fn attr_f64(op: &str, a: Option<&&Attr>) -> Result<Option<f64>> {
    match a {
        None | Some(Attr::None) => Ok(None),
        Some(Attr::Float(v)) => Ok(Some(*v)),
        Some(Attr::Int(v)) => Ok(Some(*v as f64)),
        Some(Attr::Bool(b)) => Ok(Some(f64::from(u8::from(*b)))),
        Some(other) => Err(Error::compile(
            CompileKind::Lowering,
            format!("{op}: expected a number or None attribute, got {other}"),
        )),
    }
}

/// The scalar op an elementwise builtin lowers to; `None` for ops that are not builtin
/// elementwise ops.
///
/// ```
/// use tensorplay_ir::graph::{Arg, OpCall};
/// use tensorplay_ir::{OpClass, ScalarOp};
/// use tensorplay_runtime::ops::lowering::scalar_op;
/// let call = OpCall::new("tp::exp", OpClass::Elementwise, vec![Arg::Tensor]);
/// assert_eq!(scalar_op(&call)?, Some(ScalarOp::Exp));
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn scalar_op(call: &OpCall) -> Result<Option<ScalarOp>> {
    let Some(name) = call.name.strip_prefix("tp::") else {
        return Ok(None);
    };
    use ScalarOp::*;
    let attrs = attrs(call);
    Ok(Some(match name {
        "neg" => Neg,
        "abs" => Abs,
        "exp" => Exp,
        "log" => Log,
        "sqrt" => Sqrt,
        "rsqrt" => Rsqrt,
        "reciprocal" => Reciprocal,
        "sin" => Sin,
        "cos" => Cos,
        "tanh" => Tanh,
        "sigmoid" => Sigmoid,
        "relu" => Relu,
        "gelu" => match attrs.first() {
            None => GeluErf,
            Some(Attr::Str(s)) if s == "none" => GeluErf,
            Some(Attr::Str(s)) if s == "tanh" => GeluTanh,
            Some(other) => {
                return Err(Error::compile(
                    CompileKind::Lowering,
                    format!("tp::gelu: approximate must be \"none\" or \"tanh\", got {other}"),
                ));
            }
        },
        "silu" => Silu,
        "erf" => Erf,
        "floor" => Floor,
        "ceil" => Ceil,
        "round" => Round,
        "sign" => Sign,
        "square" => Square,
        "logical_not" => LogicalNot,
        "to_dtype" | "clone" => Cast,
        "add" => Add,
        "sub" => Sub,
        "mul" => Mul,
        "div" => Div,
        "pow" => Pow,
        "maximum" => Maximum,
        "minimum" => Minimum,
        "eq" => Eq,
        "ne" => Ne,
        "lt" => Lt,
        "le" => Le,
        "gt" => Gt,
        "ge" => Ge,
        "logical_and" => LogicalAnd,
        "logical_or" => LogicalOr,
        "logical_xor" => LogicalXor,
        "where" => Where,
        "clamp" => Clamp {
            min: attr_f64("tp::clamp", attrs.first())?,
            max: attr_f64("tp::clamp", attrs.get(1))?,
        },
        _ => return Ok(None),
    }))
}

/// `(op, dims, keepdim)` of a builtin reduction; `dims == None` means every dim.
pub type ReduceSpec = (ReduceOp, Option<Vec<i64>>, bool);

/// The reduction a builtin reduction op performs: `(op, dims attribute, keepdim)`, where `dims`
/// is `None` for "all dims" and may hold negative dims. `None` for other ops.
pub fn reduce_op(call: &OpCall) -> Result<Option<ReduceSpec>> {
    let Some(name) = call.name.strip_prefix("tp::") else {
        return Ok(None);
    };
    let op = match name {
        "sum" => ReduceOp::Sum,
        "mean" => ReduceOp::Mean,
        "prod" => ReduceOp::Prod,
        "amax" => ReduceOp::Amax,
        "amin" => ReduceOp::Amin,
        _ => return Ok(None),
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
