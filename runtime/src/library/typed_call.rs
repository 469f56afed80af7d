//! Calls through a typed handle: [`CustomOp::call`](super::CustomOp::call) takes exactly the
//! kernel's parameters, checked by the compiler.
//!
//! A kernel `|x: &Tensor, w: f64| ..` has the parameter list `(Tensor, f64)` (its
//! [`IntoKernel::Params`](super::IntoKernel::Params)); the handle's `call` accepts a tuple whose
//! elements each pass as their parameter ([`PassAs`]): `(&x, 2.0)` or `(x, 2.0)`. A call with
//! one parameter may leave the tuple out (`relu.call(&x)`). A wrong type or a wrong count does not
//! compile. Boxed kernels (over `&[Value]`) have [`Untyped`] parameters: their handle's `call`
//! takes any [`CallArgs`] and the schema checks them when the call runs.
//!
//! | parameter (schema)                  | passes as                                         |
//! |-------------------------------------|---------------------------------------------------|
//! | `Tensor`                            | `Tensor`, `&Tensor`                               |
//! | `Tensor?`                           | `Option<&Tensor>`, `&Tensor`, `Tensor`            |
//! | `Tensor[]`                          | `Vec<Tensor>`, `&[Tensor]`, `&Vec<Tensor>`        |
//! | `Tensor?[]`                         | `Vec<Option<Tensor>>`, `&[Option<Tensor>]`        |
//! | `SymInt`, `float`, `bool`           | `i64`; `f64` or `i64`; `bool`                     |
//! | `str`                               | `&str`, `String`                                  |
//! | `SymInt[]`, `float[]`, `bool[]`     | `Vec<T>`, `&[T]`, `&[T; N]`                       |
//! | `ScalarType`, `Device`, `Scalar`    | `DType`, `Device`; `Scalar`, `i64`, `f64`, `bool` |
//! | optional non-tensor `T?`            | `Option<T>`, `T`                                  |

use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::{Scalar, Value};
use tensorplay_ir::{DType, Device};

use super::call_args::CallArgs;

/// The parameters of a boxed kernel: the handle's `call` takes any [`CallArgs`], checked
/// against the schema when the call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untyped {}

/// A value that passes as the parameter `P` of a typed handle (see the [module](self) table).
///
/// ```
/// use tensorplay_runtime::library::typed_call::PassAs;
/// use tensorplay_runtime::{Tensor, DType, Value};
/// let x = Tensor::ones(&[2], DType::F32);
/// assert!(matches!(PassAs::<Tensor>::into_value(&x), Value::Tensor(_)));
/// assert!(matches!(PassAs::<Option<f64>>::into_value(None), Value::None));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be passed where the op's kernel takes `{P}`",
    label = "this argument does not match the kernel's parameter type `{P}`",
    note = "a typed handle's `call` takes exactly the kernel's parameters; use `call_values` for boxed values"
)]
pub trait PassAs<P> {
    /// The boxed argument.
    fn into_value(self) -> Value;
}

macro_rules! pass_as {
    ($($P:ty => $B:ty $(, [$($g:tt)*])?, |$v:ident| $e:expr;)*) => {$(
        impl$(<$($g)*>)? PassAs<$P> for $B {
            fn into_value(self) -> Value {
                let $v = self;
                $e
            }
        }
    )*};
}

pass_as! {
    Tensor => Tensor, |v| Value::Tensor(v);
    Tensor => &Tensor, |v| Value::Tensor(v.clone());
    Option<Tensor> => Option<&Tensor>, |v| Value::OptionalTensor(v.cloned());
    Option<Tensor> => &Tensor, |v| Value::OptionalTensor(Some(v.clone()));
    Option<Tensor> => Tensor, |v| Value::OptionalTensor(Some(v));
    Vec<Tensor> => Vec<Tensor>, |v| Value::TensorList(v);
    Vec<Tensor> => &[Tensor], |v| Value::TensorList(v.to_vec());
    Vec<Tensor> => &Vec<Tensor>, |v| Value::TensorList(v.clone());
    Vec<Option<Tensor>> => Vec<Option<Tensor>>, |v| Value::OptionalTensorList(v);
    Vec<Option<Tensor>> => &[Option<Tensor>], |v| Value::OptionalTensorList(v.to_vec());
    i64 => i64, |v| Value::Int(v);
    f64 => f64, |v| Value::Float(v);
    f64 => i64, |v| Value::Int(v);
    bool => bool, |v| Value::Bool(v);
    String => &str, |v| Value::Str(v.to_string());
    String => String, |v| Value::Str(v);
    DType => DType, |v| Value::DType(v);
    Device => Device, |v| Value::Device(v);
    Scalar => Scalar, |v| Value::from(v);
    Scalar => i64, |v| Value::Int(v);
    Scalar => f64, |v| Value::Float(v);
    Scalar => bool, |v| Value::Bool(v);
}

/// Lists pass as owned vectors, slices and array references.
macro_rules! pass_list {
    ($($T:ty => $variant:ident),*) => {$(
        pass_as! {
            Vec<$T> => Vec<$T>, |v| Value::$variant(v);
            Vec<$T> => &[$T], |v| Value::$variant(v.to_vec());
            Vec<$T> => &Vec<$T>, |v| Value::$variant(v.clone());
            Vec<$T> => &[$T; N], [const N: usize], |v| Value::$variant(v.to_vec());
        }
    )*};
}

pass_list!(i64 => IntList, f64 => FloatList, bool => BoolList);

/// Optional non-tensor parameters pass as `Option<T>` (`None` for absent) or a bare `T`.
macro_rules! pass_optional {
    ($($T:ty),*) => {$(
        impl PassAs<Option<$T>> for Option<$T> {
            fn into_value(self) -> Value {
                self.map_or(Value::None, |v| PassAs::<$T>::into_value(v))
            }
        }
        impl PassAs<Option<$T>> for $T {
            fn into_value(self) -> Value {
                PassAs::<$T>::into_value(self)
            }
        }
    )*};
}

pass_optional!(
    i64,
    f64,
    bool,
    String,
    Vec<i64>,
    Vec<f64>,
    Vec<bool>,
    Vec<Tensor>,
    DType,
    Device,
    Scalar
);

/// The arguments of a call through a typed handle whose kernel takes the parameters `P` (a
/// tuple of parameter types, or [`Untyped`]).
///
/// ```
/// use tensorplay_runtime::library::typed_call::TypedArgs;
/// use tensorplay_runtime::{Tensor, DType};
/// let x = Tensor::ones(&[2], DType::F32);
/// let args = TypedArgs::<(Tensor, f64)>::into_values((&x, 0.5));
/// assert_eq!(args.len(), 2);
/// ```
#[diagnostic::on_unimplemented(
    message = "these arguments do not match the op's kernel parameters `{P}`",
    label = "expected a tuple of `{P}` (one element per kernel parameter)",
    note = "a typed handle's `call` takes exactly the kernel's parameters, as a tuple: `op.call((&x, 2.0))`; use `call_values` for boxed values"
)]
pub trait TypedArgs<P> {
    /// The boxed arguments, in order.
    fn into_values(self) -> Vec<Value>;
}

impl<T: CallArgs> TypedArgs<Untyped> for T {
    fn into_values(self) -> Vec<Value> {
        CallArgs::into_values(self)
    }
}

impl TypedArgs<()> for () {
    fn into_values(self) -> Vec<Value> {
        vec![]
    }
}

macro_rules! typed_args {
    ($($P:ident $B:ident $i:tt),*) => {
        impl<$($P, $B: PassAs<$P>),*> TypedArgs<($($P,)*)> for ($($B,)*) {
            fn into_values(self) -> Vec<Value> {
                vec![$(self.$i.into_value()),*]
            }
        }
    };
}

typed_args!(P0 B0 0);
typed_args!(P0 B0 0, P1 B1 1);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4, P5 B5 5);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4, P5 B5 5, P6 B6 6);
typed_args!(P0 B0 0, P1 B1 1, P2 B2 2, P3 B3 3, P4 B4 4, P5 B5 5, P6 B6 6, P7 B7 7);

/// A one-parameter op may be called with the bare argument (`relu.call(&x)`): one impl per
/// argument type, as a blanket one would overlap the tuple impls.
macro_rules! bare_arg {
    ($($P:ty => $B:ty $(, [$($g:tt)*])?;)*) => {$(
        impl$(<$($g)*>)? TypedArgs<($P,)> for $B {
            fn into_values(self) -> Vec<Value> {
                vec![PassAs::<$P>::into_value(self)]
            }
        }
    )*};
}

bare_arg! {
    Tensor => Tensor;
    Tensor => &Tensor;
    Option<Tensor> => Option<&Tensor>;
    Option<Tensor> => &Tensor;
    Option<Tensor> => Tensor;
    Vec<Tensor> => Vec<Tensor>;
    Vec<Tensor> => &[Tensor];
    Vec<Tensor> => &Vec<Tensor>;
    Vec<Option<Tensor>> => Vec<Option<Tensor>>;
    i64 => i64;
    f64 => f64;
    f64 => i64;
    bool => bool;
    String => &str;
    String => String;
    Vec<i64> => Vec<i64>;
    Vec<i64> => &[i64];
    Vec<f64> => Vec<f64>;
    Vec<f64> => &[f64];
    DType => DType;
    Device => Device;
}
