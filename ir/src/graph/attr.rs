//! Non-tensor operator arguments ("attributes") carried by IR op nodes.

use std::fmt;
use std::hash::{Hash, Hasher};

use crate::device::Device;
use crate::dtype::DType;
use crate::symint::SymExpr;

/// A non-tensor argument of an op call: an integer, a float, a flag, a string, a list of those, a
/// dtype, a device or `None`.
///
/// `Display` writes the value the way a schema default is written (`1e-05`, `True`, `[1, 2]`,
/// `"mean"`, `None`). Equality and hashing compare floats by bit pattern, so attributes can key a
/// compile cache (`NaN == NaN` with the same bits, `0.0 != -0.0`).
///
/// ```
/// use tensorplay_ir::graph::Attr;
/// assert_eq!(Attr::Float(1e-5).to_string(), "1e-05");
/// assert_eq!(Attr::Bool(true).to_string(), "True");
/// assert_eq!(Attr::IntList(vec![1, 2]).to_string(), "[1, 2]");
/// assert_eq!(Attr::from("mean").to_string(), "\"mean\"");
/// assert_eq!(Attr::Float(f64::NAN), Attr::Float(f64::NAN));
/// assert_ne!(Attr::Float(0.0), Attr::Float(-0.0));
/// ```
#[derive(Debug, Clone)]
pub enum Attr {
    /// An integer (`int`/`SymInt` in a schema).
    Int(i64),
    /// A float (`float`).
    Float(f64),
    /// A flag (`bool`).
    Bool(bool),
    /// A string (`str`).
    Str(String),
    /// A list of integers (`int[]`).
    IntList(Vec<i64>),
    /// A list of floats (`float[]`).
    FloatList(Vec<f64>),
    /// A list of flags (`bool[]`).
    BoolList(Vec<bool>),
    /// An element type (`ScalarType`).
    DType(DType),
    /// A device (`Device`).
    Device(Device),
    /// A size computed from the graph's input dims (`s0 - 1`), never a literal (that is `Int`);
    /// the executor evaluates it for each call's input sizes.
    SymInt(SymExpr),
    /// A list of sizes at least one of which is symbolic (`[s0, 4]`).
    SymIntList(Vec<SymExpr>),
    /// An absent optional non-tensor argument.
    None,
}

impl Attr {
    /// The schema type name of this attribute (`int`, `float`, `bool`, `str`, `int[]`, ...).
    ///
    /// ```
    /// use tensorplay_ir::graph::Attr;
    /// assert_eq!(Attr::IntList(vec![]).type_name(), "int[]");
    /// assert_eq!(Attr::None.type_name(), "None");
    /// ```
    pub fn type_name(&self) -> &'static str {
        match self {
            Attr::Int(_) => "int",
            Attr::Float(_) => "float",
            Attr::Bool(_) => "bool",
            Attr::Str(_) => "str",
            Attr::IntList(_) => "int[]",
            Attr::FloatList(_) => "float[]",
            Attr::BoolList(_) => "bool[]",
            Attr::DType(_) => "ScalarType",
            Attr::Device(_) => "Device",
            Attr::SymInt(_) => "SymInt",
            Attr::SymIntList(_) => "SymInt[]",
            Attr::None => "None",
        }
    }

    /// An integer attribute from an expression: `Int` for a literal, `SymInt` otherwise.
    pub fn sym_int(e: SymExpr) -> Attr {
        match e.as_lit() {
            Some(n) => Attr::Int(n),
            None => Attr::SymInt(e),
        }
    }

    /// An integer-list attribute: `IntList` when every entry is a literal, `SymIntList` otherwise.
    pub fn sym_int_list(v: Vec<SymExpr>) -> Attr {
        match v.iter().map(|e| e.as_lit()).collect::<Option<Vec<i64>>>() {
            Some(ints) => Attr::IntList(ints),
            None => Attr::SymIntList(v),
        }
    }

    /// This attribute with the symbols of its size expressions replaced (see
    /// [`SymExpr::substitute`]); other attributes are returned as they are.
    pub fn substitute(&self, f: &dyn Fn(u32) -> Option<SymExpr>) -> Attr {
        match self {
            Attr::SymInt(e) => Attr::sym_int(e.substitute(f)),
            Attr::SymIntList(v) => Attr::sym_int_list(v.iter().map(|e| e.substitute(f)).collect()),
            other => other.clone(),
        }
    }

    /// This attribute with its size expressions evaluated under `env` (the symbols' values);
    /// other attributes are returned as they are. `None` when an expression cannot be evaluated
    /// (an unbound symbol, a division by zero, an overflow).
    pub fn resolve(&self, env: &dyn Fn(u32) -> Option<i64>) -> Option<Attr> {
        Some(match self {
            Attr::SymInt(e) => Attr::Int(e.eval(env)?),
            Attr::SymIntList(v) => {
                Attr::IntList(v.iter().map(|e| e.eval(env)).collect::<Option<_>>()?)
            }
            other => other.clone(),
        })
    }

    /// A small integer identifying the variant, used by `Hash` so that e.g. `Int(0)` and
    /// `Bool(false)` hash differently.
    fn tag(&self) -> u8 {
        match self {
            Attr::Int(_) => 0,
            Attr::Float(_) => 1,
            Attr::Bool(_) => 2,
            Attr::Str(_) => 3,
            Attr::IntList(_) => 4,
            Attr::FloatList(_) => 5,
            Attr::BoolList(_) => 6,
            Attr::DType(_) => 7,
            Attr::Device(_) => 8,
            Attr::None => 9,
            Attr::SymInt(_) => 10,
            Attr::SymIntList(_) => 11,
        }
    }
}

impl PartialEq for Attr {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Attr::Int(a), Attr::Int(b)) => a == b,
            (Attr::Float(a), Attr::Float(b)) => a.to_bits() == b.to_bits(),
            (Attr::Bool(a), Attr::Bool(b)) => a == b,
            (Attr::Str(a), Attr::Str(b)) => a == b,
            (Attr::IntList(a), Attr::IntList(b)) => a == b,
            (Attr::FloatList(a), Attr::FloatList(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Attr::BoolList(a), Attr::BoolList(b)) => a == b,
            (Attr::DType(a), Attr::DType(b)) => a == b,
            (Attr::Device(a), Attr::Device(b)) => a == b,
            (Attr::SymInt(a), Attr::SymInt(b)) => a == b,
            (Attr::SymIntList(a), Attr::SymIntList(b)) => a == b,
            (Attr::None, Attr::None) => true,
            _ => false,
        }
    }
}

impl Eq for Attr {}

impl Hash for Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.tag().hash(state);
        match self {
            Attr::Int(v) => v.hash(state),
            Attr::Float(v) => v.to_bits().hash(state),
            Attr::Bool(v) => v.hash(state),
            Attr::Str(v) => v.hash(state),
            Attr::IntList(v) => v.hash(state),
            Attr::FloatList(v) => {
                v.len().hash(state);
                for x in v {
                    x.to_bits().hash(state);
                }
            }
            Attr::BoolList(v) => v.hash(state),
            Attr::DType(v) => v.hash(state),
            Attr::Device(v) => v.hash(state),
            Attr::SymInt(v) => v.hash(state),
            Attr::SymIntList(v) => v.hash(state),
            Attr::None => {}
        }
    }
}

/// Writes a float as Python's `repr` does: the shortest digits that round-trip, fixed notation for
/// decimal exponents in `-4..16` (always with a fractional part, `2.0`), scientific otherwise with a
/// signed exponent of at least two digits (`1e-05`, `1e+16`); `inf`, `-inf`, `nan`.
///
/// ```
/// use tensorplay_ir::graph::attr::fmt_float;
/// assert_eq!(fmt_float(2.0), "2.0");
/// assert_eq!(fmt_float(1e-5), "1e-05");
/// assert_eq!(fmt_float(0.0001), "0.0001");
/// assert_eq!(fmt_float(1.5e16), "1.5e+16");
/// assert_eq!(fmt_float(123.25), "123.25");
/// assert_eq!(fmt_float(-0.0), "-0.0");
/// assert_eq!(fmt_float(f64::NEG_INFINITY), "-inf");
/// ```
pub fn fmt_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // `{:e}` without a precision gives the shortest round-trip digits, e.g. `-1.2345e2`.
    let sci = format!("{x:e}");
    let (negative, body) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci.as_str()),
    };
    let (mantissa, exp) = body.split_once('e').unwrap_or((body, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.unsigned_abs()));
    }
    out
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn write_list<T>(
    f: &mut fmt::Formatter<'_>,
    items: &[T],
    each: impl Fn(&T) -> String,
) -> fmt::Result {
    f.write_str("[")?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(&each(item))?;
    }
    f.write_str("]")
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => f.write_str(&fmt_float(*v)),
            Attr::Bool(v) => f.write_str(py_bool(*v)),
            Attr::Str(v) => write!(f, "{v:?}"),
            Attr::IntList(v) => write_list(f, v, |x| x.to_string()),
            Attr::FloatList(v) => write_list(f, v, |x| fmt_float(*x)),
            Attr::BoolList(v) => write_list(f, v, |x| py_bool(*x).to_string()),
            Attr::DType(v) => write!(f, "{v}"),
            Attr::Device(v) => write!(f, "{v}"),
            Attr::SymInt(v) => write!(f, "{v}"),
            Attr::SymIntList(v) => write_list(f, v, |x| x.to_string()),
            Attr::None => f.write_str("None"),
        }
    }
}

impl From<i64> for Attr {
    fn from(v: i64) -> Self {
        Attr::Int(v)
    }
}

impl From<f64> for Attr {
    fn from(v: f64) -> Self {
        Attr::Float(v)
    }
}

impl From<bool> for Attr {
    fn from(v: bool) -> Self {
        Attr::Bool(v)
    }
}

impl From<&str> for Attr {
    fn from(v: &str) -> Self {
        Attr::Str(v.to_string())
    }
}

impl From<String> for Attr {
    fn from(v: String) -> Self {
        Attr::Str(v)
    }
}

impl From<Vec<i64>> for Attr {
    fn from(v: Vec<i64>) -> Self {
        Attr::IntList(v)
    }
}

impl From<Vec<f64>> for Attr {
    fn from(v: Vec<f64>) -> Self {
        Attr::FloatList(v)
    }
}

impl From<Vec<bool>> for Attr {
    fn from(v: Vec<bool>) -> Self {
        Attr::BoolList(v)
    }
}

impl From<DType> for Attr {
    fn from(v: DType) -> Self {
        Attr::DType(v)
    }
}

impl From<Device> for Attr {
    fn from(v: Device) -> Self {
        Attr::Device(v)
    }
}

impl<T: Into<Attr>> From<Option<T>> for Attr {
    fn from(v: Option<T>) -> Self {
        v.map_or(Attr::None, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of(a: &Attr) -> u64 {
        let mut h = DefaultHasher::new();
        a.hash(&mut h);
        h.finish()
    }

    #[test]
    fn floats_print_like_python_repr() {
        let cases = [
            (1e-5, "1e-05"),
            (2.0, "2.0"),
            (0.1, "0.1"),
            (0.5, "0.5"),
            (100.0, "100.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.25e100, "1.25e+100"),
            (1e-4, "0.0001"),
            (1.5e-7, "1.5e-07"),
            (-3.75, "-3.75"),
            (0.0, "0.0"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (123456.789, "123456.789"),
            (3.0e-310, "3e-310"),
        ];
        for (x, want) in cases {
            assert_eq!(fmt_float(x), want, "{x:e}");
        }
    }

    #[test]
    fn attrs_print_in_schema_default_style() {
        assert_eq!(Attr::Int(-3).to_string(), "-3");
        assert_eq!(Attr::Bool(false).to_string(), "False");
        assert_eq!(Attr::FloatList(vec![1.0, 0.5]).to_string(), "[1.0, 0.5]");
        assert_eq!(
            Attr::BoolList(vec![true, false]).to_string(),
            "[True, False]"
        );
        assert_eq!(Attr::IntList(vec![]).to_string(), "[]");
        assert_eq!(Attr::Str("a\"b".into()).to_string(), "\"a\\\"b\"");
        assert_eq!(Attr::DType(DType::BF16).to_string(), "bf16");
        assert_eq!(Attr::Device(Device::Cuda(1)).to_string(), "cuda:1");
        assert_eq!(Attr::None.to_string(), "None");
        assert_eq!(Attr::from(None::<i64>), Attr::None);
    }

    #[test]
    fn eq_and_hash_use_bit_patterns() {
        assert_eq!(Attr::Float(f64::NAN), Attr::Float(f64::NAN));
        assert_eq!(
            hash_of(&Attr::Float(f64::NAN)),
            hash_of(&Attr::Float(f64::NAN))
        );
        assert_ne!(Attr::Float(0.0), Attr::Float(-0.0));
        assert_ne!(Attr::Int(0), Attr::Bool(false));
        assert_ne!(hash_of(&Attr::Int(0)), hash_of(&Attr::Bool(false)));
        assert_eq!(
            hash_of(&Attr::FloatList(vec![1.0, f64::NAN])),
            hash_of(&Attr::FloatList(vec![1.0, f64::NAN]))
        );
        assert_ne!(Attr::FloatList(vec![1.0]), Attr::FloatList(vec![1.0, 2.0]));
    }
}
