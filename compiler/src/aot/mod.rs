//! Compiled training (AOT autograd): a compiled function called with inputs that require grad
//! captures its forward **and** backward together, splits them, and compiles both halves.
//!
//! How: capture is the dispatcher's bottom layer and autograd sits above it, so running the
//! closure on proxies that require grad makes autograd record backward nodes over the proxies;
//! running `autograd::grad` on those proxies — with one tangent input per differentiable output —
//! records every backward op into the same (joint) graph. Builtin derivatives, the
//! `register_autograd` formulas of opaque custom ops, and the builtin ops inside traced-through
//! custom ops all end up as graph nodes. [`partition`] splits the joint graph into a forward
//! graph (which also returns the saved values) and a backward graph (saved values + tangents →
//! input gradients); both go through DCE, fusion, buffer planning and codegen.
//!
//! At run time the forward graph runs without recording, and one autograd node
//! (`compiled_backward`) holding the backward graph and the saved tensors is attached to the
//! differentiable outputs: `backward()` runs the compiled backward. In-place updates of inputs
//! that do not require grad (buffers) are [`functionalize`]d first: the forward returns their new
//! values and the call copies them into the inputs. A graph that cannot be split (another
//! mutation, an opaque custom op without an autograd formula) runs op by op through the
//! interpreter instead, and the reason is logged under `TP_LOGS=fallback` and kept in
//! [`CompiledFn::training_fallbacks`](crate::CompiledFn::training_fallbacks).

mod functionalize;
mod partition;

use std::sync::Arc;

use parking_lot::Mutex;
use tensorplay_ir::{CompileKind, DType, Error, Result, Shape, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::{self, BackwardFn, attach_backward, is_grad_enabled, no_grad};

use crate::capture::{CaptureOptions, capture_for_autograd, capture_joint};
use crate::executor::{Admission, CompiledGraph};
use crate::passes::logging;

pub(crate) use partition::partition;

/// A function's forward and backward, compiled (see the [module docs](self)).
pub struct TrainingGraph {
    forward: CompiledGraph,
    backward: Arc<CompiledGraph>,
    /// Which inputs require grad (part of the guards: the graph differentiates exactly these).
    requires_grad: Vec<bool>,
    num_outputs: usize,
    num_saved: usize,
    /// Primal inputs whose shapes the backward takes (see [`partition`]).
    shape_carriers: Vec<usize>,
    recomputed: usize,
    /// Forward outputs that get a tangent (they require grad), in tangent order.
    diff_outputs: Vec<usize>,
    /// Inputs that require grad, in the order the backward node lists them.
    grad_inputs: Vec<usize>,
    /// For each of `grad_inputs`: which backward output is its gradient (`None`: it gets none).
    grad_slots: Vec<Option<usize>>,
    /// Inputs the function updates in place (buffers), in the order the forward returns their
    /// new values (after the function's outputs); see [`functionalize`].
    updated: Vec<usize>,
}

/// What a joint capture learned about the closure's outputs and gradients.
#[derive(Default)]
struct JointInfo {
    num_outputs: usize,
    diff_outputs: Vec<usize>,
    grad_slots: Vec<Option<usize>>,
}

impl TrainingGraph {
    /// Captures `f` jointly for inputs shaped like `inputs` whose `requires_grad` flags it keeps,
    /// splits and compiles both halves.
    pub fn new(
        f: &(dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync),
        inputs: &[Tensor],
        opts: CaptureOptions,
    ) -> Result<TrainingGraph> {
        let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
        let requires_grad: Vec<bool> = inputs.iter().map(Tensor::requires_grad).collect();
        let grad_inputs: Vec<usize> = (0..inputs.len()).filter(|&i| requires_grad[i]).collect();
        let mut info = JointInfo::default();
        let joint = capture_joint(
            f,
            &metas,
            opts,
            &requires_grad,
            |proxies, outs, new_input| {
                info.num_outputs = outs.len();
                info.diff_outputs = (0..outs.len())
                    .filter(|&i| outs[i].requires_grad())
                    .collect();
                if info.diff_outputs.is_empty() {
                    return Err(Error::compile(
                        CompileKind::Capture,
                        "compiled training: no output of the function requires grad",
                    ));
                }
                let roots: Vec<Tensor> =
                    info.diff_outputs.iter().map(|&i| outs[i].clone()).collect();
                let tangents: Vec<Option<Tensor>> = roots
                    .iter()
                    .map(|t| new_input(t).map(Some))
                    .collect::<Result<_>>()?;
                let targets: Vec<Tensor> =
                    grad_inputs.iter().map(|&i| proxies[i].clone()).collect();
                let grads = autograd::grad(&roots, &targets, &tangents, false)?;
                let mut all = outs;
                for g in grads {
                    info.grad_slots.push(g.map(|g| {
                        all.push(g);
                        all.len() - info.num_outputs - 1
                    }));
                }
                Ok(all)
            },
        )?;
        logging::log("aot", || format!("joint graph:\n{joint}"));
        let (joint, updated) =
            match functionalize::functionalize(&joint, &requires_grad, info.num_outputs)? {
                Some(f) => {
                    logging::log("aot", || format!("functional joint graph:\n{}", f.graph));
                    (f.graph, f.updated)
                }
                None => (joint, Vec::new()),
            };
        let split = partition(
            &joint,
            inputs.len(),
            info.num_outputs + updated.len(),
            opts.dynamic,
        )?;
        if let Some(k) = split.saved_inputs.iter().find(|k| updated.contains(k)) {
            return Err(Error::compile(
                CompileKind::Capture,
                format!(
                    "compiled training: input {k} is updated in place and the backward reads \
                     it; such mutations are not split into forward and backward"
                ),
            ));
        }
        logging::log("aot", || {
            format!(
                "forward graph:\n{}\nbackward graph:\n{}",
                split.forward, split.backward
            )
        });
        Ok(TrainingGraph {
            forward: CompiledGraph::new(&split.forward)?,
            backward: Arc::new(CompiledGraph::new(&split.backward)?),
            requires_grad,
            num_outputs: info.num_outputs,
            num_saved: split.num_saved,
            shape_carriers: split.shape_carriers,
            recomputed: split.recomputed,
            diff_outputs: info.diff_outputs,
            grad_inputs,
            grad_slots: info.grad_slots,
            updated,
        })
    }

    /// The compiled forward graph (its outputs: the function's, the new values of the inputs it
    /// updates in place, then the saved values).
    pub fn forward(&self) -> &CompiledGraph {
        &self.forward
    }

    /// The compiled backward graph (inputs: the saved values, one tangent per output that
    /// requires grad, then the shape carriers — data-less tensors shaped like the primal inputs
    /// whose sizes the backward needs and no other input carries; outputs: the gradients).
    pub fn backward(&self) -> &CompiledGraph {
        &self.backward
    }

    /// How many tensors the forward saves for the backward.
    pub fn num_saved(&self) -> usize {
        self.num_saved
    }

    /// Both halves' plans, and what is saved between them.
    pub fn explain(&self) -> String {
        format!(
            "compiled training: forward {} kernel(s), backward {} kernel(s); {} saved value(s) \
             (the forward graph's outputs after its first {}), {} elementwise value(s) recomputed \
             in the backward instead of saved\n== forward ==\n{}== backward ==\n{}",
            self.forward.num_kernels(),
            self.backward.num_kernels(),
            self.num_saved,
            self.num_outputs + self.updated.len(),
            self.recomputed,
            self.forward.explain(),
            self.backward.explain()
        )
    }

    /// True when `inputs` pass both halves' static guards and have the same `requires_grad`
    /// flags as at capture.
    pub fn accepts(&self, inputs: &[Tensor]) -> bool {
        inputs.len() == self.requires_grad.len()
            && inputs
                .iter()
                .zip(&self.requires_grad)
                .all(|(t, &r)| t.requires_grad() == r)
            && self.forward.accepts(inputs)
    }

    /// Data-less tensors shaped like the primal inputs the backward takes shapes from.
    fn carriers(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        self.shape_carriers
            .iter()
            .map(|&i| Tensor::empty_fake(inputs[i].shape(), inputs[i].dtype(), inputs[i].device()))
            .collect()
    }

    /// The backward graph's inputs for the forward's output shapes and the call's inputs
    /// (fakes, for admission).
    fn backward_fakes(&self, out_shapes: &[Shape], inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let metas: Vec<TensorMeta> = self
            .backward
            .graph()
            .inputs()
            .iter()
            .map(|&v| {
                self.backward.graph().meta(v).cloned().ok_or_else(|| {
                    Error::compile(CompileKind::Launch, "backward input without metadata")
                })
            })
            .collect::<Result<_>>()?;
        let shapes = out_shapes[self.num_outputs + self.updated.len()..]
            .iter()
            .chain(self.diff_outputs.iter().map(|&i| &out_shapes[i]));
        let mut fakes: Vec<Tensor> = shapes
            .zip(metas)
            .map(|(s, m)| Tensor::empty_fake(s, m.dtype, m.device))
            .collect();
        fakes.extend(self.carriers(inputs));
        Ok(fakes)
    }

    /// Whether the graph applies to `inputs` (which passed [`Self::accepts`]): the forward's
    /// size guards, then the backward's for the shapes the forward will produce — so a backward
    /// never meets sizes it was not compiled for.
    pub(crate) fn admit(&self, inputs: &[Tensor]) -> Result<Admission> {
        let entry = match self.forward.admit(inputs)? {
            Admission::Run(e) => e,
            miss => return Ok(miss),
        };
        let fakes = self.backward_fakes(&self.forward.output_shapes(&entry), inputs)?;
        if !self.backward.accepts(&fakes) {
            let why = self.backward.guard_failure(&fakes).unwrap_or_default();
            return Ok(Admission::Miss(format!("backward graph: {why}")));
        }
        Ok(match self.backward.admit(&fakes)? {
            Admission::Run(_) => Admission::Run(entry),
            Admission::Miss(why) => Admission::Miss(format!("backward graph: {why}")),
        })
    }

    /// Runs the compiled forward and attaches the compiled backward to the outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if !self.accepts(inputs) {
            return Err(Error::compile(
                CompileKind::Guard,
                format!(
                    "guard failed: {}",
                    self.forward.guard_failure(inputs).unwrap_or_else(|| {
                        "the inputs' requires_grad flags differ from the captured ones".into()
                    })
                ),
            ));
        }
        match self.admit(inputs)? {
            Admission::Run(shapes) => self.run_admitted(inputs, &shapes),
            Admission::Miss(why) => Err(Error::compile(
                CompileKind::Guard,
                format!("size guard failed: {why}; recompile for this input"),
            )),
        }
    }

    pub(crate) fn run_admitted(
        &self,
        inputs: &[Tensor],
        shapes: &Arc<crate::executor::ShapeEntry>,
    ) -> Result<Vec<Tensor>> {
        let mut outs = {
            let _g = no_grad();
            self.forward.run_admitted(inputs, shapes)?
        };
        let saved = outs.split_off(self.num_outputs + self.updated.len());
        self.write_back(inputs, outs.split_off(self.num_outputs))?;
        if !is_grad_enabled() {
            return Ok(outs);
        }
        let out_meta: Vec<(Shape, DType)> = self
            .diff_outputs
            .iter()
            .map(|&i| (Shape::from(outs[i].shape()), outs[i].dtype()))
            .collect();
        let node_inputs: Vec<&Tensor> = self.grad_inputs.iter().map(|&i| &inputs[i]).collect();
        let saved_refs: Vec<&Tensor> = saved.iter().collect();
        let diff: Vec<Tensor> = self.diff_outputs.iter().map(|&i| outs[i].clone()).collect();
        let backward = Box::new(CompiledBackward {
            graph: self.backward.clone(),
            saved: saved.clone(),
            out_meta,
            carriers: self.carriers(inputs),
            grad_slots: self.grad_slots.clone(),
        });
        let attached = attach_backward(
            "compiled_backward",
            backward,
            &node_inputs,
            &saved_refs,
            diff,
        );
        for (&i, t) in self.diff_outputs.iter().zip(attached) {
            outs[i] = t;
        }
        Ok(outs)
    }
}

impl TrainingGraph {
    /// Copies the forward's new values of the updated inputs into their storage, as the eager
    /// in-place ops would have (their version counters move once per call).
    fn write_back(&self, inputs: &[Tensor], values: Vec<Tensor>) -> Result<()> {
        let _g = no_grad();
        for (&k, v) in self.updated.iter().zip(values) {
            inputs[k].copy_(&v)?;
        }
        Ok(())
    }
}

/// The autograd node of a compiled training call: runs the compiled backward graph.
struct CompiledBackward {
    graph: Arc<CompiledGraph>,
    saved: Vec<Tensor>,
    /// Shape and dtype of each differentiable output (zeros for those no gradient reached).
    out_meta: Vec<(Shape, DType)>,
    /// The backward graph's shape carriers for this call (see [`partition`]).
    carriers: Vec<Tensor>,
    grad_slots: Vec<Option<usize>>,
}

impl BackwardFn for CompiledBackward {
    fn apply(&self, grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
        if is_grad_enabled() {
            return Err(Error::Autograd(
                "compiled_backward: backward with create_graph (double backward) through a \
                 compiled training graph is not supported; run the function eagerly to \
                 differentiate twice"
                    .into(),
            ));
        }
        let mut inputs = self.saved.clone();
        for (g, (shape, dtype)) in grads.iter().zip(&self.out_meta) {
            inputs.push(match g {
                Some(g) => g.clone(),
                None => Tensor::zeros(shape, *dtype),
            });
        }
        inputs.extend(self.carriers.iter().cloned());
        let outs = self.graph.run(&inputs)?;
        Ok(self
            .grad_slots
            .iter()
            .map(|s| s.map(|i| outs[i].clone()))
            .collect())
    }
}

/// A compiled function's graph for calls that need gradients.
pub(crate) enum TrainingEntry {
    /// Forward and backward compiled.
    Compiled(Arc<TrainingGraph>),
    /// The graph could not be split (the reason was logged): it runs op by op through the
    /// interpreter, so eager autograd records it.
    Interpreted(Arc<CompiledGraph>),
}

impl TrainingEntry {
    /// Captures `f` for `inputs` (some require grad): jointly when possible, else a plain
    /// capture run by the interpreter, with the reason logged and returned.
    pub(crate) fn new(
        f: &(dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync),
        inputs: &[Tensor],
        opts: CaptureOptions,
    ) -> Result<(TrainingEntry, Option<String>)> {
        match TrainingGraph::new(f, inputs, opts) {
            Ok(t) => Ok((TrainingEntry::Compiled(Arc::new(t)), None)),
            Err(joint_err) => {
                let metas: Vec<TensorMeta> = inputs.iter().map(Tensor::meta).collect();
                let requires_grad: Vec<bool> = inputs.iter().map(Tensor::requires_grad).collect();
                // A closure that cannot be captured at all fails as before.
                let (g, plan) = capture_for_autograd(f, &metas, opts, &requires_grad)?;
                let reason = format!(
                    "compiled training unavailable ({joint_err}); the graph runs op by op \
                     through the interpreter (no fused kernels) so autograd records it"
                );
                logging::log("fallback", || reason.clone());
                Ok((
                    TrainingEntry::Interpreted(Arc::new(
                        CompiledGraph::new(&g)?.with_grad_plan(plan),
                    )),
                    Some(reason),
                ))
            }
        }
    }

    pub(crate) fn accepts(&self, inputs: &[Tensor]) -> bool {
        match self {
            TrainingEntry::Compiled(t) => t.accepts(inputs),
            TrainingEntry::Interpreted(g) => g.accepts(inputs),
        }
    }

    pub(crate) fn guard_failure(&self, inputs: &[Tensor]) -> Option<String> {
        match self {
            TrainingEntry::Compiled(t) if t.accepts(inputs) => match t.admit(inputs) {
                Ok(Admission::Run(_)) => None,
                Ok(Admission::Miss(why)) => Some(format!("size guard failed: {why}")),
                Err(e) => Some(e.to_string()),
            },
            TrainingEntry::Compiled(t) => {
                Some(t.forward.guard_failure(inputs).unwrap_or_else(|| {
                    "the inputs' requires_grad flags differ from the captured ones".into()
                }))
            }
            TrainingEntry::Interpreted(g) => g.guard_failure(inputs),
        }
    }

    pub(crate) fn admit(&self, inputs: &[Tensor]) -> Result<Admission> {
        match self {
            TrainingEntry::Compiled(t) => t.admit(inputs),
            TrainingEntry::Interpreted(g) => g.admit(inputs),
        }
    }

    pub(crate) fn run_admitted(
        &self,
        inputs: &[Tensor],
        shapes: &Arc<crate::executor::ShapeEntry>,
    ) -> Result<Vec<Tensor>> {
        match self {
            TrainingEntry::Compiled(t) => t.run_admitted(inputs, shapes),
            TrainingEntry::Interpreted(g) => g.run_admitted(inputs, shapes),
        }
    }
}

/// A training entry with the autocast state it was captured under.
pub(crate) type KeyedEntry = (Arc<TrainingEntry>, [Option<DType>; 2]);

/// Training entries of a [`CompiledFn`](crate::CompiledFn), newest last, with the fallback
/// reasons met.
#[derive(Default)]
pub(crate) struct TrainingCache {
    pub(crate) entries: Mutex<Vec<KeyedEntry>>,
    pub(crate) fallbacks: Mutex<Vec<String>>,
}
