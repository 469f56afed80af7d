//! softmax and log_softmax.

use super::OpDef;

/// Every op of this family.
pub static OPS: &[&OpDef] = &[];
