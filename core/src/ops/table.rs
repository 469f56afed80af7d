//! The op table as a whole: every builtin op ([`all_ops`], the families in order), and the
//! lookups code generators make of a graph call's declaration by its `OpId` ([`builtin`]) — its
//! scalar lowering, reduction or softmax.

use std::sync::OnceLock;

use tensorplay_ir::graph::OpCall;
use tensorplay_ir::{DType, OpId, Result, ScalarExpr};

use super::lowering::{self, BUILTIN_NAMESPACE, Lower, OpLowerings, Pointwise, ReduceSpec};
use super::types::OpDef;

/// Every builtin op, for registration and for tests that sweep the table.
pub fn all_ops() -> Vec<&'static OpDef> {
    let mut v: Vec<&'static OpDef> = Vec::new();
    v.extend_from_slice(super::unary::OPS);
    v.extend_from_slice(super::binary::OPS);
    v.extend_from_slice(super::compare::OPS);
    v.extend_from_slice(super::reduce::OPS);
    v.extend_from_slice(super::shape::OPS);
    v.extend_from_slice(super::inplace::OPS);
    v.extend_from_slice(super::cast::OPS);
    v.extend_from_slice(super::logical::OPS);
    v.extend_from_slice(super::softmax::OPS);
    v.extend_from_slice(super::linalg::OPS);
    v.extend_from_slice(super::join::OPS);
    v.extend_from_slice(super::activation::OPS);
    v.extend_from_slice(super::unary_math::OPS);
    v.extend_from_slice(super::float_class::OPS);
    v.extend_from_slice(super::binary_math::OPS);
    v.extend_from_slice(super::bitwise::OPS);
    v.extend_from_slice(super::clamp_tensor::OPS);
    v.extend_from_slice(super::index::OPS);
    v.extend_from_slice(super::scan::OPS);
    v.extend_from_slice(super::sort::OPS);
    v.extend_from_slice(super::attention::OPS);
    v.extend_from_slice(super::gelu_backward::OPS);
    v.extend_from_slice(super::conv::OPS);
    v.extend_from_slice(super::pool::OPS);
    v
}

/// The builtin op a call names, if it is one (looked up by the call's handle).
///
/// ```
/// use tensorplay_ir::graph::{Arg, OpCall};
/// use tensorplay_ir::OpClass;
/// use tensorplay_core::ops::table::builtin;
/// let call = OpCall::new("tp::exp", OpClass::Elementwise, vec![Arg::Tensor]);
/// assert_eq!(builtin(&call).map(|d| d.name), Some("exp"));
/// assert!(builtin(&OpCall::new("mylib::exp", OpClass::Opaque, vec![])).is_none());
/// ```
pub fn builtin(call: &OpCall) -> Option<&'static OpDef> {
    builtin_by_id(call.op)
}

/// The builtin op with handle `id`.
pub fn builtin_by_id(id: OpId) -> Option<&'static OpDef> {
    static TABLE: OnceLock<Vec<Option<&'static OpDef>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let ops = all_ops();
        let ids: Vec<OpId> = ops
            .iter()
            .map(|d| OpId::of(&format!("{BUILTIN_NAMESPACE}::{}", d.name)))
            .collect();
        let len = ids.iter().map(|i| i.index() + 1).max().unwrap_or(0);
        let mut t = vec![None; len];
        for (id, d) in ids.into_iter().zip(ops) {
            t[id.index()] = Some(d);
        }
        t
    });
    table.get(id.index()).copied().flatten()
}

/// The op table as the kernel lowering reads it ([`OpLowerings`]): each builtin's declared
/// lowering, looked up by the call's `OpId`.
pub struct OpTable;

impl OpLowerings for OpTable {
    fn lowering(&self, call: &OpCall) -> Option<Lower> {
        builtin(call).map(|d| d.lower)
    }
}

/// Whether a call of this builtin can fail on the *values* of its operands (not only on their
/// shapes and dtypes): an elementwise op declared `float_only` whose result dtype is not
/// floating (integer division by zero). Dead-code elimination keeps such calls, so a compiled
/// graph reports the same error eager does even when the result is unused.
///
/// ```
/// use tensorplay_ir::graph::{Arg, OpCall};
/// use tensorplay_ir::{DType, OpClass};
/// use tensorplay_core::ops::table::fails_on_values;
/// let rem = OpCall::new("tp::remainder", OpClass::Elementwise, vec![Arg::Tensor, Arg::Tensor]);
/// assert!(fails_on_values(&rem, DType::I64));
/// assert!(!fails_on_values(&rem, DType::F32));
/// let add = OpCall::new("tp::add", OpClass::Elementwise, vec![Arg::Tensor, Arg::Tensor]);
/// assert!(!fails_on_values(&add, DType::I64));
/// ```
pub fn fails_on_values(call: &OpCall, result: DType) -> bool {
    lowering::fails_on_values(&OpTable, call, result)
}

/// The scalar lowering of a builtin elementwise call: its expression (built from the call's
/// attributes) and declaration; `None` for calls that are not builtin elementwise ops.
///
/// ```
/// use tensorplay_ir::graph::{Arg, OpCall};
/// use tensorplay_ir::{OpClass, ScalarOp};
/// use tensorplay_core::ops::table::pointwise;
/// let call = OpCall::new("tp::exp", OpClass::Elementwise, vec![Arg::Tensor]);
/// let (expr, _) = pointwise(&call)?.unwrap();
/// assert_eq!(expr.single_op(), Some(ScalarOp::Exp));
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn pointwise(call: &OpCall) -> Result<Option<(ScalarExpr, Pointwise)>> {
    lowering::pointwise(&OpTable, call)
}

/// The reduction a builtin reduction op performs: `(op, dims attribute, keepdim)`, where `dims`
/// is `None` for "all dims" and may hold negative dims. `None` for other ops.
pub fn reduce_op(call: &OpCall) -> Result<Option<ReduceSpec>> {
    lowering::reduce_op(&OpTable, call)
}

/// `Some(log)` when the call is a builtin (log-)softmax.
pub fn softmax(call: &OpCall) -> Option<bool> {
    lowering::softmax(&OpTable, call)
}
