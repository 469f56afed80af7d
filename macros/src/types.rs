//! The Rust types a custom op function may use: how each parameter type is held (`Kind`) and
//! passed (`Pass`), which return types are accepted (`Ret`), and the classification of written
//! types into those.

use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{GenericArgument, Ident, PathArguments, ReturnType, Type};

/// The return types the macro understands, for error messages.
const SUPPORTED_RETURNS: &str =
    "Result<T> with T one of Tensor, (), Vec<Tensor>, (Tensor, Tensor), (Tensor, Tensor, Tensor)";

/// How a parameter's value is represented: the owned Rust type the kernel receives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
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
    pub(crate) fn owned(self) -> TokenStream2 {
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
    pub(crate) fn is_tensor(self) -> bool {
        matches!(self, Kind::Tensor | Kind::OptTensor | Kind::TensorList)
    }

    /// Boxes an owned value `v` into a `::tensorplay::Value`.
    pub(crate) fn boxed(self, v: &Ident) -> TokenStream2 {
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
pub(crate) enum Pass {
    /// By value, as the owned type.
    Owned,
    /// By reference to `target` (`&Tensor`, `&[i64]`, `&str`...), borrowed from the owned value.
    Ref(TokenStream2),
    /// `Option<&Tensor>`, from `Option<Tensor>` with `as_ref`.
    OptRef,
}

/// The declared return type `Result<T>`.
#[derive(Clone, Copy)]
pub(crate) enum Ret {
    /// `()`, `Tensor`, or a tuple of this many tensors.
    Tensors(usize),
    /// `Vec<Tensor>`.
    List,
}

impl Ret {
    pub(crate) fn owned(self) -> TokenStream2 {
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

/// A type as written, for messages (`HashMap<u8, u8>`, `&[i64]`).
pub(crate) fn type_text(ty: &Type) -> String {
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
pub(crate) fn classify(ty: &Type) -> Option<(Kind, Pass)> {
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
pub(crate) fn classify_return(output: &ReturnType, sig_span: Span) -> syn::Result<Ret> {
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
