//! [`Inst`]: one SSA instruction of a kernel body, with the bitwise equality and hashing the
//! kernel cache keys on.

use std::hash::{Hash, Hasher};

use tensorplay_ir::{DType, LibmFn, LibmFn2, MathFn, ScalarOp};

use crate::spec::lit::Lit;

/// Index of an instruction (and of the value it defines) in
/// [`KernelSpec::insts`](crate::spec::KernelSpec::insts).
pub type ValueId = usize;

/// One SSA instruction of a kernel body. Every instruction but `Store` defines the value with its
/// own index.
#[derive(Debug, Clone)]
pub enum Inst {
    /// The element of kernel input `input` at the current point (broadcast and strided loads are
    /// the launcher's business: each input has strides over the iteration space).
    Load { input: usize },
    /// A scalar constant of `dtype` (`value` is already exact in that dtype): only constants
    /// lowering itself introduces (bounds of `clamp`, the pieces of a strength-reduced `pow`).
    Const { value: Lit, dtype: DType },
    /// Scalar kernel argument `index`, of `dtype`: the value of a scalar constant of the graph,
    /// read once per call from [`ScalarArgs`](crate::args::ScalarArgs), so one
    /// compiled kernel serves every value. The `k`-th `Param` of a spec has index `k`.
    Param { index: usize, dtype: DType },
    /// `op` applied to `args` (already of the compute dtype, except `where`'s bool condition and
    /// the bool operands of logical ops), producing `out` (bool for predicates, else `compute`).
    Op {
        op: ScalarOp,
        args: Vec<ValueId>,
        compute: DType,
        out: DType,
    },
    /// A dtype conversion with the runtime's cast rules.
    Cast { arg: ValueId, to: DType },
    /// Writes `value` to kernel output `output` at the current point.
    Store { output: usize, value: ValueId },
}

/// Bitwise identity of a scalar op: its variant and its payload (`Clamp` and `NanToNum` values
/// compared by bits, the math or libm function by its position). Exhaustive on purpose: a variant
/// with a payload left out here would make different ops one cache entry.
fn op_key(op: &ScalarOp) -> (std::mem::Discriminant<ScalarOp>, [Option<u64>; 3]) {
    let bits = |v: &Option<f64>| v.map(f64::to_bits);
    let payload = match op {
        ScalarOp::Clamp { min, max } => [bits(min), bits(max), None],
        ScalarOp::NanToNum {
            nan,
            posinf,
            neginf,
        } => [Some(nan.to_bits()), bits(posinf), bits(neginf)],
        ScalarOp::Math(f) => [
            MathFn::ALL.iter().position(|g| g == f).map(|i| i as u64),
            None,
            None,
        ],
        ScalarOp::Libm(f) => [
            LibmFn::ALL.iter().position(|g| g == f).map(|i| i as u64),
            None,
            None,
        ],
        ScalarOp::Libm2(f) => [
            LibmFn2::ALL.iter().position(|g| g == f).map(|i| i as u64),
            None,
            None,
        ],
        ScalarOp::Neg
        | ScalarOp::Abs
        | ScalarOp::Sqrt
        | ScalarOp::Rsqrt
        | ScalarOp::Reciprocal
        | ScalarOp::Relu
        | ScalarOp::Floor
        | ScalarOp::Ceil
        | ScalarOp::Round
        | ScalarOp::Sign
        | ScalarOp::Square
        | ScalarOp::LogicalNot
        | ScalarOp::Cast
        | ScalarOp::Add
        | ScalarOp::Sub
        | ScalarOp::Mul
        | ScalarOp::Div
        | ScalarOp::Pow
        | ScalarOp::Maximum
        | ScalarOp::Minimum
        | ScalarOp::Eq
        | ScalarOp::Ne
        | ScalarOp::Lt
        | ScalarOp::Le
        | ScalarOp::Gt
        | ScalarOp::Ge
        | ScalarOp::LogicalAnd
        | ScalarOp::LogicalOr
        | ScalarOp::LogicalXor
        | ScalarOp::Where
        | ScalarOp::BitAnd
        | ScalarOp::BitOr
        | ScalarOp::BitXor
        | ScalarOp::BitNot
        | ScalarOp::Shl
        | ScalarOp::Shr => [None; 3],
    };
    (std::mem::discriminant(op), payload)
}

impl PartialEq for Inst {
    fn eq(&self, other: &Self) -> bool {
        use Inst::*;
        match (self, other) {
            (Load { input: a }, Load { input: b }) => a == b,
            (
                Const {
                    value: a,
                    dtype: da,
                },
                Const {
                    value: b,
                    dtype: db,
                },
            ) => a == b && da == db,
            (
                Param {
                    index: a,
                    dtype: da,
                },
                Param {
                    index: b,
                    dtype: db,
                },
            ) => a == b && da == db,
            (
                Op {
                    op: a,
                    args: aa,
                    compute: ca,
                    out: oa,
                },
                Op {
                    op: b,
                    args: ab,
                    compute: cb,
                    out: ob,
                },
            ) => op_key(a) == op_key(b) && aa == ab && ca == cb && oa == ob,
            (Cast { arg: a, to: ta }, Cast { arg: b, to: tb }) => a == b && ta == tb,
            (
                Store {
                    output: a,
                    value: va,
                },
                Store {
                    output: b,
                    value: vb,
                },
            ) => a == b && va == vb,
            _ => false,
        }
    }
}

impl Eq for Inst {}

impl Hash for Inst {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Inst::Load { input } => input.hash(state),
            Inst::Const { value, dtype } => {
                value.hash(state);
                dtype.hash(state);
            }
            Inst::Param { index, dtype } => {
                index.hash(state);
                dtype.hash(state);
            }
            Inst::Op {
                op,
                args,
                compute,
                out,
            } => {
                op_key(op).hash(state);
                args.hash(state);
                compute.hash(state);
                out.hash(state);
            }
            Inst::Cast { arg, to } => {
                arg.hash(state);
                to.hash(state);
            }
            Inst::Store { output, value } => {
                output.hash(state);
                value.hash(state);
            }
        }
    }
}
