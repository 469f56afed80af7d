//! The arguments of an op call: tensor references (`%3`, `Some(%3)`, `[%a, %b]`) and
//! non-tensor attributes (numbers, flags, strings, lists, dtypes, devices, `name=value`).

use super::line::{Line, Num};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::Attr;
use crate::symint::SymExpr;

/// One parsed op argument before its tensor slots are wired.
pub(super) enum ParsedArg {
    Tensor(String, usize),
    OptionalTensor(String, usize),
    AbsentTensor,
    TensorList(Vec<(String, usize)>),
    Attr(Option<String>, Attr),
}

impl Line<'_> {
    /// The arguments of an op call after its `(`, through the closing `)`, each with the column
    /// it starts at.
    pub(super) fn args(&mut self) -> Result<Vec<(ParsedArg, usize)>> {
        let mut args = Vec::new();
        if !self.eat(")") {
            loop {
                args.push(self.arg()?);
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        Ok(args)
    }

    /// A non-tensor value: number, flag, string, list, dtype, device or `None`.
    pub(super) fn attr(&mut self) -> Result<Attr> {
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
    pub(super) fn attr_list(&mut self) -> Result<Attr> {
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
    pub(super) fn arg(&mut self) -> Result<(ParsedArg, usize)> {
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
