//! The registration operations behind both the free functions and `CustomOpDef`'s methods. Each
//! validates fully before it changes anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tensorplay_ir::{DType, Error, Result};

use super::autograd::AutogradImpl;
use super::registry::{Entry, KernelEntry, KernelFn, Operator, Owner, Slot};
use super::signature;
use super::typed::IntoKernel;
use super::vmap_rule::VmapRule;
use tensorplay_core::value::Value;

/// Checks a typed kernel's parameters (count and types) against the op's schema; `what` names
/// the registration in the error (`register_kernel`, `register_fake`).
pub(crate) fn check_signature<F: IntoKernel<M>, M>(op: &Operator, what: &str) -> Result<()> {
    match F::param_types() {
        Some(types) => signature::check_params(op.qualname(), what, &types, op.schema()),
        None => Ok(()),
    }
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
        // The newest registration is active; a disabled slot stays disabled (the flag belongs to
        // the slot, not the kernel) until its guard restores it.
        regs.kernels.or_default(*s).push(KernelEntry {
            f: f.clone(),
            owner,
            alive: Arc::new(AtomicBool::new(true)),
        });
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
    if !allow_override && !regs.fake.is_empty() {
        return Err(Error::Registration(format!(
            "`{}` already has a fake kernel (allow_override is false)",
            op.qualname()
        )));
    }
    regs.fake.push(Entry { value: f, owner });
    Ok(())
}

pub(crate) fn register_autograd(op: &Operator, imp: AutogradImpl, owner: Owner) -> Result<()> {
    op.check_mutable("an autograd formula")?;
    let schema = op.schema();
    if schema.is_mutating() {
        return Err(Error::Registration(format!(
            "register_autograd is not supported on `{}` because it mutates its inputs ({})",
            op.qualname(),
            schema.mutated_params().join(", ")
        )));
    }
    if schema.returns.is_empty() {
        return Err(Error::Registration(format!(
            "register_autograd is not supported on `{}` because it returns nothing (no output \
             to take a gradient of)",
            op.qualname()
        )));
    }
    if let Some(r) = schema.returns.iter().find(|r| r.alias.is_some()) {
        return Err(Error::Registration(format!(
            "register_autograd is not supported on `{}` because its output `{}` aliases an input \
             (return a fresh tensor instead of a view)",
            op.qualname(),
            r.ty
        )));
    }
    op.regs.write().autograd.push(Entry {
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
    op.regs.write().autocast.or_default(slot).push(Entry {
        value: dtype,
        owner,
    });
    Ok(())
}

pub(crate) fn register_vmap(op: &Operator, rule: VmapRule, owner: Owner) -> Result<()> {
    op.check_mutable("a vmap rule")?;
    op.regs.write().vmap.push(Entry { value: rule, owner });
    Ok(())
}

/// What [`set_kernel_enabled`] did: the previous flag, and a warning when the slot holds no
/// kernel (the flag still applies to kernels registered later).
pub(crate) struct FlagChange {
    pub(crate) prev: bool,
    pub(crate) warning: Option<String>,
}

/// Enables or disables a concrete slot; returns the previous flag. A slot without a kernel is a
/// warning, not an error (as PyTorch): the flag applies to a kernel registered meanwhile.
pub(crate) fn set_kernel_enabled(op: &Operator, slot: Slot, enabled: bool) -> Result<FlagChange> {
    op.check_mutable("kernel flags")?;
    if slot == Slot::Default {
        return Err(Error::argument(
            op.qualname(),
            "device_type",
            "a concrete device type (`cpu` or `cuda`); the default kernel cannot be disabled",
            "`default`",
        ));
    }
    let mut regs = op.regs.write();
    let warning = regs.kernel(slot).is_none().then(|| {
        format!(
            "set_kernel_enabled: `{}` has no {slot} kernel; the flag ({}) applies to one \
             registered later",
            op.qualname(),
            if enabled { "enabled" } else { "disabled" }
        )
    });
    if let Some(w) = &warning {
        super::log::warn(w);
    }
    let prev = if enabled {
        !regs.disabled.remove(&slot)
    } else {
        regs.disabled.insert(slot)
    };
    Ok(FlagChange { prev, warning })
}

/// The kernel `get_kernel` returns for `dispatch_key`; a disabled concrete kernel counts as absent.
/// A kernel owned by a `Library` fails with an "invalidated" error once that library drops.
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
            Slot::Default => regs.kernel(Slot::Default),
            s => regs
                .enabled_kernel(s)
                .or_else(|| regs.kernel(Slot::Default)),
        }
        .cloned()
    };
    let Some(entry) = found else {
        return Err(Error::Lookup(format!(
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
        )));
    };
    if entry.owner == Owner::Process {
        return Ok(entry.f);
    }
    let name = op.qualname().to_string();
    Ok(Arc::new(move |args: &[Value]| {
        if !entry.alive.load(Ordering::Relaxed) {
            return Err(Error::Lookup(format!(
                "this kernel of `{name}` was invalidated: the Library that registered it was \
                 dropped (call get_kernel again)"
            )));
        }
        (entry.f)(args)
    }))
}
