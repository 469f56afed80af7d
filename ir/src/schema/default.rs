//! Default values: building one from a value, comparing by its text, reading a bare literal
//! token, and the int-to-float reading of `float` parameters.

use super::name::{is_ident_continue, is_ident_start};
use super::{BaseType, Default, DefaultValue};

impl Default {
    /// A default with the canonical text of `value`, for schemas built in code (`infer_schema`).
    ///
    /// ```
    /// use tensorplay_ir::schema::{Default, DefaultValue};
    /// assert_eq!(Default::new(DefaultValue::Bool(true)).text, "True");
    /// assert_eq!(Default::new(DefaultValue::Float(0.5)).text, "0.5");
    /// ```
    pub fn new(value: DefaultValue) -> Self {
        Default {
            text: value.to_string(),
            value,
        }
    }
}

impl DefaultValue {
    /// Integer literals given to a `float` parameter are floats (`float eps=1`).
    pub(super) fn for_base(self, base: &BaseType) -> Self {
        match (self, base) {
            (DefaultValue::Int(i), BaseType::Float) => DefaultValue::Float(i as f64),
            (DefaultValue::IntList(v), BaseType::Float) => {
                DefaultValue::FloatList(v.into_iter().map(|i| i as f64).collect())
            }
            (DefaultValue::IntList(v), BaseType::Bool) if v.is_empty() => {
                DefaultValue::BoolList(Vec::new())
            }
            (value, _) => value,
        }
    }
}

impl PartialEq for Default {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Default {}

impl std::hash::Hash for Default {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

/// Classifies a bare default token: `True`/`False`/`None`, an int, a float, or an identifier.
pub(super) fn scalar_literal(token: &str) -> std::result::Result<DefaultValue, String> {
    match token {
        "True" => return Ok(DefaultValue::Bool(true)),
        "False" => return Ok(DefaultValue::Bool(false)),
        "None" => return Ok(DefaultValue::None),
        "inf" => return Ok(DefaultValue::Float(f64::INFINITY)),
        "nan" => return Ok(DefaultValue::Float(f64::NAN)),
        _ => {}
    }
    let invalid = || format!("invalid default value `{token}`");
    if token.bytes().next().is_some_and(is_ident_start) {
        return if token.bytes().all(|b| is_ident_continue(b) || b == b'.') {
            Ok(DefaultValue::Ident(token.to_string()))
        } else {
            Err(invalid())
        };
    }
    if let Ok(i) = token.parse::<i64>() {
        return Ok(DefaultValue::Int(i));
    }
    let digits = token.strip_prefix(['-', '+']).unwrap_or(token);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("integer default `{token}` is out of range"));
    }
    token
        .parse::<f64>()
        .map(DefaultValue::Float)
        .map_err(|_| invalid())
}
