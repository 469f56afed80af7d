//! Logical ops (and, or, not, xor) and where/clamp.

use super::OpDef;

/// Every op of this family.
pub static OPS: &[&OpDef] = &[];
