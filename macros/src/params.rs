//! The function's parameters: reading each one (name, type, `#[default(..)]`) into a [`Param`]
//! and the conversions the generated code applies to it.

use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ItemFn, Pat};

use crate::default::default_tokens;
use crate::types::{Kind, Pass, classify, type_text};

/// The parameter types the macro understands, for error messages.
const SUPPORTED_PARAMS: &str = "Tensor, &Tensor, Option<Tensor>, Option<&Tensor>, Vec<Tensor>, \
     &[Tensor], i64, Option<i64>, f64, Option<f64>, bool, String, &str, Vec<i64>, &[i64], \
     Vec<f64>, &[f64], Vec<bool>, &[bool], DType, Device";

/// One parameter of the function.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pass: Pass,
    pub(crate) default: Option<TokenStream2>,
}

impl Param {
    /// The parameter type of the generated `call`, with absolute paths.
    pub(crate) fn user_type(&self) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => self.kind.owned(),
            Pass::Ref(target) => quote!(&#target),
            Pass::OptRef => quote!(::core::option::Option<&::tensorplay::Tensor>),
        }
    }

    /// Converts the owned kernel argument `v` into what the user's function takes.
    pub(crate) fn pass_to_user(&self, v: &Ident) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => quote!(#v),
            Pass::Ref(_) => quote!(&#v),
            Pass::OptRef => quote!(::core::option::Option::as_ref(&#v)),
        }
    }

    /// Converts the `call` parameter `v` into its owned form.
    pub(crate) fn to_owned(&self, v: &Ident) -> TokenStream2 {
        match &self.pass {
            Pass::Owned => quote!(#v),
            Pass::Ref(_) => quote!(::std::borrow::ToOwned::to_owned(#v)),
            Pass::OptRef => quote!(#v.cloned()),
        }
    }
}

/// Removes every `#[default(..)]` from the parameters, returning them by parameter index.
pub(crate) fn strip_defaults(func: &mut ItemFn) -> Vec<Vec<Attribute>> {
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

/// Reads the parameters, with a compile error spanning the first unsupported one.
pub(crate) fn params(func: &ItemFn, defaults: Vec<Vec<Attribute>>) -> syn::Result<Vec<Param>> {
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
