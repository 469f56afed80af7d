//! Typed kernels: plain Rust closures such as `|x: Tensor, w: Tensor| -> Result<Tensor>` become
//! boxed kernels, and their parameter and return types give the schema (`infer_schema`).

use std::sync::Arc;

use tensorplay_ir::{DType, Device, Error, Result};

use super::registry::KernelFn;
use crate::tensor::Tensor;
use crate::value::Value;

/// A Rust type usable as a custom-op parameter.
pub trait ArgType: Sized + 'static {
    /// The schema type it maps to (`Tensor`, `SymInt`, `float`, `Tensor?`, ...).
    const SCHEMA: &'static str;
    /// Extracts the argument from a bound value.
    fn from_value(op: &str, index: usize, v: &Value) -> Result<Self>;
}

fn wrong(op: &str, index: usize, expected: &str, v: &Value) -> Error {
    Error::argument(op, format!("#{index}"), expected, v.type_name())
}

macro_rules! arg_type {
    ($t:ty, $schema:literal, |$v:ident| $body:expr) => {
        impl ArgType for $t {
            const SCHEMA: &'static str = $schema;
            fn from_value(op: &str, index: usize, $v: &Value) -> Result<Self> {
                let got: Option<$t> = $body;
                got.ok_or_else(|| wrong(op, index, $schema, $v))
            }
        }
    };
}

arg_type!(Tensor, "Tensor", |v| match v {
    Value::Tensor(t) | Value::OptionalTensor(Some(t)) => Some(t.clone()),
    _ => None,
});
arg_type!(Option<Tensor>, "Tensor?", |v| match v {
    Value::Tensor(t) | Value::OptionalTensor(Some(t)) => Some(Some(t.clone())),
    Value::None | Value::OptionalTensor(None) => Some(None),
    _ => None,
});
arg_type!(Vec<Tensor>, "Tensor[]", |v| match v {
    Value::TensorList(ts) => Some(ts.clone()),
    _ => None,
});
arg_type!(i64, "SymInt", |v| match v {
    Value::Int(i) => Some(*i),
    _ => None,
});
arg_type!(Option<i64>, "SymInt?", |v| match v {
    Value::Int(i) => Some(Some(*i)),
    Value::None => Some(None),
    _ => None,
});
arg_type!(f64, "float", |v| match v {
    Value::Float(f) => Some(*f),
    Value::Int(i) => Some(*i as f64),
    _ => None,
});
arg_type!(Option<f64>, "float?", |v| match v {
    Value::Float(f) => Some(Some(*f)),
    Value::Int(i) => Some(Some(*i as f64)),
    Value::None => Some(None),
    _ => None,
});
arg_type!(bool, "bool", |v| match v {
    Value::Bool(b) => Some(*b),
    _ => None,
});
arg_type!(String, "str", |v| match v {
    Value::Str(s) => Some(s.clone()),
    _ => None,
});
arg_type!(Vec<i64>, "SymInt[]", |v| match v {
    Value::IntList(xs) => Some(xs.clone()),
    _ => None,
});
arg_type!(Vec<f64>, "float[]", |v| match v {
    Value::FloatList(xs) => Some(xs.clone()),
    _ => None,
});
arg_type!(Vec<bool>, "bool[]", |v| match v {
    Value::BoolList(xs) => Some(xs.clone()),
    _ => None,
});
arg_type!(DType, "ScalarType", |v| match v {
    Value::DType(d) => Some(*d),
    _ => None,
});
arg_type!(Device, "Device", |v| match v {
    Value::Device(d) => Some(*d),
    _ => None,
});

/// A Rust type usable as a custom-op result.
pub trait ReturnType: Sized + 'static {
    /// The schema return (`Tensor`, `(Tensor, Tensor)`, `()`, `Tensor[]`).
    const SCHEMA: &'static str;
    /// The tensors it holds, in order.
    fn into_tensors(self) -> Vec<Tensor>;
}

impl ReturnType for Tensor {
    const SCHEMA: &'static str = "Tensor";
    fn into_tensors(self) -> Vec<Tensor> {
        vec![self]
    }
}

impl ReturnType for () {
    const SCHEMA: &'static str = "()";
    fn into_tensors(self) -> Vec<Tensor> {
        vec![]
    }
}

impl ReturnType for Vec<Tensor> {
    const SCHEMA: &'static str = "Tensor[]";
    fn into_tensors(self) -> Vec<Tensor> {
        self
    }
}

impl ReturnType for (Tensor, Tensor) {
    const SCHEMA: &'static str = "(Tensor, Tensor)";
    fn into_tensors(self) -> Vec<Tensor> {
        vec![self.0, self.1]
    }
}

impl ReturnType for (Tensor, Tensor, Tensor) {
    const SCHEMA: &'static str = "(Tensor, Tensor, Tensor)";
    fn into_tensors(self) -> Vec<Tensor> {
        vec![self.0, self.1, self.2]
    }
}

/// Marker for kernels written over boxed values.
pub struct Boxed;

/// Anything that can serve as a kernel: a typed closure (its types known) or a boxed one.
pub trait IntoKernel<Marker>: Send + Sync + 'static {
    /// Schema types of the parameters, when the closure is typed.
    fn param_types() -> Option<Vec<&'static str>>;
    /// Schema return, when the closure is typed.
    fn return_type() -> Option<&'static str>;
    /// The boxed kernel; `op` names the operator in conversion errors.
    fn into_kernel(self, op: &str) -> KernelFn;
}

impl<F> IntoKernel<Boxed> for F
where
    F: Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    fn param_types() -> Option<Vec<&'static str>> {
        None
    }
    fn return_type() -> Option<&'static str> {
        None
    }
    fn into_kernel(self, _op: &str) -> KernelFn {
        Arc::new(self)
    }
}

macro_rules! typed_kernel {
    ($($A:ident $i:tt),*) => {
        impl<F, R, $($A),*> IntoKernel<(R, $($A,)*)> for F
        where
            F: Fn($($A),*) -> Result<R> + Send + Sync + 'static,
            R: ReturnType,
            $($A: ArgType,)*
        {
            fn param_types() -> Option<Vec<&'static str>> {
                Some(vec![$($A::SCHEMA),*])
            }
            fn return_type() -> Option<&'static str> {
                Some(R::SCHEMA)
            }
            #[allow(unused_variables)]
            fn into_kernel(self, op: &str) -> KernelFn {
                let op = op.to_string();
                Arc::new(move |args: &[Value]| -> Result<Vec<Tensor>> {
                    let expected = 0 $(+ { let _ = $i; 1 })*;
                    if args.len() != expected {
                        return Err(Error::argument(&op, "args", format!("{expected} arguments"), args.len().to_string()));
                    }
                    Ok(self($($A::from_value(&op, $i, &args[$i])?),*)?.into_tensors())
                })
            }
        }
    };
}

typed_kernel!();
typed_kernel!(A0 0);
typed_kernel!(A0 0, A1 1);
typed_kernel!(A0 0, A1 1, A2 2);
typed_kernel!(A0 0, A1 1, A2 2, A3 3);
typed_kernel!(A0 0, A1 1, A2 2, A3 3, A4 4);
typed_kernel!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5);
typed_kernel!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6);
typed_kernel!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7);
