//! The compiled-vs-eager comparison of the numerics contract (DESIGN.md §5b), shared by the
//! regression tests and the file tests: tolerances, the ulp metric and an element-wise compare that
//! reports a repro. Each test file includes it with `#[path = "common/numerics.rs"] mod numerics;`.

#![allow(dead_code)]

use tensorplay_runtime::{DType, Tensor};

/// How closely a compiled float result must match eager's (integer and bool results always
/// match exactly).
#[derive(Debug, Clone)]
pub enum Tol {
    /// Bit-identical (any NaN equals any NaN; `-0.0 != 0.0`).
    Exact,
    /// Equal as values (any NaN equals any NaN, and `-0.0 == 0.0`): extrema of a reduction may
    /// pick either zero.
    ValueEq,
    /// Within this many ulps of the output dtype; NaN, infinities and zeros as eager's (an
    /// infinity may meet a finite value at the overflow threshold).
    Ulps(f64),
    /// Within a bound per element (row-major over the output shape); NaN and infinities exact.
    Bound(Vec<f64>),
}

/// The spacing of `dtype`'s values at `|v|` (subnormal spacing below the normal range).
pub fn ulp(v: f64, dtype: DType) -> f64 {
    let (p, emin) = match dtype {
        DType::F16 => (11, -14),
        DType::BF16 => (8, -126),
        DType::F32 => (24, -126),
        _ => (53, -1022),
    };
    let a = v.abs();
    if !a.is_finite() {
        return f64::INFINITY;
    }
    let e = if a < f64::MIN_POSITIVE {
        emin
    } else {
        (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin)
    };
    pow2(e - (p - 1))
}

/// `2^k` for every k an f64 can hold, subnormal powers included (`powi` underflows them to 0).
pub fn pow2(k: i32) -> f64 {
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074).max(0))
    }
}

pub fn max_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 65504.0,
        DType::BF16 => 3.389_531_389_251_535e38,
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

pub fn eps(dtype: DType) -> f64 {
    ulp(1.0, dtype)
}

/// Whether `got` may stand for `want` within `bound` (absolute), with NaN and infinities
/// compared exactly except at the overflow threshold.
pub fn close(got: f64, want: f64, bound: f64, dtype: DType) -> bool {
    if got.is_nan() || want.is_nan() {
        return got.is_nan() && want.is_nan();
    }
    if got == want {
        return true;
    }
    if got.is_infinite() || want.is_infinite() {
        let (inf, fin) = if got.is_infinite() {
            (got, want)
        } else {
            (want, got)
        };
        return fin.is_finite()
            && fin.signum() == inf.signum()
            && fin.abs() + bound >= max_finite(dtype);
    }
    (got - want).abs() <= bound
}

pub fn float_ok(got: f64, want: f64, tol: &Tol, i: usize, dtype: DType) -> bool {
    match tol {
        Tol::Exact => (got.is_nan() && want.is_nan()) || got.to_bits() == want.to_bits(),
        Tol::ValueEq => (got.is_nan() && want.is_nan()) || got == want,
        Tol::Ulps(u) => close(got, want, u * ulp(got, dtype).max(ulp(want, dtype)), dtype),
        Tol::Bound(b) => close(got, want, b[i], dtype),
    }
}

/// Element `i` (row-major) of `t` as text, exact for every dtype.
pub fn show(t: &Tensor, i: usize) -> String {
    let Ok(c) = t.contiguous() else {
        return "?".into();
    };
    match t.dtype() {
        DType::Bool => c
            .to_vec::<bool>()
            .map(|v| v[i].to_string())
            .unwrap_or_default(),
        DType::I32 | DType::I64 => c
            .to_dtype(DType::I64)
            .and_then(|x| x.to_vec::<i64>())
            .map(|v| v[i].to_string())
            .unwrap_or_default(),
        _ => c
            .to_vec_f64()
            .map(|v| format!("{:e} ({:#x})", v[i], v[i].to_bits()))
            .unwrap_or_default(),
    }
}

pub fn describe_inputs(inputs: &[Tensor]) -> String {
    inputs
        .iter()
        .map(|t| format!("{}{:?} strides {:?}", t.dtype(), t.shape(), t.strides()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Compares `got` with `want`; on a mismatch returns a repro: the first few differing elements
/// with the inputs at that position (broadcast to the output shape).
pub fn compare(got: &Tensor, want: &Tensor, tol: &Tol, inputs: &[Tensor]) -> Option<String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Some(format!(
            "compiled gave {}{:?}, eager {}{:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let dtype = want.dtype();
    let bad: Vec<usize> = match dtype {
        DType::Bool => {
            let (g, w) = (got.to_vec::<bool>().ok()?, want.to_vec::<bool>().ok()?);
            (0..w.len()).filter(|&i| g[i] != w[i]).collect()
        }
        DType::I32 | DType::I64 => {
            let g = got
                .to_dtype(DType::I64)
                .and_then(|t| t.to_vec::<i64>())
                .ok()?;
            let w = want
                .to_dtype(DType::I64)
                .and_then(|t| t.to_vec::<i64>())
                .ok()?;
            (0..w.len()).filter(|&i| g[i] != w[i]).collect()
        }
        _ => {
            let (g, w) = (got.to_vec_f64().ok()?, want.to_vec_f64().ok()?);
            (0..w.len())
                .filter(|&i| !float_ok(g[i], w[i], tol, i, dtype))
                .collect()
        }
    };
    if bad.is_empty() {
        return None;
    }
    let rule = match tol {
        Tol::Bound(_) => "a per-element bound".to_string(),
        other => format!("{other:?}"),
    };
    let mut msg = format!(
        "{} of {} elements differ ({rule} for {dtype})",
        bad.len(),
        want.numel()
    );
    for &i in bad.iter().take(3) {
        let ins: Vec<String> = inputs
            .iter()
            .map(|t| match t.broadcast_to(want.shape()) {
                Ok(b) => show(&b, i),
                Err(_) => format!("{}{:?}", t.dtype(), t.shape()),
            })
            .collect();
        let bound = match tol {
            Tol::Bound(b) => format!(" (bound {:e})", b[i]),
            _ => String::new(),
        };
        msg += &format!(
            "\n    at {i}: inputs [{}] eager {} compiled {}{bound}",
            ins.join(", "),
            show(want, i),
            show(got, i)
        );
    }
    Some(msg)
}
