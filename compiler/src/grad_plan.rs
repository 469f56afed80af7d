//! What autograd did at each node of a captured graph, for replaying the graph through the
//! dispatcher with autograd on (the interpreter path of a compiled function whose training graph
//! could not be split).
//!
//! A graph value is one tensor, but eager code may have read it through handles that autograd
//! treats differently: a `detach()`ed handle (which capture maps to the same value) and any
//! handle inside a `no_grad` region record no backward edges. Capture notes, for every op node,
//! which of its tensor arguments were passed through a handle that did not require grad, and
//! whether the call recorded nothing although an argument required grad (it ran under
//! `no_grad`, or the op is not differentiable). The replay detaches those arguments and runs
//! those calls under `no_grad`, so it builds exactly the backward edges eager built.

use std::collections::HashMap;

use tensorplay_ir::NodeId;
use tensorplay_runtime::autograd::{GradModeGuard, no_grad};
use tensorplay_runtime::{Tensor, Value};

/// What autograd saw at one node (see the [module docs](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeGrad {
    /// Per tensor argument, in argument order: whether its handle required grad at capture.
    pub(crate) handle_requires_grad: Vec<bool>,
    /// The call recorded no backward node although an argument required grad.
    pub(crate) no_grad: bool,
}

/// [`NodeGrad`] per op node of a captured graph.
#[derive(Debug, Clone, Default)]
pub(crate) struct GradPlan {
    pub(crate) nodes: HashMap<NodeId, NodeGrad>,
}

impl NodeGrad {
    /// Detaches the tensor arguments of `args` whose handle did not require grad at capture,
    /// and returns a `no_grad` guard to hold over the call when the capture recorded nothing.
    pub(crate) fn apply(&self, args: &mut [Value]) -> Option<GradModeGuard> {
        let mut slots = self.handle_requires_grad.iter();
        let mut cut = |t: &mut Tensor| {
            if slots.next() == Some(&false) && t.requires_grad() {
                *t = t.detach();
            }
        };
        for a in args.iter_mut() {
            match a {
                Value::Tensor(t) | Value::OptionalTensor(Some(t)) => cut(t),
                Value::TensorList(ts) => ts.iter_mut().for_each(&mut cut),
                Value::OptionalTensorList(ts) => ts.iter_mut().flatten().for_each(&mut cut),
                _ => {}
            }
        }
        self.no_grad.then(no_grad)
    }
}
