//! Parameter defaults: reading a `#[default(..)]` expression and turning it into the schema's
//! `DefaultValue` after checking it against the parameter's type.

use proc_macro2::{Literal, TokenStream as TokenStream2};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, Ident, Lit, UnOp};

use crate::types::Kind;

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
pub(crate) fn default_tokens(
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
