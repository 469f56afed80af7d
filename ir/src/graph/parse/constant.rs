//! The body of a `constant(...)` line: the literal (a number, a flag or a tensor list), its stated
//! type, and the check that the two agree.

use super::line::{Line, Num};
use crate::error::{Error, Result};
use crate::graph::node::Constant;
use crate::meta::TensorMeta;

/// The literal of a `constant(...)` line, before its type is read.
enum Lit {
    Num(Num),
    Bool(bool),
    List(Vec<Num>),
}

impl Line<'_> {
    /// Everything after `constant(`: the literal, `) : type` and the end of the line. `lit_at` is
    /// where the literal starts, for messages about it.
    pub(super) fn constant(&mut self, lit_at: usize) -> Result<(Constant, TensorMeta)> {
        let lit = self.constant_literal()?;
        self.expect(")")?;
        self.expect(":")?;
        let meta_at = self.pos;
        let meta = self.meta()?;
        self.expect_end()?;
        let constant = self.constant_value(lit, &meta, meta_at, lit_at)?;
        constant.check().map_err(|e| match e {
            Error::Compile { msg: m, .. } => self.error_at(lit_at, m),
            other => self.error_at(lit_at, other),
        })?;
        let want = constant.meta(meta.device);
        if want != meta {
            return Err(self.error_at(
                meta_at,
                format!("the literal {constant} has type {want}, not {meta}"),
            ));
        }
        Ok((constant, meta))
    }

    /// `[1, 2.5]`, `True`, `False` or a number.
    fn constant_literal(&mut self) -> Result<Lit> {
        Ok(if self.eat("[") {
            let mut items = Vec::new();
            if !self.eat("]") {
                loop {
                    let pos = self.pos;
                    match self.number()? {
                        Some(n) => items.push(n),
                        None => return Err(self.error_at(pos, "expected a number")),
                    }
                    if self.eat("]") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            Lit::List(items)
        } else if self.eat("True") {
            Lit::Bool(true)
        } else if self.eat("False") {
            Lit::Bool(false)
        } else {
            match self.number()? {
                Some(n) => Lit::Num(n),
                None => {
                    return Err(self.error(format!(
                        "expected a number, a flag or a list, found {}",
                        self.found()
                    )));
                }
            }
        })
    }

    /// The constant `lit` denotes at the stated type `meta` (read at `meta_at`).
    fn constant_value(
        &self,
        lit: Lit,
        meta: &TensorMeta,
        meta_at: usize,
        lit_at: usize,
    ) -> Result<Constant> {
        let dtype = meta.dtype;
        Ok(match lit {
            Lit::Bool(v) => Constant::Bool(v),
            Lit::Num(Num::Float(value)) => Constant::Float { value, dtype },
            Lit::Num(Num::Int(value)) => Constant::Int { value, dtype },
            Lit::List(items) => {
                let shape = meta.static_shape().ok_or_else(|| {
                    self.error_at(meta_at, "a tensor literal needs a static shape")
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
                                return Err(self.error_at(
                                    lit_at,
                                    format!("a {dtype} tensor literal holds integers"),
                                ));
                            }
                        }
                    }
                    Constant::IntTensor { data, shape, dtype }
                }
            }
        })
    }
}
