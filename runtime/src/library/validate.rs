//! Definition-time checks on a custom op's schema, shared by `custom_op` and `define`: what the
//! parser accepts but a custom operator may not be (defaults of the wrong type), and the seed's
//! loose `define("ns::add(Tensor, Tensor)")` spelling. Keyword-only tensors
//! (`f(Tensor x, *, Tensor(a!) out) -> ()`, PyTorch's out= convention) are accepted: every layer
//! works on the bound arguments, one per parameter in schema order, so a keyword-only tensor is a
//! trailing argument of the kernel like any other.

use tensorplay_ir::schema::{BaseType, DefaultValue, Param, Schema, SchemaType};
use tensorplay_ir::{Error, Result};

/// Rejects defaults that do not fit their parameter's type.
pub(crate) fn check_definition(schema: &Schema) -> Result<()> {
    let op = schema.qualified_name();
    for p in &schema.params {
        if let Some(d) = &p.default
            && !default_fits(&p.ty, &d.value)
        {
            return Err(Error::Registration(format!(
                "`{op}`: the default of parameter `{}` is `{}`, which is not a {}",
                p.name, d.text, p.ty
            )));
        }
    }
    Ok(())
}

/// An op restricted to some device types must be able to say which device a call is for: a
/// tensor parameter, or a `Device` one.
pub(crate) fn check_dispatchable(schema: &Schema) -> Result<()> {
    let has = |f: &dyn Fn(&Param) -> bool| schema.params.iter().any(f);
    if has(&|p| p.ty.is_tensor_like()) || has(&|p| is_device(&p.ty)) {
        return Ok(());
    }
    Err(Error::Registration(format!(
        "`{}` has device_types but no tensor or Device parameter to pick the device from; add \
         a `Device device` parameter",
        schema.qualified_name()
    )))
}

fn is_device(ty: &SchemaType) -> bool {
    matches!(ty.non_optional(), SchemaType::Base(BaseType::Device))
}

#[allow(clippy::match_like_matches_macro)] // one arm per accepted pairing reads best
fn default_fits(ty: &SchemaType, d: &DefaultValue) -> bool {
    match (ty, d) {
        (SchemaType::Optional(_), DefaultValue::None) => true,
        (SchemaType::Optional(inner), d) => default_fits(inner, d),
        (SchemaType::List(inner, len), d) => match (inner.base(), d) {
            (BaseType::Int | BaseType::SymInt, DefaultValue::IntList(_)) => true,
            (BaseType::Int | BaseType::SymInt, DefaultValue::Int(_)) => len.is_some(),
            (BaseType::Float, DefaultValue::FloatList(_) | DefaultValue::IntList(_)) => true,
            (BaseType::Bool, DefaultValue::BoolList(_)) => true,
            (BaseType::Other(_), _) => true,
            // `[]` parses as an empty int list; it fits any list.
            (_, DefaultValue::IntList(v)) => v.is_empty(),
            _ => false,
        },
        (SchemaType::Base(base), d) => match (base, d) {
            (BaseType::Int | BaseType::SymInt, DefaultValue::Int(_)) => true,
            (BaseType::Float, DefaultValue::Float(_) | DefaultValue::Int(_)) => true,
            (BaseType::Bool, DefaultValue::Bool(_)) => true,
            (BaseType::Str, DefaultValue::Str(_)) => true,
            (
                BaseType::Scalar,
                DefaultValue::Int(_) | DefaultValue::Float(_) | DefaultValue::Bool(_),
            ) => true,
            (
                BaseType::ScalarType
                | BaseType::Device
                | BaseType::Layout
                | BaseType::MemoryFormat
                | BaseType::Str,
                DefaultValue::Ident(_),
            ) => true,
            (BaseType::Device, DefaultValue::Str(_)) => true,
            (BaseType::Other(_) | BaseType::Generator, _) => true,
            _ => false,
        },
    }
}

/// Completes the seed's loose schema spelling: unnamed parameters get names (`arg0`, …, by
/// position) and a missing `-> …` means `-> ()`. Well-formed schemas come back unchanged.
///
/// ```ignore
/// assert_eq!(complete_loose("ns::add(Tensor, Tensor)"), "ns::add(Tensor arg0, Tensor arg1) -> ()");
/// ```
pub(crate) fn complete_loose(text: &str) -> String {
    let Some(open) = text.find('(') else {
        return text.to_string();
    };
    let Some(close) = matching_paren(text, open) else {
        return text.to_string();
    };
    let params = &text[open + 1..close];
    let mut named = Vec::new();
    for (i, piece) in split_top_level(params).into_iter().enumerate() {
        let p = piece.trim();
        if p.is_empty() || p == "*" || p.contains('=') || has_name(p) {
            named.push(p.to_string());
        } else {
            named.push(format!("{p} arg{i}"));
        }
    }
    let rest = text[close + 1..].trim();
    let rest = if rest.is_empty() {
        " -> ()".to_string()
    } else {
        format!(" {rest}")
    };
    format!("{}({}){rest}", &text[..open], named.join(", "))
}

fn matching_paren(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// True when a parameter has a name after its type: some whitespace outside parentheses
/// followed by more text.
fn has_name(p: &str) -> bool {
    let mut depth = 0i32;
    for c in p.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loose_schemas_are_completed() {
        assert_eq!(
            complete_loose("ns::add(Tensor, Tensor)"),
            "ns::add(Tensor arg0, Tensor arg1) -> ()"
        );
        assert_eq!(
            complete_loose("ns::f(Tensor(a!) x, int[2] k, *, float e=1.0) -> Tensor"),
            "ns::f(Tensor(a!) x, int[2] k, *, float e=1.0) -> Tensor"
        );
        assert_eq!(complete_loose("ns::g()"), "ns::g() -> ()");
        assert_eq!(
            complete_loose("ns::h(Tensor(a -> *), int[])"),
            "ns::h(Tensor(a -> *) arg0, int[] arg1) -> ()"
        );
    }

    #[test]
    fn defaults_must_fit() {
        for bad in [
            "ns::a(Tensor x, int a=1.5) -> Tensor",
            "ns::a(Tensor x, bool b=maybe) -> Tensor",
            "ns::a(Tensor x, int a=None) -> Tensor",
            "ns::a(Tensor x, str s=3) -> Tensor",
        ] {
            let s = Schema::parse(bad).unwrap();
            assert!(check_definition(&s).is_err(), "{bad}");
        }
        let ok = Schema::parse(
            "ns::a(Tensor x, int a=1, float f=2, bool b=True, int? c=None, int[2] k=1, \
             float[] fs=[1.0], str s=\"m\", Scalar sc=1, ScalarType? d=None) -> Tensor",
        )
        .unwrap();
        check_definition(&ok).unwrap();
    }
}
