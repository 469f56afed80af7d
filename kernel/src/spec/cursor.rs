//! The cursor the spec and layout parsers read one line with: tokens (punctuation, words,
//! numbers, `%` values, dtypes, float and literal tokens) and errors that point at a 1-based
//! column with a caret.

use std::str::FromStr;

use tensorplay_ir::{CompileKind, DType, Error, Result};

/// A cursor over one line of text.
pub(crate) struct Cursor<'a> {
    text: &'a str,
    /// What the text is, for messages (`kernel spec text`, `loop layout text`).
    what: &'static str,
    /// 1-based line number, when the text has several lines.
    line: Option<usize>,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str, what: &'static str, line: Option<usize>) -> Self {
        Cursor {
            text,
            what,
            line,
            pos: 0,
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    /// The byte position of the cursor (after skipping spaces), for [`Cursor::error_at`].
    pub(crate) fn mark(&mut self) -> usize {
        self.skip_ws();
        self.pos
    }

    /// Moves the cursor back to a [`Cursor::mark`].
    pub(crate) fn pos_reset(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// An error at byte position `pos`: `<what> line L, column C: msg`, the line and a caret.
    pub(crate) fn error_at(&self, pos: usize, msg: impl std::fmt::Display) -> Error {
        let column = self.text[..pos.min(self.text.len())].chars().count() + 1;
        let at = match self.line {
            Some(n) => format!("line {n}, column {column}"),
            None => format!("column {column}"),
        };
        Error::compile(
            CompileKind::Lowering,
            format!(
                "{} {at}: {msg}\n  | {}\n  | {}^",
                self.what,
                self.text,
                " ".repeat(column - 1)
            ),
        )
    }

    /// An error at the cursor.
    pub(crate) fn error(&mut self, msg: impl std::fmt::Display) -> Error {
        let pos = self.mark();
        self.error_at(pos, msg)
    }

    /// `expected <what>, found <the token at the cursor>`.
    pub(crate) fn expected(&mut self, what: &str) -> Error {
        let found = self.found();
        self.error(format!("expected {what}, found {found}"))
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// What is at the cursor, for messages.
    fn found(&self) -> String {
        let rest = self.rest().trim_start();
        if rest.is_empty() {
            return "the end of the line".to_string();
        }
        let token: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace())
            .take(16)
            .collect();
        format!("`{token}`")
    }

    /// The next character (after spaces), not consumed.
    pub(crate) fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.rest().chars().next()
    }

    /// Consumes `s` if the text continues with it (after spaces).
    pub(crate) fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Consumes `s`, or errors naming it.
    pub(crate) fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{s}`")))
        }
    }

    /// Errors unless only spaces remain.
    pub(crate) fn expect_end(&mut self) -> Result<()> {
        self.skip_ws();
        if self.rest().is_empty() {
            Ok(())
        } else {
            Err(self.expected("the end of the line"))
        }
    }

    /// A word `[A-Za-z_][A-Za-z0-9_]*`, if one starts at the cursor.
    pub(crate) fn word(&mut self) -> Option<&'a str> {
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

    /// A decimal number without sign (`what` names it in the error).
    pub(crate) fn unsigned(&mut self, what: &str) -> Result<usize> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        match rest[..len].parse() {
            Ok(n) => {
                self.pos += len;
                Ok(n)
            }
            Err(_) => Err(self.expected(what)),
        }
    }

    /// `%N`: a value of the body.
    pub(crate) fn value(&mut self) -> Result<usize> {
        if !self.eat("%") {
            return Err(self.expected("a value `%N`"));
        }
        // No space between `%` and the number.
        if !self.rest().starts_with(|c: char| c.is_ascii_digit()) {
            let found = self.found();
            return Err(self.error_at(
                self.pos,
                format!("expected a value number right after `%`, found {found}"),
            ));
        }
        self.unsigned("a value number")
    }

    /// A dtype name (`f32`, `bool`, ...).
    pub(crate) fn dtype(&mut self) -> Result<DType> {
        let at = self.mark();
        let names = || {
            DType::ALL
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.word() {
            Some(w) => DType::from_str(w).map_err(|_| {
                self.error_at(at, format!("expected a dtype ({}), found `{w}`", names()))
            }),
            None => Err(self.expected(&format!("a dtype ({})", names()))),
        }
    }

    /// A number-like token: letters, digits and `.+-:_` (`1.5e+16`, `-inf`, `nan:0x7ff8..`,
    /// `true`), and where it starts. Empty when none starts at the cursor.
    pub(crate) fn token(&mut self) -> (usize, &'a str) {
        let at = self.mark();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || ".+-:_".contains(c)))
            .unwrap_or(rest.len());
        self.pos += len;
        (at, &rest[..len])
    }

    /// `[item, item, ..]` (possibly empty), each item read by `item`.
    pub(crate) fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.expect("[")?;
        let mut items = Vec::new();
        if self.eat("]") {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat("]") {
                return Ok(items);
            }
            if !self.eat(",") {
                return Err(self.expected("`,` or `]`"));
            }
        }
    }
}
