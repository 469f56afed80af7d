//! Running the steps on the CPU: op nodes through the dispatcher, regions as their CPU kernels
//! (outputs in the buffer arena's slots, the last launch's plan reused, a region hook offered
//! each region first), and matmul and conv epilogues piece by piece (`crate::epilogue`).

use std::sync::Arc;

use smallvec::SmallVec;
use tensorplay_ir::{Device, Result, Shape};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::ops::conv::ConvImages;
use tensorplay_runtime::ops::linalg::RowPanels;

use super::node::ArgSrc;
use super::shapes::ShapeEntry;
use super::{
    CachedLaunch, CompiledGraph, EpilogueRun, Exec, ProductKind, RegionRun, region_inputs,
};
use crate::arena::Slots;
use crate::codegen::cache;
use crate::codegen::cpu::plan as plan_launch;
use crate::epilogue::Product;
use crate::passes::logging;

impl CompiledGraph {
    /// The steps of one call, intermediates in the arena's `slots`.
    pub(super) fn run_steps(
        &self,
        inputs: &[Tensor],
        shapes: &ShapeEntry,
        slots: &mut Slots,
    ) -> Result<Vec<Tensor>> {
        let call_start = self.clock.start();
        let mut env = self.env_with_inputs(inputs);
        for (si, step) in self.steps.iter().enumerate() {
            let start = self.clock.start();
            match step {
                Exec::Node(call) => {
                    Self::call_node(call, &mut env, &shapes.syms)?;
                    self.check_node_outputs(call, &shapes.shapes, &env)?;
                }
                Exec::Region(r) => self.run_region(r, &shapes.shapes, &mut env, slots)?,
                Exec::Epilogue(e) => self.run_epilogue(e, shapes, &mut env, slots)?,
            }
            self.clock.step_done(si, start);
            for &v in &self.dies_after[si] {
                // Dropped; an arena value's storage goes back to its slot.
                if let (Some(k), Some(t)) = (self.slot_of_id[v], env[v].take()) {
                    slots.release(k, t);
                }
            }
        }
        let outputs = self.collect_outputs(&env);
        self.clock.call_done(call_start);
        outputs
    }

    fn run_region(
        &self,
        r: &RegionRun,
        shapes: &[Shape],
        env: &mut [Option<Tensor>],
        slots: &mut Slots,
    ) -> Result<()> {
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel launched below writes every element of each output
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe { slots.tensor(self.slot_of_id[o], &shapes[o], self.dtypes[o]) })
            .collect::<Result<_>>()?;
        self.launch_region(r, shapes, env, outs, Device::Cpu)
    }

    /// A matmul or conv2d and its epilogue region on the CPU: fused piece by piece when the
    /// product is one [`RowPanels`] (2-D `f32`/`f64`) or [`ConvImages`] (`f32`/`f64`) computes
    /// and no region hook is installed, otherwise the product through the dispatcher and then
    /// the region.
    fn run_epilogue(
        &self,
        e: &EpilogueRun,
        shapes: &ShapeEntry,
        env: &mut [Option<Tensor>],
        slots: &mut Slots,
    ) -> Result<()> {
        let (v, r) = (e.value(), &e.region);
        // A kernel registered over the product's op since compilation takes the dispatcher's
        // path.
        let fusable = crate::codegen::hook::current().is_none()
            && e.product.op.selected_slot(Device::Cpu).is_none()
            && shapes.shapes[r.iter_value] == shapes.shapes[v]
            && shapes.shapes[v].iter().all(|&d| d > 0);
        let slot = self.slot_of_id[v];
        let fused = if fusable {
            // SAFETY: the product is written in full (in `epilogue::run`, over all its rows or
            // images) before the region reads it; unused, it goes back to its slot unread.
            let out = unsafe { slots.tensor(slot, &shapes.shapes[v], self.dtypes[v]) }?;
            match self.product_of(e, &out, env, &shapes.syms)? {
                Some(p) => Some((p, out)),
                None => {
                    if let Some(k) = slot {
                        slots.release(k, out);
                    }
                    None
                }
            }
        } else {
            None
        };
        let Some((product, out)) = fused else {
            logging::log("fallback", || {
                format!(
                    "{}: its epilogue runs unfused (not an f32/f64 CPU product of the fused \
                     kind, a kernel is registered over the op, or a region hook is installed)",
                    self.graph.describe(e.product.node)
                )
            });
            Self::call_node(&e.product, env, &shapes.syms)?;
            self.check_node_outputs(&e.product, &shapes.shapes, env)?;
            return self.run_region(r, &shapes.shapes, env, slots);
        };
        env[v] = Some(out);
        let outs: SmallVec<[Tensor; 4]> = r
            .outs
            .iter()
            // SAFETY: the region kernel writes every element of each output, piece by piece,
            // before anything reads it; if the launch fails, `outs` are dropped unread.
            .map(|&o| unsafe {
                slots.tensor(self.slot_of_id[o], &shapes.shapes[o], self.dtypes[o])
            })
            .collect::<Result<_>>()?;
        {
            let in_refs = region_inputs(r, env)?;
            let out_refs: SmallVec<[&Tensor; 4]> = outs.iter().collect();
            let iter_shape = &shapes.shapes[r.iter_value];
            let spec = &r.lowered.spec;
            let plan = plan_launch(spec, &in_refs, &out_refs, Some(iter_shape))?;
            let last = r.last.lock().clone();
            let kernel = match last {
                Some(c) if c.kernel.layout() == plan.layout() => c.kernel.clone(),
                _ => cache::get_or_compile(spec, plan.layout())?,
            };
            crate::epilogue::run(&product, &kernel, &plan, &r.params)?;
            *r.last.lock() = Some(Arc::new(CachedLaunch {
                plan: plan.detach(),
                kernel,
            }));
        }
        for (&o, t) in r.outs.iter().zip(outs) {
            env[o] = Some(t);
        }
        Ok(())
    }

    /// The fused computation of `e`'s product into `out`, when its operands allow one.
    fn product_of(
        &self,
        e: &EpilogueRun,
        out: &Tensor,
        env: &[Option<Tensor>],
        syms: &[i64],
    ) -> Result<Option<Product>> {
        Ok(match e.kind {
            ProductKind::Matmul => match e.product.args.as_slice() {
                [ArgSrc::Tensor(a), ArgSrc::Tensor(b)] => env[*a]
                    .as_ref()
                    .zip(env[*b].as_ref())
                    .and_then(|(a, b)| RowPanels::new(a, b, out))
                    .map(Product::Rows),
                _ => None,
            },
            ProductKind::Conv2d => {
                let args = Self::args_of(&e.product, env, syms)?;
                ConvImages::new(&args, out)?.map(Product::Images)
            }
        })
    }

    /// Launches region `r` over iteration shape `iter_shape` on its operands: the last launch's
    /// plan again when the operands have its shapes and strides, otherwise a new plan (and the
    /// kernel for its layout).
    pub(super) fn launch(
        &self,
        r: &RegionRun,
        iter_shape: &[usize],
        in_refs: &[&Tensor],
        out_refs: &[&Tensor],
    ) -> Result<()> {
        let iter_shape = Some(iter_shape);
        // A region hook (verification of another backend) may run the region instead.
        let hooked = match crate::codegen::hook::current() {
            Some(hook) => {
                let plan = plan_launch(&r.lowered.spec, in_refs, out_refs, iter_shape)?;
                hook.run(&r.lowered.spec, &plan, &r.params)?
            }
            None => false,
        };
        if hooked {
            return Ok(());
        }
        // The lock is held only to clone the entry: concurrent runs of the graph launch in
        // parallel.
        let last = r.last.lock().clone();
        if let Some(c) = &last
            && c.kernel
                .relaunch(&c.plan, in_refs, out_refs, iter_shape, &r.params)?
        {
            return Ok(());
        }
        let spec = &r.lowered.spec;
        let plan = plan_launch(spec, in_refs, out_refs, iter_shape)?;
        if logging::enabled("cuda") {
            // The region's CUDA translation, printed once per structure.
            crate::codegen::cuda::get_or_emit(spec, &plan.layout().into())?;
        }
        let kernel = match last {
            Some(c) if c.kernel.layout() == plan.layout() => c.kernel.clone(),
            _ => cache::get_or_compile(spec, plan.layout())?,
        };
        kernel.launch_plan(&plan, &r.params)?;
        *r.last.lock() = Some(Arc::new(CachedLaunch {
            plan: plan.detach(),
            kernel,
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureOptions, capture};
    use crate::executor::test_util::{bits, f};
    use tensorplay_ir::DType;
    use tensorplay_ir::TensorMeta;

    /// The cached launch of the graph's only region.
    fn cached(c: &CompiledGraph) -> Option<Arc<CachedLaunch>> {
        c.steps.iter().find_map(|s| match s {
            Exec::Region(r) => r.last.lock().clone(),
            Exec::Epilogue(e) => e.region.last.lock().clone(),
            Exec::Node(_) => None,
        })
    }

    #[test]
    fn launch_plans_are_reused_only_for_the_same_shapes_and_strides() -> Result<()> {
        let m = TensorMeta::new(&[6, 5], DType::F32, Device::Cpu);
        let g = capture(f, &[m.clone(), m], CaptureOptions { dynamic: true })?;
        let c = CompiledGraph::new(&g)?;
        assert_eq!(c.num_kernels(), 1);
        let base = Tensor::randn_seeded(&[12, 10], DType::F32, 1)?;
        let y = Tensor::randn_seeded(&[6, 5], DType::F32, 2)?;
        // Views of one shape: contiguous, two offsets with the same strides, a transpose, a
        // step-2 slice; then another size.
        let views = [
            Tensor::randn_seeded(&[6, 5], DType::F32, 3)?,
            base.narrow(0, 0, 6)?.narrow(1, 0, 5)?,
            base.narrow(0, 3, 6)?.narrow(1, 2, 5)?,
            base.narrow(0, 0, 5)?.narrow(1, 0, 6)?.t()?,
            base.slice(0, Some(0), Some(12), 2)?.narrow(1, 0, 5)?,
        ];
        for round in 0..2 {
            let mut previous: Option<Arc<CachedLaunch>> = None;
            for (i, x) in views.iter().enumerate() {
                let got = c.run(&[x.clone(), y.clone()])?;
                let want = f(&[x.clone(), y.clone()])?;
                assert_eq!(bits(&got[0]), bits(&want[0]), "round {round}, view {i}");
                let now = cached(&c).expect("a launch is cached");
                if let Some(p) = &previous {
                    // Views 1 and 2 differ only in their storage offset: same plan.
                    assert_eq!(Arc::ptr_eq(p, &now), i == 2, "round {round}, view {i}");
                }
                // Running again on the same tensors reuses the plan.
                let again = c.run(&[x.clone(), y.clone()])?;
                assert_eq!(bits(&again[0]), bits(&want[0]));
                assert!(Arc::ptr_eq(&now, &cached(&c).expect("cached")));
                previous = Some(now);
            }
        }
        // Another size: a new shape entry and a new plan, then back again.
        for n in [3usize, 6, 3] {
            let x = Tensor::randn_seeded(&[n, 5], DType::F32, 4)?;
            let yn = y.narrow(0, 0, n)?;
            let got = c.run(&[x.clone(), yn.clone()])?;
            assert_eq!(bits(&got[0]), bits(&f(&[x, yn])?[0]), "n = {n}");
        }
        assert_eq!(c.shape_cache.lock().map.len(), 2);
        Ok(())
    }
}
