//! TensorPlay's f32 math library: `exp`, `log`, `tanh`, `sigmoid`, `erf`, the GELUs, `silu`,
//! `log1p`, `expm1` and `pow`, each approximation written **once** and run three ways:
//!
//! - as inline CLIF in the compiler's fused kernels (`tensorplay_compiler::codegen::cpu::math`
//!   implements [`arith::Arith`] for CLIF values);
//! - as precompiled AVX-512 / AVX2 loops over buffers ([`bulk`]), which fused kernels call over
//!   L1-resident tiles;
//! - as the runtime's eager f32 (and f16/bf16, computed in f32) kernels, through
//!   [`bulk::eager_unary`] / [`bulk::eager_binary`].
//!
//! Every instantiation performs the same IEEE operations in the same order, so all three return
//! the same bits (with FMA; NaN payloads aside): an eager op and its compiled form agree exactly,
//! on every machine. [`shims`] holds the `f64` functions (the f64 kernels and the accuracy
//! references).
//!
//! The crate has no dependencies, so both the runtime and the compiler can depend on it.
//!
//! # Algorithms (f32 / f32x4)
//!
//! All polynomials were fitted for this library (weighted Remez, then rounded
//! to f32 coefficient by coefficient with refits); `fma` is used inside them
//! when the ISA has it (`isa_has_fma` in the compiler), `mul` + `add` otherwise (error-free
//! products then use Dekker's split).
//!
//! - **exp**: clamp to [-104, 89]; `n = round(x log2 e)` by the 1.5*2^23
//!   trick, `r = x - n ln2` (two-constant Cody-Waite split), `e^r = 1 + r +
//!   r^2 q(r)` (degree 6); `2^n` applied in two exact steps
//!   (`2^floor(n/2)`, then `2^ceil(n/2)`), so overflow gives inf and subnormal
//!   results are a single rounding.
//! - **log**: subnormals pre-scaled by 2^23; `x = 2^k m`, `m` in
//!   [sqrt(1/2), sqrt(2)) by integer ops on the bits; `log m = f + f^2 P(f)`,
//!   `f = m - 1` exact, `P` of degree 8; `+ k ln2` with a Cody-Waite split.
//! - **tanh**: `sign(x) |em1| / (2 + em1)` with `em1 = expm1(-2|x|) =
//!   2^n (e^r - 1) + (2^n - 1)`: no cancellation near 0, exactly ±1 for large
//!   |x|, one division.
//! - **sigmoid**: `(x < 0 ? e : 1) / (1 + e)`, `e = exp(-|x|)` (exp's
//!   reduction and polynomial, scaled by `2^(n+64)` and then by `2^-64` so
//!   that `e` rounds once into the subnormal range; for x < -87 `1 + e` is
//!   1 and the result is `e`), then one plain division. The roundings of
//!   `1 + e` and of the quotient are left in: correcting them as silu does
//!   (below) gives 1.50 ulp instead of 2.40 but takes seven more operations,
//!   which made sigmoid ~1.35x slower in the bulk kernels.
//! - **silu**: `x sigmoid(x)`, with `e^x` kept scaled by 2^64 until the last
//!   multiply so subnormal results round once; `x e^x` as an exact
//!   two-product over `1 + e`, and the quotient corrected once with the
//!   exact division remainder and the exact rounding error of `1 + e`
//!   (divided by a linear approximation of `1 + e`, so no second division):
//!   this removes about two of the four roundings.
//! - **gelu_tanh**: `0.5 x (1 + tanh(u)) = x sigmoid(2u)`; `2u = x (A + B x^2)`
//!   is evaluated in double-f32 (hi + lo; two-products, two-sum) because
//!   `e^(2u)` multiplies the relative error of `2u` by |2u| (up to ~110);
//!   then as silu.
//! - **erf**: |x| < 1: `x (C0 + x^2 P(x^2))` (degree 13, with the leading
//!   term `x C0` rounded once, `C0 = 2/sqrt(pi)` in two parts); otherwise
//!   `sign(x) (1 - exp(Q(|x| - 2.5)))` with `Q ~ log erfc` (degree 6) on
//!   [1, 3.95], |x| clamped to 3.95 (erf rounds to ±1 beyond).
//! - **gelu_erf**: `x Phi(x)`; |x| < 0.75: `Phi = 0.5 + x P(x^2)` (degree
//!   9) in f32; otherwise in f64 lanes (an f32 version of this tail loses
//!   ~5 ulp to the roundings of `t` and of `Q`): `Phi(-a) = t/4 exp(-a^2/2 +
//!   Q(t))`, `t = 1/(1 + 0.3a)`, `Q` of degree 8, `Phi(a) = 1 - Phi(-a)`,
//!   times x, rounded once to f32.
//! - **pow**: `2^(y log2|x|)` evaluated in f64 lanes (log2 via
//!   `s = (m-1)/(m+1)` and a degree-9 odd polynomial, exp2 by a degree-7
//!   polynomial and an exponent add), rounded once to f32; the sign for
//!   negative x with odd integer y, NaN for negative finite x with non-integer
//!   y, and the C99 Annex F cases (`pow(x, ±0) = 1` even for NaN x,
//!   `pow(1, y) = 1` even for NaN y, `pow(-1, ±inf) = 1`, ±0 and ±inf
//!   bases) are selected in the f32 domain.
//! - **sin / cos**: no inline version yet; f32 values go through the f64
//!   shims lane by lane (correctly rounded, but a call per lane).
//!
//! # Special values
//!
//! NaN in gives NaN out (except `pow(NaN, 0)` and `pow(1, NaN)`); the signs
//! of zeros are kept (`tanh(-0) = -0`, `erf(-0) = -0`, `gelu(-0) = -0`,
//! `silu(-0) = -0`); `exp(-inf) = 0`, `exp(+inf) = inf`, `log(±0) = -inf`,
//! `log(x < 0) = NaN`, `log(inf) = inf`, `tanh(±inf) = ±1`, `erf(±inf) = ±1`,
//! `sigmoid(-inf) = 0`, `sigmoid(inf) = 1`. As in eager (and as the f64
//! formula `x * 0` gives), `silu(-inf)`, `gelu_erf(-inf)` and
//! `gelu_tanh(-inf)` are NaN; at +inf they are +inf.
//!
//! # Measured accuracy and cost
//!
//! Worst error in ulp against the f64 result (the rounding of the f64 value
//! to f32 is part of the error; ulp = the f32 spacing at the reference's
//! magnitude, 2^-149 in the subnormal range). "All f32" is an exhaustive run
//! over all 2^32 inputs (x86-64, Zen 4); `compiler/tests/math_ulp.rs` checks
//! ≥ 1.2M inputs per function (every 7159th bit pattern plus dense sweeps
//! and edge runs) in both code paths on every test run. The reference for
//! gelu_tanh is `x sigmoid(2u)` in f64 — the literal `0.5 x (1 + tanh(u))`
//! cancels to 0 in f64 too for x < -5.5. Cost: x86-64 instructions of a
//! standalone function computing the f32x4 form with FMA, including ~6 of
//! frame setup and ~20-25% constant-pool loads (in a loop Cranelift may keep
//! some constants in registers); the mul+add path is up to 1.8x longer
//! (Dekker two-products in silu / gelu_tanh).
//!
//! | function  | all f32, FMA | all f32, mul+add | f32x4 insts (FMA) |
//! |-----------|--------------|------------------|-------------------|
//! | exp       | 1.031        | 1.006            | 45                |
//! | log       | 0.919        | 0.899            | 59                |
//! | tanh      | 1.966        | 2.011            | 54                |
//! | sigmoid   | 2.402        | 2.402            | 46                |
//! | silu      | 1.777        | 1.725            | 72                |
//! | gelu_tanh | 2.061        | 2.004            | 108               |
//! | erf       | 1.739        | 2.318            | 80                |
//! | gelu_erf  | 1.609        | 1.962            | 214               |
//! | log1p     | 2.491        | 2.500            | — ²               |
//! | expm1     | 1.530        | 1.660            | — ²               |
//! | pow       | 0.504 (1.2M pairs) | 0.504 (1.2M pairs) | 247          |
//! | sin, cos  | 0.5 (shim per lane) | 0.5            | 4 calls           |
//!
//! ² not counted. log1p is `log(u) * (x / (u - 1))` with `u = 1 + x` (log's code plus a division;
//! `u == 1` returns `x`); expm1 reuses exp's reduction and polynomial as
//! `2 (2^(n-1) (e^r - 1) + (2^(n-1) - 1/2))`, so `2^(n-1)` stays normal up to the overflow
//! threshold. Their all-f32 figures come from `math_ulp.rs`'s ignored `exhaustive_*` tests.
//!
//! Bulk kernels ([`bulk`]) on a 4096-element L1-resident tile, one thread,
//! ns per element and speed-up over inline (Zen 4, `cargo bench --bench math`,
//! measured on a loaded shared machine: expect ±25%). Zen 4 splits 512-bit
//! ops in two, so AVX-512 gains least where one instruction dominates (div).
//!
//! | op        | inline f32x4 | AVX-512     | AVX2        |
//! |-----------|--------------|-------------|-------------|
//! | exp       | 1.34         | 0.34 (3.9x) | 0.49 (2.7x) |
//! | log       | 2.29         | 0.48 (4.8x) | 0.88 (2.6x) |
//! | tanh      | 1.77         | 0.48 (3.7x) | 0.79 (2.3x) |
//! | sigmoid ¹ | 1.62         | 0.41 (4.0x) | 0.67 (2.4x) |
//! | silu      | 3.06         | 0.76 (4.0x) | 1.38 (2.2x) |
//! | gelu_tanh | 4.87         | 1.23 (4.0x) | 1.82 (2.7x) |
//! | erf       | 2.20         | 0.73 (3.0x) | 1.38 (1.6x) |
//! | gelu_erf  | 11.01        | 2.55 (4.3x) | 5.60 (2.0x) |
//! | sqrt      | 0.52         | 0.26 (2.0x) | 0.20 (2.6x) |
//! | div       | 0.22         | 0.16 (1.3x) | 0.16 (1.3x) |
//! | pow       | 11.72        | 2.71 (4.3x) | 3.03 (3.9x) |
//!
//! ¹ sigmoid lost its quotient correction after this table was measured: its
//! row is the old row scaled by an A/B run of the old and new benchmark
//! binaries, alternated in one session (4 runs each, ns/element: inline
//! 1.50 -> 1.12, AVX-512 0.385 -> 0.289, AVX2 0.654 -> 0.455; exp measured
//! 0.27 AVX-512 in that session, so sigmoid now costs about exp + 10%).
//! Its all-f32 FMA figure is from the AVX-512 bulk kernel (AVX2 gave the same
//! bits); the mul+add figure from a Rust transcription of the mul+add path
//! (same bits as the inline code at the sweep's worst input).
//!

#[macro_use]
mod func;

pub mod approx;
pub mod arith;
pub mod bulk;
mod coeffs;
pub mod pow;
pub mod shims;

pub use func::{LibmFn, LibmFn2, MathFn};
