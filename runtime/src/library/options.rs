//! Typed spellings of the seed's string arguments: the library kind, `impl`'s and `define`'s
//! options, alias analysis and operator tags. The seed's strings stay accepted and parse into
//! these, so a typo is an error naming the accepted spellings instead of a silent default.

use std::fmt;

use tensorplay_ir::schema::Schema;
use tensorplay_ir::{Error, Result};

use tensorplay_core::dispatch::Slot;

/// The kind of a [`Library`](super::Library): `DEF` defines a namespace (one live DEF per
/// namespace), `FRAGMENT` extends one from many places, `IMPL` only adds kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibraryKind {
    /// `"DEF"`: defines the namespace's ops (one live DEF library per namespace).
    Def,
    /// `"IMPL"`: only adds kernels to ops defined elsewhere.
    Impl,
    /// `"FRAGMENT"`: defines more ops into a namespace, from many places.
    Fragment,
}

/// Short name, so calls read `Library::new("mylib", Kind::Def)`.
pub use LibraryKind as Kind;

impl LibraryKind {
    /// Parses the seed's spelling (`"DEF"`, `"IMPL"`, `"FRAGMENT"`; case-sensitive, as PyTorch).
    pub fn parse(s: &str) -> Result<LibraryKind> {
        match s {
            "DEF" => Ok(LibraryKind::Def),
            "IMPL" => Ok(LibraryKind::Impl),
            "FRAGMENT" => Ok(LibraryKind::Fragment),
            other => Err(Error::argument(
                "Library",
                "kind",
                "\"DEF\", \"IMPL\" or \"FRAGMENT\" (or a `Kind` value)",
                format!("\"{other}\""),
            )),
        }
    }
}

impl fmt::Display for LibraryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LibraryKind::Def => "DEF",
            LibraryKind::Impl => "IMPL",
            LibraryKind::Fragment => "FRAGMENT",
        })
    }
}

/// What `Library::new` accepts as its kind: a [`Kind`] value or the seed's string.
pub trait IntoLibraryKind {
    fn into_library_kind(self) -> Result<LibraryKind>;
}

impl IntoLibraryKind for LibraryKind {
    fn into_library_kind(self) -> Result<LibraryKind> {
        Ok(self)
    }
}

impl IntoLibraryKind for &str {
    fn into_library_kind(self) -> Result<LibraryKind> {
        LibraryKind::parse(self)
    }
}

/// Options of [`Library::impl_with`](super::Library::impl_with).
///
/// ```
/// use tensorplay_runtime::library::{ImplOptions, Slot};
/// let opts = ImplOptions { device_type: Slot::Cpu, ..ImplOptions::default() };
/// assert!(!opts.allow_override);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImplOptions {
    /// The kernel slot (`Slot::Cpu`, `Slot::Cuda`, or `Slot::Default` for the device-agnostic
    /// body). Default: `Slot::Default`.
    pub device_type: Slot,
    /// A seed dispatch key (`"CPU"`, `"CompositeImplicitAutograd"`, …); when set it wins over
    /// `device_type`, as in the seed.
    pub dispatch_key: Option<String>,
    /// Whether replacing a kernel already in that slot is allowed. Default: `false`.
    pub allow_override: bool,
}

impl Default for ImplOptions {
    fn default() -> Self {
        ImplOptions {
            device_type: Slot::Default,
            dispatch_key: None,
            allow_override: false,
        }
    }
}

impl ImplOptions {
    /// The slot these options select; `op` names the operator in errors.
    pub(crate) fn slot(&self, op: &str) -> Result<Slot> {
        match &self.dispatch_key {
            Some(key) => Slot::parse(op, "dispatch_key", key),
            None => Ok(self.device_type),
        }
    }
}

/// How the dispatcher learns what an op reads, writes and aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AliasAnalysis {
    /// From the schema's alias annotations (`Tensor(a!)`): the only analysis TensorPlay runs.
    #[default]
    FromSchema,
    /// The op is a pure function: its schema must carry no alias or mutation annotation.
    PureFunction,
}

impl AliasAnalysis {
    /// Parses the seed's spelling: `""` or `"FROM_SCHEMA"`, `"PURE_FUNCTION"`. `"CONSERVATIVE"`
    /// (may alias or write anything) is refused: the compiler's mutation ordering needs the schema
    /// to say what is written.
    pub fn parse(s: &str) -> Result<AliasAnalysis> {
        match s {
            "" | "FROM_SCHEMA" => Ok(AliasAnalysis::FromSchema),
            "PURE_FUNCTION" => Ok(AliasAnalysis::PureFunction),
            "CONSERVATIVE" => Err(Error::unsupported(
                "Library::define",
                "alias_analysis \"CONSERVATIVE\" is not supported: annotate what the op writes in \
                 its schema (`Tensor(a!) out`) and use \"FROM_SCHEMA\"",
            )),
            other => Err(Error::argument(
                "Library::define",
                "alias_analysis",
                "\"\", \"FROM_SCHEMA\" or \"PURE_FUNCTION\"",
                format!("\"{other}\""),
            )),
        }
    }

    /// Checks the schema against the analysis: a pure function has no alias annotations.
    pub(crate) fn check(self, schema: &Schema) -> Result<()> {
        if self != AliasAnalysis::PureFunction {
            return Ok(());
        }
        let annotated = schema
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.alias.is_some()))
            .chain(schema.returns.iter().map(|r| ("return", r.alias.is_some())))
            .find(|(_, has)| *has);
        match annotated {
            Some((name, _)) => Err(Error::Registration(format!(
                "`{}` is declared PURE_FUNCTION but `{name}` carries an alias annotation in `{schema}`",
                schema.qualified_name()
            ))),
            None => Ok(()),
        }
    }
}

/// Operator tags (the seed's `torch.Tag` values that apply to custom ops). Tags are metadata a
/// definition carries and tools query ([`CustomOpDef::tags`](super::CustomOpDef::tags)); the
/// compiler does not change its behaviour for any of them yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// `pt2_compliant_tag`: the op was checked with `opcheck`.
    Pt2Compliant,
    /// `needs_fixed_stride_order`: kernels need inputs in the eager stride order.
    NeedsFixedStrideOrder,
    /// `flexible_layout`: kernels accept any input strides.
    FlexibleLayout,
    /// `nondeterministic_seeded`: results depend on the random seed.
    NondeterministicSeeded,
    /// `nondeterministic_bitwise`: results may differ bitwise run to run.
    NondeterministicBitwise,
    /// `data_dependent_output`: output values depend on input data beyond elementwise.
    DataDependentOutput,
    /// `dynamic_output_shape`: the output shape depends on input data.
    DynamicOutputShape,
    /// `pointwise`: an elementwise op.
    Pointwise,
    /// `cudagraph_unsafe`: must not be captured into a CUDA graph.
    CudagraphUnsafe,
}

const TAG_NAMES: [(Tag, &str); 9] = [
    (Tag::Pt2Compliant, "pt2_compliant_tag"),
    (Tag::NeedsFixedStrideOrder, "needs_fixed_stride_order"),
    (Tag::FlexibleLayout, "flexible_layout"),
    (Tag::NondeterministicSeeded, "nondeterministic_seeded"),
    (Tag::NondeterministicBitwise, "nondeterministic_bitwise"),
    (Tag::DataDependentOutput, "data_dependent_output"),
    (Tag::DynamicOutputShape, "dynamic_output_shape"),
    (Tag::Pointwise, "pointwise"),
    (Tag::CudagraphUnsafe, "cudagraph_unsafe"),
];

impl Tag {
    /// Parses the seed's name (`"pt2_compliant_tag"`; a `torch.Tag.` prefix is accepted).
    pub fn parse(s: &str) -> Result<Tag> {
        let name = s.strip_prefix("torch.Tag.").unwrap_or(s);
        TAG_NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(t, _)| *t)
            .ok_or_else(|| {
                let known: Vec<&str> = TAG_NAMES.iter().map(|(_, n)| *n).collect();
                Error::argument(
                    "Library::define",
                    "tags",
                    known.join(", "),
                    format!("`{s}`"),
                )
            })
    }

    /// The seed's name.
    pub fn name(self) -> &'static str {
        TAG_NAMES
            .iter()
            .find(|(t, _)| *t == self)
            .map(|(_, n)| *n)
            .expect("TAG_NAMES lists every tag")
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Tags in first-seen order, each once (how definitions store them).
pub(crate) fn dedup_tags(tags: &[Tag]) -> Vec<Tag> {
    let mut out: Vec<Tag> = Vec::new();
    for t in tags {
        if !out.contains(t) {
            out.push(*t);
        }
    }
    out
}

/// Options of [`Library::define_with`](super::Library::define_with).
///
/// ```
/// use tensorplay_runtime::library::{AliasAnalysis, DefineOptions, Tag};
/// let opts = DefineOptions { tags: vec![Tag::Pointwise], ..DefineOptions::default() };
/// assert_eq!(opts.alias_analysis, AliasAnalysis::FromSchema);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DefineOptions {
    /// How reads, writes and aliasing are known (default: from the schema).
    pub alias_analysis: AliasAnalysis,
    /// Tags the definition carries (duplicates are kept once).
    pub tags: Vec<Tag>,
}

impl DefineOptions {
    /// Parses the seed's `define(schema, alias_analysis="", tags=())` strings.
    pub fn parse(alias_analysis: &str, tags: &[&str]) -> Result<DefineOptions> {
        Ok(DefineOptions {
            alias_analysis: AliasAnalysis::parse(alias_analysis)?,
            tags: tags.iter().map(|t| Tag::parse(t)).collect::<Result<_>>()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_round_trips_through_its_name() {
        for (tag, name) in TAG_NAMES {
            assert_eq!(Tag::parse(name).unwrap(), tag);
            assert_eq!(tag.name(), name);
        }
        assert_eq!(Tag::parse("torch.Tag.pointwise").unwrap(), Tag::Pointwise);
        let err = Tag::parse("pointwize").unwrap_err().to_string();
        assert!(
            err.contains("pointwize") && err.contains("pt2_compliant_tag"),
            "{err}"
        );
    }

    #[test]
    fn library_kind_parses_the_seed_spellings_only() {
        assert_eq!(LibraryKind::parse("DEF").unwrap(), Kind::Def);
        assert_eq!(LibraryKind::parse("FRAGMENT").unwrap(), Kind::Fragment);
        assert!(LibraryKind::parse("def").is_err());
    }
}
