//! The cursor over one line of the text and its tokens: punctuation, words, qualified names,
//! numbers, strings and `%` value labels. Errors point at a 1-based column with a caret.

use crate::error::CompileKind;
use crate::error::{Error, Result};

/// A cursor over one line of the text; columns in messages are 1-based characters.
pub(super) struct Line<'a> {
    pub(super) text: &'a str,
    pub(super) number: usize,
    pub(super) pos: usize,
}

/// A number literal, kept as written so that `2` and `2.0` stay different kinds.
pub(super) enum Num {
    Int(i64),
    Float(f64),
}

impl<'a> Line<'a> {
    pub(super) fn new(text: &'a str, number: usize) -> Self {
        Line {
            text,
            number,
            pos: 0,
        }
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(super) fn error_at(&self, pos: usize, msg: impl std::fmt::Display) -> Error {
        let column = self.text[..pos.min(self.text.len())].chars().count() + 1;
        Error::compile(
            CompileKind::Graph,
            format!(
                "graph text line {}, column {column}: {msg}\n  | {}\n  | {}^",
                self.number,
                self.text,
                " ".repeat(column - 1)
            ),
        )
    }

    pub(super) fn error(&self, msg: impl std::fmt::Display) -> Error {
        self.error_at(self.pos, msg)
    }

    pub(super) fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    pub(super) fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.rest().chars().next()
    }

    pub(super) fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(super) fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{s}`, found {}", self.found())))
        }
    }

    /// What is at the cursor, for messages.
    pub(super) fn found(&self) -> String {
        let rest = self.rest().trim_start();
        match rest.chars().next() {
            None => "the end of the line".to_string(),
            Some(_) => {
                let token: String = rest
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .take(16)
                    .collect();
                format!("`{token}`")
            }
        }
    }

    pub(super) fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.rest().is_empty()
    }

    pub(super) fn expect_end(&mut self) -> Result<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.error(format!(
                "unexpected {} at the end of the line",
                self.found()
            )))
        }
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`.
    pub(super) fn word(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let rest = self.rest();
        let first = rest.chars().next()?;
        if !(first.is_ascii_alphabetic() || first == '_') {
            return None;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        self.pos += len;
        Some(&rest[..len])
    }

    /// `ns::name` with an optional `.overload`.
    pub(super) fn qualname(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        if self.word().is_none() {
            return Err(self.error(format!("expected an op name, found {}", self.found())));
        }
        while self.rest().starts_with("::") {
            self.pos += 2;
            if self.word().is_none() {
                return Err(self.error("expected a name after `::`"));
            }
        }
        if self.rest().starts_with('.') {
            self.pos += 1;
            if self.word().is_none() {
                return Err(self.error("expected an overload name after `.`"));
            }
        }
        Ok(&self.text[start..self.pos])
    }

    pub(super) fn unsigned(&mut self) -> Option<usize> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n = rest[..len].parse().ok()?;
        self.pos += len;
        Some(n)
    }

    /// An integer or float literal: `3`, `-2`, `0.5`, `1e-05`, `-inf`, `nan`.
    pub(super) fn number(&mut self) -> Result<Option<Num>> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        let body = rest.strip_prefix('-').unwrap_or(rest);
        let sign = rest.len() - body.len();
        for word in ["inf", "nan"] {
            let Some(after) = body.strip_prefix(word) else {
                continue;
            };
            let boundary = after
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            if boundary {
                self.pos += sign + word.len();
                let v: f64 = if word == "inf" {
                    f64::INFINITY
                } else {
                    f64::NAN
                };
                return Ok(Some(Num::Float(if sign == 1 { -v } else { v })));
            }
        }
        if !body.starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(None);
        }
        let mut len = sign;
        let bytes = rest.as_bytes();
        let mut float = false;
        while len < bytes.len() {
            let c = bytes[len] as char;
            if c.is_ascii_digit() {
                len += 1;
            } else if c == '.' && !float {
                float = true;
                len += 1;
            } else if c == 'e' || c == 'E' {
                float = true;
                len += 1;
                if len < bytes.len() && (bytes[len] == b'+' || bytes[len] == b'-') {
                    len += 1;
                }
            } else {
                break;
            }
        }
        let lit = &rest[..len];
        self.pos += len;
        if float {
            lit.parse()
                .map(|v| Some(Num::Float(v)))
                .map_err(|_| self.error_at(start, format!("`{lit}` is not a valid float")))
        } else {
            lit.parse()
                .map(|v| Some(Num::Int(v)))
                .map_err(|_| self.error_at(start, format!("`{lit}` is not a valid 64-bit integer")))
        }
    }

    /// A string in Rust's debug form: `"mean"`, `"a\"b"`.
    pub(super) fn string(&mut self) -> Result<String> {
        self.expect("\"")?;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => {
                    let at = self.pos + i;
                    let bad = || self.error_at(at, "unknown escape in a string");
                    match chars.next().map(|(_, e)| e) {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some('0') => out.push('\0'),
                        Some(e @ ('\\' | '"' | '\'')) => out.push(e),
                        Some('u') => {
                            if chars.next().map(|(_, c)| c) != Some('{') {
                                return Err(bad());
                            }
                            let mut hex = String::new();
                            loop {
                                match chars.next().map(|(_, c)| c) {
                                    Some('}') => break,
                                    Some(h) if h.is_ascii_hexdigit() => hex.push(h),
                                    _ => return Err(bad()),
                                }
                            }
                            let ch = u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(bad)?;
                            out.push(ch);
                        }
                        _ => return Err(bad()),
                    }
                }
                c => out.push(c),
            }
        }
        Err(self.error("unterminated string"))
    }

    /// `%name` (an input or a numbered node) with an optional `.output`.
    pub(super) fn value(&mut self) -> Result<(String, Option<usize>, usize)> {
        self.skip_ws();
        let start = self.pos;
        let label = self.label()?;
        let output = if self.rest().starts_with('.') {
            self.pos += 1;
            Some(
                self.unsigned()
                    .ok_or_else(|| self.error("expected an output number after `.`"))?,
            )
        } else {
            None
        };
        Ok((label, output, start))
    }

    /// `%x` or `%3`, returned with the `%`.
    pub(super) fn label(&mut self) -> Result<String> {
        self.skip_ws();
        let start = self.pos;
        if !self.rest().starts_with('%') {
            return Err(self.error(format!(
                "expected a value like `%3`, found {}",
                self.found()
            )));
        }
        self.pos += 1;
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(if rest.starts_with('?') {
                self.error("`%?` marks a missing argument; a parseable graph has none")
            } else {
                self.error("expected a name or number after `%`")
            });
        }
        self.pos += len;
        Ok(self.text[start..self.pos].to_string())
    }
}
