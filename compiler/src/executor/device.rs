//! Running on a CUDA device: which device a call's inputs are on, the steps of a call there
//! (regions on fresh device outputs, no arena), and a region's launch — both through the
//! device's back end (`tensorplay_core::backend`), which generates and runs its own kernels.

use smallvec::SmallVec;
use tensorplay_ir::{Device, Error, Result};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::backend;
use tensorplay_runtime::cuda::empty_uninit;

use super::shapes::ShapeEntry;
use super::{CompiledGraph, Exec, RegionRun};
use crate::codegen::cpu::plan_on;

/// The CUDA device the inputs live on, `None` when none does; an error when they mix devices
/// (a CUDA device with the CPU or another CUDA device).
pub(super) fn cuda_device(inputs: &[Tensor]) -> Result<Option<Device>> {
    let mut found: Option<Device> = None;
    for t in inputs {
        if let Device::Cuda(_) = t.device() {
            match found {
                Some(d) if d != t.device() => {
                    return Err(Error::device(
                        "compiled function",
                        format!("inputs on {d} and {}: move them to one device", t.device()),
                    ));
                }
                _ => found = Some(t.device()),
            }
        }
    }
    if let Some(d) = found
        && let Some(t) = inputs
            .iter()
            .find(|t| t.device() != d && !t.is_wrapped_scalar())
    {
        return Err(Error::device(
            "compiled function",
            format!("inputs on {d} and {}: move them to one device", t.device()),
        ));
    }
    Ok(found)
}

impl CompiledGraph {
    /// The steps of one call on a CUDA device: regions launch their CUDA kernels on fresh
    /// device outputs (the arena holds host memory, so it is not used), other nodes go through
    /// the dispatcher (custom ops with a `cuda` kernel, views; built-in computing ops have no
    /// CUDA kernels yet and say so).
    pub(super) fn run_on_device(
        &self,
        inputs: &[Tensor],
        shapes: &ShapeEntry,
        device: Device,
    ) -> Result<Vec<Tensor>> {
        let mut env = self.env_with_inputs(inputs);
        for (si, step) in self.steps.iter().enumerate() {
            match step {
                Exec::Node(call) => {
                    Self::call_node(call, &mut env, &shapes.syms)?;
                    self.check_node_outputs(call, &shapes.shapes, &env)?;
                }
                Exec::Region(r) => self.run_region_on_device(r, shapes, &mut env, device)?,
                // The product on the device, then its region.
                Exec::Epilogue(e) => {
                    Self::call_node(&e.product, &mut env, &shapes.syms)?;
                    self.check_node_outputs(&e.product, &shapes.shapes, &env)?;
                    self.run_region_on_device(&e.region, shapes, &mut env, device)?;
                }
            }
            for &v in &self.dies_after[si] {
                env[v] = None;
            }
        }
        self.collect_outputs(&env)
    }

    /// Launches region `r` on `device` into fresh device outputs.
    fn run_region_on_device(
        &self,
        r: &RegionRun,
        shapes: &ShapeEntry,
        env: &mut [Option<Tensor>],
        device: Device,
    ) -> Result<()> {
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it (later work on the device's stream, or a copy to the
            // host, which waits for the stream).
            .map(|&o| unsafe { empty_uninit(&shapes.shapes[o], self.dtypes[o], device) })
            .collect::<Result<_>>()?;
        self.launch_region(r, &shapes.shapes, env, outs, device)
    }

    /// Launches region `r` over iteration shape `iter_shape` on its operands, all on CUDA
    /// device `device`: its CUDA kernel, planned over the device addresses (the device branch
    /// of [`CompiledGraph::launch_region`]).
    pub(super) fn launch_on_device(
        &self,
        r: &RegionRun,
        iter_shape: &[usize],
        in_refs: &[&Tensor],
        out_refs: &[&Tensor],
        device: Device,
    ) -> Result<()> {
        let spec = &r.lowered.spec;
        let plan = plan_on(spec, in_refs, out_refs, Some(iter_shape), device)?;
        backend::for_device(device)?.launch(spec, &plan, &r.params)
    }
}
