//! `tensorplay::library`: define custom operators once and use them everywhere — eager, autograd,
//! autocast, vmap, fake tensors and the compiler.
//!
//! The functions mirror PyTorch's `torch.library` (names and semantics from the seed API page):
//! [`custom_op`], [`define`], [`r#impl`], [`impl_abstract`], [`register_kernel`], [`get_kernel`],
//! [`register_fake`], [`register_autograd`], [`register_autocast`], [`register_vmap`],
//! [`infer_schema`](infer_schema::infer_schema), [`triton_op`], [`wrap_triton`](triton::wrap_triton)
//! and the [`Library`] class. Keyword arguments become builder methods or trailing parameters;
//! `lib: Option<&Library>` makes a registration owned by (and removed with) that library.

pub mod autograd;
pub mod autograd_typed;
pub(crate) mod backend;
pub mod bind;
pub mod call_args;
pub mod custom_op;
pub mod device_types;
pub mod fake_ctx;
pub mod infer_schema;
pub mod lib_handle;
pub mod log;
pub mod options;
pub(crate) mod register;
pub mod registry;
mod signature;
pub mod triton;
pub mod typed;
pub mod typed_call;
pub(crate) mod validate;
pub mod vmap_rule;
pub mod vmap_typed;

use std::sync::Arc;

use tensorplay_ir::{DType, Error, Result};

pub use autograd::{AutogradCtx, Grad, IntoGrads};
pub use autograd_typed::{BackwardArgs, FromArgs, SavedState};
pub use call_args::CallArgs;
pub use custom_op::{
    CustomOp, CustomOpBuilder, CustomOpDef, KernelEnabledGuard, custom_op, triton_op,
};
pub use device_types::{DeviceType, DeviceTypes};
pub use fake_ctx::{DynamicSize, FakeCtx, get_ctx};
pub use infer_schema::{IntoPrototype, MutatesArgs, Prototype, infer_schema};
pub use lib_handle::Library;
pub use options::{
    AliasAnalysis, DefineOptions, ImplOptions, IntoLibraryKind, Kind, LibraryKind, Tag,
};
pub use registry::{KernelFn, Operator, Owner, Slot, registry};
pub use triton::{
    CpuLauncher, GpuImage, GpuKernel, GridLauncher, LaunchArg, ProgramArg, TritonKernel,
    wrap_triton,
};
pub use typed::{ArgType, IntoKernel, KernelArg, ReturnElem, ReturnType};
pub use typed_call::{PassAs, TypedArgs, Untyped};
pub use vmap_rule::{VmapInfo, VmapRule};
pub use vmap_typed::{FromDims, IntoBatched};

use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// Something naming an operator: its qualified name or a [`CustomOpDef`].
pub trait OpLike {
    /// The registry entry.
    fn resolve(&self) -> Result<Arc<Operator>>;
}

impl OpLike for &str {
    fn resolve(&self) -> Result<Arc<Operator>> {
        registry().get(self)
    }
}

impl OpLike for String {
    fn resolve(&self) -> Result<Arc<Operator>> {
        registry().get(self)
    }
}

impl OpLike for &CustomOpDef {
    fn resolve(&self) -> Result<Arc<Operator>> {
        Ok(self.operator())
    }
}

impl OpLike for CustomOpDef {
    fn resolve(&self) -> Result<Arc<Operator>> {
        Ok(self.operator())
    }
}

impl<R, P> OpLike for &CustomOp<R, P> {
    fn resolve(&self) -> Result<Arc<Operator>> {
        Ok(self.operator())
    }
}

fn owner(lib: Option<&Library>) -> Owner {
    lib.map_or(Owner::Process, |l| l.owner)
}

fn handle(op: impl OpLike) -> Result<CustomOpDef> {
    Ok(CustomOpDef::from_operator(op.resolve()?))
}

/// The handle of a `define`d (or any registered) op, to call it and register on it.
///
/// ```
/// use tensorplay_runtime::library;
/// library::define("docs_handle::f(Tensor x) -> Tensor", None, None)?;
/// assert_eq!(library::op_handle("docs_handle::f")?.name(), "docs_handle::f");
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn op_handle(op: impl OpLike) -> Result<CustomOpDef> {
    handle(op)
}

/// Defines an operator if absent (kernels are attached later with [`r#impl`] or
/// [`Library::r#impl`]). `qualname` may be a full schema (`"ns::op(Tensor x) -> Tensor"`);
/// otherwise `schema` gives the part from `(` on. Defining the same schema again is a no-op.
///
/// ```
/// use tensorplay_runtime::library;
/// library::define("docs_define::twice(Tensor x) -> Tensor", None, None)?;
/// library::define("docs_define::twice", Some("(Tensor x) -> Tensor"), None)?; // same: no-op
/// assert!(library::define("docs_define::twice", Some("(Tensor y) -> Tensor"), None).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn define(qualname: &str, schema: Option<&str>, lib: Option<&Library>) -> Result<()> {
    if let Some(l) = lib
        && l.kind() == LibraryKind::Impl
    {
        return Err(Error::Registration(format!(
            "define(`{qualname}`): Library(\"{}\", \"IMPL\") can only add kernels; define ops in a DEF or FRAGMENT library",
            l.namespace()
        )));
    }
    let name = registry::name_part(qualname);
    let text = match schema.map(str::trim) {
        Some(s) if s.starts_with('(') => format!("{name}{s}"),
        // A schema carrying its own name must name the same op (`define("ns::a", "foo(...)")`
        // is a mistake, not the op `ns::afoo`).
        Some(s) => {
            let given = registry::name_part(s);
            let own = given.rsplit("::").next().unwrap_or(given);
            let want = name.rsplit("::").next().unwrap_or(name);
            if given != name && own != want {
                return Err(Error::Registration(format!(
                    "define(`{qualname}`): the schema `{s}` names the op `{given}`; pass the \
                     part from `(` on, or a schema with the same name"
                )));
            }
            format!("{name}{}", &s[given.len()..])
        }
        None => qualname.to_string(),
    };
    if !text.contains('(') {
        return Err(Error::Registration(format!(
            "define(`{qualname}`) needs a schema: pass `ns::op(Tensor x) -> Tensor` or a schema argument"
        )));
    }
    lib_handle::define_op(
        &text,
        lib.map(|l| l.namespace()),
        owner(lib),
        false,
        &options::DefineOptions::default(),
    )
    .map(|_| ())
}

/// Registers `func` as a kernel of `qualname` for `types` (`"CPU"`/`"CUDA"`/`"cpu"`/`"cuda"` or a
/// `Composite…` key for the device-agnostic slot; `[]` is the device-agnostic slot).
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// library::define("docs_impl::triple(Tensor x) -> Tensor", None, None)?;
/// let triple = |x: &Tensor| -> Result<Tensor> { x.mul_scalar(3.0) };
/// library::r#impl("docs_impl::triple", &["CPU"], triple, None)?;
/// let op = library::op_handle("docs_impl::triple")?;
/// assert_eq!(op.call1((Tensor::ones(&[2], DType::F32),))?.to_vec::<f32>()?, vec![3.0, 3.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn r#impl<M, F: IntoKernel<M>>(
    qualname: &str,
    types: &[&str],
    func: F,
    lib: Option<&Library>,
) -> Result<()> {
    let op = handle(qualname)?;
    let slots = register::parse_slots(qualname, types)?;
    op.register_kernel_slots(&slots, func, owner(lib))?;
    Ok(())
}

/// Registers a kernel for `device_types`: lower-case `"cpu"`/`"cuda"` strings, [`Device`]
/// values or [`Slot`]s; `&[]`, `"default"` and every `Composite…` key
/// (`"CompositeExplicitAutograd"`, `"CompositeImplicitAutograd"`, …) are the device-agnostic
/// slot, as the seed says. Upper-case device names (`"CPU"`) are [`r#impl`]'s; here they are an
/// error naming the accepted ones.
///
/// ```
/// use tensorplay_runtime::{library, library::Slot, Tensor, DType, Result};
/// let op = library::custom_op("docs_free_rk::twice")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
/// let kernel = |x: &Tensor| -> Result<Tensor> { x.mul_scalar(3.0) };
/// library::register_kernel(&op, "cpu", kernel, None)?;
/// library::register_kernel(&op, "CompositeImplicitAutograd", kernel, None)?;
/// assert_eq!(op.operator().kernel_slots(), vec![(Slot::Cpu, true), (Slot::Default, true)]);
/// assert!(library::register_kernel(&op, "CPU", kernel, None).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
///
/// [`Device`]: tensorplay_ir::Device
pub fn register_kernel<M, F: IntoKernel<M>>(
    op: impl OpLike,
    device_types: impl DeviceTypes,
    func: F,
    lib: Option<&Library>,
) -> Result<()> {
    let op = handle(op)?;
    let slots = device_types.kernel_slots(op.name(), "device_types")?;
    op.register_kernel_slots(&slots, func, owner(lib))?;
    Ok(())
}

/// Registers the fake (shape) kernel. With `allow_override == false`, a second registration is an
/// error.
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Device, Result};
/// let op = library::custom_op("docs_fake::double")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
/// // Metadata only: a fake tensor of the output's shape, dtype and device.
/// let fake = |x: &Tensor| -> Result<Tensor> {
///     Ok(Tensor::empty_fake(x.shape(), x.dtype(), x.device()))
/// };
/// library::register_fake(&op, fake, None, false)?;
/// let y = op.call(&Tensor::empty_fake(&[4, 2], DType::F16, Device::Cpu))?;
/// assert!(y.is_fake() && y.shape() == &[4, 2]);
/// assert!(library::register_fake(&op, fake, None, false).is_err()); // no override
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn register_fake<M, F: IntoKernel<M>>(
    op: impl OpLike,
    func: F,
    lib: Option<&Library>,
    allow_override: bool,
) -> Result<()> {
    handle(op)?.register_fake_owned(func, owner(lib), allow_override)?;
    Ok(())
}

/// Deprecated alias of [`register_fake`] (overrides allowed).
pub fn impl_abstract<M, F: IntoKernel<M>>(
    qualname: &str,
    func: F,
    lib: Option<&Library>,
) -> Result<()> {
    register_fake(qualname, func, lib, true)
}

/// Registers an autograd formula (not allowed on mutating ops): `setup_context(ctx, inputs,
/// outputs)` saves what `backward(ctx, grads)` needs in the [`AutogradCtx`]; `backward` returns
/// one optional gradient per parameter.
///
/// ```
/// use tensorplay_runtime::{library, library::AutogradCtx, Error, Tensor, Value, Result};
/// let cube = library::custom_op("docs_ag::cube")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul(x)?.mul(x) })?;
/// library::register_autograd(
///     &cube,
///     |ctx: &AutogradCtx, grads: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
///         let x = &ctx.saved_tensors()[0];
///         let g = grads[0].as_ref().expect("one output");
///         Ok(vec![Some(g.mul(&x.mul(x)?.mul_scalar(3.0)?)?)]) // d(x³) = 3x²
///     },
///     Some(Box::new(
///         |ctx: &mut AutogradCtx, inputs: &[Value], _outputs: &[Tensor]| -> Result<()> {
///             let Value::Tensor(x) = &inputs[0] else {
///                 return Err(Error::unsupported("cube's setup_context", "expected a tensor"));
///             };
///             ctx.save_for_backward(&[x]);
///             Ok(())
///         },
///     )),
///     None,
/// )?;
/// let x = Tensor::from_vec(vec![2.0f32], &[1])?.requires_grad_(true)?;
/// cube.call(&x)?.sum_all()?.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![12.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn register_autograd<G: IntoGrads>(
    op: impl OpLike,
    backward: impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<G> + Send + Sync + 'static,
    setup_context: Option<autograd::SetupContextBox>,
    lib: Option<&Library>,
) -> Result<()> {
    handle(op)?.register_autograd_owned(backward, setup_context, owner(lib))?;
    Ok(())
}

/// Registers an autograd formula with typed closures, `backward` first as in the seed (see
/// [`CustomOpDef::register_autograd_typed`]); `lib` scopes it to a [`Library`].
///
/// ```
/// use tensorplay_runtime::{library, Tensor, Result};
/// let scale = library::custom_op("docs_ag_typed::scale")
///     .arg_names(&["x", "w"])
///     .build(|x: &Tensor, w: f64| -> Result<Tensor> { x.mul_scalar(w) })?;
/// library::register_autograd_typed(
///     &scale,
///     |w: &f64, g| Ok((Some(g.grad(0).expect("one output").mul_scalar(*w)?), None::<Tensor>)),
///     |(_x, w): (Tensor, f64), _outs| Ok(w), // the state backward needs
///     None,
/// )?;
/// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
/// scale.call((&x, 3.0))?.sum_all()?.backward()?;
/// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 3.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn register_autograd_typed<A, S, G>(
    op: impl OpLike,
    backward: impl Fn(&S, &BackwardArgs<'_>) -> Result<G> + Send + Sync + 'static,
    setup: impl Fn(A, &[Tensor]) -> Result<S> + Send + Sync + 'static,
    lib: Option<&Library>,
) -> Result<()>
where
    A: FromArgs,
    S: SavedState,
    G: IntoGrads,
{
    handle(op)?.register_autograd_typed_owned(setup, backward, owner(lib))?;
    Ok(())
}

/// Inside an autocast region for `device_type`, casts the op's floating inputs (not f64) to
/// `cast_inputs` before its kernel runs.
///
/// ```
/// use tensorplay_runtime::autocast::autocast;
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let op = library::custom_op("docs_autocast::double")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
/// library::register_autocast(&op, "cpu", DType::BF16, None)?;
/// let x = Tensor::ones(&[2], DType::F32);
/// {
///     let _region = autocast("cpu", DType::BF16)?;
///     assert_eq!(op.call(&x)?.dtype(), DType::BF16);
/// }
/// assert_eq!(op.call(&x)?.dtype(), DType::F32); // outside the region: no cast
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn register_autocast(
    op: impl OpLike,
    device_type: &str,
    cast_inputs: DType,
    lib: Option<&Library>,
) -> Result<()> {
    let op = op.resolve()?;
    register::register_autocast(&op, device_type, cast_inputs, owner(lib))
}

/// Registers a vmap batching rule: `rule(info, in_dims, args)` gets the batched arguments with
/// each one's batch dim (`None`: unbatched) and the batch size in [`VmapInfo`], and returns the
/// outputs with theirs.
///
/// ```
/// use tensorplay_runtime::library::{self, VmapInfo};
/// use tensorplay_runtime::vmap::{fallback_calls, vmap};
/// use tensorplay_runtime::{Error, Tensor, Value, Result};
/// let double = library::custom_op("docs_vmap::double")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
/// library::register_vmap(
///     &double,
///     |info: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
///         let Value::Tensor(x) = &args[0] else {
///             return Err(Error::unsupported("double's vmap rule", "expected a tensor"));
///         };
///         assert_eq!(info.batch_size, 3);
///         // Elementwise: the whole batch at once, the batch dim where it was.
///         Ok((vec![x.mul_scalar(2.0)?], vec![in_dims[0]]))
///     },
///     None,
/// )?;
/// let per_row = vmap(|xs: &[Tensor]| Ok(vec![double.call(&xs[0])?]), vec![Some(0)], vec![0]);
/// let before = fallback_calls();
/// let y = per_row(&[Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1])?])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
/// assert_eq!(fallback_calls(), before); // the rule ran once for the batch
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn register_vmap(
    op: impl OpLike,
    func: impl Fn(&VmapInfo, &[Option<usize>], &[Value]) -> Result<(Vec<Tensor>, Vec<Option<usize>>)>
    + Send
    + Sync
    + 'static,
    lib: Option<&Library>,
) -> Result<()> {
    let op = op.resolve()?;
    register::register_vmap(&op, Arc::new(func), owner(lib))
}

/// The kernel that would run for `dispatch_key` (`cpu`, `cuda`, `default` or a `Composite…`
/// spelling; device names are case-insensitive). A disabled concrete kernel counts as absent;
/// nothing usable is a lookup error.
///
/// ```
/// use tensorplay_runtime::{library, Tensor, DType, Result};
/// let op = library::custom_op("docs_get_kernel::double")
///     .arg_names(&["x"])
///     .build(|x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0) })?;
/// // The body fills the device-agnostic slot, which serves cpu too.
/// let kernel = library::get_kernel(&op, "cpu")?;
/// let outs = kernel(&[Tensor::ones(&[2], DType::F32).into()])?; // boxed, no dispatcher
/// assert_eq!(outs[0].to_vec::<f32>()?, vec![2.0, 2.0]);
/// assert!(library::get_kernel(&op, "tpu").is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn get_kernel(op: impl OpLike, dispatch_key: &str) -> Result<KernelFn> {
    let op = op.resolve()?;
    register::lookup_kernel(&op, dispatch_key)
}
