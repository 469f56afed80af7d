//! Backward graph nodes: what an op recorded so that its gradients can be computed later.

use std::cell::RefCell;
use std::sync::Arc;

use tensorplay_ir::{DType, Error, Result, Shape};

use crate::storage::Storage;
use crate::tensor::Tensor;

/// Computes input gradients from output gradients for one recorded op call.
pub trait BackwardFn: Send + Sync {
    /// `grads[i]` is the gradient of output `i` (`None` when no gradient reached it). Returns one
    /// entry per tensor input of the call, in order (list items flattened); `None` where an input
    /// gets no gradient.
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>>;
}

/// Where the gradient of one tensor input flows.
pub(crate) enum Edge {
    /// Into output `output` of another node.
    Node(GradEdge),
    /// Into the `.grad` of a leaf tensor that requires grad.
    Leaf(Tensor),
}

/// A node plus which of its outputs a tensor is.
#[derive(Clone)]
pub(crate) struct GradEdge {
    pub(crate) node: Arc<Node>,
    pub(crate) output: usize,
}

/// One recorded op call in the backward graph.
pub struct Node {
    name: String,
    backward: Box<dyn BackwardFn>,
    /// One per tensor input (flattened), `None` for inputs that need no gradient.
    pub(crate) next: Vec<Option<Edge>>,
    /// Shape and dtype of each tensor input, to check the gradients backward returns.
    pub(crate) input_meta: Vec<(Shape, DType)>,
    /// Shape and dtype of each output, to build zero gradients for outputs nobody used.
    pub(crate) output_meta: Vec<(Shape, DType)>,
    /// Storages whose contents backward relies on, with their versions at record time.
    saved_versions: Vec<(Storage, u64)>,
}

impl Node {
    /// The op name shown by `grad_fn_name()` and in errors.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the backward function after checking that nothing it saved was modified in place.
    pub(crate) fn run(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        for (storage, version) in &self.saved_versions {
            if storage.version() != *version {
                return Err(Error::Autograd(format!(
                    "a tensor saved by `{}` for backward was modified by an in-place operation \
                     (version {} at record time, now {})",
                    self.name,
                    version,
                    storage.version()
                )));
            }
        }
        let out = self.backward.apply(grads)?;
        if out.len() != self.input_meta.len() {
            return Err(Error::Autograd(format!(
                "backward of `{}` returned {} gradients, expected {} (one per tensor input)",
                self.name,
                out.len(),
                self.input_meta.len()
            )));
        }
        for (i, (g, (shape, _))) in out.iter().zip(&self.input_meta).enumerate() {
            if let Some(g) = g
                && g.shape_untracked() != shape.as_slice()
            {
                return Err(Error::Autograd(format!(
                    "backward of `{}` returned a gradient of shape {} for input {i}, expected {}",
                    self.name,
                    tensorplay_ir::shape::fmt_shape(g.shape_untracked()),
                    tensorplay_ir::shape::fmt_shape(shape)
                )));
            }
        }
        Ok(out)
    }
}

/// The backward left in a node while it is torn down (never run: the node is unreachable).
struct Released;

impl BackwardFn for Released {
    fn apply(&self, _grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        Err(Error::Autograd("backward of a released node".into()))
    }
}

/// Parts of a dropped node whose own drop may release further nodes (held only to be dropped).
struct Deferred {
    _edges: Vec<Option<Edge>>,
    _backward: Box<dyn BackwardFn>,
}

thread_local! {
    /// While a node drop is draining on this thread: the parts still to drop.
    static DROP_QUEUE: RefCell<Option<Vec<Deferred>>> = const { RefCell::new(None) };
}

impl Drop for Node {
    /// Drops long chains iteratively: a node's edges (and the tensors its backward saved) hold the
    /// previous nodes, so a naive drop of a 100,000-op chain would recurse that deep and overflow
    /// the stack. The outermost drop on a thread drains a queue; nested drops only enqueue.
    fn drop(&mut self) {
        let item = Deferred {
            _edges: std::mem::take(&mut self.next),
            _backward: std::mem::replace(&mut self.backward, Box::new(Released)),
        };
        let owned = DROP_QUEUE.try_with(|q| {
            let mut q = q.borrow_mut();
            match q.as_mut() {
                Some(queue) => {
                    queue.push(item);
                    None
                }
                None => {
                    *q = Some(Vec::new());
                    Some(item)
                }
            }
        });
        // `Err`: the thread is exiting and its queue is gone; the parts drop right here.
        if let Ok(Some(item)) = owned {
            drop(item);
            while let Some(item) = DROP_QUEUE.with(|q| q.borrow_mut().as_mut().and_then(Vec::pop)) {
                drop(item);
            }
            DROP_QUEUE.with(|q| *q.borrow_mut() = None);
        }
    }
}

/// Attaches a backward node computed by `backward` to `outputs`, as an op call on `inputs` that
/// saved `saved` would: how a compiled training graph makes its outputs' history run its compiled
/// backward. `backward` returns one gradient per tensor in `inputs`; `saved` are version-checked
/// like an op's saved tensors.
pub fn attach_backward(
    name: &str,
    backward: Box<dyn BackwardFn>,
    inputs: &[&Tensor],
    saved: &[&Tensor],
    outputs: Vec<Tensor>,
) -> Vec<Tensor> {
    record(name, backward, inputs, saved, outputs)
}

/// Records a node for a call whose tensor inputs are `inputs` (flattened) and whose results are
/// `outputs`, attaching it as their grad_fn. `saved` lists tensors whose data backward reads.
pub(crate) fn record(
    name: &str,
    backward: Box<dyn BackwardFn>,
    inputs: &[&Tensor],
    saved: &[&Tensor],
    outputs: Vec<Tensor>,
) -> Vec<Tensor> {
    let next = inputs
        .iter()
        .map(|t| {
            if let Some(e) = t.grad_edge() {
                Some(Edge::Node(e.clone()))
            } else if t.requires_grad() {
                Some(Edge::Leaf((*t).clone()))
            } else {
                None
            }
        })
        .collect();
    let mut saved_versions: Vec<(Storage, u64)> = Vec::new();
    for t in saved {
        if !saved_versions.iter().any(|(s, _)| s.same(t.storage())) {
            saved_versions.push((t.storage().clone(), t.version()));
        }
    }
    let node = Arc::new(Node {
        name: name.to_string(),
        backward,
        next,
        input_meta: inputs
            .iter()
            .map(|t| (Shape::from(t.shape_untracked()), t.dtype()))
            .collect(),
        output_meta: outputs
            .iter()
            .map(|t| (Shape::from(t.shape_untracked()), t.dtype()))
            .collect(),
        saved_versions,
    });
    outputs
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            if t.dtype().is_float() {
                t.with_grad_fn(GradEdge {
                    node: node.clone(),
                    output: i,
                })
            } else {
                t
            }
        })
        .collect()
}
