//! Elementwise ops: unary math, binary arithmetic, comparisons, logical ops, `where`, `clamp`.
//!
//! Values are checked against f64 references (Rust std / libm) in every float dtype, plus the
//! integer/bool dtype rules, broadcasting, non-contiguous inputs, NaN/±inf/±0 edge cases,
//! gradients (gradcheck), error cases and the parallel path on big tensors.

use half::{bf16, f16};
use tensorplay_ir::schema::Schema;
use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::ops::{all_ops, binary, compare, logical, unary};
use tensorplay_runtime::{DType, Device, Error, Result, Tensor};

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

/// A unary tensor op, its f64 reference, and a binary tensor op (for tables of cases).
type UnaryFn = fn(&Tensor) -> Result<Tensor>;
type RefFn = fn(f64) -> f64;
type BinaryFn = fn(&Tensor, &Tensor) -> Result<Tensor>;

fn vec1(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

fn of(v: &[f64], dtype: DType) -> Tensor {
    vec1(v).to_dtype(dtype).unwrap()
}

/// (rtol, atol) for comparing an op's output in `dtype` with the f64 reference rounded to it.
fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-15, 1e-300),
        DType::F32 => (4.8e-7, 1e-37),
        DType::F16 => (1e-3, 1e-7),
        DType::BF16 => (8e-3, 1e-37),
        _ => (0.0, 0.0),
    }
}

/// The f64 values `want` rounded to `dtype` (so overflow to inf and underflow match the dtype).
fn rounded(want: &[f64], dtype: DType) -> Vec<f64> {
    vec1(want).to_dtype(dtype).unwrap().to_vec_f64().unwrap()
}

fn assert_close(what: &str, dtype: DType, got: &[f64], want: &[f64], inputs: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let (rtol, atol) = tol(dtype);
    for i in 0..got.len() {
        let (g, w) = (got[i], want[i]);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what} [{dtype}] at input {}: got {g:e}, want {w:e}",
            inputs[i]
        );
    }
}

/// Runs `f` on `xs` in every float dtype and compares with `reference` applied to the inputs as
/// rounded to that dtype; the output keeps the input dtype.
fn check_unary(
    name: &str,
    f: impl Fn(&Tensor) -> Result<Tensor>,
    reference: impl Fn(f64) -> f64,
    xs: &[f64],
) {
    for dtype in FLOATS {
        let x = of(xs, dtype);
        let xin = x.to_vec_f64().unwrap();
        let y = f(&x).unwrap();
        assert_eq!(y.dtype(), dtype, "{name} keeps {dtype}");
        assert_eq!(y.shape(), x.shape());
        let want: Vec<f64> = xin.iter().map(|&v| reference(v)).collect();
        assert_close(
            name,
            dtype,
            &y.to_vec_f64().unwrap(),
            &rounded(&want, dtype),
            &xin,
        );
    }
}

/// Bitwise-ish equality (NaN equals NaN, and the sign of zero must match).
fn assert_same(what: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    let (x, y) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p.is_nan() && q.is_nan()) || (p == q && p.is_sign_negative() == q.is_sign_negative()),
            "{what} at {i}: {p:e} vs {q:e}"
        );
    }
}

/// A 2-D [4, 6] f32 tensor with mixed values.
fn grid(dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..24)
        .map(|i| ((i as f64) * 0.37 - 4.1) * if i % 3 == 0 { 1.0 } else { 0.6 })
        .collect();
    Tensor::from_vec(v, &[4, 6])
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

/// A unary op on transposed, step-2 sliced and expanded views equals the op on contiguous copies.
fn check_unary_layouts(name: &str, f: impl Fn(&Tensor) -> Result<Tensor>, x: &Tensor) {
    let views = [
        ("transposed", x.t().unwrap()),
        ("step-2 slice", x.slice(1, Some(1), None, 2).unwrap()),
        (
            "expanded",
            x.slice(0, Some(2), Some(3), 1)
                .unwrap()
                .expand(&[5, 6])
                .unwrap(),
        ),
    ];
    for (kind, v) in views {
        assert!(!v.is_contiguous(), "{kind} view is not contiguous");
        let want = f(&v.contiguous().unwrap()).unwrap();
        assert_same(&format!("{name} on {kind} input"), &f(&v).unwrap(), &want);
    }
}

/// A binary op on non-contiguous operands equals the op on contiguous copies.
fn check_binary_layouts(
    name: &str,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    a: &Tensor,
    b: &Tensor,
) {
    // a, b: [4, 6]
    let at = a.t().unwrap();
    let bt = b.t().unwrap();
    let cases = [
        ("transposed", at.clone(), bt.clone()),
        (
            "transposed + contiguous",
            at.clone(),
            bt.contiguous().unwrap(),
        ),
        (
            "step-2 slices",
            a.slice(1, None, None, 2).unwrap(),
            b.slice(1, Some(1), None, 2).unwrap(),
        ),
        (
            "expanded row",
            a.slice(0, Some(1), Some(2), 1)
                .unwrap()
                .expand(&[4, 6])
                .unwrap(),
            b.clone(),
        ),
    ];
    for (kind, x, y) in cases {
        let want = f(&x.contiguous().unwrap(), &y.contiguous().unwrap()).unwrap();
        assert_same(
            &format!("{name} on {kind} operands"),
            &f(&x, &y).unwrap(),
            &want,
        );
    }
}

fn opts() -> GradcheckOptions {
    GradcheckOptions::default()
}

fn leaf(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

/// Gradchecks a unary op on a contiguous input and on transposed, sliced and expanded views of it.
fn gradcheck_unary(name: &str, f: impl Fn(&Tensor) -> Result<Tensor> + Copy, vals: &[f64]) {
    assert_eq!(vals.len(), 6);
    let x = leaf(vals, &[2, 3]);
    gradcheck(|xs| f(&xs[0]), std::slice::from_ref(&x), opts())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    gradcheck(|xs| f(&xs[0].t()?), std::slice::from_ref(&x), opts())
        .unwrap_or_else(|e| panic!("{name} transposed: {e}"));
    gradcheck(
        |xs| f(&xs[0].slice(1, None, None, 2)?),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap_or_else(|e| panic!("{name} sliced: {e}"));
    gradcheck(
        |xs| f(&xs[0].unsqueeze(0)?.expand(&[2, 2, 3])?),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap_or_else(|e| panic!("{name} expanded: {e}"));
}

fn is_dtype_err(r: Result<Tensor>) -> bool {
    matches!(r, Err(Error::DType { .. }))
}
fn is_arg_err(r: Result<Tensor>) -> bool {
    matches!(r, Err(Error::Argument { .. }))
}
fn is_shape_err(r: Result<Tensor>) -> bool {
    matches!(r, Err(Error::Shape { .. }))
}

const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;

/// Inputs covering the real line, signed zeros, infinities and NaN.
const WIDE: &[f64] = &[
    -1000.0, -100.0, -30.0, -6.5, -2.5, -1.5, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-4, 0.5, 1.0, 1.5,
    2.5, 3.0, 6.0, 10.0, 88.0, 1000.0, INF, -INF, NAN,
];
/// Moderate inputs, where every float dtype represents the results well.
const MID: &[f64] = &[
    -6.0, -3.75, -2.5, -1.5, -1.0, -0.7, -0.5, -0.1, -0.0, 0.0, 0.03, 0.25, 0.5, 0.9, 1.0, 1.5,
    2.5, 3.2, 5.0,
];
/// Positive inputs and the domain edges of log/sqrt/rsqrt.
const POS: &[f64] = &[
    1e-30, 1e-5, 0.01, 0.3, 0.5, 1.0, 2.0, 3.7, 10.0, 1e4, 6e4, 0.0, -0.0, -1.0, INF, -INF, NAN,
];

fn sigmoid_ref(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
const K: f64 = 0.797_884_560_802_865_4; // sqrt(2/pi)
fn gelu_ref(x: f64) -> f64 {
    // 0.5 x (1 + erf(x/sqrt2)) written with erfc, which is the same function without the
    // cancellation of 1 + erf for negative x. erfc is so steep far out (relative slope ~2z) that
    // rounding its argument z = -x/sqrt2 alone costs 2 z^2 ulps (3e-14 at x = -30), so the part
    // `zl` of -x/sqrt2 that z loses enters to first order: erfc(z + zl) = erfc(z) - 2/sqrt(pi)
    // exp(-z^2) zl. (The second constant is 1/sqrt2 - FRAC_1_SQRT_2.)
    use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};
    let z = -x * FRAC_1_SQRT_2;
    let zl = (-x).mul_add(FRAC_1_SQRT_2, -z) + (-x) * -4.833_646_656_726_457e-17;
    let fix = if zl.is_finite() {
        FRAC_2_SQRT_PI * (-z * z).exp() * zl
    } else {
        0.0
    };
    0.5 * x * (libm::erfc(z) - fix)
}
/// `a * b` as an unevaluated sum (Dekker's product, by Veltkamp splitting: no fma).
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let split = |v: f64| {
        let t = 134_217_729.0 * v; // 2^27 + 1
        let hi = t - (t - v);
        (hi, v - hi)
    };
    let p = a * b;
    let ((ah, al), (bh, bl)) = (split(a), split(b));
    (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
}
fn gelu_tanh_ref(x: f64) -> f64 {
    // 0.5 x (1 + tanh u) == x / (1 + exp(-2u)), again the cancellation-free way round. exp
    // amplifies the relative error of u about 2|u| times (a dozen ulps at x = -6.5), so u is
    // carried with its rounding error: u = K (x + C x^3) in two parts, constants included
    // (K_LO = sqrt(2/pi) - K, C_LO = 0.044715 - C), and exp(-2u) = exp(-2 u_hi) (1 - 2 u_lo).
    const K_LO: f64 = -4.984_654_404_555_46e-17;
    const C: f64 = 0.044715;
    const C_LO: f64 = 2.196_021_142_708_559_5e-18;
    if !x.is_finite() || x.abs() > 1e100 {
        return x / (1.0 + (-2.0 * K * (x + C * x * x * x)).exp());
    }
    let (x2, x2l) = two_prod(x, x);
    let (x3, x3l) = two_prod(x2, x);
    let x3l = x3l + x2l * x;
    let (c3, c3l) = two_prod(C, x3);
    let c3l = c3l + C * x3l + C_LO * x3;
    let s = x + c3;
    let sl = if x.abs() > c3.abs() {
        (x - s) + c3
    } else {
        (c3 - s) + x
    } + c3l;
    let (u, ul) = two_prod(K, s);
    let ul = ul + K * sl + K_LO * s;
    x / (1.0 + (-2.0 * u).exp() * (1.0 - 2.0 * ul))
}

// ---- unary: values ------------------------------------------------------------------------------

#[test]
fn unary_values_match_f64_references() {
    check_unary("neg", Tensor::neg, |x| -x, WIDE);
    check_unary("abs", Tensor::abs, f64::abs, WIDE);
    check_unary("exp", Tensor::exp, f64::exp, MID);
    check_unary("exp wide", Tensor::exp, f64::exp, WIDE);
    check_unary(
        "relu",
        Tensor::relu,
        |x| if x > 0.0 || x.is_nan() { x } else { 0.0 },
        WIDE,
    );
    check_unary("log", Tensor::log, f64::ln, POS);
    check_unary("sqrt", Tensor::sqrt, f64::sqrt, POS);
    check_unary("rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt(), POS);
    check_unary("reciprocal", Tensor::reciprocal, |x| 1.0 / x, WIDE);
    check_unary("sin", Tensor::sin, f64::sin, WIDE);
    check_unary("cos", Tensor::cos, f64::cos, WIDE);
    check_unary("tanh", Tensor::tanh, f64::tanh, WIDE);
    check_unary("sigmoid", Tensor::sigmoid, sigmoid_ref, WIDE);
    check_unary("silu", Tensor::silu, |x| x * sigmoid_ref(x), MID);
    check_unary("silu wide", Tensor::silu, |x| x / (1.0 + (-x).exp()), WIDE);
    check_unary("erf", Tensor::erf, libm::erf, WIDE);
    check_unary("gelu", |x| x.gelu("none"), gelu_ref, WIDE);
    check_unary("gelu tanh", |x| x.gelu("tanh"), gelu_tanh_ref, WIDE);
    check_unary("floor", Tensor::floor, f64::floor, WIDE);
    check_unary("ceil", Tensor::ceil, f64::ceil, WIDE);
    check_unary("round", Tensor::round, f64::round_ties_even, WIDE);
    check_unary("square", Tensor::square, |x| x * x, WIDE);
}

#[test]
fn gelu_matches_the_literal_formulas() {
    // The literal PyTorch formulas, on inputs where 1 + erf / 1 + tanh does not cancel much.
    let xs: Vec<f64> = (-30..=30).map(|i| i as f64 * 0.1).collect();
    let x = vec1(&xs);
    let erf_form: Vec<f64> = xs
        .iter()
        .map(|&v| 0.5 * v * (1.0 + libm::erf(v / 2f64.sqrt())))
        .collect();
    let tanh_form: Vec<f64> = xs
        .iter()
        .map(|&v| 0.5 * v * (1.0 + (K * (v + 0.044715 * v * v * v)).tanh()))
        .collect();
    for (got, want) in [
        (x.gelu("none").unwrap(), erf_form),
        (x.gelu("tanh").unwrap(), tanh_form),
    ] {
        for ((g, w), v) in got.to_vec::<f64>().unwrap().iter().zip(&want).zip(&xs) {
            assert!(
                (g - w).abs() <= 1e-15 + 1e-12 * w.abs(),
                "gelu({v}): {g} vs {w}"
            );
        }
    }
    // Known values: Phi(1) = 0.8413447460685429.
    let g = vec1(&[1.0, -1.0])
        .gelu("none")
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!((g[0] - 0.841_344_746_068_542_9).abs() < 1e-15);
    assert!((g[1] + 0.158_655_253_931_457_05).abs() < 1e-15);
}

#[test]
fn unary_edge_cases() {
    let v = |t: Tensor| t.to_vec::<f64>().unwrap();
    let f = |x: &[f64]| vec1(x);
    // log
    let l = v(f(&[0.0, -0.0, -1.0, INF, 1.0]).log().unwrap());
    assert_eq!(&l[..2], &[-INF, -INF]);
    assert!(l[2].is_nan());
    assert_eq!(&l[3..], &[INF, 0.0]);
    // sqrt keeps the sign of zero; rsqrt/reciprocal of ±0 are ±inf
    let s = v(f(&[-0.0, 0.0, -1.0, INF]).sqrt().unwrap());
    assert!(s[0] == 0.0 && s[0].is_sign_negative());
    assert!(s[1] == 0.0 && s[1].is_sign_positive());
    assert!(s[2].is_nan());
    assert_eq!(s[3], INF);
    assert_eq!(
        v(f(&[0.0, -0.0, INF, 4.0]).rsqrt().unwrap()),
        vec![INF, -INF, 0.0, 0.5]
    );
    assert_eq!(
        v(f(&[0.0, -0.0, INF, -4.0]).reciprocal().unwrap()),
        vec![INF, -INF, 0.0, -0.25]
    );
    // relu: PyTorch's clamp_min(x, 0) keeps -0.0 (and NaN)
    let r = v(f(&[NAN, -0.0, -2.0, 3.0]).relu().unwrap());
    assert!(r[0].is_nan());
    assert!(r[1] == 0.0 && r[1].is_sign_negative());
    assert_eq!(&r[2..], &[0.0, 3.0]);
    // sigmoid saturates without NaN, in every float dtype
    for dtype in FLOATS {
        let s = of(&[-1000.0, -1e30, 1000.0, 1e30, -INF, INF], dtype)
            .sigmoid()
            .unwrap()
            .to_vec_f64()
            .unwrap();
        assert_eq!(
            s,
            vec![0.0, 0.0, 1.0, 1.0, 0.0, 1.0],
            "sigmoid saturation in {dtype}"
        );
    }
    assert!(f(&[NAN]).sigmoid().unwrap().to_vec::<f64>().unwrap()[0].is_nan());
    // tanh(±inf) = ±1, tanh(-0) = -0
    let t = v(f(&[INF, -INF, -0.0]).tanh().unwrap());
    assert_eq!(&t[..2], &[1.0, -1.0]);
    assert!(t[2].is_sign_negative());
    // erf
    assert_eq!(v(f(&[INF, -INF, 0.0]).erf().unwrap()), vec![1.0, -1.0, 0.0]);
    // gelu/silu: +inf stays inf; -inf is NaN like PyTorch (x * 0)
    for g in [
        f(&[INF, -INF]).gelu("none").unwrap(),
        f(&[INF, -INF]).gelu("tanh").unwrap(),
        f(&[INF, -INF]).silu().unwrap(),
    ] {
        let g = v(g);
        assert_eq!(g[0], INF);
        assert!(g[1].is_nan());
    }
    // very negative finite inputs give (negative) zero, never NaN
    for g in [
        f(&[-1e30]).gelu("none").unwrap(),
        f(&[-1e30]).gelu("tanh").unwrap(),
        f(&[-1e30]).silu().unwrap(),
    ] {
        assert_eq!(v(g), vec![0.0]);
    }
    // sin/cos of inf are NaN
    assert!(v(f(&[INF]).sin().unwrap())[0].is_nan());
    assert!(v(f(&[-INF]).cos().unwrap())[0].is_nan());
    // round half to even; floor/ceil of -0.5 keep IEEE signs
    assert_eq!(
        v(f(&[0.5, 1.5, -2.5, 2.5, -0.5, 2.4999, 1e300])
            .round()
            .unwrap()),
        vec![0.0, 2.0, -2.0, 2.0, -0.0, 2.0, 1e300]
    );
    assert!(v(f(&[-0.5]).round().unwrap())[0].is_sign_negative());
    assert!(v(f(&[-0.5]).ceil().unwrap())[0].is_sign_negative());
    assert_eq!(
        v(f(&[-0.5, 2.0, INF]).floor().unwrap()),
        vec![-1.0, 2.0, INF]
    );
    // round in half precision: 2.5 is exact in f16
    assert_eq!(
        of(&[2.5, 3.5, -0.5], DType::F16)
            .round()
            .unwrap()
            .to_vec::<f16>()
            .unwrap(),
        vec![f16::from_f32(2.0), f16::from_f32(4.0), f16::from_f32(-0.0)]
    );
    // exp overflow / underflow
    assert_eq!(
        v(f(&[1000.0, -1000.0, -INF]).exp().unwrap()),
        vec![INF, 0.0, 0.0]
    );
    // square of nan / inf
    let q = v(f(&[NAN, -INF]).square().unwrap());
    assert!(q[0].is_nan());
    assert_eq!(q[1], INF);
}

#[test]
fn unary_integer_and_bool_dtype_rules() {
    let i32s = Tensor::from_vec(vec![i32::MIN, -7, -1, 0, 1, 5, i32::MAX], &[7]).unwrap();
    let i64s = Tensor::from_vec(vec![i64::MIN, -7, -1, 0, 1, 5, i64::MAX], &[7]).unwrap();
    let bools = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();

    // neg/abs/sign/relu/square keep integer dtypes and wrap.
    assert_eq!(
        i32s.neg().unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, 7, 1, 0, -1, -5, -i32::MAX]
    );
    assert_eq!(
        i32s.abs().unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, 7, 1, 0, 1, 5, i32::MAX]
    );
    assert_eq!(i64s.neg().unwrap().to_vec::<i64>().unwrap()[0], i64::MIN);
    assert_eq!(i64s.abs().unwrap().to_vec::<i64>().unwrap()[0], i64::MIN);
    assert_eq!(
        i64s.sign().unwrap().to_vec::<i64>().unwrap(),
        vec![-1, -1, -1, 0, 1, 1, 1]
    );
    assert_eq!(
        i32s.relu().unwrap().to_vec::<i32>().unwrap(),
        vec![0, 0, 0, 0, 1, 5, i32::MAX]
    );
    let sq = Tensor::from_vec(vec![46341i32, -3, 65536], &[3])
        .unwrap()
        .square()
        .unwrap();
    assert_eq!(
        sq.to_vec::<i32>().unwrap(),
        vec![46341i32.wrapping_mul(46341), 9, 0]
    );
    assert_eq!(
        i64s.square().unwrap().to_vec::<i64>().unwrap()[6],
        i64::MAX.wrapping_mul(i64::MAX)
    );

    // floor/ceil/round copy integers unchanged.
    for op in [Tensor::floor, Tensor::ceil, Tensor::round] {
        assert_same("rounding an i32", &op(&i32s).unwrap(), &i32s);
        assert_same("rounding an i64", &op(&i64s).unwrap(), &i64s);
    }

    // Floating ops on integers and bools compute in f32.
    let float_ops: [(&str, UnaryFn, RefFn); 13] = [
        ("exp", Tensor::exp, f64::exp),
        ("log", Tensor::log, f64::ln),
        ("sqrt", Tensor::sqrt, f64::sqrt),
        ("rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt()),
        ("reciprocal", Tensor::reciprocal, |x| 1.0 / x),
        ("sin", Tensor::sin, f64::sin),
        ("cos", Tensor::cos, f64::cos),
        ("tanh", Tensor::tanh, f64::tanh),
        ("sigmoid", Tensor::sigmoid, sigmoid_ref),
        ("silu", Tensor::silu, |x| x * sigmoid_ref(x)),
        ("erf", Tensor::erf, libm::erf),
        ("gelu", |x| x.gelu("none"), gelu_ref),
        ("gelu tanh", |x| x.gelu("tanh"), gelu_tanh_ref),
    ];
    let ints = Tensor::from_vec(vec![-3i64, -1, 0, 1, 2, 7], &[6]).unwrap();
    for (name, op, reference) in float_ops {
        for x in [&ints, &ints.to_dtype(DType::I32).unwrap(), &bools] {
            let y = op(x).unwrap();
            assert_eq!(y.dtype(), DType::F32, "{name} of {}", x.dtype());
            let xin = x.to_vec_f64().unwrap();
            let want: Vec<f64> = xin.iter().map(|&v| reference(v)).collect();
            assert_close(
                name,
                DType::F32,
                &y.to_vec_f64().unwrap(),
                &rounded(&want, DType::F32),
                &xin,
            );
        }
    }

    // Bool rules.
    assert!(is_dtype_err(bools.neg()), "neg of bool is an error");
    assert!(is_dtype_err(bools.relu()));
    for op in [Tensor::floor, Tensor::ceil, Tensor::round] {
        assert!(is_dtype_err(op(&bools)));
    }
    assert_eq!(
        bools.abs().unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, true]
    );
    assert_eq!(
        bools.sign().unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, true]
    );
    let sq = bools.square().unwrap();
    assert_eq!(sq.dtype(), DType::I64);
    assert_eq!(sq.to_vec::<i64>().unwrap(), vec![1, 0, 1]);
}

#[test]
fn unary_non_contiguous_inputs() {
    type Op = fn(&Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 20] = [
        ("neg", Tensor::neg),
        ("abs", Tensor::abs),
        ("exp", Tensor::exp),
        ("sign", Tensor::sign),
        ("relu", Tensor::relu),
        ("log", Tensor::log),
        ("sqrt", Tensor::sqrt),
        ("rsqrt", Tensor::rsqrt),
        ("reciprocal", Tensor::reciprocal),
        ("sin", Tensor::sin),
        ("cos", Tensor::cos),
        ("tanh", Tensor::tanh),
        ("sigmoid", Tensor::sigmoid),
        ("gelu", |x| x.gelu("none")),
        ("silu", Tensor::silu),
        ("erf", Tensor::erf),
        ("floor", Tensor::floor),
        ("ceil", Tensor::ceil),
        ("round", Tensor::round),
        ("square", Tensor::square),
    ];
    for dtype in [DType::F32, DType::F64, DType::BF16] {
        let x = grid(dtype);
        for (name, op) in ops {
            check_unary_layouts(name, op, &x);
        }
        check_unary_layouts("gelu tanh", |x| x.gelu("tanh"), &x);
    }
    let xi = grid(DType::F32)
        .mul_scalar(3.0)
        .unwrap()
        .to_dtype(DType::I32)
        .unwrap();
    let int_ops: [(&str, Op); 4] = [
        ("neg", Tensor::neg),
        ("abs", Tensor::abs),
        ("floor", Tensor::floor),
        ("log", Tensor::log),
    ];
    for (name, op) in int_ops {
        check_unary_layouts(name, op, &xi);
    }
}

#[test]
fn gelu_rejects_unknown_approximations() {
    let x = vec1(&[1.0]);
    let e = x.gelu("fast").unwrap_err();
    assert!(
        matches!(&e, Error::Argument { arg, .. } if arg == "approximate"),
        "{e}"
    );
    assert!(e.to_string().contains("\"fast\""), "{e}");
    assert!(is_arg_err(x.gelu("Tanh")));
    assert!(is_arg_err(x.gelu("")));
}

// ---- unary: gradients ---------------------------------------------------------------------------

#[test]
fn unary_gradients() {
    let any = [-1.7, -0.6, 0.25, 0.8, 1.3, 2.1];
    let pos = [0.3, 0.7, 1.1, 1.9, 2.5, 4.0];
    let away_from_int = [-1.7, -0.6, 0.3, 0.8, 1.3, 2.2]; // away from integers and .5 points
    type Op = fn(&Tensor) -> Result<Tensor>;
    let cases: [(&str, Op, &[f64]); 22] = [
        ("neg", Tensor::neg, &any),
        ("abs", Tensor::abs, &any),
        ("exp", Tensor::exp, &any),
        ("sign", Tensor::sign, &any),
        ("relu", Tensor::relu, &any),
        ("log", Tensor::log, &pos),
        ("sqrt", Tensor::sqrt, &pos),
        ("rsqrt", Tensor::rsqrt, &pos),
        ("reciprocal", Tensor::reciprocal, &any),
        ("sin", Tensor::sin, &any),
        ("cos", Tensor::cos, &any),
        ("tanh", Tensor::tanh, &any),
        ("sigmoid", Tensor::sigmoid, &any),
        ("gelu", |x| x.gelu("none"), &any),
        ("gelu tanh", |x| x.gelu("tanh"), &any),
        ("silu", Tensor::silu, &any),
        ("erf", Tensor::erf, &any),
        ("floor", Tensor::floor, &away_from_int),
        ("ceil", Tensor::ceil, &away_from_int),
        ("round", Tensor::round, &away_from_int),
        ("square", Tensor::square, &any),
        ("sigmoid of large", |x| x.mul_scalar(8.0)?.sigmoid(), &any),
    ];
    for (name, op, vals) in cases {
        gradcheck_unary(name, op, vals);
    }
}

#[test]
fn unary_gradient_values() {
    // Exact derivative formulas at a few points (not just consistency with finite differences).
    let x = leaf(&[0.5, -1.0, 2.0], &[3]);
    let d = |y: Tensor| -> Vec<f64> {
        y.sum_all().unwrap().backward().unwrap();
        let g = x.grad().unwrap().to_vec::<f64>().unwrap();
        x.zero_grad();
        g
    };
    let xs = [0.5f64, -1.0, 2.0];
    let close = |got: Vec<f64>, want: Vec<f64>, what: &str| {
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-12 * (1.0 + w.abs()),
                "{what}: {got:?} vs {want:?}"
            );
        }
    };
    close(
        d(x.erf().unwrap()),
        xs.iter()
            .map(|v| 2.0 / std::f64::consts::PI.sqrt() * (-v * v).exp())
            .collect(),
        "erf'",
    );
    close(
        d(x.silu().unwrap()),
        xs.iter()
            .map(|&v| {
                let s = sigmoid_ref(v);
                s * (1.0 + v * (1.0 - s))
            })
            .collect(),
        "silu'",
    );
    let phi = |v: f64| (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
    close(
        d(x.gelu("none").unwrap()),
        xs.iter()
            .map(|&v| 0.5 * (1.0 + libm::erf(v / 2f64.sqrt())) + v * phi(v))
            .collect(),
        "gelu'",
    );
    let tanh_d = |v: f64| {
        let t = (K * (v + 0.044715 * v * v * v)).tanh();
        0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * K * (1.0 + 3.0 * 0.044715 * v * v)
    };
    close(
        d(x.gelu("tanh").unwrap()),
        xs.iter().map(|&v| tanh_d(v)).collect(),
        "gelu tanh'",
    );
    close(d(x.round().unwrap()), vec![0.0; 3], "round'");
    close(
        d(x.tanh().unwrap()),
        xs.iter().map(|v| 1.0 - v.tanh().powi(2)).collect(),
        "tanh'",
    );
}

// ---- binary -------------------------------------------------------------------------------------

fn check_binary(
    name: &str,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    reference: impl Fn(f64, f64) -> f64,
    xs: &[f64],
    ys: &[f64],
) {
    for dtype in FLOATS {
        let (x, y) = (of(xs, dtype), of(ys, dtype));
        let (xin, yin) = (x.to_vec_f64().unwrap(), y.to_vec_f64().unwrap());
        let out = f(&x, &y).unwrap();
        assert_eq!(out.dtype(), dtype, "{name} keeps {dtype}");
        let want: Vec<f64> = xin
            .iter()
            .zip(&yin)
            .map(|(&a, &b)| reference(a, b))
            .collect();
        assert_close(
            name,
            dtype,
            &out.to_vec_f64().unwrap(),
            &rounded(&want, dtype),
            &xin,
        );
    }
}

#[test]
fn binary_values_match_f64_references() {
    let xs = [
        -3.0, -2.0, -0.5, -0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 1.5, NAN, 1.0, INF, -INF, 4.0, 2.0,
        -8.0,
    ];
    let ys = [
        2.0,
        3.0,
        2.0,
        -1.0,
        -1.0,
        0.0,
        -2.0,
        NAN,
        10.0,
        0.5,
        -1.5,
        0.0,
        INF,
        -1.0,
        3.0,
        -0.5,
        0.25,
        1.0 / 3.0,
    ];
    check_binary("pow", Tensor::pow, f64::powf, &xs, &ys);
    check_binary(
        "maximum",
        Tensor::maximum,
        |a, b| {
            if a.is_nan() || b.is_nan() {
                NAN
            } else {
                a.max(b)
            }
        },
        &xs,
        &ys,
    );
    check_binary(
        "minimum",
        Tensor::minimum,
        |a, b| {
            if a.is_nan() || b.is_nan() {
                NAN
            } else {
                a.min(b)
            }
        },
        &xs,
        &ys,
    );
    check_binary("add", Tensor::add, |a, b| a + b, &xs, &ys);
    check_binary("sub", Tensor::sub, |a, b| a - b, &xs, &ys);
    check_binary("mul", Tensor::mul, |a, b| a * b, &xs, &ys);
    check_binary("div", Tensor::div, |a, b| a / b, &xs, &ys);
    // pow over a dense grid of moderate values
    let grid_x: Vec<f64> = (0..40).map(|i| 0.05 + i as f64 * 0.21).collect();
    let grid_y: Vec<f64> = (0..40).map(|i| -3.0 + i as f64 * 0.17).collect();
    check_binary("pow grid", Tensor::pow, f64::powf, &grid_x, &grid_y);
}

#[test]
fn pow_edge_cases() {
    let v = |t: Tensor| t.to_vec::<f64>().unwrap();
    let p = v(
        vec1(&[0.0, NAN, 1.0, -1.0, 0.0, -0.0, -8.0, INF, -2.0, 0.0])
            .pow(&vec1(&[
                0.0,
                0.0,
                NAN,
                INF,
                -1.0,
                -1.0,
                1.0 / 3.0,
                -1.0,
                3.0,
                0.5,
            ]))
            .unwrap(),
    );
    assert_eq!(&p[..6], &[1.0, 1.0, 1.0, 1.0, INF, -INF]);
    assert!(p[6].is_nan());
    assert_eq!(&p[7..], &[0.0, -8.0, 0.0]);
    // scalar exponents keep the tensor's dtype; int tensor with float exponent -> f32
    let h = of(&[2.0, 3.0], DType::F16).pow_scalar(2.0).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(h.to_vec_f64().unwrap(), vec![4.0, 9.0]);
    let i = Tensor::from_vec(vec![2i32, 4], &[2]).unwrap();
    let r = i.pow_scalar(-1.0).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.5, 0.25]);
    let r = i.pow_scalar(0.5).unwrap().to_vec::<f32>().unwrap();
    assert!(
        (r[0] - 2f32.sqrt()).abs() <= f32::EPSILON && r[1] == 2.0,
        "{r:?}"
    );
    assert_eq!(
        i.pow_scalar(0).unwrap().to_vec::<i32>().unwrap(),
        vec![1, 1]
    );
    // negative integer Rust-scalar exponent on integer (or bool) tensors: error, like PyTorch
    let e = i.pow_scalar(-2).unwrap_err();
    assert!(
        matches!(&e, Error::Argument { op, arg, .. } if op == "pow" && arg == "exponent"),
        "{e}"
    );
    assert!(e.to_string().contains("negative integer powers"), "{e}");
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    assert!(is_arg_err(b.pow_scalar(-1)));
    // but fine on float tensors
    assert_eq!(
        vec1(&[2.0])
            .pow_scalar(-2)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![0.25]
    );
    // bool base with int exponent -> i64; bool ** bool is an error
    let bp = b.pow_scalar(2).unwrap();
    assert_eq!(bp.dtype(), DType::I64);
    assert_eq!(bp.to_vec::<i64>().unwrap(), vec![1, 0]);
    assert!(is_dtype_err(b.pow(&b)));
    // mixed dtypes promote: i64 ** f32 -> f32
    let m = Tensor::from_vec(vec![4i64, 9], &[2])
        .unwrap()
        .pow(&Tensor::from_vec(vec![0.5f32, 0.5], &[2]).unwrap())
        .unwrap();
    assert_eq!(m.dtype(), DType::F32);
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
}

#[test]
fn integer_pow_wraps_and_handles_negative_exponents() {
    let bases = [2i64, 3, -3, 0, 7, 1, -1, -1, 2, 0, 5, -2, 10];
    let exps = [62i64, 40, 41, 0, 0, -7, -3, -4, 64, 5, 1, -1, 19];
    let want: Vec<i64> = bases
        .iter()
        .zip(&exps)
        .map(|(&b, &e)| {
            if e < 0 {
                match b {
                    1 => 1,
                    -1 => {
                        if e % 2 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                b.wrapping_pow(e as u32)
            }
        })
        .collect();
    let got = Tensor::from_vec(bases.to_vec(), &[13])
        .unwrap()
        .pow(&Tensor::from_vec(exps.to_vec(), &[13]).unwrap())
        .unwrap();
    assert_eq!(got.dtype(), DType::I64);
    assert_eq!(got.to_vec::<i64>().unwrap(), want);
    assert_eq!(want[0], 1 << 62);
    assert_eq!(want[8], 0, "2^64 wraps to 0");
    // i32 wraps in 32 bits
    let b32: Vec<i32> = bases.iter().map(|&b| b as i32).collect();
    let e32: Vec<i32> = exps.iter().map(|&e| e as i32).collect();
    let got = Tensor::from_vec(b32.clone(), &[13])
        .unwrap()
        .pow(&Tensor::from_vec(e32.clone(), &[13]).unwrap())
        .unwrap();
    let want32: Vec<i32> = b32
        .iter()
        .zip(&e32)
        .map(|(&b, &e)| {
            if e < 0 {
                match b {
                    1 => 1,
                    -1 => {
                        if e % 2 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                b.wrapping_pow(e as u32)
            }
        })
        .collect();
    assert_eq!(got.to_vec::<i32>().unwrap(), want32);
    // scalar exponent on i32
    assert_eq!(
        Tensor::from_vec(vec![3i32], &[1])
            .unwrap()
            .pow_scalar(21)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![3i32.wrapping_pow(21)]
    );
}

#[test]
fn maximum_minimum_edge_cases() {
    let a = vec1(&[NAN, 1.0, -INF, 2.0, NAN]);
    let b = vec1(&[1.0, NAN, 0.0, 2.0, NAN]);
    let mx = a.maximum(&b).unwrap().to_vec::<f64>().unwrap();
    let mn = a.minimum(&b).unwrap().to_vec::<f64>().unwrap();
    assert!(mx[0].is_nan() && mx[1].is_nan() && mx[4].is_nan());
    assert!(mn[0].is_nan() && mn[1].is_nan() && mn[4].is_nan());
    assert_eq!((mx[2], mx[3], mn[2], mn[3]), (0.0, 2.0, -INF, 2.0));
    // in half precision too
    let h = of(&[NAN, 3.0], DType::BF16)
        .maximum(&of(&[1.0, NAN], DType::BF16))
        .unwrap()
        .to_vec_f64()
        .unwrap();
    assert!(h[0].is_nan() && h[1].is_nan());
    // integers and bools
    let i = Tensor::from_vec(vec![i64::MIN, 5, -3], &[3]).unwrap();
    let j = Tensor::from_vec(vec![0i64, i64::MAX, -4], &[3]).unwrap();
    assert_eq!(
        i.maximum(&j).unwrap().to_vec::<i64>().unwrap(),
        vec![0, i64::MAX, -3]
    );
    assert_eq!(
        i.minimum(&j).unwrap().to_vec::<i64>().unwrap(),
        vec![i64::MIN, 5, -4]
    );
    let p = Tensor::from_vec(vec![true, false, true, false], &[4]).unwrap();
    let q = Tensor::from_vec(vec![true, true, false, false], &[4]).unwrap();
    assert_eq!(
        p.maximum(&q).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true, true, false]
    );
    assert_eq!(
        p.minimum(&q).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, false, false]
    );
    // promotion: i32 with f16 -> f16; i32 with a float Rust scalar -> f32
    let m = Tensor::from_vec(vec![1i32, 7], &[2])
        .unwrap()
        .maximum(&of(&[2.5, 3.0], DType::F16))
        .unwrap();
    assert_eq!(m.dtype(), DType::F16);
    assert_eq!(m.to_vec_f64().unwrap(), vec![2.5, 7.0]);
    let s = Tensor::from_vec(vec![1i32, 7], &[2])
        .unwrap()
        .minimum(&Tensor::wrapped_scalar(2.5.into()))
        .unwrap();
    assert_eq!(s.dtype(), DType::F32);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![1.0, 2.5]);
}

#[test]
fn integer_arithmetic_wraps() {
    let a = Tensor::from_vec(vec![i32::MAX, i32::MIN, 65536], &[3]).unwrap();
    let b = Tensor::from_vec(vec![1i32, -1, 65536], &[3]).unwrap();
    assert_eq!(
        a.add(&b).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, i32::MAX, 131072]
    );
    assert_eq!(
        a.mul(&b).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MAX, i32::MIN, 0]
    );
    assert_eq!(
        a.sub(&b).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MAX - 1, i32::MIN + 1, 0]
    );
    let m = Tensor::from_vec(vec![i32::MIN, i32::MAX], &[2]).unwrap();
    assert_eq!(
        m.sub_scalar(1).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MAX, i32::MAX - 1]
    );
    assert_eq!(
        m.neg().unwrap().add(&m).unwrap().to_vec::<i32>().unwrap(),
        vec![0, 0]
    );
    let c = Tensor::from_vec(vec![i64::MAX], &[1]).unwrap();
    assert_eq!(
        c.add_scalar(1).unwrap().to_vec::<i64>().unwrap(),
        vec![i64::MIN]
    );
    assert_eq!(c.mul_scalar(2).unwrap().to_vec::<i64>().unwrap(), vec![-2]);
}

#[test]
fn binary_broadcasting() {
    let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1]).unwrap();
    let b = Tensor::from_vec(vec![0.5f32, 1.0, 2.0, -1.0], &[4]).unwrap();
    type Op = BinaryFn;
    type Ref = fn(f32, f32) -> f32;
    let cases: [(&str, Op, Ref); 7] = [
        ("add", Tensor::add, |x, y| x + y),
        ("sub", Tensor::sub, |x, y| x - y),
        ("mul", Tensor::mul, |x, y| x * y),
        ("div", Tensor::div, |x, y| x / y),
        ("pow", Tensor::pow, f32::powf),
        ("maximum", Tensor::maximum, f32::max),
        ("minimum", Tensor::minimum, f32::min),
    ];
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    for (name, op, reference) in cases {
        for (x, y, swap) in [(&a, &b, false), (&b, &a, true)] {
            let out = op(x, y).unwrap();
            assert_eq!(out.shape(), &[3, 4], "{name}");
            let got = out.to_vec::<f32>().unwrap();
            for i in 0..3 {
                for j in 0..4 {
                    let want = if swap {
                        reference(bv[j], av[i])
                    } else {
                        reference(av[i], bv[j])
                    };
                    assert_eq!(got[i * 4 + j], want, "{name}[{i}, {j}]");
                }
            }
        }
    }
    // a 0-d tensor and a wrapped scalar broadcast against anything
    let z = Tensor::scalar(2.0f32);
    assert_eq!(
        b.pow(&z).unwrap().to_vec::<f32>().unwrap(),
        vec![0.25, 1.0, 4.0, 1.0]
    );
    assert_eq!(a.pow_scalar(2).unwrap().shape(), &[3, 1]);
    // shapes that do not broadcast are errors naming both shapes
    let bad = Tensor::ones(&[2, 3], DType::F32);
    let all: [Op; 6] = [
        Tensor::add,
        Tensor::pow,
        Tensor::maximum,
        Tensor::minimum,
        Tensor::lt,
        Tensor::logical_and,
    ];
    for op in all {
        let e = op(&bad, &b).unwrap_err();
        assert!(matches!(e, Error::Shape { .. }), "{e}");
        assert!(
            e.to_string().contains("[2, 3]") && e.to_string().contains("[4]"),
            "{e}"
        );
    }
}

#[test]
fn binary_non_contiguous_operands() {
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Op); 15] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("pow", |a, b| a.abs()?.pow(b)),
        ("maximum", Tensor::maximum),
        ("minimum", Tensor::minimum),
        ("eq", Tensor::eq),
        ("lt", Tensor::lt),
        ("ge", Tensor::ge),
        ("logical_and", Tensor::logical_and),
        ("logical_or", Tensor::logical_or),
        ("logical_xor", Tensor::logical_xor),
        ("where", |a, b| Tensor::where_cond(&a.gt(b)?, a, b)),
        ("clamp-like", |a, b| a.maximum(&b.neg()?)?.minimum(b)),
    ];
    for dtype in [DType::F32, DType::F64, DType::F16, DType::I64] {
        let a = grid(dtype);
        let b = grid(DType::F32)
            .mul_scalar(-0.5)
            .unwrap()
            .add_scalar(0.25)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        for (name, op) in ops {
            if dtype == DType::I64 && name == "div" {
                continue;
            }
            check_binary_layouts(name, op, &a, &b);
        }
    }
}

#[test]
fn binary_gradients() {
    // pow: positive bases (ln x defined), exponents of both signs; broadcast and non-contiguous.
    let x = leaf(&[0.4, 0.9, 1.3, 2.0, 2.7, 3.1], &[2, 3]);
    let y = leaf(&[-1.5, 0.5, 2.2], &[3]);
    let y_col = leaf(&[1.7, 0.8], &[2, 1]);
    gradcheck(|xs| xs[0].pow(&xs[1]), &[x.clone(), y.clone()], opts()).unwrap();
    gradcheck(|xs| xs[0].pow(&xs[1]), &[x.clone(), y_col.clone()], opts()).unwrap();
    gradcheck(|xs| xs[1].pow(&xs[0]), &[y_col.clone(), x.clone()], opts()).unwrap();
    gradcheck(
        |xs| xs[0].t()?.pow(&xs[1]),
        &[x.clone(), leaf(&[0.3, -1.1], &[2])],
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| xs[0].slice(1, None, None, 2)?.pow(&xs[1].expand(&[2, 2])?),
        &[x.clone(), leaf(&[1.4, 0.6], &[2])],
        opts(),
    )
    .unwrap();
    gradcheck(|xs| xs[0].pow_scalar(2.5), std::slice::from_ref(&x), opts()).unwrap();
    gradcheck(|xs| xs[0].pow_scalar(-2), std::slice::from_ref(&x), opts()).unwrap();
    gradcheck(
        |xs| xs[0].neg()?.pow_scalar(3),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap();
    // an f64 base with an integer exponent tensor: only the base needs a gradient
    let iy = Tensor::from_vec(vec![2i64, -1, 3], &[3]).unwrap();
    gradcheck(|xs| xs[0].pow(&iy), std::slice::from_ref(&x), opts()).unwrap();

    // maximum / minimum away from ties; broadcast and non-contiguous
    let a = leaf(&[0.1, -2.0, 3.0, 0.7, -0.4, 1.9], &[2, 3]);
    let b = leaf(&[0.5, -1.0, 1.2], &[3]);
    for (name, op) in [
        (
            "maximum",
            Tensor::maximum as fn(&Tensor, &Tensor) -> Result<Tensor>,
        ),
        ("minimum", Tensor::minimum),
    ] {
        gradcheck(|xs| op(&xs[0], &xs[1]), &[a.clone(), b.clone()], opts())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        gradcheck(
            |xs| op(&xs[1], &xs[0].t()?.t()?),
            &[a.clone(), b.clone()],
            opts(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        gradcheck(
            |xs| op(&xs[0].t()?, &xs[1].slice(0, None, None, 2)?),
            &[a.clone(), b.clone()],
            opts(),
        )
        .unwrap_or_else(|e| panic!("{name} transposed: {e}"));
    }
}

#[test]
fn pow_gradient_masks_zero_bases_and_zero_exponents() {
    let x = leaf(&[0.0, 0.0, 2.0, 0.0], &[4]);
    let y = leaf(&[2.0, 0.0, -1.0, -1.0], &[4]);
    x.pow(&y).unwrap().sum_all().unwrap().backward().unwrap();
    let gx = x.grad().unwrap().to_vec::<f64>().unwrap();
    let gy = y.grad().unwrap().to_vec::<f64>().unwrap();
    // d/dx = y x^(y-1): 2*0 = 0; y == 0 -> 0 (not 0 * 0^-1 = NaN); -1 * 2^-2; -1 * 0^-2 = -inf
    assert_eq!(gx, vec![0.0, 0.0, -0.25, -INF]);
    // d/dy = out ln x, masked to 0 where x == 0 and y >= 0; 0^-1 * ln 0 = inf * -inf = -inf
    assert_eq!(&gy[..2], &[0.0, 0.0]);
    assert!((gy[2] - 0.5 * 2f64.ln()).abs() < 1e-15);
    assert_eq!(gy[3], -INF);
}

#[test]
fn maximum_minimum_ties_split_the_gradient() {
    let a = leaf(&[1.0, 2.0, 5.0, NAN], &[4]);
    let b = leaf(&[1.0, 3.0, 4.0, 0.0], &[4]);
    a.maximum(&b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let ga = a.grad().unwrap().to_vec::<f64>().unwrap();
    let gb = b.grad().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(ga, vec![0.5, 0.0, 1.0, 1.0]);
    assert_eq!(gb, vec![0.5, 1.0, 0.0, 1.0]);
    a.zero_grad();
    b.zero_grad();
    a.minimum(&b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        a.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.5, 1.0, 0.0, 1.0]
    );
    assert_eq!(
        b.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.5, 0.0, 1.0, 1.0]
    );
    // a broadcast operand collects its share from every row
    let c = leaf(&[2.0], &[1]);
    let m = leaf(&[1.0, 2.0, 3.0], &[3]);
    m.maximum(&c)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(c.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.5]);
    assert_eq!(
        m.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 0.5, 1.0]
    );
}

#[test]
fn bool_arithmetic_errors() {
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let e = b.sub(&b).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    assert!(is_dtype_err(b.neg()));
    // add/mul of bools are logical or/and, like PyTorch
    assert_eq!(
        b.add(&b).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false]
    );
}

// ---- comparisons --------------------------------------------------------------------------------

#[test]
fn comparisons_follow_ieee_nan_rules_in_every_float_dtype() {
    let xs = [NAN, NAN, 1.0, -0.0, INF, -INF, 2.0, 1.0];
    let ys = [NAN, 1.0, NAN, 0.0, INF, 1.0, 1.0, 2.0];
    type Pred = fn(f64, f64) -> bool;
    let ops: [(&str, BinaryFn, Pred); 6] = [
        ("eq", Tensor::eq, |a, b| a == b),
        ("ne", Tensor::ne, |a, b| a != b),
        ("lt", Tensor::lt, |a, b| a < b),
        ("le", Tensor::le, |a, b| a <= b),
        ("gt", Tensor::gt, |a, b| a > b),
        ("ge", Tensor::ge, |a, b| a >= b),
    ];
    for dtype in FLOATS {
        let (x, y) = (of(&xs, dtype), of(&ys, dtype));
        for (name, op, reference) in ops {
            let got = op(&x, &y).unwrap();
            assert_eq!(got.dtype(), DType::Bool);
            let want: Vec<bool> = xs.iter().zip(&ys).map(|(&a, &b)| reference(a, b)).collect();
            assert_eq!(got.to_vec::<bool>().unwrap(), want, "{name} in {dtype}");
        }
    }
    // spot checks of the rule itself
    let n = vec1(&[NAN]);
    assert_eq!(n.ne(&n).unwrap().to_vec::<bool>().unwrap(), vec![true]);
    assert_eq!(n.eq(&n).unwrap().to_vec::<bool>().unwrap(), vec![false]);
    assert_eq!(n.le(&n).unwrap().to_vec::<bool>().unwrap(), vec![false]);
    assert_eq!(
        vec1(&[-0.0])
            .eq(&vec1(&[0.0]))
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true]
    );
}

#[test]
fn comparisons_promote_operands() {
    let i = Tensor::from_vec(vec![1i64, 2, 3], &[3]).unwrap();
    // wrapped float scalar: compares in f32
    assert_eq!(
        i.lt_scalar(2.5).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true, false]
    );
    assert_eq!(
        i.eq_scalar(2.0).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true, false]
    );
    assert_eq!(
        i.ge_scalar(2).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true, true]
    );
    // a wrapped scalar adopts a half tensor's dtype: 0.1 rounds to f16 before comparing
    let h = of(&[0.1, 0.2], DType::F16);
    assert_eq!(
        h.eq_scalar(0.1).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false]
    );
    // i64 vs f32 tensors compare in f32 (PyTorch's promoted dtype): 2^24 + 1 rounds to 2^24
    let big = Tensor::from_vec(vec![16_777_217i64, 5], &[2]).unwrap();
    let f = Tensor::from_vec(vec![16_777_216.0f32, 5.5], &[2]).unwrap();
    assert_eq!(
        big.eq(&f).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false]
    );
    assert_eq!(
        big.lt(&f).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true]
    );
    // i64 vs f64 compares exactly there
    assert_eq!(
        big.eq(&f.to_dtype(DType::F64).unwrap())
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![false, false]
    );
    // i32 vs i64 and bools
    let i32s = Tensor::from_vec(vec![-1i32, 7], &[2]).unwrap();
    assert_eq!(
        i32s.gt(&Tensor::from_vec(vec![-2i64, 7], &[2]).unwrap())
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true, false]
    );
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    assert_eq!(
        b.gt(&Tensor::from_vec(vec![false, false], &[2]).unwrap())
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true, false]
    );
    assert_eq!(
        b.lt_scalar(0.5).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true]
    );
    // inf against ints
    assert_eq!(
        i.lt_scalar(INF).unwrap().to_vec::<bool>().unwrap(),
        vec![true; 3]
    );
    // broadcasting [3, 1] with [4]
    let c = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1]).unwrap();
    let d = Tensor::from_vec(vec![0.0f32, 2.0, 2.5, 3.0], &[4]).unwrap();
    let le = c.le(&d).unwrap();
    assert_eq!(le.shape(), &[3, 4]);
    assert_eq!(
        le.to_vec::<bool>().unwrap(),
        vec![
            false, true, true, true, false, true, true, true, false, false, false, true
        ]
    );
}

// ---- logical ------------------------------------------------------------------------------------

#[test]
fn logical_ops_use_truth_values_of_any_dtype() {
    let a = vec1(&[0.0, -0.0, NAN, 2.0, 0.0, -1.0]);
    let b = Tensor::from_vec(vec![0i64, 5, 1, 0, 7, -3], &[6]).unwrap();
    let t = |x: Tensor| x.to_vec::<bool>().unwrap();
    let av = [false, false, true, true, false, true];
    let bv = [false, true, true, false, true, true];
    let zip = |f: fn(bool, bool) -> bool| {
        av.iter()
            .zip(&bv)
            .map(|(&p, &q)| f(p, q))
            .collect::<Vec<_>>()
    };
    assert_eq!(t(a.logical_and(&b).unwrap()), zip(|p, q| p && q));
    assert_eq!(t(a.logical_or(&b).unwrap()), zip(|p, q| p || q));
    assert_eq!(t(a.logical_xor(&b).unwrap()), zip(|p, q| p ^ q));
    assert_eq!(
        t(a.logical_not().unwrap()),
        av.iter().map(|p| !p).collect::<Vec<_>>()
    );
    assert_eq!(
        t(b.logical_not().unwrap()),
        bv.iter().map(|p| !p).collect::<Vec<_>>()
    );
    for dtype in [DType::F16, DType::BF16, DType::F32, DType::I32] {
        // (an integer cast turns NaN into 0, so truth values are taken after the cast)
        let x = a.to_dtype(dtype).unwrap();
        let xv: Vec<bool> = x.to_vec_f64().unwrap().iter().map(|&v| v != 0.0).collect();
        let y = b.to_dtype(dtype).unwrap();
        let want: Vec<bool> = xv.iter().zip(&bv).map(|(&p, &q)| p ^ q).collect();
        assert_eq!(
            t(x.logical_not().unwrap()),
            xv.iter().map(|p| !p).collect::<Vec<_>>(),
            "{dtype}"
        );
        assert_eq!(t(x.logical_xor(&y).unwrap()), want, "{dtype}");
    }
    let bools = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    assert_eq!(t(bools.logical_not().unwrap()), vec![false, true]);
    // broadcasting [3, 1] with [4] and with a wrapped scalar
    let c = Tensor::from_vec(vec![1i32, 0, 2], &[3, 1]).unwrap();
    let d = Tensor::from_vec(vec![0.0f32, 1.0, 0.0, 3.0], &[4]).unwrap();
    let o = c.logical_and(&d).unwrap();
    assert_eq!(o.shape(), &[3, 4]);
    assert_eq!(
        t(o),
        vec![
            false, true, false, true, false, false, false, false, false, true, false, true
        ]
    );
    assert_eq!(
        t(c.logical_or(&Tensor::wrapped_scalar(false.into())).unwrap()),
        vec![true, false, true]
    );
    // non-contiguous
    check_unary_layouts(
        "logical_not",
        Tensor::logical_not,
        &grid(DType::F32).round().unwrap(),
    );
}

#[test]
fn logical_ops_are_not_differentiable() {
    let x = leaf(&[1.0, 0.0], &[2]);
    let y = x.logical_not().unwrap();
    assert!(!y.requires_grad());
    assert_eq!(y.dtype(), DType::Bool);
}

// ---- where --------------------------------------------------------------------------------------

#[test]
fn where_selects_broadcasts_and_promotes() {
    let cond = Tensor::from_vec(vec![true, false, true], &[3, 1]).unwrap();
    let a = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4]).unwrap();
    let b = Tensor::scalar(-0.5f32);
    let w = Tensor::where_cond(&cond, &a, &b).unwrap();
    assert_eq!(w.shape(), &[3, 4]);
    assert_eq!(w.dtype(), DType::F32);
    assert_eq!(
        w.to_vec::<f32>().unwrap(),
        vec![
            1.0, 2.0, 3.0, 4.0, -0.5, -0.5, -0.5, -0.5, 1.0, 2.0, 3.0, 4.0
        ]
    );
    // NaN and signed zeros pass through untouched
    let c = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    let x = vec1(&[NAN, 1.0, -0.0]);
    let y = vec1(&[0.0, NAN, 5.0]);
    let r = Tensor::where_cond(&c, &x, &y)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(r[0].is_nan() && r[1].is_nan() && r[2] == 0.0 && r[2].is_sign_negative());
    // wrapped scalars only raise the category: i32 with 2.5 -> f32, f16 with 2.5 -> f16
    let i = Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap();
    let ws = Tensor::where_cond(&c, &i, &Tensor::wrapped_scalar(2.5.into())).unwrap();
    assert_eq!(ws.dtype(), DType::F32);
    assert_eq!(ws.to_vec::<f32>().unwrap(), vec![1.0, 2.5, 3.0]);
    let h = Tensor::where_cond(
        &c,
        &of(&[1.0, 2.0, 3.0], DType::F16),
        &Tensor::wrapped_scalar(2.5.into()),
    )
    .unwrap();
    assert_eq!(h.dtype(), DType::F16);
    assert_eq!(h.to_vec_f64().unwrap(), vec![1.0, 2.5, 3.0]);
    // the condition alone may carry the broadcast shape; bools select bools
    let tf = Tensor::from_vec(vec![true, false], &[2, 1, 1]).unwrap();
    let bsel = Tensor::where_cond(&tf, &Tensor::scalar(true), &Tensor::scalar(false)).unwrap();
    assert_eq!(bsel.shape(), &[2, 1, 1]);
    assert_eq!(bsel.to_vec::<bool>().unwrap(), vec![true, false]);
    // non-contiguous operands in every role
    let g = grid(DType::F64);
    let mask = g.gt_scalar(0.0).unwrap();
    let other = g.neg().unwrap();
    for (cv, av, bv) in [
        (mask.t().unwrap(), g.t().unwrap(), other.t().unwrap()),
        (
            mask.slice(1, None, None, 2).unwrap(),
            g.slice(1, Some(1), None, 2).unwrap(),
            other.slice(1, None, None, 2).unwrap(),
        ),
        (
            mask.slice(0, Some(1), Some(2), 1)
                .unwrap()
                .expand(&[4, 6])
                .unwrap(),
            g.clone(),
            other.t().unwrap().t().unwrap(),
        ),
    ] {
        let want = Tensor::where_cond(
            &cv.contiguous().unwrap(),
            &av.contiguous().unwrap(),
            &bv.contiguous().unwrap(),
        )
        .unwrap();
        assert_same(
            "where on views",
            &Tensor::where_cond(&cv, &av, &bv).unwrap(),
            &want,
        );
    }
}

#[test]
fn where_errors() {
    let c = Tensor::from_vec(vec![1i64, 0], &[2]).unwrap();
    let x = vec1(&[1.0, 2.0]);
    let e = Tensor::where_cond(&c, &x, &x).unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    assert!(e.to_string().contains("i64"), "{e}");
    assert!(is_dtype_err(Tensor::where_cond(&x, &x, &x)));
    let b = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    assert!(is_shape_err(Tensor::where_cond(&b, &x, &x)));
    assert!(is_shape_err(Tensor::where_cond(
        &Tensor::from_vec(vec![true, false], &[2]).unwrap(),
        &x,
        &vec1(&[1.0, 2.0, 3.0])
    )));
}

#[test]
fn where_gradients() {
    let cond = Tensor::from_vec(vec![true, false, false, true, true, false], &[2, 3]).unwrap();
    let a = leaf(&[0.3, -1.2, 2.2, 0.7, 1.1, -0.4], &[2, 3]);
    let b = leaf(&[1.5, -0.5, 0.25], &[3]);
    gradcheck(
        |xs| Tensor::where_cond(&cond, &xs[0], &xs[1]),
        &[a.clone(), b.clone()],
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| Tensor::where_cond(&cond.t()?, &xs[0].t()?, &xs[1].unsqueeze(1)?),
        &[a.clone(), b.clone()],
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| {
            Tensor::where_cond(
                &cond.slice(1, None, None, 2)?,
                &xs[0].slice(1, None, None, 2)?,
                &xs[1].slice(0, Some(1), None, 1)?,
            )
        },
        &[a.clone(), b.clone()],
        opts(),
    )
    .unwrap();
    // exact: the broadcast operand collects the masked-out share of every row
    Tensor::where_cond(&cond, &a, &b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        a.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    );
    assert_eq!(
        b.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 1.0, 2.0]
    );
}

// ---- clamp --------------------------------------------------------------------------------------

#[test]
fn clamp_values_and_edge_cases() {
    let xs = [-3.0, -1.0, -0.0, 0.25, 0.5, 1.0, 2.0, INF, -INF, NAN];
    for dtype in FLOATS {
        let x = of(&xs, dtype);
        let xin = x.to_vec_f64().unwrap();
        let y = x.clamp(Some(-1.0), Some(0.5)).unwrap();
        assert_eq!(y.dtype(), dtype);
        let want: Vec<f64> = xin
            .iter()
            .map(|&v| if v.is_nan() { v } else { v.clamp(-1.0, 0.5) })
            .collect();
        assert_close("clamp", dtype, &y.to_vec_f64().unwrap(), &want, &xin);
        let lo = x.clamp_min(0.25).unwrap().to_vec_f64().unwrap();
        let hi = x.clamp_max(0.25).unwrap().to_vec_f64().unwrap();
        for k in 0..xs.len() {
            if xin[k].is_nan() {
                assert!(
                    lo[k].is_nan() && hi[k].is_nan(),
                    "clamp(NaN) is NaN in {dtype}"
                );
            } else {
                assert_eq!(lo[k], xin[k].max(0.25), "clamp_min in {dtype}");
                assert_eq!(hi[k], xin[k].min(0.25), "clamp_max in {dtype}");
            }
        }
        // min > max: every (non-NaN) element becomes max
        let inv = x.clamp(Some(2.0), Some(1.0)).unwrap().to_vec_f64().unwrap();
        assert!(inv[..9].iter().all(|&v| v == 1.0), "{inv:?}");
        assert!(inv[9].is_nan());
    }
    // a NaN bound makes the result NaN
    let n = vec1(&[1.0, -2.0])
        .clamp(Some(NAN), None)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(n.iter().all(|v| v.is_nan()));
    let n = vec1(&[1.0, -2.0])
        .clamp(None, Some(NAN))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(n.iter().all(|v| v.is_nan()));
    // a bound that rounds in the tensor's dtype
    let h = of(&[0.0, 1.0], DType::F16)
        .clamp(Some(0.1), None)
        .unwrap()
        .to_vec::<f16>()
        .unwrap();
    assert_eq!(h, vec![f16::from_f64(0.1), f16::from_f32(1.0)]);
    let b = of(&[0.0, 1.0], DType::BF16)
        .clamp(None, Some(0.3))
        .unwrap()
        .to_vec::<bf16>()
        .unwrap();
    assert_eq!(b, vec![bf16::from_f32(0.0), bf16::from_f64(0.3)]);
    // non-contiguous
    check_unary_layouts(
        "clamp",
        |x| x.clamp(Some(-1.0), Some(0.5)),
        &grid(DType::F32),
    );
    check_unary_layouts("clamp_min", |x| x.clamp_min(0.0), &grid(DType::F16));
}

#[test]
fn clamp_integer_dtype_rules() {
    let i = Tensor::from_vec(vec![i32::MIN, -5, 0, 5, i32::MAX], &[5]).unwrap();
    let c = i.clamp(Some(-2), Some(3)).unwrap();
    assert_eq!(c.dtype(), DType::I32);
    assert_eq!(c.to_vec::<i32>().unwrap(), vec![-2, -2, 0, 3, 3]);
    assert_eq!(
        i.clamp(Some(3), Some(-2)).unwrap().to_vec::<i32>().unwrap(),
        vec![-2; 5],
        "min > max gives max"
    );
    let l = Tensor::from_vec(vec![i64::MIN, 0, i64::MAX], &[3]).unwrap();
    assert_eq!(
        l.clamp_min(-1).unwrap().to_vec::<i64>().unwrap(),
        vec![-1, 0, i64::MAX]
    );
    assert_eq!(
        l.clamp_max(i64::MAX - 1).unwrap().to_vec::<i64>().unwrap(),
        vec![i64::MIN, 0, i64::MAX - 1]
    );
    // float bounds promote integer tensors to f32 (PyTorch's result type)
    let f = i.clamp(Some(-2.5), Some(3.5)).unwrap();
    assert_eq!(f.dtype(), DType::F32);
    assert_eq!(f.to_vec::<f32>().unwrap(), vec![-2.5, -2.5, 0.0, 3.5, 3.5]);
    let mixed = Tensor::from_vec(vec![-9i64, 9], &[2])
        .unwrap()
        .clamp(
            Some(tensorplay_runtime::Scalar::Int(-1)),
            Some(tensorplay_runtime::Scalar::Float(2.5)),
        )
        .unwrap();
    assert_eq!(mixed.dtype(), DType::F32);
    assert_eq!(mixed.to_vec::<f32>().unwrap(), vec![-1.0, 2.5]);
    // an integer bound outside i32 is an error, not a silent wrap
    assert!(is_arg_err(i.clamp(Some(1i64 << 40), None)));
    // bool tensors are rejected
    assert!(is_dtype_err(
        Tensor::from_vec(vec![true], &[1])
            .unwrap()
            .clamp(Some(0), Some(1))
    ));
}

#[test]
fn clamp_without_bounds_is_an_error() {
    let x = vec1(&[1.0]);
    let e = x.clamp::<f64>(None, None).unwrap_err();
    assert!(
        matches!(&e, Error::Argument { op, .. } if op == "clamp"),
        "{e}"
    );
}

#[test]
fn clamp_gradients() {
    let x = leaf(&[-1.7, -0.6, 0.25, 0.8, 1.3, 2.1], &[2, 3]);
    gradcheck(
        |xs| xs[0].clamp(Some(-1.0), Some(1.0)),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| xs[0].t()?.clamp_min(0.5),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| xs[0].slice(1, None, None, 2)?.clamp_max(0.0),
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap();
    gradcheck(
        |xs| {
            xs[0]
                .unsqueeze(0)?
                .expand(&[3, 2, 3])?
                .clamp(Some(-0.7), Some(1.5))
        },
        std::slice::from_ref(&x),
        opts(),
    )
    .unwrap();
    // exact: the gradient passes where min < x < max, 0 at the bounds (PyTorch 2.15); NaN gets 0
    let y = leaf(&[-1.0, 0.0, 1.0, 2.0, NAN], &[5]);
    y.clamp(Some(-1.0), Some(1.0))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        y.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 1.0, 0.0, 0.0, 0.0]
    );
    y.zero_grad();
    y.clamp(Some(2.0), Some(1.0))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(y.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.0; 5]);
}

// ---- meta / fake tensors, registration ------------------------------------------------------------

#[test]
fn fake_tensors_get_shapes_and_dtypes_without_data() {
    let x = Tensor::empty_fake(&[2, 3], DType::F16, Device::Meta);
    let i = Tensor::empty_fake(&[3], DType::I64, Device::Meta);
    let c = Tensor::empty_fake(&[2, 1], DType::Bool, Device::Meta);
    let g = x.gelu("tanh").unwrap();
    assert_eq!(
        (g.shape(), g.dtype(), g.is_fake()),
        (&[2usize, 3][..], DType::F16, true)
    );
    assert!(is_arg_err(x.gelu("nope")));
    assert_eq!(i.log().unwrap().dtype(), DType::F32);
    assert_eq!(i.floor().unwrap().dtype(), DType::I64);
    let p = x.pow(&i).unwrap();
    assert_eq!((p.shape(), p.dtype()), (&[2usize, 3][..], DType::F16));
    assert!(
        is_arg_err(i.pow_scalar(-1)),
        "the scalar check also runs on fake tensors"
    );
    let w = Tensor::where_cond(&c, &x, &i).unwrap();
    assert_eq!((w.shape(), w.dtype()), (&[2usize, 3][..], DType::F16));
    assert!(is_dtype_err(Tensor::where_cond(&i, &x, &x)));
    let cl = i.clamp(Some(0.5), None).unwrap();
    assert_eq!((cl.shape(), cl.dtype()), (&[3usize][..], DType::F32));
    assert_eq!(x.logical_xor(&i).unwrap().dtype(), DType::Bool);
    assert_eq!(x.maximum(&i).unwrap().dtype(), DType::F16);
}

#[test]
fn every_elementwise_op_is_registered_with_a_parsable_schema() {
    let names: Vec<&str> = all_ops().iter().map(|o| o.name).collect();
    let families: [(&[&tensorplay_runtime::ops::OpDef], &[&str]); 4] = [
        (
            unary::OPS,
            &[
                "neg",
                "abs",
                "exp",
                "sign",
                "relu",
                "log",
                "sqrt",
                "rsqrt",
                "reciprocal",
                "sin",
                "cos",
                "tanh",
                "sigmoid",
                "gelu",
                "silu",
                "erf",
                "floor",
                "ceil",
                "round",
                "square",
            ],
        ),
        (
            binary::OPS,
            &["add", "sub", "mul", "div", "pow", "maximum", "minimum"],
        ),
        (compare::OPS, &["eq", "ne", "lt", "le", "gt", "ge"]),
        (
            logical::OPS,
            &[
                "logical_and",
                "logical_or",
                "logical_xor",
                "logical_not",
                "where",
                "clamp",
            ],
        ),
    ];
    for (ops, expected) in families {
        let got: Vec<&str> = ops.iter().map(|o| o.name).collect();
        for name in expected {
            assert!(got.contains(name), "{name} missing from its family's OPS");
            assert_eq!(
                names.iter().filter(|n| *n == name).count(),
                1,
                "{name} registered once"
            );
        }
        for op in ops {
            let s = Schema::parse(op.schema).unwrap_or_else(|e| panic!("{}: {e}", op.name));
            assert_eq!(s.name, op.name, "schema name of {}", op.name);
        }
    }
    let differentiable = [
        "log",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "gelu",
        "silu",
        "erf",
        "floor",
        "ceil",
        "round",
        "square",
        "pow",
        "maximum",
        "minimum",
        "where",
        "clamp",
    ];
    for op in all_ops() {
        if differentiable.contains(&op.name) {
            assert!(op.derivative.is_some(), "{} has a derivative", op.name);
        }
        if op.name.starts_with("logical_") {
            assert!(op.derivative.is_none(), "{} is not differentiable", op.name);
        }
    }
    let gelu = Schema::parse(unary::GELU.schema).unwrap();
    assert!(gelu.param("approximate").is_some());
}

// ---- big tensors: the parallel path ---------------------------------------------------------------

#[test]
fn big_tensors_match_elementwise_references() {
    let n = (1 << 17) + 1237;
    let x = Tensor::randn_seeded(&[n], DType::F32, 11)
        .unwrap()
        .mul_scalar(4.0)
        .unwrap();
    let xv = x.to_vec::<f32>().unwrap();
    // unary: against the f64 reference, and bitwise against the same op on small (serial) pieces
    let y = x.sigmoid().unwrap();
    let yv = y.to_vec::<f32>().unwrap();
    for (i, (&v, &got)) in xv.iter().zip(&yv).enumerate() {
        let want = sigmoid_ref(v as f64);
        assert!(
            ((got as f64) - want).abs() <= 2e-7 * want.abs() + 1e-37,
            "sigmoid at {i}: {got} vs {want}"
        );
    }
    let mut start = 0;
    while start < n {
        let len = 5000.min(n - start);
        let piece = x
            .narrow(0, start, len)
            .unwrap()
            .contiguous()
            .unwrap()
            .sigmoid()
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(
            &piece[..],
            &yv[start..start + len],
            "serial and parallel results agree at {start}"
        );
        start += len;
    }
    // a broadcasting binary op, with a transposed operand: [rows, cols] + [cols]
    let (rows, cols) = (513usize, 257usize);
    assert!(rows * cols >= 1 << 17);
    let a = Tensor::randn_seeded(&[cols, rows], DType::F32, 5)
        .unwrap()
        .t()
        .unwrap();
    let b = Tensor::randn_seeded(&[cols], DType::F32, 6).unwrap();
    let (av, bv) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let sum = a.add(&b).unwrap().to_vec::<f32>().unwrap();
    let mx = a.maximum(&b).unwrap().to_vec::<f32>().unwrap();
    for r in 0..rows {
        for (c, &bc) in bv.iter().enumerate() {
            let k = r * cols + c;
            assert_eq!(sum[k], av[k] + bc, "add at [{r}, {c}]");
            assert_eq!(mx[k], av[k].max(bc), "maximum at [{r}, {c}]");
        }
    }
    // three-operand where on the parallel path
    let cond = a.gt(&b).unwrap();
    let w = Tensor::where_cond(&cond, &a, &b)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(w, mx, "where(a > b, a, b) == maximum(a, b) without NaNs");
}
