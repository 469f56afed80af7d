//! `Library(ns, kind)`: a handle that owns registrations. `DEF` defines a namespace (one live DEF
//! per namespace), `FRAGMENT` extends one from many places, `IMPL` only adds kernels. Dropping the
//! handle removes everything it registered, so the ops can be defined again.

use std::sync::Arc;

use tensorplay_ir::schema::{Schema, validate_qualname};
use tensorplay_ir::{Error, Result};

use super::custom_op::{CustomOpDef, check_definable};
use super::options::{DefineOptions, ImplOptions, IntoLibraryKind, LibraryKind, dedup_tags};
use super::registry::{Operator, Origin, Owner, Slot, new_library_owner, registry};
use super::typed::IntoKernel;
use super::validate;

/// A handle owning operator definitions and registrations in one namespace.
#[derive(Debug)]
pub struct Library {
    ns: String,
    kind: LibraryKind,
    pub(crate) owner: Owner,
}

impl Library {
    /// Opens a library: `kind` is a [`Kind`](super::Kind) value or the seed's `"DEF"`, `"IMPL"`,
    /// `"FRAGMENT"` (case-sensitive, as PyTorch).
    ///
    /// ```
    /// use tensorplay_runtime::library::{Kind, Library};
    /// let lib = Library::new("docs_lib", Kind::Def)?;
    /// assert!(Library::new("docs_lib", "DEF").is_err()); // one live DEF per namespace
    /// drop(lib);
    /// let _again = Library::new("docs_lib", "DEF")?;
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn new(namespace: &str, kind: impl IntoLibraryKind) -> Result<Library> {
        let kind = kind.into_library_kind()?;
        // An IMPL library may add kernels to `prim` ops (only defining into `prim` is reserved;
        // `tp` holds the builtins, which take no registrations at all).
        let valid = if kind == LibraryKind::Impl && namespace == "prim" {
            validate_qualname(&format!("{namespace}::x")).map(|_| ())
        } else {
            check_definable(&format!("{namespace}::x")).map(|_| ())
        };
        valid.map_err(|e| {
            Error::Registration(format!("invalid library namespace `{namespace}`: {e}"))
        })?;
        let owner = new_library_owner();
        if kind == LibraryKind::Def {
            registry().claim_def_namespace(namespace, owner)?;
        }
        Ok(Library {
            ns: namespace.to_string(),
            kind,
            owner,
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The kind.
    pub fn kind(&self) -> LibraryKind {
        self.kind
    }

    /// Qualifies `name` with this library's namespace, or checks that it already has it.
    fn qualify(&self, name: &str) -> Result<String> {
        match name.split_once("::") {
            Some((ns, _)) if ns != self.ns => Err(Error::Registration(format!(
                "`{name}` is not in this library's namespace `{}`",
                self.ns
            ))),
            Some(_) => Ok(name.to_string()),
            None => Ok(format!("{}::{name}", self.ns)),
        }
    }

    /// Defines an operator from a schema like `"add(Tensor a, Tensor b) -> Tensor"` (a full
    /// `"ns::op(...)"` string may be pasted). `alias_analysis` (`""`, `"FROM_SCHEMA"`,
    /// `"PURE_FUNCTION"`) and `tags` (`"pt2_compliant_tag"`, …) are the seed's strings; see
    /// [`Library::define_with`] for the typed form. Returns the qualified name.
    pub fn define(&self, schema: &str, alias_analysis: &str, tags: &[&str]) -> Result<String> {
        self.define_with(schema, DefineOptions::parse(alias_analysis, tags)?)
    }

    /// [`Library::define`] with typed options.
    ///
    /// ```
    /// use tensorplay_runtime::library::{AliasAnalysis, DefineOptions, Kind, Library, Tag, op_handle};
    /// let lib = Library::new("docs_define_with", Kind::Def)?;
    /// let opts = DefineOptions { alias_analysis: AliasAnalysis::PureFunction, tags: vec![Tag::Pointwise] };
    /// let name = lib.define_with("scale(Tensor x, float s) -> Tensor", opts)?;
    /// assert_eq!(op_handle(name.as_str())?.tags(), vec![Tag::Pointwise]);
    /// // A pure function may not write its inputs:
    /// let pure = DefineOptions { alias_analysis: AliasAnalysis::PureFunction, ..Default::default() };
    /// assert!(lib.define_with("bump(Tensor(a!) x) -> ()", pure).is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn define_with(&self, schema: &str, options: DefineOptions) -> Result<String> {
        if self.kind == LibraryKind::Impl {
            return Err(Error::Registration(format!(
                "Library(\"{}\", \"IMPL\") can only add kernels; define ops in a DEF or FRAGMENT library",
                self.ns
            )));
        }
        define_op(schema, Some(&self.ns), self.owner, true, &options)
    }

    /// Registers `f` as the kernel of `op_name` for `device_type` (a device `"CPU"`/`"CUDA"` or a
    /// `Composite…` key → the device-agnostic slot); a non-empty `dispatch_key` wins over
    /// `device_type`. With `allow_override == false`, an existing kernel in that slot is an error.
    /// [`Library::impl_with`] is the typed form.
    pub fn r#impl<M, F: IntoKernel<M>>(
        &self,
        op_name: &str,
        f: F,
        device_type: &str,
        dispatch_key: &str,
        allow_override: bool,
    ) -> Result<()> {
        let op = registry().get(&self.qualify(op_name)?)?;
        let (key, arg) = if dispatch_key.is_empty() {
            (device_type, "device_type")
        } else {
            (dispatch_key, "dispatch_key")
        };
        // Errors name the parameter the caller actually filled in.
        let slot = Slot::parse(op.qualname(), arg, key)?;
        self.impl_in_slot(op, slot, f, allow_override)
    }

    /// Registers `f` as the kernel of `op_name` in the slot `options` select.
    ///
    /// ```
    /// use tensorplay_runtime::{Tensor, DType};
    /// use tensorplay_runtime::library::{ImplOptions, Kind, Library, Slot, op_handle};
    /// let lib = Library::new("docs_impl_with", Kind::Def)?;
    /// lib.define("neg2(Tensor x) -> Tensor", "", &[])?;
    /// let cpu = ImplOptions { device_type: Slot::Cpu, ..ImplOptions::default() };
    /// lib.impl_with("neg2", |x: &Tensor| x.neg(), cpu.clone())?;
    /// assert!(lib.impl_with("neg2", |x: &Tensor| x.neg(), cpu).is_err()); // allow_override: false
    /// let y = op_handle("docs_impl_with::neg2")?.call1((&Tensor::ones(&[2], DType::F32),))?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0]);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn impl_with<M, F: IntoKernel<M>>(
        &self,
        op_name: &str,
        f: F,
        options: ImplOptions,
    ) -> Result<()> {
        let op = registry().get(&self.qualify(op_name)?)?;
        let slot = options.slot(op.qualname())?;
        self.impl_in_slot(op, slot, f, options.allow_override)
    }

    fn impl_in_slot<M, F: IntoKernel<M>>(
        &self,
        op: Arc<Operator>,
        slot: Slot,
        f: F,
        allow_override: bool,
    ) -> Result<()> {
        if !allow_override && op.kernel_in(slot).is_some() {
            return Err(Error::Registration(format!(
                "`{}` already has a {slot} kernel (allow_override is false)",
                op.qualname()
            )));
        }
        CustomOpDef::from_operator(op).register_kernel_slots(&[slot], f, self.owner)?;
        Ok(())
    }

    /// Always an error: TensorPlay's dispatcher has no per-key fallthrough table, so accepting a
    /// fallback would silently mis-dispatch.
    pub fn fallback(&self, kind: &str) -> Result<()> {
        Err(Error::unsupported(
            format!("Library(\"{}\").fallback", self.ns),
            format!(
                "fallback kernels (`{kind}`) are not supported: the dispatcher has no per-key fallthrough table"
            ),
        ))
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        registry().remove_owner(self.owner);
    }
}

/// Defines an op from `text` (a schema with or without namespace, or a bare qualified name with
/// `schema` given separately by the caller). `strict` makes an existing op an error; otherwise an
/// identical definition is accepted as is.
pub(crate) fn define_op(
    text: &str,
    default_ns: Option<&str>,
    owner: Owner,
    strict: bool,
    options: &DefineOptions,
) -> Result<String> {
    // The seed's loose spelling (`ns::add(Tensor, Tensor)`) is completed only when the text does
    // not parse as given, so errors keep pointing into the caller's text.
    let mut schema = Schema::parse(text)
        .or_else(|e| Schema::parse(&validate::complete_loose(text)).map_err(|_| e))?;
    match (&schema.namespace, default_ns) {
        (None, Some(ns)) => schema.namespace = Some(ns.to_string()),
        (None, None) => {
            return Err(Error::Registration(format!(
                "`{text}` needs a namespace (`ns::op(...)`)"
            )));
        }
        (Some(ns), Some(lib_ns)) if ns != lib_ns => {
            return Err(Error::Registration(format!(
                "`{text}` is not in this library's namespace `{lib_ns}`"
            )));
        }
        _ => {}
    }
    let qualname = schema.qualified_name();
    check_definable(&qualname)?;
    validate::check_definition(&schema)?;
    options.alias_analysis.check(&schema)?;
    if !strict
        && let Some(existing) = registry().find(&qualname)
        && existing.origin() == Origin::Defined
        && existing.schema() == &schema
        && existing.tags() == dedup_tags(&options.tags)
    {
        return Ok(qualname);
    }
    let op = Arc::new(Operator::new_custom(
        qualname.clone(),
        schema,
        Origin::Defined,
        owner,
        None,
        None,
    ));
    op.set_tags(dedup_tags(&options.tags));
    registry()
        .insert(op, |existing| match existing.origin() {
            Origin::Defined => Err(Error::Registration(format!(
                "`{qualname}` is already defined"
            ))),
            Origin::CustomOp => Err(Error::Registration(format!(
                "`{qualname}` was created with custom_op; define cannot redefine it"
            ))),
            Origin::Builtin => Err(Error::Registration(format!("`{qualname}` is a builtin op"))),
        })
        .map(|_| ())?;
    Ok(qualname)
}
