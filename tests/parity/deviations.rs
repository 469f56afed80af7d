//! The documented differences from PyTorch (mirrored in docs/ops.md, "PyTorch parity").

use crate::compare::Mismatch;
use crate::data::{Arg, Case};
use tensorplay::DType;

/// A documented difference from PyTorch: the mismatches of `op` for which `applies` holds.
pub(crate) struct Deviation {
    pub(crate) op: &'static str,
    /// Whether it is a difference of the op's gradient (else of its forward result).
    pub(crate) gradient: bool,
    /// Which cases it covers, in words.
    pub(crate) what: &'static str,
    pub(crate) applies: fn(&Case, &Mismatch) -> bool,
    /// Why a user would accept it.
    pub(crate) reason: &'static str,
}

/// `|got - want| <= k` ulps of 1 in `dtype` (an absolute error bound).
pub(crate) fn within_eps(c: &Case, m: &Mismatch, k: f64) -> bool {
    let eps = match c.dtype() {
        Some(DType::F16) => 2f64.powi(-10),
        Some(DType::BF16) => 2f64.powi(-7),
        Some(DType::F32) => 2f64.powi(-23),
        _ => 2f64.powi(-52),
    };
    m.index.is_some() && (m.got - m.want).abs() <= k * eps * m.want.abs().max(1.0)
}

/// Whether the mismatch lies in a row of `layer_norm`'s input (over its normalized trailing
/// dims) whose elements are all equal.
pub(crate) fn in_constant_row(c: &Case, m: &Mismatch) -> bool {
    let (Some(i), Some(Arg::Tensor(x)), Some(Arg::Ints(dims))) =
        (m.index, c.args.first(), c.args.get(1))
    else {
        return false;
    };
    let n: i64 = dims.iter().product();
    let v = x.to_vec_f64().unwrap();
    let row = &v[i / n as usize * n as usize..][..n as usize];
    row.iter().all(|&e| e == row[0])
}

/// The deliberate differences from PyTorch (each also in docs/ops.md, "PyTorch parity").
pub(crate) static DEVIATIONS: &[Deviation] = &[
    Deviation {
        op: "conv2d",
        gradient: false,
        what: "f32 outputs within 4 ulps of 1 (absolute)",
        applies: |c, m| c.dtype() == Some(DType::F32) && within_eps(c, m, 4.0),
        reason: "im2col + gemm sums each output's products in gemm's order (PyTorch's oneDNN \
                 kernel in its own), so an output near zero, where terms of size ~1 cancel, \
                 differs by a fraction of an ulp of 1 (hundreds of its own ulps)",
    },
    Deviation {
        op: "conv_transpose2d",
        gradient: false,
        what: "f16/bf16 outputs within 4 ulps of 1 (absolute)",
        applies: |c, m| {
            matches!(c.dtype(), Some(DType::F16 | DType::BF16)) && within_eps(c, m, 4.0)
        },
        reason: "halves are computed in f32 and rounded once; PyTorch's CPU kernel rounds \
                 intermediate results to the half dtype, so its outputs are a few half ulps \
                 from the f32 result rounded once",
    },
    Deviation {
        op: "batch_norm",
        gradient: false,
        what: "f32/f64 results within 32 ulps of 1 (absolute); f16/bf16 without running \
               statistics",
        applies: |c, m| match c.dtype() {
            Some(DType::F16 | DType::BF16) => matches!(c.args.get(1), Some(Arg::None)),
            _ => within_eps(c, m, 32.0),
        },
        reason: "the statistics and `(x - mean) * rsqrt(var + eps) * w + b` are computed as \
                 written (in f32 for halves, rounded once), PyTorch's kernel folds them into \
                 one scale and shift per channel, so results differ in the last bits relative \
                 to 1; for half inputs without running statistics PyTorch's result is up to 7 \
                 half ulps from the f32 computation rounded once (its intermediate roundings \
                 on that path were not traced)",
    },
    Deviation {
        op: "group_norm",
        gradient: false,
        what: "f32/f64 results within 32 ulps of 1 (absolute)",
        applies: |c, m| within_eps(c, m, 32.0),
        reason: "as batch_norm: the formula as written against PyTorch's folded per-channel \
                 scale and shift",
    },
    Deviation {
        op: "interpolate",
        gradient: false,
        what: "linear modes: f32/f64 results within 8 ulps of 1 (absolute); f16/bf16 results",
        applies: |c, m| {
            let linear = matches!(
                c.args.get(3),
                Some(Arg::Str(s)) if matches!(s.as_str(), "linear" | "bilinear" | "trilinear")
            );
            linear
                && match c.dtype() {
                    Some(DType::F16 | DType::BF16) => m.index.is_some(),
                    _ => within_eps(c, m, 8.0),
                }
        },
        reason: "each separable pass (one per spatial dim) computes `x0 * w0 + x1 * w1` as \
                 two rounded products and a sum (PyTorch's kernel may contract them into fused \
                 multiply-adds and combines the dims in one expression), so an output near \
                 zero, where the terms cancel, differs by a fraction of an ulp of 1; f16/bf16 \
                 compute in f32 and round once (the half-precision rule), where PyTorch's half \
                 kernel rounds the weights and every product to the half dtype",
    },
    Deviation {
        op: "logit",
        gradient: false,
        what: "f16/bf16 results",
        applies: |c, m| c.dtype().is_some_and(DType::is_half) && m.index.is_some(),
        reason: "f16/bf16 compute in f32 and round once (eps and 1 - eps in f32 too), the \
                 half-precision rule, and compiled code computes the same; PyTorch's half \
                 kernel rounds 1 - x and x / (1 - x) to the half dtype (several ulps off near \
                 x = 0.5) and eps to it",
    },
    Deviation {
        op: "layer_norm",
        gradient: false,
        what: "f16/bf16 rows of equal elements; f32 results within 32 ulps of 1 (absolute)",
        applies: |c, m| match c.dtype() {
            Some(DType::F16 | DType::BF16) => in_constant_row(c, m),
            _ => within_eps(c, m, 32.0),
        },
        reason: "the row is centered before it is scaled, so an equal row normalizes to exactly \
                 0 (PyTorch's half kernels fuse x·rstd − mean·rstd into one fma and keep the \
                 rounding of mean·rstd), and a row whose mean is large against its spread does \
                 not cancel: PyTorch's x·rstd − mean·rstd loses about |mean|/std ulps of 1 in \
                 f32 (the recorded rows: mean ≈ 50, spread ≈ 3)",
    },
    Deviation {
        op: "sign",
        gradient: false,
        what: "sign(NaN)",
        applies: |_, m| m.input.is_some_and(f64::is_nan),
        reason: "NaN propagates (sign(NaN) = NaN, as numpy); PyTorch returns 0, which hides the NaN",
    },
    Deviation {
        op: "abs",
        gradient: false,
        what: "abs of a bool tensor",
        applies: |c, _| c.dtype() == Some(DType::Bool),
        reason: "the identity (nonzero stays true); PyTorch has no bool kernel and raises",
    },
    Deviation {
        op: "gelu",
        gradient: false,
        what: "negative inputs (and +inf in f32/f16/bf16)",
        applies: |c, m| {
            m.input
                .is_some_and(|x| x < 0.0 || (x == f64::INFINITY && c.dtype() != Some(DType::F64)))
        },
        reason: "evaluated in cancellation-free forms in f64 (within 4 ulp of the exact function, \
                 checked against mpmath references in this file); PyTorch's 0.5x(1 + erf(x/√2)) \
                 cancels for negative x (tens of ulps near x = -2, -0.0 where the result is 1e-23) \
                 and its vectorized f32 kernel returns NaN for gelu(inf)",
    },
    Deviation {
        op: "log_softmax",
        gradient: false,
        what: "results within 4 ulps of 1 (absolute)",
        applies: |c, m| within_eps(c, m, 4.0),
        reason: "x - max - log(Σ exp(x - max)) carries the rounding of log(Σ), an absolute error \
                 of ulps of 1; f16/bf16 compute in f32 and round once, PyTorch's half kernels \
                 round intermediates (bf16 log_softmax can come out 0 there)",
    },
    Deviation {
        op: "remainder",
        gradient: false,
        what: "an infinite divisor; the sign of a zero result",
        applies: |c, m| {
            (m.got == 0.0 && m.want == 0.0)
                || m.index.is_some_and(|i| {
                    c.args.get(1).and_then(|a| match a {
                        Arg::Tensor(t) => t.to_vec_f64().ok().map(|v| v[i].is_infinite()),
                        _ => None,
                    }) == Some(true)
                })
        },
        reason: "evaluates the documented formula a - floor(a/b)·b (as compiled code does), \
                 which is NaN for b = ±inf and +0.0 for remainder(-0.0, 1); PyTorch's kernel \
                 goes through fmod and returns a or b, and -0.0",
    },
    Deviation {
        op: "fmax",
        gradient: false,
        what: "0.0 vs -0.0",
        applies: |_, m| m.got == 0.0 && m.want == 0.0,
        reason: "equal operands return the second one, like maximum/minimum and compiled code; \
                 PyTorch's std::fmax returns the first",
    },
    Deviation {
        op: "fmin",
        gradient: false,
        what: "0.0 vs -0.0",
        applies: |_, m| m.got == 0.0 && m.want == 0.0,
        reason: "equal operands return the second one, like maximum/minimum and compiled code; \
                 PyTorch's std::fmin returns the first",
    },
    Deviation {
        op: "clamp",
        gradient: false,
        what: "integer bounds outside an i32 tensor's range",
        applies: |c, m| m.index.is_none() && c.dtype() == Some(DType::I32),
        reason: "an argument error naming the bound; PyTorch converts the bound unchecked when \
                 both are given (and raises when only one is), so the clamp silently uses a \
                 wrapped bound",
    },
    Deviation {
        op: "sqrt",
        gradient: false,
        what: "f32 results 1 ulp apart",
        applies: |_, m| m.ulps == Some(1),
        reason: "IEEE sqrt, correctly rounded; PyTorch's vectorized f32 sqrt on the recording \
                 machine was 1 ulp off for some inputs (sqrt(65504))",
    },
    Deviation {
        op: "erf",
        gradient: false,
        what: "tiny bf16 results PyTorch flushes to 0",
        applies: |c, m| c.dtype() == Some(DType::BF16) && m.want == 0.0 && m.got.abs() < 1e-7,
        reason: "erf(x) ≈ 1.13x for tiny x is kept; PyTorch's bf16 erf returns 0 below ~1e-7",
    },
    Deviation {
        op: "arange",
        gradient: false,
        what: "f64 values a few ulps apart",
        applies: |c, m| {
            m.ulps.is_some_and(|u| u <= 4) && matches!(c.args.get(3), Some(Arg::DType(DType::F64)))
        },
        reason: "each value is start + i·step rounded once (an fma: correctly rounded); \
                 PyTorch's vectorized kernel adds j·step to the start of each 4-element block \
                 (three roundings), so its last bits depend on the position and on the CPU",
    },
    Deviation {
        op: "sinc",
        gradient: false,
        what: "f32/f16/bf16 results",
        applies: |c, _| c.dtype() != Some(DType::F64),
        reason: "the f64 value rounded once (the libm rule); PyTorch computes f32 (and halves) \
                 in f32, so next to a nonzero integer, where the exact result is 0, it returns \
                 ~1e-8 of either sign, and elsewhere a few ulps off",
    },
    Deviation {
        op: "cross_entropy_weighted",
        gradient: false,
        what: "f16/bf16 results within 4 ulps of 1 (absolute)",
        applies: |c, m| c.dtype().is_some_and(DType::is_half) && within_eps(c, m, 4.0),
        reason: "as log_softmax: ours is computed in f32 and rounded once, PyTorch's half \
                 log_softmax rounds its intermediates (0.7% off for a probability near 1), and \
                 the class weight scales that difference",
    },
    Deviation {
        op: "sinc",
        gradient: true,
        what: "gradients within 64 ulps of 1 (absolute)",
        applies: |c, m| within_eps(c, m, 64.0),
        reason: "ours is (cos(πx) − sinc(x))/x, PyTorch's (πx·cos(πx) − sin(πx))/(πx²); each \
                 cancels where its two terms are close, in different places",
    },
    Deviation {
        op: "hardsigmoid",
        gradient: true,
        what: "f64 gradients 3e-8 apart (relative)",
        applies: |c, m| {
            c.dtype() == Some(DType::F64) && (m.got - m.want).abs() <= 4e-8 * m.want.abs()
        },
        reason: "ours divides by 6 in f64; PyTorch's f64 kernel multiplies by 1/6 rounded to f32",
    },
    Deviation {
        op: "cross_entropy_weighted",
        gradient: true,
        what: "f32/f64 gradients within 64 ulps",
        applies: |_, m| m.ulps.is_some_and(|u| u <= 64),
        reason: "a target logit whose probability p is near 1 gets w·(p − 1), which cancels: \
                 the ulp of exp(log_softmax) (ours from the math library, PyTorch's from SLEEF) \
                 becomes 1/(1 − p) ulps of the gradient (about 25 in the recorded rows)",
    },
    Deviation {
        op: "scaled_dot_product_attention",
        gradient: true,
        what: "f32/f64 gradients within 32 ulps of 1 (absolute)",
        applies: |c, m| !c.dtype().is_some_and(DType::is_half) && within_eps(c, m, 32.0),
        reason: "the fused backward sums each row's terms in its own order (PyTorch's goes \
                 through BLAS), so a gradient near zero differs by ulps of the terms' size (up \
                 to ~10 for the recorded inputs of size ~4)",
    },
];
