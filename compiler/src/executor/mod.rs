//! The executor: runs a compiled graph — fused regions as generated kernels, every other node
//! through the dispatcher — in the plan's order.
//!
//! Shapes are dynamic: kernels take sizes at run time, and the concrete shape of every value is
//! computed once per distinct set of input shapes (by running the ops' meta rules on fake
//! tensors) and cached. Guards fix what kernels were specialised for: input count, rank, dtype,
//! device and which dims have size 1 (the broadcast pattern).
//!
//! Size soundness: shape inference replays the whole captured program (dead nodes included, in
//! capture order) and checks each [`SizeGuard`] right after the value it guards is computed.
//! A failed guard means the graph does not apply (the closure is captured again); an op whose
//! meta rule fails before any guard did fails exactly as eager would (same arguments, same
//! rule), so that error is returned as is.
//!
//! A repeated call does little beyond the kernel itself: the guards are checked once,
//! the shape cache compares the input shapes with its most recent entry before hashing, and each
//! region keeps its last launch plan and kernel, relaunched without planning when the operands
//! have the same shapes and strides (only the data pointers change).
//!
//! The executor's files, by responsibility: this one holds [`CompiledGraph`], its step list and
//! the public calls; `build.rs` turns a graph into the steps ([`CompiledGraph::new`]);
//! `guards.rs` and `shapes.rs` decide whether a call's inputs fit (static guards, then shape
//! inference and its per-shape cache); `node.rs` runs one op node through the dispatcher;
//! `cpu.rs` runs the steps on the CPU (regions, matmul and conv epilogues, the arena);
//! `sole_region.rs` serves graphs that are one region (the hot call, `run_into`,
//! `sole_pointwise_kernel`); `device.rs` runs on a CUDA device; `interpret.rs` runs every node
//! through the dispatcher; `profile.rs` times the steps under `TP_LOGS=profile`.

mod build;
mod cpu;
mod device;
mod guards;
mod interpret;
mod node;
mod profile;
mod shapes;
mod sole_region;
#[cfg(test)]
mod test_util;

use std::collections::HashMap;
use std::sync::Arc;
use tensorplay_ir::CompileKind;

use parking_lot::Mutex;
use smallvec::SmallVec;
use tensorplay_ir::graph::{SizeGuard, SymGuard};
use tensorplay_ir::{DType, Device, Error, Graph, Result, Shape, SymExpr, ValueRef};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::is_grad_enabled;

use crate::arena::Arena;
use crate::codegen::cpu::{CompiledKernel, LaunchPlan, ScalarArgs};
use crate::codegen::kernel::LoweredRegion;
use crate::passes::{BufferPlan, FusionPlan, logging};

use device::cuda_device;
use guards::Guard;
use node::NodeCall;
use shapes::ShapeCache;
pub(crate) use shapes::{Admission, ShapeEntry};
pub(crate) use sole_region::SoleKernel;
use sole_region::{HotCall, SoleRegion};

/// One fused region with its lowered kernel spec.
struct RegionRun {
    /// The region's number in the fusion plan.
    index: usize,
    lowered: LoweredRegion,
    /// The kernel's scalar arguments (the region's scalar constants), encoded once.
    params: ScalarArgs,
    ins: Vec<usize>,
    outs: Vec<usize>,
    /// The value whose shape is the loop's iteration shape.
    iter_value: usize,
    /// The last launch's plan and kernel: a call whose operands have the same shapes and
    /// strides relaunches it without planning or a kernel-cache lookup.
    last: Mutex<Option<Arc<CachedLaunch>>>,
}

/// A region's last launch: its plan (detached from the tensors of that call) and the kernel
/// compiled for the plan's layout.
struct CachedLaunch {
    plan: LaunchPlan,
    kernel: Arc<CompiledKernel>,
}

/// The value environment of one run (dense ids); inline for small graphs.
type Env = SmallVec<[Option<Tensor>; 16]>;

enum Exec {
    Node(NodeCall),
    /// Boxed: a region (its lowered spec, scalar arguments and cached launch) is much larger
    /// than a node call.
    Region(Box<RegionRun>),
    /// A matmul or conv2d and the pointwise region that alone reads its product, run chunk
    /// by chunk (`epilogue.rs`).
    Epilogue(Box<EpilogueRun>),
}

/// Which product an [`EpilogueRun`] fuses with its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProductKind {
    /// A 2-D `matmul`, split into panels of rows.
    Matmul,
    /// A `conv2d`, split into chunks of images.
    Conv2d,
}

impl ProductKind {
    /// The explain() line for `node` fused with region `region`.
    fn describe(self, node: &str, region: usize) -> String {
        let (name, piece) = match self {
            ProductKind::Matmul => ("matmul", "a panel of the product's rows"),
            ProductKind::Conv2d => ("conv", "a chunk of the convolution's images"),
        };
        format!(
            "{name} epilogue: {node} and region {region} run as one step (each thread \
             computes {piece}, then runs the region on it)"
        )
    }
}

/// A matmul or conv2d step fused with the pointwise region after it: the product
/// (`product.outs[0]`) is read by nothing else and has the region's iteration shape.
struct EpilogueRun {
    kind: ProductKind,
    product: NodeCall,
    region: RegionRun,
}

impl EpilogueRun {
    /// The product's value id.
    fn value(&self) -> usize {
        self.product.outs[0]
    }
}

/// A graph compiled by [`tp_compile`](crate::tp_compile).
pub struct CompiledGraph {
    graph: Graph,
    plan: FusionPlan,
    buffers: BufferPlan,
    guards: Vec<Guard>,
    /// Dense value ids.
    ids: HashMap<ValueRef, usize>,
    num_values: usize,
    /// Dtype of every value.
    dtypes: Vec<DType>,
    input_ids: Vec<usize>,
    output_ids: Vec<usize>,
    constants: Vec<(usize, Tensor)>,
    steps: Vec<Exec>,
    /// Set when `steps` is exactly one region that maps straight onto the graph's inputs and
    /// outputs.
    sole: Option<SoleRegion>,
    /// The last call, for graphs with a direct [`SoleRegion`].
    hot: Mutex<Option<HotCall>>,
    /// For each step, the values whose last use it is (dropped after the step).
    dies_after: Vec<Vec<usize>>,
    /// The buffer plan's slot of every value (dense ids; `None` outside the arena).
    slot_of_id: Vec<Option<usize>>,
    /// The intermediates' memory, kept across calls.
    arena: Arena,
    /// Every op node in topological order (for the autograd path).
    calls: Vec<NodeCall>,
    /// Every op node of the graph as captured (before DCE), in capture order, with the checks
    /// to make after it: shape inference replays these.
    check_calls: Vec<shapes::ReplayCall>,
    /// Size guards on the graph inputs.
    input_size_guards: Vec<(usize, SizeGuard)>,
    /// Conditions on the input dims (checked before the replay).
    sym_guards: Vec<SymGuard>,
    /// Where each symbol `s{k}` comes from: (input, dim) of its first occurrence.
    sym_src: Vec<(usize, usize)>,
    /// Input dims that must equal an expression of the bound symbols — later occurrences of a
    /// symbol (two inputs capture found to share a size) and derived dims: (input, dim, size).
    dim_checks: Vec<(usize, usize, SymExpr)>,
    /// Constants of the graph as captured (dead ones included).
    check_constants: Vec<(usize, Tensor)>,
    shape_cache: Mutex<ShapeCache>,
    /// What autograd did at each node during capture, for the interpreter (empty unless the
    /// graph was captured for replay under autograd: `interpret.rs`, `crate::grad_plan`).
    grad_plan: crate::grad_plan::GradPlan,
    /// Time per step under `TP_LOGS=profile` (`profile.rs`).
    clock: profile::StepClock,
}

/// The tensors of region `r`'s inputs in `env` (each computed by an earlier step).
fn region_inputs<'a>(
    r: &RegionRun,
    env: &'a [Option<Tensor>],
) -> Result<SmallVec<[&'a Tensor; 8]>> {
    r.ins
        .iter()
        .map(|&i| {
            env[i].as_ref().ok_or_else(|| {
                Error::compile(
                    CompileKind::Launch,
                    format!("region input {i} not computed"),
                )
            })
        })
        .collect()
}

impl CompiledGraph {
    /// The graph after dead-code elimination.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The fusion plan.
    pub fn plan(&self) -> &FusionPlan {
        &self.plan
    }

    /// The intermediate-buffer plan.
    pub fn buffer_plan(&self) -> &BufferPlan {
        &self.buffers
    }

    /// Regions, their ops, and which barrier (and why) split them; then the size guards, if
    /// capture recorded any.
    pub fn explain(&self) -> String {
        let mut text = self.plan.explain(&self.graph);
        for e in self.steps.iter().filter_map(|s| match s {
            Exec::Epilogue(e) => Some(e),
            _ => None,
        }) {
            let line = e
                .kind
                .describe(&self.graph.describe(e.product.node), e.region.index);
            text.push_str(&line);
            text.push('\n');
        }
        let guards = self.graph.size_guards();
        if !guards.is_empty() {
            text.push_str("size guards (sizes the captured code read as plain integers):\n");
            for g in guards {
                let node = self.graph.describe(g.value.node);
                text.push_str(&format!("  {g}  ({node})\n"));
            }
        }
        if !self.sym_guards.is_empty() {
            text.push_str("symbolic size guards (conditions on the input dims the captured code relied on):\n");
            for g in &self.sym_guards {
                text.push_str(&format!("  {g}\n"));
            }
        }
        text
    }

    /// The graph as DOT, fused regions drawn as clusters.
    pub fn to_dot(&self) -> String {
        self.plan.to_dot(&self.graph)
    }

    /// Number of fused regions (kernels).
    pub fn num_kernels(&self) -> usize {
        self.plan.regions.len()
    }

    /// Bytes of intermediate memory the graph keeps between calls (its arena: the buffer
    /// plan's slots, each as large as the largest value it held). Zero before the first call,
    /// and for graphs without intermediates.
    ///
    /// ```
    /// use tensorplay_compiler::capture::{CaptureOptions, capture};
    /// use tensorplay_compiler::executor::CompiledGraph;
    /// use tensorplay_ir::{DType, Device, TensorMeta};
    /// use tensorplay_runtime::Tensor;
    /// // exp(x) + 1, a cumulative sum (a barrier), then * 2: exp(x) + 1 is an intermediate.
    /// let m = TensorMeta::new(&[1000], DType::F32, Device::Cpu);
    /// let g = capture(
    ///     |xs| Ok(vec![xs[0].exp()?.add_scalar(1.0)?.cumsum(0, None)?.mul_scalar(2.0)?]),
    ///     &[m],
    ///     CaptureOptions::default(),
    /// )?;
    /// let c = CompiledGraph::new(&g)?;
    /// assert_eq!(c.arena_bytes(), 0);
    /// c.run(&[Tensor::ones(&[1000], DType::F32)])?;
    /// assert!(c.arena_bytes() >= 4000); // exp(x) + 1, and the cumulative sum
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn arena_bytes(&self) -> usize {
        self.arena.held_bytes()
    }

    fn env_with_inputs(&self, inputs: &[Tensor]) -> Env {
        let mut env: Env = SmallVec::from_elem(None, self.num_values);
        for (&i, t) in self.input_ids.iter().zip(inputs) {
            env[i] = Some(t.clone());
        }
        for (i, t) in &self.constants {
            env[*i] = Some(t.clone());
        }
        env
    }

    fn collect_outputs(&self, env: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
        self.output_ids
            .iter()
            .map(|&i| {
                env[i].clone().ok_or_else(|| {
                    Error::compile(
                        CompileKind::Launch,
                        format!("output value {i} was never computed"),
                    )
                })
            })
            .collect()
    }

    /// Launches region `r` writing `outs` (all operands on `device`: its CPU kernel, or its
    /// CUDA kernel on a CUDA device), then binds them in `env`.
    fn launch_region(
        &self,
        r: &RegionRun,
        shapes: &[Shape],
        env: &mut [Option<Tensor>],
        outs: SmallVec<[Tensor; 4]>,
        device: Device,
    ) -> Result<()> {
        // The operand references borrow `env` and `outs` until the launch is done.
        {
            let in_refs = region_inputs(r, env)?;
            let out_refs: SmallVec<[&Tensor; 4]> = outs.iter().collect();
            let iter_shape = &shapes[r.iter_value];
            if device == Device::Cpu {
                self.launch(r, iter_shape, &in_refs, &out_refs)?;
            } else {
                self.launch_on_device(r, iter_shape, &in_refs, &out_refs, device)?;
            }
        }
        for (&o, t) in r.outs.iter().zip(outs) {
            env[o] = Some(t);
        }
        Ok(())
    }

    /// Runs the graph on `inputs`. When gradients are needed (grad mode on and an input requires
    /// grad), the graph is interpreted op by op through the dispatcher so autograd records it
    /// (`TP_LOGS=fallback` says so). Inputs that fail a guard are an error.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        if let Some(outs) = self.run_hot(inputs) {
            return outs;
        }
        match self.admit(inputs)? {
            Admission::Run(shapes) => self.run_admitted(inputs, &shapes),
            Admission::Miss(why) => Err(Error::compile(
                CompileKind::Guard,
                format!("size guard failed: {why}; recompile for this input"),
            )),
        }
    }

    /// [`CompiledGraph::run`] for inputs already admitted ([`Self::accepts`] and
    /// [`Self::admit`]).
    pub(crate) fn run_admitted(
        &self,
        inputs: &[Tensor],
        shapes: &Arc<ShapeEntry>,
    ) -> Result<Vec<Tensor>> {
        if is_grad_enabled() && inputs.iter().any(Tensor::requires_grad) {
            logging::log("fallback", || {
                "an input requires grad: the graph runs op by op through the dispatcher (no \
                 fused kernels) so autograd records it"
                    .to_string()
            });
            let _ac = tensorplay_runtime::autocast::suspend();
            return self.interpret_accepted(inputs, &shapes.syms);
        }
        if let Some(device) = cuda_device(inputs)? {
            let _ac = tensorplay_runtime::autocast::suspend();
            return self.run_on_device(inputs, shapes, device);
        }
        if let (Some(sole), [Exec::Region(r)]) = (&self.sole, self.steps.as_slice())
            && let Some(region_inputs) = &sole.inputs
        {
            let outs = self.run_sole(sole, region_inputs, r, inputs, &shapes.shapes, None)?;
            self.remember_hot(r, inputs, shapes);
            return Ok(outs);
        }
        // Autocast's casts were recorded at capture: the graph runs as recorded.
        let _ac = tensorplay_runtime::autocast::suspend();
        let mut slots = self.arena.take();
        let outs = self.run_steps(inputs, shapes, &mut slots);
        self.arena.put_back(slots);
        outs
    }

    /// The shapes of the graph's outputs for the inputs `entry` was inferred for.
    pub(crate) fn output_shapes(&self, entry: &ShapeEntry) -> Vec<Shape> {
        self.output_ids
            .iter()
            .map(|&i| entry.shapes.get(i).cloned().unwrap_or_default())
            .collect()
    }

    /// Dense id of a graph value (for tests and tools).
    pub fn value_id(&self, v: ValueRef) -> Option<usize> {
        self.ids.get(&v).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use crate::executor::test_util::{bits, f};
    use tensorplay_ir::Device;
    use tensorplay_ir::TensorMeta;

    #[test]
    fn concurrent_calls_of_one_graph_agree_with_eager() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let sets: Vec<[Tensor; 2]> = vec![
            [
                Tensor::randn_seeded(&[6, 5], DType::F32, 2)?,
                Tensor::randn_seeded(&[6, 5], DType::F32, 3)?,
            ],
            [
                base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?,
                Tensor::randn_seeded(&[6, 5], DType::F32, 4)?,
            ],
            [
                Tensor::randn_seeded(&[300, 70], DType::F32, 5)?,
                Tensor::randn_seeded(&[300, 70], DType::F32, 6)?,
            ],
        ];
        let want: Vec<Vec<u32>> = sets
            .iter()
            .map(|s| f(s).map(|o| bits(&o[0])))
            .collect::<Result<_>>()?;
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (c, sets, want) = (&c, &sets, &want);
                scope.spawn(move || {
                    for i in 0..300 {
                        let k = (i + t) % sets.len();
                        let got = c.run(&sets[k]).expect("the graph runs");
                        assert_eq!(bits(&got[0]), want[k], "thread {t}, call {i}");
                    }
                });
            }
        });
        Ok(())
    }
}
