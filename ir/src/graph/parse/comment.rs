//! The trailing `# ...` comment of a line: splitting it off, and reading a node's
//! `class: X`, `barrier: why` and `after %a, %b`.

use super::line::Line;
use crate::error::Result;
use crate::op_class::OpClass;

/// The class names a `# class: ...` comment accepts, as `OpClass` displays them.
const CLASSES: [OpClass; 5] = [
    OpClass::Elementwise,
    OpClass::Reduction,
    OpClass::View,
    OpClass::Opaque,
    OpClass::Mutating,
];

/// The trailing `# ...` comment of a node line: `class: X`, `barrier: why`, `after %a, %b`,
/// joined by `; ` in that order.
#[derive(Default)]
pub(super) struct Comment {
    pub(super) class: Option<OpClass>,
    pub(super) barrier: Option<String>,
    pub(super) after: Vec<(String, usize)>,
}

/// Splits a line into its code and its comment (a `#` outside string literals).
pub(super) fn split_comment(text: &str) -> (&str, Option<(&str, usize)>) {
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
        } else if c == '"' {
            in_str = true;
        } else if c == '#' {
            return (&text[..i], Some((&text[i + 1..], i + 1)));
        }
    }
    (text, None)
}

pub(super) fn parse_comment(line: &Line<'_>, comment: Option<(&str, usize)>) -> Result<Comment> {
    let mut out = Comment::default();
    let Some((text, offset)) = comment else {
        return Ok(out);
    };
    let lead = text.len() - text.trim_start().len();
    let mut body = text.trim();
    let mut at = offset + lead;
    if let Some(rest) = body.strip_prefix("class:") {
        let (name, tail) = match rest.find(';') {
            Some(i) => (&rest[..i], rest[i + 1..].trim_start()),
            None => (rest, ""),
        };
        let name = name.trim();
        out.class = Some(
            CLASSES
                .into_iter()
                .find(|c| c.to_string() == name)
                .ok_or_else(|| {
                    line.error_at(
                        at,
                        format!(
                            "unknown op class `{name}` (expected elementwise, reduction, view, \
                             opaque or mutating)"
                        ),
                    )
                })?,
        );
        at += body.len() - tail.len();
        body = tail;
    }
    let after = if let Some(rest) = body.strip_prefix("after ") {
        let a = at + (body.len() - rest.len());
        body = "";
        Some((rest, a))
    } else if let Some(i) = body.rfind("; after ") {
        let rest = &body[i + "; after ".len()..];
        let a = at + i + "; after ".len();
        body = &body[..i];
        Some((rest, a))
    } else {
        None
    };
    if let Some((list, a)) = after {
        let mut pos = a;
        for item in list.split(',') {
            let lead = item.len() - item.trim_start().len();
            let name = item.trim();
            let valid = name.len() > 1
                && name.starts_with('%')
                && name[1..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(line.error_at(
                    pos + lead,
                    format!("`after` lists node labels like `%3`, found `{name}`"),
                ));
            }
            out.after.push((name.to_string(), pos + lead));
            pos += item.len() + 1;
        }
    }
    if let Some(reason) = body.strip_prefix("barrier: ") {
        out.barrier = Some(reason.to_string());
    } else if !body.trim().is_empty() {
        return Err(line.error_at(
            at,
            format!(
                "unknown comment `{}` (a node comment holds `class: ...`, `barrier: ...` and \
                 `after %a, %b`)",
                body.trim()
            ),
        ));
    }
    Ok(out)
}
