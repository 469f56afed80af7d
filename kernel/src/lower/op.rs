//! Lowering one elementwise op with eager's dtype rules: its [`DTypeRule`] gives the compute
//! dtype (or lowers the op outright: casts, integer `clamp`), then the op is one scalar op
//! (with `pow` strength reduction and half-by-scalar products as special cases) or a whole
//! scalar expression computed in f32 for half types.

use tensorplay_ir::graph::{Arg, Attr, OpCall};
use tensorplay_ir::{Category, DType, Error, Result, ScalarExpr, ScalarOp};

use crate::lower::lowerer::{Lowerer, Operand, compile_err};
use crate::lower::pow::lower_pow_by_constant;
use crate::lowering::DTypeRule;
use crate::spec::inst::{Inst, ValueId};
use crate::spec::lit::Lit;
use crate::spec::print::op_name;
use crate::spec::rules::op_accepts;

/// What an op's dtype rule decided.
enum Typed {
    /// The op is lowered already (a cast, an integer clamp): its value.
    Done(ValueId),
    /// Compute in `compute`, with each operand first converted to its entry of `operands`.
    Compute {
        compute: DType,
        operands: Vec<DType>,
    },
}

/// Lowers one elementwise op with eager's dtype rules; returns the value holding its result.
pub(super) fn lower_op(
    l: &mut Lowerer,
    call: &OpCall,
    expr: &ScalarExpr,
    rule: DTypeRule,
    args: &[Operand],
    meta_dtype: DType,
) -> Result<ValueId> {
    let name = call.name.as_str();
    if args.len() != expr.arity() {
        return Err(compile_err(format!(
            "{name}: expected {} tensor operands, got {}",
            expr.arity(),
            args.len()
        )));
    }
    let (compute, operand_dtypes) = match apply_rule(l, call, expr, rule, args, meta_dtype)? {
        Typed::Done(v) => return Ok(v),
        Typed::Compute { compute, operands } => (compute, operands),
    };
    match expr.single_op() {
        Some(op) => lower_single(l, name, op, args, compute, &operand_dtypes, meta_dtype),
        None => lower_expression(l, name, expr, args, compute, &operand_dtypes, meta_dtype),
    }
}

/// The compute dtype and operand dtypes by the op's declared dtype rule (or the lowered op).
fn apply_rule(
    l: &mut Lowerer,
    call: &OpCall,
    expr: &ScalarExpr,
    rule: DTypeRule,
    args: &[Operand],
    meta_dtype: DType,
) -> Result<Typed> {
    let name = call.name.as_str();
    let n = args.len();
    let d0 = l.operand_dtype(args[0]);
    let same = |c: DType| -> Result<Typed> {
        Ok(Typed::Compute {
            compute: c,
            operands: vec![c; n],
        })
    };
    match rule {
        DTypeRule::Cast => {
            let x = l.materialize(args[0]);
            Ok(Typed::Done(l.coerce(Operand::Value(x), meta_dtype)))
        }
        DTypeRule::Float => same(d0.to_float()),
        DTypeRule::FloatOnly => {
            if !d0.is_float() {
                return Err(Error::dtype(
                    name,
                    format!("expected a floating point tensor, got {d0}"),
                ));
            }
            same(d0)
        }
        DTypeRule::NoBool => {
            if d0 == DType::Bool {
                return Err(Error::dtype(name, "bool tensors are not supported"));
            }
            same(d0)
        }
        DTypeRule::Same => same(d0),
        DTypeRule::BoolToI64 => same(if d0 == DType::Bool { DType::I64 } else { d0 }),
        DTypeRule::Logical => same(DType::Bool),
        DTypeRule::Promote => same(l.promote(args)),
        DTypeRule::PromoteNoBool => {
            let c = l.promote(args);
            if c == DType::Bool {
                return Err(Error::dtype(
                    name,
                    "two bool operands are not supported (use logical ops)",
                ));
            }
            same(c)
        }
        DTypeRule::PromoteFloat => same(l.promote(args).to_float()),
        DTypeRule::Where => {
            if d0 != DType::Bool {
                return Err(Error::dtype(
                    "where",
                    format!("condition must be a bool tensor, got {d0}"),
                ));
            }
            let c = l.promote(&args[1..]);
            Ok(Typed::Compute {
                compute: c,
                operands: vec![DType::Bool, c, c],
            })
        }
        DTypeRule::Clamp => clamp_rule(l, call, expr, args, d0, meta_dtype),
    }
}

/// Category of a clamp bound attribute.
fn attr_category(a: &Attr) -> Option<Category> {
    match a {
        Attr::Int(_) => Some(Category::Integer),
        Attr::Float(_) => Some(Category::Floating),
        Attr::Bool(_) => Some(Category::Bool),
        _ => None,
    }
}

fn clamp_attrs(call: &OpCall) -> Vec<&Attr> {
    call.args
        .iter()
        .filter_map(|a| match a {
            Arg::Attr { value, .. } => Some(value),
            _ => None,
        })
        .collect()
}

/// The clamp rule: the bounds' categories raise the input's dtype; a floating clamp computes
/// as one op, an integer one is lowered here.
fn clamp_rule(
    l: &mut Lowerer,
    call: &OpCall,
    expr: &ScalarExpr,
    args: &[Operand],
    d0: DType,
    meta_dtype: DType,
) -> Result<Typed> {
    let name = call.name.as_str();
    let Some(ScalarOp::Clamp { min, max }) = expr.single_op() else {
        return Err(compile_err(format!(
            "{name}: the clamp rule needs a clamp lowering, got {expr}"
        )));
    };
    if d0 == DType::Bool {
        return Err(Error::dtype(name, "bool tensors are not supported"));
    }
    let attrs = clamp_attrs(call);
    let cats: Vec<Category> = attrs.iter().filter_map(|a| attr_category(a)).collect();
    let c = cats
        .iter()
        .fold(d0, |d, &cat| DType::promote_with_scalar(d, cat));
    if c.is_float() {
        return Ok(Typed::Compute {
            compute: c,
            operands: vec![c],
        });
    }
    // Integer clamp is exactly maximum-then-minimum with the (exact) integer bounds.
    let x = l.coerce(args[0], c);
    let bound = |a: Option<&&Attr>| match a {
        Some(Attr::Int(v)) => Some(*v),
        Some(Attr::Bool(b)) => Some(*b as i64),
        _ => None,
    };
    let mut v = x;
    for (b, bop) in [
        (bound(attrs.first()), ScalarOp::Maximum),
        (bound(attrs.get(1)), ScalarOp::Minimum),
    ] {
        if let Some(b) = b {
            if c == DType::I32 && i32::try_from(b).is_err() {
                return Err(Error::argument(
                    "clamp",
                    if bop == ScalarOp::Maximum {
                        "min"
                    } else {
                        "max"
                    },
                    "a bound representable in the tensor's dtype i32",
                    b.to_string(),
                ));
            }
            let k = l.constant(Lit::Int(b), c);
            v = l.push(Inst::Op {
                op: bop,
                args: vec![v, k],
                compute: c,
                out: c,
            });
        }
    }
    if v == x && min.is_none() && max.is_none() {
        return Err(Error::argument(
            "clamp",
            "min, max",
            "at least one of min and max",
            "neither",
        ));
    }
    check_out(l, name, v, meta_dtype).map(Typed::Done)
}

/// An op whose lowering is a whole expression. Eager computes a half op's whole expression in
/// f32 (literals included) and rounds once; so does the kernel. Where conditions stay bool.
/// Operands are first converted to their dtype (an i32 operand of an f16 op rounds to f16, as
/// eager converts it), then held in f32.
fn lower_expression(
    l: &mut Lowerer,
    name: &str,
    expr: &ScalarExpr,
    args: &[Operand],
    compute: DType,
    operand_dtypes: &[DType],
    meta_dtype: DType,
) -> Result<ValueId> {
    let widen = |d: DType| if d.is_half() { DType::F32 } else { d };
    let f32_scalar = keeps_f32_scalar(l, name, args, compute);
    let ids: Vec<ValueId> = args
        .iter()
        .zip(operand_dtypes)
        .enumerate()
        .map(|(i, (&a, &d))| {
            if f32_scalar && i == 1 {
                return l.coerce(a, DType::F32);
            }
            let v = l.coerce(a, d);
            l.coerce(Operand::Value(v), widen(d))
        })
        .collect();
    let v = lower_expr(l, name, expr, &ids, widen(compute))?;
    // A predicate expression (isnan's `x != x`) already gives bool.
    let v = if compute.is_half() && l.dtype_of(v) != DType::Bool {
        l.coerce(Operand::Value(v), compute)
    } else {
        v
    };
    check_out(l, name, v, meta_dtype)
}

/// A half tensor times, divided or floor-divided by a Rust scalar or a 0-d tensor (the second
/// operand): that operand stays in f32 instead of being rounded to the half type first, as
/// eager's `half_opmath_scalar` does (PyTorch's rule), so `x / 70000.0` is not `x / inf`.
fn keeps_f32_scalar(l: &Lowerer, name: &str, args: &[Operand], compute: DType) -> bool {
    matches!(name, "tp::mul" | "tp::div" | "tp::floor_divide")
        && compute.is_half()
        && args.len() == 2
        && (matches!(args[1], Operand::Scalar(..)) || l.zero_dim.get(1).copied().unwrap_or(false))
        && l.operand_dtype(args[0]) == compute
}

/// An op whose lowering is exactly one scalar op over its operands.
fn lower_single(
    l: &mut Lowerer,
    name: &str,
    op: ScalarOp,
    args: &[Operand],
    compute: DType,
    operand_dtypes: &[DType],
    meta_dtype: DType,
) -> Result<ValueId> {
    if !op_accepts(op, compute) {
        return Err(Error::dtype(
            name,
            format!("{compute} operands are not supported"),
        ));
    }
    if op == ScalarOp::Pow
        && let Some(v) = lower_pow_by_constant(l, args[0], args[1], compute)
    {
        return check_out(l, name, v, meta_dtype);
    }
    if keeps_f32_scalar(l, name, args, compute) {
        let x = l.coerce(args[0], DType::F32);
        let s = l.coerce(args[1], DType::F32);
        let v = l.push(Inst::Op {
            op,
            args: vec![x, s],
            compute: DType::F32,
            out: DType::F32,
        });
        let v = l.coerce(Operand::Value(v), compute);
        return check_out(l, name, v, meta_dtype);
    }
    let ids: Vec<ValueId> = args
        .iter()
        .zip(operand_dtypes)
        .map(|(&a, &d)| l.coerce(a, d))
        .collect();
    let out = if op.is_predicate() {
        DType::Bool
    } else {
        compute
    };
    let v = l.push(Inst::Op {
        op,
        args: ids,
        compute,
        out,
    });
    check_out(l, name, v, meta_dtype)
}

/// Emits an op's scalar expression over its coerced operands `ids`, every op computing in
/// `compute` (predicates produce bool; `where` takes a bool condition).
fn lower_expr(
    l: &mut Lowerer,
    name: &str,
    e: &ScalarExpr,
    ids: &[ValueId],
    compute: DType,
) -> Result<ValueId> {
    Ok(match e {
        ScalarExpr::Arg(i) => *ids
            .get(*i)
            .ok_or_else(|| compile_err(format!("{name}: its lowering reads operand {i}")))?,
        ScalarExpr::Lit(v) => l.constant(Lit::Float(*v).convert(compute), compute),
        ScalarExpr::Op(op, args) => {
            if args.len() != op.arity() {
                return Err(compile_err(format!(
                    "{name}: {} in its lowering takes {} operands, got {}",
                    op_name(op),
                    op.arity(),
                    args.len()
                )));
            }
            if !op_accepts(*op, compute) {
                return Err(Error::dtype(
                    name,
                    format!("{compute} operands are not supported"),
                ));
            }
            let vals = args
                .iter()
                .map(|a| lower_expr(l, name, a, ids, compute))
                .collect::<Result<Vec<_>>>()?;
            let out = if op.is_predicate() {
                DType::Bool
            } else {
                compute
            };
            l.push(Inst::Op {
                op: *op,
                args: vals,
                compute,
                out,
            })
        }
    })
}

/// The op's value, checked against the dtype the node's metadata states.
fn check_out(l: &Lowerer, name: &str, v: ValueId, meta_dtype: DType) -> Result<ValueId> {
    let got = l.dtype_of(v);
    if got != meta_dtype {
        return Err(compile_err(format!(
            "{name}: eager's dtype rules give {got}, but the node's metadata says {meta_dtype}"
        )));
    }
    Ok(v)
}
