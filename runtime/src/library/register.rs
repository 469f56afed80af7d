//! The registration operations behind both the free functions and `CustomOpDef`'s methods. Each
//! validates fully before it changes anything.

use std::sync::Arc;

use tensorplay_ir::{DType, Error, Result};

use super::autograd::AutogradImpl;
use super::registry::{Entry, KernelEntry, KernelFn, Operator, Owner, Slot};
use super::typed::IntoKernel;
use super::vmap_rule::VmapRule;

/// Checks a typed kernel's parameter count against the op's schema.
pub(crate) fn check_arity<F: IntoKernel<M>, M>(op: &Operator, what: &str) -> Result<()> {
    if let Some(types) = F::param_types() {
        let n = op.schema().params.len();
        if types.len() != n {
            return Err(Error::Registration(format!(
                "{what} for `{}` takes {} parameters, but the schema `{}` has {n}",
                op.qualname(),
                types.len(),
                op.schema()
            )));
        }
    }
    Ok(())
}

/// Parses device types for kernel registration: none or empty means the default slot.
pub(crate) fn parse_slots(op: &str, device_types: &[&str]) -> Result<Vec<Slot>> {
    if device_types.is_empty() {
        return Ok(vec![Slot::Default]);
    }
    let mut slots = Vec::new();
    for d in device_types {
        let s = Slot::parse(op, "device_types", d)?;
        if !slots.contains(&s) {
            slots.push(s);
        }
    }
    Ok(slots)
}

pub(crate) fn register_kernel(
    op: &Operator,
    slots: &[Slot],
    f: KernelFn,
    owner: Owner,
) -> Result<()> {
    op.check_mutable("a kernel")?;
    let mut regs = op.regs.write();
    for s in slots {
        // Last registration wins; a re-registered slot starts enabled.
        regs.kernels.insert(
            *s,
            KernelEntry {
                f: f.clone(),
                enabled: true,
                owner,
            },
        );
    }
    Ok(())
}

pub(crate) fn register_fake(
    op: &Operator,
    f: KernelFn,
    owner: Owner,
    allow_override: bool,
) -> Result<()> {
    op.check_mutable("a fake kernel")?;
    let mut regs = op.regs.write();
    if !allow_override && regs.fake.is_some() {
        return Err(Error::Registration(format!(
            "`{}` already has a fake kernel (allow_override is false)",
            op.qualname()
        )));
    }
    regs.fake = Some(Entry { value: f, owner });
    Ok(())
}

pub(crate) fn register_autograd(op: &Operator, imp: AutogradImpl, owner: Owner) -> Result<()> {
    op.check_mutable("an autograd formula")?;
    if op.schema().is_mutating() {
        return Err(Error::Registration(format!(
            "register_autograd is not supported on `{}` because it mutates its inputs ({})",
            op.qualname(),
            op.schema().mutated_params().join(", ")
        )));
    }
    op.regs.write().autograd = Some(Entry {
        value: Arc::new(imp),
        owner,
    });
    Ok(())
}

pub(crate) fn register_autocast(
    op: &Operator,
    device_type: &str,
    dtype: DType,
    owner: Owner,
) -> Result<()> {
    op.check_mutable("an autocast rule")?;
    let slot = Slot::parse(op.qualname(), "device_type", device_type)?;
    if slot == Slot::Default {
        return Err(Error::argument(
            op.qualname(),
            "device_type",
            "`cpu` or `cuda`",
            format!("`{device_type}`"),
        ));
    }
    if !dtype.is_float() {
        return Err(Error::argument(
            op.qualname(),
            "cast_inputs",
            "a floating dtype",
            dtype.to_string(),
        ));
    }
    op.regs.write().autocast.insert(
        slot,
        Entry {
            value: dtype,
            owner,
        },
    );
    Ok(())
}

pub(crate) fn register_vmap(op: &Operator, rule: VmapRule, owner: Owner) -> Result<()> {
    op.check_mutable("a vmap rule")?;
    op.regs.write().vmap = Some(Entry { value: rule, owner });
    Ok(())
}

/// Enables or disables the kernel in a concrete slot; returns the previous flag.
pub(crate) fn set_kernel_enabled(op: &Operator, device_type: &str, enabled: bool) -> Result<bool> {
    op.check_mutable("kernel flags")?;
    let slot = Slot::parse(op.qualname(), "device_type", device_type)?;
    if slot == Slot::Default {
        return Err(Error::argument(
            op.qualname(),
            "device_type",
            "a concrete device type (`cpu` or `cuda`); the default kernel cannot be disabled",
            format!("`{device_type}`"),
        ));
    }
    let mut regs = op.regs.write();
    let Some(k) = regs.kernels.get_mut(&slot) else {
        return Err(Error::Lookup(format!(
            "`{}` has no {slot} kernel to enable or disable",
            op.qualname()
        )));
    };
    Ok(std::mem::replace(&mut k.enabled, enabled))
}

/// The kernel `get_kernel` returns for `dispatch_key`; a disabled concrete kernel counts as absent.
pub(crate) fn lookup_kernel(op: &Operator, dispatch_key: &str) -> Result<KernelFn> {
    let slot = Slot::parse(op.qualname(), "dispatch_key", dispatch_key)?;
    if op.builtin().is_some() {
        return Err(Error::Lookup(format!(
            "`{}` is a builtin op; call it through the dispatcher (ops::call)",
            op.qualname()
        )));
    }
    let found = {
        let regs = op.regs.read();
        match slot {
            Slot::Default => regs.kernels.get(&Slot::Default),
            s => regs
                .kernels
                .get(&s)
                .filter(|k| k.enabled)
                .or_else(|| regs.kernels.get(&Slot::Default)),
        }
        .map(|k| k.f.clone())
    };
    found.ok_or_else(|| {
        Error::Lookup(format!(
            "`{}` has no usable kernel for dispatch key `{dispatch_key}` (registered: [{}])",
            op.qualname(),
            op.kernel_slots()
                .iter()
                .map(|(s, e)| if *e {
                    s.to_string()
                } else {
                    format!("{s} (disabled)")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}
