//! Operator schemas: `ns::op.overload(Tensor(a!) x, *, float eps=1e-05) -> Tensor`.
//!
//! A hand-written recursive-descent parser and a printer. Printing reproduces canonical input
//! exactly, so schemas pasted from PyTorch survive a round trip, and every parse error points at
//! the column of the offending character.
//!
//! This file owns the schema types and their small queries; the submodules hold the rest:
//! `name` checks operator names, `default` builds and reads default values, `print` writes the
//! text form and `parse` reads it back.

mod default;
mod name;
mod parse;
mod print;

pub use name::validate_qualname;

/// A parsed operator schema.
///
/// ```
/// use tensorplay_ir::schema::Schema;
/// let text = "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
/// let s = Schema::parse(text)?;
/// assert_eq!(s.qualified_name(), "aten::add.Tensor");
/// assert!(s.params[2].kwarg_only);
/// assert_eq!(s.to_string(), text);
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schema {
    /// `aten` in `aten::add`; `None` when written without one (`Library::define` fills it in).
    pub namespace: Option<String>,
    /// The operator name, `add` in `aten::add.Tensor`.
    pub name: String,
    /// The overload name, `Tensor` in `aten::add.Tensor`.
    pub overload: Option<String>,
    /// The parameters in order; keyword-only ones (after `*`) come last.
    pub params: Vec<Param>,
    /// The returns; empty for `-> ()`.
    pub returns: Vec<Return>,
    /// Whether the returns are printed in parentheses. Parsing sets it exactly when they were
    /// written so; zero or several returns are parenthesized regardless.
    pub returns_tuple: bool,
}

/// One parameter of a schema, e.g. `Tensor(a!) out` or `float eps=1e-05`.
///
/// ```
/// use tensorplay_ir::schema::Schema;
/// let s = Schema::parse("ns::op(Tensor(a!) out, *, float eps=1e-05) -> ()")?;
/// assert!(s.params[0].is_mutated());
/// assert_eq!(s.params[1].default.as_ref().unwrap().text, "1e-05");
/// assert_eq!(s.params[1].to_string(), "float eps=1e-05");
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Param {
    /// The parameter name.
    pub name: String,
    /// The declared type.
    pub ty: SchemaType,
    /// The alias annotation, `(a!)` in `Tensor(a!) out`.
    pub alias: Option<AliasInfo>,
    /// The default value, if any.
    pub default: Option<Default>,
    /// Whether the parameter comes after `*` (may only be passed by name).
    pub kwarg_only: bool,
}

/// One return of a schema, e.g. `Tensor(a!)` or `Tensor values`.
///
/// ```
/// use tensorplay_ir::schema::Schema;
/// let s = Schema::parse("aten::max.dim(Tensor self, int dim) -> (Tensor values, Tensor indices)")?;
/// assert_eq!(s.returns[1].name.as_deref(), Some("indices"));
/// assert_eq!(s.returns[1].to_string(), "Tensor indices");
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Return {
    /// The return's name; only possible inside parentheses.
    pub name: Option<String>,
    /// The returned type.
    pub ty: SchemaType,
    /// The alias annotation, `(a)` in `-> Tensor(a)`.
    pub alias: Option<AliasInfo>,
}

/// The type of a parameter or return: a base type wrapped in `?` (optional) and list suffixes.
///
/// The alias annotation is not part of the type; it is printed right after the base type name.
///
/// ```
/// use tensorplay_ir::schema::{BaseType, SchemaType};
/// let ty = SchemaType::tensor().optional().list();
/// assert_eq!(ty.to_string(), "Tensor?[]");
/// assert!(ty.is_tensor_list());
/// assert_eq!(SchemaType::from(BaseType::Int).list().optional().to_string(), "int[]?");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SchemaType {
    /// A plain type: `Tensor`, `int`, `MyType`…
    Base(BaseType),
    /// `T?`: the type or `None`.
    Optional(Box<SchemaType>),
    /// `T[]` (`None`) or the fixed-size `T[N]` (`Some(N)`).
    List(Box<SchemaType>, Option<usize>),
}

/// The base type names a schema knows; any other identifier is kept as [`BaseType::Other`].
///
/// ```
/// use tensorplay_ir::schema::BaseType;
/// assert_eq!(BaseType::from("SymInt"), BaseType::SymInt);
/// assert_eq!(BaseType::from("Dimname"), BaseType::Other("Dimname".into()));
/// assert_eq!(BaseType::Float.name(), "float");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BaseType {
    Tensor,
    Int,
    SymInt,
    Float,
    Bool,
    Str,
    Scalar,
    ScalarType,
    Device,
    Layout,
    MemoryFormat,
    Generator,
    /// A type name we do not model, kept verbatim (`Dimname`, `__torch__.torch.classes.ns.Foo`).
    Other(String),
}

/// An alias annotation: `(a)` reads alias set `a`, `(a!)` also writes it, and `(a -> *)` says
/// the value moves from set `a` into the wildcard set (e.g. the outputs of `split`).
///
/// ```
/// use tensorplay_ir::schema::AliasInfo;
/// let a = AliasInfo { set: "a".into(), is_write: true, after: Some("*".into()) };
/// assert_eq!(a.to_string(), "(a! -> *)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AliasInfo {
    /// The alias set before the call: a letter, `*`, or a union such as `a|b`.
    pub set: String,
    /// Whether the operator writes to the value (`!`).
    pub is_write: bool,
    /// The alias set after the call, from `-> set`.
    pub after: Option<String>,
}

/// A parameter's default: the text as written (for exact printing) and its parsed value.
///
/// Defaults compare and hash by their text, so a schema with a `nan` default equals itself.
///
/// ```
/// use tensorplay_ir::schema::{Default, DefaultValue};
/// let d = Default::new(DefaultValue::Float(1e-5));
/// assert_eq!(d.text, "1e-05");
/// assert_eq!(d.to_string(), "1e-05");
/// ```
#[derive(Debug, Clone)]
pub struct Default {
    /// The default exactly as written in the schema.
    pub text: String,
    /// The parsed value.
    pub value: DefaultValue,
}

/// The parsed value of a default. Integer literals of `float` parameters become floats.
///
/// Its `Display` is the canonical (Python-style) spelling: `True`, `None`, `1e-05`, `"mean"`, `[1, 1]`.
///
/// ```
/// use tensorplay_ir::schema::DefaultValue;
/// assert_eq!(DefaultValue::Float(f64::NEG_INFINITY).to_string(), "-inf");
/// assert_eq!(DefaultValue::IntList(vec![1, 1]).to_string(), "[1, 1]");
/// assert_eq!(DefaultValue::Str("mean".into()).to_string(), "\"mean\"");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    None,
    Str(String),
    IntList(Vec<i64>),
    FloatList(Vec<f64>),
    BoolList(Vec<bool>),
    /// A bare identifier such as `contiguous_format` or `long`.
    Ident(String),
}

impl Schema {
    /// `ns::name` or `ns::name.overload` (just `name…` when there is no namespace).
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("aten::add.Tensor(Tensor self, Tensor other) -> Tensor")?;
    /// assert_eq!(s.qualified_name(), "aten::add.Tensor");
    /// assert_eq!(Schema::parse("op(Tensor x) -> Tensor")?.qualified_name(), "op");
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn qualified_name(&self) -> String {
        let mut out = match &self.namespace {
            Some(ns) => format!("{ns}::{}", self.name),
            None => self.name.clone(),
        };
        if let Some(overload) = &self.overload {
            out.push('.');
            out.push_str(overload);
        }
        out
    }

    /// Names of the parameters the operator writes to (those with a `!` alias), in order.
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("ns::f(Tensor(a!) out, Tensor x, Tensor(b!)[] outs) -> ()")?;
    /// assert_eq!(s.mutated_params(), ["out", "outs"]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn mutated_params(&self) -> Vec<&str> {
        self.params
            .iter()
            .filter(|p| p.is_mutated())
            .map(|p| p.name.as_str())
            .collect()
    }

    /// Whether any parameter is written to: such an op is a fusion barrier.
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("aten::add_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)")?;
    /// assert!(s.is_mutating());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn is_mutating(&self) -> bool {
        self.params.iter().any(Param::is_mutated)
    }

    /// The parameters whose type holds tensors (`Tensor`, `Tensor?`, `Tensor[]`, `Tensor?[]`…).
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("ns::f(Tensor x, int n, Tensor? b, Tensor[] xs) -> Tensor")?;
    /// let names: Vec<_> = s.tensor_params().iter().map(|p| p.name.as_str()).collect();
    /// assert_eq!(names, ["x", "b", "xs"]);
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn tensor_params(&self) -> Vec<&Param> {
        self.params
            .iter()
            .filter(|p| p.ty.is_tensor_like())
            .collect()
    }

    /// The parameter called `name`, if any.
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("ns::f(Tensor x, int n) -> Tensor")?;
    /// assert_eq!(s.param("n").unwrap().ty.to_string(), "int");
    /// assert!(s.param("m").is_none());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

impl Param {
    /// Whether the operator writes to this parameter (its alias annotation has `!`).
    ///
    /// ```
    /// use tensorplay_ir::schema::Schema;
    /// let s = Schema::parse("ns::f(Tensor(a!) out, Tensor(b) view) -> ()")?;
    /// assert!(s.params[0].is_mutated());
    /// assert!(!s.params[1].is_mutated());
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn is_mutated(&self) -> bool {
        self.alias.as_ref().is_some_and(|a| a.is_write)
    }
}

impl SchemaType {
    /// The plain `Tensor` type.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().is_tensor());
    /// ```
    pub fn tensor() -> Self {
        SchemaType::Base(BaseType::Tensor)
    }

    /// `self?`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().optional().is_optional_tensor());
    /// ```
    pub fn optional(self) -> Self {
        SchemaType::Optional(Box::new(self))
    }

    /// `self[]`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert_eq!(SchemaType::tensor().list().to_string(), "Tensor[]");
    /// ```
    pub fn list(self) -> Self {
        SchemaType::List(Box::new(self), None)
    }

    /// The fixed-size list `self[len]`.
    ///
    /// ```
    /// use tensorplay_ir::schema::{BaseType, SchemaType};
    /// assert_eq!(SchemaType::from(BaseType::SymInt).fixed_list(2).to_string(), "SymInt[2]");
    /// ```
    pub fn fixed_list(self, len: usize) -> Self {
        SchemaType::List(Box::new(self), Some(len))
    }

    /// The innermost base type: `Tensor` for `Tensor?[]`.
    ///
    /// ```
    /// use tensorplay_ir::schema::{BaseType, SchemaType};
    /// assert_eq!(*SchemaType::tensor().optional().list().base(), BaseType::Tensor);
    /// ```
    pub fn base(&self) -> &BaseType {
        match self {
            SchemaType::Base(base) => base,
            SchemaType::Optional(inner) | SchemaType::List(inner, _) => inner.base(),
        }
    }

    /// The type without its outer `?` (itself when not optional).
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().optional().non_optional().is_tensor());
    /// ```
    pub fn non_optional(&self) -> &SchemaType {
        match self {
            SchemaType::Optional(inner) => inner,
            other => other,
        }
    }

    /// Exactly `Tensor`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().is_tensor());
    /// assert!(!SchemaType::tensor().optional().is_tensor());
    /// ```
    pub fn is_tensor(&self) -> bool {
        matches!(self, SchemaType::Base(BaseType::Tensor))
    }

    /// Exactly `Tensor?`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().optional().is_optional_tensor());
    /// ```
    pub fn is_optional_tensor(&self) -> bool {
        matches!(self, SchemaType::Optional(inner) if inner.is_tensor())
    }

    /// A list of tensors or of optional tensors: `Tensor[]`, `Tensor[N]`, `Tensor?[]`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().list().is_tensor_list());
    /// assert!(!SchemaType::tensor().list().optional().is_tensor_list());
    /// ```
    pub fn is_tensor_list(&self) -> bool {
        matches!(self, SchemaType::List(elem, _) if elem.is_tensor() || elem.is_optional_tensor())
    }

    /// Any type that holds tensors (its base type is `Tensor`).
    ///
    /// ```
    /// use tensorplay_ir::schema::{BaseType, SchemaType};
    /// assert!(SchemaType::tensor().list().optional().is_tensor_like());
    /// assert!(!SchemaType::from(BaseType::Int).is_tensor_like());
    /// ```
    pub fn is_tensor_like(&self) -> bool {
        *self.base() == BaseType::Tensor
    }

    /// Whether the outermost suffix is `?`.
    ///
    /// ```
    /// use tensorplay_ir::schema::SchemaType;
    /// assert!(SchemaType::tensor().list().optional().is_optional());
    /// assert!(!SchemaType::tensor().optional().list().is_optional());
    /// ```
    pub fn is_optional(&self) -> bool {
        matches!(self, SchemaType::Optional(_))
    }

    /// Whether the outermost suffix is a list (`[]` or `[N]`).
    ///
    /// ```
    /// use tensorplay_ir::schema::{BaseType, SchemaType};
    /// assert!(SchemaType::from(BaseType::Int).fixed_list(2).is_list());
    /// ```
    pub fn is_list(&self) -> bool {
        matches!(self, SchemaType::List(..))
    }

    /// Exactly `ScalarType` (a dtype argument; see [`SchemaType::non_optional`] for `ScalarType?`).
    ///
    /// ```
    /// use tensorplay_ir::schema::{BaseType, SchemaType};
    /// assert!(SchemaType::from(BaseType::ScalarType).is_scalar_type());
    /// assert!(SchemaType::from(BaseType::ScalarType).optional().non_optional().is_scalar_type());
    /// ```
    pub fn is_scalar_type(&self) -> bool {
        matches!(self, SchemaType::Base(BaseType::ScalarType))
    }
}

impl From<BaseType> for SchemaType {
    fn from(base: BaseType) -> Self {
        SchemaType::Base(base)
    }
}

impl BaseType {
    /// The name as written in schemas (`int`, `SymInt`, `Tensor`, or the unknown name verbatim).
    ///
    /// ```
    /// use tensorplay_ir::schema::BaseType;
    /// assert_eq!(BaseType::MemoryFormat.name(), "MemoryFormat");
    /// assert_eq!(BaseType::Other("Dimname".into()).name(), "Dimname");
    /// ```
    pub fn name(&self) -> &str {
        match self {
            BaseType::Tensor => "Tensor",
            BaseType::Int => "int",
            BaseType::SymInt => "SymInt",
            BaseType::Float => "float",
            BaseType::Bool => "bool",
            BaseType::Str => "str",
            BaseType::Scalar => "Scalar",
            BaseType::ScalarType => "ScalarType",
            BaseType::Device => "Device",
            BaseType::Layout => "Layout",
            BaseType::MemoryFormat => "MemoryFormat",
            BaseType::Generator => "Generator",
            BaseType::Other(name) => name,
        }
    }
}

impl From<&str> for BaseType {
    /// Maps a type name to its variant; unknown names become [`BaseType::Other`].
    fn from(name: &str) -> Self {
        match name {
            "Tensor" => BaseType::Tensor,
            "int" => BaseType::Int,
            "SymInt" => BaseType::SymInt,
            "float" => BaseType::Float,
            "bool" => BaseType::Bool,
            "str" => BaseType::Str,
            "Scalar" => BaseType::Scalar,
            "ScalarType" => BaseType::ScalarType,
            "Device" => BaseType::Device,
            "Layout" => BaseType::Layout,
            "MemoryFormat" => BaseType::MemoryFormat,
            "Generator" => BaseType::Generator,
            other => BaseType::Other(other.to_string()),
        }
    }
}
