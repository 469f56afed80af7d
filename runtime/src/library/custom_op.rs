//! `custom_op` / `triton_op` and the `CustomOpDef` handle they return.

use std::sync::Arc;

use tensorplay_ir::schema::{Schema, validate_qualname};
use tensorplay_ir::{DType, Error, Result};

use super::autograd::{AutogradCtx, AutogradImpl, SetupContextBox};
use super::infer_schema::{MutatesArgs, Prototype, infer_schema};
use super::register;
use super::registry::{Operator, Origin, Owner, Slot, registry};
use super::triton::TritonInfo;
use super::typed::IntoKernel;
use super::vmap_rule::VmapInfo;
use crate::dispatch::call_operator;
use crate::tensor::Tensor;
use crate::value::Value;

/// Namespaces users may not define ops in.
pub(crate) const RESERVED_NAMESPACES: [&str; 2] = ["prim", "tp"];

/// Validates a qualified name for definition: syntax and reserved namespaces.
pub(crate) fn check_definable(qualname: &str) -> Result<(String, String, Option<String>)> {
    let (ns, name, overload) = validate_qualname(qualname)?;
    if RESERVED_NAMESPACES.contains(&ns.as_str()) {
        return Err(Error::Registration(format!(
            "invalid operator name `{qualname}`: the namespace `{ns}` is reserved"
        )));
    }
    Ok((ns, name, overload))
}

/// A handle to a custom operator: call it, and register kernels, fake kernel, autograd, autocast
/// and vmap rules on it. Cloning is cheap.
#[derive(Clone)]
pub struct CustomOpDef {
    op: Arc<Operator>,
}

impl std::fmt::Debug for CustomOpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CustomOpDef({})", self.op.schema())
    }
}

/// Restores a kernel's enabled flag when dropped (from [`CustomOpDef::set_kernel_enabled`]).
#[must_use = "the flag is restored when the guard drops; bind it to a variable"]
pub struct KernelEnabledGuard {
    op: Arc<Operator>,
    device_type: String,
    prev: bool,
}

impl Drop for KernelEnabledGuard {
    fn drop(&mut self) {
        // The slot existed when the guard was made; it can only be gone if a Library owning it
        // dropped meanwhile, and then there is nothing to restore.
        let _ = register::set_kernel_enabled(&self.op, &self.device_type, self.prev);
    }
}

impl KernelEnabledGuard {
    /// The flag before the change.
    pub fn previous(&self) -> bool {
        self.prev
    }
}

impl CustomOpDef {
    pub(crate) fn from_operator(op: Arc<Operator>) -> CustomOpDef {
        CustomOpDef { op }
    }

    /// The qualified name.
    pub fn name(&self) -> &str {
        self.op.qualname()
    }

    /// The schema (given or inferred).
    pub fn schema(&self) -> &Schema {
        self.op.schema()
    }

    /// The registry entry.
    pub fn operator(&self) -> &Arc<Operator> {
        &self.op
    }

    /// Calls the op with positional arguments.
    pub fn call(&self, args: &[Value]) -> Result<Vec<Tensor>> {
        call_operator(&self.op, args, &[])
    }

    /// Calls the op with positional and keyword arguments.
    pub fn call_kw(&self, args: &[Value], kwargs: &[(&str, Value)]) -> Result<Vec<Tensor>> {
        let kw: Vec<(String, Value)> = kwargs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        call_operator(&self.op, args, &kw)
    }

    /// Calls an op that returns exactly one tensor.
    pub fn call1(&self, args: &[Value]) -> Result<Tensor> {
        let mut outs = self.call(args)?;
        if outs.len() != 1 {
            return Err(Error::argument(
                self.name(),
                "returns",
                "one tensor",
                format!("{} tensors", outs.len()),
            ));
        }
        Ok(outs.swap_remove(0))
    }

    /// Registers a kernel for `device_types` (`[]` = the device-agnostic slot; `cpu`, `cuda` and
    /// `Composite…` spellings accepted).
    pub fn register_kernel<M>(
        &self,
        device_types: &[&str],
        f: impl IntoKernel<M>,
    ) -> Result<&Self> {
        self.register_kernel_owned(device_types, f, Owner::Process)
    }

    pub(crate) fn register_kernel_owned<M, F: IntoKernel<M>>(
        &self,
        device_types: &[&str],
        f: F,
        owner: Owner,
    ) -> Result<&Self> {
        register::check_arity::<F, M>(&self.op, "the kernel")?;
        let slots = register::parse_slots(self.name(), device_types)?;
        register::register_kernel(&self.op, &slots, f.into_kernel(self.name()), owner)?;
        Ok(self)
    }

    /// Registers the fake kernel: computes output metadata from fake inputs without reading data.
    pub fn register_fake<M>(&self, f: impl IntoKernel<M>) -> Result<&Self> {
        self.register_fake_owned(f, Owner::Process, true)
    }

    pub(crate) fn register_fake_owned<M, F: IntoKernel<M>>(
        &self,
        f: F,
        owner: Owner,
        allow_override: bool,
    ) -> Result<&Self> {
        register::check_arity::<F, M>(&self.op, "the fake kernel")?;
        register::register_fake(&self.op, f.into_kernel(self.name()), owner, allow_override)?;
        Ok(self)
    }

    /// Registers an autograd formula: `backward(ctx, grads)` returns one optional gradient per
    /// parameter; `setup_context(ctx, inputs, outputs)` saves what backward needs.
    pub fn register_autograd(
        &self,
        backward: impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>>
        + Send
        + Sync
        + 'static,
        setup_context: Option<SetupContextBox>,
    ) -> Result<&Self> {
        self.register_autograd_owned(backward, setup_context, Owner::Process)
    }

    pub(crate) fn register_autograd_owned(
        &self,
        backward: impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>>
        + Send
        + Sync
        + 'static,
        setup_context: Option<SetupContextBox>,
        owner: Owner,
    ) -> Result<&Self> {
        let imp = AutogradImpl {
            backward: Arc::new(backward),
            setup_context: setup_context.map(Arc::from),
        };
        register::register_autograd(&self.op, imp, owner)?;
        Ok(self)
    }

    /// Inside an autocast region for `device_type`, casts floating inputs (not f64) to
    /// `cast_inputs` before the kernel runs.
    pub fn register_autocast(&self, device_type: &str, cast_inputs: DType) -> Result<&Self> {
        register::register_autocast(&self.op, device_type, cast_inputs, Owner::Process)?;
        Ok(self)
    }

    /// Registers a batching rule used under `vmap`.
    pub fn register_vmap(
        &self,
        rule: impl Fn(
            &VmapInfo,
            &[Option<usize>],
            &[Value],
        ) -> Result<(Vec<Tensor>, Vec<Option<usize>>)>
        + Send
        + Sync
        + 'static,
    ) -> Result<&Self> {
        register::register_vmap(&self.op, Arc::new(rule), Owner::Process)?;
        Ok(self)
    }

    /// Enables or disables the kernel in a concrete slot (`cpu`/`cuda`); a disabled slot falls
    /// back to the default kernel. The returned guard restores the previous flag when dropped.
    pub fn set_kernel_enabled(
        &self,
        device_type: &str,
        enabled: bool,
    ) -> Result<KernelEnabledGuard> {
        let prev = register::set_kernel_enabled(&self.op, device_type, enabled)?;
        Ok(KernelEnabledGuard {
            op: self.op.clone(),
            device_type: device_type.to_string(),
            prev,
        })
    }
}

/// Builder for [`custom_op`] and [`triton_op`]: options first, then `build(kernel)`.
#[derive(Debug, Clone)]
pub struct CustomOpBuilder {
    name: String,
    mutates_args: MutatesArgs,
    device_types: Option<Vec<String>>,
    schema: Option<String>,
    arg_names: Option<Vec<String>>,
    triton: bool,
}

/// Defines a custom operator whose body is `kernel` (see [`CustomOpBuilder::build`]).
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let weighted_sum = library::custom_op("docs::weighted_sum")
///     .arg_names(&["x", "weight"])
///     .build(|x: Tensor, w: Tensor| -> Result<Tensor> { x.mul(&w)?.sum_all() })?;
/// assert_eq!(weighted_sum.schema().to_string(), "docs::weighted_sum(Tensor x, Tensor weight) -> Tensor");
/// let x = Tensor::ones(&[3], DType::F32);
/// let y = weighted_sum.call1(&[x.clone().into(), x.into()])?;
/// assert_eq!(y.item::<f32>()?, 3.0);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn custom_op(name: &str) -> CustomOpBuilder {
    CustomOpBuilder {
        name: name.to_string(),
        mutates_args: MutatesArgs::None,
        device_types: None,
        schema: None,
        arg_names: None,
        triton: false,
    }
}

/// Like [`custom_op`], for ops whose kernels launch grid kernels through `wrap_triton`; under
/// compile the whole op is one opaque node.
pub fn triton_op(name: &str) -> CustomOpBuilder {
    CustomOpBuilder {
        triton: true,
        ..custom_op(name)
    }
}

impl CustomOpBuilder {
    /// Names of arguments the kernel mutates (`MutatesArgs::Unknown` marks every tensor).
    pub fn mutates_args(mut self, names: impl Into<MutatesArgs>) -> Self {
        self.mutates_args = names.into();
        self
    }

    /// Device types (`cpu`, `cuda`) whose kernel slots the body fills; every device when omitted
    /// or empty (as `register_kernel(op, [])`: the device-agnostic slot, never an op without a
    /// kernel).
    pub fn device_types(mut self, types: &[&str]) -> Self {
        self.device_types =
            (!types.is_empty()).then(|| types.iter().map(|s| s.to_string()).collect());
        self
    }

    /// An explicit schema (with or without the `ns::name` prefix); required for boxed kernels.
    pub fn schema(mut self, schema: &str) -> Self {
        self.schema = Some(schema.to_string());
        self
    }

    /// Parameter names for a typed kernel (default `arg0`, `arg1`, …).
    pub fn arg_names(mut self, names: &[&str]) -> Self {
        self.arg_names = Some(names.iter().map(|s| s.to_string()).collect());
        self
    }

    fn slots(&self) -> Result<Vec<Slot>> {
        match &self.device_types {
            None => Ok(vec![Slot::Default]),
            Some(types) => types
                .iter()
                .map(|t| match t.as_str() {
                    "cpu" => Ok(Slot::Cpu),
                    "cuda" => Ok(Slot::Cuda),
                    other => Err(Error::argument(
                        &self.name,
                        "device_types",
                        "lower-case `cpu` or `cuda` (no index)",
                        format!("`{other}`"),
                    )),
                })
                .collect(),
        }
    }

    fn resolve_schema<F: IntoKernel<M>, M>(
        &self,
        ns: &str,
        name: &str,
        overload: &Option<String>,
    ) -> Result<Schema> {
        let qualname = match overload {
            Some(o) => format!("{ns}::{name}.{o}"),
            None => format!("{ns}::{name}"),
        };
        let mut schema = match &self.schema {
            Some(text) => {
                let text = text.trim();
                let full = if text.starts_with('(') {
                    format!("{qualname}{text}")
                } else {
                    text.to_string()
                };
                let mut s = Schema::parse(&full)?;
                if s.namespace.is_none() {
                    s.namespace = Some(ns.to_string());
                }
                if s.qualified_name() != qualname {
                    return Err(Error::Registration(format!(
                        "the schema names `{}` but the op is `{qualname}`",
                        s.qualified_name()
                    )));
                }
                s
            }
            None => {
                let names: Vec<String> = match &self.arg_names {
                    Some(n) => {
                        if let Some(types) = F::param_types()
                            && types.len() != n.len()
                        {
                            return Err(Error::argument(
                                &qualname,
                                "arg_names",
                                format!("{} names, one per kernel parameter", types.len()),
                                format!("{} names {n:?}", n.len()),
                            ));
                        }
                        n.clone()
                    }
                    None => (0..F::param_types().map_or(0, |t| t.len()))
                        .map(|i| format!("arg{i}"))
                        .collect(),
                };
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let proto = Prototype::of::<F, M>(&names).map_err(|e| match F::param_types() {
                    None => Error::Registration(format!(
                        "`{qualname}`: a boxed kernel needs an explicit schema (.schema(...))"
                    )),
                    Some(_) => e,
                })?;
                Schema::parse(&infer_schema(
                    &proto,
                    self.mutates_args.clone(),
                    Some(&qualname),
                )?)?
            }
        };
        // The schema's write annotations must agree with mutates_args.
        let declared: Vec<String> = match &self.mutates_args {
            MutatesArgs::None => vec![],
            MutatesArgs::Names(n) => n.clone(),
            MutatesArgs::Unknown => schema
                .params
                .iter()
                .filter(|p| p.ty.is_tensor_like())
                .map(|p| p.name.clone())
                .collect(),
        };
        for n in &declared {
            match schema.param(n) {
                None => {
                    return Err(Error::argument(
                        &qualname,
                        "mutates_args",
                        "names of parameters",
                        format!("`{n}`, which is not a parameter"),
                    ));
                }
                Some(p) if !p.ty.is_tensor_like() => {
                    return Err(Error::argument(
                        &qualname,
                        "mutates_args",
                        "tensor parameters",
                        format!("`{n}` of type {}", p.ty),
                    ));
                }
                _ => {}
            }
        }
        let mut written: Vec<String> = schema
            .mutated_params()
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut want = declared.clone();
        written.sort();
        want.sort();
        if written != want {
            return Err(Error::Registration(format!(
                "`{qualname}`: the schema marks [{}] as mutated but mutates_args is [{}]",
                written.join(", "),
                want.join(", ")
            )));
        }
        if let Some(types) = F::param_types()
            && types.len() != schema.params.len()
        {
            return Err(Error::Registration(format!(
                "`{qualname}`: the kernel takes {} parameters but the schema has {}",
                types.len(),
                schema.params.len()
            )));
        }
        schema.namespace = Some(ns.to_string());
        Ok(schema)
    }

    /// Defines (or redefines) the op with `kernel` as its body and returns its handle. Nothing is
    /// registered when this fails.
    pub fn build<M, F: IntoKernel<M>>(self, kernel: F) -> Result<CustomOpDef> {
        let (ns, name, overload) = check_definable(&self.name)?;
        let slots = self.slots()?;
        let schema = self.resolve_schema::<F, M>(&ns, &name, &overload)?;
        let qualname = schema.qualified_name();
        let op = Arc::new(Operator::new_custom(
            qualname.clone(),
            schema,
            Origin::CustomOp,
            Owner::Process,
            self.device_types.as_ref().map(|_| slots.clone()),
            self.triton.then_some(TritonInfo),
        ));
        register::register_kernel(&op, &slots, kernel.into_kernel(&qualname), Owner::Process)?;
        let op = registry().insert(op, |existing| match existing.origin() {
            Origin::CustomOp => Ok(()),
            Origin::Builtin => Err(Error::Registration(format!("`{qualname}` is a builtin op"))),
            Origin::Defined => Err(Error::Registration(format!(
                "`{qualname}` was created with define/Library::define; custom_op cannot redefine it"
            ))),
        })?;
        Ok(CustomOpDef { op })
    }
}
