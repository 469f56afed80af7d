//! The backward pass: walks the recorded graph from the roots in dependency order, summing the
//! gradients that reach each node and handing them to its backward function.

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
    let mut captured: Vec<Option<Tensor>> = vec![None; targets.map_or(0, |t| t.len())];

    // Seed buffers and collect reachable nodes.
    let mut nodes: Vec<Arc<Node>> = Vec::new();
    let mut index: HashMap<*const Node, usize> = HashMap::new();
    let mut buffers: Vec<Vec<Option<Tensor>>> = Vec::new();
    let mut stack: Vec<Arc<Node>> = Vec::new();
    let mut visit = |n: &Arc<Node>,
                     nodes: &mut Vec<Arc<Node>>,
                     buffers: &mut Vec<Vec<Option<Tensor>>>,
                     stack: &mut Vec<Arc<Node>>|
     -> usize {
        *index.entry(key(n)).or_insert_with(|| {
            nodes.push(n.clone());
            buffers.push(vec![None; n.output_meta.len()]);
            stack.push(n.clone());
            nodes.len() - 1
        })
    };
    let mut leaf_grads: Vec<(Tensor, Tensor)> = Vec::new();
    for (t, g) in roots.iter().zip(root_grads) {
        match t.grad_edge() {
            Some(GradEdge { node, output }) => {
                let i = visit(node, &mut nodes, &mut buffers, &mut stack);
                add_into(&mut buffers[i][*output], g)?;
            }
            None if t.requires_grad() => leaf_grads.push((t.clone(), g)),
            None => {
                return Err(Error::Autograd(
                    "a tensor passed to backward does not require grad and has no grad_fn".into(),
                ));
            }
        }
    }
    while let Some(n) = stack.pop() {
        for e in n.next.iter().flatten() {
            if let Edge::Node(GradEdge { node, .. }) = e {
                visit(node, &mut nodes, &mut buffers, &mut stack);
            }
        }
    }
    let mut deps = vec![0usize; nodes.len()];
    for n in &nodes {
        for e in n.next.iter().flatten() {
            if let Edge::Node(GradEdge { node, .. }) = e {
                deps[index[&key(node)]] += 1;
            }
        }
    }

    let deliver_leaf =
        |leaf: &Tensor, g: Tensor, captured: &mut Vec<Option<Tensor>>| -> Result<()> {
            let g = if g.dtype() != leaf.dtype() {
                g.to_dtype(leaf.dtype())?
            } else {
                g
            };
            match targets {
                Some(ts) => {
                    for (i, t) in ts.iter().enumerate() {
                        if let Target::Leaf(l) = t
                            && l.same(leaf)
                        {
                            add_into(&mut captured[i], g.clone())?;
                        }
                    }
                }
                None => {
                    let g = if create_graph { g } else { g.detach() };
                    leaf.accumulate_grad(g)?;
                }
            }
            Ok(())
        };
    for (leaf, g) in leaf_grads {
        deliver_leaf(&leaf, g, &mut captured)?;
    }

    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| deps[i] == 0).collect();
    while let Some(i) = ready.pop() {
        let node = nodes[i].clone();
        let grads = std::mem::take(&mut buffers[i]);
        if let Some(ts) = targets {
            for (ti, t) in ts.iter().enumerate() {
                if let Target::Output(p, out) = t
                    && *p == key(&node)
                    && let Some(g) = &grads[*out]
                {
                    add_into(&mut captured[ti], g.clone())?;
                }
            }
        }
        let input_grads = if grads.iter().any(Option::is_some) {
            node.run(&grads)?
        } else {
            vec![None; node.next.len()]
        };
        for (edge, g) in node.next.iter().zip(input_grads) {
            match edge {
                Some(Edge::Node(GradEdge { node: next, output })) => {
                    let j = index[&key(next)];
                    if let Some(g) = g {
                        let want = next.output_meta[*output].1;
                        let g = if g.dtype() != want {
                            g.to_dtype(want)?
                        } else {
                            g
                        };
                        add_into(&mut buffers[j][*output], g)?;
                    }
                    deps[j] -= 1;
                    if deps[j] == 0 {
                        ready.push(j);
                    }
                }
                Some(Edge::Leaf(leaf)) => {
                    if let Some(g) = g {
                        deliver_leaf(leaf, g, &mut captured)?;
                    }
                }
                None => {}
            }
        }
    }
    Ok(captured)
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
