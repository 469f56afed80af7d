//! The backward pass: walks the recorded graph from the roots in dependency order, summing the
//! gradients that reach each node and handing them to its backward function.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use tensorplay_ir::{Error, Result};

use super::mode::{enable_grad, no_grad};
use super::node::{Edge, GradEdge, Node};
use crate::tensor::Tensor;

fn key(node: &Arc<Node>) -> *const Node {
    Arc::as_ptr(node)
}

/// Where `grad()` wants gradients captured: leaves by tensor identity, non-leaves by grad edge.
enum Target {
    Leaf(Tensor),
    Output(*const Node, usize),
}

fn add_into(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        None => g,
        Some(prev) => prev.add(&g)?,
    });
    Ok(())
}

/// Runs backward from `roots`. With `targets == None` gradients accumulate into the `.grad` of
/// every leaf reached; otherwise they are captured for the targets and returned, and no `.grad`
/// changes.
fn run(
    roots: &[Tensor],
    root_grads: Vec<Tensor>,
    targets: Option<&[Target]>,
    create_graph: bool,
) -> Result<Vec<Option<Tensor>>> {
    let _mode = if create_graph {
        enable_grad()
    } else {
        no_grad()
    };
    let mut sink = Sink {
        targets,
        create_graph,
        captured: vec![None; targets.map_or(0, |t| t.len())],
        pending: HashMap::new(),
    };
    let mut walk = Walk::default();
    let leaf_grads = walk.seed(roots, root_grads)?;
    walk.reach_all();
    let mut deps = walk.dependencies();
    let frame = targets.is_none().then(CallbackFrame::push);
    if targets.is_none() {
        sink.count_hooked_leaves(&walk.nodes, leaf_grads.iter().map(|(l, _)| l));
    }
    for (leaf, g) in leaf_grads {
        sink.leaf(&leaf, g)?;
        sink.leaf_done(&leaf)?;
    }
    walk.backward(&mut deps, &mut sink)?;
    if let Some(frame) = frame {
        frame.run()?;
    }
    Ok(sink.captured)
}

thread_local! {
    /// Callbacks queued by the `backward()` passes running on this thread, innermost last.
    static CALLBACKS: RefCell<Vec<Vec<Callback>>> = const { RefCell::new(Vec::new()) };
}

type Callback = Box<dyn FnOnce() -> Result<()>>;

/// The callback list of one running `backward()` pass (popped when the pass ends, run or not).
struct CallbackFrame;

impl CallbackFrame {
    fn push() -> CallbackFrame {
        CALLBACKS.with(|c| c.borrow_mut().push(Vec::new()));
        CallbackFrame
    }

    /// Runs the frame's callbacks in the order queued (a callback may queue more).
    fn run(self) -> Result<()> {
        loop {
            let next = CALLBACKS.with(|c| {
                let mut c = c.borrow_mut();
                let frame = c.last_mut()?;
                (!frame.is_empty()).then(|| frame.remove(0))
            });
            match next {
                Some(f) => f()?,
                None => return Ok(()),
            }
        }
    }
}

impl Drop for CallbackFrame {
    fn drop(&mut self) {
        CALLBACKS.with(|c| c.borrow_mut().pop());
    }
}

/// Queues `f` to run when the `backward()` pass running on this thread has delivered every
/// gradient (after the last post-accumulate hook), before `backward()` returns; an error from
/// `f` is the pass's error. PyTorch's `Variable._execution_engine.queue_callback`: how a hook
/// that starts work for a group of gradients makes the pass wait for it. Only callable from
/// inside a pass (a hook); elsewhere an error.
///
/// ```
/// use std::sync::Arc;
/// use tensorplay_core::{DType, Tensor, autograd};
/// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
/// let _h = w.register_post_accumulate_grad_hook(Arc::new(|leaf: &Tensor| {
///     let leaf = leaf.clone();
///     autograd::queue_callback(Box::new(move || {
///         // Runs after the pass: scale the gradient in place.
///         leaf.grad().unwrap().mul_(&Tensor::scalar(0.5f32))?;
///         Ok(())
///     }))
/// }))?;
/// (&w * 4.0)?.sum_all()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![2.0, 2.0]);
/// assert!(autograd::queue_callback(Box::new(|| Ok(()))).is_err());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn queue_callback(f: Box<dyn FnOnce() -> Result<()>>) -> Result<()> {
    CALLBACKS.with(|c| match c.borrow_mut().last_mut() {
        Some(frame) => {
            frame.push(f);
            Ok(())
        }
        None => Err(Error::Autograd(
            "queue_callback: no backward() pass is running on this thread (call it from a \
             post-accumulate-grad hook)"
                .into(),
        )),
    })
}

/// The recorded graph one backward pass walks: the nodes reached from the roots (in the order
/// first reached), their index, and the gradient buffer of each node's outputs.
#[derive(Default)]
struct Walk {
    nodes: Vec<Arc<Node>>,
    index: HashMap<*const Node, usize>,
    buffers: Vec<Vec<Option<Tensor>>>,
    /// Nodes reached whose edges are not followed yet.
    stack: Vec<Arc<Node>>,
}

impl Walk {
    /// The index of `n`, adding it (with empty gradient buffers) when first reached.
    fn visit(&mut self, n: &Arc<Node>) -> usize {
        *self.index.entry(key(n)).or_insert_with(|| {
            self.nodes.push(n.clone());
            self.buffers.push(vec![None; n.output_meta.len()]);
            self.stack.push(n.clone());
            self.nodes.len() - 1
        })
    }

    /// Puts each root's gradient into its node's buffer; returns the gradients of roots that are
    /// leaves (they reach no node).
    fn seed(&mut self, roots: &[Tensor], root_grads: Vec<Tensor>) -> Result<Vec<(Tensor, Tensor)>> {
        let mut leaf_grads: Vec<(Tensor, Tensor)> = Vec::new();
        for (t, g) in roots.iter().zip(root_grads) {
            match t.grad_edge() {
                Some(GradEdge { node, output }) => {
                    let i = self.visit(node);
                    add_into(&mut self.buffers[i][*output], g)?;
                }
                None if t.requires_grad() => leaf_grads.push((t.clone(), g)),
                None => {
                    return Err(Error::Autograd(
                        "a tensor passed to backward does not require grad and has no grad_fn"
                            .into(),
                    ));
                }
            }
        }
        Ok(leaf_grads)
    }

    /// Follows edges from the seeded nodes until every reachable node is visited.
    fn reach_all(&mut self) {
        while let Some(n) = self.stack.pop() {
            for e in n.next.iter().flatten() {
                if let Edge::Node(GradEdge { node, .. }) = e {
                    self.visit(node);
                }
            }
        }
    }

    /// How many edges of reached nodes lead into each node: a node runs when its count is 0.
    fn dependencies(&self) -> Vec<usize> {
        let mut deps = vec![0usize; self.nodes.len()];
        for n in &self.nodes {
            for e in n.next.iter().flatten() {
                if let Edge::Node(GradEdge { node, .. }) = e {
                    deps[self.index[&key(node)]] += 1;
                }
            }
        }
        deps
    }

    /// Runs each node once all its gradients are in (dependency order), handing its input
    /// gradients to the nodes and leaves its edges lead to.
    fn backward(&mut self, deps: &mut [usize], sink: &mut Sink) -> Result<()> {
        let mut ready: Vec<usize> = (0..self.nodes.len()).filter(|&i| deps[i] == 0).collect();
        while let Some(i) = ready.pop() {
            let node = self.nodes[i].clone();
            let grads = std::mem::take(&mut self.buffers[i]);
            sink.node_outputs(&node, &grads)?;
            let input_grads = if grads.iter().any(Option::is_some) {
                node.run(&grads)?
            } else {
                vec![None; node.next.len()]
            };
            for (edge, g) in node.next.iter().zip(input_grads) {
                match edge {
                    Some(Edge::Node(GradEdge { node: next, output })) => {
                        let j = self.index[&key(next)];
                        if let Some(g) = g {
                            let want = next.output_meta[*output].1;
                            let g = if g.dtype() != want {
                                g.to_dtype(want)?
                            } else {
                                g
                            };
                            add_into(&mut self.buffers[j][*output], g)?;
                        }
                        deps[j] -= 1;
                        if deps[j] == 0 {
                            ready.push(j);
                        }
                    }
                    Some(Edge::Leaf(leaf)) => {
                        if let Some(g) = g {
                            sink.leaf(leaf, g)?;
                        }
                        sink.leaf_done(leaf)?;
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }
}

/// Where a backward pass's gradients go: into the targets' captures (`grad()`), or into every
/// leaf's `.grad` (`backward()`).
struct Sink<'a> {
    targets: Option<&'a [Target]>,
    create_graph: bool,
    captured: Vec<Option<Tensor>>,
    /// Leaves with post-accumulate hooks: the edges (and roots) still to deliver to each.
    pending: HashMap<usize, (Tensor, usize)>,
}

impl Sink<'_> {
    /// Counts, for each hooked leaf, the edges of the reached nodes (and the roots) leading to it.
    fn count_hooked_leaves<'t>(
        &mut self,
        nodes: &'t [Arc<Node>],
        root_leaves: impl Iterator<Item = &'t Tensor>,
    ) {
        let edges = nodes.iter().flat_map(|n| n.next.iter().flatten());
        let leaves = edges.filter_map(|e| match e {
            Edge::Leaf(l) => Some(l),
            Edge::Node(_) => None,
        });
        for leaf in leaves.chain(root_leaves) {
            if leaf.has_post_accumulate_grad_hooks() {
                self.pending
                    .entry(leaf.identity())
                    .or_insert_with(|| (leaf.clone(), 0))
                    .1 += 1;
            }
        }
    }

    /// One edge (or root) leading to `leaf` has delivered; runs its hooks after the last one.
    fn leaf_done(&mut self, leaf: &Tensor) -> Result<()> {
        let id = leaf.identity();
        let Some((_, left)) = self.pending.get_mut(&id) else {
            return Ok(());
        };
        *left -= 1;
        if *left == 0 {
            let (leaf, _) = self.pending.remove(&id).expect("present");
            leaf.run_post_accumulate_grad_hooks()?;
        }
        Ok(())
    }

    /// Delivers a leaf's gradient (cast to its dtype).
    fn leaf(&mut self, leaf: &Tensor, g: Tensor) -> Result<()> {
        let g = if g.dtype() != leaf.dtype() {
            g.to_dtype(leaf.dtype())?
        } else {
            g
        };
        match self.targets {
            Some(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    if let Target::Leaf(l) = t
                        && l.same(leaf)
                    {
                        add_into(&mut self.captured[i], g.clone())?;
                    }
                }
            }
            None => {
                let g = if self.create_graph { g } else { g.detach() };
                leaf.accumulate_grad(g)?;
            }
        }
        Ok(())
    }

    /// Captures the gradients of `node`'s outputs that are targets (non-leaf inputs of `grad()`).
    fn node_outputs(&mut self, node: &Arc<Node>, grads: &[Option<Tensor>]) -> Result<()> {
        if let Some(ts) = self.targets {
            for (ti, t) in ts.iter().enumerate() {
                if let Target::Output(p, out) = t
                    && *p == key(node)
                    && let Some(g) = &grads[*out]
                {
                    add_into(&mut self.captured[ti], g.clone())?;
                }
            }
        }
        Ok(())
    }
}

fn default_root_grads(roots: &[Tensor], grads: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    if grads.len() != roots.len() {
        return Err(Error::argument(
            "backward",
            "grad_tensors",
            format!("{} gradients (one per output)", roots.len()),
            format!("{}", grads.len()),
        ));
    }
    roots
        .iter()
        .zip(grads)
        .map(|(t, g)| match g {
            Some(g) => {
                // Untracked: a traced backward (compiled training) must not guard these sizes.
                if g.shape_untracked() != t.shape_untracked() {
                    return Err(Error::shape(
                        "backward",
                        format!(
                            "the gradient has shape {}, expected {}",
                            tensorplay_ir::shape::fmt_shape(g.shape_untracked()),
                            tensorplay_ir::shape::fmt_shape(t.shape_untracked())
                        ),
                    ));
                }
                if !g.dtype().is_float() {
                    return Err(Error::dtype(
                        "backward",
                        format!(
                            "the gradient of an output must be floating point, got {}",
                            g.dtype()
                        ),
                    ));
                }
                if t.dtype().is_float() && g.dtype() != t.dtype() {
                    // Gradients carry their output's dtype, as PyTorch's engine casts them.
                    g.to_dtype(t.dtype())
                } else {
                    Ok(g.clone())
                }
            }
            None if t.numel() == 1 => Ok(Tensor::ones_like(t)),
            None => Err(Error::Autograd(format!(
                "grad can be implicitly created only for outputs with one element; got shape {}",
                tensorplay_ir::shape::fmt_shape(t.shape())
            ))),
        })
        .collect()
}

/// Computes gradients of `roots` and accumulates them into every leaf reached.
///
/// `grads[i]` is the gradient of `roots[i]` (`None` means ones, allowed for one-element roots).
/// With `create_graph` the backward computation itself is recorded, so gradients can be
/// differentiated again.
pub fn backward(roots: &[Tensor], grads: &[Option<Tensor>], create_graph: bool) -> Result<()> {
    let root_grads = default_root_grads(roots, grads)?;
    run(roots, root_grads, None, create_graph).map(|_| ())
}

/// Returns the gradients of `outputs` with respect to `inputs` without touching any `.grad`.
///
/// An input that `outputs` do not depend on gets `None`.
///
/// ```
/// use tensorplay_core::{Tensor, autograd};
/// let x = Tensor::from_vec(vec![3.0f64], &[1])?.requires_grad_(true)?;
/// let y = (&x * &x)?.sum_all()?;
/// let g = autograd::grad(&[y], &[x.clone()], &[None], false)?;
/// assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>()?, vec![6.0]);
/// assert!(x.grad().is_none());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn grad(
    outputs: &[Tensor],
    inputs: &[Tensor],
    grad_outputs: &[Option<Tensor>],
    create_graph: bool,
) -> Result<Vec<Option<Tensor>>> {
    let root_grads = default_root_grads(outputs, grad_outputs)?;
    let targets: Vec<Target> = inputs
        .iter()
        .map(|t| match t.grad_edge() {
            Some(e) => Ok(Target::Output(key(&e.node), e.output)),
            None if t.requires_grad() => Ok(Target::Leaf(t.clone())),
            None => Err(Error::Autograd(
                "an input passed to grad() does not require grad".into(),
            )),
        })
        .collect::<Result<_>>()?;
    run(outputs, root_grads, Some(&targets), create_graph)
}

impl Tensor {
    /// Backpropagates from this one-element tensor (gradient 1), accumulating into leaves.
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType};
    /// let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
    /// (&w * &w)?.sum_all()?.backward()?;
    /// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![2.0, 4.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn backward(&self) -> Result<()> {
        backward(std::slice::from_ref(self), &[None], false)
    }

    /// Backpropagates with an explicit gradient for this tensor (any shape).
    pub fn backward_with(&self, grad: &Tensor) -> Result<()> {
        backward(std::slice::from_ref(self), &[Some(grad.clone())], false)
    }
}
