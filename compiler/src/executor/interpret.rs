//! `interpret`: every op node run through the dispatcher in topological order, no generated
//! kernels — the reference the compiled path is checked against, and the path that records
//! autograd.

use tensorplay_ir::CompileKind;
use tensorplay_ir::{Error, Result};
use tensorplay_runtime::Tensor;

use super::CompiledGraph;
use super::shapes::Admission;
use crate::grad_plan::GradPlan;

impl CompiledGraph {
    /// Runs every op node through the dispatcher in topological order (no generated kernels):
    /// the reference the compiled path is checked against, and the path that records autograd.
    pub fn interpret(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.check_guards(inputs)?;
        if let Admission::Miss(why) = self.admit(inputs)? {
            return Err(Error::compile(
                CompileKind::Guard,
                format!("size guard failed: {why}; recompile for this input"),
            ));
        }
        let _ac = tensorplay_runtime::autocast::suspend();
        self.interpret_accepted(inputs, &self.bind_syms(inputs))
    }

    /// This graph, interpreted with `plan`: what autograd did at each node during capture, so a
    /// replay with autograd on records the backward edges eager recorded — none through a
    /// detached handle or in a `no_grad` region.
    pub(crate) fn with_grad_plan(mut self, plan: GradPlan) -> CompiledGraph {
        self.grad_plan = plan;
        self
    }

    pub(super) fn interpret_accepted(
        &self,
        inputs: &[Tensor],
        syms: &[i64],
    ) -> Result<Vec<Tensor>> {
        let mut env = self.env_with_inputs(inputs);
        for call in &self.calls {
            let grad = self.grad_plan.nodes.get(&call.node);
            Self::call_node_with(call, &mut env, syms, grad)?;
        }
        self.collect_outputs(&env)
    }
}
