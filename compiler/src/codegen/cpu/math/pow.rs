//! `pow(x, y)` for `f32` / `f32x4`: the core `2^(y log2|x|)` runs in `f64`
//! lanes (so `y log2|x|` carries enough bits for any f32 result, and
//! subnormal f32 results are a single rounding of an f64 normal), the sign and
//! the C99 Annex F special cases are decided in the f32 domain by selects.

use cranelift_codegen::ir::condcodes::FloatCC;

use super::arith::Arith;
use super::coeffs::POW_LOG2;
use super::wide;

/// (1023 << 52) - bits(sqrt(1/2)): `(bits(x) + this) >> 52 == k + 1023` where
/// `x = 2^k m`, `m` in [sqrt(1/2), sqrt(2)).
const LOG_OFF: i64 = 0x3FF0_0000_0000_0000 - 0x3FE6_A09E_667F_3BCD;
const ONE_BITS: i64 = 0x3FF0_0000_0000_0000;
const TWO52_BITS: i64 = 0x4330_0000_0000_0000;

/// `2^(y log2(ax))` for `ax >= 0` in f64 lanes, ignoring signs and special
/// cases except for what falls out naturally.
#[inline(always)]
fn core64<A: Arith>(em: &mut A, ax: A::V, y: A::V) -> A::V {
    let bits = em.bits(ax);
    let kb = em.iaddk(bits, LOG_OFF);
    let kb = em.ushr(kb, 52); // k + 1023 (>= 0 for every promoted f32)
    let kh = em.shl(kb, 52);
    let mb = em.isub(bits, kh);
    let mb = em.iaddk(mb, ONE_BITS);
    let m = em.float(mb);
    let f = em.addk(m, -1.0);
    let two52 = em.i(TWO52_BITS);
    let kf = em.ior(kb, two52);
    let kf = em.float(kf);
    let kf = em.addk(kf, -(4_503_599_627_370_496.0 + 1023.0));
    let d = em.addk(f, 2.0);
    let s = em.div(f, d);
    let u = em.mul(s, s);
    let p = em.horner(u, &POW_LOG2);
    let l = em.mul(s, p);
    let lg = em.add(kf, l);
    // log2(0) = -inf and log2(inf) = inf (the bit split gives -1023 / 1024).
    let zero = em.f(0.0);
    let is0 = em.cmp(FloatCC::Equal, ax, zero);
    let lg = em.selk(is0, f64::NEG_INFINITY, lg);
    let inf = em.f(f64::INFINITY);
    let isinf = em.cmp(FloatCC::Equal, ax, inf);
    let lg = em.sel(isinf, inf, lg);
    let z = em.mul(y, lg);
    let z = em.clamp_lo(z, -170.0);
    let z = em.clamp_hi(z, 150.0);
    wide::exp2_core64(em, z)
}

/// pow on f32 lanes.
#[inline(always)]
pub(super) fn pow_f32<A: Arith>(em: &mut A, x: A::V, y: A::V) -> A::V {
    let ax = em.abs(x);
    let core = em.widen([ax, y], |w, v| core64(w, v[0], v[1]));
    const T23: f64 = 8_388_608.0;
    let ay = em.abs(y);
    // Integer / odd-integer classification of y.
    let big = em.cmpk(FloatCC::GreaterThanOrEqual, ay, T23);
    let ys = em.addk(ay, T23);
    let yy = em.sel(big, ay, ys); // lsb of yy's mantissa = parity of y (|y| < 2^24)
    let yr = em.addk(yy, -T23);
    let eqint = em.cmp(FloatCC::Equal, yr, ay);
    let neint = em.cmp(FloatCC::NotEqual, yr, ay);
    let small = em.cmpk(FloatCC::LessThan, ay, T23);
    let not_int = em.mand(small, neint);
    let is_int = em.mor(big, eqint);
    let lt24 = em.cmpk(FloatCC::LessThan, ay, 16_777_216.0);
    let odd_ok = em.mand(is_int, lt24);
    let yb = em.bits(yy);
    let par = em.shl(yb, 31);
    let par = em.float(par); // -0.0 if the parity bit is set, else +0.0
    let zero = em.f(0.0);
    let par = em.sel(odd_ok, par, zero);
    let flip = em.and(par, x); // sign of x if y is an odd integer
    let res = em.xor(core, flip);
    // finite x < 0 with non-integer y -> NaN
    let xneg = em.cmp(FloatCC::LessThan, x, zero);
    let xfin = em.cmpk(FloatCC::GreaterThan, x, f64::NEG_INFINITY);
    let nan_m = em.mand(xneg, xfin);
    let nan_m = em.mand(nan_m, not_int);
    let nan = em.fbits(0x7FC0_0000);
    let res = em.sel(nan_m, nan, res);
    let uno = em.cmp(FloatCC::Unordered, x, y);
    let res = em.sel(uno, nan, res);
    // pow(1, y) = 1, pow(-1, ±inf) = 1, pow(x, ±0) = 1
    let one = em.f(1.0);
    let x1 = em.cmp(FloatCC::Equal, x, one);
    let xm1 = em.cmpk(FloatCC::Equal, x, -1.0);
    let yinf = em.cmpk(FloatCC::Equal, ay, f64::INFINITY);
    let m1 = em.mand(xm1, yinf);
    let ones = em.mor(x1, m1);
    let y0 = em.cmp(FloatCC::Equal, y, zero);
    let ones = em.mor(ones, y0);
    em.sel(ones, one, res)
}
