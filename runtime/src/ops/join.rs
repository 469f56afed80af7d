//! cat and stack.

use super::OpDef;

/// Every op of this family.
pub static OPS: &[&OpDef] = &[];
