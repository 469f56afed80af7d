//! matmul (2-D, batched, vector cases) through the gemm crate.

use super::OpDef;

/// Every op of this family.
pub static OPS: &[&OpDef] = &[];
