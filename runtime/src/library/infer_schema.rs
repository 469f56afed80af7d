//! `infer_schema`: a schema string from a Rust prototype (parameter names, types, defaults and the
//! return type), with `(a!)`, `(b!)`… marking mutated tensors in parameter order.

use tensorplay_ir::schema::{Default, DefaultValue};
use tensorplay_ir::{Error, Result};

use super::typed::IntoKernel;

/// Which arguments an op mutates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MutatesArgs {
    /// These named arguments (empty: none).
    #[default]
    None,
    Names(Vec<String>),
    /// Every tensor argument may be mutated (PyTorch's `"unknown"`).
    Unknown,
}

impl MutatesArgs {
    /// The declared names (empty for `None` and `Unknown`).
    pub fn names(&self) -> &[String] {
        match self {
            MutatesArgs::Names(n) => n,
            _ => &[],
        }
    }
}

impl<const N: usize> From<[&str; N]> for MutatesArgs {
    fn from(names: [&str; N]) -> Self {
        MutatesArgs::from(&names[..])
    }
}

impl From<&[&str]> for MutatesArgs {
    fn from(names: &[&str]) -> Self {
        if names.is_empty() {
            MutatesArgs::None
        } else {
            MutatesArgs::Names(names.iter().map(|s| s.to_string()).collect())
        }
    }
}

impl From<Vec<String>> for MutatesArgs {
    fn from(names: Vec<String>) -> Self {
        if names.is_empty() {
            MutatesArgs::None
        } else {
            MutatesArgs::Names(names)
        }
    }
}

/// One parameter of a prototype.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtoParam {
    pub name: String,
    /// Schema type (`Tensor`, `SymInt`, `float?`...).
    pub ty: String,
    pub default: Option<DefaultValue>,
    /// Keyword-only (after `*` in the schema).
    pub kwarg_only: bool,
}

/// A function prototype: what `infer_schema` reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prototype {
    pub params: Vec<ProtoParam>,
    /// Schema return (`Tensor`, `(Tensor, Tensor)`, `()`...).
    pub ret: String,
}

/// Strips a leading reference with its lifetime and `mut` (`&'a mut T` -> `T`).
fn strip_reference(t: &str) -> &str {
    let mut t = t.trim();
    while let Some(rest) = t.strip_prefix('&') {
        let mut rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('\'') {
            rest = after
                .trim_start_matches(|c: char| c.is_alphanumeric() || c == '_')
                .trim_start();
        }
        if let Some(after) = rest.strip_prefix("mut")
            && !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            rest = after.trim_start();
        }
        t = rest;
    }
    t
}

/// Drops a path qualification of the outer type (`std::vec::Vec<i64>` -> `Vec<i64>`).
fn unqualify(t: &str) -> &str {
    let head_end = t.find(['<', '[']).unwrap_or(t.len());
    match t[..head_end].rfind("::") {
        Some(pos) => t[pos + 2..].trim_start(),
        None => t,
    }
}

/// The inner type of `head<inner>`, tolerating spaces (`Option < T >`).
fn generic_arg<'a>(t: &'a str, head: &str) -> Option<&'a str> {
    let rest = t.strip_prefix(head)?.trim_start();
    Some(rest.strip_prefix('<')?.strip_suffix('>')?.trim())
}

/// Maps a Rust parameter type (as written) to its schema type. References (with lifetimes and
/// `mut`) and path qualifications (`tensorplay::Tensor`, `std::vec::Vec<i64>`) are looked through.
///
/// ```
/// use tensorplay_runtime::library::infer_schema::rust_type_to_schema;
/// assert_eq!(rust_type_to_schema("Option<&Tensor>").unwrap(), "Tensor?");
/// assert_eq!(rust_type_to_schema("&[i64]").unwrap(), "SymInt[]");
/// assert_eq!(rust_type_to_schema("&'a tensorplay::Tensor").unwrap(), "Tensor");
/// assert!(rust_type_to_schema("HashMap<u8, u8>").is_err());
/// ```
pub fn rust_type_to_schema(ty: &str) -> Result<String> {
    schema_type(ty).map_err(|why| {
        Error::argument(
            "infer_schema",
            "type",
            "one of Tensor, i64, f64, bool, &str/String, DType, Device, Scalar, Option<T>, Vec<T>/&[T]",
            format!("`{}` ({why})", ty.trim()),
        )
    })
}

/// [`rust_type_to_schema`] without the error wrapping: `Err` says which part is unsupported.
fn schema_type(ty: &str) -> std::result::Result<String, String> {
    let t = unqualify(strip_reference(ty));
    if let Some(inner) = generic_arg(t, "Option") {
        let s = schema_type(inner)?;
        if s.ends_with('?') {
            return Err("nested Option".to_string());
        }
        return Ok(format!("{s}?"));
    }
    let list =
        generic_arg(t, "Vec").or_else(|| t.strip_prefix('[').and_then(|s| s.strip_suffix(']')));
    if let Some(inner) = list {
        let s = schema_type(inner)?;
        // `Tensor?[]` (`Vec<Option<Tensor>>`) is the one list of optionals schemas have.
        if s.ends_with(']') || (s.ends_with('?') && s != "Tensor?") {
            return Err("lists hold plain element types (or Option<Tensor>)".to_string());
        }
        return Ok(format!("{s}[]"));
    }
    Ok(match t {
        "Tensor" => "Tensor",
        "i64" | "i32" | "usize" | "isize" => "SymInt",
        "f64" | "f32" => "float",
        "bool" => "bool",
        "str" | "String" => "str",
        "DType" => "ScalarType",
        "Device" => "Device",
        "Scalar" => "Scalar",
        other => return Err(format!("`{other}` is not a supported type")),
    }
    .to_string())
}

impl Prototype {
    /// An empty prototype returning `ret`.
    pub fn new(ret: &str) -> Prototype {
        Prototype {
            params: vec![],
            ret: ret.to_string(),
        }
    }

    fn push(mut self, name: &str, ty: &str, default: Option<DefaultValue>, kw: bool) -> Self {
        self.params.push(ProtoParam {
            name: name.to_string(),
            ty: ty.to_string(),
            default,
            kwarg_only: kw,
        });
        self
    }

    /// Adds a parameter with a schema type.
    pub fn param(self, name: &str, ty: &str) -> Prototype {
        self.push(name, ty, None, false)
    }

    /// Adds a parameter with a default value.
    pub fn param_default(self, name: &str, ty: &str, default: DefaultValue) -> Prototype {
        self.push(name, ty, Some(default), false)
    }

    /// Adds a keyword-only parameter (printed after `*`).
    pub fn kwarg(self, name: &str, ty: &str) -> Prototype {
        self.push(name, ty, None, true)
    }

    /// Adds a keyword-only parameter with a default value.
    pub fn kwarg_default(self, name: &str, ty: &str, default: DefaultValue) -> Prototype {
        self.push(name, ty, Some(default), true)
    }

    /// The prototype of a typed closure, with its parameters named `names`.
    pub fn of<F: IntoKernel<M>, M>(names: &[&str]) -> Result<Prototype> {
        let (Some(types), Some(ret)) = (F::param_types(), F::return_type()) else {
            return Err(Error::argument(
                "infer_schema",
                "prototype_function",
                "a typed closure (parameter types known)",
                "a boxed kernel over &[Value]; pass a schema string instead",
            ));
        };
        if names.len() != types.len() {
            return Err(Error::argument(
                "infer_schema",
                "names",
                format!("{} parameter names", types.len()),
                format!("{}", names.len()),
            ));
        }
        Ok(Prototype {
            params: names
                .iter()
                .zip(types)
                .map(|(n, t)| ProtoParam {
                    name: n.to_string(),
                    ty: t.to_string(),
                    default: None,
                    kwarg_only: false,
                })
                .collect(),
            ret: ret.to_string(),
        })
    }
}

/// What [`infer_schema`] reads a prototype from: a [`Prototype`], or a typed closure with its
/// parameter names, `(["x", "w"], |x: &Tensor, w: &Tensor| -> Result<Tensor> { .. })`.
pub trait IntoPrototype<M> {
    fn into_prototype(self) -> Result<Prototype>;
}

impl IntoPrototype<()> for &Prototype {
    fn into_prototype(self) -> Result<Prototype> {
        Ok(self.clone())
    }
}

impl IntoPrototype<()> for Prototype {
    fn into_prototype(self) -> Result<Prototype> {
        Ok(self)
    }
}

impl<F: IntoKernel<M>, M, const N: usize> IntoPrototype<(M,)> for ([&str; N], F) {
    fn into_prototype(self) -> Result<Prototype> {
        Prototype::of::<F, M>(&self.0)
    }
}

fn is_tensor_like(ty: &str) -> bool {
    ty.starts_with("Tensor")
}

/// Builds the schema text for `proto`.
///
/// ```
/// use tensorplay_runtime::library::infer_schema::{infer_schema, MutatesArgs, Prototype};
/// use tensorplay_ir::schema::DefaultValue;
/// let p = Prototype::new("Tensor")
///     .param("self", "Tensor")
///     .param("n", "SymInt")
///     .param_default("eps", "float", DefaultValue::Float(1e-5))
///     .param_default("bias", "Tensor?", DefaultValue::None)
///     .param("out", "Tensor");
/// let s = infer_schema(&p, ["out"].into(), Some("ns::op"))?;
/// assert_eq!(s, "ns::op(Tensor self, SymInt n, float eps=1e-05, Tensor? bias=None, Tensor(a!) out) -> Tensor");
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn infer_schema<P: IntoPrototype<M>, M>(
    proto: P,
    mutates_args: MutatesArgs,
    op_name: Option<&str>,
) -> Result<String> {
    let proto = &proto.into_prototype()?;
    for name in mutates_args.names() {
        match proto.params.iter().find(|p| &p.name == name) {
            None => {
                return Err(Error::argument(
                    op_name.unwrap_or("infer_schema"),
                    "mutates_args",
                    format!(
                        "names of parameters ({})",
                        proto
                            .params
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    format!("`{name}`, which is not a parameter"),
                ));
            }
            Some(p) if !is_tensor_like(&p.ty) => {
                return Err(Error::argument(
                    op_name.unwrap_or("infer_schema"),
                    "mutates_args",
                    "tensor parameters",
                    format!("`{name}` of type {}", p.ty),
                ));
            }
            _ => {}
        }
    }
    let mut letter = b'a';
    let mut parts = Vec::with_capacity(proto.params.len() + 1);
    let mut star = false;
    for p in &proto.params {
        if p.kwarg_only && !star {
            parts.push("*".to_string());
            star = true;
        } else if !p.kwarg_only && star {
            return Err(Error::argument(
                op_name.unwrap_or("infer_schema"),
                &p.name,
                "positional parameters before keyword-only ones",
                "a positional parameter after a keyword-only one",
            ));
        }
        let mutated = match &mutates_args {
            MutatesArgs::Unknown => is_tensor_like(&p.ty),
            MutatesArgs::Names(n) => n.contains(&p.name),
            MutatesArgs::None => false,
        };
        let ty = if mutated {
            if letter > b'z' {
                return Err(Error::argument(
                    op_name.unwrap_or("infer_schema"),
                    "mutates_args",
                    "at most 26 mutated tensors",
                    "more",
                ));
            }
            let alias = format!("Tensor({}!)", letter as char);
            letter += 1;
            p.ty.replacen("Tensor", &alias, 1)
        } else {
            p.ty.clone()
        };
        let mut part = format!("{ty} {}", p.name);
        if let Some(d) = &p.default {
            part.push('=');
            part.push_str(&Default::new(d.clone()).text);
        }
        parts.push(part);
    }
    Ok(format!(
        "{}({}) -> {}",
        op_name.unwrap_or(""),
        parts.join(", "),
        proto.ret
    ))
}
