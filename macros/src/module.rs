//! `#[derive(Module)]`: implements `tensorplay::nn::Module` for a struct from its fields (the
//! field rules are documented on `tensorplay_nn`'s crate docs and on the derive in `lib.rs`).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, GenericArgument, Ident, Member, Path, PathArguments, Type};

/// What a field is to the module.
enum Role {
    /// A tensor (`Tensor`, `Option<Tensor>` or `Vec<Tensor>`), a parameter or a buffer.
    Tensor { shape: Wrap, buffer: bool },
    /// The `training: bool` flag.
    Training,
    /// A sub-module (anything implementing `Module`).
    Child,
    /// Ignored (plain settings, `#[skip]`).
    Skip,
}

/// How a tensor field holds its tensor(s).
#[derive(Clone, Copy)]
enum Wrap {
    One,
    Opt,
    List,
}

/// One field: how to reach it, its name in the state dict, and its role.
struct Field {
    member: Member,
    name: String,
    role: Role,
    /// The field's type is an `Option<..>` (a child listed only when set).
    optional: bool,
    span: Span,
}

/// Expands the derive.
pub fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let krate = crate_path(input)?;
    let fields = match &input.data {
        Data::Struct(s) => read_fields(&s.fields)?,
        _ => {
            return Err(syn::Error::new(
                input.ident.span(),
                "#[derive(Module)] applies to structs (named, tuple or unit), not enums or unions",
            ));
        }
    };
    let visit = fields.iter().map(|f| visit_field(f, &krate, false));
    let visit_mut = fields.iter().map(|f| visit_field(f, &krate, true));
    let children = fields.iter().filter_map(|f| child_field(f, &krate));
    let set_training = fields.iter().filter_map(|f| {
        let m = &f.member;
        match f.role {
            Role::Training => Some(quote! { self.#m = training; }),
            Role::Child => Some(
                quote_spanned! {f.span=> #krate::Module::set_training(&mut self.#m, training); },
            ),
            _ => None,
        }
    });
    let mode = match fields.iter().find(|f| matches!(f.role, Role::Training)) {
        Some(f) => {
            let m = &f.member;
            quote! { ::core::option::Option::Some(self.#m) }
        }
        None => {
            let parts = fields
                .iter()
                .filter(|f| matches!(f.role, Role::Child))
                .map(|f| {
                    let m = &f.member;
                    quote_spanned! {f.span=> #krate::Module::mode(&self.#m) }
                });
            quote! { #krate::combine_modes([#(#parts),*]) }
        }
    };
    let name = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_g #krate::Module for #name #ty_g #where_g {
            fn visit(&self, prefix: &str, f: &mut #krate::Visit<'_>) {
                let _ = (&prefix, &f);
                #(#visit)*
            }
            fn visit_mut(
                &mut self,
                prefix: &str,
                f: &mut #krate::VisitMut<'_>,
            ) -> #krate::__private::Result<()> {
                let _ = (&prefix, &f);
                #(#visit_mut)*
                ::core::result::Result::Ok(())
            }
            fn children(&self) -> ::std::vec::Vec<(::std::string::String, &dyn #krate::Module)> {
                #[allow(unused_mut)]
                let mut out: ::std::vec::Vec<(::std::string::String, &dyn #krate::Module)> =
                    ::std::vec::Vec::new();
                #(#children)*
                out
            }
            fn set_training(&mut self, training: bool) {
                let _ = training;
                #(#set_training)*
            }
            fn mode(&self) -> ::core::option::Option<bool> {
                #mode
            }
        }
    })
}

/// `#[module(crate = path)]`, or `::tensorplay::nn`.
fn crate_path(input: &DeriveInput) -> syn::Result<Path> {
    let mut path: Path = syn::parse_quote!(::tensorplay::nn);
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                path = meta.value()?.parse()?;
                Ok(())
            } else {
                Err(meta.error("expected `crate = path` (e.g. `#[module(crate = tensorplay_nn)]`)"))
            }
        })?;
    }
    Ok(path)
}

/// The fields with their roles.
fn read_fields(fields: &Fields) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let (member, name) = match &f.ident {
            Some(id) => (Member::Named(id.clone()), id.to_string()),
            None => (Member::Unnamed(i.into()), i.to_string()),
        };
        let has = |attr: &str| f.attrs.iter().any(|a| a.path().is_ident(attr));
        let (skip, buffer) = (has("skip"), has("buffer"));
        if skip && buffer {
            return Err(syn::Error::new(
                f.span(),
                "a field cannot be both #[skip] and #[buffer]",
            ));
        }
        let role = if skip {
            Role::Skip
        } else if let Some(shape) = tensor_wrap(&f.ty) {
            Role::Tensor { shape, buffer }
        } else if buffer {
            return Err(syn::Error::new(
                f.ty.span(),
                "#[buffer] applies to `Tensor`, `Option<Tensor>` or `Vec<Tensor>` fields",
            ));
        } else if name == "training" && is_ident(&f.ty, "bool") {
            Role::Training
        } else if is_plain(&f.ty) {
            Role::Skip
        } else {
            Role::Child
        };
        out.push(Field {
            member,
            name,
            role,
            optional: last_segment(&f.ty).is_some_and(|(id, arg)| id == "Option" && arg.is_some()),
            span: f.ty.span(),
        });
    }
    Ok(out)
}

/// The last path segment of `ty` and its single generic type argument, if any.
fn last_segment(ty: &Type) -> Option<(&Ident, Option<&Type>)> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let seg = p.path.segments.last()?;
    let arg = match &seg.arguments {
        PathArguments::AngleBracketed(a) if a.args.len() == 1 => match &a.args[0] {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    };
    Some((&seg.ident, arg))
}

/// Whether `ty` is the plain identifier `name` (`bool`, `Tensor`).
fn is_ident(ty: &Type, name: &str) -> bool {
    last_segment(ty).is_some_and(|(id, arg)| id == name && arg.is_none())
}

/// `Tensor`, `Option<Tensor>` or `Vec<Tensor>`.
fn tensor_wrap(ty: &Type) -> Option<Wrap> {
    if is_ident(ty, "Tensor") {
        return Some(Wrap::One);
    }
    match last_segment(ty)? {
        (id, Some(inner)) if id == "Option" && is_ident(inner, "Tensor") => Some(Wrap::Opt),
        (id, Some(inner)) if id == "Vec" && is_ident(inner, "Tensor") => Some(Wrap::List),
        _ => None,
    }
}

/// Plain settings: scalars, `String`, `char`, and `Option`/`Vec`/arrays/tuples of them (a
/// kernel size `[usize; 2]`, a `(usize, usize)` stride).
fn is_plain(ty: &Type) -> bool {
    const PLAIN: &[&str] = &[
        "bool", "char", "String", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8",
        "u16", "u32", "u64", "u128", "usize",
    ];
    match ty {
        Type::Array(a) => return is_plain(&a.elem),
        Type::Tuple(t) => return t.elems.iter().all(is_plain),
        _ => {}
    }
    match last_segment(ty) {
        Some((id, None)) => PLAIN.iter().any(|p| id == p),
        Some((id, Some(inner))) if id == "Option" || id == "Vec" => is_plain(inner),
        _ => false,
    }
}

/// The visit (or visit_mut) code of one field.
fn visit_field(f: &Field, krate: &Path, mutable: bool) -> TokenStream {
    let (m, name) = (&f.member, &f.name);
    let full = quote! { &#krate::join_name(prefix, #name) };
    let call = |t: TokenStream, n: TokenStream| {
        if mutable {
            quote! { f(#n, #t, kind)?; }
        } else {
            quote! { f(#n, #t, kind); }
        }
    };
    let r = if mutable { quote!(&mut) } else { quote!(&) };
    match &f.role {
        Role::Tensor { shape, buffer } => {
            let kind = if *buffer {
                quote!(#krate::TensorKind::Buffer)
            } else {
                quote!(#krate::TensorKind::Parameter)
            };
            let body = match shape {
                Wrap::One => call(quote!(#r self.#m), full),
                Wrap::Opt => {
                    let c = call(quote!(t), full);
                    quote! { if let ::core::option::Option::Some(t) = #r self.#m { #c } }
                }
                Wrap::List => {
                    let c = call(
                        quote!(t),
                        quote!(&#krate::join_name(&#krate::join_name(prefix, #name), &i.to_string())),
                    );
                    quote! { for (i, t) in (#r self.#m).into_iter().enumerate() { #c } }
                }
            };
            quote! { { let kind = #kind; #body } }
        }
        Role::Child if mutable => quote_spanned! {f.span=>
            #krate::Module::visit_mut(&mut self.#m, #full, f)?;
        },
        Role::Child => quote_spanned! {f.span=>
            #krate::Module::visit(&self.#m, #full, f);
        },
        Role::Training | Role::Skip => TokenStream::new(),
    }
}

/// The `children()` entry of one field (sub-modules only; an `Option` field only when set).
fn child_field(f: &Field, krate: &Path) -> Option<TokenStream> {
    if !matches!(f.role, Role::Child) {
        return None;
    }
    let (m, name) = (&f.member, &f.name);
    Some(if f.optional {
        quote_spanned! {f.span=>
            if let ::core::option::Option::Some(c) = &self.#m {
                out.push((::std::string::String::from(#name), c as &dyn #krate::Module));
            }
        }
    } else {
        quote_spanned! {f.span=>
            out.push((::std::string::String::from(#name), &self.#m as &dyn #krate::Module));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn err(src: &str) -> String {
        let input: syn::DeriveInput = syn::parse_str(src).expect("parses");
        expand(&input).expect_err("an error").to_string()
    }

    fn ok(src: &str) -> String {
        let input: syn::DeriveInput = syn::parse_str(src).expect("parses");
        expand(&input).expect("expands").to_string()
    }

    #[test]
    fn misuse_is_a_compile_error_saying_what_fits() {
        assert!(err("enum E { A }").contains("applies to structs"));
        assert!(
            err("struct S { #[skip] #[buffer] t: Tensor }").contains("both #[skip] and #[buffer]")
        );
        assert!(err("struct S { #[buffer] n: usize }").contains("#[buffer] applies to `Tensor`"));
        assert!(err("#[module(krate = x)] struct S;").contains("expected `crate = path`"));
    }

    #[test]
    fn fields_get_their_roles_and_the_crate_path_is_used() {
        let code = ok(
            "#[module(crate = my_nn)] struct S { w: Tensor, #[buffer] b: Option<Tensor>, \
                       training: bool, n: Vec<usize>, #[skip] s: Cfg, fc: Linear, \
                       k: [usize; 2], p: (usize, bool) }",
        );
        assert!(code.contains("my_nn :: TensorKind :: Parameter"));
        assert!(code.contains("my_nn :: TensorKind :: Buffer"));
        assert!(code.contains("Some (self . training)"));
        assert!(code.contains("my_nn :: Module :: visit (& self . fc"));
        // Plain settings and skipped fields are not visited.
        assert!(!code.contains("self . n") && !code.contains("self . s"));
        assert!(!code.contains("self . k") && !code.contains("self . p"));
        let default = ok("struct T(Linear);");
        assert!(default.contains(":: tensorplay :: nn :: Module :: visit (& self . 0"));
        assert!(default.contains("combine_modes"));
    }
}
