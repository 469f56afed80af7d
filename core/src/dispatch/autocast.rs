//! The autocast layer: inside an autocast region, casts the call's floating inputs as the op
//! handle says (a builtin's table policy, a custom op's registered dtype), then runs the rest of
//! the stack with autocast suspended so that nothing below (batching rules, per-example calls,
//! kernels) casts again. The region state lives in `crate::autocast`.

use tensorplay_ir::Result;

use super::op::OpHandle;
use super::stack::{Autocast, Layer, Next};
use crate::autocast;
use crate::tensor::Tensor;
use crate::value::Value;

impl Layer for Autocast {
    fn name(&self) -> &'static str {
        "autocast"
    }

    fn call(&self, op: OpHandle<'_>, args: &[Value], next: Next) -> Result<Vec<Tensor>> {
        if !autocast::any_active() {
            return next.call(op, args);
        }
        let device = op.device(args)?;
        let Some(cast) = op.autocast_cast(device) else {
            return next.call(op, args);
        };
        match autocast::apply(cast, args, device)? {
            Some(cast_args) => {
                let _off = autocast::suspend();
                next.call(op, &cast_args)
            }
            None => next.call(op, args),
        }
    }
}
