//! Boxed operator arguments: how every call reaches the dispatcher, builtin or custom.

use std::fmt;

use tensorplay_ir::graph::Attr;
use tensorplay_ir::{DType, Device, Error, Result};

use crate::symint::{SymInt, SymIntList};
use crate::tensor::Tensor;

/// One argument (or result) of an operator call.
#[derive(Clone)]
pub enum Value {
    /// `Tensor`.
    Tensor(Tensor),
    /// `Tensor?`.
    OptionalTensor(Option<Tensor>),
    /// `Tensor[]`.
    TensorList(Vec<Tensor>),
    /// `Tensor?[]`: a list whose entries may be absent.
    OptionalTensorList(Vec<Option<Tensor>>),
    /// `int` / `SymInt`.
    Int(i64),
    /// `float`.
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// `str`.
    Str(String),
    /// `int[]` / `SymInt[]`.
    IntList(Vec<i64>),
    /// `float[]`.
    FloatList(Vec<f64>),
    /// `bool[]`.
    BoolList(Vec<bool>),
    /// `ScalarType`.
    DType(DType),
    /// `Device`.
    Device(Device),
    /// A symbolic `SymInt` (only during capture; a literal size is an `Int`). Read as a plain
    /// integer through [`Args::int`], which guards it.
    SymInt(SymInt),
    /// A `SymInt[]` with a symbolic entry (only during capture).
    SymIntList(SymIntList),
    /// An absent optional argument.
    None,
}

impl Value {
    /// The schema-style name of this value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "Tensor",
            Value::OptionalTensor(_) => "Tensor?",
            Value::TensorList(_) => "Tensor[]",
            Value::OptionalTensorList(_) => "Tensor?[]",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Bool(_) => "bool",
            Value::Str(_) => "str",
            Value::IntList(_) => "int[]",
            Value::FloatList(_) => "float[]",
            Value::BoolList(_) => "bool[]",
            Value::DType(_) => "ScalarType",
            Value::Device(_) => "Device",
            Value::SymInt(_) => "SymInt",
            Value::SymIntList(_) => "SymInt[]",
            Value::None => "None",
        }
    }

    /// Every tensor inside this value, in order (a list yields its items; absent optionals nothing).
    pub fn tensors(&self) -> impl Iterator<Item = &Tensor> {
        let (one, many, maybe): (Option<&Tensor>, &[Tensor], &[Option<Tensor>]) = match self {
            Value::Tensor(t) | Value::OptionalTensor(Some(t)) => (Some(t), &[], &[]),
            Value::TensorList(ts) => (None, ts.as_slice(), &[]),
            Value::OptionalTensorList(ts) => (None, &[], ts.as_slice()),
            _ => (None, &[], &[]),
        };
        one.into_iter()
            .chain(many.iter())
            .chain(maybe.iter().flatten())
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Tensor(t) => write!(f, "{t:?}"),
            Value::OptionalTensor(t) => write!(f, "{t:?}"),
            Value::TensorList(ts) => write!(f, "{ts:?}"),
            Value::OptionalTensorList(ts) => write!(f, "{ts:?}"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Str(v) => write!(f, "{v:?}"),
            Value::IntList(v) => write!(f, "{v:?}"),
            Value::FloatList(v) => write!(f, "{v:?}"),
            Value::BoolList(v) => write!(f, "{v:?}"),
            Value::DType(v) => write!(f, "{v}"),
            Value::Device(v) => write!(f, "{v}"),
            Value::SymInt(v) => write!(f, "{v:?}"),
            Value::SymIntList(v) => write!(f, "{v:?}"),
            Value::None => f.write_str("None"),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Self {
        Value::Tensor(t)
    }
}
impl From<&Tensor> for Value {
    fn from(t: &Tensor) -> Self {
        Value::Tensor(t.clone())
    }
}
impl From<Option<Tensor>> for Value {
    fn from(t: Option<Tensor>) -> Self {
        Value::OptionalTensor(t)
    }
}
impl From<Vec<Tensor>> for Value {
    fn from(t: Vec<Tensor>) -> Self {
        Value::TensorList(t)
    }
}
impl From<Vec<Option<Tensor>>> for Value {
    fn from(t: Vec<Option<Tensor>>) -> Self {
        Value::OptionalTensorList(t)
    }
}
impl From<Option<&Tensor>> for Value {
    fn from(t: Option<&Tensor>) -> Self {
        Value::OptionalTensor(t.cloned())
    }
}

impl From<&[Tensor]> for Value {
    fn from(t: &[Tensor]) -> Self {
        Value::TensorList(t.to_vec())
    }
}
impl From<SymInt> for Value {
    fn from(v: SymInt) -> Self {
        match v {
            SymInt::Lit(n) => Value::Int(n),
            s => Value::SymInt(s),
        }
    }
}

impl Value {
    /// A `SymInt[]` argument: an `IntList` unless an entry is symbolic.
    pub fn sym_int_list(v: Vec<SymInt>) -> Value {
        match v
            .iter()
            .map(|s| s.as_literal())
            .collect::<Option<Vec<i64>>>()
        {
            Some(ints) => Value::IntList(ints),
            None => Value::SymIntList(SymIntList::new(v)),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<Vec<i64>> for Value {
    fn from(v: Vec<i64>) -> Self {
        Value::IntList(v)
    }
}
impl From<DType> for Value {
    fn from(v: DType) -> Self {
        Value::DType(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<Vec<f64>> for Value {
    fn from(v: Vec<f64>) -> Self {
        Value::FloatList(v)
    }
}
impl From<Vec<bool>> for Value {
    fn from(v: Vec<bool>) -> Self {
        Value::BoolList(v)
    }
}
impl From<Device> for Value {
    fn from(v: Device) -> Self {
        Value::Device(v)
    }
}

impl From<Scalar> for Value {
    fn from(s: Scalar) -> Self {
        match s {
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
        }
    }
}

/// A Rust number used as an operand (`&t * 2.0`, `t.add_scalar(1)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A Rust `bool`.
    Bool(bool),
    /// A Rust integer.
    Int(i64),
    /// A Rust float.
    Float(f64),
}

impl Scalar {
    /// The value as f64.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }
}

macro_rules! scalar_from {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for Scalar {
            fn from(x: $t) -> Self {
                Scalar::$v(x as $c)
            }
        }
    )*};
}
scalar_from!(f64 => Float as f64, f32 => Float as f64, i64 => Int as i64, i32 => Int as i64, usize => Int as i64, bool => Bool as bool);

/// A call's arguments with the operator name attached, so accessors can report which argument of
/// which op had the wrong type.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    /// The operator's name, for error messages.
    pub op: &'a str,
    /// The boxed arguments in schema order.
    pub values: &'a [Value],
}

impl<'a> Args<'a> {
    /// Wraps `values` for `op`.
    pub fn new(op: &'a str, values: &'a [Value]) -> Self {
        Args { op, values }
    }

    fn get(&self, i: usize) -> Result<&'a Value> {
        self.values.get(i).ok_or_else(|| {
            Error::argument(
                self.op,
                format!("#{i}"),
                format!("at least {} arguments", i + 1),
                format!("{}", self.values.len()),
            )
        })
    }

    fn wrong(&self, i: usize, expected: &str) -> Error {
        let got = self
            .values
            .get(i)
            .map(|v| v.type_name())
            .unwrap_or("nothing");
        Error::argument(self.op, format!("#{i}"), expected, got)
    }

    /// Argument `i` as a tensor.
    pub fn tensor(&self, i: usize) -> Result<&'a Tensor> {
        match self.get(i)? {
            Value::Tensor(t) => Ok(t),
            _ => Err(self.wrong(i, "Tensor")),
        }
    }

    /// Argument `i` as an optional tensor (`None` and an absent value both give `None`).
    pub fn opt_tensor(&self, i: usize) -> Result<Option<&'a Tensor>> {
        match self.values.get(i) {
            None | Some(Value::None) | Some(Value::OptionalTensor(None)) => Ok(None),
            Some(Value::Tensor(t)) | Some(Value::OptionalTensor(Some(t))) => Ok(Some(t)),
            _ => Err(self.wrong(i, "Tensor?")),
        }
    }

    /// Argument `i` as a tensor list.
    pub fn tensors(&self, i: usize) -> Result<&'a [Tensor]> {
        match self.get(i)? {
            Value::TensorList(t) => Ok(t),
            _ => Err(self.wrong(i, "Tensor[]")),
        }
    }

    /// Argument `i` as an integer.
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.get(i)? {
            Value::Int(v) => Ok(*v),
            Value::SymInt(v) => Ok(v.to_i64()),
            _ => Err(self.wrong(i, "int")),
        }
    }

    /// Argument `i` as a float (ints are accepted and widened).
    pub fn float(&self, i: usize) -> Result<f64> {
        match self.get(i)? {
            Value::Float(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            Value::SymInt(v) => Ok(v.to_i64() as f64),
            _ => Err(self.wrong(i, "float")),
        }
    }

    /// Argument `i` as an optional float.
    pub fn opt_float(&self, i: usize) -> Result<Option<f64>> {
        match self.values.get(i) {
            None | Some(Value::None) => Ok(None),
            _ => self.float(i).map(Some),
        }
    }

    /// Argument `i` as a Rust scalar (int, float or bool).
    pub fn scalar(&self, i: usize) -> Result<Scalar> {
        match self.get(i)? {
            Value::Int(v) => Ok(Scalar::Int(*v)),
            Value::SymInt(v) => Ok(Scalar::Int(v.to_i64())),
            Value::Float(v) => Ok(Scalar::Float(*v)),
            Value::Bool(v) => Ok(Scalar::Bool(*v)),
            _ => Err(self.wrong(i, "Scalar")),
        }
    }

    /// Argument `i` as a bool.
    pub fn bool(&self, i: usize) -> Result<bool> {
        match self.get(i)? {
            Value::Bool(v) => Ok(*v),
            _ => Err(self.wrong(i, "bool")),
        }
    }

    /// Argument `i` as an int list.
    pub fn ints(&self, i: usize) -> Result<&'a [i64]> {
        match self.get(i)? {
            Value::IntList(v) => Ok(v),
            Value::SymIntList(v) => Ok(v.to_ints()),
            _ => Err(self.wrong(i, "int[]")),
        }
    }

    /// Argument `i` as an optional int list (`None` or absent gives `None`).
    pub fn opt_ints(&self, i: usize) -> Result<Option<&'a [i64]>> {
        match self.values.get(i) {
            None | Some(Value::None) => Ok(None),
            _ => self.ints(i).map(Some),
        }
    }

    /// Argument `i` as a dtype.
    pub fn dtype(&self, i: usize) -> Result<DType> {
        match self.get(i)? {
            Value::DType(v) => Ok(*v),
            _ => Err(self.wrong(i, "ScalarType")),
        }
    }

    /// Argument `i` as a string.
    pub fn str(&self, i: usize) -> Result<&'a str> {
        match self.get(i)? {
            Value::Str(v) => Ok(v),
            _ => Err(self.wrong(i, "str")),
        }
    }
}

/// The IR's attribute values and a call's runtime arguments are two types because they hold
/// different things: an `Attr` is pure data that graphs store, print, parse and hash (sizes as
/// `SymExpr`s over the input dims), a `Value` carries tensors and sizes with their example
/// values (`SymInt`). Their non-tensor cases correspond one to one; these are the conversions
/// between them (capture records a call's arguments as attributes, the executor replays them).
impl Value {
    /// The attribute a non-tensor argument is recorded as (`None` for tensor arguments; an
    /// absent optional tensor is `Attr::None`).
    ///
    /// ```
    /// use tensorplay_core::{Tensor, DType, Value};
    /// use tensorplay_ir::graph::Attr;
    /// assert!(matches!(Value::Int(3).to_attr(), Some(Attr::Int(3))));
    /// assert!(Value::Tensor(Tensor::ones(&[1], DType::F32)).to_attr().is_none());
    /// ```
    pub fn to_attr(&self) -> Option<Attr> {
        Some(match self {
            Value::Int(i) => Attr::Int(*i),
            Value::Float(f) => Attr::Float(*f),
            Value::Bool(b) => Attr::Bool(*b),
            Value::Str(s) => Attr::Str(s.clone()),
            Value::IntList(v) => Attr::IntList(v.clone()),
            Value::FloatList(v) => Attr::FloatList(v.clone()),
            Value::BoolList(v) => Attr::BoolList(v.clone()),
            Value::DType(d) => Attr::DType(*d),
            Value::Device(d) => Attr::Device(*d),
            Value::SymInt(s) => Attr::sym_int(s.expr()),
            Value::SymIntList(l) => {
                Attr::sym_int_list(l.items().iter().map(|s| s.expr()).collect())
            }
            Value::None | Value::OptionalTensor(None) => Attr::None,
            Value::Tensor(_)
            | Value::OptionalTensor(Some(_))
            | Value::TensorList(_)
            | Value::OptionalTensorList(_) => return None,
        })
    }

    /// The argument a recorded attribute stands for. Symbolic sizes have no value without the
    /// input dims they are expressions over: they become `Value::None` here (the executor
    /// evaluates them itself).
    ///
    /// ```
    /// use tensorplay_core::Value;
    /// use tensorplay_ir::graph::Attr;
    /// assert!(matches!(Value::from_attr(&Attr::Float(0.5)), Value::Float(v) if v == 0.5));
    /// ```
    pub fn from_attr(a: &Attr) -> Value {
        match a {
            Attr::Int(i) => Value::Int(*i),
            Attr::Float(f) => Value::Float(*f),
            Attr::Bool(b) => Value::Bool(*b),
            Attr::Str(s) => Value::Str(s.clone()),
            Attr::IntList(v) => Value::IntList(v.clone()),
            Attr::FloatList(v) => Value::FloatList(v.clone()),
            Attr::BoolList(v) => Value::BoolList(v.clone()),
            Attr::DType(d) => Value::DType(*d),
            Attr::Device(d) => Value::Device(*d),
            Attr::None | Attr::SymInt(_) | Attr::SymIntList(_) => Value::None,
        }
    }
}
