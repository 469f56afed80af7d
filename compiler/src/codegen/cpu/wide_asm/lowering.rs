//! Which f32 operations the assembler emits inline at full width ([`lowerable`]) and which it
//! hands to the bulk kernels ([`outlined`]).

use tensorplay_ir::{DType, ScalarOp};

use crate::codegen::cpu::staging::{bulk_addr, bulk_op};

/// Whether `op` has a full-width lowering here: the IEEE operations, the exact sign
/// operations, rounding to integral values, the NaN-propagating `maximum`/`minimum`/`clamp`/
/// `relu`, comparisons and `where` on f32, and the logical operations on their bools (held as
/// all-ones / all-zeros lanes).
pub(super) fn lowerable(op: &ScalarOp) -> bool {
    use ScalarOp::*;
    matches!(
        op,
        Add | Sub
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
            | Mul
            | Div
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
            | Round
    )
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
