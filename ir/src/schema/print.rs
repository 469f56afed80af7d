//! The text form: `Display` for schemas and their parts, reproducing canonical input exactly.

use std::fmt;

use super::{AliasInfo, BaseType, Default, DefaultValue, Param, Return, Schema, SchemaType};

/// Python's float `repr`: shortest round-trip digits, exponent form outside `1e-4 <= |x| < 1e16`.
fn fmt_float(x: f64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if x.is_nan() {
        return f.write_str("nan");
    }
    if x.is_infinite() {
        return f.write_str(if x > 0.0 { "inf" } else { "-inf" });
    }
    let sci = format!("{x:e}");
    if let Some((mantissa, exp)) = sci.split_once('e')
        && let Ok(exp) = exp.parse::<i32>()
        && !(-4..16).contains(&exp)
    {
        let sign = if exp < 0 { '-' } else { '+' };
        return write!(f, "{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    let fixed = x.to_string();
    if fixed.contains('.') {
        f.write_str(&fixed)
    } else {
        write!(f, "{fixed}.0")
    }
}

/// Writes `items` separated by `, `.
fn write_joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.qualified_name())?;
        let mut star_written = false;
        for (i, param) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if param.kwarg_only && !star_written {
                f.write_str("*, ")?;
                star_written = true;
            }
            write!(f, "{param}")?;
        }
        f.write_str(") -> ")?;
        match (self.returns_tuple, self.returns.as_slice()) {
            (false, [single]) => write!(f, "{single}"),
            (_, returns) => {
                f.write_str("(")?;
                write_joined(f, returns)?;
                f.write_str(")")
            }
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.ty.write_with_alias(f, self.alias.as_ref())?;
        write!(f, " {}", self.name)?;
        match &self.default {
            Some(default) => write!(f, "={default}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for Return {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.ty.write_with_alias(f, self.alias.as_ref())?;
        match &self.name {
            Some(name) => write!(f, " {name}"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_with_alias(f, None)
    }
}

impl fmt::Display for BaseType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for AliasInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}", self.set)?;
        if self.is_write {
            f.write_str("!")?;
        }
        if let Some(after) = &self.after {
            write!(f, " -> {after}")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for Default {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Display for DefaultValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DefaultValue::Int(i) => write!(f, "{i}"),
            DefaultValue::Float(x) => fmt_float(*x, f),
            DefaultValue::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            DefaultValue::None => f.write_str("None"),
            DefaultValue::Str(s) => {
                f.write_str("\"")?;
                for c in s.chars() {
                    match c {
                        '"' => f.write_str("\\\"")?,
                        '\\' => f.write_str("\\\\")?,
                        '\n' => f.write_str("\\n")?,
                        '\t' => f.write_str("\\t")?,
                        c => write!(f, "{c}")?,
                    }
                }
                f.write_str("\"")
            }
            DefaultValue::IntList(v) => {
                f.write_str("[")?;
                write_joined(f, v)?;
                f.write_str("]")
            }
            DefaultValue::FloatList(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    fmt_float(*x, f)?;
                }
                f.write_str("]")
            }
            DefaultValue::BoolList(v) => {
                let words: Vec<_> = v
                    .iter()
                    .map(|&b| if b { "True" } else { "False" })
                    .collect();
                write!(f, "[{}]", words.join(", "))
            }
            DefaultValue::Ident(name) => f.write_str(name),
        }
    }
}

impl SchemaType {
    /// Writes the type with `alias` right after the base name, as schemas spell it: `Tensor(a!)[]`.
    fn write_with_alias(
        &self,
        f: &mut fmt::Formatter<'_>,
        alias: Option<&AliasInfo>,
    ) -> fmt::Result {
        match self {
            SchemaType::Base(base) => {
                write!(f, "{base}")?;
                alias.map_or(Ok(()), |a| write!(f, "{a}"))
            }
            SchemaType::Optional(inner) => {
                inner.write_with_alias(f, alias)?;
                f.write_str("?")
            }
            SchemaType::List(inner, len) => {
                inner.write_with_alias(f, alias)?;
                match len {
                    Some(n) => write!(f, "[{n}]"),
                    None => f.write_str("[]"),
                }
            }
        }
    }
}
