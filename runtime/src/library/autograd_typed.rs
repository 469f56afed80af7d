//! Typed `register_autograd`: `setup` takes the op's arguments as a Rust tuple and returns a typed
//! saved state; `backward` gets that state back by reference. No `&[Value]` pattern matches and no
//! string-keyed saved values — a type mismatch is a registration-time error naming the parameter.

use std::sync::Arc;

use tensorplay_ir::{DType, Device, Error, Result};

use super::autograd::{AutogradCtx, AutogradImpl, IntoGrads};
use super::typed::ArgType;
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::{Scalar, Value};

/// What a typed `setup` saves for backward. The tensors it holds are saved the way
/// [`AutogradCtx::save_for_backward`] saves them: backward fails with a clear error when one was
/// modified in place meanwhile.
///
/// Implemented for tensors, numbers, `Option`/`Vec` of them and tuples up to six; implement it for
/// your own struct by listing its tensors:
///
/// ```
/// use tensorplay_runtime::{Tensor, library::SavedState};
/// struct Saved { x: Tensor, scale: f64 }
/// impl SavedState for Saved {
///     fn tensors(&self) -> Vec<&Tensor> { vec![&self.x] }
/// }
/// ```
pub trait SavedState: Send + Sync + 'static {
    /// The tensors held (checked for in-place modification before backward runs).
    fn tensors(&self) -> Vec<&Tensor>;
}

impl SavedState for Tensor {
    fn tensors(&self) -> Vec<&Tensor> {
        vec![self]
    }
}

impl<T: SavedState> SavedState for Option<T> {
    fn tensors(&self) -> Vec<&Tensor> {
        self.as_ref().map_or_else(Vec::new, T::tensors)
    }
}

impl<T: SavedState> SavedState for Vec<T> {
    fn tensors(&self) -> Vec<&Tensor> {
        self.iter().flat_map(T::tensors).collect()
    }
}

macro_rules! no_tensors {
    ($($t:ty),*) => {$(
        impl SavedState for $t {
            fn tensors(&self) -> Vec<&Tensor> {
                Vec::new()
            }
        }
    )*};
}

no_tensors!((), i64, f64, bool, String, DType, Device, Scalar);

macro_rules! saved_tuple {
    ($($T:ident $i:tt),+) => {
        impl<$($T: SavedState),+> SavedState for ($($T,)+) {
            fn tensors(&self) -> Vec<&Tensor> {
                let mut out = Vec::new();
                $(out.extend(self.$i.tensors());)+
                out
            }
        }
    };
}

saved_tuple!(A 0);
saved_tuple!(A 0, B 1);
saved_tuple!(A 0, B 1, C 2);
saved_tuple!(A 0, B 1, C 2, D 3);
saved_tuple!(A 0, B 1, C 2, D 3, E 4);
saved_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);

/// The op's arguments as a Rust tuple, one element per schema parameter (`(Tensor, Tensor, f64)`).
pub trait FromArgs: Sized + 'static {
    /// Schema types of the elements, checked against the op's schema at registration.
    fn schema_types() -> Vec<&'static str>;
    /// Extracts the tuple from bound arguments (one per parameter).
    fn from_args(op: &str, args: &[Value]) -> Result<Self>;
}

macro_rules! from_args_tuple {
    ($($A:ident $i:tt),*) => {
        impl<$($A: ArgType),*> FromArgs for ($($A,)*) {
            fn schema_types() -> Vec<&'static str> {
                vec![$($A::SCHEMA),*]
            }
            #[allow(unused_variables)]
            fn from_args(op: &str, args: &[Value]) -> Result<Self> {
                let expected = <[usize]>::len(&[$($i),*]);
                if args.len() != expected {
                    return Err(Error::argument(
                        op,
                        "args",
                        format!("{expected} arguments"),
                        args.len().to_string(),
                    ));
                }
                Ok(($($A::from_value(op, $i, &args[$i])?,)*))
            }
        }
    };
}

from_args_tuple!();
from_args_tuple!(A0 0);
from_args_tuple!(A0 0, A1 1);
from_args_tuple!(A0 0, A1 1, A2 2);
from_args_tuple!(A0 0, A1 1, A2 2, A3 3);
from_args_tuple!(A0 0, A1 1, A2 2, A3 3, A4 4);
from_args_tuple!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5);
from_args_tuple!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6);
from_args_tuple!(A0 0, A1 1, A2 2, A3 3, A4 4, A5 5, A6 6, A7 7);

/// What a typed `backward` receives besides the saved state.
pub struct BackwardArgs<'a> {
    grads: &'a [Option<Tensor>],
    needs_input_grad: &'a [bool],
}

impl BackwardArgs<'_> {
    /// The gradient of output `i` (`None`: that output took no part in the loss).
    pub fn grad(&self, i: usize) -> Option<&Tensor> {
        self.grads.get(i).and_then(Option::as_ref)
    }

    /// All output gradients, one per output.
    pub fn grads(&self) -> &[Option<Tensor>] {
        self.grads
    }

    /// Whether parameter `i`'s gradient is needed (it is a tensor that requires grad).
    pub fn needs_input_grad(&self, i: usize) -> bool {
        self.needs_input_grad.get(i).copied().unwrap_or(false)
    }
}

/// Checks `A`'s element types against the op's schema, naming the first mismatching parameter.
pub(crate) fn check_types<A: FromArgs>(
    op: &str,
    schema: &tensorplay_ir::schema::Schema,
) -> Result<()> {
    super::signature::check_params(
        op,
        "register_autograd_typed (setup)",
        &A::schema_types(),
        schema,
    )
}

/// Builds the boxed formula from the typed closures.
pub(crate) fn typed_autograd<A, S, G>(
    op: &str,
    setup: impl Fn(A, &[Tensor]) -> Result<S> + Send + Sync + 'static,
    backward: impl Fn(&S, &BackwardArgs<'_>) -> Result<G> + Send + Sync + 'static,
) -> AutogradImpl
where
    A: FromArgs,
    S: SavedState,
    G: IntoGrads,
{
    let op_setup = op.to_string();
    let op_backward = op.to_string();
    AutogradImpl {
        setup_context: Some(Arc::new(
            move |ctx: &mut AutogradCtx, args: &[Value], outputs: &[Tensor]| {
                let state = setup(A::from_args(&op_setup, args)?, outputs)?;
                ctx.save_for_backward(&state.tensors());
                ctx.set_typed(Arc::new(state));
                Ok(())
            },
        )),
        backward: Arc::new(move |ctx: &AutogradCtx, grads: &[Option<Tensor>]| {
            let state: &S = ctx
                .typed()
                .and_then(|s| s.downcast_ref::<S>())
                .ok_or_else(|| {
                    Error::Autograd(format!(
                        "backward of `{op_backward}` found no typed saved state (setup did not run)"
                    ))
                })?;
            let args = BackwardArgs {
                grads,
                needs_input_grad: ctx.needs_input_grad(),
            };
            backward(state, &args).map(IntoGrads::into_grads)
        }),
    }
}
