//! Dtype rules every consumer of a spec shares: which compute dtypes a scalar op accepts, the
//! output dtype of a reduction, and the largest finite value of a floating dtype.

use tensorplay_ir::{DType, Error, ReduceOp, Result, ScalarOp};

/// The largest finite value of a floating `dtype` (`nan_to_num`'s default replacement of +inf;
/// its negation replaces -inf).
pub fn largest_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MAX,
        DType::F16 => 65504.0,
        DType::BF16 => f32::from_bits(0x7F7F_0000) as f64,
        _ => f32::MAX as f64,
    }
}

/// Which operand dtypes an op accepts, by compute dtype. Exhaustive on purpose: a new scalar
/// op must state where it computes.
pub(crate) fn op_accepts(op: ScalarOp, compute: DType) -> bool {
    use ScalarOp::*;
    let float = compute.is_float();
    let boolean = compute == DType::Bool;
    match op {
        Math(_) | Sqrt | Rsqrt | Reciprocal | Div | Libm(_) | Libm2(_) => float,
        Pow => !boolean,
        NanToNum { .. } => true,
        BitAnd | BitOr | BitXor | BitNot => !float,
        Shl | Shr => !float && !boolean,
        Neg | Relu | Sub | Floor | Ceil | Round => !boolean,
        Clamp { .. } => !boolean,
        Cast => false,
        LogicalNot | LogicalAnd | LogicalOr | LogicalXor => boolean,
        Abs | Sign | Square | Add | Mul | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge
        | Where => true,
    }
}

/// The output dtype of reduction `op` over values of dtype `d` (eager's rule: float sums, means,
/// products and extrema keep the dtype; integer and bool sums and products give i64; means need
/// a floating input).
///
/// ```
/// use tensorplay_kernel::spec::reduce_out_dtype;
/// use tensorplay_ir::{DType, ReduceOp};
/// assert_eq!(reduce_out_dtype(ReduceOp::Sum, DType::Bool)?, DType::I64);
/// assert_eq!(reduce_out_dtype(ReduceOp::Amax, DType::I32)?, DType::I32);
/// assert!(reduce_out_dtype(ReduceOp::Mean, DType::I64).is_err());
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn reduce_out_dtype(op: ReduceOp, d: DType) -> Result<DType> {
    match op {
        ReduceOp::Sum | ReduceOp::Prod => Ok(if d.is_float() { d } else { DType::I64 }),
        ReduceOp::Mean if !d.is_float() => Err(Error::dtype(
            "mean",
            format!("input dtype must be floating point, got {d}"),
        )),
        _ => Ok(d),
    }
}
