//! Comparing an output with PyTorch's: bit patterns, ulp distances, the tolerance per op.

use half::{bf16, f16};
use tensorplay::{DType, Tensor};

/// One differing output element (or, with `index: None`, a differing dtype, shape or outcome).
pub(crate) struct Mismatch {
    pub(crate) index: Option<usize>,
    pub(crate) got: f64,
    pub(crate) want: f64,
    /// The first tensor argument's element at the same index, when the shapes agree.
    pub(crate) input: Option<f64>,
    /// The distance in ulps of the result dtype (same-signed finite floats only).
    pub(crate) ulps: Option<u64>,
}

impl Mismatch {
    pub(crate) fn with(self, text: String) -> (Mismatch, String) {
        (self, text)
    }
}

/// Ulp tolerance of an op's results (0 = bit-exact).
pub(crate) fn ulp_tolerance(op: &str, dtype: DType) -> u64 {
    const TRANSCENDENTAL: &[&str] = &[
        "exp",
        "log",
        "log1p",
        "expm1",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "silu",
        "erf",
        "gelu",
        "log2",
        "log10",
        "exp2",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "mish",
        "softplus",
        "elu",
        "logit",
        "softmax",
        "log_softmax",
        "atan2",
        "pow",
        "rsqrt",
        "hypot",
        "hardswish",
        "hardsigmoid",
    ];
    const ACCUMULATING: &[&str] = &[
        "sum",
        "mean",
        "prod",
        "var",
        "std",
        "cumsum",
        "logsumexp",
        "norm",
        "layer_norm",
        "rms_norm",
        "batch_norm",
        "group_norm",
        "avg_pool2d",
        "adaptive_avg_pool2d",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "nll_loss_weighted",
        "cross_entropy_weighted",
    ];
    if op == "scaled_dot_product_attention" {
        // Two products around a softmax: the weighted sum of `v` cancels for small outputs.
        if dtype.is_half() { 1 } else { 128 }
    } else if matches!(
        op,
        "matmul" | "linear" | "conv1d" | "conv2d" | "conv2d_grad" | "conv_transpose2d"
    ) {
        // Dot products: the summation order of gemm differs from PyTorch's BLAS, and
        // cancellation turns a rounding difference of the sum into several ulps of the result.
        if dtype.is_half() { 1 } else { 64 }
    } else if TRANSCENDENTAL.contains(&op) || ACCUMULATING.contains(&op) {
        if dtype.is_half() { 1 } else { 4 }
    } else {
        0
    }
}

/// The elements of `t` as (bits, is_nan) in its own width.
pub(crate) fn bits(t: &Tensor) -> Vec<(u64, bool)> {
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| (v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| (v.to_bits(), v.is_nan()))
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| (v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| (v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| (v as u32 as u64, false))
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| (v as u64, false))
            .collect(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|&v| (v as u64, false))
            .collect(),
    }
}

/// Sign bit, magnitude and whether the magnitude is the dtype's infinity.
pub(crate) fn float_parts(bits: u64, dtype: DType) -> (bool, u64, bool) {
    let (sign, inf) = match dtype {
        DType::F32 => (1u64 << 31, 0x7f80_0000),
        DType::F64 => (1u64 << 63, 0x7ff0_0000_0000_0000),
        DType::F16 => (1 << 15, 0x7c00),
        DType::BF16 => (1 << 15, 0x7f80),
        _ => unreachable!(),
    };
    let mag = bits & (sign - 1);
    (bits & sign != 0, mag, mag == inf)
}

/// The smallest normal magnitude of a float dtype.
pub(crate) fn min_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-14),
        DType::BF16 | DType::F32 => f32::MIN_POSITIVE as f64,
        _ => f64::MIN_POSITIVE,
    }
}

/// Compares one output: `Err` for a differing dtype or shape, else the differing elements.
/// `tol` is the ulp tolerance; within it, results that are both below the smallest normal
/// also agree (PyTorch's vectorized exp/erf flush some subnormal results to zero). `abs` is an
/// absolute bound that also accepts finite results (0: none; gradients use one, see
/// `grad::abs_bound`).
pub(crate) fn compare(
    got: &Tensor,
    want: &Tensor,
    input: Option<&Tensor>,
    tol: u64,
    abs: f64,
) -> std::result::Result<Vec<Mismatch>, String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {} (PyTorch: {})", got.dtype(), want.dtype()));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} (PyTorch: {:?})",
            got.shape(),
            want.shape()
        ));
    }
    let dtype = want.dtype();
    let (g, w) = (bits(got), bits(want));
    let gv = got.to_vec_f64().unwrap();
    let wv = want.to_vec_f64().unwrap();
    let iv = input
        .filter(|t| t.numel() == want.numel())
        .map(|t| t.to_vec_f64().unwrap());
    let mut out = Vec::new();
    for (i, (&(gb, gnan), &(wb, wnan))) in g.iter().zip(&w).enumerate() {
        let mut ulps = None;
        let ok = if gnan || wnan {
            gnan && wnan
        } else if gb == wb {
            true
        } else if dtype.is_float() {
            let (gs, gm, ginf) = float_parts(gb, dtype);
            let (ws, wm, winf) = float_parts(wb, dtype);
            if gs == ws && !ginf && !winf {
                ulps = Some(gm.abs_diff(wm));
            }
            let tiny = gv[i].abs() < min_normal(dtype) && wv[i].abs() < min_normal(dtype);
            let near = ginf || winf || (gv[i] - wv[i]).abs() <= abs;
            (tol > 0 && (tiny || (gm != 0 && wm != 0 && ulps.is_some_and(|u| u <= tol))))
                || (abs > 0.0 && near && !(ginf || winf))
        } else {
            false
        };
        if !ok {
            out.push(Mismatch {
                index: Some(i),
                got: gv[i],
                want: wv[i],
                input: iv.as_ref().map(|v| v[i]),
                ulps,
            });
        }
    }
    Ok(out)
}
