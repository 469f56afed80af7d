//! Operator names: [`validate_qualname`], and the identifier and column helpers the parser and
//! the default reader share.

use crate::error::{Error, Result};

/// Checks an operator name `namespace::name` or `namespace::name.overload` and splits it.
///
/// Each part must match `[A-Za-z_][A-Za-z0-9_]*`. Errors are [`Error::Registration`] naming the
/// qualname and what is wrong, with a 1-based position for a bad character.
///
/// ```
/// use tensorplay_ir::schema::validate_qualname;
/// assert_eq!(
///     validate_qualname("aten::add.Tensor").unwrap(),
///     ("aten".to_string(), "add".to_string(), Some("Tensor".to_string()))
/// );
/// let err = validate_qualname("my-lib::op").unwrap_err().to_string();
/// assert!(err.contains("`my-lib::op`") && err.contains("'-'") && err.contains("position 3"));
/// ```
pub fn validate_qualname(qualname: &str) -> Result<(String, String, Option<String>)> {
    let fail =
        |what: String| Error::Registration(format!("invalid operator name `{qualname}`: {what}"));
    let Some((namespace, rest)) = qualname.split_once("::") else {
        return Err(fail(
            "expected `namespace::name`, but there is no `::`".to_string(),
        ));
    };
    let (name, overload) = match rest.split_once('.') {
        Some((name, overload)) => (name, Some(overload)),
        None => (rest, None),
    };
    let name_offset = namespace.len() + 2;
    check_name_part(qualname, namespace, "namespace", 0).map_err(fail)?;
    check_name_part(qualname, name, "operator name", name_offset).map_err(fail)?;
    if let Some(overload) = overload {
        let offset = name_offset + name.len() + 1;
        check_name_part(qualname, overload, "overload name", offset).map_err(fail)?;
    }
    Ok((
        namespace.to_string(),
        name.to_string(),
        overload.map(str::to_string),
    ))
}

/// Checks that `part` (found at byte `offset` of `qualname`) is a non-empty identifier.
fn check_name_part(
    qualname: &str,
    part: &str,
    what: &str,
    offset: usize,
) -> std::result::Result<(), String> {
    if part.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    for (i, c) in part.char_indices() {
        if c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()) {
            continue;
        }
        let position = column_of(qualname, offset + i);
        return Err(if c.is_ascii_digit() {
            format!(
                "the {what} must start with a letter or `_`, found {c:?} at position {position}"
            )
        } else {
            format!("invalid character {c:?} in the {what} at position {position}")
        });
    }
    Ok(())
}

/// The 1-based character column of byte offset `pos` in `src`.
pub(super) fn column_of(src: &str, pos: usize) -> usize {
    src.get(..pos).map_or(pos, |s| s.chars().count()) + 1
}

pub(super) fn is_ident_start(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphabetic()
}

pub(super) fn is_ident_continue(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualnames() {
        let ok = |q: &str| validate_qualname(q).unwrap();
        assert_eq!(
            ok("mylib::weighted_sum"),
            ("mylib".into(), "weighted_sum".into(), None)
        );
        assert_eq!(
            ok("_ns1::_op2.out_3"),
            ("_ns1".into(), "_op2".into(), Some("out_3".into()))
        );
        let bad = |q: &str| match validate_qualname(q) {
            Err(Error::Registration(msg)) => {
                assert!(msg.contains(&format!("`{q}`")), "{msg}");
                msg
            }
            other => panic!("{q}: {other:?}"),
        };
        assert!(bad("weighted_sum").contains("no `::`"));
        assert!(bad("::op").contains("the namespace is empty"));
        assert!(bad("ns::").contains("the operator name is empty"));
        assert!(bad("ns::op.").contains("the overload name is empty"));
        assert!(bad("my-lib::op").contains("invalid character '-' in the namespace at position 3"));
        assert!(
            bad("ns::1op").contains("must start with a letter or `_`, found '1' at position 5")
        );
        assert!(
            bad("a::b::c").contains("invalid character ':' in the operator name at position 5")
        );
        assert!(
            bad("ns::op.a.b").contains("invalid character '.' in the overload name at position 9")
        );
        assert!(bad("ns::op(Tensor x)").contains("'(' in the operator name at position 7"));
        assert!(bad("né::op").contains("'é' in the namespace at position 2"));
        assert!(bad("ns::öp").contains("position 5"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn qualnames_never_panic(s in "\\PC{0,24}") {
                let _ = validate_qualname(&s);
            }
        }
    }
}
