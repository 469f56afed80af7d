//! Strength reduction of `pow` by a constant exponent ([`PowBy`]: `x*x` for 2, a guarded
//! `sqrt` for 0.5, ...), the same table eager's `pow` uses, so both compute the same bits.

use tensorplay_ir::{DType, PowBy, ScalarOp};

use crate::lower::lowerer::{Lowerer, Operand};
use crate::spec::inst::{Inst, ValueId};
use crate::spec::lit::Lit;

/// Which [`PowBy`] replacement (the table eager's `pow` uses too) an exponent of value `y`
/// (already in the compute dtype) selects, if any.
fn pow_by(y: Lit) -> Option<PowBy> {
    match y {
        Lit::Int(v) => PowBy::of_int(v),
        Lit::Float(v) => PowBy::of_float(v),
        Lit::Bool(_) => None,
    }
}

/// Strength reduction of `pow(x, y)` when `y` is a scalar constant with one of the values of
/// [`PowBy`]: the general `pow` costs several times a multiplication chain (and most of a
/// kernel's compile time). Computes in `compute`, the dtype the `pow` would compute in, so
/// f16/bf16 still round once at the store and integers wrap as eager's `int_pow` does. Returns
/// `None` (lower the general `pow`) for any other exponent.
///
/// `y = 0.5` is `where(x == -inf, +inf, maximum(sqrt(x), +0))`: `sqrt` alone differs from `pow`
/// at `-0` (`sqrt(-0) = -0`, `pow(-0, 0.5) = +0`; eager's `maximum(-0, +0)` is `+0`) and at
/// `-inf` (`sqrt` gives NaN, `pow` gives `+inf`); negative numbers give NaN in both, and NaN
/// propagates through `maximum`.
pub(super) fn lower_pow_by_constant(
    l: &mut Lowerer,
    base: Operand,
    exponent: Operand,
    compute: DType,
) -> Option<ValueId> {
    let y = match exponent {
        Operand::Scalar(lit, _, _) => lit.convert(compute),
        Operand::Value(id) => match l.insts[id] {
            Inst::Const { value, .. } => value.convert(compute),
            _ => return None,
        },
        Operand::Input(_) => return None,
    };
    let by = pow_by(y)?;
    let float = compute.is_float();
    if matches!(by, PowBy::MinusOne | PowBy::Half) && !float {
        return None;
    }
    let mul = |l: &mut Lowerer, a: ValueId, b: ValueId| {
        l.push(Inst::Op {
            op: ScalarOp::Mul,
            args: vec![a, b],
            compute,
            out: compute,
        })
    };
    let v = match by {
        PowBy::Zero => l.constant(Lit::Int(1).convert(compute), compute),
        PowBy::One => l.coerce(base, compute),
        PowBy::Two => {
            let x = l.coerce(base, compute);
            mul(l, x, x)
        }
        PowBy::Three => {
            let x = l.coerce(base, compute);
            let x2 = mul(l, x, x);
            mul(l, x2, x)
        }
        PowBy::Four => {
            let x = l.coerce(base, compute);
            let x2 = mul(l, x, x);
            mul(l, x2, x2)
        }
        PowBy::MinusOne => {
            let x = l.coerce(base, compute);
            let one = l.constant(Lit::Float(1.0), compute);
            l.push(Inst::Op {
                op: ScalarOp::Div,
                args: vec![one, x],
                compute,
                out: compute,
            })
        }
        PowBy::Half => {
            let x = l.coerce(base, compute);
            let op = |l: &mut Lowerer, op: ScalarOp, args: Vec<ValueId>| {
                let out = if op.is_predicate() {
                    DType::Bool
                } else {
                    compute
                };
                l.push(Inst::Op {
                    op,
                    args,
                    compute,
                    out,
                })
            };
            let s = op(l, ScalarOp::Sqrt, vec![x]);
            let zero = l.constant(Lit::Float(0.0), compute);
            let s = op(l, ScalarOp::Maximum, vec![s, zero]);
            let ninf = l.constant(Lit::Float(f64::NEG_INFINITY), compute);
            let is_ninf = op(l, ScalarOp::Eq, vec![x, ninf]);
            let inf = l.constant(Lit::Float(f64::INFINITY), compute);
            op(l, ScalarOp::Where, vec![is_ninf, inf, s])
        }
    };
    Some(v)
}
