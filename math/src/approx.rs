//! The f32 approximations. Every function here is straight-line code (compute everything,
//! then select), written once against [`Arith`]: instantiated for the compiler's CLIF emitter
//! it is the inline code of fused kernels (identical for the scalar and the vector form);
//! instantiated for [`S32`](crate::arith::S32) it is the lane of the bulk and eager kernels.

use crate::arith::{Arith, Cmp};
use crate::coeffs::{
    ERF_C0_HI, ERF_C0_LO, ERF_LOGC, ERF_SMALL, EXP_Q, GELU_SMALL, GELU_TAIL, LOG_P8,
};

/// log2(e), rounded to f32 by `Em::f`.
const LOG2E: f64 = std::f64::consts::LOG2_E;
/// 1.5 * 2^23: adding it rounds an f32 of magnitude < 2^22 to an integer, which
/// then sits in the low mantissa bits.
const MAGIC: f64 = 12_582_912.0;
const MAGIC_BITS: i64 = 0x4B40_0000;
/// Cody-Waite split of ln 2 for the FMA path: `LN2_HI` is ln 2 rounded to f32
/// (the fused `n * LN2_HI` is exact inside the FMA), `LN2_LO` the remainder.
const LN2_HI_FMA: f64 = 0.693_147_182_464_599_6;
const LN2_LO_FMA: f64 = -1.904_654_299_957_768e-9;
/// Split for the mul+add path: `LN2_HI` has 15 significant bits so that
/// `n * LN2_HI` is exact for |n| < 2^9.
const LN2_HI_NOFMA: f64 = 0.693_145_751_953_125;
const LN2_LO_NOFMA: f64 = 1.428_606_765_330_187_3e-6;
/// Bit patterns of +inf and the default quiet NaN.
const INF_BITS: u64 = 0x7F80_0000;
const NAN_BITS: u64 = 0x7FC0_0000;
/// Bias used by [`exp_neg`]: results are produced as `mant * 2^-64` with
/// `mant = p * 2^(n + 64)` a normal number even when the result is subnormal.
const NEG_BIAS: i64 = 64;
const TWO_M64: f64 = 5.421_010_862_427_522e-20; // 2^-64

/// Range reduction for exp: `x = n ln2 + r`, `|r| <= ln2/2 (+tiny)`.
/// Returns `(r, t)` where `t = MAGIC + n` carries `n` in its low bits.
/// `x` must be finite-clamped to |x| < 2^21 (NaN is fine).
#[inline(always)]
fn exp_reduce<A: Arith>(em: &mut A, x: A::V) -> (A::V, A::V) {
    let t = em.fmakk(x, LOG2E, MAGIC);
    let magic = em.f(MAGIC);
    let n = em.sub(t, magic);
    let r = if em.has_fma() {
        let k1 = em.f(-LN2_HI_FMA);
        let r = em.fma(n, k1, x);
        let k2 = em.f(-LN2_LO_FMA);
        em.fma(n, k2, r)
    } else {
        let a = em.mulk(n, LN2_HI_NOFMA);
        let r = em.sub(x, a);
        let b = em.mulk(n, LN2_LO_NOFMA);
        em.sub(r, b)
    };
    (r, t)
}

/// `e^r - 1` for |r| <= 0.3468: `r + r^2 q(r)` (degree 6 overall).
#[inline(always)]
fn expm1_poly<A: Arith>(em: &mut A, r: A::V) -> A::V {
    let q = em.horner32(r, &EXP_Q);
    let r2 = em.mul(r, r);
    em.fma(r2, q, r)
}

/// `2^(n + bias)` built from the bits of `t = MAGIC + n`; needs
/// `-126 <= n + bias <= 127`.
#[inline(always)]
fn pow2_from_t<A: Arith>(em: &mut A, t: A::V, bias: i64) -> A::V {
    let b = em.bits(t);
    // (MAGIC_BITS + n) << 23 == n << 23 (mod 2^32): the low 9 bits of MAGIC_BITS are 0.
    let s = em.shl(b, 23);
    let s = em.iaddk(s, (127 + bias) << 23);
    em.float(s)
}

/// `e^w` for `w <= 0`, as `(mant, e)` with `e = mant * 2^-64` and `mant`
/// always normal, so that callers can multiply further factors into `mant`
/// and round into the subnormal range only once. `lo` is an optional
/// low-order correction added to the reduced argument.
/// `w` must already be clamped to `[-120, 0]` (NaN allowed).
#[inline(always)]
fn exp_neg<A: Arith>(em: &mut A, w: A::V, lo: Option<A::V>) -> (A::V, A::V) {
    let (r, t) = exp_reduce(em, w);
    let r = match lo {
        Some(l) => em.add(r, l),
        None => r,
    };
    let pm1 = expm1_poly(em, r);
    let s = pow2_from_t(em, t, NEG_BIAS);
    // 2^(n+64) e^r = s + s (e^r - 1), rounded once.
    let mant = em.fma(s, pm1, s);
    let e = em.mulk(mant, TWO_M64);
    (mant, e)
}

/// exp(x): clamp to [-104, 89], reduce, degree-6 polynomial, scale by 2^n in
/// two exact steps (2^floor(n/2) then 2^ceil(n/2)) so that both overflow and
/// subnormal results come out correctly rounded from the scaled mantissa.
///
/// Below -104 the result is +0 (e^-104 is under half the smallest subnormal;
/// `exp(-104) == 0` is tested). Those lanes are computed at 0 and replaced
/// with +0 at the end rather than computed at -104: that computation ends in a
/// multiply that underflows, which x86 cores run as a microcode assist (over a
/// hundred cycles) for the whole vector — a softmax row masked with -inf
/// (causal attention) ran 4-5x slower. The bits are the same either way.
#[inline(always)]
pub fn exp<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let under = em.cmpk(Cmp::LessThan, x, -104.0);
    let zero = em.f(0.0);
    let x = em.sel(under, zero, x);
    let x = em.clamp_hi(x, 89.0);
    let (r, t) = exp_reduce(em, x);
    let pm1 = expm1_poly(em, r);
    let b = em.bits(t);
    let ni = em.iaddk(b, -MAGIC_BITS);
    let n1 = em.sshr(ni, 1);
    let n2 = em.isub(ni, n1);
    let e1 = em.iaddk(n1, 127);
    let e1 = em.shl(e1, 23);
    let s1 = em.float(e1);
    let e2 = em.iaddk(n2, 127);
    let e2 = em.shl(e2, 23);
    let s2 = em.float(e2);
    let y = em.fma(s1, pm1, s1);
    let r = em.mul(y, s2);
    em.sel(under, zero, r)
}

/// log(x): subnormals pre-scaled by 2^23; `x = 2^k m` with m in
/// [sqrt(1/2), sqrt(2)); `log(m) = f + f^2 P(f)`, f = m - 1 (exact);
/// `k ln2` added with a Cody-Waite split. Specials by selects.
#[inline(always)]
pub fn log<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let den = em.cmpk(Cmp::LessThan, x, f32::MIN_POSITIVE as f64);
    let xs = em.mulk(x, 8_388_608.0); // 2^23
    let xs = em.sel(den, xs, x);
    let ix = em.bits(xs);
    let off = em.iaddk(ix, -0x3F35_04F3); // bits of sqrt(1/2)
    let k = em.sshr(off, 23);
    let kh = em.shl(k, 23);
    let mb = em.isub(ix, kh);
    let m = em.float(mb);
    let f = em.addk(m, -1.0);
    let kf = em.i2f(k);
    let adj = em.f(23.0);
    let zero = em.f(0.0);
    let adj = em.sel(den, adj, zero);
    let kf = em.sub(kf, adj);
    let p = em.horner32(f, &LOG_P8);
    let f2 = em.mul(f, f);
    let lp = em.fma(f2, p, f);
    let res = if em.has_fma() {
        let lo = em.fmak(kf, LN2_LO_FMA, lp);
        em.fmak(kf, LN2_HI_FMA, lo)
    } else {
        let lo = em.fmak(kf, LN2_LO_NOFMA, lp);
        let hi = em.mulk(kf, LN2_HI_NOFMA);
        em.add(hi, lo)
    };
    // x < 0 or NaN -> NaN; x == ±0 -> -inf; x == +inf -> +inf.
    let nan = em.fbits(NAN_BITS);
    let zero = em.f(0.0);
    let bad = em.cmp(Cmp::UnorderedOrLessThan, x, zero);
    let res = em.sel(bad, nan, res);
    let is0 = em.cmp(Cmp::Equal, x, zero);
    let res = em.selk(is0, f64::NEG_INFINITY, res);
    let inf = em.fbits(INF_BITS);
    let isinf = em.cmp(Cmp::Equal, x, inf);
    em.sel(isinf, inf, res)
}

/// tanh(x) = sign(x) * |em1| / (2 + em1), em1 = expm1(-2|x|) computed as
/// `2^n (p - 1) + (2^n - 1)`, which is accurate for all |x| (no cancellation
/// for small |x|, em1 -> -1 for large |x|).
#[inline(always)]
pub fn tanh<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let a = em.abs(x);
    let sgn = em.xor(x, a);
    let y = em.mulk(a, -2.0);
    let y = em.clamp_lo(y, -18.0);
    let (r, t) = exp_reduce(em, y);
    let pm1 = expm1_poly(em, r);
    let s = pow2_from_t(em, t, 0);
    let sm1 = em.addk(s, -1.0);
    let em1 = em.fma(s, pm1, sm1);
    let num = em.abs(em1);
    // 2 + em1 = (2^n + 1) + 2^n (e^r - 1), rounded once.
    let sp1 = em.addk(s, 1.0);
    let den = em.fma(s, pm1, sp1);
    let q = em.div(num, den);
    em.or(q, sgn)
}

/// sigmoid(x) = (x < 0 ? e : 1) / (1 + e), e = exp(-|x|), as one plain
/// division: unlike silu / gelu_tanh, the quotient is not corrected with
/// [`div_one_plus`]. The two roundings that stay (of `1 + e` and of the
/// quotient) cost ~1 ulp on top of exp's error (2.40 ulp worst over all f32,
/// against 1.50 corrected), while the correction's seven operations were a
/// large part of the function's time. For x < -87, `1 + e` rounds to 1 and
/// the result is `e`, rounded once into the subnormal range by [`exp_neg`].
#[inline(always)]
pub fn sigmoid<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let sm = em.sign_mask();
    let w = em.or(x, sm);
    let w = em.clamp_lo(w, -120.0);
    let (_, e) = exp_neg(em, w, None);
    let zero = em.f(0.0);
    let neg = em.cmp(Cmp::LessThan, x, zero);
    let one = em.f(1.0);
    let num = em.sel(neg, e, one);
    let den = em.addk(e, 1.0);
    em.div(num, den)
}

/// `(nh + nl) / (1 + e)` for `e` in [0, 1] and finite `nh`: the quotient
/// `q = nh / fl(1 + e)` is corrected by `(rem + nl - q dlo) / (1 + e)` with
/// the exact division remainder `rem` and the exact rounding error `dlo` of
/// `1 + e` (the reciprocal only approximated to 1/8), which leaves ~0.5 ulp
/// plus a small fraction of the corrected errors.
#[inline(always)]
fn div_one_plus<A: Arith>(em: &mut A, nh: A::V, nl: Option<A::V>, e: A::V) -> A::V {
    let den = em.addk(e, 1.0);
    let dm1 = em.addk(den, -1.0); // exact (Sterbenz)
    let dlo = em.sub(e, dm1); // exact: 1 + e = den + dlo
    let q = em.div(nh, den);
    let rem = em.rem_exact(q, den, nh);
    let t = match nl {
        Some(l) => em.add(rem, l),
        None => rem,
    };
    let nq = em.neg(q);
    let t = em.fma(nq, dlo, t);
    let inv = em.fmakk(den, -0.5, 1.5); // 1/den within 12.5% on [1, 2]
    em.fma(t, inv, q)
}

/// silu(x) = x * sigmoid(x); for x < 0 the factor e^x is kept scaled by
/// 2^64 until the last multiply so subnormal results round once.
/// silu(-inf) = NaN (as `x * sigmoid(x)` gives in f64 and in eager).
#[inline(always)]
pub fn silu<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let sm = em.sign_mask();
    let w = em.or(x, sm);
    let w = em.clamp_lo(w, -120.0);
    let (mant, e) = exp_neg(em, w, None);
    let zero = em.f(0.0);
    let neg = em.cmp(Cmp::LessThan, x, zero);
    let one = em.f(1.0);
    let xv = em.sel(neg, w, x);
    let fac = em.sel(neg, mant, one);
    let (nh, nl) = em.two_prod(xv, fac);
    let sc = em.f(TWO_M64);
    let sc = em.sel(neg, sc, one);
    let q = div_one_plus(em, nh, Some(nl), e);
    let res = em.mul(q, sc);
    fix_x_times(em, x, res, 20.0)
}

/// `x == -inf ? NaN : res`.
#[inline(always)]
fn fix_neg_inf_nan<A: Arith>(em: &mut A, x: A::V, res: A::V) -> A::V {
    let ninf = em.f(f64::NEG_INFINITY);
    let isninf = em.cmp(Cmp::Equal, x, ninf);
    let nan = em.fbits(NAN_BITS);
    em.sel(isninf, nan, res)
}

/// Final fix-ups of `x * sigmoid(..)`-shaped results: the sign of `x` on a
/// zero result (the quotient correction of [`div_one_plus`] loses the sign
/// of a zero), `x` itself for `x > big` (where the result equals `x`; this
/// also covers +inf and huge `x` overflowing the mul+add two-product), NaN
/// for `x = -inf`.
#[inline(always)]
fn fix_x_times<A: Arith>(em: &mut A, x: A::V, res: A::V, big: f64) -> A::V {
    let sm = em.sign_mask();
    let sx = em.and(x, sm);
    let res = em.or(res, sx);
    let isbig = em.cmpk(Cmp::GreaterThan, x, big);
    let res = em.sel(isbig, x, res);
    fix_neg_inf_nan(em, x, res)
}

/// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),
/// 2u = x (A + B x^2) with A = 2*0.7978845608, B = A*0.044715, evaluated in
/// double-f32 (hi + lo) because e^(2u) amplifies the error of 2u by |2u|.
/// The exponent is computed for -|x| (2u is odd in x), so it is always <= 0.
#[inline(always)]
pub fn gelu_tanh<A: Arith>(em: &mut A, x: A::V) -> A::V {
    const A: f64 = 2.0 * 0.797_884_560_8;
    const B: f64 = 2.0 * 0.797_884_560_8 * 0.044_715;
    let a_hi = A as f32 as f64;
    let a_lo = A - a_hi;
    let b_hi = B as f32 as f64;
    let b_lo = B - b_hi;
    // |x| <= 11 keeps -2|u| >= -113 (the biased exp range); beyond, the
    // result is x (x > 0) or -0 (x < 0) either way (`gelu_tanh(-11) == -0` is
    // tested). Those lanes are computed at 0 and replaced rather than computed
    // at ±11, which underflows (a microcode assist on x86, for the whole vector).
    let sm = em.sign_mask();
    let ax = em.or(x, sm); // -|x|
    let far = em.cmpk(Cmp::LessThan, ax, -11.0);
    let zero = em.f(0.0);
    let xv = em.sel(far, zero, x);
    let xn = em.or(xv, sm); // -|xv|
    // x^2 = x2 + e1 exactly.
    let (x2, e1) = em.two_prod(xn, xn);
    // B_hi * x2 = p + ep exactly.
    let bh = em.f(b_hi);
    let (p, ep) = em.two_prod(bh, x2);
    // A_hi + p = t + et exactly.
    let ah = em.f(a_hi);
    let (t, et) = em.two_sum(ah, p);
    // tl = et + ep + B_hi*e1 + B_lo*x2 + A_lo
    let c = em.fmakk(x2, b_lo, a_lo);
    let c = em.fma(bh, e1, c);
    let c = em.add(c, ep);
    let tl = em.add(c, et);
    // w = -|2u| = xn * (t + tl)
    let (w, ew) = em.two_prod(xn, t);
    let wl = em.fma(xn, tl, ew);
    let (mant, e) = exp_neg(em, w, Some(wl));
    let neg = em.cmp(Cmp::LessThan, x, zero);
    let one = em.f(1.0);
    let fac = em.sel(neg, mant, one);
    let (nh, nl) = em.two_prod(xv, fac);
    let sc = em.f(TWO_M64);
    let sc = em.sel(neg, sc, one);
    let q = div_one_plus(em, nh, Some(nl), e);
    let res = em.mul(q, sc);
    let neg_far = em.cmpk(Cmp::LessThan, x, -11.0);
    let res = em.selk(neg_far, -0.0, res);
    fix_x_times(em, x, res, 11.0)
}

/// erf(x): |x| < 1: x P(x^2); 1 <= |x|: sign(x) (1 - exp(Q(|x| - 2.5))) with
/// Q ~ log(erfc), |x| clamped to 3.95 (erf rounds to ±1 beyond).
#[inline(always)]
pub fn erf<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let a = em.abs(x);
    let sgn = em.xor(x, a);
    let x2 = em.mul(x, x);
    // x (C0_HI + (C0_LO + x^2 P(x^2))) with the leading term rounded once;
    // C0_LO > 0 keeps the sign of a zero x.
    let ps = em.horner32(x2, &ERF_SMALL);
    let c0lo = em.f(ERF_C0_LO as f64);
    let corr = em.fma(x2, ps, c0lo);
    let xc = em.mul(x, corr);
    let small = em.fmak(x, ERF_C0_HI as f64, xc);
    let ac = em.clamp_hi(a, 3.95);
    let u = em.addk(ac, -2.5);
    let q = em.horner32(u, &ERF_LOGC);
    // exp(q), q in [-17.4, -1.8]: one-step scaling is exact here.
    let (r, t) = exp_reduce(em, q);
    let pm1 = expm1_poly(em, r);
    let s = pow2_from_t(em, t, 0);
    let e = em.fma(s, pm1, s);
    let one = em.f(1.0);
    let big = em.sub(one, e);
    let big = em.or(big, sgn);
    let is_small = em.cmp(Cmp::LessThan, a, one);
    em.sel(is_small, small, big)
}

/// gelu_erf(x) = x Phi(x), Phi(x) = (1 + erf(x/sqrt2))/2.
/// |x| < 0.75: Phi = 0.5 + x P(x^2) in f32. Otherwise, in f64 lanes, with
/// a = min(|x|, 15), t = 1/(1 + 0.3a): Phi(-a) = t/4 exp(-a^2/2 + Q(t)),
/// Phi(a) = 1 - Phi(-a), multiplied by x (by -a for x < 0) before the single
/// rounding to f32. gelu_erf(-inf) = NaN (as in eager).
#[inline(always)]
pub fn gelu_erf<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let a = em.abs(x);
    // small
    let x2 = em.mul(x, x);
    let ps = em.horner32(x2, &GELU_SMALL);
    let half = em.f(0.5);
    let phi_s = em.fma(x, ps, half);
    let rs = em.mul(x, phi_s);
    // tail, in f64 lanes
    let tail = em.widen([x], |w, v| gelu_erf_tail64(w, v[0]));
    let small_m = em.cmpk(Cmp::LessThan, a, 0.75);
    let res = em.sel(small_m, rs, tail);
    fix_neg_inf_nan(em, x, res)
}

/// The |x| >= 0.75 part of gelu_erf in f64 lanes.
#[inline(always)]
fn gelu_erf_tail64<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let a = em.abs(x);
    let ac = em.clamp_hi(a, 15.0);
    let one = em.f(1.0);
    let d = em.fmak(ac, 0.3, one);
    let t = em.div(one, d);
    let q = em.horner32(t, &GELU_TAIL);
    let h = em.mul(ac, ac); // exact in f64
    let arg = em.fmak(h, -0.5, q);
    let y = em.mulk(arg, LOG2E);
    let e = crate::pow::exp2_core64(em, y);
    let t4 = em.mulk(t, 0.25);
    let phin = em.mul(t4, e);
    let nac = em.neg(ac);
    let rn = em.mul(nac, phin);
    let phip = em.sub(one, phin);
    let rp = em.mul(x, phip);
    let zero = em.f(0.0);
    let neg = em.cmp(Cmp::LessThan, x, zero);
    em.sel(neg, rn, rp)
}

/// log1p(x) = log(u) * (x / (u - 1)) with u = fl(1 + x): the quotient corrects the rounding
/// of `1 + x` to first order (log(1+t)/t varies slowly), so small `x` keeps full relative
/// precision. `u == 1` (|x| below half an ulp of 1, zeros included) gives `x`; `+inf` gives
/// `+inf`; `-1` gives `-inf` and `x < -1` NaN (through `log`).
#[inline(always)]
pub fn log1p<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let u = em.addk(x, 1.0);
    let d = em.addk(u, -1.0);
    let lu = log(em, u);
    let q = em.div(x, d);
    let res = em.mul(lu, q);
    let zero = em.f(0.0);
    let exact = em.cmp(Cmp::Equal, d, zero);
    let res = em.sel(exact, x, res);
    let inf = em.fbits(INF_BITS);
    let isinf = em.cmp(Cmp::Equal, x, inf);
    em.sel(isinf, inf, res)
}

/// expm1(x) = 2 (2^(n-1) (e^r - 1) + (2^(n-1) - 1/2)) with x = n ln2 + r, rounded once by the
/// fma: the half-scale keeps `2^(n-1)` normal up to n = 128, so results up to the overflow
/// threshold are exact-scaled (and larger ones overflow to +inf in the last doubling).
/// x < -18 rounds to -1; |x| < 2^-25 returns x (zeros and subnormals keep their sign and
/// bits).
#[inline(always)]
pub fn expm1<A: Arith>(em: &mut A, x: A::V) -> A::V {
    let y = em.clamp_lo(x, -18.0);
    let y = em.clamp_hi(y, 89.0);
    let (r, t) = exp_reduce(em, y);
    let pm1 = expm1_poly(em, r);
    let sh = pow2_from_t(em, t, -1);
    let shm = em.addk(sh, -0.5);
    let h = em.fma(sh, pm1, shm);
    let res = em.add(h, h);
    let a = em.abs(x);
    let tiny = em.cmpk(Cmp::LessThan, a, 2.980_232_238_769_531_2e-8); // 2^-25
    em.sel(tiny, x, res)
}
