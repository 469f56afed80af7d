//! Which f32 operations the assembler emits inline at full width ([`lowerable`]) and which it
//! hands to the bulk kernels ([`outlined`]).

use tensorplay_ir::{DType, ScalarOp};

use crate::codegen::cpu::staging::{bulk_addr, bulk_op};

/// Whether `op` has a full-width lowering here: the IEEE operations, the exact sign
/// operations, rounding to integral values, the NaN-propagating `maximum`/`minimum`/`clamp`/
/// `relu`, comparisons and `where` on f32, and the logical operations on their bools (held as
/// all-ones / all-zeros lanes). Exhaustive on purpose: a new scalar op states here whether the
/// assembler emits it, so none falls back to 4-lane code unnoticed.
pub(super) fn lowerable(op: &ScalarOp) -> bool {
    use ScalarOp::*;
    match op {
        Add
        | Sub
        | Mul
        | Div
        | Eq
        | Ne
        | Lt
        | Le
        | Gt
        | Ge
        | Where
        | LogicalNot
        | LogicalAnd
        | LogicalOr
        | LogicalXor
        | Sqrt
        | Rsqrt
        | Reciprocal
        | Square
        | Neg
        | Abs
        | Relu
        | Maximum
        | Minimum
        | Clamp { .. }
        | Floor
        | Ceil
        | Round => true,
        // Handed to the bulk kernels when the host has one ([`outlined`]); otherwise (sin, cos
        // and the libm functions, computed in f64 per lane) the kernel keeps 4-lane code.
        Math(_) | Pow | Libm(_) | Libm2(_) => false,
        // Not f32 operations (integers, bools, casts) or not yet written for the assembler.
        Sign | Cast | NanToNum { .. } | BitAnd | BitOr | BitXor | BitNot | Shl | Shr => false,
    }
}

/// The address of the bulk kernel that computes `op` (in f32) at the host's level, for the
/// operations handed to bulk kernels: transcendentals and the general `pow`. Division and `sqrt`
/// have bulk kernels too, but here they run inline at full width.
pub(super) fn outlined(op: &ScalarOp) -> Option<usize> {
    if lowerable(op) {
        return None;
    }
    bulk_op(*op, DType::F32).and_then(bulk_addr)
}
