//! `vmap`: vectorizing a function over a batch dimension, functorch-style.
//!
//! [`vmap`] pushes a *level* on a thread-local stack and wraps each batched input as a *batched
//! tensor*: a [`Tensor`] that reports the per-example (logical) shape and carries the real
//! (physical) tensor plus the position of its batch dim. Every op on a batched tensor reaches the
//! dispatcher's vmap layer (after autocast, before autograd), which unwraps the arguments at the
//! innermost active level among them, runs a batching rule on the physical tensors and wraps the
//! results again. Nested `vmap`s compose: a physical tensor may itself be batched at an outer
//! level, and re-dispatching it peels that level in turn.
//!
//! Batching rules for builtin ops are chosen from the op table (`OpDef::class`, the kernel kind and
//! the schema), with a few ops handled by name (views, `matmul`, `cat`/`stack`); custom ops use the
//! rule registered with `register_vmap`. Anything else runs the per-example fallback: the op is
//! called once per example on `select`ed slices and the results are stacked (correct, slower).
//!
//! Autograd records on the physical tensors, so gradients flow to inputs that require grad once
//! the outputs are unwrapped; calling `backward` on a batched tensor inside `vmap` is an error.

mod batched;
pub mod custom_rule;
mod fallback;
mod level;
mod random;
mod rules;
mod unwrap;

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

pub use custom_rule::{VmapInfo, VmapRule as CustomVmapRule};
pub use fallback::fallback_calls;
pub(crate) use level::any_batched;
use level::{Level, LevelGuard, level_position};
pub use level::{Randomness, depth};
pub(crate) use random::random;
pub(crate) use rules::{dispatch_builtin, dispatch_custom};

use crate::tensor::Tensor;

/// Vectorizes `f` over a batch dimension of its inputs.
///
/// The returned closure takes the inputs; `in_dims[i]` is the batch dim of input `i` (`None`:
/// the input is shared by every example; negative dims count from the end). Inside `f` each
/// batched input looks like one example: its shape lacks the batch dim. `f`'s outputs are
/// unwrapped with the batch dim placed at `out_dims[i]` (an `out_dims` of length 1 applies to
/// every output); an output that does not depend on a batched input is expanded to the batch
/// size. Random ops inside `f` are errors (see [`vmap_with_randomness`]).
///
/// Errors: `in_dims` and the inputs differ in length, an in/out dim is out of range, no input is
/// batched, or the batched inputs disagree on the batch size; and whatever `f` returns.
///
/// ```
/// use tensorplay_core::{Tensor, vmap::vmap};
/// // A per-example dot product: [3, 2] · [3, 2] -> [3].
/// let dot = vmap(
///     |xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?.sum_all()?]),
///     vec![Some(0), Some(0)],
///     vec![0],
/// );
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
/// let b = Tensor::from_vec(vec![1.0f32, 1.0, 0.0, 1.0, 2.0, 0.0], &[3, 2])?;
/// assert_eq!(dot(&[a, b])?[0].to_vec::<f32>()?, vec![3.0, 4.0, 10.0]);
///
/// // A shared (unbatched) operand and the batch dim of the input at 1.
/// let scale = vmap(
///     |xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?]),
///     vec![Some(1), None],
///     vec![0],
/// );
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?; // columns are examples
/// let w = Tensor::from_vec(vec![10.0f32, 100.0], &[2])?;
/// assert_eq!(scale(&[x, w])?[0].to_vec::<f32>()?, vec![10.0, 300.0, 20.0, 400.0]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn vmap<F>(
    f: F,
    in_dims: Vec<Option<i64>>,
    out_dims: Vec<i64>,
) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    move |inputs: &[Tensor]| run(&f, &in_dims, &out_dims, Randomness::Error, inputs)
}

/// Like [`vmap`], with the behaviour of random ops inside `f`: `"error"` (the default of
/// [`vmap`]), `"different"` (each example draws its own values) or `"same"` (every example sees
/// the same values). An unknown spelling is an error when the closure is called.
///
/// ```
/// use tensorplay_core::{Tensor, DType, vmap::vmap_with_randomness};
/// let noisy = |mode: &str| {
///     vmap_with_randomness(
///         |xs: &[Tensor]| Ok(vec![xs[0].add(&Tensor::rand(&[2], DType::F64)?)?]),
///         vec![Some(0)],
///         vec![0],
///         mode,
///     )
/// };
/// let x = Tensor::zeros(&[3, 2], DType::F64);
/// let same = noisy("same")(&[x.clone()])?[0].to_vec::<f64>()?;
/// assert_eq!(&same[0..2], &same[2..4]); // one draw shared by every example
/// let different = noisy("different")(&[x.clone()])?[0].to_vec::<f64>()?;
/// assert_ne!(&different[0..2], &different[2..4]);
/// assert!(noisy("error")(&[x.clone()]).is_err());
/// assert!(noisy("sometimes")(&[x]).is_err());
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn vmap_with_randomness<F>(
    f: F,
    in_dims: Vec<Option<i64>>,
    out_dims: Vec<i64>,
    randomness: &str,
) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + use<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let randomness = randomness.to_string();
    move |inputs: &[Tensor]| {
        let mode = Randomness::parse(&randomness)?;
        run(&f, &in_dims, &out_dims, mode, inputs)
    }
}

/// Normalizes `dim` against `rank` (negative counts from the end), or `None` when out of range.
fn wrap_dim(dim: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

/// One `vmap` call: check and wrap the inputs, run `f` at a new level, unwrap the outputs.
fn run<F>(
    f: &F,
    in_dims: &[Option<i64>],
    out_dims: &[i64],
    randomness: Randomness,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    if in_dims.len() != inputs.len() {
        return Err(Error::argument(
            "vmap",
            "in_dims",
            format!("{} entries (one per input)", inputs.len()),
            format!("{} entries ({in_dims:?})", in_dims.len()),
        ));
    }
    // (input index, normalized batch dim, batch size) of every batched input.
    let mut batched: Vec<(usize, usize, usize)> = Vec::new();
    for (i, (t, d)) in inputs.iter().zip(in_dims).enumerate() {
        let Some(d) = *d else { continue };
        let bdim = wrap_dim(d, t.rank()).ok_or_else(|| {
            Error::argument(
                "vmap",
                "in_dims",
                format!(
                    "a dim in [-{r}, {r}) for input {i} of shape {}",
                    fmt_shape(t.shape()),
                    r = t.rank()
                ),
                format!("in_dim {d}"),
            )
        })?;
        batched.push((i, bdim, t.shape()[bdim]));
    }
    let Some(&(_, _, batch_size)) = batched.first() else {
        return Err(Error::argument(
            "vmap",
            "in_dims",
            "at least one batched input (an in_dim that is not None)",
            format!("{in_dims:?}"),
        ));
    };
    if batched.iter().any(|&(_, _, s)| s != batch_size) {
        let sizes: Vec<String> = batched
            .iter()
            .map(|&(i, d, s)| format!("input {i} has size {s} along in_dim {d}"))
            .collect();
        return Err(Error::shape(
            "vmap",
            format!(
                "all batched inputs must have the same size along their in_dim, but {}",
                sizes.join(", ")
            ),
        ));
    }
    let (_guard, level) = LevelGuard::push(batch_size, randomness);
    let mut wrapped: Vec<Tensor> = inputs.to_vec();
    for &(i, bdim, _) in &batched {
        wrapped[i] = batched::wrap(inputs[i].clone(), bdim, level.id);
    }
    let outs = f(&wrapped)?;
    drop(wrapped);
    if out_dims.len() != outs.len() && out_dims.len() != 1 {
        return Err(Error::argument(
            "vmap",
            "out_dims",
            format!(
                "{} entries (one per output of the function) or one for all",
                outs.len()
            ),
            format!("{} entries ({out_dims:?})", out_dims.len()),
        ));
    }
    outs.into_iter()
        .enumerate()
        .map(|(i, out)| {
            let od = if out_dims.len() == 1 {
                out_dims[0]
            } else {
                out_dims[i]
            };
            unwrap_output(out, i, od, level)
        })
        .collect()
}

/// The physical result of output `i`: its batch dim moved to `out_dim`, or the output expanded
/// along `out_dim` when it is not batched at `level`.
fn unwrap_output(out: Tensor, i: usize, out_dim: i64, level: Level) -> Result<Tensor> {
    let logical_rank = out.rank();
    let dim = wrap_dim(out_dim, logical_rank + 1).ok_or_else(|| {
        Error::argument(
            "vmap",
            "out_dims",
            format!(
                "a dim in [-{r}, {r}) for output {i} (per-example shape {})",
                fmt_shape(out.shape()),
                r = logical_rank + 1
            ),
            format!("out_dim {out_dim}"),
        )
    })?;
    if let Some(info) = out.batch_info() {
        if info.level == level.id {
            return batched::movedim(&info.physical, info.bdim, dim);
        }
        if level_position(info.level).is_none() {
            return Err(batched::escaped("vmap"));
        }
    }
    let mut shape: Vec<usize> = out.shape().to_vec();
    shape.insert(dim, level.batch_size);
    out.unsqueeze(dim as i64)?.expand(&shape)
}

/// Batched inputs split at the innermost active `vmap` level among them: what a function that
/// transforms whole calls (the compiler) needs to run the call on physical tensors instead.
pub struct Peeled {
    /// Each input's physical tensor at the level (unbatched inputs as they are).
    pub physical: Vec<Tensor>,
    /// Each input's batch dim at the level (`None`: not batched at it).
    pub in_dims: Vec<Option<i64>>,
    level: Level,
}

impl Peeled {
    /// The level's randomness mode (`"error"`, `"different"` or `"same"`).
    pub fn randomness(&self) -> &'static str {
        self.level.randomness.as_str()
    }

    /// Wraps physical outputs whose dim 0 is the batch dim as batched tensors of the level.
    pub fn rewrap(&self, outs: Vec<Tensor>) -> Vec<Tensor> {
        outs.into_iter()
            .map(|t| batched::wrap(t, 0, self.level.id))
            .collect()
    }
}

/// Splits `inputs` at the innermost active level any of them is batched at; `None` when no
/// input is batched; an error for a batched tensor whose `vmap` is no longer active.
///
/// ```
/// use tensorplay_core::{Tensor, DType, vmap};
/// let f = vmap::vmap(
///     |xs: &[Tensor]| {
///         let p = vmap::peel(xs)?.expect("batched");
///         assert_eq!(p.physical[0].shape(), &[3, 2]);
///         assert_eq!(p.in_dims, vec![Some(0), None]);
///         let out = p.physical[0].mul(&xs[1])?; // [3, 2] * [2]
///         Ok(p.rewrap(vec![out]))
///     },
///     vec![Some(0), None],
///     vec![0],
/// );
/// let y = f(&[Tensor::ones(&[3, 2], DType::F32), Tensor::full(&[2], 2.0, DType::F32)])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![2.0; 6]);
/// # Ok::<(), tensorplay_core::Error>(())
/// ```
pub fn peel(inputs: &[Tensor]) -> Result<Option<Peeled>> {
    let mut innermost: Option<(usize, Level)> = None;
    for t in inputs {
        if let Some(info) = t.batch_info() {
            let found = level_position(info.level).ok_or_else(|| batched::escaped("vmap"))?;
            if innermost.is_none_or(|(p, _)| found.0 > p) {
                innermost = Some(found);
            }
        }
    }
    let Some((_, level)) = innermost else {
        return Ok(None);
    };
    let mut physical = Vec::with_capacity(inputs.len());
    let mut in_dims = Vec::with_capacity(inputs.len());
    for t in inputs {
        match t.batch_info() {
            Some(info) if info.level == level.id => {
                physical.push(info.physical.clone());
                in_dims.push(Some(info.bdim as i64));
            }
            _ => {
                physical.push(t.clone());
                in_dims.push(None);
            }
        }
    }
    Ok(Some(Peeled {
        physical,
        in_dims,
        level,
    }))
}
