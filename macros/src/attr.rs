//! The attribute's own arguments: `#[custom_op("ns::name", mutates_args = .., device_types = ..)]`.

use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitStr, Token, bracketed};

/// Options of the attribute: `"ns::name", mutates_args = .., device_types = ..`.
pub(crate) struct OpAttr {
    pub(crate) name: LitStr,
    pub(crate) mutates: Mutates,
    pub(crate) device_types: Option<Vec<LitStr>>,
}

/// `mutates_args` as written.
pub(crate) enum Mutates {
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
                    mutates = Some(mutates_value(input)?);
                }
                "device_types" => {
                    if device_types.is_some() {
                        return Err(syn::Error::new(key.span(), "`device_types` given twice"));
                    }
                    device_types = Some(device_types_value(input)?);
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

/// The value after `mutates_args =`: a list of parameter names or the string `"unknown"`.
fn mutates_value(input: ParseStream) -> syn::Result<Mutates> {
    Ok(if input.peek(LitStr) {
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
    })
}

/// The value after `device_types =`: a list of `"cpu"` and `"cuda"`.
fn device_types_value(input: ParseStream) -> syn::Result<Vec<LitStr>> {
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
    Ok(types)
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
