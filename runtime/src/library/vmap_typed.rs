//! `register_vmap_typed`: a batching rule over typed arguments — the op's parameters as a tuple
//! (as `register_autograd_typed`'s setup takes them), their batch dims as a tuple of
//! `Option<usize>`, and the outputs with their batch dims as the result — instead of `&[Value]`
//! and `let Value::Tensor(x) = &args[0] else …`.
//!
//! ```
//! use tensorplay_runtime::library::{self, VmapInfo};
//! use tensorplay_runtime::vmap::vmap;
//! use tensorplay_runtime::{Result, Tensor};
//! let scale = library::custom_op("docs_vmap_typed::scale")
//!     .arg_names(&["x", "w"])
//!     .build(|x: &Tensor, w: f64| -> Result<Tensor> { x.mul_scalar(w) })?;
//! // `x` arrives batched at `xd` (the physical tensor), `w` is a number (its dim is `None`).
//! scale.register_vmap_typed(|_info: &VmapInfo, (x, w): (Tensor, f64), (xd, _): (Option<usize>, Option<usize>)| {
//!     Ok((x.mul_scalar(w)?, xd))
//! })?;
//! let f = vmap(|xs: &[Tensor]| Ok(vec![scale.call((&xs[0], 3.0))?]), vec![Some(0)], vec![0]);
//! let y = f(&[Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1])?])?;
//! assert_eq!(y[0].to_vec::<f32>()?, vec![3.0, 6.0]);
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

use std::sync::Arc;

use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;
use tensorplay_ir::{Error, Result};

use super::autograd_typed::FromArgs;
use super::vmap_rule::{VmapInfo, VmapRule};

/// The batch dims of a typed rule's arguments: a tuple with one `Option<usize>` per parameter of
/// the op (`None` for unbatched tensors and non-tensor arguments).
pub trait FromDims: Sized + 'static {
    /// The tuple from the dims the vmap layer passes (one per parameter).
    fn from_dims(op: &str, dims: &[Option<usize>]) -> Result<Self>;
}

macro_rules! from_dims_tuple {
    ($($i:tt $D:ident),*) => {
        impl FromDims for ($($D,)*) {
            fn from_dims(op: &str, dims: &[Option<usize>]) -> Result<Self> {
                let expected = <[usize]>::len(&[$($i),*]);
                if dims.len() != expected {
                    return Err(Error::argument(
                        op,
                        "in_dims",
                        format!("a tuple of {expected} batch dims (one per parameter)"),
                        format!("{} dims", dims.len()),
                    ));
                }
                Ok(($(dims[$i],)*))
            }
        }
    };
}

/// `Option<usize>` under another name, so the tuple macro can repeat it.
type D = Option<usize>;
from_dims_tuple!(0 D);
from_dims_tuple!(0 D, 1 D);
from_dims_tuple!(0 D, 1 D, 2 D);
from_dims_tuple!(0 D, 1 D, 2 D, 3 D);
from_dims_tuple!(0 D, 1 D, 2 D, 3 D, 4 D);
from_dims_tuple!(0 D, 1 D, 2 D, 3 D, 4 D, 5 D);
from_dims_tuple!(0 D, 1 D, 2 D, 3 D, 4 D, 5 D, 6 D);
from_dims_tuple!(0 D, 1 D, 2 D, 3 D, 4 D, 5 D, 6 D, 7 D);

/// What a typed rule returns: the outputs (physical tensors) and their batch dims —
/// `(Tensor, Option<usize>)` for one output, `((Tensor, Tensor), (Option<usize>, Option<usize>))`
/// for two (up to four), or `(Vec<Tensor>, Vec<Option<usize>>)`.
pub trait IntoBatched {
    /// The outputs and their dims, as the vmap layer takes them.
    fn into_batched(self) -> (Vec<Tensor>, Vec<Option<usize>>);
}

impl IntoBatched for (Tensor, Option<usize>) {
    fn into_batched(self) -> (Vec<Tensor>, Vec<Option<usize>>) {
        (vec![self.0], vec![self.1])
    }
}

impl IntoBatched for (Vec<Tensor>, Vec<Option<usize>>) {
    fn into_batched(self) -> (Vec<Tensor>, Vec<Option<usize>>) {
        self
    }
}

macro_rules! batched_tuple {
    ($($T:ident $D:ident $i:tt),*) => {
        impl IntoBatched for (($($T,)*), ($($D,)*)) {
            fn into_batched(self) -> (Vec<Tensor>, Vec<Option<usize>>) {
                (vec![$((self.0).$i),*], vec![$((self.1).$i),*])
            }
        }
    };
}

type T = Tensor;
batched_tuple!(T D 0, T D 1);
batched_tuple!(T D 0, T D 1, T D 2);
batched_tuple!(T D 0, T D 1, T D 2, T D 3);

/// Wraps a typed rule into the boxed form the vmap layer calls: arguments and dims are converted
/// (a mismatch is an error naming the op), the result is unpacked.
pub(crate) fn typed_rule<A, Dims, R>(
    op: &str,
    rule: impl Fn(&VmapInfo, A, Dims) -> Result<R> + Send + Sync + 'static,
) -> VmapRule
where
    A: FromArgs,
    Dims: FromDims,
    R: IntoBatched,
{
    let op = format!("{op} (vmap rule)");
    Arc::new(
        move |info: &VmapInfo, dims: &[Option<usize>], args: &[Value]| {
            let a = A::from_args(&op, args)?;
            let d = Dims::from_dims(&op, dims)?;
            Ok(rule(info, a, d)?.into_batched())
        },
    )
}
