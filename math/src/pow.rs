//! `pow(x, y)` for `f32` / `f32x4`: the core `2^(y log2|x|)` runs in `f64`
//! lanes (so `y log2|x|` carries enough bits for any f32 result, and
//! subnormal f32 results are a single rounding of an f64 normal), the sign and
//! the C99 Annex F special cases are decided in the f32 domain by selects.

use crate::arith::{Arith, Cmp};
use crate::coeffs::{POW_EXP2, POW_LOG2};

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
    let is0 = em.cmp(Cmp::Equal, ax, zero);
    let lg = em.selk(is0, f64::NEG_INFINITY, lg);
    let inf = em.f(f64::INFINITY);
    let isinf = em.cmp(Cmp::Equal, ax, inf);
    let lg = em.sel(isinf, inf, lg);
    let z = em.mul(y, lg);
    let z = em.clamp_lo(z, -170.0);
    let z = em.clamp_hi(z, 150.0);
    exp2_core64(em, z)
}

/// pow on f32 lanes.
#[inline(always)]
pub fn pow_f32<A: Arith>(em: &mut A, x: A::V, y: A::V) -> A::V {
    let ax = em.abs(x);
    let core = em.widen([ax, y], |w, v| core64(w, v[0], v[1]));
    const T23: f64 = 8_388_608.0;
    let ay = em.abs(y);
    // Integer / odd-integer classification of y.
    let big = em.cmpk(Cmp::GreaterThanOrEqual, ay, T23);
    let ys = em.addk(ay, T23);
    let yy = em.sel(big, ay, ys); // lsb of yy's mantissa = parity of y (|y| < 2^24)
    let yr = em.addk(yy, -T23);
    let eqint = em.cmp(Cmp::Equal, yr, ay);
    let neint = em.cmp(Cmp::NotEqual, yr, ay);
    let small = em.cmpk(Cmp::LessThan, ay, T23);
    let not_int = em.mand(small, neint);
    let is_int = em.mor(big, eqint);
    let lt24 = em.cmpk(Cmp::LessThan, ay, 16_777_216.0);
    let odd_ok = em.mand(is_int, lt24);
    let yb = em.bits(yy);
    let par = em.shl(yb, 31);
    let par = em.float(par); // -0.0 if the parity bit is set, else +0.0
    let zero = em.f(0.0);
    let par = em.sel(odd_ok, par, zero);
    let flip = em.and(par, x); // sign of x if y is an odd integer
    let res = em.xor(core, flip);
    // finite x < 0 with non-integer y -> NaN
    let xneg = em.cmp(Cmp::LessThan, x, zero);
    let xfin = em.cmpk(Cmp::GreaterThan, x, f64::NEG_INFINITY);
    let nan_m = em.mand(xneg, xfin);
    let nan_m = em.mand(nan_m, not_int);
    let nan = em.fbits(0x7FC0_0000);
    let res = em.sel(nan_m, nan, res);
    let uno = em.cmp(Cmp::Unordered, x, y);
    let res = em.sel(uno, nan, res);
    // pow(1, y) = 1, pow(-1, ±inf) = 1, pow(x, ±0) = 1
    let one = em.f(1.0);
    let x1 = em.cmp(Cmp::Equal, x, one);
    let xm1 = em.cmpk(Cmp::Equal, x, -1.0);
    let yinf = em.cmpk(Cmp::Equal, ay, f64::INFINITY);
    let m1 = em.mand(xm1, yinf);
    let ones = em.mor(x1, m1);
    let y0 = em.cmp(Cmp::Equal, y, zero);
    let ones = em.mor(ones, y0);
    em.sel(ones, one, res)
}

/// 1.5 * 2^52: adding it rounds an f64 of magnitude < 2^51 to an integer.
const MAGIC52: f64 = 6_755_399_441_055_744.0;

/// `2^z` in f64 lanes for `z` in [-1000, 1000] (NaN propagates), relative
/// error ~2^-34: `n = round(z)`, `r = z - n` exact, degree-7 polynomial,
/// exponent add.
#[inline(always)]
pub fn exp2_core64<A: Arith>(em: &mut A, z: A::V) -> A::V {
    let magic = em.f(MAGIC52);
    let t = em.add(z, magic);
    let nf = em.sub(t, magic);
    let r = em.sub(z, nf);
    let p = em.horner(r, &POW_EXP2);
    let tb = em.bits(t);
    // (bits(MAGIC52) + n) << 52 == n << 52: the low 12 bits of bits(MAGIC52) are 0.
    let sc = em.shl(tb, 52);
    let sc = em.iaddk(sc, ONE_BITS);
    let sc = em.float(sc);
    em.mul(p, sc)
}
