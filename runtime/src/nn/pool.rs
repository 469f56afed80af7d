//! 2-D pooling (`torch.nn.functional.max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`) over
//! `[N, C, H, W]` or unbatched `[C, H, W]` inputs: the pooling ops of `ops::pool`.

use tensorplay_core::dispatch::call;
use tensorplay_core::ops::pool::{ADAPTIVE_AVG_POOL2D, AVG_POOL2D, MAX_POOL2D_WITH_INDICES};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;
use tensorplay_ir::Result;

fn ints(v: &[usize]) -> Value {
    Value::IntList(v.iter().map(|&x| x as i64).collect())
}

/// Max pooling and the flat index (`h * W + w` within its plane, i64) of each maximum. An
/// empty `stride` means the kernel size; `kernel_size`, `stride`, `padding` and `dilation` take
/// one entry for both dims or one per dim. Padding counts as `-inf`, at most half the
/// (dilated) kernel; with `ceil_mode` the last window may hang over the end (but not start in
/// the right padding). A NaN in a window is its maximum.
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 1, 4, 4])?;
/// let (y, i) = nn::max_pool2d_with_indices(&x, &[2], &[], &[0], &[1], false)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// assert_eq!(i.to_vec::<i64>()?, vec![5, 7, 13, 15]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn max_pool2d_with_indices(
    input: &Tensor,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
) -> Result<(Tensor, Tensor)> {
    let mut out = call(
        &MAX_POOL2D_WITH_INDICES,
        &[
            Value::Tensor(input.clone()),
            ints(kernel_size),
            ints(stride),
            ints(padding),
            ints(dilation),
            Value::Bool(ceil_mode),
        ],
    )?;
    let indices = out.pop().expect("two outputs");
    Ok((out.pop().expect("two outputs"), indices))
}

/// Max pooling (`torch.nn.functional.max_pool2d`); see [`max_pool2d_with_indices`] for the
/// arguments.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::randn_seeded(&[2, 3, 7, 7], DType::F32, 0)?;
/// let y = nn::max_pool2d(&x, &[3], &[2], &[1], &[1], true)?;
/// assert_eq!(y.shape(), &[2, 3, 4, 4]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn max_pool2d(
    input: &Tensor,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    ceil_mode: bool,
) -> Result<Tensor> {
    Ok(max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)?.0)
}

/// Average pooling (`torch.nn.functional.avg_pool2d`). An empty `stride` means the kernel
/// size. Each window's sum is divided by `divisor_override` when given, else by the window's
/// size clipped to the padded input (`count_include_pad`) or to the input (otherwise).
///
/// ```
/// use tensorplay_runtime::{nn, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2])?;
/// let y = nn::avg_pool2d(&x, &[2], &[1], &[1], false, false, None)?;
/// assert_eq!(y.shape(), &[1, 3, 3]);
/// assert_eq!(y.to_vec::<f32>()?[0], 1.0); // the corner window holds one value
/// let y = nn::avg_pool2d(&x, &[2], &[1], &[1], false, true, None)?;
/// assert_eq!(y.to_vec::<f32>()?[0], 0.25); // ... of four, counting the padding
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn avg_pool2d(
    input: &Tensor,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> Result<Tensor> {
    Ok(call(
        &AVG_POOL2D,
        &[
            Value::Tensor(input.clone()),
            ints(kernel_size),
            ints(stride),
            ints(padding),
            Value::Bool(ceil_mode),
            Value::Bool(count_include_pad),
            divisor_override.map_or(Value::None, Value::Int),
        ],
    )?
    .swap_remove(0))
}

/// Adaptive average pooling (`torch.nn.functional.adaptive_avg_pool2d`) to `output_size`
/// (one entry for both dims or one per dim): output `i` of `m` averages input rows
/// `floor(i * n / m) .. ceil((i + 1) * n / m)`.
///
/// ```
/// use tensorplay_runtime::{nn, DType, Tensor};
/// let x = Tensor::ones(&[2, 8, 7, 5], DType::F32);
/// let y = nn::adaptive_avg_pool2d(&x, &[1])?;
/// assert_eq!(y.shape(), &[2, 8, 1, 1]);
/// assert!(y.to_vec::<f32>()?.iter().all(|&v| v == 1.0));
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn adaptive_avg_pool2d(input: &Tensor, output_size: &[usize]) -> Result<Tensor> {
    Ok(call(
        &ADAPTIVE_AVG_POOL2D,
        &[Value::Tensor(input.clone()), ints(output_size)],
    )?
    .swap_remove(0))
}
