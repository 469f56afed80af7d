//! Convolutions (`torch.nn.functional.conv1d` / `conv2d` / `conv_transpose2d`): the `conv2d` op
//! (`ops::conv`, im2col + gemm) with PyTorch's argument forms — unbatched inputs, `"same"` and
//! `"valid"` padding — 1-D convolution as a 2-D one over a height of 1, and the
//! `conv_transpose2d` op with unbatched inputs.

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

use tensorplay_core::dispatch::call;
use tensorplay_core::ops::conv::{CONV_TRANSPOSE2D, CONV2D};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// A convolution's padding: explicit zero padding per spatial dim, or PyTorch's strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConvPadding {
    /// `"valid"`: no padding.
    Valid,
    /// `"same"`: the output has the input's size (stride 1 only); a kernel whose dilated span
    /// is even pads one more after than before, as PyTorch does.
    Same,
    /// The same padding on both sides of each spatial dim (one entry is used for every dim).
    Explicit(Vec<usize>),
}

impl From<usize> for ConvPadding {
    fn from(p: usize) -> Self {
        ConvPadding::Explicit(vec![p])
    }
}

impl<const N: usize> From<[usize; N]> for ConvPadding {
    fn from(p: [usize; N]) -> Self {
        ConvPadding::Explicit(p.to_vec())
    }
}

impl ConvPadding {
    /// `"same"` or `"valid"`, as PyTorch spells them.
    ///
    /// ```
    /// use tensorplay_runtime::nn::ConvPadding;
    /// assert_eq!(ConvPadding::parse("same")?, ConvPadding::Same);
    /// assert!(ConvPadding::parse("full").is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "same" => Ok(ConvPadding::Same),
            "valid" => Ok(ConvPadding::Valid),
            other => Err(Error::argument(
                "conv",
                "padding",
                "\"same\", \"valid\" or integers",
                format!("{other:?}"),
            )),
        }
    }
}

/// One entry per spatial dim from 1 or `dims` entries.
fn per_dim(op: &str, name: &str, v: &[usize], dims: usize) -> Result<Vec<usize>> {
    match v.len() {
        1 => Ok(vec![v[0]; dims]),
        n if n == dims => Ok(v.to_vec()),
        _ => Err(Error::argument(
            op,
            name,
            format!("1 or {dims} integers"),
            format!("{v:?}"),
        )),
    }
}

/// The op's `[top, bottom, left, right]` padding for a 2-D kernel of `[kh, kw]`.
fn resolve_padding(
    op: &str,
    padding: &ConvPadding,
    kernel: [usize; 2],
    stride: &[usize],
    dilation: &[usize],
) -> Result<Vec<i64>> {
    match padding {
        ConvPadding::Valid => Ok(vec![0; 4]),
        ConvPadding::Explicit(p) => {
            let p = per_dim(op, "padding", p, 2)?;
            Ok(vec![p[0], p[0], p[1], p[1]]
                .into_iter()
                .map(|x| x as i64)
                .collect())
        }
        ConvPadding::Same => {
            if stride.iter().any(|&s| s != 1) {
                return Err(Error::argument(
                    op,
                    "padding",
                    "stride 1 with padding=\"same\"",
                    format!("stride {stride:?}"),
                ));
            }
            let mut out = Vec::with_capacity(4);
            for d in 0..2 {
                let total = dilation[d] * kernel[d].saturating_sub(1);
                out.push((total / 2) as i64);
                out.push((total - total / 2) as i64);
            }
            Ok(out)
        }
    }
}

/// The batched `[N, C, H, W]` form of a 4-D (or unbatched 3-D) input, and whether it was
/// unbatched.
fn batched(op: &str, input: &Tensor, rank: usize) -> Result<(Tensor, bool)> {
    if input.rank() == rank {
        Ok((input.clone(), false))
    } else if input.rank() + 1 == rank {
        Ok((input.unsqueeze(0)?, true))
    } else {
        Err(Error::argument(
            op,
            "input",
            format!("a {}-D (unbatched) or {rank}-D (batched) tensor", rank - 1),
            format!("shape {}", fmt_shape(input.shape())),
        ))
    }
}

fn conv2d_call(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    padding: Vec<i64>,
    dilation: &[usize],
    groups: usize,
) -> Result<Tensor> {
    let ints = |v: &[usize]| Value::IntList(v.iter().map(|&x| x as i64).collect());
    let args = [
        Value::Tensor(input.clone()),
        Value::Tensor(weight.clone()),
        Value::OptionalTensor(bias.cloned()),
        ints(stride),
        Value::IntList(padding),
        ints(dilation),
        Value::Int(groups as i64),
    ];
    Ok(call(&CONV2D, &args)?.swap_remove(0))
}

/// 2-D convolution (`torch.nn.functional.conv2d`): `input` `[N, C, H, W]` (or unbatched
/// `[C, H, W]`), `weight` `[O, C / groups, kH, kW]`, optional `bias` `[O]`; `stride`,
/// `padding` and `dilation` take one entry for both dims or one per dim. f16/bf16 compute in
/// f32 and round once. Differentiable (to any order).
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::ones(&[1, 2, 5, 5], DType::F32);
/// let w = Tensor::ones(&[4, 2, 3, 3], DType::F32);
/// let y = nn::conv2d(&x, &w, None, &[1], 1, &[1], 1)?;
/// assert_eq!(y.shape(), &[1, 4, 5, 5]);
/// let v = y.to_vec::<f32>()?;
/// assert_eq!(v[0], 8.0); // a corner sees 2 channels x 4 taps
/// assert_eq!(v[2 * 5 + 2], 18.0); // the centre sees 2 channels x 9 taps
/// let same = nn::conv2d(&x, &w, None, &[1], nn::ConvPadding::parse("same")?, &[2], 1)?;
/// assert_eq!(same.shape(), &[1, 4, 5, 5]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn conv2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    padding: impl Into<ConvPadding>,
    dilation: &[usize],
    groups: usize,
) -> Result<Tensor> {
    const OP: &str = "conv2d";
    let (x, unbatched) = batched(OP, input, 4)?;
    let stride = per_dim(OP, "stride", stride, 2)?;
    let dilation = per_dim(OP, "dilation", dilation, 2)?;
    let kernel = match weight.shape() {
        [_, _, kh, kw] => [*kh, *kw],
        _ => [1, 1], // the op reports the weight's rank
    };
    let pad = resolve_padding(OP, &padding.into(), kernel, &stride, &dilation)?;
    let y = conv2d_call(&x, weight, bias, &stride, pad, &dilation, groups)?;
    if unbatched { y.squeeze(Some(0)) } else { Ok(y) }
}

/// 1-D convolution (`torch.nn.functional.conv1d`): `input` `[N, C, L]` (or unbatched
/// `[C, L]`), `weight` `[O, C / groups, k]`, optional `bias` `[O]`. Runs as a 2-D
/// convolution over a height of 1.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4])?;
/// let w = Tensor::from_vec(vec![1.0f32, -1.0], &[1, 1, 2])?;
/// let y = nn::conv1d(&x, &w, None, 1, 0, 1, 1)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![-1.0, -1.0, -1.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn conv1d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: usize,
    padding: impl Into<ConvPadding>,
    dilation: usize,
    groups: usize,
) -> Result<Tensor> {
    const OP: &str = "conv1d";
    let (x, unbatched) = batched(OP, input, 3)?;
    if weight.rank() != 3 {
        return Err(Error::argument(
            OP,
            "weight",
            "a 3-D [out_channels, in_channels / groups, k] tensor",
            format!("shape {}", fmt_shape(weight.shape())),
        ));
    }
    let k = weight.shape()[2];
    let pad = match padding.into() {
        ConvPadding::Explicit(p) => {
            let p = per_dim(OP, "padding", &p, 1)?;
            ConvPadding::Explicit(vec![0, p[0]])
        }
        other => other,
    };
    let pad = resolve_padding(OP, &pad, [1, k], &[1, stride], &[1, dilation])?;
    let y = conv2d_call(
        &x.unsqueeze(2)?,
        &weight.unsqueeze(2)?,
        bias,
        &[1, stride],
        pad,
        &[1, dilation],
        groups,
    )?
    .squeeze(Some(2))?;
    if unbatched { y.squeeze(Some(0)) } else { Ok(y) }
}

/// 2-D transposed convolution (`torch.nn.functional.conv_transpose2d`): `input`
/// `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`), `weight` `[C_in, C_out / groups, kH, kW]`,
/// optional `bias` `[C_out]`. `stride`, `padding`, `output_padding` and `dilation` take one
/// entry for both dims or one per dim; each output size is
/// `(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`, and
/// `output_padding` must be smaller than the stride or the dilation. It is the adjoint
/// (gradient) of [`conv2d`] with the same weight and sizes. f16/bf16 compute in f32 and round
/// once. Differentiable (to any order).
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::ones(&[1, 2, 3, 3], DType::F32);
/// let w = Tensor::ones(&[2, 4, 3, 3], DType::F32);
/// // stride 2, padding 1, output_padding 1: 3x3 -> 6x6
/// let y = nn::conv_transpose2d(&x, &w, None, &[2], &[1], &[1], 1, &[1])?;
/// assert_eq!(y.shape(), &[1, 4, 6, 6]);
/// assert_eq!(y.to_vec::<f32>()?[0], 2.0); // one tap from each of the 2 input channels
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d(
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: &[usize],
    padding: &[usize],
    output_padding: &[usize],
    groups: usize,
    dilation: &[usize],
) -> Result<Tensor> {
    const OP: &str = "conv_transpose2d";
    let (x, unbatched) = batched(OP, input, 4)?;
    let ints = |name: &str, v: &[usize]| -> Result<Value> {
        let v = per_dim(OP, name, v, 2)?;
        Ok(Value::IntList(v.iter().map(|&x| x as i64).collect()))
    };
    let args = [
        Value::Tensor(x),
        Value::Tensor(weight.clone()),
        Value::OptionalTensor(bias.cloned()),
        ints("stride", stride)?,
        ints("padding", padding)?,
        ints("output_padding", output_padding)?,
        Value::Int(groups as i64),
        ints("dilation", dilation)?,
    ];
    let y = call(&CONV_TRANSPOSE2D, &args)?.swap_remove(0);
    if unbatched { y.squeeze(Some(0)) } else { Ok(y) }
}
