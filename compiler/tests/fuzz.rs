//! Differential fuzzer: random elementwise programs, run eagerly and through `compile`, compared
//! under the numerics contract of DESIGN.md §5b.
//!
//! A program is a DAG of up to 30 elementwise ops (every op the compiler lowers, Rust scalar
//! operands, casts, `where`, `clamp`) over 1–4 inputs whose shapes broadcast (ranks 0–4, size-1
//! and occasionally size-0 dims, sometimes an incompatible shape), of mixed dtypes, given as
//! transposed, sliced or expanded views of fresh tensors, optionally ending in a reduction or a
//! softmax. Programs also hold mutation barriers (`clone(a).copy_(b)`, read afterwards) and
//! custom ops, traced through (their body fuses) or opaque (a CPU-only kernel with a fake
//! kernel). Input data mixes moderate values with NaN, ±inf, ±0, denormals, halves and integer
//! extremes. Every program that runs is called a second and third time through the same compiled
//! function with its dims ≥ 2 grown (dynamic shapes: one graph serves several sizes).
//!
//! The oracle is eager execution plus a running error analysis: for every value the fuzzer
//! computes, per element, how far the compiled value may legitimately be from eager's. Exact ops
//! (`+ - * /`, sqrt, comparisons, min/max, abs/neg, casts, selects, rounding) on exactly-known
//! operands must be bit-identical; transcendentals add 8 ulps; f16/bf16 values are kept in f32
//! inside a fused region (eager rounds after every op), so they carry half an ulp of the low
//! dtype; reductions add reassociation error growing with the reduced length. Errors propagate
//! through the ops by their Lipschitz bounds or interval images; where a discontinuous op
//! (comparison, rounding, a cast to an integer, a truth test) meets an operand whose interval
//! straddles its discontinuity, the element is marked unverifiable and skipped. If eager fails,
//! the compiled call must fail too (never panic); if eager succeeds, so must the compiled call;
//! and `CompiledGraph::interpret` must be bit-identical to eager.
//!
//! `TP_FUZZ_CASES` sets the number of programs (default 2000), `TP_FUZZ_SEED` the seed (a u64,
//! decimal or 0x-hex; the default is fixed; `.ci/run` passes one derived from the commit). The
//! seed is printed first; a failure prints the shrunk program in readable form with the seed that
//! found it; long runs print progress every 50,000 programs. Long runs are recorded in
//! docs/testing.md.
//!
//! The program generator (programs, input data, eager runs, strategies) lives in
//! `common/fuzzgen.rs`, shared with the IR round-trip test; this file holds the error analysis and
//! the comparison.

use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use tensorplay_compiler::{CompiledFn, compile};
use tensorplay_runtime::{DType, Result, Tensor};

#[path = "common/fuzzgen.rs"]
mod fuzzgen;
// The numerics contract's comparisons, shared with the regression tests (not all used here).
#[path = "common/numerics.rs"]
mod numerics;

use fuzzgen::*;
use numerics::{close, max_finite, ulp};

// ---- the error analysis ------------------------------------------------------------------------

/// The precision compiled code holds a value of `dtype` in (f16/bf16 live in f32).
fn internal(dtype: DType) -> DType {
    if dtype.is_half() { DType::F32 } else { dtype }
}

/// Per element of one value: eager's value and how far the compiled value may be from it.
#[derive(Clone)]
struct Model {
    shape: Vec<usize>,
    dtype: DType,
    /// Eager's values, row-major.
    v: Vec<f64>,
    /// Bound seen by consumers inside a fused region (f16/bf16: the unrounded f32 value).
    ep: Vec<f64>,
    /// Bound of the stored (returned) value. 0 means bit-identical (or value-equal when
    /// `value_eq`); `INF` means unverifiable.
    es: Vec<f64>,
    /// Zeros may differ in sign (extrema of a reduction).
    value_eq: bool,
}

fn values_of(t: &Tensor) -> Result<Vec<f64>> {
    t.contiguous()?.to_vec_f64()
}

/// A value as a barrier (an op run through the dispatcher) reads it: stored, so its consumer
/// bound is its stored bound.
fn materialized(m: &Model) -> Model {
    Model {
        ep: m.es.clone(),
        ..m.clone()
    }
}

fn exact_model(t: &Tensor) -> Result<Model> {
    let v = values_of(t)?;
    let n = v.len();
    Ok(Model {
        shape: t.shape().to_vec(),
        dtype: t.dtype(),
        v,
        ep: vec![0.0; n],
        es: vec![0.0; n],
        value_eq: false,
    })
}

/// `src` (row-major over `from`) broadcast to `to`.
fn bcast(src: &[f64], from: &[usize], to: &[usize]) -> Vec<f64> {
    let n: usize = to.iter().product();
    if from == to {
        return src.to_vec();
    }
    let off = to.len() - from.len();
    let mut strides = vec![0usize; to.len()];
    let mut s = 1usize;
    for i in (0..from.len()).rev() {
        strides[off + i] = if from[i] == 1 { 0 } else { s };
        s *= from[i];
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; to.len()];
    for _ in 0..n {
        out.push(src[idx.iter().zip(&strides).map(|(i, s)| i * s).sum::<usize>()]);
        for d in (0..to.len()).rev() {
            idx[d] += 1;
            if idx[d] < to[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// An operand broadcast to the output shape: (values, consumer bound).
fn operand(m: &Model, to: &[usize]) -> (Vec<f64>, Vec<f64>) {
    (bcast(&m.v, &m.shape, to), bcast(&m.ep, &m.shape, to))
}

fn is_approx_un(u: Un) -> bool {
    matches!(
        u,
        Un::Log1p
            | Un::Expm1
            | Un::Softplus
            | Un::Elu
            | Un::Mish
            | Un::Exp
            | Un::Log
            | Un::Rsqrt
            | Un::Reciprocal
            | Un::Sin
            | Un::Cos
            | Un::Tanh
            | Un::Sigmoid
            | Un::GeluNone
            | Un::GeluTanh
            | Un::Silu
            | Un::Erf
    )
}

/// Ops whose result is one of their operands' values (or a value exact in the dtype), so an
/// f16/bf16 result needs no rounding inside a region.
fn representable_un(u: Un) -> bool {
    matches!(
        u,
        Un::Neg
            | Un::Abs
            | Un::Relu
            | Un::Floor
            | Un::Ceil
            | Un::Round
            | Un::Sign
            | Un::Clone
            | Un::Trunc
    )
}

/// How far `f(x')` can be from `f(x)` for `|x' - x| <= e` (e > 0, x finite), or `INF`.
fn unary_spread(u: Un, x: f64, e: f64) -> f64 {
    if !x.is_finite() {
        return INF;
    }
    let m = (x.abs() - e).max(0.0); // the magnitude closest to 0 in the interval
    let r = match u {
        Un::Neg | Un::Abs | Un::Relu | Un::Clone => e,
        Un::Square => 2.0 * x.abs() * e + e * e,
        Un::Sqrt if x - e >= 0.0 => (x + e).sqrt() - (x - e).sqrt(),
        Un::Exp => (x + e).exp() - x.exp(),
        Un::Log if x - e > 0.0 => x.ln() - (x - e).ln(),
        Un::Rsqrt if x - e > 0.0 => 1.0 / (x - e).sqrt() - 1.0 / x.sqrt(),
        Un::Reciprocal if x.abs() > e => e / (x.abs() * (x.abs() - e)),
        Un::Sin | Un::Cos => e.min(2.0),
        // The derivatives at the point closest to 0, written with exp(-m) so that they keep
        // their relative precision where the functions saturate (sigmoid's tiny left tail).
        Un::Tanh => {
            let t = (-2.0 * m).exp();
            e * 4.0 * t / ((1.0 + t) * (1.0 + t))
        }
        Un::Sigmoid => {
            let t = (-m).exp();
            e * t / ((1.0 + t) * (1.0 + t))
        }
        Un::Erf => e * std::f64::consts::FRAC_2_SQRT_PI * (-m * m).exp(),
        Un::GeluNone | Un::GeluTanh => 1.2 * e,
        Un::Silu => 1.1 * e,
        Un::Log1p if x - e > -1.0 => x.ln_1p() - (x - e).ln_1p(),
        Un::Expm1 => (x + e).exp_m1() - x.exp_m1(),
        // Piecewise linear and continuous with slopes 1 and LEAKY_SLOPE (< 1).
        Un::LeakyRelu => e,
        // Slope at most 1, plus the jump at the threshold (log1p(e^t)/beta - t/beta, tiny).
        Un::Softplus => {
            let z = x * SOFTPLUS_BETA;
            let jump = if (z - SOFTPLUS_THRESHOLD).abs() <= 2.0 * e * SOFTPLUS_BETA {
                (-SOFTPLUS_THRESHOLD).exp() / SOFTPLUS_BETA
            } else {
                0.0
            };
            e + jump
        }
        Un::Log2 if x - e > 0.0 => x.log2() - (x - e).log2(),
        Un::Exp2 => (x + e).exp2() - x.exp2(),
        Un::Atan => e,
        Un::Sinh => (x.abs() + e).cosh() * e,
        // Continuous; slopes at most 1/6 and 1.5 (hardswish's (2x + 3) / 6 on [-3, 3]).
        Un::Hardsigmoid => e / 6.0,
        Un::Hardswish => 1.5 * e,
        // Slope at most 1 (defaults), and mish's at most ~1.09.
        Un::Elu => e,
        Un::Mish => 1.2 * e,
        _ => INF,
    };
    if r.is_nan() { INF } else { r }
}

/// Step functions (floor, ceil, round, sign; a cast to an integer or bool): the result is known
/// when both ends of the interval give the same bits.
fn step_stable(f: impl Fn(f64) -> f64, x: f64, e: f64) -> bool {
    x.is_finite()
        && f(x - e).to_bits() == f(x + e).to_bits()
        && f(x - e).to_bits() == f(x).to_bits()
}

fn truth_known(x: f64, e: f64) -> bool {
    e == 0.0 || (x.is_finite() && x.abs() > e)
}

/// Finishes a float result: `spread` is how far the exact function moves over the operands'
/// intervals (0 when every operand is exact), `approx` whether the op is an approximation,
/// `perturbed` whether any operand carries error.
fn finish(
    out: &mut Model,
    i: usize,
    r: f64,
    spread: f64,
    approx: bool,
    perturbed: bool,
    representable: bool,
) {
    let d = out.dtype;
    let p = internal(d);
    if perturbed && !r.is_finite() {
        out.ep[i] = INF;
        out.es[i] = INF;
        return;
    }
    let r_fin = if r.is_finite() {
        r
    } else {
        max_finite(p).copysign(r)
    };
    let own = if approx {
        8.0 * ulp(r_fin, p)
    } else if perturbed {
        ulp(r_fin, p)
    } else {
        0.0
    };
    let total = spread + own;
    if total.is_nan() || total == INF {
        out.ep[i] = INF;
        out.es[i] = INF;
        return;
    }
    let (mut ep, es) = if d.is_half() {
        // The compiled value may lie up to `total` farther from 0, in the next binade, where
        // rounding it to the low dtype costs more.
        let u = ulp(r_fin.abs() + total, d);
        let es = if total == 0.0 { 0.0 } else { total + u };
        let slack = if representable { 0.0 } else { 0.5 * u };
        ((total + slack).max(es), es)
    } else {
        (total, total)
    };
    // Near overflow (or at an infinity) an approximated value may meet an infinity — and an
    // f16/bf16 value eager rounded to infinity is still finite in f32 inside a region: consumers
    // cannot rely on it. A NaN from exact operands is a NaN in compiled code too (checked
    // wherever it is returned), so consumers may rely on that.
    if ep > 0.0 && !r.is_nan() && (!r.is_finite() || r.abs() + ep >= max_finite(d)) {
        ep = INF;
    }
    if r.is_nan() {
        ep = 0.0;
    }
    out.ep[i] = ep;
    out.es[i] = es;
}

fn model_unary(u: Un, x: &Model, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let (xv, xe) = operand(x, &out.shape);
    for i in 0..out.v.len() {
        let (xi, ei) = (xv[i], xe[i]);
        if ei == INF {
            out.ep[i] = INF;
            out.es[i] = INF;
            continue;
        }
        if !out.dtype.is_float() {
            // Integer or bool results: exact unless a step or truth test is uncertain.
            let ok = match u {
                Un::LogicalNot => truth_known(xi, ei),
                _ => ei == 0.0,
            };
            if !ok {
                out.ep[i] = INF;
                out.es[i] = INF;
            }
            continue;
        }
        let perturbed = ei > 0.0;
        let step = |f: fn(f64) -> f64| !perturbed || step_stable(f, xi, ei);
        let spread = match u {
            Un::Floor if !step(f64::floor) => INF,
            Un::Ceil if !step(f64::ceil) => INF,
            Un::Round if !step(f64::round_ties_even) => INF,
            Un::Sign
                if !step(|v| {
                    if v > 0.0 {
                        1.0
                    } else if v < 0.0 {
                        -1.0
                    } else {
                        v
                    }
                }) =>
            {
                INF
            }
            Un::Trunc if !step(f64::trunc) => INF,
            // x - trunc(x) moves with x while trunc(x) stays.
            Un::Frac if !step(f64::trunc) => INF,
            Un::Frac => ei,
            Un::Floor | Un::Ceil | Un::Round | Un::Sign | Un::Trunc => 0.0,
            // `(x + 3) / 6` rounds `x + 3` where it is larger than the result: with a perturbed
            // `x`, eager and compiled code may round it to neighbouring values.
            Un::Hardsigmoid | Un::Hardswish if perturbed => {
                let inner = ulp(xi.abs() + 3.0 + ei, internal(out.dtype));
                unary_spread(u, xi, ei) + inner * (xi.abs() + ei).max(1.0) / 6.0
            }
            _ if perturbed => unary_spread(u, xi, ei),
            _ => 0.0,
        };
        let stepped = matches!(u, Un::Floor | Un::Ceil | Un::Round | Un::Sign | Un::Trunc);
        let r = out.v[i];
        finish(
            &mut out,
            i,
            r,
            spread,
            is_approx_un(u),
            perturbed && !stepped,
            representable_un(u),
        );
    }
    Ok(out)
}

/// Error model of `a op b` (either may be a scalar, given as an exact one-element model).
fn model_binary(b: Bin, x: &Model, y: &Model, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let (xv, xe) = operand(x, &out.shape);
    let (yv, ye) = operand(y, &out.shape);
    for i in 0..out.v.len() {
        let (a, ea, c, ec) = (xv[i], xe[i], yv[i], ye[i]);
        if ea == INF || ec == INF {
            out.ep[i] = INF;
            out.es[i] = INF;
            continue;
        }
        let perturbed = ea > 0.0 || ec > 0.0;
        // The sign of a NaN is not part of the contract (compiled log gives +NaN where eager's
        // may be -NaN), so copysign's result is unknown for a NaN `other`.
        if b == Bin::Copysign && c.is_nan() {
            out.ep[i] = INF;
            out.es[i] = INF;
            continue;
        }
        if b.is_compare() {
            if perturbed && !(a.is_finite() && c.is_finite() && (a - c).abs() > ea + ec) {
                out.ep[i] = INF;
                out.es[i] = INF;
            }
            continue;
        }
        if b.is_logical() {
            if !(truth_known(a, ea) && truth_known(c, ec)) {
                out.ep[i] = INF;
                out.es[i] = INF;
            }
            continue;
        }
        if !out.dtype.is_float() {
            if perturbed {
                out.ep[i] = INF;
                out.es[i] = INF;
            }
            continue;
        }
        let spread = if !perturbed {
            0.0
        } else if !(a.is_finite() && c.is_finite()) {
            INF
        } else {
            match b {
                Bin::Add | Bin::Sub => ea + ec,
                Bin::Mul => c.abs() * ea + a.abs() * ec + ea * ec,
                Bin::Div if c.abs() > ec => (ea + (a / c).abs() * ec) / (c.abs() - ec),
                Bin::Maximum | Bin::Minimum | Bin::Fmax | Bin::Fmin => ea.max(ec),
                // atan2 jumps by 2π across its branch cut (y = 0, x < 0): an uncertain `y`
                // there may land on either side.
                Bin::Atan2 if a.abs() <= ea && c - ec < 0.0 => INF,
                // |grad atan2| = 1 / hypot; hypot is 1-Lipschitz in each operand.
                Bin::Atan2 if a.hypot(c) > ea + ec => (ea + ec) / (a.hypot(c) - ea - ec),
                Bin::Hypot => ea + ec,
                // The sign of `other` must be known.
                Bin::Copysign if c.abs() > ec => ea,
                Bin::Pow if a - ea > 0.0 => {
                    let base = a.powf(c);
                    let mut worst = 0f64;
                    for (p, q) in [
                        (a - ea, c - ec),
                        (a - ea, c + ec),
                        (a + ea, c - ec),
                        (a + ea, c + ec),
                    ] {
                        worst = worst.max((p.powf(q) - base).abs());
                    }
                    if worst.is_finite() { worst } else { INF }
                }
                _ => INF,
            }
        };
        let approx = b == Bin::Pow;
        let representable = matches!(
            b,
            Bin::Maximum | Bin::Minimum | Bin::Fmax | Bin::Fmin | Bin::Copysign
        );
        let r = out.v[i];
        finish(&mut out, i, r, spread, approx, perturbed, representable);
    }
    Ok(out)
}

fn model_where(c: &Model, x: &Model, y: &Model, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let (cv, ce) = operand(c, &out.shape);
    let xe = bcast(&x.ep, &x.shape, &out.shape);
    let ye = bcast(&y.ep, &y.shape, &out.shape);
    for i in 0..out.v.len() {
        let e = if ce[i] == INF {
            INF
        } else if cv[i] != 0.0 {
            xe[i]
        } else {
            ye[i]
        };
        if e == INF || (!out.dtype.is_float() && e > 0.0) {
            out.ep[i] = INF;
            out.es[i] = INF;
        } else if out.dtype.is_float() {
            let r = out.v[i];
            finish(&mut out, i, r, e, false, e > 0.0, true);
        }
    }
    Ok(out)
}

fn model_clamp(x: &Model, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let xe = bcast(&x.ep, &x.shape, &out.shape);
    for (i, &e) in xe.iter().enumerate() {
        if e == INF || (!out.dtype.is_float() && e > 0.0) {
            out.ep[i] = INF;
            out.es[i] = INF;
        } else if out.dtype.is_float() {
            // Clamping is 1-Lipschitz; an f16/bf16 result may be an f32 bound inside a region.
            let r = out.v[i];
            finish(&mut out, i, r, e, false, e > 0.0, false);
        }
    }
    Ok(out)
}

fn model_cast(x: &Model, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let to = out.dtype;
    for i in 0..out.v.len() {
        let (xi, e) = (x.v[i], x.ep[i]);
        if e == INF {
            out.ep[i] = INF;
            out.es[i] = INF;
            continue;
        }
        if e == 0.0 {
            continue;
        }
        let ok = match to {
            DType::Bool => truth_known(xi, e),
            DType::I32 => step_stable(|v| (v as i32) as f64, xi, e),
            DType::I64 => step_stable(|v| (v as i64) as f64, xi, e),
            _ => true,
        };
        if !ok {
            out.ep[i] = INF;
            out.es[i] = INF;
        } else if to.is_float() {
            // A cast to f16/bf16 rounds explicitly in compiled code too.
            let r = out.v[i];
            finish(&mut out, i, r, e, false, true, true);
        } else {
            out.ep[i] = 0.0;
            out.es[i] = 0.0;
        }
    }
    Ok(out)
}

/// The groups of input elements (row-major indices) reduced into each output element.
fn groups(shape: &[usize], dims: &[usize]) -> (Vec<Vec<usize>>, usize) {
    let n: usize = shape.iter().product();
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let out_n: usize = kept.iter().map(|&d| shape[d]).product();
    let mut g = vec![Vec::new(); out_n];
    let mut idx = vec![0usize; shape.len()];
    for i in 0..n {
        let mut o = 0usize;
        for &d in &kept {
            o = o * shape[d] + idx[d];
        }
        g[o].push(i);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let len = dims.iter().map(|&d| shape[d]).product();
    (g, len)
}

fn model_reduce(x: &Model, red: Red, dims: &[i64], r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    out.value_eq = matches!(red, Red::Amax | Red::Amin);
    let rank = x.shape.len();
    // A 0-d value accepts dim 0 / -1 and reduces over nothing.
    let dims: Vec<usize> = if dims.is_empty() {
        (0..rank).collect()
    } else {
        dims.iter()
            .map(|&d| ((d + rank as i64) % rank.max(1) as i64) as usize)
            .filter(|&d| d < rank)
            .collect()
    };
    let (gs, len) = groups(&x.shape, &dims);
    let d = out.dtype;
    let acc = if d == DType::F64 {
        ulp(1.0, DType::F64)
    } else {
        ulp(1.0, DType::F32)
    };
    for (o, g) in gs.iter().enumerate() {
        if o >= out.v.len() {
            break;
        }
        let es: Vec<f64> = g.iter().map(|&i| x.ep[i]).collect();
        let vs: Vec<f64> = g.iter().map(|&i| x.v[i]).collect();
        let r = out.v[o];
        let unknown = es.contains(&INF);
        let perturbed = es.iter().any(|&e| e > 0.0);
        let bound = if unknown {
            INF
        } else if !d.is_float() {
            if perturbed { INF } else { 0.0 }
        } else {
            let abs_sum: f64 = vs.iter().filter(|v| v.is_finite()).map(|v| v.abs()).sum();
            let err_sum: f64 = es.iter().sum();
            let round = 2.0 * ulp(if r.is_finite() { r } else { 0.0 }, d);
            match red {
                _ if perturbed && !r.is_finite() => INF,
                Red::Amax | Red::Amin => {
                    es.iter().fold(0f64, |a, &e| a.max(e)) + if perturbed { round } else { 0.0 }
                }
                Red::Sum | Red::Mean => {
                    if abs_sum > max_finite(internal(d)) / 4.0 {
                        INF // reassociation may overflow where eager's order does not
                    } else {
                        let b = err_sum + (len as f64 + 2.0) * acc * abs_sum + round;
                        if red == Red::Mean {
                            b / len.max(1) as f64 + round
                        } else {
                            b
                        }
                    }
                }
                Red::Prod => {
                    let (emax, emin) = if d == DType::F64 {
                        (1000.0, -1000.0)
                    } else {
                        (120.0, -120.0)
                    };
                    let up: f64 = vs
                        .iter()
                        .filter(|v| v.is_finite() && v.abs() > 1.0)
                        .map(|v| v.abs().log2())
                        .sum();
                    let down: f64 = vs
                        .iter()
                        .filter(|v| v.is_finite() && v.abs() < 1.0 && **v != 0.0)
                        .map(|v| v.abs().log2())
                        .sum();
                    let rel: f64 = vs
                        .iter()
                        .zip(&es)
                        .map(|(v, e)| {
                            if *e == 0.0 {
                                0.0
                            } else if *e >= 0.5 * v.abs() {
                                INF
                            } else {
                                1.1 * e / v.abs()
                            }
                        })
                        .sum();
                    if up > emax || down < emin || rel == INF {
                        INF
                    } else {
                        (rel + (len as f64 + 2.0) * acc) * r.abs() + round
                    }
                }
            }
        };
        out.ep[o] = bound;
        out.es[o] = bound;
    }
    Ok(out)
}

fn model_softmax(x: &Model, log: bool, r: &Tensor) -> Result<Model> {
    let mut out = exact_model(r)?;
    let d = out.dtype;
    // A 0-d value is one row of one element.
    let row = *x.shape.last().unwrap_or(&1);
    if row == 0 || x.v.is_empty() || out.v.len() != x.v.len() {
        return Ok(out);
    }
    let acc = if d == DType::F64 {
        ulp(1.0, DType::F64)
    } else {
        ulp(1.0, DType::F32)
    };
    let rel = (row as f64 + 16.0) * acc;
    for start in (0..x.v.len()).step_by(row) {
        let es = &x.ep[start..start + row];
        let emax = es.iter().fold(0f64, |a, &e| a.max(e));
        for j in start..start + row {
            let w = out.v[j];
            let shaky = emax > 0.0
                && (!w.is_finite() || x.v[start..start + row].iter().any(|v| !v.is_finite()));
            let bound = if emax > 0.5 || shaky {
                INF
            } else if log {
                2.0 * emax + rel * (w.abs() + 1.0) + 2.0 * ulp(w, d)
            } else {
                w.abs() * ((2.0 * emax).exp() - 1.0 + rel) + 2.0 * ulp(w, d)
            };
            out.ep[j] = bound;
            out.es[j] = if bound.is_nan() { INF } else { bound };
        }
    }
    Ok(out)
}

fn lit_model(l: Lit) -> Model {
    Model {
        shape: vec![],
        dtype: DType::F64,
        v: vec![l.value()],
        ep: vec![0.0],
        es: vec![0.0],
        value_eq: false,
    }
}

/// The error models of every value of a traced program, and of its outputs.
fn analyse(p: &Program, t: &Trace) -> Result<Vec<Model>> {
    let n = p.inputs.len();
    let mut ms: Vec<Model> = t.values[..n]
        .iter()
        .map(exact_model)
        .collect::<Result<_>>()?;
    for (k, op) in p.ops.iter().enumerate() {
        let r = &t.values[n + k];
        let m = match op {
            Op::Unary(u, a) => model_unary(*u, &ms[*a], r)?,
            Op::Binary(b, a, c) => model_binary(*b, &ms[*a], &ms[*c], r)?,
            Op::Scalar(b, a, s, rev) => {
                let s = lit_model(*s);
                if *rev {
                    model_binary(*b, &s, &ms[*a], r)?
                } else {
                    model_binary(*b, &ms[*a], &s, r)?
                }
            }
            Op::Where(c, a, b) => {
                let cond = t.conditions[k]
                    .as_ref()
                    .expect("where records its condition");
                let cm = if t.values[*c].dtype() == DType::Bool {
                    ms[*c].clone()
                } else {
                    model_binary(Bin::Gt, &ms[*c], &lit_model(Lit::F(0.0)), cond)?
                };
                model_where(&cm, &ms[*a], &ms[*b], r)?
            }
            Op::Clamp(a, _, _) => model_clamp(&ms[*a], r)?,
            Op::Cast(a, _) => model_cast(&ms[*a], r)?,
            Op::Copy(_, b) => {
                // `b` reaches the barrier materialized (its stored bound), broadcast to `y`.
                let m = materialized(&ms[*b]);
                let (v, ep) = operand(&m, r.shape());
                let shaped = Model {
                    shape: r.shape().to_vec(),
                    es: ep.clone(),
                    v,
                    ep,
                    ..m
                };
                let mut out = model_cast(&shaped, r)?;
                out.value_eq = shaped.value_eq && r.dtype().is_float();
                out
            }
            Op::Custom(Custom::TracedNeg, a) => model_unary(Un::Neg, &ms[*a], r)?,
            Op::Custom(Custom::OpaqueAbs, a) => model_unary(Un::Abs, &materialized(&ms[*a]), r)?,
        };
        ms.push(m);
    }
    let last = ms.last().cloned().expect("programs have at least one op");
    let head = match (&p.tail, &t.tail) {
        (Tail::Reduce { red, dims, bad, .. }, Some(r)) => {
            model_reduce(&last, *red, &resolve_dims(dims, last.shape.len(), *bad), r)?
        }
        (Tail::Softmax { log }, Some(r)) => model_softmax(&last, *log, r)?,
        _ => last,
    };
    let mut outs = vec![head];
    outs.extend(p.extra_outputs.iter().map(|&v| ms[v].clone()));
    Ok(outs)
}

// ---- comparison --------------------------------------------------------------------------------

fn show(v: f64, dtype: DType) -> String {
    if dtype.is_float() {
        format!("{v:e} ({:#x})", v.to_bits())
    } else {
        format!("{v}")
    }
}

/// Checks one output: dtype and shape exactly, values under the model's bounds.
fn compare_output(
    k: usize,
    got: &Tensor,
    want: &Tensor,
    m: &Model,
    inputs: &[Tensor],
) -> std::result::Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "output {k}: compiled gave {}{:?}, eager {}{:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let dtype = want.dtype();
    let bad: Vec<usize> = if dtype.is_float() {
        let (g, w) = (
            values_of(got).map_err(|e| e.to_string())?,
            values_of(want).map_err(|e| e.to_string())?,
        );
        (0..w.len())
            .filter(|&i| {
                let b = m.es[i];
                if b == INF {
                    false
                } else if b == 0.0 && !m.value_eq {
                    !((g[i].is_nan() && w[i].is_nan()) || g[i].to_bits() == w[i].to_bits())
                } else {
                    !close(g[i], w[i], b, dtype)
                }
            })
            .collect()
    } else {
        let as_i64 = |t: &Tensor| {
            t.contiguous()
                .and_then(|c| c.to_dtype(DType::I64))
                .and_then(|c| c.to_vec::<i64>())
        };
        let (g, w) = (
            as_i64(got).map_err(|e| e.to_string())?,
            as_i64(want).map_err(|e| e.to_string())?,
        );
        (0..w.len())
            .filter(|&i| m.es[i] != INF && g[i] != w[i])
            .collect()
    };
    if bad.is_empty() {
        return Ok(());
    }
    let gv = values_of(got).unwrap_or_default();
    let mut msg = format!(
        "output {k} ({dtype}{:?}): {} of {} elements differ",
        want.shape(),
        bad.len(),
        want.numel()
    );
    for &i in bad.iter().take(4) {
        let ins: Vec<String> = inputs
            .iter()
            .map(|t| {
                t.broadcast_to(want.shape())
                    .and_then(|b| values_of(&b))
                    .map(|v| show(v[i], t.dtype()))
                    .unwrap_or_else(|_| format!("{}{:?}", t.dtype(), t.shape()))
            })
            .collect();
        msg += &format!(
            "\n    at {i}: inputs (broadcast) [{}]: eager {} compiled {} (allowed {:e})",
            ins.join(", "),
            show(m.v[i], dtype),
            show(gv.get(i).copied().unwrap_or(f64::NAN), dtype),
            m.es[i]
        );
    }
    Err(msg)
}

fn bitwise(got: &Tensor, want: &Tensor) -> bool {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return false;
    }
    if want.dtype().is_float() {
        match (values_of(got), values_of(want)) {
            (Ok(g), Ok(w)) => g
                .iter()
                .zip(&w)
                .all(|(a, b)| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()),
            _ => false,
        }
    } else {
        let as_i64 = |t: &Tensor| {
            t.contiguous()
                .and_then(|c| c.to_dtype(DType::I64))
                .and_then(|c| c.to_vec::<i64>())
        };
        matches!((as_i64(got), as_i64(want)), (Ok(g), Ok(w)) if g == w)
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// What the fuzzer saw (printed at the end, to judge its coverage).
struct Stats {
    cases: AtomicUsize,
    eager_errors: AtomicUsize,
    checked: AtomicUsize,
    exact: AtomicUsize,
    unverifiable: AtomicUsize,
    kernels: AtomicUsize,
    /// Calls at a second size of an already compiled program.
    resized: AtomicUsize,
    /// Of those, how many compiled a new graph.
    recompiled: AtomicUsize,
}

static STATS: Stats = Stats {
    cases: AtomicUsize::new(0),
    eager_errors: AtomicUsize::new(0),
    checked: AtomicUsize::new(0),
    exact: AtomicUsize::new(0),
    unverifiable: AtomicUsize::new(0),
    kernels: AtomicUsize::new(0),
    resized: AtomicUsize::new(0),
    recompiled: AtomicUsize::new(0),
};

fn bump(c: &AtomicUsize, n: usize) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Runs one program eagerly and compiled and checks the contract.
fn check_program(p: &Program) -> std::result::Result<(), String> {
    bump(&STATS.cases, 1);
    let done = STATS.cases.load(Ordering::Relaxed);
    if done.is_multiple_of(50_000) {
        // Long runs (TP_FUZZ_CASES=1000000) report progress, so a run cut short still counts.
        eprintln!("fuzz: {done} programs so far");
    }
    let inputs: Vec<Tensor> = p
        .inputs
        .iter()
        .map(InputSpec::build)
        .collect::<Result<_>>()
        .map_err(|e| format!("building the inputs failed: {e}"))?;
    let p = &p.repaired(&inputs);
    check_repaired(p, &inputs).map_err(|e| format!("program as run:\n{p}\n{e}"))
}

/// The program's input specs with every dim of size ≥ 2 grown by `grow` (sizes 0 and 1 stay:
/// the broadcast pattern, and so the guards of a dynamic graph, are unchanged).
fn resized(p: &Program, grow: usize) -> Program {
    let mut q = p.clone();
    for s in &mut q.inputs {
        for d in &mut s.shape {
            if *d >= 2 {
                *d += grow;
            }
        }
    }
    q
}

fn check_repaired(p: &Program, inputs: &[Tensor]) -> std::result::Result<(), String> {
    let prog = Arc::new(p.clone());
    let body = prog.clone();
    let f = compile(move |xs: &[Tensor]| Ok(body.trace(xs)?.outputs));
    if !compare_call(p, &f, inputs)? {
        return Ok(());
    }
    // Dynamic shapes: the same compiled function called at other sizes.
    for grow in [3, 1] {
        let q = resized(p, grow);
        if q.inputs
            .iter()
            .zip(&p.inputs)
            .all(|(a, b)| a.shape == b.shape)
        {
            break;
        }
        let before = f.num_compiled();
        let xs: Vec<Tensor> = q
            .inputs
            .iter()
            .map(InputSpec::build)
            .collect::<Result<_>>()
            .map_err(|e| format!("building the resized inputs failed: {e}"))?;
        compare_call(&q, &f, &xs).map_err(|e| {
            format!("called again with dims >= 2 grown by {grow}, inputs now:\n{q}\n{e}")
        })?;
        bump(&STATS.resized, 1);
        bump(&STATS.recompiled, f.num_compiled() - before);
    }
    Ok(())
}

/// Runs `p` eagerly and through `f` on `inputs` and compares (see the module docs); `Ok(false)`
/// when both reject the inputs.
fn compare_call(
    p: &Program,
    f: &CompiledFn,
    inputs: &[Tensor],
) -> std::result::Result<bool, String> {
    let inputs = inputs.to_vec();
    let eager = p.trace(&inputs);
    let got = catch_unwind(AssertUnwindSafe(|| f.call(&inputs)))
        .map_err(|e| format!("the compiled call panicked: {}", panic_text(e)))?;
    let (trace, got) = match (eager, got) {
        (Err(_), Err(_)) => {
            bump(&STATS.eager_errors, 1);
            return Ok(false);
        }
        (Err(e), Ok(_)) => {
            return Err(format!("eager fails ({e}) but the compiled call succeeded"));
        }
        (Ok(_), Err(e)) => return Err(format!("eager succeeds but the compiled call fails: {e}")),
        (Ok(t), Ok(g)) => (t, g),
    };
    if got.len() != trace.outputs.len() {
        return Err(format!(
            "{} outputs compiled, {} eager",
            got.len(),
            trace.outputs.len()
        ));
    }
    let models = analyse(p, &trace).map_err(|e| format!("error analysis failed: {e}"))?;
    for m in &models {
        bump(&STATS.checked, m.es.iter().filter(|&&e| e != INF).count());
        bump(&STATS.exact, m.es.iter().filter(|&&e| e == 0.0).count());
        bump(
            &STATS.unverifiable,
            m.es.iter().filter(|&&e| e == INF).count(),
        );
    }
    if let Some(g) = f.latest() {
        bump(&STATS.kernels, g.num_kernels());
    }
    let mut problems = Vec::new();
    for (k, ((g, w), m)) in got.iter().zip(&trace.outputs).zip(&models).enumerate() {
        if let Err(msg) = compare_output(k, g, w, m, &inputs) {
            problems.push(msg);
        }
    }
    // The interpreter runs the eager kernels node by node: bit-identical.
    match f.latest() {
        Some(g) => match catch_unwind(AssertUnwindSafe(|| g.interpret(&inputs))) {
            Ok(Ok(outs)) => {
                for (k, (o, w)) in outs.iter().zip(&trace.outputs).enumerate() {
                    if !bitwise(o, w) {
                        problems.push(format!("interpret output {k} differs from eager"));
                    }
                }
            }
            Ok(Err(e)) => problems.push(format!("interpret fails: {e}")),
            Err(e) => problems.push(format!("interpret panicked: {}", panic_text(e))),
        },
        None => problems.push("no compiled graph after a successful call".into()),
    }
    if problems.is_empty() {
        Ok(true)
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn compiled_matches_eager_on_random_programs() {
    let cases = env_u64("TP_FUZZ_CASES").unwrap_or(2000) as u32;
    let seed = env_u64("TP_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    eprintln!("fuzz: TP_FUZZ_SEED={seed:#x} TP_FUZZ_CASES={cases}");
    let t0 = std::time::Instant::now();
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 8192,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let result = runner.run(&program_strategy(), |p| {
        check_program(&p).map_err(TestCaseError::fail)
    });
    let load = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    eprintln!(
        "fuzz: {} programs ({} rejected by eager and the compiled call alike), {} kernels, {} calls at a second size ({} recompiled); output elements: {} checked ({} bit-exact), {} unverifiable; {:.1} s",
        load(&STATS.cases),
        load(&STATS.eager_errors),
        load(&STATS.kernels),
        load(&STATS.resized),
        load(&STATS.recompiled),
        load(&STATS.checked),
        load(&STATS.exact),
        load(&STATS.unverifiable),
        t0.elapsed().as_secs_f64()
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, p)) => panic!(
            "compiled != eager (TP_FUZZ_SEED={seed:#x}, TP_FUZZ_CASES={cases}); shrunk program:\n{p}\n{why}"
        ),
        Err(TestError::Abort(why)) => panic!("fuzzer aborted (TP_FUZZ_SEED={seed:#x}): {why}"),
    }
}

/// The error analysis itself: bounds are zero for exact chains, positive for transcendentals,
/// and unverifiable exactly where a comparison's operands are too close to call.
#[test]
fn error_analysis_marks_what_it_can_verify() -> Result<()> {
    let x = Tensor::from_vec(vec![1.0f32, 2.0, -0.5, 0.0], &[4])?;
    let xm = exact_model(&x)?;
    let y = x.add(&x)?;
    let ym = model_binary(Bin::Add, &xm, &xm, &y)?;
    assert_eq!(ym.es, vec![0.0; 4]);
    let e = x.exp()?;
    let em = model_unary(Un::Exp, &xm, &e)?;
    assert!(em.es.iter().all(|&b| b > 0.0 && b < 1e-5), "{:?}", em.es);
    // exp(x) > exp(x) + tiny: too close to call; exp(x) > 0.5: decided.
    let close_cmp = e.gt(&e)?;
    let cm = model_binary(Bin::Gt, &em, &em, &close_cmp)?;
    assert!(cm.es.iter().all(|&b| b == INF));
    let half = Tensor::scalar(0.5f32);
    let far = e.gt(&half)?;
    let fm = model_binary(Bin::Gt, &em, &exact_model(&half)?, &far)?;
    assert!(fm.es.iter().all(|&b| b == 0.0), "{:?}", fm.es);
    // A sum's bound grows with the reduced length.
    let s = e.sum_all()?;
    let sm = model_reduce(&em, Red::Sum, &[], &s)?;
    assert!(sm.es[0] > em.es.iter().sum::<f64>());
    // f16 chains carry half an ulp of f16 to their consumers, and store exactly after one op.
    let h = x.to_dtype(DType::F16)?;
    let hm = exact_model(&h)?;
    let hy = h.mul(&h)?;
    let hym = model_binary(Bin::Mul, &hm, &hm, &hy)?;
    assert_eq!(hym.es, vec![0.0; 4]);
    assert!(hym.ep[1] > 0.0);
    Ok(())
}

// ---- gradients ---------------------------------------------------------------------------------

/// The program as a differentiable one: f64 inputs, casts only between floating dtypes, and
/// mutations (`copy_`, refused under autograd) replaced by casts.
fn differentiable(p: &Program) -> Program {
    let mut q = p.clone();
    for s in &mut q.inputs {
        s.dtype = DType::F64;
    }
    for op in &mut q.ops {
        match *op {
            Op::Cast(a, d) if !matches!(d, DType::F32 | DType::F64) => {
                *op = Op::Cast(a, DType::F64)
            }
            Op::Copy(a, _) => *op = Op::Cast(a, DType::F64),
            _ => {}
        }
    }
    q
}

/// Moderate random values (no specials): gradients are compared elementwise.
fn grad_data(n: usize, dtype: DType, seed: u64) -> Result<Tensor> {
    Tensor::randn_seeded(&[n], DType::F64, seed)?
        .mul_scalar(1.5)?
        .to_dtype(dtype)
}

/// Within the contract's spirit for gradients: NaN where eager has NaN, equal infinities,
/// finite values within a relative 1e-6 (transcendentals differ by ulps and chains amplify).
fn grads_close(got: &Tensor, want: &Tensor) -> Result<bool> {
    if got.shape() != want.shape() {
        return Ok(false);
    }
    let (g, w) = (values_of(got)?, values_of(want)?);
    Ok(g.iter()
        .zip(&w)
        .all(|(&a, &b)| close(a, b, 1e-6 * (1.0 + b.abs()), DType::F64)))
}

#[derive(Default)]
struct GradStats {
    cases: AtomicUsize,
    compared: AtomicUsize,
    resized: AtomicUsize,
    recompiled: AtomicUsize,
    fallbacks: AtomicUsize,
    backward_kernels: AtomicUsize,
}

/// Eager vs compiled gradients of one program's outputs (a fixed random cotangent each);
/// `Ok(false)` when eager has nothing to differentiate.
fn compare_grads(
    p: &Program,
    f: &CompiledFn,
    inputs: &[Tensor],
    stats: &GradStats,
) -> std::result::Result<bool, String> {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.detach().requires_grad_(true))
        .collect::<Result<_>>()
        .map_err(|e| e.to_string())?;
    let eager = p
        .trace(&inputs)
        .map_err(|e| format!("eager fails: {e}"))?
        .outputs;
    let roots: Vec<usize> = (0..eager.len())
        .filter(|&i| eager[i].requires_grad())
        .collect();
    if roots.is_empty() {
        return Ok(false);
    }
    let got = catch_unwind(AssertUnwindSafe(|| f.call(&inputs)))
        .map_err(|e| format!("the compiled call panicked: {}", panic_text(e)))?
        .map_err(|e| format!("eager succeeds but the compiled call fails: {e}"))?;
    let cot: Vec<Option<Tensor>> = roots
        .iter()
        .map(|&i| Tensor::randn_seeded(eager[i].shape(), eager[i].dtype(), 7 + i as u64).map(Some))
        .collect::<Result<_>>()
        .map_err(|e| e.to_string())?;
    let pick = |outs: &[Tensor]| roots.iter().map(|&i| outs[i].clone()).collect::<Vec<_>>();
    let ge = tensorplay_runtime::autograd::grad(&pick(&eager), &inputs, &cot, false)
        .map_err(|e| format!("eager backward fails: {e}"))?;
    let gc = catch_unwind(AssertUnwindSafe(|| {
        tensorplay_runtime::autograd::grad(&pick(&got), &inputs, &cot, false)
    }))
    .map_err(|e| format!("the compiled backward panicked: {}", panic_text(e)))?
    .map_err(|e| format!("the compiled backward fails: {e}"))?;
    let mut problems = Vec::new();
    for (k, (&i, _)) in roots.iter().zip(&cot).enumerate() {
        if !grads_close(&got[i].detach(), &eager[i].detach()).map_err(|e| e.to_string())? {
            problems.push(format!("output {i} differs (root {k})"));
        }
    }
    for (i, (c, e)) in gc.iter().zip(&ge).enumerate() {
        match (c, e) {
            (None, None) => {}
            (Some(c), Some(e)) if grads_close(c, e).map_err(|e| e.to_string())? => {}
            _ => problems.push(format!(
                "gradient of input {i} differs:\n  compiled {c:?}\n  eager    {e:?}"
            )),
        }
    }
    if let Some(t) = f.latest_training() {
        bump(&stats.backward_kernels, t.backward().num_kernels());
    }
    bump(&stats.compared, 1);
    if problems.is_empty() {
        Ok(true)
    } else {
        Err(problems.join("\n"))
    }
}

fn check_grad_program(p: &Program, stats: &GradStats) -> std::result::Result<(), String> {
    bump(&stats.cases, 1);
    let q = differentiable(p);
    let inputs: Vec<Tensor> = q
        .inputs
        .iter()
        .map(|s| s.build_with(grad_data))
        .collect::<Result<_>>()
        .map_err(|e| format!("building the inputs failed: {e}"))?;
    let q = q.repaired(&inputs);
    if q.trace(&inputs).is_err() {
        return Ok(());
    }
    let body = Arc::new(q.clone());
    let f = compile(move |xs: &[Tensor]| Ok(body.trace(xs)?.outputs));
    let run = || -> std::result::Result<(), String> {
        if !compare_grads(&q, &f, &inputs, stats)? {
            return Ok(());
        }
        // The second size: grown dims, same compiled function.
        let r = resized(&q, 3);
        if r.inputs
            .iter()
            .zip(&q.inputs)
            .all(|(a, b)| a.shape == b.shape)
        {
            return Ok(());
        }
        let before = f.num_compiled();
        let xs: Vec<Tensor> = r
            .inputs
            .iter()
            .map(|s| s.build_with(grad_data))
            .collect::<Result<_>>()
            .map_err(|e| format!("building the resized inputs failed: {e}"))?;
        compare_grads(&r, &f, &xs, stats)
            .map_err(|e| format!("at the second size, inputs now:\n{r}\n{e}"))?;
        bump(&stats.resized, 1);
        bump(&stats.recompiled, f.num_compiled() - before);
        // Only a reduction's backward reads sizes (it expands to the input's shape).
        if f.num_compiled() != before && !matches!(q.tail, Tail::Reduce { .. }) {
            return Err(format!("recompiled at the second size, inputs now:\n{r}"));
        }
        Ok(())
    };
    run().map_err(|e| format!("program as run:\n{q}\n{e}"))?;
    // No silent fallback: only the opaque custom op without an autograd formula falls back.
    let fallbacks = f.training_fallbacks();
    bump(&stats.fallbacks, fallbacks.len());
    let opaque = q
        .ops
        .iter()
        .any(|o| matches!(o, Op::Custom(Custom::OpaqueAbs, _)));
    for why in fallbacks {
        if !opaque || !why.contains("fuzz::abs_opaque") {
            return Err(format!("program as run:\n{q}\nunexpected fallback: {why}"));
        }
    }
    Ok(())
}

/// Random programs with inputs that require grad: gradients through the compiled backward equal
/// eager ones, at the captured size and at a second size (`TP_FUZZ_GRAD_CASES`, default 1000;
/// `TP_FUZZ_SEED` as above).
#[test]
fn compiled_gradients_match_eager_on_random_programs() {
    let cases = env_u64("TP_FUZZ_GRAD_CASES").unwrap_or(1000) as u32;
    let seed = env_u64("TP_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    eprintln!("fuzz (gradients): TP_FUZZ_SEED={seed:#x} TP_FUZZ_GRAD_CASES={cases}");
    let stats = GradStats::default();
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let result = runner.run(&program_strategy(), |p| {
        check_grad_program(&p, &stats).map_err(TestCaseError::fail)
    });
    let load = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    eprintln!(
        "fuzz (gradients): {} programs, {} backward passes compared ({} at a second size, {} \
         recompiled), {} interpreter fallbacks (opaque op without a formula), {} backward kernels",
        load(&stats.cases),
        load(&stats.compared),
        load(&stats.resized),
        load(&stats.recompiled),
        load(&stats.fallbacks),
        load(&stats.backward_kernels),
    );
    match result {
        Ok(()) => {}
        Err(TestError::Fail(why, p)) => panic!(
            "compiled gradients != eager (TP_FUZZ_SEED={seed:#x}, TP_FUZZ_GRAD_CASES={cases}); \
             shrunk program:\n{p}\n{why}"
        ),
        Err(TestError::Abort(why)) => panic!("fuzzer aborted (TP_FUZZ_SEED={seed:#x}): {why}"),
    }
    assert!(
        load(&stats.compared) > cases as usize / 4,
        "too few programs differentiated"
    );
}

// ---- the fuzz sample on the CUDA backend, without a GPU -----------------------------------------

#[path = "common/cuda_emu.rs"]
mod cuda_emu;

/// A sample of random programs (`TP_CUDA_FUZZ_CASES`, default 300, from the default seed) checked
/// as above, with every fused region compiled by NVRTC (sm_90 PTX) and executed by its generated
/// CUDA kernel under the host emulation, against eager with the same error analysis.
#[test]
fn cuda_emulated_kernels_match_eager_on_a_fuzz_sample() {
    if std::env::var("TP_BULK_MATH").is_ok_and(|v| v == "0") {
        // Straight to stderr, past the harness's capture, so the CI log shows the skip.
        let _ = writeln!(
            std::io::stderr(),
            "cuda-emulation: skipped: TP_BULK_MATH=0 changes only the CPU kernels"
        );
        return;
    }
    let cases = env_u64("TP_CUDA_FUZZ_CASES").unwrap_or(300) as u32;
    let programs = std::cell::RefCell::new(Vec::new());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(DEFAULT_SEED)),
    );
    runner
        .run(&program_strategy(), |p| {
            programs.borrow_mut().push(p);
            Ok(())
        })
        .expect("generating programs");
    let programs = programs.into_inner();
    cuda_emu::check("fuzz sample", || {
        for p in &programs {
            if let Err(e) = check_program(p) {
                panic!("compiled (CUDA emulation) != eager:\n{p}\n{e}");
            }
        }
    });
}
