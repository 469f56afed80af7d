//! The expansion: checks the function's signature against the attribute and generates the module
//! beside it, with `op()` (defines the operator once), `define()` and `call(..)`.

use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{Attribute, Ident, ItemFn, LitStr, Signature};

use crate::attr::{Mutates, OpAttr};
use crate::params::{Param, params};
use crate::types::{Ret, classify_return};

/// The most parameters a typed kernel closure takes in the runtime; longer signatures get a boxed
/// kernel over `&[Value]` instead.
const TYPED_KERNEL_MAX: usize = 8;

/// Expands `#[custom_op(attr)] func` (its `#[default(..)]`s already stripped into `defaults`) into
/// the function followed by its module.
pub(crate) fn expand(
    attr: TokenStream2,
    func: &ItemFn,
    defaults: Vec<Vec<Attribute>>,
) -> syn::Result<TokenStream2> {
    let attr: OpAttr = syn::parse2(attr)?;
    let sig = &func.sig;
    check_signature(sig)?;
    let params = params(func, defaults)?;
    let ret = classify_return(&sig.output, sig.ident.span())?;
    let mutates = mutates_tokens(&attr.mutates, &params)?;

    let vis = &func.vis;
    let fn_ident = &sig.ident;
    let name = &attr.name;
    let args: Vec<Ident> = (0..params.len())
        .map(|i| format_ident!("__tp_arg{i}"))
        .collect();
    let op = op_fn();
    let define = define_fn(&attr, fn_ident, &params, &args, ret, mutates);
    let call = call_fn(name, &params, &args, ret);

    let mod_doc = format!(
        "The `{}` custom operator defined from the function `{fn_ident}`: `op()` returns its \
         handle, `call(..)` calls it through the dispatcher.",
        name.value()
    );

    Ok(quote! {
        #func

        #[doc = #mod_doc]
        #[allow(dead_code, non_snake_case)]
        #vis mod #fn_ident {
            #op

            #define

            #call
        }
    })
}

/// Rejects what a schema cannot describe: generic, async, unsafe and variadic functions.
fn check_signature(sig: &Signature) -> syn::Result<()> {
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
    Ok(())
}

/// The `MutatesArgs` expression; each name in `mutates_args` must be a distinct tensor
/// parameter, with the error on the offending name.
fn mutates_tokens(mutates: &Mutates, params: &[Param]) -> syn::Result<TokenStream2> {
    Ok(match mutates {
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
    })
}

/// `op()`: the operator's handle, defined on first use under a lock.
fn op_fn() -> TokenStream2 {
    quote! {
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
    }
}

/// `define()`: infers the schema from the parameter types and registers the operator with its
/// kernel, which calls the user's function.
fn define_fn(
    attr: &OpAttr,
    fn_ident: &Ident,
    params: &[Param],
    args: &[Ident],
    ret: Ret,
    mutates: TokenStream2,
) -> TokenStream2 {
    let name = &attr.name;
    let ret_ty = ret.owned();
    let device_types = attr
        .device_types
        .as_ref()
        .map(|types| quote!(.device_types(&[#(#types),*])));
    let arg_names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let proto_params = params.iter().map(|p| {
        let pname = &p.name;
        let ty = p.kind.owned();
        let schema_ty = quote!(<#ty as ::tensorplay::library::ArgType>::SCHEMA);
        match &p.default {
            Some(d) => quote!(.param_default(#pname, #schema_ty, #d)),
            None => quote!(.param(#pname, #schema_ty)),
        }
    });
    let kernel = kernel_tokens(name, fn_ident, params, args, &ret_ty);
    quote! {
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
    }
}

/// The kernel closure: typed over the owned arguments up to [`TYPED_KERNEL_MAX`] parameters,
/// boxed over `&[Value]` beyond.
fn kernel_tokens(
    name: &LitStr,
    fn_ident: &Ident,
    params: &[Param],
    args: &[Ident],
    ret_ty: &TokenStream2,
) -> TokenStream2 {
    let n = params.len();
    let owned: Vec<TokenStream2> = params.iter().map(|p| p.kind.owned()).collect();
    let to_user: Vec<TokenStream2> = params
        .iter()
        .zip(args)
        .map(|(p, a)| p.pass_to_user(a))
        .collect();
    if n <= TYPED_KERNEL_MAX {
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
    }
}

/// `call(..)`: the original parameter names with absolute types, boxed in order, called through
/// the dispatcher.
fn call_fn(name: &LitStr, params: &[Param], args: &[Ident], ret: Ret) -> TokenStream2 {
    let ret_ty = ret.owned();
    let call_params = params.iter().map(|p| {
        let id = &p.ident;
        let ty = p.user_type();
        quote!(#id: #ty)
    });
    let boxed = params.iter().zip(args).map(|(p, a)| {
        let id = &p.ident;
        let to_owned = p.to_owned(id);
        let b = p.kind.boxed(a);
        quote!({ let #a = #to_owned; #b })
    });
    let convert = convert_tokens(name, ret);
    let call_doc = format!(
        "Calls `{}` through the dispatcher (autograd, autocast, vmap, fake tensors and capture \
         apply), defining it first if needed.",
        name.value()
    );
    quote! {
        #[doc = #call_doc]
        #[allow(clippy::too_many_arguments)]
        pub fn call(#(#call_params),*) -> ::tensorplay::Result<#ret_ty> {
            let __tp_args: ::std::vec::Vec<::tensorplay::Value> = ::std::vec![#(#boxed),*];
            let __tp_outs = self::op()?.call(&__tp_args)?;
            #convert
        }
    }
}

/// The tail of `call`: turns the dispatcher's `Vec<Tensor>` (`__tp_outs`) into the declared
/// return type.
fn convert_tokens(name: &LitStr, ret: Ret) -> TokenStream2 {
    match ret {
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
    }
}
