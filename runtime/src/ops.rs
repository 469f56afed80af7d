//! The op table (`tensorplay-core`'s `ops`, re-exported) and calling any registered operator by
//! its qualified name — the top of the stack: names resolve through the library's registry, then
//! every call goes through the dispatcher.

pub use tensorplay_core::ops::*;

/// How the compiler sees a builtin op (`tensorplay_core::ops::lowering`), with the lookups of a
/// graph call's declaration (`tensorplay_core::ops::table`) under their old paths.
pub mod lowering {
    pub use tensorplay_core::ops::lowering::*;
    pub use tensorplay_core::ops::table::{
        builtin, builtin_by_id, fails_on_values, pointwise, reduce_op, softmax,
    };
}

use tensorplay_core::tensor::Tensor;
use tensorplay_ir::Result;

/// Calls any registered operator by qualified name (`"tp::add"`, `"mylib::weighted_sum"`), with
/// positional arguments bound to its schema.
///
/// ```
/// use tensorplay_runtime::{ops, Tensor, DType};
/// let x = Tensor::ones(&[2], DType::F32);
/// let y = ops::call("tp::add", &[x.clone().into(), x.into()])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 2.0]);
/// assert!(ops::call("tp::nope", &[]).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn call(qualname: &str, args: &[tensorplay_core::value::Value]) -> Result<Vec<Tensor>> {
    call_kw(qualname, args, &[])
}

/// [`call`] with keyword arguments (`&[("max", 0.5.into())]`), bound to the schema like
/// positional ones — the same form `CustomOpDef::call_kw` takes.
///
/// ```
/// use tensorplay_runtime::{ops, Tensor, DType};
/// let x = Tensor::ones(&[2], DType::F32);
/// let y = ops::call_kw("tp::clamp", &[x.clone().into()], &[("max", 0.5.into())])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![0.5, 0.5]);
/// let err = ops::call_kw("tp::clamp", &[x.into()], &[("nope", 1.0.into())]).unwrap_err().to_string();
/// assert!(err.contains("nope"), "{err}");
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn call_kw(
    qualname: &str,
    args: &[tensorplay_core::value::Value],
    kwargs: &[(&str, tensorplay_core::value::Value)],
) -> Result<Vec<Tensor>> {
    let op = crate::library::registry().get(qualname)?;
    crate::dispatch::call_operator(&op, args, &crate::library::call_args::kwargs_owned(kwargs))
}
