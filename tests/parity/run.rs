//! Running a recorded case through TensorPlay's public API.

use crate::data::{Arg, Case};
use tensorplay::{Idx, Result, Tensor, Value, nn, ops};

/// Runs a case through TensorPlay.
pub(crate) fn run(c: &Case) -> Result<Vec<Tensor>> {
    let a = &c.args;
    match c.op {
        "full" => {
            let Arg::Ints(shape) = &a[0] else {
                panic!("full: shape")
            };
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let Arg::DType(d) = a[2] else {
                panic!("full: dtype")
            };
            Ok(vec![Tensor::try_full(&shape, a[1].scalar(), d)?])
        }
        "fill_" => {
            let t = a[0].tensor().to_dtype(a[0].tensor().dtype())?;
            let t = ops::call("tp::clone", &[t.into()])?.remove(0);
            t.fill_(a[1].scalar())?;
            Ok(vec![t])
        }
        "arange" => {
            let Arg::DType(d) = a[3] else {
                panic!("arange: dtype")
            };
            Ok(vec![Tensor::arange(
                a[0].float(),
                a[1].float(),
                a[2].float(),
                d,
            )?])
        }
        "where_scalar" => Ok(vec![Tensor::where_scalar(
            a[0].tensor(),
            a[1].scalar(),
            a[2].scalar(),
        )?]),
        op => match run_composite(op, a)? {
            Some(outs) => Ok(outs),
            None => {
                let args: Vec<Value> = a.iter().map(Arg::value).collect();
                let kw: Vec<(&str, Value)> =
                    c.kw.iter().map(|(k, v)| (k.as_str(), v.value())).collect();
                ops::call_kw(&format!("tp::{op}"), &args, &kw)
            }
        },
    }
}

/// The loss reduction named by a recorded string (`"none"`, `"mean"`, `"sum"`).
pub(crate) fn reduction(a: &Arg) -> nn::Reduction {
    match a.str() {
        "none" => nn::Reduction::None,
        "sum" => nn::Reduction::Sum,
        _ => nn::Reduction::Mean,
    }
}

/// Composite methods and `nn` functions (no op-table entry, so not reachable through
/// `ops::call_kw`): `Some(outputs)` for the ones this replay knows, `None` otherwise.
pub(crate) fn run_composite(op: &str, a: &[Arg]) -> Result<Option<Vec<Tensor>>> {
    let out = match op {
        "linear" => nn::linear(a[0].tensor(), a[1].tensor(), a[2].opt_tensor())?,
        "layer_norm" => nn::layer_norm(
            a[0].tensor(),
            &a[1].usizes(),
            a[2].opt_tensor(),
            a[3].opt_tensor(),
            a[4].float(),
        )?,
        "rms_norm" => nn::rms_norm(
            a[0].tensor(),
            &a[1].usizes(),
            a[2].opt_tensor(),
            a[3].opt_float(),
        )?,
        "scaled_dot_product_attention" => nn::scaled_dot_product_attention(
            a[0].tensor(),
            a[1].tensor(),
            a[2].tensor(),
            a[3].opt_tensor(),
            0.0,
            a[4].bool(),
            a[5].opt_float(),
        )?,
        "nll_loss" => nn::nll_loss(a[0].tensor(), a[1].tensor(), a[2].int(), reduction(&a[3]))?,
        "cross_entropy" => nn::cross_entropy(
            a[0].tensor(),
            a[1].tensor(),
            a[2].int(),
            a[3].float(),
            reduction(&a[4]),
        )?,
        "mse_loss" => nn::mse_loss(a[0].tensor(), a[1].tensor(), reduction(&a[2]))?,
        "logsumexp" => a[0].tensor().logsumexp(a[1].ints(), a[2].bool())?,
        "norm" => a[0].tensor().norm(a[1].float(), a[2].ints(), a[3].bool())?,
        "linspace" => {
            let Arg::DType(d) = a[3] else {
                panic!("linspace: dtype")
            };
            Tensor::linspace(a[0].float(), a[1].float(), a[2].int() as usize, d)?
        }
        "topk" => {
            let (v, i) = a[0]
                .tensor()
                .topk(a[1].int() as usize, a[2].int(), a[3].bool())?;
            return Ok(Some(vec![v, i]));
        }
        "index_select" => a[0].tensor().index_select(a[1].int(), a[2].tensor())?,
        "roll" => a[0].tensor().roll(a[1].ints(), a[2].ints())?,
        "index" => a[0].tensor().index(&[Idx::Tensor(a[1].tensor().clone())])?,
        "conv2d" => nn::conv2d(
            a[0].tensor(),
            a[1].tensor(),
            a[2].opt_tensor(),
            &a[3].usizes(),
            conv_padding(&a[4])?,
            &a[5].usizes(),
            a[6].int() as usize,
        )?,
        "conv1d" => nn::conv1d(
            a[0].tensor(),
            a[1].tensor(),
            a[2].opt_tensor(),
            a[3].int() as usize,
            conv_padding(&a[4])?,
            a[5].int() as usize,
            a[6].int() as usize,
        )?,
        "conv2d_grad" => return conv2d_grad(a).map(Some),
        "conv_transpose2d" => nn::conv_transpose2d(
            a[0].tensor(),
            a[1].tensor(),
            a[2].opt_tensor(),
            &a[3].usizes(),
            &a[4].usizes(),
            &a[5].usizes(),
            a[6].int() as usize,
            &a[7].usizes(),
        )?,
        "max_pool2d" => {
            let (y, i) = nn::max_pool2d_with_indices(
                a[0].tensor(),
                &a[1].usizes(),
                &a[2].usizes(),
                &a[3].usizes(),
                &a[4].usizes(),
                a[5].bool(),
            )?;
            return Ok(Some(vec![y, i]));
        }
        "avg_pool2d" => nn::avg_pool2d(
            a[0].tensor(),
            &a[1].usizes(),
            &a[2].usizes(),
            &a[3].usizes(),
            a[4].bool(),
            a[5].bool(),
            match a[6] {
                Arg::None => None,
                _ => Some(a[6].int()),
            },
        )?,
        "adaptive_avg_pool2d" => nn::adaptive_avg_pool2d(a[0].tensor(), &a[1].usizes())?,
        "pad" => nn::pad(
            a[0].tensor(),
            a[1].ints(),
            nn::PadMode::parse(a[2].str())?,
            a[3].opt_float().unwrap_or(0.0),
        )?,
        "interpolate" => nn::interpolate(
            a[0].tensor(),
            a[1].opt_usizes().as_deref(),
            a[2].opt_floats(),
            nn::InterpolateMode::parse(a[3].str())?,
            a[4].opt_bool(),
            a[5].opt_bool(),
        )?,
        "batch_norm" => return batch_norm(a).map(Some),
        "group_norm" => nn::group_norm(
            a[0].tensor(),
            a[1].int() as usize,
            a[2].opt_tensor(),
            a[3].opt_tensor(),
            a[4].float(),
        )?,
        "cat" => Tensor::cat(a[0].tensors(), a[1].int())?,
        "stack" => Tensor::stack(a[0].tensors(), a[1].int())?,
        "masked_fill" => a[0].tensor().masked_fill(a[1].tensor(), a[2].scalar())?,
        "tril" => a[0].tensor().tril(a[1].int())?,
        "triu" => a[0].tensor().triu(a[1].int())?,
        "unflatten" => a[0].tensor().unflatten(a[1].int(), a[2].ints())?,
        "split" => return Ok(Some(a[0].tensor().split(a[1].int() as usize, a[2].int())?)),
        "split_with_sizes" => {
            return Ok(Some(
                a[0].tensor().split_with_sizes(&a[1].usizes(), a[2].int())?,
            ));
        }
        "chunk" => return Ok(Some(a[0].tensor().chunk(a[1].int() as usize, a[2].int())?)),
        "movedim" => a[0].tensor().movedim(a[1].ints(), a[2].ints())?,
        "repeat" => a[0].tensor().repeat(&a[1].usizes())?,
        "tile" => a[0].tensor().tile(&a[1].usizes())?,
        "any" => a[0].tensor().any(a[1].ints(), a[2].bool())?,
        "all" => a[0].tensor().all(a[1].ints(), a[2].bool())?,
        "count_nonzero" => a[0].tensor().count_nonzero(a[1].ints())?,
        "masked_select" => a[0].tensor().masked_select(a[1].tensor())?,
        "argwhere" => a[0].tensor().argwhere()?,
        "take" => a[0].tensor().take(a[1].tensor())?,
        "sum_dtype" => a[0]
            .tensor()
            .sum_dtype(a[1].ints(), a[2].bool(), a[3].dtype())?,
        "mean_dtype" => a[0]
            .tensor()
            .mean_dtype(a[1].ints(), a[2].bool(), a[3].dtype())?,
        "nansum" => a[0].tensor().nansum(a[1].ints(), a[2].bool())?,
        "nansum_dtype" => a[0]
            .tensor()
            .nansum_dtype(a[1].ints(), a[2].bool(), a[3].dtype())?,
        "eye" => Tensor::eye(a[0].int() as usize, a[1].int() as usize, a[2].dtype())?,
        "index_put" => a[0].tensor().index_put(
            &[Idx::Tensor(a[1].tensor().clone())],
            a[2].tensor(),
            a[3].bool(),
        )?,
        "embedding" => nn::embedding(a[0].tensor(), a[1].tensor())?,
        "embedding_padded" => nn::embedding_padded(
            a[0].tensor(),
            a[1].tensor(),
            match a[2] {
                Arg::None => None,
                _ => Some(a[2].int()),
            },
        )?,
        "nll_loss_weighted" => nn::nll_loss_weighted(
            a[0].tensor(),
            a[1].tensor(),
            a[2].opt_tensor(),
            a[3].int(),
            reduction(&a[4]),
        )?,
        "cross_entropy_weighted" => nn::cross_entropy_weighted(
            a[0].tensor(),
            a[1].tensor(),
            a[2].opt_tensor(),
            a[3].int(),
            a[4].float(),
            reduction(&a[5]),
        )?,
        _ => return Ok(None),
    };
    Ok(Some(vec![out]))
}

/// A recorded convolution padding: `"same"`/`"valid"`, one int, or one int per dim.
pub(crate) fn conv_padding(a: &Arg) -> Result<nn::ConvPadding> {
    match a {
        Arg::Str(s) => nn::ConvPadding::parse(s),
        Arg::Int(i) => Ok(nn::ConvPadding::Explicit(vec![*i as usize])),
        other => Ok(nn::ConvPadding::Explicit(other.usizes())),
    }
}

/// `batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`: the
/// output, then (when given) the running statistics after the call (updated in training mode).
pub(crate) fn batch_norm(a: &[Arg]) -> Result<Vec<Tensor>> {
    let stats: Vec<Tensor> = a[1..3]
        .iter()
        .filter_map(|t| t.opt_tensor().map(Tensor::clone_tensor))
        .collect::<Result<_>>()?;
    let y = nn::batch_norm(
        a[0].tensor(),
        stats.first(),
        stats.get(1),
        a[3].opt_tensor(),
        a[4].opt_tensor(),
        a[5].bool(),
        a[6].float(),
        a[7].float(),
    )?;
    Ok(std::iter::once(y).chain(stats).collect())
}

/// `conv2d_grad(x, w, b, stride, padding, dilation, groups, grad_output)`: the gradients of
/// input, weight and bias.
pub(crate) fn conv2d_grad(a: &[Arg]) -> Result<Vec<Tensor>> {
    let leaves: Vec<Tensor> = a[..3]
        .iter()
        .map(|t| t.tensor().detach().requires_grad_(true))
        .collect::<Result<_>>()?;
    let y = nn::conv2d(
        &leaves[0],
        &leaves[1],
        Some(&leaves[2]),
        &a[3].usizes(),
        conv_padding(&a[4])?,
        &a[5].usizes(),
        a[6].int() as usize,
    )?;
    let g = tensorplay::autograd::grad(&[y], &leaves, &[Some(a[7].tensor().clone())], false)?;
    Ok(g.into_iter().map(|t| t.expect("a gradient")).collect())
}
