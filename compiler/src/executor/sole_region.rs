//! Graphs that are exactly one fused region ([`SoleRegion`]): the hot call path (a repeat call
//! straight from the last call's launch), `run_into` (writing caller-given outputs) and
//! `sole_pointwise_kernel` (the kernel handed to callers that launch it themselves).

use std::sync::Arc;
use tensorplay_ir::CompileKind;

use smallvec::SmallVec;
use tensorplay_ir::{Device, Error, Result, Shape};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::is_grad_enabled;

use super::device::cuda_device;
use super::shapes::{Admission, ShapeEntry};
use super::{CachedLaunch, CompiledGraph, Exec, RegionRun};
use crate::codegen::cpu::PlanKey;
use crate::codegen::kernel::{KernelSpec, Lit, LoopKind};
use crate::passes::RegionKind;

/// How a graph that is exactly one fused region maps onto that region, when the region computes
/// exactly the graph's (distinct) outputs.
pub(super) struct SoleRegion {
    /// For each region input, the graph input it reads; `None` when some region input is a
    /// constant of the graph. When set, a call launches the region straight on the caller's
    /// tensors into freshly allocated outputs: no value environment, no arena, no output
    /// collection (the per-call path of small graphs).
    pub(super) inputs: Option<SmallVec<[usize; 8]>>,
    /// For each region output, the graph output it is.
    pub(super) outputs: SmallVec<[usize; 4]>,
}

/// The last call of a graph with a direct [`SoleRegion`]: its inputs' layout, the shapes
/// inferred for them and the launch made. A call whose inputs have the same shapes and strides
/// (and pass the static guards) runs straight from it: no shape-cache lookup, no planning.
pub(super) struct HotCall {
    /// Rank, sizes and strides of every graph input.
    key: PlanKey,
    shapes: Arc<ShapeEntry>,
    launch: Arc<CachedLaunch>,
}

/// How region `r` maps onto a graph with these inputs and outputs (see [`SoleRegion`]).
pub(super) fn sole_region(
    r: &RegionRun,
    input_ids: &[usize],
    output_ids: &[usize],
) -> Option<SoleRegion> {
    let mut distinct = output_ids.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != output_ids.len() || r.outs.len() != output_ids.len() {
        return None;
    }
    let outputs: SmallVec<[usize; 4]> = r
        .outs
        .iter()
        .map(|o| output_ids.iter().position(|g| g == o))
        .collect::<Option<_>>()?;
    let inputs = r
        .ins
        .iter()
        .map(|i| input_ids.iter().position(|g| g == i))
        .collect::<Option<_>>();
    Some(SoleRegion { inputs, outputs })
}

/// A compiled graph that is one pointwise kernel ([`CompiledGraph::sole_pointwise_kernel`]).
pub(crate) struct SoleKernel {
    pub spec: KernelSpec,
    /// The kernel's scalar arguments.
    pub params: Vec<Lit>,
    /// For each kernel input, the graph input it reads.
    pub inputs: Vec<usize>,
    /// For each kernel output, the graph output it is.
    pub outputs: Vec<usize>,
}

impl CompiledGraph {
    /// The call path of a graph with a direct [`SoleRegion`] whose inputs have the last call's
    /// shapes and strides ([`HotCall`]); `None` when that does not apply and the caller takes
    /// the general path. The inputs must pass the static guards ([`Self::accepts`]).
    pub(crate) fn run_hot(&self, inputs: &[Tensor]) -> Option<Result<Vec<Tensor>>> {
        let (Some(sole), [Exec::Region(r)]) = (&self.sole, self.steps.as_slice()) else {
            return None;
        };
        let region_inputs = sole.inputs.as_ref()?;
        if (is_grad_enabled() && inputs.iter().any(Tensor::requires_grad))
            || crate::codegen::hook::current().is_some()
            || inputs.iter().any(|t| t.device() != Device::Cpu)
        {
            return None;
        }
        // The entry is used in place, not cloned: one call at a time runs from it, and a
        // concurrent call takes the general path rather than wait.
        let hot = self.hot.try_lock()?;
        let h = hot.as_ref()?;
        if !h.key.matches(None, inputs) {
            return None;
        }
        Some(self.run_sole(
            sole,
            region_inputs,
            r,
            inputs,
            &h.shapes.shapes,
            Some(&h.launch),
        ))
    }

    /// Keeps a successful call of a direct [`SoleRegion`] graph as the [`HotCall`] (skipped when
    /// another call holds it, or a region hook ran the region).
    pub(super) fn remember_hot(&self, r: &RegionRun, inputs: &[Tensor], shapes: &Arc<ShapeEntry>) {
        if crate::codegen::hook::current().is_some() {
            return;
        }
        let Some(launch) = r.last.lock().clone() else {
            return;
        };
        if let Some(mut hot) = self.hot.try_lock() {
            *hot = Some(HotCall {
                key: PlanKey::new(None, inputs),
                shapes: shapes.clone(),
                launch,
            });
        }
    }

    /// A graph that is one region over its own inputs ([`SoleRegion`]): the region launched on
    /// the caller's tensors, writing fresh outputs in graph-output order (through `cached`, the
    /// hot call's launch, when it fits). Nothing is dispatched, so autocast needs no
    /// suspending.
    pub(super) fn run_sole(
        &self,
        sole: &SoleRegion,
        region_inputs: &[usize],
        r: &RegionRun,
        inputs: &[Tensor],
        shapes: &[Shape],
        cached: Option<&CachedLaunch>,
    ) -> Result<Vec<Tensor>> {
        let outs = self
            .output_ids
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe { Tensor::try_empty_uninit(&shapes[o], self.dtypes[o]) })
            .collect::<Result<Vec<_>>>()?;
        let mut in_refs: SmallVec<[&Tensor; 8]> = SmallVec::with_capacity(region_inputs.len());
        for &i in region_inputs {
            in_refs.push(inputs.get(i).ok_or_else(|| {
                Error::compile(CompileKind::Launch, format!("graph input {i} missing"))
            })?);
        }
        {
            let out_refs: SmallVec<[&Tensor; 4]> = sole.outputs.iter().map(|&g| &outs[g]).collect();
            let iter_shape = &shapes[r.iter_value];
            let relaunched = match cached {
                Some(c) => {
                    c.kernel
                        .relaunch(&c.plan, &in_refs, &out_refs, Some(iter_shape), &r.params)?
                }
                None => false,
            };
            if !relaunched {
                self.launch(r, iter_shape, &in_refs, &out_refs)?;
            }
        }
        Ok(outs)
    }

    /// Runs a graph that is a single pointwise region writing `dests[k]` as its output `k`
    /// instead of fresh buffers (for callers that keep their own output buffers). A destination
    /// must be a real tensor of the output's shape and dtype; it may be exactly an input's
    /// elements (same address, dtype, shape and strides: an update in place, run by the
    /// kernel's in-place variant), and any other overlap with an input is an error. Each
    /// destination's version counter is bumped. Inputs and destinations on a CUDA device run the
    /// region's CUDA kernel there.
    pub fn run_into(&self, inputs: &[Tensor], dests: &[Tensor]) -> Result<()> {
        let err = |msg: String| Error::compile(CompileKind::Launch, format!("run_into: {msg}"));
        let [Exec::Region(r)] = self.steps.as_slice() else {
            return Err(err(format!(
                "the graph must be exactly one fused region, it has {} step(s)",
                self.steps.len()
            )));
        };
        let pointwise = matches!(
            self.plan.regions.first().map(|x| &x.kind),
            Some(RegionKind::Pointwise)
        );
        // Where each region output goes: the destination of the graph output it is.
        let Some(order) = self.sole.as_ref().map(|s| &s.outputs).filter(|_| pointwise) else {
            return Err(err(
                "the region must be pointwise and compute exactly the graph's (distinct) outputs"
                    .into(),
            ));
        };
        if dests.len() != self.output_ids.len() {
            return Err(err(format!(
                "{} destinations for {} outputs",
                dests.len(),
                self.output_ids.len()
            )));
        }
        self.check_guards(inputs)?;
        let shapes = match self.admit(inputs)? {
            Admission::Run(s) => s,
            Admission::Miss(why) => return Err(err(format!("size guard failed: {why}"))),
        };
        for (k, (d, &o)) in dests.iter().zip(&self.output_ids).enumerate() {
            if d.is_fake()
                || d.shape() != shapes.shapes[o].as_slice()
                || d.dtype() != self.dtypes[o]
            {
                return Err(err(format!(
                    "destination {k} is {d:?}, the output is {}{}",
                    self.dtypes[o],
                    tensorplay_ir::shape::fmt_shape(&shapes.shapes[o])
                )));
            }
        }
        let _ac = tensorplay_runtime::autocast::suspend();
        let mut env = self.env_with_inputs(inputs);
        let outs = order.iter().map(|&k| dests[k].clone()).collect();
        let device = cuda_device(inputs)?.unwrap_or(Device::Cpu);
        self.launch_region(r, &shapes.shapes, &mut env, outs, device)?;
        for d in dests {
            d.storage().bump_version();
        }
        Ok(())
    }

    /// The graph as one standalone pointwise kernel: its spec and scalar arguments, which graph
    /// input each kernel input reads and which graph output each kernel output is. An error
    /// unless the graph is exactly one pointwise region over its own inputs (no constant
    /// tensors) computing exactly its (distinct) outputs. For callers that launch the kernel
    /// themselves on operands the executor cannot express — in place, or over a group of
    /// operand sets ([`CompiledKernel::launch_group`], the fused optimizers).
    ///
    /// [`CompiledKernel::launch_group`]: crate::codegen::cpu::CompiledKernel::launch_group
    pub(crate) fn sole_pointwise_kernel(&self) -> Result<SoleKernel> {
        let err = |msg: &str| {
            Error::compile(
                CompileKind::Launch,
                format!("sole_pointwise_kernel: {msg}:\n{}", self.explain()),
            )
        };
        let [Exec::Region(r)] = self.steps.as_slice() else {
            return Err(err("the graph is not exactly one fused region"));
        };
        if !matches!(r.lowered.spec.kind, LoopKind::Pointwise) {
            return Err(err("the region is not pointwise"));
        }
        let sole = self.sole.as_ref().ok_or_else(|| {
            err("the region does not compute exactly the graph's (distinct) outputs")
        })?;
        let inputs = sole
            .inputs
            .clone()
            .ok_or_else(|| err("a kernel input is not a graph input"))?
            .into_vec();
        let outputs = sole.outputs.to_vec();
        Ok(SoleKernel {
            spec: r.lowered.spec.clone(),
            params: r.lowered.params.clone(),
            inputs,
            outputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use crate::executor::test_util::{bits, f};
    use tensorplay_ir::DType;
    use tensorplay_ir::TensorMeta;

    /// The graph input layout of the hot call, if any.
    fn hot_key(c: &CompiledGraph) -> Option<PlanKey> {
        c.hot.lock().as_ref().map(|h| h.key.clone())
    }

    #[test]
    fn the_hot_call_serves_only_inputs_of_its_shapes_and_strides() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        assert!(c.sole.as_ref().is_some_and(|s| s.inputs.is_some()));
        assert!(hot_key(&c).is_none(), "nothing ran yet");
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let y = Tensor::randn_seeded(&[6, 5], DType::F32, 2)?;
        let x = Tensor::randn_seeded(&[6, 5], DType::F32, 3)?;
        let transposed = base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?;
        let other_size = (
            Tensor::randn_seeded(&[4, 5], DType::F32, 4)?,
            y.narrow(0, 0, 4)?,
        );
        let sets = [
            [x.clone(), y.clone()],
            [x.clone(), y.clone()],
            [transposed.clone(), y.clone()],
            [other_size.0.clone(), other_size.1.clone()],
            [transposed, y.clone()],
            [x, y],
        ];
        for (i, ins) in sets.iter().enumerate() {
            let got = c.run(ins)?;
            assert_eq!(bits(&got[0]), bits(&f(ins)?[0]), "set {i}");
            // The hot call is always the last call's layout.
            assert_eq!(hot_key(&c), Some(PlanKey::new(None, ins)), "set {i}");
        }
        Ok(())
    }

    #[test]
    fn a_region_reading_a_constant_runs_through_the_environment() -> Result<()> {
        let with_constant = |xs: &[Tensor]| -> Result<Vec<Tensor>> {
            let c = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[4])?;
            Ok(vec![xs[0].mul(&c)?.exp()?])
        };
        let m = TensorMeta::new(&[4], DType::F32, Device::Cpu);
        let g = capture(with_constant, &[m], CaptureOptions::default())?;
        let c = CompiledGraph::new(&g)?;
        assert_eq!(c.num_kernels(), 1);
        assert!(c.sole.as_ref().is_some_and(|s| s.inputs.is_none()));
        let x = Tensor::randn_seeded(&[4], DType::F32, 1)?;
        for _ in 0..2 {
            let got = c.run(std::slice::from_ref(&x))?;
            let want = with_constant(std::slice::from_ref(&x))?;
            assert_eq!(bits(&got[0]), bits(&want[0]));
            assert!(hot_key(&c).is_none(), "no hot call without a direct region");
        }
        Ok(())
    }
}
