//! The bottom of a custom op's dispatch: which kernel runs (device slot, default slot, fake
//! kernel, a triton body with launches skipped) and the checks on what it did (output count,
//! aliasing, undeclared mutation). The dispatcher calls [`run`]; nothing here depends on the
//! layers above it.

use std::any::Any;
use std::sync::Arc;

use tensorplay_ir::schema::Schema;
use tensorplay_ir::{DType, Device, Error, OpClass, Result};

use super::fake_ctx::with_fake_ctx;
use super::registry::{KernelFn, Operator, Slot};
use super::triton::{TritonScope, with_scope};
use tensorplay_core::autocast;
use tensorplay_core::dispatch::{CustomAutograd, CustomOperator, common_device};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;
use tensorplay_core::vmap::CustomVmapRule;

/// The device a call is for: its tensors' device, or — for an op without tensor arguments — the
/// value of its first `Device` argument (cpu when it has neither).
pub(crate) fn call_device(op: &Operator, args: &[Value]) -> Result<Device> {
    if args.iter().flat_map(Value::tensors).next().is_some() {
        return common_device(op.qualname(), args);
    }
    Ok(args
        .iter()
        .find_map(|v| match v {
            Value::Device(d) => Some(*d),
            _ => None,
        })
        .unwrap_or(Device::Cpu))
}

/// The registry's operators answer the dispatcher's questions (see
/// `tensorplay_core::dispatch::CustomOperator`) from their registrations.
impl CustomOperator for Operator {
    fn qualname(&self) -> &str {
        Operator::qualname(self)
    }

    fn schema(&self) -> &Schema {
        Operator::schema(self)
    }

    fn class(&self) -> OpClass {
        Operator::class(self)
    }

    fn call_device(&self, args: &[Value]) -> Result<Device> {
        call_device(self, args)
    }

    fn autocast_dtype(&self, slot: Slot) -> Option<DType> {
        Operator::autocast_dtype(self, slot)
    }

    fn vmap_rule(&self) -> Option<CustomVmapRule> {
        Operator::vmap_rule(self)
    }

    fn autograd(&self) -> Option<Arc<dyn CustomAutograd>> {
        self.autograd_impl()
            .map(|imp| imp as Arc<dyn CustomAutograd>)
    }

    fn run_kernel(&self, args: &[Value]) -> Result<Vec<Tensor>> {
        run(self, args)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

fn any_fake(args: &[Value]) -> bool {
    args.iter().flat_map(Value::tensors).any(Tensor::is_fake)
}

/// The kernel for real tensors on `device`: the enabled concrete slot, else the default slot.
pub(crate) fn select_kernel(op: &Operator, device: Device) -> Result<KernelFn> {
    let regs = op.regs.read();
    let concrete = Slot::for_device(device).and_then(|s| regs.enabled_kernel(s));
    if let Some(k) = concrete.or_else(|| regs.kernel(Slot::Default)) {
        return Ok(k.f.clone());
    }
    drop(regs);
    let slots: Vec<String> = op
        .kernel_slots()
        .iter()
        .map(|(s, on)| {
            if *on {
                s.to_string()
            } else {
                format!("{s} (disabled)")
            }
        })
        .collect();
    Err(Error::Lookup(format!(
        "`{}` has no kernel for device {device}; registered slots: [{}]",
        op.qualname(),
        slots.join(", ")
    )))
}

/// Runs the kernel `args` select and checks its outputs.
pub(crate) fn run(op: &Operator, args: &[Value]) -> Result<Vec<Tensor>> {
    let device = call_device(op, args)?;
    if device == Device::Meta || any_fake(args) {
        return run_fake(op, args, device);
    }
    let kernel = select_kernel(op, device)?;
    let before = undeclared_versions(op, args);
    let outs = run_kernel(op, args, &kernel, false)?;
    check_undeclared_mutation(op, args, &before)?;
    check_outputs(op, args, &outs, false)?;
    Ok(outs)
}

/// Fake inputs: the fake kernel; a mutating op returning nothing has nothing to shape; a triton
/// op's body runs with its launches skipped (its outputs, shaped by the body, become fake).
fn run_fake(op: &Operator, args: &[Value], device: Device) -> Result<Vec<Tensor>> {
    let name = op.qualname();
    if let Some(fake) = op.fake_kernel() {
        let outs = with_fake_ctx(name, || run_kernel(op, args, &fake, false))?;
        check_outputs(op, args, &outs, true)?;
        return Ok(outs);
    }
    if op.schema().returns.is_empty() && op.schema().is_mutating() {
        return Ok(vec![]);
    }
    if op.is_triton() {
        let body = select_kernel(op, device).or_else(|e| {
            op.kernel_slots()
                .first()
                .and_then(|(s, _)| op.kernel_in(*s))
                .ok_or(e)
        })?;
        let outs = run_kernel(op, args, &body, true)?
            .into_iter()
            .map(|t| {
                if t.is_fake() {
                    t
                } else {
                    Tensor::empty_fake(t.shape(), t.dtype(), t.device())
                }
            })
            .collect::<Vec<_>>();
        check_outputs(op, args, &outs, true)?;
        return Ok(outs);
    }
    Err(Error::Lookup(format!(
        "`{name}` has no fake kernel, so it cannot run on fake or meta tensors; register one \
         with register_fake (only mutating ops that return nothing are exempt)"
    )))
}

/// Runs `kernel` with autocast off; a triton op's body runs in its launch scope.
fn run_kernel(
    op: &Operator,
    args: &[Value],
    kernel: &KernelFn,
    skip_launches: bool,
) -> Result<Vec<Tensor>> {
    let run = || {
        let _off = autocast::suspend();
        kernel(args)
    };
    if !op.is_triton() {
        return run();
    }
    let declared = op.schema().mutated_params();
    let read_only = op
        .schema()
        .params
        .iter()
        .zip(args)
        .filter(|(p, _)| !declared.contains(&p.name.as_str()))
        .flat_map(|(_, v)| v.tensors().cloned())
        .collect();
    with_scope(
        TritonScope {
            op: op.qualname().to_string(),
            read_only,
            skip_launches,
        },
        run,
    )
}

/// Version counters of the tensors the op did not declare as mutated (those sharing storage with
/// a declared one excepted), with their parameter names.
fn undeclared_versions<'a>(op: &'a Operator, args: &'a [Value]) -> Vec<(&'a str, &'a Tensor, u64)> {
    let params = &op.schema().params;
    let declared: Vec<&Tensor> = params
        .iter()
        .zip(args)
        .filter(|(p, _)| p.is_mutated())
        .flat_map(|(_, v)| v.tensors())
        .collect();
    params
        .iter()
        .zip(args)
        .filter(|(p, _)| !p.is_mutated())
        .flat_map(|(p, v)| v.tensors().map(move |t| (p.name.as_str(), t)))
        .filter(|(_, t)| !declared.iter().any(|d| d.storage().same(t.storage())))
        .map(|(n, t)| (n, t, t.version()))
        .collect()
}

/// A kernel that wrote an input it did not declare in `mutates_args` is an error: the
/// compiler and autograd rely on the declaration.
fn check_undeclared_mutation(
    op: &Operator,
    args: &[Value],
    before: &[(&str, &Tensor, u64)],
) -> Result<()> {
    let _ = args;
    match before.iter().find(|(_, t, v)| t.version() != *v) {
        Some((name, _, _)) => Err(Error::argument(
            op.qualname(),
            *name,
            "an input the kernel leaves unchanged (it is not declared in mutates_args)",
            "a tensor the kernel wrote to in place",
        )),
        None => Ok(()),
    }
}

/// Output rules: the count matches the schema, fake kernels return fake tensors, and no output
/// aliases an input or another output (except returns annotated with an input's alias set).
pub(crate) fn check_outputs(
    op: &Operator,
    args: &[Value],
    outs: &[Tensor],
    fake: bool,
) -> Result<()> {
    let name = op.qualname();
    let returns = &op.schema().returns;
    let lists = returns.iter().filter(|r| r.ty.is_tensor_list()).count();
    let count_ok = if lists == 0 {
        outs.len() == returns.len()
    } else {
        outs.len() >= returns.len() - lists
    };
    if !count_ok {
        return Err(Error::argument(
            name,
            "returns",
            format!("{} outputs (schema: {})", returns.len(), op.schema()),
            format!("{}", outs.len()),
        ));
    }
    for (i, o) in outs.iter().enumerate() {
        if fake && !o.is_fake() {
            return Err(Error::argument(
                name,
                "fake kernel",
                "fake outputs (build them from the fake inputs or Tensor::empty_fake)",
                format!("a real tensor for output {i}"),
            ));
        }
        if fake {
            continue;
        }
        if o.is_fake() {
            return Err(Error::argument(
                name,
                "kernel",
                "real outputs for real inputs (a fake, data-less tensor is what a fake kernel \
                 returns on fake inputs)",
                format!("a fake tensor for output {i}"),
            ));
        }
        // A return annotated with an alias set (`-> Tensor(a!)`) may alias the parameter in
        // that set; every other aliasing is an error.
        let ret_alias = if lists == 0 {
            returns.get(i).and_then(|r| r.alias.as_ref())
        } else {
            None
        };
        let allowed: Vec<&Tensor> = match ret_alias {
            Some(ret_alias) => op
                .schema()
                .params
                .iter()
                .zip(args)
                .filter(|(p, _)| p.alias.as_ref().is_some_and(|a| a.set == ret_alias.set))
                .flat_map(|(_, v)| v.tensors())
                .collect(),
            None => vec![],
        };
        if let Some(input) = args
            .iter()
            .flat_map(Value::tensors)
            .filter(|t| !allowed.iter().any(|a| a.storage().same(t.storage())))
            .find(|t| t.storage().same(o.storage()))
        {
            return Err(Error::argument(
                name,
                "returns",
                "outputs that do not alias inputs (return a copy, e.g. x.clone_tensor())",
                format!("output {i} shares storage with input {input:?}"),
            ));
        }
        if outs[..i].iter().any(|p| p.storage().same(o.storage())) {
            return Err(Error::argument(
                name,
                "returns",
                "outputs that do not alias each other",
                format!("output {i} shares storage with an earlier output"),
            ));
        }
    }
    Ok(())
}
