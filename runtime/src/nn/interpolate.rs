//! Resizing (`torch.nn.functional.interpolate`) of `[N, C, d1, …, dk]` inputs (k = 1, 2, 3):
//! nearest, nearest-exact, (bi/tri)linear and area modes. The linear modes are separable, so a
//! resize is one pass per spatial dim, last dim first (the order PyTorch's CPU kernel combines
//! them in): two `index_select`s and a weighted sum with weights computed, as PyTorch computes
//! them, from the (guarded) sizes. Nearest modes are one `index_select` per dim; area mode is
//! adaptive average pooling. f16/bf16 inputs compute in f32 and round once.

use tensorplay_core::tensor::Tensor;
use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{DType, Error, Result};

use super::pad::table;
use super::pool::adaptive_avg_pool2d;

const OP: &str = "interpolate";

/// How [`interpolate`] computes a new element (PyTorch's `mode=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InterpolateMode {
    /// The element at `floor(j * in / out)` (PyTorch's `"nearest"`, kept for compatibility
    /// although it is not centred).
    #[default]
    Nearest,
    /// The element at `floor((j + 0.5) * in / out)` (`"nearest-exact"`).
    NearestExact,
    /// Linear interpolation along the one spatial dim of a 3-D input.
    Linear,
    /// Linear interpolation along both spatial dims of a 4-D input.
    Bilinear,
    /// Linear interpolation along the three spatial dims of a 5-D input.
    Trilinear,
    /// The average over each output element's window (adaptive average pooling).
    Area,
}

impl InterpolateMode {
    /// The mode as PyTorch names it: `"nearest"`, `"nearest-exact"`, `"linear"`,
    /// `"bilinear"`, `"trilinear"` or `"area"` (`"bicubic"` is an error: not implemented).
    ///
    /// ```
    /// use tensorplay_runtime::nn::InterpolateMode;
    /// assert_eq!(InterpolateMode::parse("bilinear")?, InterpolateMode::Bilinear);
    /// assert!(InterpolateMode::parse("bicubic").is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn parse(mode: &str) -> Result<InterpolateMode> {
        use InterpolateMode::*;
        Ok(match mode {
            "nearest" => Nearest,
            "nearest-exact" => NearestExact,
            "linear" => Linear,
            "bilinear" => Bilinear,
            "trilinear" => Trilinear,
            "area" => Area,
            other => {
                return Err(Error::argument(
                    OP,
                    "mode",
                    "one of nearest, nearest-exact, linear, bilinear, trilinear, area \
                     (bicubic is not implemented)",
                    format!("{other:?}"),
                ));
            }
        })
    }

    fn name(self) -> &'static str {
        use InterpolateMode::*;
        match self {
            Nearest => "nearest",
            NearestExact => "nearest-exact",
            Linear => "linear",
            Bilinear => "bilinear",
            Trilinear => "trilinear",
            Area => "area",
        }
    }

    /// The input rank a linear mode needs (`None`: any of 3, 4, 5).
    fn rank(self) -> Option<usize> {
        match self {
            InterpolateMode::Linear => Some(3),
            InterpolateMode::Bilinear => Some(4),
            InterpolateMode::Trilinear => Some(5),
            _ => None,
        }
    }
}

/// Resizes the spatial dims of `input` (`[N, C, d1, …, dk]`, k = 1, 2 or 3) to `size`, or to
/// `floor(d * scale_factor)` — exactly one of the two, each one entry for every spatial dim or one
/// per dim. `align_corners` (linear modes only; `None` is `false`) maps the corner elements onto
/// each other. With `scale_factor` the source positions use `1 / scale_factor`, unless
/// `recompute_scale_factor` is `Some(true)` (then `in / out`), as in PyTorch. Nearest modes work
/// on every dtype; linear and area modes need a floating-point input.
///
/// ```
/// use tensorplay_runtime::nn::{self, InterpolateMode};
/// use tensorplay_runtime::Tensor;
/// let x = Tensor::from_vec(vec![0.0f32, 1.0, 2.0, 3.0], &[1, 1, 2, 2])?;
/// let y = nn::interpolate(&x, Some(&[4]), None, InterpolateMode::Nearest, None, None)?;
/// assert_eq!(y.shape(), &[1, 1, 4, 4]);
/// let l = nn::interpolate(&x, None, Some(&[1.5]), InterpolateMode::Bilinear, Some(true), None)?;
/// assert_eq!(l.to_vec::<f32>()?, vec![0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn interpolate(
    input: &Tensor,
    size: Option<&[usize]>,
    scale_factor: Option<&[f64]>,
    mode: InterpolateMode,
    align_corners: Option<bool>,
    recompute_scale_factor: Option<bool>,
) -> Result<Tensor> {
    let rank = input.rank();
    check_mode(input, mode, align_corners)?;
    let k = rank - 2;
    let shape = input.shape().to_vec();
    let (out, scales) = output_sizes(&shape, size, scale_factor, recompute_scale_factor)?;
    if shape[2..].contains(&0) || out.contains(&0) {
        return Err(Error::argument(
            OP,
            "size",
            "input and output sizes greater than 0 in every spatial dim",
            format!(
                "input {} and output size {}",
                fmt_shape(&shape),
                fmt_shape(&out)
            ),
        ));
    }
    if mode == InterpolateMode::Area {
        return area(input, &out);
    }
    let compute = match input.dtype() {
        d if d.is_half() && mode.rank().is_some() => DType::F32,
        d => d,
    };
    let mut x = input.to_dtype(compute)?;
    for i in (0..k).rev() {
        let d = i + 2;
        let (n, m) = (shape[d], out[i]);
        x = match mode {
            InterpolateMode::Nearest | InterpolateMode::NearestExact => {
                let index = nearest_index(mode, n, m, scales[i])?;
                x.index_select(d as i64, &index_tensor(index, &x)?)?
            }
            _ => linear(&x, d, (n, m), scales[i], align_corners.unwrap_or(false))?,
        };
    }
    x.to_dtype(input.dtype())
}

/// The rank, dtype and `align_corners` rules of `mode`, with PyTorch's limits.
fn check_mode(input: &Tensor, mode: InterpolateMode, align_corners: Option<bool>) -> Result<()> {
    let rank = input.rank();
    if !(3..=5).contains(&rank) || mode.rank().is_some_and(|r| r != rank) {
        let expected = match mode.rank() {
            Some(r) => format!("a {r}-D input [N, C, …] for mode {}", mode.name()),
            None => format!("a 3-D, 4-D or 5-D input [N, C, …] for mode {}", mode.name()),
        };
        return Err(Error::argument(
            OP,
            "input",
            expected,
            format!("shape {}", fmt_shape(input.shape())),
        ));
    }
    if align_corners.is_some() && mode.rank().is_none() {
        return Err(Error::argument(
            OP,
            "align_corners",
            "None for mode nearest, nearest-exact and area (it is an option of the linear modes)",
            format!("{align_corners:?} with mode {}", mode.name()),
        ));
    }
    let float_only = !matches!(
        mode,
        InterpolateMode::Nearest | InterpolateMode::NearestExact
    );
    if float_only && !input.dtype().is_float() {
        return Err(Error::dtype(
            OP,
            format!(
                "mode {} needs a floating-point input, got {}",
                mode.name(),
                input.dtype()
            ),
        ));
    }
    Ok(())
}

/// The output size of each spatial dim, and the scale PyTorch hands its kernels (`1 / scale` is
/// used for source positions; `None`: `in / out`).
fn output_sizes(
    shape: &[usize],
    size: Option<&[usize]>,
    scale_factor: Option<&[f64]>,
    recompute: Option<bool>,
) -> Result<(Vec<usize>, Vec<Option<f64>>)> {
    let k = shape.len() - 2;
    let per_dim = |arg: &str, n: usize| -> Result<()> {
        if n == 1 || n == k {
            return Ok(());
        }
        Err(Error::argument(
            OP,
            arg,
            format!(
                "1 entry or one per spatial dim ({k}) of input {}",
                fmt_shape(shape)
            ),
            format!("{n} entries"),
        ))
    };
    let pick = |n: usize, i: usize| if n == 1 { 0 } else { i };
    match (size, scale_factor) {
        (Some(s), None) => {
            per_dim("size", s.len())?;
            Ok(((0..k).map(|i| s[pick(s.len(), i)]).collect(), vec![None; k]))
        }
        (None, Some(f)) => {
            per_dim("scale_factor", f.len())?;
            let mut out = Vec::with_capacity(k);
            for i in 0..k {
                let v = (shape[i + 2] as f64 * f[pick(f.len(), i)]).floor();
                if !(v >= 1.0 && v < (1u64 << 53) as f64) {
                    return Err(Error::argument(
                        OP,
                        "scale_factor",
                        "factors giving every spatial dim an output size of at least 1",
                        format!("{f:?} for input {}", fmt_shape(shape)),
                    ));
                }
                out.push(v as usize);
            }
            let scales = if recompute == Some(true) {
                vec![None; k]
            } else {
                (0..k).map(|i| Some(f[pick(f.len(), i)])).collect()
            };
            Ok((out, scales))
        }
        (s, _) => Err(Error::argument(
            OP,
            if s.is_some() { "scale_factor" } else { "size" },
            "exactly one of size and scale_factor",
            if s.is_some() { "both" } else { "neither" },
        )),
    }
}

/// `in / out`, or `1 / scale` when a positive scale was given (PyTorch's
/// `compute_scales_value`), each operation rounded by `round` to the compute type (exact for
/// `/` done in f64 and rounded to f32).
fn source_scale(n: usize, m: usize, scale: Option<f64>, round: impl Fn(f64) -> f64) -> f64 {
    match scale {
        Some(s) if s > 0.0 => round(1.0 / s),
        _ => round(round(n as f64) / round(m as f64)),
    }
}

/// `v` rounded to f32 (kept as f64).
fn to_f32(v: f64) -> f64 {
    v as f32 as f64
}

/// The source element of each output position, computed in f32 as PyTorch's CPU kernels do.
fn nearest_index(
    mode: InterpolateMode,
    n: usize,
    m: usize,
    scale: Option<f64>,
) -> Result<Vec<i64>> {
    let last = n as i64 - 1;
    let s = source_scale(n, m, scale, to_f32) as f32;
    let mut index = table(OP, "size", m)?;
    index.extend((0..m).map(|j| match mode {
        InterpolateMode::Nearest if m == n => j as i64,
        InterpolateMode::Nearest if m == 2 * n => (j >> 1) as i64,
        InterpolateMode::Nearest => ((j as f32 * s).floor() as i64).min(last),
        _ => (((j as f32 + 0.5) * s).floor() as i64).min(last),
    }));
    Ok(index)
}

fn index_tensor(index: Vec<i64>, like: &Tensor) -> Result<Tensor> {
    let n = index.len();
    Tensor::from_vec(index, &[n])?.to_device(like.device())
}

/// One linear pass along dim `d` (size `n` → `m`): `x[i0] * w0 + x[i1] * w1`, with the source
/// positions and weights of PyTorch's `area_pixel_compute_source_index` in the compute dtype.
fn linear(
    x: &Tensor,
    d: usize,
    (n, m): (usize, usize),
    scale: Option<f64>,
    corners: bool,
) -> Result<Tensor> {
    let taps = linear_taps(n, m, scale, corners, x.dtype() == DType::F64)?;
    let mut at = vec![1; x.rank() - d];
    at[0] = m;
    let weights = |w: Vec<f64>| -> Result<Tensor> {
        Tensor::from_vec(w, &at)?
            .to_dtype(x.dtype())?
            .to_device(x.device())
    };
    let a = x.index_select(d as i64, &index_tensor(taps.i0, x)?)?;
    let b = x.index_select(d as i64, &index_tensor(taps.i1, x)?)?;
    a.mul(&weights(taps.w0)?)?.add(&b.mul(&weights(taps.w1)?)?)
}

/// Per output position: the two source elements and their weights.
struct Taps {
    i0: Vec<i64>,
    i1: Vec<i64>,
    w0: Vec<f64>,
    w1: Vec<f64>,
}

/// The taps as PyTorch computes them in its compute type: f64 for f64 inputs, else f32 (each
/// f32 operation is done in f64 and rounded to f32, which is exact for `+ - * /`).
fn linear_taps(
    n: usize,
    m: usize,
    scale: Option<f64>,
    corners: bool,
    f64_input: bool,
) -> Result<Taps> {
    let r = |v: f64| if f64_input { v } else { to_f32(v) };
    let step = match corners {
        true if m > 1 => r((n - 1) as f64 / (m - 1) as f64),
        true => 0.0,
        false => source_scale(n, m, scale, r),
    };
    let last = n as i64 - 1;
    let mut taps = Taps {
        i0: table(OP, "size", m)?,
        i1: table(OP, "size", m)?,
        w0: table(OP, "size", m)?,
        w1: table(OP, "size", m)?,
    };
    for j in 0..m {
        let real = if corners {
            r(step * r(j as f64))
        } else {
            r(r(step * r(r(j as f64) + 0.5)) - 0.5).max(0.0)
        };
        let i0 = (real.floor() as i64).min(last);
        let l1 = r(real - i0 as f64).clamp(0.0, 1.0);
        taps.i0.push(i0);
        taps.i1.push(if i0 < last { i0 + 1 } else { i0 });
        taps.w0.push(r(1.0 - l1));
        taps.w1.push(l1);
    }
    Ok(taps)
}

/// Area mode: adaptive average pooling over the spatial dims (3-D inputs as a 1-row image; 5-D
/// inputs pool height × width, then depth — the windows are boxes, so the two passes average
/// the same elements).
fn area(x: &Tensor, out: &[usize]) -> Result<Tensor> {
    let s = x.shape().to_vec();
    match out.len() {
        1 => adaptive_avg_pool2d(&x.unsqueeze(2)?, &[1, out[0]])?.squeeze(Some(2)),
        2 => adaptive_avg_pool2d(x, out),
        _ => {
            let (n, c, d) = (s[0], s[1], s[2]);
            let hw = adaptive_avg_pool2d(&x.reshape(&[n, c * d, s[3], s[4]])?, &out[1..])?;
            let plane = out[1] * out[2];
            let v = adaptive_avg_pool2d(&hw.reshape(&[n, c, d, plane])?, &[out[0], plane])?;
            v.reshape(&[n, c, out[0], out[1], out[2]])
        }
    }
}
