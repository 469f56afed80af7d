//! Reading the printed text form back into a graph: [`Graph::parse`].
//!
//! The parser accepts exactly what `Display for Graph` writes (see `print.rs`), so that
//! `parse(print(g))` prints as `print(g)` and validates. Two facts are not in the text:
//!
//! - **An op's class.** The `ir` crate cannot see the runtime's op registry, so the caller supplies
//!   a resolver (`name -> Option<OpClass>`; the runtime's is `registry().find(name)?.class()`).
//!   A hand-written line may state the class itself in its comment (`# class: mutating`), which
//!   wins over the resolver; the printer never writes it.
//! - **Input names that are not identifiers** (`%my input`) cannot be read back; capture and the
//!   builder examples use identifiers.
//!
//! Errors name the line and column (1-based) and show the line with a caret.

use crate::error::CompileKind;
use std::collections::HashMap;

use super::node::{Arg, Constant, Edge, Node, NodeId, NodeKind, OpCall};
use super::{Attr, Graph};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::meta::TensorMeta;
use crate::op_class::OpClass;
use crate::shape::{Dim, SymShape};
use crate::symint::SymExpr;

/// The class names a `# class: ...` comment accepts, as `OpClass` displays them.
const CLASSES: [OpClass; 5] = [
    OpClass::Elementwise,
    OpClass::Reduction,
    OpClass::View,
    OpClass::Opaque,
    OpClass::Mutating,
];

/// A cursor over one line of the text; columns in messages are 1-based characters.
struct Line<'a> {
    text: &'a str,
    number: usize,
    pos: usize,
}

/// A number literal, kept as written so that `2` and `2.0` stay different kinds.
enum Num {
    Int(i64),
    Float(f64),
}

/// One parsed op argument before its tensor slots are wired.
enum ParsedArg {
    Tensor(String, usize),
    OptionalTensor(String, usize),
    AbsentTensor,
    TensorList(Vec<(String, usize)>),
    Attr(Option<String>, Attr),
}

impl<'a> Line<'a> {
    fn new(text: &'a str, number: usize) -> Self {
        Line {
            text,
            number,
            pos: 0,
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn error_at(&self, pos: usize, msg: impl std::fmt::Display) -> Error {
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

    fn error(&self, msg: impl std::fmt::Display) -> Error {
        self.error_at(self.pos, msg)
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_ws();
        self.rest().chars().next()
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{s}`, found {}", self.found())))
        }
    }

    /// What is at the cursor, for messages.
    fn found(&self) -> String {
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

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.rest().is_empty()
    }

    fn expect_end(&mut self) -> Result<()> {
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
    fn word(&mut self) -> Option<&'a str> {
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
    fn qualname(&mut self) -> Result<&'a str> {
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

    fn unsigned(&mut self) -> Option<usize> {
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
    fn number(&mut self) -> Result<Option<Num>> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        let body = rest.strip_prefix('-').unwrap_or(rest);
        let sign = rest.len() - body.len();
        for word in ["inf", "nan"] {
            let boundary = body[word.len().min(body.len())..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            if body.starts_with(word) && boundary {
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
    fn string(&mut self) -> Result<String> {
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
    fn value(&mut self) -> Result<(String, Option<usize>, usize)> {
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
    fn label(&mut self) -> Result<String> {
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

    /// `f32[s0, 8]` with an optional `@cuda:0`.
    fn meta(&mut self) -> Result<TensorMeta> {
        self.skip_ws();
        let start = self.pos;
        let name = self
            .word()
            .ok_or_else(|| self.error(format!("expected a dtype, found {}", self.found())))?;
        let dtype: DType = name
            .parse()
            .map_err(|_| self.error_at(start, format!("unknown dtype `{name}`")))?;
        self.expect("[")?;
        let mut shape = SymShape::new();
        if !self.eat("]") {
            loop {
                shape.push(self.dim()?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let device = if self.rest().starts_with('@') {
            self.pos += 1;
            self.device()?
        } else {
            Device::Cpu
        };
        Ok(TensorMeta {
            shape,
            dtype,
            device,
        })
    }

    /// The text of a size expression starting here: up to the next `,`, `]` or `)` outside
    /// parentheses. `Some` only when it mentions a symbol (`s0 - 1`, `min(s0, 4)`).
    fn sym_span(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let rest = self.rest();
        if rest.starts_with(['[', '"']) {
            return None;
        }
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = i;
                    break;
                }
                ')' => depth -= 1,
                ',' | ']' if depth == 0 => {
                    end = i;
                    break;
                }
                '"' => return None,
                _ => {}
            }
        }
        let span = rest[..end].trim_end();
        crate::symint::looks_symbolic(span).then_some(span)
    }

    /// A size expression at the cursor (see [`Self::sym_span`]).
    fn sym_expr(&mut self) -> Result<Option<SymExpr>> {
        let start = self.pos;
        let Some(span) = self.sym_span() else {
            self.pos = start;
            return Ok(None);
        };
        let at = self.pos;
        let e = SymExpr::parse(span).map_err(|e| self.error_at(at, e))?;
        self.pos = at + span.len();
        Ok(Some(e))
    }

    /// A dimension: a size (`8`), a symbol (`s0`) or an expression over symbols (`s0 - 1`).
    fn dim(&mut self) -> Result<Dim> {
        self.skip_ws();
        let start = self.pos;
        if let Some(e) = self.sym_expr()? {
            return Ok(Dim::from_expr(e));
        }
        if let Some(n) = self.unsigned() {
            return Ok(Dim::Static(n));
        }
        match self.word() {
            Some(w) if w.len() > 1 && w.starts_with('s') => w[1..]
                .parse()
                .map(Dim::Sym)
                .map_err(|_| self.error_at(start, format!("`{w}` is not a size or a symbol"))),
            _ => Err(self.error_at(
                start,
                format!(
                    "expected a size or a symbol like `s0`, found {}",
                    self.found()
                ),
            )),
        }
    }

    /// `cpu`, `meta`, `cuda:N`.
    fn device(&mut self) -> Result<Device> {
        self.skip_ws();
        let start = self.pos;
        let Some(kind) = self.word() else {
            return Err(self.error(format!("expected a device, found {}", self.found())));
        };
        let mut name = kind.to_string();
        if kind == "cuda" && self.rest().starts_with(':') {
            self.pos += 1;
            let n = self
                .unsigned()
                .ok_or_else(|| self.error("expected a device number after `cuda:`"))?;
            name = format!("cuda:{n}");
        }
        name.parse()
            .map_err(|_| self.error_at(start, format!("unknown device `{name}`")))
    }

    /// One output type, or a parenthesized list (`()`, `(f32[2], i64[2])`).
    fn metas(&mut self) -> Result<Vec<TensorMeta>> {
        if !self.eat("(") {
            return Ok(vec![self.meta()?]);
        }
        let mut out = Vec::new();
        if self.eat(")") {
            return Ok(out);
        }
        loop {
            out.push(self.meta()?);
            if self.eat(")") {
                return Ok(out);
            }
            self.expect(",")?;
        }
    }

    /// A non-tensor value: number, flag, string, list, dtype, device or `None`.
    fn attr(&mut self) -> Result<Attr> {
        self.skip_ws();
        let start = self.pos;
        if let Some(e) = self.sym_expr()? {
            return Ok(Attr::sym_int(e));
        }
        if let Some(n) = self.number()? {
            return Ok(match n {
                Num::Int(v) => Attr::Int(v),
                Num::Float(v) => Attr::Float(v),
            });
        }
        match self.peek() {
            Some('"') => return Ok(Attr::Str(self.string()?)),
            Some('[') => return self.attr_list(),
            _ => {}
        }
        let Some(w) = self.word() else {
            return Err(self.error(format!("expected an argument, found {}", self.found())));
        };
        Ok(match w {
            "True" => Attr::Bool(true),
            "False" => Attr::Bool(false),
            "None" => Attr::None,
            "cpu" | "meta" | "cuda" => {
                self.pos = start;
                Attr::Device(self.device()?)
            }
            other => match other.parse::<DType>() {
                Ok(d) => Attr::DType(d),
                Err(_) => return Err(self.error_at(start, format!("unknown value `{other}`"))),
            },
        })
    }

    /// `[1, 2]`, `[0.5, 1.0]`, `[True, False]`; `[]` is an empty int list, `[]:float` and
    /// `[]:bool` the other empty lists.
    fn attr_list(&mut self) -> Result<Attr> {
        self.expect("[")?;
        if self.eat("]") {
            if self.rest().starts_with(":float") {
                self.pos += ":float".len();
                return Ok(Attr::FloatList(vec![]));
            }
            if self.rest().starts_with(":bool") {
                self.pos += ":bool".len();
                return Ok(Attr::BoolList(vec![]));
            }
            return Ok(Attr::IntList(vec![]));
        }
        let mut items = Vec::new();
        loop {
            let at = self.pos;
            let item = self.attr()?;
            if !matches!(
                item,
                Attr::Int(_) | Attr::Float(_) | Attr::Bool(_) | Attr::SymInt(_)
            ) {
                return Err(self.error_at(
                    at,
                    format!("a list holds numbers or flags, not {}", item.type_name()),
                ));
            }
            items.push(item);
            if self.eat("]") {
                break;
            }
            self.expect(",")?;
        }
        let at = self.pos;
        if items.iter().any(|a| matches!(a, Attr::SymInt(_))) {
            return items
                .iter()
                .map(|a| match a {
                    Attr::Int(v) => Ok(SymExpr::lit(*v)),
                    Attr::SymInt(e) => Ok(*e),
                    _ => Err(self.error_at(at, "a list mixes sizes and other values")),
                })
                .collect::<Result<Vec<_>>>()
                .map(Attr::sym_int_list);
        }
        let bools = items.iter().filter(|a| matches!(a, Attr::Bool(_))).count();
        if bools == items.len() {
            return Ok(Attr::BoolList(
                items
                    .iter()
                    .map(|a| matches!(a, Attr::Bool(true)))
                    .collect(),
            ));
        }
        if bools > 0 {
            return Err(self.error_at(at, "a list mixes flags and numbers"));
        }
        if items.iter().any(|a| matches!(a, Attr::Float(_))) {
            return Ok(Attr::FloatList(
                items
                    .iter()
                    .map(|a| match a {
                        Attr::Int(v) => *v as f64,
                        Attr::Float(v) => *v,
                        _ => 0.0,
                    })
                    .collect(),
            ));
        }
        Ok(Attr::IntList(
            items
                .iter()
                .map(|a| match a {
                    Attr::Int(v) => *v,
                    _ => 0,
                })
                .collect(),
        ))
    }

    /// One argument of an op call.
    fn arg(&mut self) -> Result<(ParsedArg, usize)> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        if rest.starts_with('%') {
            let (label, output, at) = self.value()?;
            return Ok((ParsedArg::Tensor(label, output.unwrap_or(usize::MAX)), at));
        }
        if rest.starts_with("Some(") {
            self.pos += "Some(".len();
            let (label, output, at) = self.value()?;
            self.expect(")")?;
            return Ok((
                ParsedArg::OptionalTensor(label, output.unwrap_or(usize::MAX)),
                at,
            ));
        }
        if rest.starts_with("None:Tensor") {
            self.pos += "None:Tensor".len();
            return Ok((ParsedArg::AbsentTensor, start));
        }
        if rest.starts_with("[]:Tensor") {
            self.pos += "[]:Tensor".len();
            return Ok((ParsedArg::TensorList(vec![]), start));
        }
        if rest.starts_with('[') {
            let save = self.pos;
            self.pos += 1;
            if self.peek() == Some('%') {
                let mut items = Vec::new();
                loop {
                    let (label, output, _) = self.value()?;
                    items.push((label, output.unwrap_or(usize::MAX)));
                    if self.eat("]") {
                        break;
                    }
                    self.expect(",")?;
                }
                return Ok((ParsedArg::TensorList(items), start));
            }
            self.pos = save;
        }
        // `name=value` or a positional value.
        if let Some(w) = self.word() {
            if self.rest().starts_with('=') {
                self.pos += 1;
                let value = self.attr()?;
                return Ok((ParsedArg::Attr(Some(w.to_string()), value), start));
            }
            self.pos = start;
        }
        Ok((ParsedArg::Attr(None, self.attr()?), start))
    }
}

/// The trailing `# ...` comment of a node line: `class: X`, `barrier: why`, `after %a, %b`,
/// joined by `; ` in that order.
#[derive(Default)]
struct Comment {
    class: Option<OpClass>,
    barrier: Option<String>,
    after: Vec<(String, usize)>,
}

/// Splits a line into its code and its comment (a `#` outside string literals).
fn split_comment(text: &str) -> (&str, Option<(&str, usize)>) {
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

fn parse_comment(line: &Line<'_>, comment: Option<(&str, usize)>) -> Result<Comment> {
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

/// A defined name: its node and number of outputs.
#[derive(Clone, Copy)]
struct Def {
    node: NodeId,
    outputs: usize,
}

struct Parser<'r> {
    graph: Graph,
    defs: HashMap<String, Def>,
    class_of: &'r dyn Fn(&str) -> Option<OpClass>,
}

impl Parser<'_> {
    fn define(&mut self, line: &Line<'_>, at: usize, label: &str, def: Def) -> Result<()> {
        if self.defs.insert(label.to_string(), def).is_some() {
            return Err(line.error_at(at, format!("`{label}` is defined twice")));
        }
        Ok(())
    }

    fn lookup(&self, line: &Line<'_>, at: usize, label: &str) -> Result<Def> {
        self.defs.get(label).copied().ok_or_else(|| {
            line.error_at(
                at,
                format!("`{label}` is not defined before this line (values are used after their definition)"),
            )
        })
    }

    /// The producer of `%label[.output]` (`usize::MAX`: no output number was written).
    fn source(
        &self,
        line: &Line<'_>,
        at: usize,
        label: &str,
        output: usize,
    ) -> Result<(NodeId, usize)> {
        let def = self.lookup(line, at, label)?;
        let output = match output {
            usize::MAX if def.outputs == 1 => 0,
            usize::MAX => {
                return Err(line.error_at(
                    at,
                    format!(
                        "`{label}` has {} outputs; name one as `{label}.0`",
                        def.outputs
                    ),
                ));
            }
            i if i < def.outputs => i,
            i => {
                return Err(line.error_at(
                    at,
                    format!(
                        "`{label}` has {} output(s), so `.{i}` does not exist",
                        def.outputs
                    ),
                ));
            }
        };
        Ok((def.node, output))
    }

    fn order_edges(
        &mut self,
        line: &Line<'_>,
        node: NodeId,
        after: &[(String, usize)],
    ) -> Result<()> {
        for (label, at) in after {
            let def = self.lookup(line, *at, label)?;
            self.graph.add_edge(def.node, node, Edge::Order)?;
        }
        Ok(())
    }

    fn header(&mut self, line: &mut Line<'_>) -> Result<()> {
        line.expect("graph")?;
        line.expect("(")?;
        if line.eat(")") {
            return line.expect("{").and_then(|_| line.expect_end());
        }
        let mut index = 0;
        loop {
            line.skip_ws();
            let at = line.pos;
            let label = line.label()?;
            if label[1..].starts_with(|c: char| c.is_ascii_digit()) {
                return Err(line.error_at(
                    at,
                    format!("input `{label}`: an input name must not start with a digit (numbers name nodes)"),
                ));
            }
            line.expect(":")?;
            let meta = line.meta()?;
            let node = self.graph.add_node(Node::new(
                NodeKind::Input {
                    index,
                    name: label[1..].to_string(),
                },
                vec![meta],
            ));
            self.define(line, at, &label, Def { node, outputs: 1 })?;
            index += 1;
            if line.eat(")") {
                break;
            }
            line.expect(",")?;
        }
        line.expect("{")?;
        line.expect_end()
    }

    /// `%3 = ...`, `%4.0, %4.1 = ...`: the label and the number of outputs written.
    fn lhs(&mut self, line: &mut Line<'_>) -> Result<(String, Option<usize>, usize)> {
        line.skip_ws();
        let at = line.pos;
        let (label, output, _) = line.value()?;
        if !label[1..].chars().all(|c| c.is_ascii_digit()) {
            return Err(line.error_at(at, format!("a node is numbered like `%3`, found `{label}`")));
        }
        let Some(first) = output else {
            return Ok((label, None, at));
        };
        if first != 0 {
            return Err(line.error_at(at, format!("outputs are listed from `{label}.0`")));
        }
        let mut n = 1;
        while line.eat(",") {
            let pos = line.pos;
            let (l, o, _) = line.value()?;
            if l != label || o != Some(n) {
                return Err(line.error_at(pos, format!("expected `{label}.{n}`")));
            }
            n += 1;
        }
        Ok((label, Some(n), at))
    }

    fn node_line(&mut self, line: &mut Line<'_>, comment: Comment) -> Result<()> {
        let (label, written, at) = self.lhs(line)?;
        line.expect("=")?;
        line.skip_ws();
        let rhs_at = line.pos;
        if line.rest().starts_with("constant(") {
            line.pos += "constant(".len();
            return self.constant_line(line, &label, at, rhs_at, comment);
        }
        let name = line.qualname()?;
        line.expect("(")?;
        let mut args = Vec::new();
        if !line.eat(")") {
            loop {
                args.push(line.arg()?);
                if line.eat(")") {
                    break;
                }
                line.expect(",")?;
            }
        }
        line.expect(":")?;
        let outputs = line.metas()?;
        line.expect_end()?;
        match written {
            None if outputs.len() > 1 => {
                return Err(line.error_at(
                    at,
                    format!(
                        "{} output types but one name; write `{label}.0, ..., {label}.{}`",
                        outputs.len(),
                        outputs.len() - 1
                    ),
                ));
            }
            Some(n) if n != outputs.len() => {
                return Err(line.error_at(
                    at,
                    format!("{n} output names but {} output types", outputs.len()),
                ));
            }
            _ => {}
        }
        let class = match comment.class.or_else(|| (self.class_of)(name)) {
            Some(c) => c,
            None => {
                return Err(line.error_at(
                    rhs_at,
                    format!(
                        "unknown op `{name}`: the resolver knows no class for it; state it in the \
                         line's comment, e.g. `# class: opaque`"
                    ),
                ));
            }
        };
        let mut call_args = Vec::with_capacity(args.len());
        let mut edges = Vec::new();
        for (i, (a, at)) in args.into_iter().enumerate() {
            call_args.push(match a {
                ParsedArg::Tensor(l, o) => {
                    edges.push((self.source(line, at, &l, o)?, i, 0));
                    Arg::Tensor
                }
                ParsedArg::OptionalTensor(l, o) => {
                    edges.push((self.source(line, at, &l, o)?, i, 0));
                    Arg::OptionalTensor { present: true }
                }
                ParsedArg::AbsentTensor => Arg::OptionalTensor { present: false },
                ParsedArg::TensorList(items) => {
                    let len = items.len();
                    for (j, (l, o)) in items.into_iter().enumerate() {
                        edges.push((self.source(line, at, &l, o)?, i, j));
                    }
                    Arg::TensorList { len }
                }
                ParsedArg::Attr(name, value) => Arg::Attr { name, value },
            });
        }
        let mut call = OpCall::new(name, class, call_args);
        call.barrier_reason = comment.barrier;
        let n_out = outputs.len();
        let node = self.graph.add_node(Node::new(NodeKind::Op(call), outputs));
        for ((src, src_output), arg, item) in edges {
            self.graph.add_edge(
                src,
                node,
                Edge::Data {
                    arg,
                    item,
                    src_output,
                },
            )?;
        }
        self.order_edges(line, node, &comment.after)?;
        self.define(
            line,
            at,
            &label,
            Def {
                node,
                outputs: n_out,
            },
        )
    }

    fn constant_line(
        &mut self,
        line: &mut Line<'_>,
        label: &str,
        at: usize,
        lit_at: usize,
        comment: Comment,
    ) -> Result<()> {
        if comment.class.is_some() || comment.barrier.is_some() {
            return Err(line.error_at(at, "a constant has no class or barrier reason"));
        }
        enum Lit {
            Num(Num),
            Bool(bool),
            List(Vec<Num>),
        }
        let lit = if line.eat("[") {
            let mut items = Vec::new();
            if !line.eat("]") {
                loop {
                    let pos = line.pos;
                    match line.number()? {
                        Some(n) => items.push(n),
                        None => return Err(line.error_at(pos, "expected a number")),
                    }
                    if line.eat("]") {
                        break;
                    }
                    line.expect(",")?;
                }
            }
            Lit::List(items)
        } else if line.eat("True") {
            Lit::Bool(true)
        } else if line.eat("False") {
            Lit::Bool(false)
        } else {
            match line.number()? {
                Some(n) => Lit::Num(n),
                None => {
                    return Err(line.error(format!(
                        "expected a number, a flag or a list, found {}",
                        line.found()
                    )));
                }
            }
        };
        line.expect(")")?;
        line.expect(":")?;
        let meta_at = line.pos;
        let meta = line.meta()?;
        line.expect_end()?;
        let dtype = meta.dtype;
        let constant = match lit {
            Lit::Bool(v) => Constant::Bool(v),
            Lit::Num(Num::Float(value)) => Constant::Float { value, dtype },
            Lit::Num(Num::Int(value)) => Constant::Int { value, dtype },
            Lit::List(items) => {
                let shape = meta.static_shape().ok_or_else(|| {
                    line.error_at(meta_at, "a tensor literal needs a static shape")
                })?;
                let shape = shape.to_vec();
                if dtype.is_float() {
                    let data = items
                        .iter()
                        .map(|n| match n {
                            Num::Float(v) => *v,
                            Num::Int(v) => *v as f64,
                        })
                        .collect();
                    Constant::FloatTensor { data, shape, dtype }
                } else {
                    let mut data = Vec::with_capacity(items.len());
                    for n in &items {
                        match n {
                            Num::Int(v) => data.push(*v),
                            Num::Float(_) => {
                                return Err(line.error_at(
                                    lit_at,
                                    format!("a {dtype} tensor literal holds integers"),
                                ));
                            }
                        }
                    }
                    Constant::IntTensor { data, shape, dtype }
                }
            }
        };
        constant.check().map_err(|e| match e {
            Error::Compile { msg: m, .. } => line.error_at(lit_at, m),
            other => line.error_at(lit_at, other),
        })?;
        let want = constant.meta(meta.device);
        if want != meta {
            return Err(line.error_at(
                meta_at,
                format!("the literal {constant} has type {want}, not {meta}"),
            ));
        }
        let node = self
            .graph
            .add_node(Node::new(NodeKind::Constant(constant), vec![meta]));
        self.order_edges(line, node, &comment.after)?;
        self.define(line, at, label, Def { node, outputs: 1 })
    }

    fn return_line(&mut self, line: &mut Line<'_>, comment: Comment) -> Result<()> {
        if comment.class.is_some() || comment.barrier.is_some() {
            return Err(line.error("`return` has no class or barrier reason"));
        }
        if line.eat("<unset>") {
            return Err(line.error(
                "`return <unset>`: a graph without outputs does not validate, so it cannot be parsed",
            ));
        }
        line.expect("(")?;
        let mut results = Vec::new();
        if !line.eat(")") {
            loop {
                let (label, output, at) = line.value()?;
                results.push(self.source(line, at, &label, output.unwrap_or(usize::MAX))?);
                if line.eat(")") {
                    break;
                }
                line.expect(",")?;
            }
        }
        line.expect_end()?;
        let sink = self.graph.add_node(Node::new(
            NodeKind::Output {
                arity: results.len(),
            },
            vec![],
        ));
        for (arg, (src, src_output)) in results.into_iter().enumerate() {
            self.graph.add_edge(
                src,
                sink,
                Edge::Data {
                    arg,
                    item: 0,
                    src_output,
                },
            )?;
        }
        self.order_edges(line, sink, &comment.after)
    }
}

impl Graph {
    /// Reads a graph in the printed text form (`g.to_string()`), validating it.
    ///
    /// `class_of` gives the class of each op by qualified name (the text does not carry it); a
    /// line's `# class: mutating` comment overrides it. Round trip: for a valid graph `g`,
    /// `Graph::parse(&g.to_string(), ..)` prints exactly as `g` does. Empty lists and an absent
    /// optional tensor print with a type tag where `[]`/`None` would be ambiguous: `[]:float`,
    /// `[]:bool`, `[]:Tensor`, `None:Tensor` (`[]` is an empty int list, `None` an absent
    /// non-tensor value); a present optional tensor prints `Some(%3)`. Errors give the line and column.
    ///
    /// ```
    /// use tensorplay_ir::graph::Graph;
    /// use tensorplay_ir::OpClass;
    /// let text = "graph(%x: f32[s0, 4]) {\n  %0 = tp::relu(%x) : f32[s0, 4]\n  return (%0)\n}\n";
    /// let g = Graph::parse(text, |_| Some(OpClass::Elementwise))?;
    /// assert_eq!(g.to_string(), text);
    /// let bad = Graph::parse("graph(%x: f32[4]) {\n  return (%y)\n}\n", |_| None).unwrap_err();
    /// assert!(bad.to_string().contains("line 2, column 11: `%y` is not defined"));
    /// # Ok::<(), tensorplay_ir::Error>(())
    /// ```
    pub fn parse(text: &str, class_of: impl Fn(&str) -> Option<OpClass>) -> Result<Graph> {
        let mut parser = Parser {
            graph: Graph::new(),
            defs: HashMap::new(),
            class_of: &class_of,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| Line::new(l, i + 1))
            .filter(|l| !l.text.trim().is_empty());
        let Some(mut head) = lines.next() else {
            return Err(Error::compile(CompileKind::Graph, "graph text is empty"));
        };
        parser.header(&mut head)?;
        let mut closed = false;
        let mut has_return = false;
        let mut last = head.number;
        for line in lines {
            last = line.number;
            if closed {
                let l = Line::new(line.text, line.number);
                return Err(l.error_at(
                    line.text.len() - line.text.trim_start().len(),
                    "text after the closing `}`",
                ));
            }
            let (code, comment) = split_comment(line.text);
            let mut l = Line::new(code, line.number);
            let full = Line::new(line.text, line.number);
            if l.eat("}") {
                l.expect_end()?;
                if comment.is_some() {
                    return Err(full.error("the closing `}` takes no comment"));
                }
                closed = true;
                continue;
            }
            if has_return {
                return Err(l.error("a node after `return`; `return` is the last line of the body"));
            }
            let comment = parse_comment(&full, comment)?;
            if l.eat("return") {
                parser.return_line(&mut l, comment)?;
                has_return = true;
            } else {
                parser.node_line(&mut l, comment)?;
            }
        }
        if !closed {
            return Err(Error::compile(
                CompileKind::Graph,
                format!("graph text line {last}: the graph is not closed with `}}`"),
            ));
        }
        if !has_return {
            return Err(Error::compile(
                CompileKind::Graph,
                "graph text: the body has no `return (...)` line",
            ));
        }
        parser.graph.validate().map_err(|e| {
            Error::compile(
                CompileKind::Graph,
                format!("the parsed graph is invalid: {e}"),
            )
        })?;
        Ok(parser.graph)
    }
}
