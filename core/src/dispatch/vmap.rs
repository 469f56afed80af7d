//! The vmap layer: a call with batched arguments (inside `vmap`) goes to the op's batching rule,
//! which unwraps one level and re-dispatches on the physical tensors from the top of the stack;
//! anything else passes down. The levels and rules live in `crate::vmap`.

use tensorplay_ir::Result;

use super::op::OpHandle;
use super::stack::{Layer, Next, Vmap};
use crate::tensor::Tensor;
use crate::value::Value;
use crate::vmap;

impl Layer for Vmap {
    fn name(&self) -> &'static str {
        "vmap"
    }

    fn call(&self, op: OpHandle<'_>, args: &[Value], next: Next) -> Result<Vec<Tensor>> {
        if vmap::any_batched(args) {
            return op.batch(args);
        }
        next.call(op, args)
    }
}
