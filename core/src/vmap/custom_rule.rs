//! The shape of a `register_vmap` rule: what a custom op's batching rule receives and returns.

use std::sync::Arc;

use tensorplay_ir::Result;

use crate::tensor::Tensor;
use crate::value::Value;

/// What a vmap rule learns about the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmapInfo {
    /// Size of the vmapped dimension.
    pub batch_size: usize,
    /// The randomness mode of the enclosing `vmap` (`"error"`, `"different"` or `"same"`).
    pub randomness: String,
}

/// `rule(info, in_dims, args) -> (outputs, out_dims)`: `in_dims[i]` is the batch dim of argument
/// `i` (`None` when unbatched); `args` hold the physical (batched) tensors.
pub type VmapRule = Arc<
    dyn Fn(&VmapInfo, &[Option<usize>], &[Value]) -> Result<(Vec<Tensor>, Vec<Option<usize>>)>
        + Send
        + Sync,
>;
