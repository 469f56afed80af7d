//! Arguments of an operator call, however the caller has them: a tuple of Rust values
//! (`(&x, &w, 2.0)`), or boxed [`Value`]s. They are bound to the schema (types checked there).

use tensorplay_core::value::Value;

/// Positional arguments of a call.
///
/// ```
/// use tensorplay_runtime::library::CallArgs;
/// use tensorplay_runtime::{Tensor, DType, Value};
/// let x = Tensor::ones(&[2], DType::F32);
/// assert_eq!((&x, 2.0, true).into_values().len(), 3);
/// assert_eq!((&[Value::from(1i64)][..]).into_values().len(), 1);
/// ```
pub trait CallArgs {
    /// The boxed arguments, in order.
    fn into_values(self) -> Vec<Value>;
}

impl CallArgs for &[Value] {
    fn into_values(self) -> Vec<Value> {
        self.to_vec()
    }
}

impl<const N: usize> CallArgs for &[Value; N] {
    fn into_values(self) -> Vec<Value> {
        self.to_vec()
    }
}

impl<const N: usize> CallArgs for [Value; N] {
    fn into_values(self) -> Vec<Value> {
        self.into()
    }
}

impl CallArgs for &Vec<Value> {
    fn into_values(self) -> Vec<Value> {
        self.clone()
    }
}

impl CallArgs for Vec<Value> {
    fn into_values(self) -> Vec<Value> {
        self
    }
}

impl CallArgs for () {
    fn into_values(self) -> Vec<Value> {
        vec![]
    }
}

macro_rules! tuple_args {
    ($($T:ident $i:tt),*) => {
        impl<$($T: Into<Value>),*> CallArgs for ($($T,)*) {
            fn into_values(self) -> Vec<Value> {
                vec![$(self.$i.into()),*]
            }
        }
    };
}

tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// Keyword arguments: `&[("eps", 1e-3.into())]`.
pub type Kwargs<'a> = &'a [(&'a str, Value)];

pub(crate) fn kwargs_owned(kwargs: &[(&str, Value)]) -> Vec<(String, Value)> {
    kwargs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}
