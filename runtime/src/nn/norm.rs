//! Batch and group normalization (`torch.nn.functional.batch_norm`, `group_norm`) over
//! channels-first `[N, C, *]` inputs, as composites of op-table ops (so autograd, vmap and the
//! compiler handle them like `layer_norm`). f16/bf16 inputs compute the statistics and the
//! scale-and-shift in f32 and round once.

use tensorplay_core::autograd::no_grad;
use tensorplay_core::tensor::Tensor;
use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

use super::{affine_in, upcast};

/// The channel count of a `[N, C, *]` input.
fn channels(op: &str, x: &Tensor) -> Result<usize> {
    if x.rank() < 2 {
        return Err(Error::argument(
            op,
            "input",
            "a tensor of at least 2 dims [N, C, *]",
            format!("shape {}", fmt_shape(x.shape())),
        ));
    }
    Ok(x.shape()[1])
}

/// Checks a per-channel tensor has shape `[c]`.
fn per_channel(op: &str, name: &str, t: Option<&Tensor>, c: usize) -> Result<()> {
    match t {
        Some(t) if t.shape() != [c] => Err(Error::argument(
            op,
            name,
            format!("shape [{c}] (one value per channel)"),
            format!("shape {}", fmt_shape(t.shape())),
        )),
        _ => Ok(()),
    }
}

/// A `[C]` tensor viewed as `[1, C, 1, ...]` against a rank-`rank` input.
fn channel_view(t: &Tensor, rank: usize) -> Result<Tensor> {
    let mut s = vec![1; rank];
    s[1] = t.numel();
    t.reshape(&s)
}

/// Batch normalization over a `[N, C, *]` input: per channel, `(x - mean) / sqrt(var + eps)
/// * weight + bias`, with the batch's mean and biased variance (over `N` and the spatial dims)
/// when `training` or when no running statistics are given, else the running ones. In training
/// mode with running statistics, they are updated in place as PyTorch does:
/// `running = (1 - momentum) * running + momentum * batch`, the variance unbiased
/// (`n / (n - 1)`). The update is not recorded by autograd.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::from_vec(vec![1.0f64, 4.0, 3.0, 6.0], &[2, 2])?;
/// let (rm, rv) = (Tensor::zeros(&[2], DType::F64), Tensor::ones(&[2], DType::F64));
/// let y = nn::batch_norm(&x, Some(&rm), Some(&rv), None, None, true, 0.5, 0.0)?;
/// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, -1.0, 1.0, 1.0]);
/// assert_eq!(rm.to_vec::<f64>()?, vec![1.0, 2.5]); // halfway to the means [2, 5]
/// assert_eq!(rv.to_vec::<f64>()?, vec![1.5, 1.5]); // halfway to the unbiased variance 2
/// let eval = nn::batch_norm(&x, Some(&rm), Some(&rv), None, None, false, 0.1, 0.0)?;
/// assert_eq!(eval.shape(), &[2, 2]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    input: &Tensor,
    running_mean: Option<&Tensor>,
    running_var: Option<&Tensor>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    const OP: &str = "batch_norm";
    let c = channels(OP, input)?;
    for (name, t) in [
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ] {
        per_channel(OP, name, t, c)?;
    }
    let rank = input.rank();
    let dims: Vec<i64> = std::iter::once(0).chain(2..rank as i64).collect();
    let xf = upcast(input)?;
    let y = match (training, running_mean, running_var) {
        (false, Some(rm), Some(rv)) => {
            let mean = channel_view(&rm.to_dtype(xf.dtype())?, rank)?;
            let var = channel_view(&rv.to_dtype(xf.dtype())?, rank)?;
            xf.sub(&mean)?.mul(&var.add_scalar(eps)?.rsqrt()?)?
        }
        (false, _, _) if running_mean.is_some() || running_var.is_some() => {
            return Err(Error::argument(
                OP,
                "running_mean/running_var",
                "both or neither",
                "only one",
            ));
        }
        _ => {
            let count = input.numel() / c.max(1);
            if count <= 1 {
                return Err(Error::argument(
                    OP,
                    "input",
                    "more than 1 value per channel in training mode",
                    format!("shape {}", fmt_shape(input.shape())),
                ));
            }
            let mean = xf.mean(&dims, true)?;
            let centered = xf.sub(&mean)?;
            let var = centered.mul(&centered)?.mean(&dims, true)?;
            if let (Some(rm), Some(rv)) = (running_mean, running_var) {
                let _off = no_grad();
                let unbiased = var.mul_scalar(count as f64 / (count - 1) as f64)?;
                for (run, batch) in [(rm, &mean), (rv, &unbiased)] {
                    let batch = batch.detach().reshape(&[c])?.to_dtype(run.dtype())?;
                    let next = run
                        .mul_scalar(1.0 - momentum)?
                        .add(&batch.mul_scalar(momentum)?)?;
                    run.copy_(&next)?;
                }
            }
            centered.mul(&var.add_scalar(eps)?.rsqrt()?)?
        }
    };
    let (w, b) = (
        weight.map(|w| channel_view(w, rank)).transpose()?,
        bias.map(|b| channel_view(b, rank)).transpose()?,
    );
    affine_in(y, w.as_ref(), b.as_ref(), input.dtype())
}

/// Group normalization over a `[N, C, *]` input: the channels split into `num_groups` groups,
/// each group of each sample normalized by its own mean and biased variance, then scaled and
/// shifted per channel.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec(vec![1.0f64, 3.0, 5.0, 9.0], &[1, 4])?;
/// let y = nn::group_norm(&x, 2, None, None, 0.0)?;
/// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn group_norm(
    input: &Tensor,
    num_groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    const OP: &str = "group_norm";
    let c = channels(OP, input)?;
    if num_groups == 0 || c % num_groups != 0 {
        return Err(Error::argument(
            OP,
            "num_groups",
            format!("a positive divisor of the {c} channels"),
            num_groups.to_string(),
        ));
    }
    per_channel(OP, "weight", weight, c)?;
    per_channel(OP, "bias", bias, c)?;
    let n = input.shape()[0];
    let xf = upcast(input)?;
    let per_group = input.numel() / (n * num_groups).max(1);
    let grouped = xf.reshape(&[n, num_groups, per_group])?;
    let centered = grouped.sub(&grouped.mean(&[2], true)?)?;
    let var = centered.mul(&centered)?.mean(&[2], true)?;
    let y = centered
        .mul(&var.add_scalar(eps)?.rsqrt()?)?
        .reshape(input.shape())?;
    let rank = input.rank();
    let (w, b) = (
        weight.map(|w| channel_view(w, rank)).transpose()?,
        bias.map(|b| channel_view(b, rank)).transpose()?,
    );
    affine_in(y, w.as_ref(), b.as_ref(), input.dtype())
}
