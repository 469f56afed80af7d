//! `custom_op` / `triton_op` and the `CustomOpDef` handle they return.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use tensorplay_ir::schema::{Schema, validate_qualname};
use tensorplay_ir::{DType, Error, Result};

use super::autograd::{AutogradCtx, AutogradImpl, IntoGrads, SetupContextBox};
use super::autograd_typed::{self, BackwardArgs, FromArgs, SavedState};
use super::call_args::{CallArgs, kwargs_owned};
use super::device_types::{DeviceType, DeviceTypes};
use super::infer_schema::{MutatesArgs, Prototype, infer_schema};
use super::options::{Tag, dedup_tags};
use super::register;
use super::registry::{Operator, Origin, Owner, Slot, registry};
use super::signature;
use super::triton::TritonInfo;
use super::typed::{IntoKernel, ReturnType};
use super::typed_call::{TypedArgs, Untyped};
use super::validate;
use super::vmap_rule::VmapInfo;
use crate::dispatch::call_operator;
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

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
    slot: Slot,
    prev: bool,
    warning: Option<String>,
}

impl Drop for KernelEnabledGuard {
    fn drop(&mut self) {
        // The flag belongs to the slot, which always exists; restoring cannot fail.
        let _ = register::set_kernel_enabled(&self.op, self.slot, self.prev);
    }
}

impl KernelEnabledGuard {
    /// The flag before the change.
    pub fn previous(&self) -> bool {
        self.prev
    }

    /// The warning given when the slot held no kernel (also printed with `TP_LOGS=library`).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }
}

impl CustomOpDef {
    pub(crate) fn from_operator(op: Arc<Operator>) -> CustomOpDef {
        CustomOpDef { op }
    }

    /// The qualified name.
    pub fn name(&self) -> &str {
        // Redefinitions keep the name, so the handle's own op answers for the newest one.
        self.op.qualname()
    }

    /// The schema (given or inferred) of the newest definition.
    pub fn schema(&self) -> Schema {
        self.operator().schema().clone()
    }

    /// The tags the definition carries.
    pub fn tags(&self) -> Vec<Tag> {
        self.operator().tags()
    }

    /// The registry entry: the newest definition under this name (a `custom_op` redefinition
    /// replaces the op for every handle).
    pub fn operator(&self) -> Arc<Operator> {
        self.op.latest()
    }

    /// Calls the op with positional arguments: a tuple of Rust values (`(&x, &w, 2.0)`) or
    /// boxed [`Value`]s.
    pub fn call(&self, args: impl CallArgs) -> Result<Vec<Tensor>> {
        call_operator(&self.operator(), &args.into_values(), &[])
    }

    /// Calls the op with positional and keyword arguments (`&[("eps", 1e-3.into())]`).
    pub fn call_kw(&self, args: impl CallArgs, kwargs: &[(&str, Value)]) -> Result<Vec<Tensor>> {
        call_operator(&self.operator(), &args.into_values(), &kwargs_owned(kwargs))
    }

    /// Calls an op that returns exactly one tensor.
    pub fn call1(&self, args: impl CallArgs) -> Result<Tensor> {
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

    /// Registers a kernel for `device_types`: lower-case `"cpu"`/`"cuda"`, a [`Device`] or
    /// [`Slot`] (one or a list); `&[]`, `"default"` and every `Composite…` key
    /// (`"CompositeExplicitAutograd"`, …) are the device-agnostic slot.
    ///
    /// ```
    /// use tensorplay_runtime::{library, library::Slot, Tensor, DType, Result};
    /// let op = library::custom_op("docs_rk::twice")
    ///     .arg_names(&["x"])
    ///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
    /// op.register_kernel("CompositeExplicitAutograd", |x: &Tensor| -> Result<Tensor> {
    ///     x.add(x)
    /// })?;
    /// assert_eq!(op.operator().kernel_slots(), vec![(Slot::Default, true)]);
    /// assert_eq!(op.call1((Tensor::ones(&[2], DType::F32),))?.sum_all()?.item::<f32>()?, 4.0);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    ///
    /// [`Device`]: tensorplay_ir::Device
    pub fn register_kernel<M>(
        &self,
        device_types: impl DeviceTypes,
        f: impl IntoKernel<M>,
    ) -> Result<&Self> {
        let slots = device_types.kernel_slots(self.name(), "device_types")?;
        self.register_kernel_slots(&slots, f, Owner::Process)
    }

    pub(crate) fn register_kernel_slots<M, F: IntoKernel<M>>(
        &self,
        slots: &[Slot],
        f: F,
        owner: Owner,
    ) -> Result<&Self> {
        let op = self.operator();
        register::check_signature::<F, M>(&op, "register_kernel")?;
        register::register_kernel(&op, slots, f.into_kernel(self.name()), owner)?;
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
        let op = self.operator();
        register::check_signature::<F, M>(&op, "register_fake")?;
        register::register_fake(&op, f.into_kernel(self.name()), owner, allow_override)?;
        Ok(self)
    }

    /// Registers an autograd formula: `backward(ctx, grads)` returns one optional gradient per
    /// parameter; `setup_context(ctx, inputs, outputs)` saves what backward needs.
    pub fn register_autograd<G: IntoGrads>(
        &self,
        backward: impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<G> + Send + Sync + 'static,
        setup_context: Option<SetupContextBox>,
    ) -> Result<&Self> {
        self.register_autograd_owned(backward, setup_context, Owner::Process)
    }

    pub(crate) fn register_autograd_owned<G: IntoGrads>(
        &self,
        backward: impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<G> + Send + Sync + 'static,
        setup_context: Option<SetupContextBox>,
        owner: Owner,
    ) -> Result<&Self> {
        let imp = AutogradImpl {
            backward: Arc::new(move |ctx: &AutogradCtx, g: &[Option<Tensor>]| {
                backward(ctx, g).map(IntoGrads::into_grads)
            }),
            setup_context: setup_context.map(Arc::from),
        };
        register::register_autograd(&self.operator(), imp, owner)?;
        Ok(self)
    }

    /// Registers an autograd formula with typed closures, in the seed's order
    /// (`register_autograd(backward, setup_context=…)`): `backward(&state, &grads)` returns the
    /// input gradients — a tuple or `Vec` with one entry per parameter, or per tensor input
    /// passed; `setup(args, outputs)` receives the op's arguments as a tuple (one element per
    /// schema parameter, types checked against the schema now) and returns the state backward
    /// needs. Backward comes first, so its state parameter names its type (`|(x, y): &(Tensor,
    /// Tensor), grads|`).
    ///
    /// ```
    /// use tensorplay_runtime::{Tensor, DType, library::custom_op};
    /// let mul = custom_op("docs_typed_ag::mul")
    ///     .arg_names(&["x", "y"])
    ///     .build(|x: &Tensor, y: &Tensor| x.mul(y))?;
    /// mul.register_autograd_typed(
    ///     |(x, y): &(Tensor, Tensor), g| {
    ///         let g = g.grad(0).expect("one output");
    ///         Ok((Some(g.mul(y)?), Some(g.mul(x)?)))
    ///     },
    ///     |(x, y): (Tensor, Tensor), _outs| Ok((x, y)),
    /// )?;
    /// let x = Tensor::from_vec(vec![2.0f32], &[1])?.requires_grad_(true)?;
    /// let y = Tensor::from_vec(vec![5.0f32], &[1])?;
    /// mul.call((&x, &y))?.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![5.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn register_autograd_typed<A, S, G>(
        &self,
        backward: impl Fn(&S, &BackwardArgs<'_>) -> Result<G> + Send + Sync + 'static,
        setup: impl Fn(A, &[Tensor]) -> Result<S> + Send + Sync + 'static,
    ) -> Result<&Self>
    where
        A: FromArgs,
        S: SavedState,
        G: IntoGrads,
    {
        self.register_autograd_typed_owned(setup, backward, Owner::Process)
    }

    pub(crate) fn register_autograd_typed_owned<A, S, G>(
        &self,
        setup: impl Fn(A, &[Tensor]) -> Result<S> + Send + Sync + 'static,
        backward: impl Fn(&S, &BackwardArgs<'_>) -> Result<G> + Send + Sync + 'static,
        owner: Owner,
    ) -> Result<&Self>
    where
        A: FromArgs,
        S: SavedState,
        G: IntoGrads,
    {
        let op = self.operator();
        autograd_typed::check_types::<A>(op.qualname(), op.schema())?;
        let imp = autograd_typed::typed_autograd(op.qualname(), setup, backward);
        register::register_autograd(&op, imp, owner)?;
        Ok(self)
    }

    /// Inside an autocast region for `device_type`, casts floating inputs (not f64) to
    /// `cast_inputs` before the kernel runs.
    pub fn register_autocast(&self, device_type: &str, cast_inputs: DType) -> Result<&Self> {
        register::register_autocast(&self.operator(), device_type, cast_inputs, Owner::Process)?;
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
        register::register_vmap(&self.operator(), Arc::new(rule), Owner::Process)?;
        Ok(self)
    }

    /// Registers a batching rule over typed arguments ([`vmap_typed`](super::vmap_typed)): the
    /// op's arguments as a tuple (types checked against the schema now), their batch dims as a
    /// tuple of `Option<usize>`, and `(output, out_dim)` (or tuples of them) back.
    pub fn register_vmap_typed<A, Dims, R>(
        &self,
        rule: impl Fn(&VmapInfo, A, Dims) -> Result<R> + Send + Sync + 'static,
    ) -> Result<&Self>
    where
        A: FromArgs,
        Dims: super::vmap_typed::FromDims,
        R: super::vmap_typed::IntoBatched,
    {
        let op = self.operator();
        super::signature::check_params(
            op.qualname(),
            "register_vmap_typed",
            &A::schema_types(),
            op.schema(),
        )?;
        let rule = super::vmap_typed::typed_rule(op.qualname(), rule);
        register::register_vmap(&op, rule, Owner::Process)?;
        Ok(self)
    }

    /// Enables or disables the kernel slot of a concrete device type (`"cpu"`/`"cuda"`, a
    /// [`Device`](tensorplay_ir::Device) or [`Slot`]); a disabled slot falls back to the default
    /// kernel. A slot with no kernel is a warning ([`KernelEnabledGuard::warning`]), and a kernel
    /// registered while its slot is disabled stays disabled. The guard restores the previous flag
    /// when dropped.
    pub fn set_kernel_enabled(
        &self,
        device_type: impl DeviceType,
        enabled: bool,
    ) -> Result<KernelEnabledGuard> {
        let op = self.operator();
        let slot = if device_type.names_default_slot() {
            Slot::Default // refused below with its own message
        } else {
            device_type.slot(self.name(), "device_type")?
        };
        let change = register::set_kernel_enabled(&op, slot, enabled)?;
        Ok(KernelEnabledGuard {
            op,
            slot,
            prev: change.prev,
            warning: change.warning,
        })
    }
}

/// Builder for [`custom_op`] and [`triton_op`]: options first, then `build(kernel)`.
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let scale_ = library::custom_op("docs_builder::scale_")
///     .mutates_args(["out"]) // the kernel writes into `out`
///     .device_types("cpu") // fills the cpu slot only
///     .arg_names(&["out", "factor"])
///     .build(|out: &Tensor, factor: f64| -> Result<()> {
///         out.mul_scalar_(factor)?;
///         Ok(())
///     })?;
/// assert_eq!(
///     scale_.schema().to_string(),
///     "docs_builder::scale_(Tensor(a!) out, float factor) -> ()"
/// );
/// let buf = Tensor::ones(&[2], DType::F32);
/// scale_.call((&buf, 1.5))?;
/// assert_eq!(buf.to_vec::<f32>()?, vec![1.5, 1.5]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct CustomOpBuilder {
    name: String,
    mutates_args: MutatesArgs,
    /// `None`: every device (the default slot). An invalid spelling is kept as the error `build`
    /// reports.
    device_types: Option<Result<Vec<Slot>>>,
    schema: Option<String>,
    arg_names: Option<Vec<String>>,
    triton: bool,
    owner: Owner,
    tags: Vec<Tag>,
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
        owner: Owner::Process,
        tags: Vec::new(),
    }
}

/// Like [`custom_op`], for ops whose kernels launch grid kernels through `wrap_triton`; under
/// compile the whole op is one opaque node.
///
/// ```
/// use tensorplay_runtime::library::{self, CpuLauncher, LaunchArg, ProgramArg, wrap_triton};
/// use tensorplay_runtime::{DType, Error, Result, Tensor};
/// // One program per element: out[i] = 2 * x[i].
/// let double_kernel = wrap_triton(CpuLauncher::new("double_kernel", |pid, args| {
///     let (ProgramArg::Tensor(x), ProgramArg::Tensor(out)) = (&args[0], &args[1]) else {
///         return Err(Error::unsupported("double_kernel", "expected (x, out)"));
///     };
///     let i = pid[0] as usize;
///     // SAFETY: x and out hold one f32 per program; each program writes only its own element.
///     unsafe { out.write(i, 2.0 * x.read::<f32>(i)) };
///     Ok(())
/// }));
/// let double = library::triton_op("docs_triton::double")
///     .arg_names(&["x"])
///     .build(move |x: &Tensor| -> Result<Tensor> {
///         let x = x.to_dtype(DType::F32)?.contiguous()?;
///         let out = Tensor::empty(x.shape(), DType::F32);
///         let grid = [x.numel() as u32, 1, 1];
///         double_kernel.launch(grid, &[LaunchArg::In(x), LaunchArg::Out(out.clone())])?;
///         Ok(out)
///     })?;
/// assert!(double.operator().is_triton());
/// let y = double.call(&Tensor::from_vec(vec![1.0f32, 2.5], &[2])?)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 5.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
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

    /// Device types (`"cpu"`, `"cuda"`, [`Device`](tensorplay_ir::Device) values) whose kernel
    /// slots the body fills; every device when omitted or empty (as `register_kernel(op, [])`:
    /// the device-agnostic slot, never an op without a kernel). An op without tensor parameters
    /// dispatches on its `Device` parameter.
    pub fn device_types(mut self, types: impl DeviceTypes) -> Self {
        self.device_types = match types.slots(&self.name, "device_types") {
            Ok(slots) if slots == [Slot::Default] => None,
            Ok(slots) => Some(Ok(slots)),
            Err(e) => Some(Err(e)),
        };
        self
    }

    /// Scopes the op to `lib`: it is removed when the library drops (PyTorch's `lib=`).
    pub fn lib(mut self, lib: &super::Library) -> Self {
        self.owner = lib.owner;
        self
    }

    /// Tags the definition carries (the seed's `tags=`; metadata, see [`Tag`]).
    pub fn tags(mut self, tags: &[Tag]) -> Self {
        self.tags = tags.to_vec();
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
            Some(Ok(slots)) => Ok(slots.clone()),
            Some(Err(e)) => Err(e.clone()),
        }
    }

    /// The op's schema: the explicit one (checked to name the op) or one inferred from the
    /// kernel's parameter types, agreeing with `mutates_args` and the kernel's arity.
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
            Some(text) => explicit_schema(text, ns, &qualname)?,
            None => self.inferred_schema::<F, M>(&qualname)?,
        };
        self.check_mutates_args(&schema, &qualname)?;
        if let Some(types) = F::param_types() {
            signature::check_params(&qualname, "custom_op", &types, &schema)?;
        }
        schema.namespace = Some(ns.to_string());
        Ok(schema)
    }

    /// The schema inferred from the kernel's parameter types, named by `arg_names` (default
    /// `arg0`, `arg1`, …); a boxed kernel has none to infer.
    fn inferred_schema<F: IntoKernel<M>, M>(&self, qualname: &str) -> Result<Schema> {
        let names: Vec<String> = match &self.arg_names {
            Some(n) => {
                if let Some(types) = F::param_types()
                    && types.len() != n.len()
                {
                    return Err(Error::argument(
                        qualname,
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
            Some(qualname),
        )?)
    }

    /// The schema's write annotations must agree with `mutates_args`, which may name only
    /// tensor parameters.
    fn check_mutates_args(&self, schema: &Schema, qualname: &str) -> Result<()> {
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
                        qualname,
                        "mutates_args",
                        "names of parameters",
                        format!("`{n}`, which is not a parameter"),
                    ));
                }
                Some(p) if !p.ty.is_tensor_like() => {
                    return Err(Error::argument(
                        qualname,
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
        Ok(())
    }

    /// Defines (or redefines) the op with `kernel` as its body and returns its typed handle
    /// ([`CustomOp`]: calls take the kernel's parameter types and return its result type). Nothing is registered when this fails.
    pub fn build<M, F: IntoKernel<M>>(self, kernel: F) -> Result<CustomOp<F::Output, F::Params>> {
        let (ns, name, overload) = check_definable(&self.name)?;
        let slots = self.slots()?;
        let schema = self.resolve_schema::<F, M>(&ns, &name, &overload)?;
        validate::check_definition(&schema)?;
        let qualname = schema.qualified_name();
        if self.device_types.is_some() {
            validate::check_dispatchable(&schema)?;
        }
        let op = Arc::new(Operator::new_custom(
            qualname.clone(),
            schema,
            Origin::CustomOp,
            self.owner,
            self.device_types.as_ref().map(|_| slots.clone()),
            self.triton.then_some(TritonInfo),
        ));
        op.set_tags(dedup_tags(&self.tags));
        register::register_kernel(&op, &slots, kernel.into_kernel(&qualname), self.owner)?;
        let op = registry().insert(op, |existing| match existing.origin() {
            Origin::CustomOp => Ok(()),
            Origin::Builtin => Err(Error::Registration(format!("`{qualname}` is a builtin op"))),
            Origin::Defined => Err(Error::Registration(format!(
                "`{qualname}` was created with define/Library::define; custom_op cannot redefine it"
            ))),
        })?;
        Ok(CustomOp {
            def: CustomOpDef { op },
            ret: PhantomData,
        })
    }
}

/// An explicit schema `text` (with or without the `ns::name` prefix), which must name the op
/// `qualname`; without a namespace it gets `ns`.
fn explicit_schema(text: &str, ns: &str, qualname: &str) -> Result<Schema> {
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
    Ok(s)
}

/// A typed handle from [`CustomOpBuilder::build`]: [`CustomOp::call`] takes exactly the kernel's
/// parameters `P` and returns its result type `R`; everything else is [`CustomOpDef`]'s (it
/// derefs to one).
///
/// The arguments are a tuple with one element per kernel parameter (`(&x, 2.0)`; a one-parameter
/// op also takes the bare argument, `op.call(&x)`). Each element passes as its parameter's owned
/// type (a `&Tensor` or `Tensor` for a tensor, see [`PassAs`](super::typed_call::PassAs)); a
/// wrong type or count is a compile error. A boxed kernel (over `&[Value]`) gives a handle with
/// [`Untyped`] parameters, whose `call` takes any [`CallArgs`] (checked when it runs), as does
/// [`CustomOp::call_values`] for every handle.
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let scaled_sum = library::custom_op("docs_typed::scaled_sum")
///     .arg_names(&["x", "w", "scale"])
///     .build(|x: &Tensor, w: &Tensor, scale: f64| -> Result<Tensor> {
///         x.mul(w)?.sum_all()?.mul_scalar(scale)
///     })?;
/// let x = Tensor::ones(&[3], DType::F32);
/// let y: Tensor = scaled_sum.call((&x, &x, 2.0))?;
/// assert_eq!(y.item::<f32>()?, 6.0);
/// // The boxed path stays: arguments checked against the schema when the call runs.
/// let y = scaled_sum.call_values(&[x.clone().into(), x.into(), 0.5.into()])?;
/// assert_eq!(y.item::<f32>()?, 1.5);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
///
/// ```compile_fail
/// # use tensorplay_runtime::{library, Tensor, DType, Result};
/// let op = library::custom_op("docs_typed_cf::scale")
///     .build(|x: &Tensor, w: f64| -> Result<Tensor> { x.mul_scalar(w) })?;
/// let x = Tensor::ones(&[3], DType::F32);
/// op.call((&x, "two"))?; // `w` is an f64: does not compile
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub struct CustomOp<R, P = Untyped> {
    def: CustomOpDef,
    ret: PhantomData<fn(P) -> R>,
}

impl<R, P> Clone for CustomOp<R, P> {
    fn clone(&self) -> Self {
        CustomOp {
            def: self.def.clone(),
            ret: PhantomData,
        }
    }
}

impl<R, P> std::fmt::Debug for CustomOp<R, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.def.fmt(f)
    }
}

impl<R, P> Deref for CustomOp<R, P> {
    type Target = CustomOpDef;
    fn deref(&self) -> &CustomOpDef {
        &self.def
    }
}

impl<R, P> From<CustomOp<R, P>> for CustomOpDef {
    fn from(op: CustomOp<R, P>) -> CustomOpDef {
        op.def
    }
}

impl<R: ReturnType, P> CustomOp<R, P> {
    /// Calls the op with exactly the kernel's parameters: a tuple (`(&x, &w, 2.0)`) or, for one
    /// parameter, the bare argument. Goes through the dispatcher (autograd, autocast, vmap, fake
    /// tensors and capture apply).
    pub fn call(&self, args: impl TypedArgs<P>) -> Result<R> {
        R::from_tensors(self.name(), self.def.call(args.into_values())?)
    }

    /// Calls the op with arguments checked when the call runs: a tuple of Rust values or boxed
    /// [`Value`]s (the path for values built at run time).
    pub fn call_values(&self, args: impl CallArgs) -> Result<R> {
        R::from_tensors(self.name(), self.def.call(args)?)
    }

    /// Calls the op with keyword arguments too (checked when the call runs).
    pub fn call_kw(&self, args: impl CallArgs, kwargs: &[(&str, Value)]) -> Result<R> {
        R::from_tensors(self.name(), self.def.call_kw(args, kwargs)?)
    }

    /// The untyped handle.
    pub fn def(&self) -> &CustomOpDef {
        &self.def
    }

    /// Converts into the untyped handle.
    pub fn into_def(self) -> CustomOpDef {
        self.def
    }
}
