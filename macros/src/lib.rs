//! `tensorplay-macros`: the `#[custom_op]` attribute macro behind `tensorplay::library::custom_op`.
//!
//! Use it through the `tensorplay` crate (`#[tensorplay::library::custom_op("ns::name")]`); the
//! generated code names only `::tensorplay::...` paths, so this crate is never a direct dependency.
//! The runnable examples live in the `tensorplay::library` docs.

use proc_macro::TokenStream;
use proc_macro2::{Literal, Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ItemFn, Lit, LitStr, Pat, PathArguments,
    ReturnType, Token, Type, UnOp, bracketed,
};

/// The parameter types the macro understands, for error messages.
const SUPPORTED_PARAMS: &str = "Tensor, &Tensor, Option<Tensor>, Option<&Tensor>, Vec<Tensor>, \
     &[Tensor], i64, Option<i64>, f64, Option<f64>, bool, String, &str, Vec<i64>, &[i64], \
     Vec<f64>, &[f64], Vec<bool>, &[bool], DType, Device";

/// The return types the macro understands, for error messages.
const SUPPORTED_RETURNS: &str =
    "Result<T> with T one of Tensor, (), Vec<Tensor>, (Tensor, Tensor), (Tensor, Tensor, Tensor)";

/// The most parameters a typed kernel closure takes in the runtime; longer signatures get a boxed
/// kernel over `&[Value]` instead.
const TYPED_KERNEL_MAX: usize = 8;

/// Turns a free function into a custom operator, keeping the function callable as written.
///
/// ```text
/// #[tensorplay::library::custom_op("mylib::weighted_sum")]
/// fn weighted_sum(x: &Tensor, weight: &Tensor) -> Result<Tensor> { x.mul(weight)?.sum_all() }
/// ```
///
/// Next to the function it generates a module of the same name with
/// - `pub fn op() -> Result<CustomOpDef>` — defines the operator on first use (once per process;
///   a failed definition returns its error and is retried on the next call);
/// - `pub fn call(<the function's parameters>) -> Result<<its return type>>` — calls the operator
///   through the dispatcher, so autograd, autocast, vmap, fake tensors and capture apply.
///
/// Options: `mutates_args = ["out", ...]` or `mutates_args = "unknown"` (every tensor parameter),
/// and `device_types = ["cpu", "cuda"]` (every device when omitted). A parameter attribute
/// `#[default(...)]` (a literal, a negated number, `None`, `f64::INFINITY`/`NEG_INFINITY`/`NAN`,
/// or a list literal) gives the schema default.
///
/// Must be used on a function at module level (not inside a function body): the generated
/// module reaches the function through `super::`.
#[proc_macro_attribute]
pub fn custom_op(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = TokenStream2::from(attr);
    let item = TokenStream2::from(item);
    let mut func: ItemFn = match syn::parse2(item.clone()) {
        Ok(f) => f,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                "#[custom_op] applies to a free function (`fn name(x: &Tensor) -> Result<Tensor>`)",
            )
            .to_compile_error();
            return quote!(#e #item).into();
        }
    };
    // Strip the `#[default(..)]` helper attributes first, so the function is emitted cleanly even
    // when expansion fails (one error, not a cascade of unknown-attribute errors).
    let defaults = strip_defaults(&mut func);
    match expand(attr, &func, defaults) {
        Ok(ts) => ts.into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#e #func).into()
        }
    }
}

/// Options of the attribute: `"ns::name", mutates_args = .., device_types = ..`.
struct OpAttr {
    name: LitStr,
    mutates: Mutates,
    device_types: Option<Vec<LitStr>>,
}

/// `mutates_args` as written.
enum Mutates {
    None,
    Names(Vec<LitStr>),
    Unknown,
}

impl Parse for OpAttr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(input.error(
                "expected the operator name: #[custom_op(\"namespace::name\", mutates_args = [..], \
                 device_types = [..])]",
            ));
        }
        let name: LitStr = input.parse()?;
        let mut mutates = None;
        let mut device_types = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match key.to_string().as_str() {
                "mutates_args" => {
                    if mutates.is_some() {
                        return Err(syn::Error::new(key.span(), "`mutates_args` given twice"));
                    }
                    mutates = Some(if input.peek(LitStr) {
                        let s: LitStr = input.parse()?;
                        if s.value() != "unknown" {
                            return Err(syn::Error::new(
                                s.span(),
                                "mutates_args takes a list of parameter names \
                                 (`[\"out\"]`) or the string \"unknown\"",
                            ));
                        }
                        Mutates::Unknown
                    } else {
                        let names = string_list(input, "mutates_args")?;
                        if names.is_empty() {
                            Mutates::None
                        } else {
                            Mutates::Names(names)
                        }
                    });
                }
                "device_types" => {
                    if device_types.is_some() {
                        return Err(syn::Error::new(key.span(), "`device_types` given twice"));
                    }
                    let types = string_list(input, "device_types")?;
                    for t in &types {
                        if !matches!(t.value().as_str(), "cpu" | "cuda") {
                            return Err(syn::Error::new(
                                t.span(),
                                format!(
                                    "device_types: expected lower-case \"cpu\" or \"cuda\" \
                                     (no index), got {:?}",
                                    t.value()
                                ),
                            ));
                        }
                    }
                    device_types = Some(types);
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown option `{other}`; expected `mutates_args` or `device_types`"
                        ),
                    ));
                }
            }
        }
        Ok(OpAttr {
            name,
            mutates: mutates.unwrap_or(Mutates::None),
            device_types,
        })
    }
}

/// Parses `["a", "b"]`.
fn string_list(input: ParseStream, what: &str) -> syn::Result<Vec<LitStr>> {
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(format!(
            "{what} takes a list of strings such as [\"a\", \"b\"]"
        )));
    }
    let content;
    bracketed!(content in input);
    let items = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)?;
    Ok(items.into_iter().collect())
}

/// How a parameter's value is represented: the owned Rust type the kernel receives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Tensor,
    OptTensor,
    TensorList,
    Int,
    OptInt,
    Float,
    OptFloat,
    Bool,
    Str,
    IntList,
    FloatList,
    BoolList,
    DType,
    Device,
}

impl Kind {
    /// The owned type, spelled with absolute paths.
    fn owned(self) -> TokenStream2 {
        match self {
            Kind::Tensor => quote!(::tensorplay::Tensor),
            Kind::OptTensor => quote!(::core::option::Option<::tensorplay::Tensor>),
            Kind::TensorList => quote!(::std::vec::Vec<::tensorplay::Tensor>),
            Kind::Int => quote!(::core::primitive::i64),
            Kind::OptInt => quote!(::core::option::Option<::core::primitive::i64>),
            Kind::Float => quote!(::core::primitive::f64),
            Kind::OptFloat => quote!(::core::option::Option<::core::primitive::f64>),
            Kind::Bool => quote!(::core::primitive::bool),
            Kind::Str => quote!(::std::string::String),
            Kind::IntList => quote!(::std::vec::Vec<::core::primitive::i64>),
            Kind::FloatList => quote!(::std::vec::Vec<::core::primitive::f64>),
            Kind::BoolList => quote!(::std::vec::Vec<::core::primitive::bool>),
            Kind::DType => quote!(::tensorplay::DType),
            Kind::Device => quote!(::tensorplay::Device),
        }
    }

    /// Whether `mutates_args` may name a parameter of this kind.
    fn is_tensor(self) -> bool {
        matches!(self, Kind::Tensor | Kind::OptTensor | Kind::TensorList)
    }

    /// Boxes an owned value `v` into a `::tensorplay::Value`.
    fn boxed(self, v: &Ident) -> TokenStream2 {
        let value = quote!(::tensorplay::Value);
        let opt = |variant: TokenStream2| {
            quote! {
                match #v {
                    ::core::option::Option::Some(__tp_x) => #value::#variant(__tp_x),
                    ::core::option::Option::None => #value::None,
                }
            }
        };
        match self {
            Kind::Tensor => quote!(#value::Tensor(#v)),
            Kind::OptTensor => quote!(#value::OptionalTensor(#v)),
            Kind::TensorList => quote!(#value::TensorList(#v)),
            Kind::Int => quote!(#value::Int(#v)),
            Kind::OptInt => opt(quote!(Int)),
            Kind::Float => quote!(#value::Float(#v)),
            Kind::OptFloat => opt(quote!(Float)),
            Kind::Bool => quote!(#value::Bool(#v)),
            Kind::Str => quote!(#value::Str(#v)),
            Kind::IntList => quote!(#value::IntList(#v)),
            Kind::FloatList => quote!(#value::FloatList(#v)),
            Kind::BoolList => quote!(#value::BoolList(#v)),
            Kind::DType => quote!(#value::DType(#v)),
            Kind::Device => quote!(#value::Device(#v)),
        }
    }

    /// The element kind of a list kind (`&[T]` slices are only accepted for these).
    fn list_of(elem: Kind) -> Option<Kind> {
        match elem {
            Kind::Tensor => Some(Kind::TensorList),
            Kind::Int => Some(Kind::IntList),
            Kind::Float => Some(Kind::FloatList),
            Kind::Bool => Some(Kind::BoolList),
            _ => None,
        }
    }
}

/// How the user's function receives the parameter.
enum Pass {
    /// By value, as the owned type.
    Owned,
    /// By reference to `target` (`&Tensor`, `&[i64]`, `&str`...), borrowed from the owned value.
    Ref(TokenStream2),
    /// `Option<&Tensor>`, from `Option<Tensor>` with `as_ref`.
    OptRef,
}

/// One parameter of the function.
struct Param {
    ident: Ident,
    name: String,
    kind: Kind,
    pass: Pass,
    default: Option<TokenStream2>,
}

impl Param {
    /// The parameter type of the generated `call`, with absolute paths.
    fn user_type(&self) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => self.kind.owned(),
            Pass::Ref(target) => quote!(&#target),
            Pass::OptRef => quote!(::core::option::Option<&::tensorplay::Tensor>),
        }
    }

    /// Converts the owned kernel argument `v` into what the user's function takes.
    fn pass_to_user(&self, v: &Ident) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => quote!(#v),
            Pass::Ref(_) => quote!(&#v),
            Pass::OptRef => quote!(::core::option::Option::as_ref(&#v)),
        }
    }

    /// Converts the `call` parameter `v` into its owned form.
    fn to_owned(&self, v: &Ident) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => quote!(#v),
            Pass::Ref(_) => quote!(::std::borrow::ToOwned::to_owned(#v)),
            Pass::OptRef => quote!(#v.cloned()),
        }
    }
}

/// The declared return type `Result<T>`.
#[derive(Clone, Copy)]
enum Ret {
    /// `()`, `Tensor`, or a tuple of this many tensors.
    Tensors(usize),
    /// `Vec<Tensor>`.
    List,
}

impl Ret {
    fn owned(self) -> TokenStream2 {
        match self {
            Ret::Tensors(0) => quote!(()),
            Ret::Tensors(1) => quote!(::tensorplay::Tensor),
            Ret::Tensors(n) => {
                let ts = (0..n).map(|_| quote!(::tensorplay::Tensor));
                quote!((#(#ts,)*))
            }
            Ret::List => quote!(::std::vec::Vec<::tensorplay::Tensor>),
        }
    }
}

/// Removes every `#[default(..)]` from the parameters, returning them by parameter index.
fn strip_defaults(func: &mut ItemFn) -> Vec<Vec<Attribute>> {
    func.sig
        .inputs
        .iter_mut()
        .map(|arg| match arg {
            FnArg::Typed(pt) => {
                let (defaults, rest) = std::mem::take(&mut pt.attrs)
                    .into_iter()
                    .partition(|a: &Attribute| a.path().is_ident("default"));
                pt.attrs = rest;
                defaults
            }
            FnArg::Receiver(_) => vec![],
        })
        .collect()
}

/// A type as written, for messages (`HashMap<u8, u8>`, `&[i64]`).
fn type_text(ty: &Type) -> String {
    quote!(#ty)
        .to_string()
        .replace(" < ", "<")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace(" ,", ",")
        .replace("& ", "&")
        .replace(" :: ", "::")
}

/// Strips invisible groups and parentheses around a type.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => peel(&g.elem),
        Type::Paren(p) => peel(&p.elem),
        other => other,
    }
}

/// The last path segment's name and its single generic type argument, if any.
fn path_parts(ty: &Type) -> Option<(String, Option<&Type>)> {
    let Type::Path(tp) = peel(ty) else {
        return None;
    };
    if tp.qself.is_some() {
        return None;
    }
    let seg = tp.path.segments.last()?;
    let arg = match &seg.arguments {
        PathArguments::None => None,
        PathArguments::AngleBracketed(a) => {
            let mut types = a.args.iter().filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            });
            let first = types.next()?;
            if a.args.len() != 1 {
                return None;
            }
            Some(first)
        }
        PathArguments::Parenthesized(_) => return None,
    };
    Some((seg.ident.to_string(), arg))
}

/// Classifies an owned (non-reference) type.
fn classify_owned(ty: &Type) -> Option<Kind> {
    let (name, arg) = path_parts(ty)?;
    match (name.as_str(), arg) {
        ("Tensor", None) => Some(Kind::Tensor),
        ("i64", None) => Some(Kind::Int),
        ("f64", None) => Some(Kind::Float),
        ("bool", None) => Some(Kind::Bool),
        ("String", None) => Some(Kind::Str),
        ("DType", None) => Some(Kind::DType),
        ("Device", None) => Some(Kind::Device),
        ("Option", Some(inner)) => match classify_owned(inner)? {
            Kind::Tensor => Some(Kind::OptTensor),
            Kind::Int => Some(Kind::OptInt),
            Kind::Float => Some(Kind::OptFloat),
            _ => None,
        },
        ("Vec", Some(inner)) => Kind::list_of(classify_owned(inner)?),
        _ => None,
    }
}

/// Classifies a parameter type as written.
fn classify(ty: &Type) -> Option<(Kind, Pass)> {
    match peel(ty) {
        Type::Reference(r) => {
            // `&mut` is not needed (tensors mutate through `&`), and an explicit lifetime such
            // as `&'static str` cannot borrow from the kernel's owned argument.
            if r.mutability.is_some() || r.lifetime.is_some() {
                return None;
            }
            match peel(&r.elem) {
                Type::Slice(s) => {
                    let kind = Kind::list_of(classify_owned(&s.elem)?)?;
                    let elem = match kind {
                        Kind::TensorList => Kind::Tensor.owned(),
                        Kind::IntList => Kind::Int.owned(),
                        Kind::FloatList => Kind::Float.owned(),
                        _ => Kind::Bool.owned(),
                    };
                    Some((kind, Pass::Ref(quote!([#elem]))))
                }
                elem => {
                    if let Some(("str", None)) =
                        path_parts(elem).as_ref().map(|(n, a)| (n.as_str(), *a))
                    {
                        return Some((Kind::Str, Pass::Ref(quote!(::core::primitive::str))));
                    }
                    let kind = classify_owned(elem)?;
                    Some((kind, Pass::Ref(kind.owned())))
                }
            }
        }
        other => {
            if let Some(("Option", Some(inner))) =
                path_parts(other).as_ref().map(|(n, a)| (n.as_str(), *a))
                && let Type::Reference(r) = peel(inner)
                && r.mutability.is_none()
                && r.lifetime.is_none()
                && classify_owned(&r.elem) == Some(Kind::Tensor)
            {
                return Some((Kind::OptTensor, Pass::OptRef));
            }
            Some((classify_owned(other)?, Pass::Owned))
        }
    }
}

/// Classifies the return type `Result<T>` / `Result<T, E>`.
fn classify_return(output: &ReturnType, sig_span: Span) -> syn::Result<Ret> {
    let ReturnType::Type(_, ty) = output else {
        return Err(syn::Error::new(
            sig_span,
            format!("a custom op must return {SUPPORTED_RETURNS}"),
        ));
    };
    let err = || {
        syn::Error::new_spanned(
            ty,
            format!("unsupported return type; a custom op returns {SUPPORTED_RETURNS}"),
        )
    };
    let Type::Path(tp) = peel(ty) else {
        return Err(err());
    };
    let seg = tp.path.segments.last().ok_or_else(err)?;
    if seg.ident != "Result" {
        return Err(err());
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Err(err());
    };
    let Some(GenericArgument::Type(inner)) = args.args.first() else {
        return Err(err());
    };
    match peel(inner) {
        Type::Tuple(t) if t.elems.is_empty() => Ok(Ret::Tensors(0)),
        Type::Tuple(t)
            if (2..=3).contains(&t.elems.len())
                && t.elems
                    .iter()
                    .all(|e| classify_owned(e) == Some(Kind::Tensor)) =>
        {
            Ok(Ret::Tensors(t.elems.len()))
        }
        other => match classify_owned(other) {
            Some(Kind::Tensor) => Ok(Ret::Tensors(1)),
            Some(Kind::TensorList) => Ok(Ret::List),
            _ => Err(err()),
        },
    }
}

/// A default value as written, before checking it against the parameter type.
enum DefaultLit {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<DefaultLit>),
}

/// Reads a default expression: literals, negated numbers, `None`, `f64::INFINITY` and friends,
/// and list literals of those.
fn default_lit(e: &Expr) -> syn::Result<DefaultLit> {
    let unsupported = || {
        syn::Error::new(
            e.span(),
            "unsupported default: use a literal (`1e-5`, `2`, `true`, \"mean\"), a negated number, \
             `None`, `f64::INFINITY`/`f64::NEG_INFINITY`/`f64::NAN`, or a list literal",
        )
    };
    match e {
        Expr::Group(g) => default_lit(&g.expr),
        Expr::Paren(p) => default_lit(&p.expr),
        Expr::Lit(l) => match &l.lit {
            Lit::Bool(b) => Ok(DefaultLit::Bool(b.value)),
            Lit::Int(i) => Ok(DefaultLit::Int(i.base10_parse::<i64>()?)),
            Lit::Float(f) => Ok(DefaultLit::Float(f.base10_parse::<f64>()?)),
            Lit::Str(s) => Ok(DefaultLit::Str(s.value())),
            _ => Err(unsupported()),
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
            // Negate through i128 so that `-9223372036854775808` fits.
            if let Expr::Lit(l) = &*u.expr
                && let Lit::Int(i) = &l.lit
            {
                let v = -i.base10_parse::<i128>()?;
                return i64::try_from(v)
                    .map(DefaultLit::Int)
                    .map_err(|_| syn::Error::new(e.span(), "default out of range for i64"));
            }
            match default_lit(&u.expr)? {
                DefaultLit::Int(i) => {
                    Ok(DefaultLit::Int(i.checked_neg().ok_or_else(|| {
                        syn::Error::new(e.span(), "default out of range for i64")
                    })?))
                }
                DefaultLit::Float(f) => Ok(DefaultLit::Float(-f)),
                _ => Err(unsupported()),
            }
        }
        Expr::Path(p) if p.qself.is_none() => {
            let segs: Vec<String> = p
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            match segs
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice()
            {
                ["None"] => Ok(DefaultLit::None),
                [.., "f64", "INFINITY"] => Ok(DefaultLit::Float(f64::INFINITY)),
                [.., "f64", "NEG_INFINITY"] => Ok(DefaultLit::Float(f64::NEG_INFINITY)),
                [.., "f64", "NAN"] => Ok(DefaultLit::Float(f64::NAN)),
                _ => Err(unsupported()),
            }
        }
        Expr::Array(a) => Ok(DefaultLit::List(
            a.elems
                .iter()
                .map(default_lit)
                .collect::<syn::Result<_>>()?,
        )),
        _ => Err(unsupported()),
    }
}

/// Tokens for an exact `f64`.
fn f64_tokens(x: f64) -> TokenStream2 {
    if x.is_finite() {
        let l = Literal::f64_suffixed(x);
        quote!(#l)
    } else {
        let bits = Literal::u64_suffixed(x.to_bits());
        quote!(::core::primitive::f64::from_bits(#bits))
    }
}

/// Checks a default against the parameter kind and builds the `DefaultValue` expression.
fn default_tokens(
    attr: &Attribute,
    param: &Ident,
    ty: &str,
    kind: Kind,
) -> syn::Result<TokenStream2> {
    let expr: Expr = attr.parse_args().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`#[default(..)]` on `{param}` takes one value, e.g. #[default(1e-5)]"),
        )
    })?;
    let lit = default_lit(&expr)?;
    let dv = quote!(::tensorplay::ir::schema::DefaultValue);
    let mismatch = |what: &str| {
        syn::Error::new(
            expr.span(),
            format!("the default of `{param}: {ty}` cannot be {what}"),
        )
    };
    let as_f64 = |l: &DefaultLit| match l {
        DefaultLit::Int(i) => Some(*i as f64),
        DefaultLit::Float(f) => Some(*f),
        _ => None,
    };
    Ok(match (&lit, kind) {
        (DefaultLit::None, Kind::OptTensor | Kind::OptInt | Kind::OptFloat) => quote!(#dv::None),
        (DefaultLit::None, _) => return Err(mismatch("None (only Option parameters can)")),
        (DefaultLit::Bool(b), Kind::Bool) => quote!(#dv::Bool(#b)),
        (DefaultLit::Int(i), Kind::Int | Kind::OptInt | Kind::Float | Kind::OptFloat) => {
            let i = Literal::i64_suffixed(*i);
            quote!(#dv::Int(#i))
        }
        (DefaultLit::Float(f), Kind::Float | Kind::OptFloat) => {
            let f = f64_tokens(*f);
            quote!(#dv::Float(#f))
        }
        (DefaultLit::Str(s), Kind::Str) => quote!(#dv::Str(::std::string::String::from(#s))),
        (DefaultLit::List(items), Kind::IntList) => {
            let ints = items
                .iter()
                .map(|l| match l {
                    DefaultLit::Int(i) => Ok(Literal::i64_suffixed(*i)),
                    _ => Err(mismatch("a list with non-integer items")),
                })
                .collect::<syn::Result<Vec<_>>>()?;
            quote!(#dv::IntList(::std::vec![#(#ints),*]))
        }
        (DefaultLit::List(items), Kind::FloatList) => {
            if items.iter().all(|l| matches!(l, DefaultLit::Int(_))) {
                // Written as integers: keep the text (`[1, 2]`), as PyTorch prints the list.
                let ints = items.iter().filter_map(|l| match l {
                    DefaultLit::Int(i) => Some(Literal::i64_suffixed(*i)),
                    _ => None,
                });
                quote!(#dv::IntList(::std::vec![#(#ints),*]))
            } else {
                let floats = items
                    .iter()
                    .map(|l| {
                        as_f64(l)
                            .map(f64_tokens)
                            .ok_or_else(|| mismatch("a list with non-numeric items"))
                    })
                    .collect::<syn::Result<Vec<_>>>()?;
                quote!(#dv::FloatList(::std::vec![#(#floats),*]))
            }
        }
        (DefaultLit::List(items), Kind::BoolList) => {
            let bools = items
                .iter()
                .map(|l| match l {
                    DefaultLit::Bool(b) => Ok(*b),
                    _ => Err(mismatch("a list with non-bool items")),
                })
                .collect::<syn::Result<Vec<_>>>()?;
            quote!(#dv::BoolList(::std::vec![#(#bools),*]))
        }
        (DefaultLit::Bool(_), _) => return Err(mismatch("a bool")),
        (DefaultLit::Int(_), _) => return Err(mismatch("an integer")),
        (DefaultLit::Float(_), _) => return Err(mismatch("a float")),
        (DefaultLit::Str(_), _) => return Err(mismatch("a string")),
        (DefaultLit::List(_), _) => return Err(mismatch("a list")),
    })
}

/// Reads the parameters, with a compile error spanning the first unsupported one.
fn params(func: &ItemFn, defaults: Vec<Vec<Attribute>>) -> syn::Result<Vec<Param>> {
    let mut out = Vec::new();
    for (arg, defaults) in func.sig.inputs.iter().zip(defaults) {
        let pt = match arg {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "#[custom_op] applies to free functions, not methods",
                ));
            }
            FnArg::Typed(pt) => pt,
        };
        let ident = match &*pt.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => pi.ident.clone(),
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "custom op parameters must be plain names (`x: &Tensor`): the names become \
                     the schema's parameter names",
                ));
            }
        };
        let name = ident.unraw().to_string();
        let Some((kind, pass)) = classify(&pt.ty) else {
            return Err(syn::Error::new_spanned(
                pt,
                format!(
                    "parameter `{name}` has unsupported type `{}`; supported types: {SUPPORTED_PARAMS}",
                    type_text(&pt.ty)
                ),
            ));
        };
        if defaults.len() > 1 {
            return Err(syn::Error::new(
                defaults[1].span(),
                format!("parameter `{name}` has more than one #[default(..)]"),
            ));
        }
        let default = match defaults.first() {
            Some(attr) => Some(default_tokens(attr, &ident, &type_text(&pt.ty), kind)?),
            None => None,
        };
        out.push(Param {
            ident,
            name,
            kind,
            pass,
            default,
        });
    }
    Ok(out)
}

fn expand(
    attr: TokenStream2,
    func: &ItemFn,
    defaults: Vec<Vec<Attribute>>,
) -> syn::Result<TokenStream2> {
    let attr: OpAttr = syn::parse2(attr)?;
    let sig = &func.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a custom op function cannot be generic: the schema needs concrete types",
        ));
    }
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new(
            a.span(),
            "a custom op function cannot be async",
        ));
    }
    if let Some(u) = &sig.unsafety {
        return Err(syn::Error::new(
            u.span(),
            "a custom op function cannot be unsafe",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new(
            v.span(),
            "a custom op function cannot be variadic",
        ));
    }
    let params = params(func, defaults)?;
    let ret = classify_return(&sig.output, sig.ident.span())?;

    // mutates_args: checked here, with the error on the offending name.
    let mutates = match &attr.mutates {
        Mutates::None => quote!(::tensorplay::library::MutatesArgs::None),
        Mutates::Unknown => quote!(::tensorplay::library::MutatesArgs::Unknown),
        Mutates::Names(names) => {
            for (i, n) in names.iter().enumerate() {
                let v = n.value();
                match params.iter().find(|p| p.name == v) {
                    None => {
                        let all: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
                        return Err(syn::Error::new(
                            n.span(),
                            format!(
                                "mutates_args names `{v}`, which is not a parameter (parameters: {})",
                                all.join(", ")
                            ),
                        ));
                    }
                    Some(p) if !p.kind.is_tensor() => {
                        return Err(syn::Error::new(
                            n.span(),
                            format!("mutates_args names `{v}`, which is not a tensor parameter"),
                        ));
                    }
                    Some(_) => {}
                }
                if names[..i].iter().any(|m| m.value() == v) {
                    return Err(syn::Error::new(
                        n.span(),
                        format!("mutates_args names `{v}` twice"),
                    ));
                }
            }
            quote!(::tensorplay::library::MutatesArgs::Names(::std::vec![
                #(::std::string::String::from(#names)),*
            ]))
        }
    };
    let device_types = attr
        .device_types
        .as_ref()
        .map(|types| quote!(.device_types(&[#(#types),*])));

    let vis = &func.vis;
    let fn_ident = &sig.ident;
    let name = &attr.name;
    let ret_ty = ret.owned();
    let n = params.len();
    let arg_names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let args: Vec<Ident> = (0..n).map(|i| format_ident!("__tp_arg{i}")).collect();
    let owned: Vec<TokenStream2> = params.iter().map(|p| p.kind.owned()).collect();
    let to_user: Vec<TokenStream2> = params
        .iter()
        .zip(&args)
        .map(|(p, a)| p.pass_to_user(a))
        .collect();

    let proto_params = params.iter().map(|p| {
        let pname = &p.name;
        let ty = p.kind.owned();
        let schema_ty = quote!(<#ty as ::tensorplay::library::ArgType>::SCHEMA);
        match &p.default {
            Some(d) => quote!(.param_default(#pname, #schema_ty, #d)),
            None => quote!(.param(#pname, #schema_ty)),
        }
    });

    let kernel = if n <= TYPED_KERNEL_MAX {
        quote! {
            |#(#args: #owned),*| -> ::tensorplay::Result<#ret_ty> {
                ::core::result::Result::Ok(super::#fn_ident(#(#to_user),*)?)
            }
        }
    } else {
        let expected = format!("{n} arguments");
        let idx = 0..n;
        quote! {
            |__tp_values: &[::tensorplay::Value]| -> ::tensorplay::Result<::std::vec::Vec<::tensorplay::Tensor>> {
                if __tp_values.len() != #n {
                    return ::core::result::Result::Err(::tensorplay::Error::argument(
                        #name, "args", #expected, ::std::string::ToString::to_string(&__tp_values.len()),
                    ));
                }
                #(let #args = <#owned as ::tensorplay::library::ArgType>::from_value(#name, #idx, &__tp_values[#idx])?;)*
                let __tp_out: #ret_ty = super::#fn_ident(#(#to_user),*)?;
                ::core::result::Result::Ok(<#ret_ty as ::tensorplay::library::ReturnType>::into_tensors(__tp_out))
            }
        }
    };

    // `call`: the original parameter names with absolute types, boxed in order.
    let call_params = params.iter().map(|p| {
        let id = &p.ident;
        let ty = p.user_type();
        quote!(#id: #ty)
    });
    let boxed = params.iter().zip(&args).map(|(p, a)| {
        let id = &p.ident;
        let to_owned = p.to_owned(id);
        let b = p.kind.boxed(a);
        quote!({ let #a = #to_owned; #b })
    });
    let convert = match ret {
        Ret::List => quote!(::core::result::Result::Ok(__tp_outs)),
        Ret::Tensors(k) => {
            let outs: Vec<Ident> = (0..k).map(|i| format_ident!("__tp_out{i}")).collect();
            let expected = match k {
                0 => "no tensors".to_string(),
                1 => "1 tensor".to_string(),
                k => format!("{k} tensors"),
            };
            let value = if k == 1 {
                quote!(#(#outs)*)
            } else {
                quote!((#(#outs),*))
            };
            quote! {
                let [#(#outs),*]: [::tensorplay::Tensor; #k] =
                    ::core::convert::TryFrom::try_from(__tp_outs).map_err(
                        |outs: ::std::vec::Vec<::tensorplay::Tensor>| ::tensorplay::Error::argument(
                            #name, "returns", #expected, ::std::format!("{} tensors", outs.len()),
                        ),
                    )?;
                ::core::result::Result::Ok(#value)
            }
        }
    };

    let mod_doc = format!(
        "The `{}` custom operator defined from the function `{fn_ident}`: `op()` returns its \
         handle, `call(..)` calls it through the dispatcher.",
        name.value()
    );
    let call_doc = format!(
        "Calls `{}` through the dispatcher (autograd, autocast, vmap, fake tensors and capture \
         apply), defining it first if needed.",
        name.value()
    );

    Ok(quote! {
        #func

        #[doc = #mod_doc]
        #[allow(dead_code, non_snake_case)]
        #vis mod #fn_ident {
            /// The operator's handle; the first call defines it (once per process). A failed
            /// definition returns its error and is retried on the next call.
            pub fn op() -> ::tensorplay::Result<::tensorplay::library::CustomOpDef> {
                static OP: ::std::sync::OnceLock<::tensorplay::library::CustomOpDef> =
                    ::std::sync::OnceLock::new();
                static INIT: ::std::sync::Mutex<()> = ::std::sync::Mutex::new(());
                if let ::core::option::Option::Some(op) = OP.get() {
                    return ::core::result::Result::Ok(::core::clone::Clone::clone(op));
                }
                // One definition at a time, so two threads never register the op twice.
                let _guard = INIT.lock().unwrap_or_else(::std::sync::PoisonError::into_inner);
                if let ::core::option::Option::Some(op) = OP.get() {
                    return ::core::result::Result::Ok(::core::clone::Clone::clone(op));
                }
                let def = self::define()?;
                ::core::result::Result::Ok(::core::clone::Clone::clone(OP.get_or_init(|| def)))
            }

            #[allow(clippy::needless_question_mark, clippy::useless_conversion)]
            fn define() -> ::tensorplay::Result<::tensorplay::library::CustomOpDef> {
                let mutates: ::tensorplay::library::MutatesArgs = #mutates;
                let proto = ::tensorplay::library::Prototype::new(
                    &<#ret_ty as ::tensorplay::library::ReturnType>::schema(),
                ) #(#proto_params)*;
                let schema = ::tensorplay::library::infer_schema(
                    &proto, ::core::clone::Clone::clone(&mutates), ::core::option::Option::None,
                )?;
                ::tensorplay::library::custom_op(#name)
                    .mutates_args(mutates)
                    #device_types
                    .arg_names(&[#(#arg_names),*])
                    .schema(&schema)
                    .build(#kernel)
                    .map(::tensorplay::library::CustomOp::into_def)
            }

            #[doc = #call_doc]
            #[allow(clippy::too_many_arguments)]
            pub fn call(#(#call_params),*) -> ::tensorplay::Result<#ret_ty> {
                let __tp_args: ::std::vec::Vec<::tensorplay::Value> = ::std::vec![#(#boxed),*];
                let __tp_outs = self::op()?.call(&__tp_args)?;
                #convert
            }
        }
    })
}
