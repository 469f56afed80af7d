//! Neural-network functions (PyTorch's `torch.nn.functional`): `linear`, `embedding` (and
//! `embedding_padded`), `layer_norm`, `rms_norm`, `dropout`, `mse_loss`, `nll_loss`,
//! `cross_entropy` (and their class-`weight` forms `nll_loss_weighted`,
//! `cross_entropy_weighted`), `scaled_dot_product_attention` (with attention dropout), and the
//! CNN functions of the submodules, re-exported here: `conv1d`/`conv2d`/`conv_transpose2d`
//! (`conv`), `max_pool2d`(`_with_indices`), `avg_pool2d`, `adaptive_avg_pool2d` (`pool`),
//! `batch_norm`, `group_norm` (`norm`), `pad` (`pad`) and `interpolate` (`interpolate`).
//!
//! Each is a composite of op-table ops, as PyTorch decomposes them: there is no kernel here, so
//! autograd differentiates the ops they are made of, vmap batches them, and the compiler fuses
//! their elementwise parts (the normalizations' scale-and-shift, the losses' arithmetic) between
//! the reductions, matmuls and gathers. Argument errors name the function.

mod conv;
mod interpolate;
mod norm;
mod pad;
mod pool;

pub use conv::{ConvPadding, conv_transpose2d, conv1d, conv2d};
pub use interpolate::{InterpolateMode, interpolate};
pub use norm::{batch_norm, group_norm};
pub use pad::{PadMode, pad};
pub use pool::{adaptive_avg_pool2d, avg_pool2d, max_pool2d, max_pool2d_with_indices};

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{DType, Device, Error, Result};

use tensorplay_core::dispatch::call;
use tensorplay_core::ops::attention::{FUSED_ATTENTION, check_dropout_p};
use tensorplay_core::ops::binary::result_type;
use tensorplay_core::ops::compose::{col_minus_row, int_index};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// How a loss reduces its per-element values (PyTorch's `reduction=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// The per-element losses.
    None,
    /// Their mean (for `nll_loss`/`cross_entropy`: over the targets that are not ignored).
    #[default]
    Mean,
    /// Their sum.
    Sum,
}

/// `x @ weight.T + bias`, with `weight` of shape `[out_features, in_features]`. f16/bf16
/// operands compute the product and the bias add in f32 and round once.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::ones(&[2, 3], DType::F32);
/// let w = Tensor::ones(&[4, 3], DType::F32);
/// let b = Tensor::full(&[4], 0.5, DType::F32);
/// let y = nn::linear(&x, &w, Some(&b))?;
/// assert_eq!(y.shape(), &[2, 4]);
/// assert_eq!(y.to_vec::<f32>()?[0], 3.5);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    if weight.rank() != 2 && weight.rank() != 1 {
        return Err(Error::argument(
            "linear",
            "weight",
            "a 1-D or 2-D tensor",
            format!("shape {}", fmt_shape(weight.shape())),
        ));
    }
    let dt = x.dtype();
    if dt.is_half() && weight.dtype() == dt && bias.is_none_or(|b| b.dtype() == dt) {
        // f16/bf16: the product and the bias add in f32, rounded once (PyTorch's addmm).
        let b = bias.map(|b| b.to_dtype(DType::F32)).transpose()?;
        let y = linear(
            &x.to_dtype(DType::F32)?,
            &weight.to_dtype(DType::F32)?,
            b.as_ref(),
        )?;
        return y.to_dtype(dt);
    }
    let y = x.matmul(&weight.t()?)?;
    match bias {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

/// Rows of `weight` (`[num_embeddings, dim]`) picked by `input` (int64 or int32 indices of any
/// shape): the result has shape `input.shape + [dim]`. The gradient scatters back into `weight`.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let w = Tensor::from_vec(vec![0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5], &[3, 2])?;
/// let ids = Tensor::from_vec(vec![2i64, 0, 2], &[1, 3])?;
/// let e = nn::embedding(&ids, &w)?;
/// assert_eq!(e.shape(), &[1, 3, 2]);
/// assert_eq!(e.to_vec::<f32>()?, vec![2.0, 2.5, 0.0, 0.5, 2.0, 2.5]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn embedding(input: &Tensor, weight: &Tensor) -> Result<Tensor> {
    const OP: &str = "embedding";
    if weight.rank() != 2 {
        return Err(Error::argument(
            OP,
            "weight",
            "a 2-D tensor [num_embeddings, embedding_dim]",
            format!("shape {}", fmt_shape(weight.shape())),
        ));
    }
    let ids = int_index(OP, "input", input)?;
    let mut shape = ids.shape().to_vec();
    shape.push(weight.shape()[1]);
    weight
        .index_select(0, &ids.reshape(&[ids.numel()])?)?
        .reshape(&shape)
}

/// [`embedding`] with PyTorch's `padding_idx`: rows picked at `padding_idx` (negative counts
/// from `num_embeddings`) still read `weight`'s row, but send no gradient to it. `None` is plain
/// [`embedding`]. A `padding_idx` outside `[-num_embeddings, num_embeddings)` is an argument
/// error.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let w = Tensor::ones(&[3, 2], DType::F32).requires_grad_(true)?;
/// let ids = Tensor::from_vec(vec![0i64, 1, 1, 2], &[4])?;
/// let e = nn::embedding_padded(&ids, &w, Some(1))?;
/// assert_eq!(e.to_vec::<f32>()?, vec![1.0; 8]);
/// e.sum_all()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn embedding_padded(
    input: &Tensor,
    weight: &Tensor,
    padding_idx: Option<i64>,
) -> Result<Tensor> {
    const OP: &str = "embedding";
    let out = embedding(input, weight)?;
    let Some(pad) = padding_idx else {
        return Ok(out);
    };
    let num = weight.shape()[0] as i64;
    if !(-num..num).contains(&pad) {
        return Err(Error::argument(
            OP,
            "padding_idx",
            format!("an index in [-{num}, {num}) (num_embeddings = {num})"),
            pad.to_string(),
        ));
    }
    let pad = if pad < 0 { pad + num } else { pad };
    let is_pad = int_index(OP, "input", input)?
        .eq_scalar(pad)?
        .unsqueeze(-1)?;
    Tensor::where_cond(&is_pad, &out.detach(), &out)
}

/// The trailing dims `normalized_shape` of `x`, as dims to reduce over.
fn trailing_dims(op: &str, x: &Tensor, normalized_shape: &[usize]) -> Result<Vec<i64>> {
    let k = normalized_shape.len();
    if k == 0 || k > x.rank() || x.shape()[x.rank() - k..] != *normalized_shape {
        return Err(Error::argument(
            op,
            "normalized_shape",
            format!(
                "the trailing dims of the input (shape {})",
                fmt_shape(x.shape())
            ),
            fmt_shape(normalized_shape),
        ));
    }
    Ok((-(k as i64)..0).collect())
}

/// A per-feature parameter must have `normalized_shape`.
fn check_param(op: &str, arg: &str, p: Option<&Tensor>, normalized_shape: &[usize]) -> Result<()> {
    match p {
        Some(t) if t.shape() != normalized_shape => Err(Error::argument(
            op,
            arg,
            format!("shape {}", fmt_shape(normalized_shape)),
            format!("shape {}", fmt_shape(t.shape())),
        )),
        _ => Ok(()),
    }
}

/// `x` in the dtype normalizations compute in (f32 for f16/bf16, as PyTorch's CPU kernels do),
/// and a function giving results back in `x`'s dtype.
fn upcast(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::F16 | DType::BF16 => x.to_dtype(DType::F32),
        d if d.is_float() => Ok(x.clone()),
        d => Err(Error::dtype(
            "normalization",
            format!("input dtype must be floating point, got {d}"),
        )),
    }
}

/// `y * weight + bias` for the parameters given, computed in `y`'s dtype (f32 for half inputs:
/// the parameters are converted to it) and rounded once to `dtype`.
fn affine_in(
    y: Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    dtype: DType,
) -> Result<Tensor> {
    let compute = y.dtype();
    let param = |p: &Tensor| {
        if p.dtype().is_half() && compute == DType::F32 {
            p.to_dtype(DType::F32)
        } else {
            Ok(p.clone())
        }
    };
    let y = match weight {
        Some(w) => y.mul(&param(w)?)?,
        None => y,
    };
    let y = match bias {
        Some(b) => y.add(&param(b)?)?,
        None => y,
    };
    if y.dtype() == dtype || !dtype.is_half() {
        Ok(y)
    } else {
        y.to_dtype(dtype)
    }
}

/// Normalizes the trailing `normalized_shape` dims to zero mean and unit (biased) variance,
/// then scales by `weight` and shifts by `bias`: `(x - mean) / sqrt(var + eps) * w + b`.
/// f16/bf16 inputs compute everything (the statistics and the scale-and-shift) in f32 and round
/// once; a constant row gives +0.0 (plus `bias`).
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[2, 2])?;
/// let y = nn::layer_norm(&x, &[2], None, None, 0.0)?;
/// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    const OP: &str = "layer_norm";
    let dims = trailing_dims(OP, x, normalized_shape)?;
    check_param(OP, "weight", weight, normalized_shape)?;
    check_param(OP, "bias", bias, normalized_shape)?;
    let xf = upcast(x)?;
    // Centered about the row's first element (a constant for autograd) before the mean is
    // taken: less cancellation, and a constant row centers to exactly +0.0.
    let mut first = xf.clone();
    for &d in &dims {
        first = first.narrow(d, 0, 1)?;
    }
    let shifted = xf.sub(&first.detach())?;
    let centered = shifted.sub(&shifted.mean(&dims, true)?)?;
    let var = centered.mul(&centered)?.mean(&dims, true)?;
    let y = centered.mul(&var.add_scalar(eps)?.rsqrt()?)?;
    // A missing bias adds 0 (as PyTorch's kernel does), so a zero times a negative weight is
    // +0.0.
    let zero;
    let bias = match (weight, bias) {
        (Some(_), None) => {
            zero = Tensor::zeros(&[], xf.dtype());
            Some(&zero)
        }
        _ => bias,
    };
    affine_in(y, weight, bias, x.dtype())
}

/// Root-mean-square normalization of the trailing `normalized_shape` dims:
/// `x / sqrt(mean(x^2) + eps) * weight`; `eps` defaults to the dtype's machine epsilon (as in
/// PyTorch). f16/bf16 inputs compute in f32, the weight too, and round once.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec(vec![3.0f64, 4.0], &[1, 2])?;
/// let y = nn::rms_norm(&x, &[2], None, Some(0.0))?.to_vec::<f64>()?;
/// let rms = 12.5f64.sqrt();
/// assert!((y[0] - 3.0 / rms).abs() < 1e-15 && (y[1] - 4.0 / rms).abs() < 1e-15);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    const OP: &str = "rms_norm";
    let dims = trailing_dims(OP, x, normalized_shape)?;
    check_param(OP, "weight", weight, normalized_shape)?;
    let xf = upcast(x)?;
    let eps = eps.unwrap_or(match x.dtype() {
        DType::F64 => f64::EPSILON,
        DType::F16 => 0.000_976_562_5,
        DType::BF16 => 0.007_812_5,
        _ => f32::EPSILON as f64,
    });
    let ms = xf.mul(&xf)?.mean(&dims, true)?;
    let y = xf.mul(&ms.add_scalar(eps)?.rsqrt()?)?;
    affine_in(y, weight, None, x.dtype())
}

/// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)`, when
/// `training`; the identity otherwise. The mask comes from `seed` (the same seed gives the same
/// mask, eagerly and compiled: a compiled function holds the mask of the seed it was captured
/// with).
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::ones(&[1000], DType::F32);
/// let y = nn::dropout(&x, 0.25, true, 7)?.to_vec::<f32>()?;
/// let kept = y.iter().filter(|&&v| v != 0.0).count();
/// assert!((650..850).contains(&kept));
/// assert!(y.iter().all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
/// assert!(nn::dropout(&x, 1.5, true, 7).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn dropout(x: &Tensor, p: f64, training: bool, seed: u64) -> Result<Tensor> {
    dropout_with(x, p, training, |shape| {
        Tensor::rand_seeded(shape, DType::F32, seed)
    })
}

/// [`dropout`] drawing its mask from the global generator (`torch.nn.functional.dropout`):
/// reproducible after [`crate::manual_seed`], a fresh mask on every call, thread-safe.
///
/// ```
/// use tensorplay_runtime::{manual_seed, nn, DType, Tensor};
/// let x = Tensor::ones(&[64], DType::F32);
/// manual_seed(21);
/// let a = nn::dropout_global(&x, 0.5, true)?.to_vec::<f32>()?;
/// manual_seed(21);
/// assert_eq!(nn::dropout_global(&x, 0.5, true)?.to_vec::<f32>()?, a);
/// assert!(a.iter().all(|&v| v == 0.0 || v == 2.0));
/// assert_eq!(nn::dropout_global(&x, 0.5, false)?.to_vec::<f32>()?, vec![1.0; 64]);
/// assert!(nn::dropout_global(&x, -0.1, true).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn dropout_global(x: &Tensor, p: f64, training: bool) -> Result<Tensor> {
    dropout_with(x, p, training, |shape| Tensor::rand(shape, DType::F32))
}

/// Dropout with the uniform draws `uniform(shape)`.
fn dropout_with(
    x: &Tensor,
    p: f64,
    training: bool,
    uniform: impl FnOnce(&[usize]) -> Result<Tensor>,
) -> Result<Tensor> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::argument(
            "dropout",
            "p",
            "a probability in [0, 1]",
            p.to_string(),
        ));
    }
    if !training || p == 0.0 {
        return Ok(x.clone());
    }
    if p == 1.0 {
        return x.mul_scalar(0.0);
    }
    let keep = uniform(x.shape())?.ge_scalar(p)?;
    let scale = Tensor::try_full(&[], 1.0 / (1.0 - p), x.dtype())?;
    x.mul(&keep.to_dtype(x.dtype())?)?.mul(&scale)
}

/// Reduces per-element losses.
fn reduce(loss: Tensor, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(loss),
        Reduction::Mean => loss.mean_all(),
        Reduction::Sum => loss.sum_all(),
    }
}

/// A loss's floating `arg` (an integer or bool tensor is a dtype error naming `op`, as PyTorch
/// has no integer kernels for its losses), in the dtype the loss computes in: f32 for f16/bf16.
fn loss_operand(op: &str, arg: &str, t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        DType::F16 | DType::BF16 => t.to_dtype(DType::F32),
        d if d.is_float() => Ok(t.clone()),
        d => Err(Error::dtype(
            op,
            format!("{arg} must be a floating point tensor, got {d}"),
        )),
    }
}

/// `loss` (computed in f32 for a half input) rounded once to the input's dtype `dtype`.
fn round_to(loss: Tensor, dtype: DType) -> Result<Tensor> {
    if loss.dtype() == dtype {
        Ok(loss)
    } else {
        loss.to_dtype(dtype)
    }
}

/// Mean squared error `(input - target)^2`, reduced. The shapes must be equal (PyTorch
/// broadcasts with a warning; a silent broadcast is almost always a bug); both must be floating
/// (f16/bf16 compute in f32 and round once).
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
/// let b = Tensor::from_vec(vec![0.0f32, 4.0], &[2])?;
/// assert_eq!(nn::mse_loss(&a, &b, nn::Reduction::Mean)?.item::<f32>()?, 2.5);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn mse_loss(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if input.shape() != target.shape() {
        return Err(Error::argument(
            "mse_loss",
            "target",
            format!("the input's shape {}", fmt_shape(input.shape())),
            format!("shape {}", fmt_shape(target.shape())),
        ));
    }
    const OP: &str = "mse_loss";
    let dtype = result_type(input, target);
    let a = loss_operand(OP, "input", input)?;
    let b = loss_operand(OP, "target", target)?;
    let d = a.sub(&b)?;
    round_to(reduce(d.mul(&d)?, reduction)?, dtype)
}

/// `label_smoothing` must lie in `[0, 1]` (argument of `op`).
fn check_label_smoothing(op: &str, label_smoothing: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&label_smoothing) {
        return Err(Error::argument(
            op,
            "label_smoothing",
            "a value in [0, 1]",
            label_smoothing.to_string(),
        ));
    }
    Ok(())
}

/// Checks the class-index target of `nll_loss`/`cross_entropy` against `input` (`[C]` with a
/// 0-d target, or `[N, C, d1…]` with a target `[N, d1…]`) and returns it as i64.
fn class_target(op: &str, input: &Tensor, target: &Tensor) -> Result<Tensor> {
    if target.dtype() != DType::I64 {
        return Err(Error::argument(
            op,
            "target",
            "an int64 tensor of class indices",
            format!("dtype {}", target.dtype()),
        ));
    }
    let expected: Vec<usize> = match input.rank() {
        0 => {
            return Err(Error::argument(
                op,
                "input",
                "a tensor with a class dim ([C] or [N, C, ...])",
                "a 0-d tensor",
            ));
        }
        1 => vec![],
        _ => {
            let mut s = vec![input.shape()[0]];
            s.extend_from_slice(&input.shape()[2..]);
            s
        }
    };
    if target.shape() != expected.as_slice() {
        return Err(Error::argument(
            op,
            "target",
            format!(
                "shape {} for input of shape {}",
                fmt_shape(&expected),
                fmt_shape(input.shape())
            ),
            format!("shape {}", fmt_shape(target.shape())),
        ));
    }
    Ok(target.clone())
}

/// Per-target `-input[target]` (0 where `target == ignore_index`) and the not-ignored mask.
fn picked_nll(input: &Tensor, target: &Tensor, ignore_index: i64) -> Result<(Tensor, Tensor)> {
    let class_dim = if input.rank() == 1 { 0 } else { 1 };
    let valid = target.ne_scalar(ignore_index)?;
    // Ignored targets read class 0 (any valid index); their loss is masked out below.
    let safe = target.masked_fill(&valid.logical_not()?, 0)?;
    let picked = input
        .gather(class_dim, &safe.unsqueeze(class_dim)?)?
        .squeeze(Some(class_dim))?;
    let zero = Tensor::try_full(&[], 0.0, input.dtype())?;
    let loss = Tensor::where_cond(&valid, &picked.neg()?, &zero)?;
    Ok((loss, valid))
}

/// The mean over not-ignored targets (NaN when every target is ignored, as in PyTorch).
fn masked_reduce(loss: Tensor, valid: &Tensor, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(loss),
        Reduction::Sum => loss.sum_all(),
        Reduction::Mean => loss
            .sum_all()?
            .div(&valid.sum_all()?.to_dtype(loss.dtype())?),
    }
}

/// Negative log-likelihood of class-index targets given log-probabilities `input` (`[N, C]`,
/// `[N, C, d1…]` or `[C]`): `-input[n, target[n]]`, with targets equal to `ignore_index`
/// contributing nothing (and not counted by the mean). A target outside `[0, C)` is an error.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let logp = Tensor::from_vec(vec![-1.0f32, -2.0, -3.0, -4.0], &[2, 2])?;
/// let t = Tensor::from_vec(vec![1i64, -100], &[2])?;
/// assert_eq!(nn::nll_loss(&logp, &t, -100, nn::Reduction::Mean)?.item::<f32>()?, 2.0);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn nll_loss(
    input: &Tensor,
    target: &Tensor,
    ignore_index: i64,
    reduction: Reduction,
) -> Result<Tensor> {
    let target = class_target("nll_loss", input, target)?;
    let x = loss_operand("nll_loss", "input", input)?;
    let (loss, valid) = picked_nll(&x, &target, ignore_index)?;
    round_to(masked_reduce(loss, &valid, reduction)?, input.dtype())
}

/// The class weights of `nll_loss_weighted`/`cross_entropy_weighted`: a floating 1-D tensor with
/// one entry per class of `input`, in `input`'s dtype.
fn class_weight(op: &str, input: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let classes = input.shape()[if input.rank() == 1 { 0 } else { 1 }];
    if weight.shape() != [classes] {
        return Err(Error::argument(
            op,
            "weight",
            format!(
                "shape [{classes}] (one weight per class of input of shape {})",
                fmt_shape(input.shape())
            ),
            format!("shape {}", fmt_shape(weight.shape())),
        ));
    }
    if !weight.dtype().is_float() {
        return Err(Error::argument(
            op,
            "weight",
            "a floating tensor",
            format!("dtype {}", weight.dtype()),
        ));
    }
    weight.to_dtype(input.dtype())
}

/// `weight[target]` per target, 0 where the target is ignored (so it also counts nothing in
/// the mean's denominator).
fn picked_weight(weight: &Tensor, target: &Tensor, valid: &Tensor) -> Result<Tensor> {
    let safe = target.masked_fill(&valid.logical_not()?, 0)?;
    let w = weight
        .index_select(0, &safe.reshape(&[safe.numel()])?)?
        .reshape(safe.shape())?;
    let zero = Tensor::try_full(&[], 0.0, w.dtype())?;
    Tensor::where_cond(valid, &w, &zero)
}

/// The weighted reduction: `Mean` divides by the summed weights of the not-ignored targets
/// (NaN when they sum to 0, as in PyTorch).
fn weighted_reduce(loss: Tensor, picked_w: &Tensor, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::None => Ok(loss),
        Reduction::Sum => loss.sum_all(),
        Reduction::Mean => loss.sum_all()?.div(&picked_w.sum_all()?),
    }
}

/// [`nll_loss`] with a per-class `weight` (`[C]`, floating; PyTorch's `weight=`): each loss is
/// `-weight[t] * input[n, t]`, and the mean divides by the sum of `weight[t]` over the targets
/// that are not ignored. `None` is plain [`nll_loss`].
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let logp = Tensor::from_vec(vec![-1.0f32, -2.0, -3.0, -4.0], &[2, 2])?;
/// let t = Tensor::from_vec(vec![1i64, 0], &[2])?;
/// let w = Tensor::from_vec(vec![1.0f32, 3.0], &[2])?;
/// // (3·2 + 1·3) / (3 + 1)
/// let l = nn::nll_loss_weighted(&logp, &t, Some(&w), -100, nn::Reduction::Mean)?;
/// assert_eq!(l.item::<f32>()?, 2.25);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn nll_loss_weighted(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
    reduction: Reduction,
) -> Result<Tensor> {
    const OP: &str = "nll_loss";
    let Some(weight) = weight else {
        return nll_loss(input, target, ignore_index, reduction);
    };
    let target = class_target(OP, input, target)?;
    let x = loss_operand(OP, "input", input)?;
    let weight = class_weight(OP, &x, weight)?;
    let (loss, valid) = picked_nll(&x, &target, ignore_index)?;
    let w = picked_weight(&weight, &target, &valid)?;
    round_to(
        weighted_reduce(loss.mul(&w)?, &w, reduction)?,
        input.dtype(),
    )
}

/// Cross-entropy of logits `input` (`[N, C]`, `[N, C, d1…]` or `[C]`) against class-index
/// targets: `nll_loss(log_softmax(input))`. With `label_smoothing = ε`, the target distribution
/// is `(1 - ε)` on the target class plus `ε / C` on every class, so each loss is
/// `(1 - ε) * nll + ε * mean_c(-log_softmax)`. Ignored targets contribute nothing.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0], &[1, 2])?;
/// let t = Tensor::from_vec(vec![0i64], &[1])?;
/// let l = nn::cross_entropy(&logits, &t, -100, 0.0, nn::Reduction::Mean)?.item::<f64>()?;
/// assert!((l - std::f64::consts::LN_2).abs() < 1e-15);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn cross_entropy(
    input: &Tensor,
    target: &Tensor,
    ignore_index: i64,
    label_smoothing: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    const OP: &str = "cross_entropy";
    check_label_smoothing(OP, label_smoothing)?;
    let target = class_target(OP, input, target)?;
    loss_operand(OP, "input", input)?;
    let class_dim = if input.rank() == 1 { 0 } else { 1 };
    // Half inputs: log_softmax rounds to the input's dtype (as PyTorch's), the loss and its
    // reduction then compute in f32 and round once.
    let logp = loss_operand(OP, "input", &input.log_softmax(class_dim)?)?;
    let (nll, valid) = picked_nll(&logp, &target, ignore_index)?;
    let loss = if label_smoothing > 0.0 {
        let smooth = logp.mean(&[class_dim], false)?.neg()?;
        let zero = Tensor::try_full(&[], 0.0, smooth.dtype())?;
        let smooth = Tensor::where_cond(&valid, &smooth, &zero)?;
        nll.mul_scalar(1.0 - label_smoothing)?
            .add(&smooth.mul_scalar(label_smoothing)?)?
    } else {
        nll
    };
    round_to(masked_reduce(loss, &valid, reduction)?, input.dtype())
}

/// [`cross_entropy`] with a per-class `weight` (`[C]`, floating; PyTorch's `weight=`):
/// `nll_loss_weighted(log_softmax(input))`. With `label_smoothing = ε` each loss is
/// `(1 - ε) * weight[t] * nll + ε / C * sum_c(weight[c] * -log_softmax_c)`, and the mean divides
/// the summed losses by the sum of `weight[t]` over the targets that are not ignored (PyTorch's
/// semantics). `None` is plain [`cross_entropy`].
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let logits = Tensor::from_vec(vec![0.0f64, 0.0, 0.0, 0.0], &[2, 2])?;
/// let t = Tensor::from_vec(vec![0i64, 1], &[2])?;
/// let w = Tensor::from_vec(vec![1.0f64, 3.0], &[2])?;
/// let l = nn::cross_entropy_weighted(&logits, &t, Some(&w), -100, 0.0, nn::Reduction::Mean)?;
/// assert!((l.item::<f64>()? - std::f64::consts::LN_2).abs() < 1e-15);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn cross_entropy_weighted(
    input: &Tensor,
    target: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
    label_smoothing: f64,
    reduction: Reduction,
) -> Result<Tensor> {
    const OP: &str = "cross_entropy";
    let Some(weight) = weight else {
        return cross_entropy(input, target, ignore_index, label_smoothing, reduction);
    };
    check_label_smoothing(OP, label_smoothing)?;
    let target = class_target(OP, input, target)?;
    loss_operand(OP, "input", input)?;
    let class_dim = if input.rank() == 1 { 0 } else { 1 };
    let logp = loss_operand(OP, "input", &input.log_softmax(class_dim)?)?;
    let weight = class_weight(OP, &logp, weight)?;
    let (nll, valid) = picked_nll(&logp, &target, ignore_index)?;
    let w = picked_weight(&weight, &target, &valid)?;
    let nll = nll.mul(&w)?;
    let loss = if label_smoothing > 0.0 {
        let classes = weight.numel();
        // The weights along the class dim: [C] for a [C] input, [C, 1, …] otherwise.
        let mut at = vec![1usize; input.rank().saturating_sub(1)];
        if input.rank() == 1 {
            at = vec![classes];
        } else {
            at[0] = classes;
        }
        let smooth = logp
            .mul(&weight.reshape(&at)?)?
            .sum(&[class_dim], false)?
            .neg()?;
        let zero = Tensor::try_full(&[], 0.0, smooth.dtype())?;
        let smooth = Tensor::where_cond(&valid, &smooth, &zero)?;
        nll.mul_scalar(1.0 - label_smoothing)?
            .add(&smooth.mul_scalar(label_smoothing / classes as f64)?)?
    } else {
        nll
    };
    round_to(weighted_reduce(loss, &w, reduction)?, input.dtype())
}

/// Attention `softmax(q @ k^T * scale + mask) @ v` over the last two dims (`q: [..., L, E]`,
/// `k: [..., S, E]`, `v: [..., S, Ev]`, leading dims broadcast), with PyTorch's argument order.
/// `attn_mask` is a bool mask (true = attend) or a float mask added to the scores;
/// `dropout_p` (in `[0, 1]`) drops each attention probability with that probability and
/// scales the kept ones by `1 / (1 - p)` (always, as PyTorch's functional form: pass 0 outside
/// training); `is_causal` masks out positions `s > l` (and excludes `attn_mask`, as in
/// PyTorch); `scale` defaults to `1 / sqrt(E)`. A query row the mask blocks entirely gives 0
/// (PyTorch's safe softmax). f16/bf16 inputs compute both products and the softmax in f32 and
/// round once.
///
/// Dropout draws one seed per call from the global generator ([`crate::manual_seed`] makes it
/// reproducible; compiled calls draw a fresh one each, as eager ones); on CPU the fused kernel
/// derives each decision from that seed without a mask tensor, and its backward regenerates
/// them. `dropout_p = 0` draws nothing.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let q = Tensor::randn_seeded(&[2, 4, 8], DType::F32, 0)?;
/// let v = Tensor::randn_seeded(&[2, 4, 8], DType::F32, 1)?;
/// let y = nn::scaled_dot_product_attention(&q, &q, &v, None, 0.0, true, None)?;
/// assert_eq!(y.shape(), &[2, 4, 8]);
/// // The first position attends only to itself.
/// let first = y.select(1, 0)?.to_vec::<f32>()?;
/// assert_eq!(first, v.select(1, 0)?.to_vec::<f32>()?);
/// // With dropout, each batch entry's first position has one probability, dropped (a zero
/// // row) or kept (scaled by 1 / (1 - p) = 2).
/// tensorplay_runtime::manual_seed(3);
/// let d = nn::scaled_dot_product_attention(&q, &q, &v, None, 0.5, true, None)?;
/// let rows = d.select(1, 0)?.to_vec::<f32>()?;
/// let twice: Vec<f32> = first.iter().map(|x| 2.0 * x).collect();
/// for (row, kept) in rows.chunks(8).zip(twice.chunks(8)) {
///     assert!(row.iter().all(|&x| x == 0.0) || row == kept);
/// }
/// assert!(nn::scaled_dot_product_attention(&q, &q, &v, None, 1.5, true, None).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor> {
    const OP: &str = "scaled_dot_product_attention";
    check_dropout_p(OP, dropout_p)?;
    for (arg, t) in [("query", q), ("key", k), ("value", v)] {
        if t.rank() < 2 {
            return Err(Error::argument(
                OP,
                arg,
                "a tensor with at least 2 dims",
                format!("shape {}", fmt_shape(t.shape())),
            ));
        }
    }
    // Only the head dim is read as a plain size (the default scale needs it): the sequence and
    // batch sizes stay symbolic under capture.
    let e = q.size(-1)?;
    if k.size(-1)? != e {
        return Err(Error::argument(
            OP,
            "key",
            format!("last dim {e} (the query's)"),
            format!("shape {}", fmt_shape(k.shape())),
        ));
    }
    if is_causal && attn_mask.is_some() {
        return Err(Error::argument(
            OP,
            "attn_mask",
            "None when is_causal is set",
            "a mask",
        ));
    }
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let on_cpu = [q, k, v].iter().all(|t| t.device() == Device::Cpu);
    let same_dtype = k.dtype() == q.dtype() && v.dtype() == q.dtype() && q.dtype().is_float();
    if on_cpu && same_dtype {
        // The fused kernel (one pass per head, no score matrix; `ops::attention`).
        let args = [
            Value::Tensor(q.clone()),
            Value::Tensor(k.clone()),
            Value::Tensor(v.clone()),
            Value::OptionalTensor(attn_mask.cloned()),
            Value::Float(dropout_p),
            Value::Bool(is_causal),
            Value::Float(scale),
        ];
        return Ok(call(&FUSED_ATTENTION, &args)?.swap_remove(0));
    }
    let dt = q.dtype();
    if dt.is_half() && k.dtype() == dt && v.dtype() == dt {
        // f16/bf16: both products and the softmax in f32, rounded once (PyTorch's CPU kernels
        // accumulate in f32 too). A float mask joins the f32 scores.
        let up = |t: &Tensor| t.to_dtype(DType::F32);
        let mask = match attn_mask {
            Some(m) if m.dtype().is_half() => Some(up(m)?),
            m => m.cloned(),
        };
        let y = scaled_dot_product_attention(
            &up(q)?,
            &up(k)?,
            &up(v)?,
            mask.as_ref(),
            dropout_p,
            is_causal,
            Some(scale),
        )?;
        return y.to_dtype(dt);
    }
    // The decomposed formula (tensors off the CPU): dropout on the probabilities, with a mask
    // from the global generator.
    let drop = |p: Tensor| -> Result<Tensor> {
        if dropout_p > 0.0 {
            dropout_global(&p, dropout_p, true)
        } else {
            Ok(p)
        }
    };
    let scores = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(scale)?;
    let scores = if is_causal {
        let future = col_minus_row(q.sym_size(-2)?, k.sym_size(-2)?)?.gt_scalar(0)?;
        scores.masked_fill(&future, f64::NEG_INFINITY)?
    } else {
        match attn_mask {
            Some(m) if m.dtype() == DType::Bool => {
                scores.masked_fill(&m.logical_not()?, f64::NEG_INFINITY)?
            }
            Some(m) => scores.add(m)?,
            None => scores,
        }
    };
    if attn_mask.is_none() {
        return drop(scores.softmax(-1)?)?.matmul(v);
    }
    // A row the mask blocks entirely attends to nothing: its weights are 0 (PyTorch's safe
    // softmax), not the NaN of softmax over all -inf. The row's scores are replaced by 0 before
    // the softmax so that no NaN reaches the gradient either.
    let blocked = scores
        .ne_scalar(f64::NEG_INFINITY)?
        .any(&[-1], true)?
        .logical_not()?;
    let safe = scores.masked_fill(&blocked, 0.0)?;
    drop(safe.softmax(-1)?.masked_fill(&blocked, 0.0)?)?.matmul(v)
}
