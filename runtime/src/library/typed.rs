//! Typed kernels: plain Rust closures such as `|x: Tensor, w: Tensor| -> Result<Tensor>` become
//! boxed kernels, and their parameter and return types give the schema (`infer_schema`).

use std::sync::Arc;

use tensorplay_ir::{DType, Device, Error, Result};

use super::registry::KernelFn;
use super::typed_call::Untyped;
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::{Scalar, Value};

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
arg_type!(Vec<Option<Tensor>>, "Tensor?[]", |v| match v {
    Value::OptionalTensorList(ts) => Some(ts.clone()),
    Value::TensorList(ts) => Some(ts.iter().cloned().map(Some).collect()),
    _ => None,
});
arg_type!(i64, "SymInt", |v| match v {
    Value::Int(i) => Some(*i),
    _ => None,
});
arg_type!(f64, "float", |v| match v {
    Value::Float(f) => Some(*f),
    Value::Int(i) => Some(*i as f64),
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
    Value::IntList(xs) => Some(xs.iter().map(|&x| x as f64).collect()),
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
arg_type!(Scalar, "Scalar", |v| match v {
    Value::Int(i) => Some(Scalar::Int(*i)),
    Value::Float(f) => Some(Scalar::Float(*f)),
    Value::Bool(b) => Some(Scalar::Bool(*b)),
    _ => None,
});

/// `Option<T>` of a non-tensor schema type: `T?`, `None` when absent.
macro_rules! optional_arg {
    ($($t:ty => $schema:literal),* $(,)?) => {$(
        impl ArgType for Option<$t> {
            const SCHEMA: &'static str = $schema;
            fn from_value(op: &str, index: usize, v: &Value) -> Result<Self> {
                match v {
                    Value::None | Value::OptionalTensor(None) => Ok(None),
                    v => <$t as ArgType>::from_value(op, index, v).map(Some),
                }
            }
        }
    )*};
}

optional_arg!(
    i64 => "SymInt?",
    f64 => "float?",
    bool => "bool?",
    String => "str?",
    Vec<i64> => "SymInt[]?",
    Vec<f64> => "float[]?",
    Vec<bool> => "bool[]?",
    Vec<Tensor> => "Tensor[]?",
    DType => "ScalarType?",
    Device => "Device?",
    Scalar => "Scalar?",
);

/// A typed kernel parameter: every [`ArgType`] by value, and borrowed tensors (`&Tensor`,
/// `Option<&Tensor>`, `&[Tensor]`) lent from the call's arguments.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a custom-op parameter type",
    label = "no schema type for `{Self}`",
    note = "kernel parameters are Tensor/&Tensor, Option<&Tensor>, Vec<Tensor>/&[Tensor], i64, f64, bool, String, Scalar, DType, Device, their Option<T> and the lists Vec<i64>, Vec<f64>, Vec<bool>"
)]
pub trait KernelArg {
    /// The schema type.
    const SCHEMA: &'static str;
    /// The owned parameter type a typed handle's `call` is checked against (`Tensor` for
    /// `&Tensor`, `Vec<Tensor>` for `&[Tensor]`; see [`PassAs`](super::typed_call::PassAs)).
    type Param: 'static;
    /// What the kernel receives, borrowing from the bound arguments for `'a`.
    type Item<'a>;
    /// Extracts the argument.
    fn extract<'a>(op: &str, index: usize, v: &'a Value) -> Result<Self::Item<'a>>;
}

impl<T: ArgType> KernelArg for T {
    const SCHEMA: &'static str = T::SCHEMA;
    type Param = T;
    type Item<'a> = T;
    fn extract(op: &str, index: usize, v: &Value) -> Result<T> {
        T::from_value(op, index, v)
    }
}

impl KernelArg for &Tensor {
    const SCHEMA: &'static str = "Tensor";
    type Param = Tensor;
    type Item<'a> = &'a Tensor;
    fn extract<'a>(op: &str, index: usize, v: &'a Value) -> Result<&'a Tensor> {
        match v {
            Value::Tensor(t) | Value::OptionalTensor(Some(t)) => Ok(t),
            v => Err(wrong(op, index, "Tensor", v)),
        }
    }
}

impl KernelArg for Option<&Tensor> {
    const SCHEMA: &'static str = "Tensor?";
    type Param = Option<Tensor>;
    type Item<'a> = Option<&'a Tensor>;
    fn extract<'a>(op: &str, index: usize, v: &'a Value) -> Result<Option<&'a Tensor>> {
        match v {
            Value::Tensor(t) | Value::OptionalTensor(Some(t)) => Ok(Some(t)),
            Value::None | Value::OptionalTensor(None) => Ok(None),
            v => Err(wrong(op, index, "Tensor?", v)),
        }
    }
}

impl KernelArg for &[Tensor] {
    const SCHEMA: &'static str = "Tensor[]";
    type Param = Vec<Tensor>;
    type Item<'a> = &'a [Tensor];
    fn extract<'a>(op: &str, index: usize, v: &'a Value) -> Result<&'a [Tensor]> {
        match v {
            Value::TensorList(ts) => Ok(ts),
            v => Err(wrong(op, index, "Tensor[]", v)),
        }
    }
}

/// A Rust type usable as a custom-op result.
pub trait ReturnType: Sized + 'static {
    /// The schema return (`Tensor`, `(Tensor, SymInt)`, `()`, `Tensor[]`).
    fn schema() -> String;
    /// The tensors it holds, in order (numbers become 0-d tensors).
    fn into_tensors(self) -> Vec<Tensor>;
    /// Rebuilds the value from a call's outputs (how typed handles return it).
    fn from_tensors(op: &str, outs: Vec<Tensor>) -> Result<Self>;
}

/// One element of a tuple return.
pub trait ReturnElem: Sized + 'static {
    /// The schema type.
    const SCHEMA: &'static str;
    /// How many outputs it takes (`None`: a list, taking what the others leave).
    const FIXED: Option<usize>;
    fn push(self, out: &mut Vec<Tensor>);
    fn take(op: &str, outs: &mut std::vec::IntoIter<Tensor>, n: usize) -> Result<Self>;
}

fn next_out(op: &str, outs: &mut std::vec::IntoIter<Tensor>) -> Result<Tensor> {
    outs.next()
        .ok_or_else(|| Error::argument(op, "returns", "one more output", "none"))
}

impl ReturnElem for Tensor {
    const SCHEMA: &'static str = "Tensor";
    const FIXED: Option<usize> = Some(1);
    fn push(self, out: &mut Vec<Tensor>) {
        out.push(self)
    }
    fn take(op: &str, outs: &mut std::vec::IntoIter<Tensor>, _n: usize) -> Result<Self> {
        next_out(op, outs)
    }
}

impl ReturnElem for Vec<Tensor> {
    const SCHEMA: &'static str = "Tensor[]";
    const FIXED: Option<usize> = None;
    fn push(self, out: &mut Vec<Tensor>) {
        out.extend(self)
    }
    fn take(op: &str, outs: &mut std::vec::IntoIter<Tensor>, n: usize) -> Result<Self> {
        (0..n).map(|_| next_out(op, outs)).collect()
    }
}

macro_rules! number_return {
    ($($t:ty => $schema:literal, $dtype:expr, |$x:ident| $to:expr, |$tt:ident| $from:expr;)*) => {$(
        impl ReturnElem for $t {
            const SCHEMA: &'static str = $schema;
            const FIXED: Option<usize> = Some(1);
            fn push(self, out: &mut Vec<Tensor>) {
                let $x = self;
                out.push(Tensor::full(&[], $to, $dtype));
            }
            fn take(op: &str, outs: &mut std::vec::IntoIter<Tensor>, _n: usize) -> Result<Self> {
                let $tt = next_out(op, outs)?;
                $from
            }
        }
    )*};
}

number_return! {
    i64 => "SymInt", DType::I64, |x| x as f64, |t| t.item::<i64>();
    f64 => "float", DType::F64, |x| x, |t| t.item::<f64>();
    bool => "bool", DType::Bool, |x| if x { 1.0 } else { 0.0 }, |t| t.item::<bool>();
}

impl ReturnType for Tensor {
    fn schema() -> String {
        "Tensor".to_string()
    }
    fn into_tensors(self) -> Vec<Tensor> {
        vec![self]
    }
    fn from_tensors(op: &str, outs: Vec<Tensor>) -> Result<Self> {
        one_of(op, outs)
    }
}

fn one_of(op: &str, mut outs: Vec<Tensor>) -> Result<Tensor> {
    if outs.len() != 1 {
        return Err(Error::argument(
            op,
            "returns",
            "one tensor",
            format!("{} tensors", outs.len()),
        ));
    }
    Ok(outs.swap_remove(0))
}

impl ReturnType for () {
    fn schema() -> String {
        "()".to_string()
    }
    fn into_tensors(self) -> Vec<Tensor> {
        vec![]
    }
    fn from_tensors(_op: &str, _outs: Vec<Tensor>) -> Result<Self> {
        Ok(())
    }
}

impl ReturnType for Vec<Tensor> {
    fn schema() -> String {
        "Tensor[]".to_string()
    }
    fn into_tensors(self) -> Vec<Tensor> {
        self
    }
    fn from_tensors(_op: &str, outs: Vec<Tensor>) -> Result<Self> {
        Ok(outs)
    }
}

macro_rules! scalar_return {
    ($($t:ty),*) => {$(
        impl ReturnType for $t {
            fn schema() -> String {
                <$t as ReturnElem>::SCHEMA.to_string()
            }
            fn into_tensors(self) -> Vec<Tensor> {
                let mut v = Vec::with_capacity(1);
                self.push(&mut v);
                v
            }
            fn from_tensors(op: &str, outs: Vec<Tensor>) -> Result<Self> {
                let t = one_of(op, outs)?;
                <$t as ReturnElem>::take(op, &mut vec![t].into_iter(), 1)
            }
        }
    )*};
}

scalar_return!(i64, f64, bool);

/// Tuple returns of tensors, numbers and (at most one) tensor list.
macro_rules! tuple_return {
    ($($E:ident $i:tt),*) => {
        impl<$($E: ReturnElem),*> ReturnType for ($($E,)*) {
            fn schema() -> String {
                format!("({})", [$($E::SCHEMA),*].join(", "))
            }
            fn into_tensors(self) -> Vec<Tensor> {
                let mut v = Vec::new();
                $(self.$i.push(&mut v);)*
                v
            }
            fn from_tensors(op: &str, outs: Vec<Tensor>) -> Result<Self> {
                let fixed: usize = 0 $(+ $E::FIXED.unwrap_or(0))*;
                let lists = 0 $(+ usize::from($E::FIXED.is_none()))*;
                if lists > 1 || outs.len() < fixed || (lists == 0 && outs.len() != fixed) {
                    return Err(Error::argument(op, "returns", format!("{fixed} outputs"), outs.len().to_string()));
                }
                let rest = outs.len() - fixed;
                let mut it = outs.into_iter();
                Ok(($($E::take(op, &mut it, $E::FIXED.unwrap_or(rest))?,)*))
            }
        }
    };
}

tuple_return!(A 0, B 1);
tuple_return!(A 0, B 1, C 2);
tuple_return!(A 0, B 1, C 2, D 3);
tuple_return!(A 0, B 1, C 2, D 3, E 4);
tuple_return!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Marker for kernels written over boxed values.
pub struct Boxed;

/// Anything that can serve as a kernel: a typed closure (its types known) or a boxed one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot serve as a custom-op kernel",
    label = "not a kernel",
    note = "a kernel is `Fn(params..) -> Result<R>` (Send + Sync + 'static) with up to 8 parameters of custom-op parameter types (see `KernelArg`), or a boxed `Fn(&[Value]) -> Result<Vec<Tensor>>`"
)]
pub trait IntoKernel<Marker>: Send + Sync + 'static {
    /// What a call returns through a typed handle: the closure's result type, or the output
    /// tensors for a boxed kernel.
    type Output: ReturnType;
    /// The parameters a typed handle's `call` takes: a tuple of the parameters' owned types
    /// ([`KernelArg::Param`]) for a typed kernel, [`Untyped`] for a boxed one.
    type Params: 'static;
    /// Schema types of the parameters, when the closure is typed.
    fn param_types() -> Option<Vec<&'static str>>;
    /// Schema return, when the closure is typed.
    fn return_type() -> Option<String>;
    /// The boxed kernel; `op` names the operator in conversion errors.
    fn into_kernel(self, op: &str) -> KernelFn;
}

impl<F> IntoKernel<Boxed> for F
where
    F: Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    type Output = Vec<Tensor>;
    type Params = Untyped;
    fn param_types() -> Option<Vec<&'static str>> {
        None
    }
    fn return_type() -> Option<String> {
        None
    }
    fn into_kernel(self, _op: &str) -> KernelFn {
        Arc::new(self)
    }
}

/// Calls a kernel on bound arguments, lending them at any borrow (`&Tensor` parameters borrow
/// from the call's values). A separate trait from [`IntoKernel`] so that the compiler settles the
/// parameter types from the plain `Fn` bound first and checks this higher-ranked one afterwards —
/// which is what lets a generic `F: Fn(&Tensor) -> Result<Tensor>` or an opaque `impl Fn(..)`
/// serve as a kernel, not only closures and fn items. Implemented for every such `Fn`; not
/// something to implement by hand.
pub trait CallBound<Args, R> {
    /// Extracts the arguments from `args` (already checked for count) and calls the kernel.
    fn call_bound(&self, op: &str, args: &[Value]) -> Result<R>;
}

macro_rules! typed_kernel {
    ($($A:ident $a:ident $i:tt),*) => {
        impl<F, R, $($A: KernelArg),*> CallBound<($($A,)*), R> for F
        where
            F: for<'a> Fn($($A::Item<'a>),*) -> Result<R>,
        {
            #[allow(unused_variables)]
            fn call_bound(&self, op: &str, args: &[Value]) -> Result<R> {
                self($($A::extract(op, $i, &args[$i])?),*)
            }
        }

        // `Fn($($A),*)` lets the compiler read the parameter types off the kernel (`&Tensor`
        // included, from a closure, fn item, `impl Fn` or a generic's bound); `CallBound` says it
        // accepts them for any borrow of the bound arguments.
        impl<F, R, $($A),*> IntoKernel<(R, $($A,)*)> for F
        where
            F: Fn($($A),*) -> Result<R> + CallBound<($($A,)*), R> + Send + Sync + 'static,
            R: ReturnType,
            $($A: KernelArg,)*
        {
            type Output = R;
            type Params = ($($A::Param,)*);
            fn param_types() -> Option<Vec<&'static str>> {
                Some(vec![$($A::SCHEMA),*])
            }
            fn return_type() -> Option<String> {
                Some(R::schema())
            }
            fn into_kernel(self, op: &str) -> KernelFn {
                let op = op.to_string();
                Arc::new(move |args: &[Value]| -> Result<Vec<Tensor>> {
                    let expected = 0 $(+ { let _ = $i; 1 })*;
                    if args.len() != expected {
                        return Err(Error::argument(&op, "args", format!("{expected} arguments"), args.len().to_string()));
                    }
                    Ok(self.call_bound(&op, args)?.into_tensors())
                })
            }
        }
    };
}

typed_kernel!();
typed_kernel!(A0 a0 0);
typed_kernel!(A0 a0 0, A1 a1 1);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2, A3 a3 3);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2, A3 a3 3, A4 a4 4);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2, A3 a3 3, A4 a4 4, A5 a5 5);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2, A3 a3 3, A4 a4 4, A5 a5 5, A6 a6 6);
typed_kernel!(A0 a0 0, A1 a1 1, A2 a2 2, A3 a3 3, A4 a4 4, A5 a5 5, A6 a6 6, A7 a7 7);
