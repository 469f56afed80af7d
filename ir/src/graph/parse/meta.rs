//! Tensor types on a line: `f32[s0, 8]@cuda:0` — the dtype, the dims (sizes, symbols and
//! expressions over symbols) and the device.

use super::line::Line;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::TensorMeta;
use crate::shape::{Dim, SymShape};
use crate::symint::SymExpr;

impl<'a> Line<'a> {
    /// `f32[s0, 8]` with an optional `@cuda:0`.
    pub(super) fn meta(&mut self) -> Result<TensorMeta> {
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
    pub(super) fn sym_span(&mut self) -> Option<&'a str> {
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
    pub(super) fn sym_expr(&mut self) -> Result<Option<SymExpr>> {
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
    pub(super) fn dim(&mut self) -> Result<Dim> {
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
    pub(super) fn device(&mut self) -> Result<Device> {
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
    pub(super) fn metas(&mut self) -> Result<Vec<TensorMeta>> {
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
}
