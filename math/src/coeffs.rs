//! Polynomial coefficients, fitted for this library (weighted minimax by Remez
//! exchange, then rounded to the working precision one coefficient at a time with
//! the remaining ones refitted). The comment above each table gives its
//! approximation, interval and the fitted error bound.

#![allow(clippy::approx_constant)]

// exp: e^r-1 = r + r^2 q(r), |r|<=0.3468, weighted rel err 2^-26.1
pub(crate) const EXP_Q: [f32; 5] = [
    0.49999997,
    0.16666546,
    0.041667435,
    0.0083662635,
    0.0013870663,
];
// log: log1p(f) = f + f^2 P(f), deg 8, rel err 2^-27.8
pub(crate) const LOG_P8: [f32; 9] = [
    -0.49999988,
    0.33333325,
    -0.2500161,
    0.2000202,
    -0.16608451,
    0.14180426,
    -0.13246983,
    0.12915845,
    -0.07626323,
];
// erf small: erf(x) = x (C0 + x^2 P(x^2)), |x|<1, C0 = 2/sqrt(pi) = ERF_C0_HI + ERF_C0_LO, rel err 2^-29.4
pub(crate) const ERF_C0_HI: f32 = 1.1283791;
pub(crate) const ERF_C0_LO: f32 = 6.05739e-8;
pub(crate) const ERF_SMALL: [f32; 6] = [
    -0.37612632,
    0.112836435,
    -0.02685603,
    0.0051922807,
    -0.00080433814,
    7.959776e-05,
];
// erf large: log(erfc(a)) = Q(a-2.5), 1<=a<=3.95, erfc-weighted err 2^-29.7
pub(crate) const ERF_LOGC: [f32; 7] = [
    -7.806818,
    -5.3526955,
    -0.94388855,
    -0.010719759,
    0.002458779,
    -0.0001544317,
    0.00018603496,
];
// gelu small: Phi(x) = 0.5 + x P(x^2), |x|<0.75, rel err 2^-28.2
pub(crate) const GELU_SMALL: [f32; 5] = [
    0.39894226,
    -0.0664899,
    0.009969853,
    -0.0011754216,
    9.832952e-05,
];
// gelu tail: Phi(-a) = t/4 exp(-a^2/2 + Q(t)), t = 1/(1+0.3a), 0.75<=a<=15, abs err 2^-27.0
pub(crate) const GELU_TAIL: [f32; 9] = [
    -0.7366827,
    1.0016319,
    0.39260682,
    0.25753903,
    -0.38453048,
    0.8188856,
    -1.3774803,
    0.96153176,
    -0.24040122,
];
// pow: log2(m) = s P(s^2), rel err 2^-37.8
pub(crate) const POW_LOG2: [f64; 5] = [
    2.8853900817900926,
    0.9617966733334431,
    0.5770835866587471,
    0.41167261181812115,
    0.3407321852421401,
];
// pow: 2^r, |r|<=0.5, rel err 2^-34.5
pub(crate) const POW_EXP2: [f64; 8] = [
    0.9999999999616216,
    0.6931471807287162,
    0.24022651198754283,
    0.055504103528327076,
    0.009618027172769206,
    0.0013333922855286817,
    0.00015469317313345805,
    1.5201901169445364e-05,
];
