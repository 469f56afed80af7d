//! The per-example fallback: run the op once per example on `select`ed slices and stack the
//! results. Correct for any op (every call goes through the dispatcher, so autograd, autocast and
//! outer vmap levels still apply), but it costs one op call per example.

use std::cell::Cell;

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

use super::batched;
use super::level::Level;
use super::unwrap::{ArgDims, Unwrapped};
use crate::tensor::Tensor;
use crate::value::Value;

thread_local! {
    static FALLBACK_CALLS: Cell<u64> = const { Cell::new(0) };
}

/// How many times the per-example fallback has run on this thread: a way to notice that an op
/// has no batching rule and runs once per example.
///
/// ```
/// use tensorplay_core::{Tensor, DType, vmap};
/// let before = vmap::fallback_calls();
/// let f = vmap::vmap(|xs: &[Tensor]| Ok(vec![xs[0].exp()?]), vec![Some(0)], vec![0]);
/// f(&[Tensor::ones(&[4, 3], DType::F32)])?;
/// assert_eq!(vmap::fallback_calls(), before); // exp has an elementwise batching rule
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn fallback_calls() -> u64 {
    FALLBACK_CALLS.with(Cell::get)
}

/// Example `b` of an unwrapped argument: batched tensors are `select`ed along their batch dim.
fn example(v: &Value, d: &ArgDims, b: usize) -> Result<Value> {
    let pick = |t: &Tensor, bdim: usize| t.select(bdim as i64, b as i64);
    Ok(match (v, d) {
        (Value::Tensor(t), ArgDims::Tensor(bdim)) => Value::Tensor(pick(t, *bdim)?),
        (Value::OptionalTensor(Some(t)), ArgDims::Tensor(bdim)) => {
            Value::OptionalTensor(Some(pick(t, *bdim)?))
        }
        (Value::TensorList(ts), ArgDims::List(ds)) => Value::TensorList(
            ts.iter()
                .zip(ds)
                .map(|(t, d)| match d {
                    Some(bdim) => pick(t, *bdim),
                    None => Ok(t.clone()),
                })
                .collect::<Result<_>>()?,
        ),
        (v, _) => v.clone(),
    })
}

/// Calls `call` once per example of `level` and stacks each output along a new dim 0; the
/// results are batched at `level` with batch dim 0. Every example must return the same number of
/// tensors with equal shapes and dtypes.
pub(crate) fn per_example(
    op: &str,
    u: &Unwrapped,
    level: Level,
    call: &dyn Fn(&[Value]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    FALLBACK_CALLS.with(|c| c.set(c.get() + 1));
    let n = level.batch_size;
    if n == 0 {
        return Err(Error::unsupported(
            op,
            "vmap over a batch of size 0 needs a batching rule (this op runs per example, and \
             there is no example to run)",
        ));
    }
    let mut columns: Vec<Vec<Tensor>> = Vec::new();
    for b in 0..n {
        let args: Vec<Value> = u
            .values
            .iter()
            .zip(&u.dims)
            .map(|(v, d)| example(v, d, b))
            .collect::<Result<_>>()?;
        let outs = call(&args)?;
        if b == 0 {
            columns = outs.into_iter().map(|o| vec![o]).collect();
            continue;
        }
        if outs.len() != columns.len() {
            return Err(Error::unsupported(
                op,
                format!(
                    "vmap fallback: example {b} returned {} outputs but example 0 returned {}",
                    outs.len(),
                    columns.len()
                ),
            ));
        }
        for (i, (o, col)) in outs.into_iter().zip(columns.iter_mut()).enumerate() {
            let first = &col[0];
            if o.shape() != first.shape() || o.dtype() != first.dtype() {
                return Err(Error::unsupported(
                    op,
                    format!(
                        "vmap fallback: output {i} of example {b} has shape {} and dtype {}, but \
                         example 0 gave shape {} and dtype {}; per-example outputs must agree to \
                         be stacked",
                        fmt_shape(o.shape()),
                        o.dtype(),
                        fmt_shape(first.shape()),
                        first.dtype()
                    ),
                ));
            }
            col.push(o);
        }
    }
    columns
        .into_iter()
        .map(|col| Ok(batched::wrap(Tensor::stack(&col, 0)?, 0, level.id)))
        .collect()
}
