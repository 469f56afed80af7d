//! The one trait every dispatch layer implements, and [`Next`], the rest of the stack below it.

use tensorplay_ir::{Error, Result};

use super::op::OpHandle;
use super::{LAYERS, trace};
use crate::tensor::Tensor;
use crate::value::Value;

/// One step of the dispatcher. A layer either handles the call itself (possibly re-dispatching
/// other calls from the top) or passes it, perhaps with changed arguments, to `next`.
pub trait Layer: Sync {
    /// The name traces print (`TP_LOGS=dispatch`).
    fn name(&self) -> &'static str;
    /// Handles one call of `op`.
    fn call(&self, op: OpHandle<'_>, args: &[Value], next: Next) -> Result<Vec<Tensor>>;
}

/// The layers below the current one (an index into the ordered list).
#[derive(Clone, Copy)]
pub struct Next {
    pub(super) at: usize,
    /// Whether this call is traced (decided once, where the call entered the stack).
    pub(super) traced: bool,
}

impl Next {
    /// Passes the call to the next layer down.
    pub fn call(self, op: OpHandle<'_>, args: &[Value]) -> Result<Vec<Tensor>> {
        let Some(layer) = LAYERS.get(self.at) else {
            // The backend layer is last and never passes a call on.
            return Err(Error::unsupported(
                op.name(),
                "dispatch: a call was passed below the backend layer",
            ));
        };
        if self.traced {
            trace::note(layer.name(), op);
        }
        layer.call(
            op,
            args,
            Next {
                at: self.at + 1,
                traced: self.traced,
            },
        )
    }
}
