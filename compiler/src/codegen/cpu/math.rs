//! Vectorized math library emitted as CLIF.
//!
//! Cranelift has no `exp`/`log`/`tanh` instructions, so fused CPU kernels get
//! them from here: [`emit_unary`] and [`emit_pow`] append straight-line CLIF
//! (no branches: every path is computed, then chosen with selects) for a value
//! of type `f32` or `f32x4` — the scalar and the vector form come from the
//! same code — or, for `f64` / `f64x2`, a call per lane to an
//! `extern "C" fn(f64) -> f64` shim wrapping Rust's `f64` methods
//! (see [`MathShims`]).
//!
//! Each f32 algorithm is written once, generic over a small arithmetic
//! vocabulary (`math/arith.rs`), and instantiated twice: for the CLIF
//! emitter (the inline code above) and for a Rust f32 lane that the
//! [`bulk`] kernels run in AVX-512 / AVX2 loops. Both perform the same IEEE
//! operations in the same order, so a bulk kernel returns the same bits as
//! the inline FMA code (NaN payloads aside); fused kernels may call them over
//! L1-resident tiles to get past Cranelift's 128-bit vectors.
//!
//! # Algorithms (f32 / f32x4)
//!
//! All polynomials were fitted for this library (weighted Remez, then rounded
//! to f32 coefficient by coefficient with refits); `fma` is used inside them
//! when the ISA has it ([`isa_has_fma`]), `mul` + `add` otherwise (error-free
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
//! # Example
//!
//! JIT-compile `fn(x: f32x4) -> f32x4 { exp(x) }` and call it:
//!
//! ```
//! use cranelift_codegen::ir::{types, AbiParam, InstBuilder};
//! use cranelift_codegen::settings::{self, Configurable};
//! use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
//! use cranelift_jit::{JITBuilder, JITModule};
//! use cranelift_module::{Linkage, Module};
//! use tensorplay_compiler::codegen::cpu::math::{emit_unary, MathCtx, MathFn, MathShims};
//!
//! let mut flags = settings::builder();
//! flags.set("opt_level", "speed").unwrap();
//! let isa = cranelift_native::builder()
//!     .unwrap()
//!     .finish(settings::Flags::new(flags))
//!     .unwrap();
//! let mut jb = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
//! MathShims::register_symbols(&mut jb);
//! let mut module = JITModule::new(jb);
//! let shims = MathShims::declare(&mut module).unwrap();
//! let math = MathCtx::for_isa(module.isa()).with_shims(shims);
//!
//! let mut ctx = module.make_context();
//! ctx.func.signature.params.push(AbiParam::new(types::F32X4));
//! ctx.func.signature.returns.push(AbiParam::new(types::F32X4));
//! let mut fctx = FunctionBuilderContext::new();
//! let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
//! let block = fb.create_block();
//! fb.append_block_params_for_function_params(block);
//! fb.switch_to_block(block);
//! fb.seal_block(block);
//! let x = fb.block_params(block)[0];
//! let y = emit_unary(&mut fb, &math, MathFn::Exp, x);
//! fb.ins().return_(&[y]);
//! fb.finalize(module.target_config());
//!
//! let id = module
//!     .declare_function("exp4", Linkage::Local, &ctx.func.signature)
//!     .unwrap();
//! module.define_function(id, &mut ctx).unwrap();
//! module.finalize_definitions().unwrap();
//! let code = module.get_finalized_function(id);
//! # #[cfg(target_arch = "x86_64")]
//! # {
//! use std::arch::x86_64::{__m128, _mm_loadu_ps, _mm_storeu_ps};
//! // SAFETY: the function was compiled with the signature fn(f32x4) -> f32x4.
//! let f: extern "C" fn(__m128) -> __m128 = unsafe { std::mem::transmute(code) };
//! let input = [0.0f32, 1.0, -1.0, 10.0];
//! let mut out = [0.0f32; 4];
//! // SAFETY: the arrays hold 4 f32 each.
//! unsafe { _mm_storeu_ps(out.as_mut_ptr(), f(_mm_loadu_ps(input.as_ptr()))) };
//! for (o, i) in out.iter().zip(input) {
//!     let want = (i as f64).exp();
//!     assert!(((*o as f64) - want).abs() <= want * 3e-7);
//! }
//! # }
//! # let _ = code;
//! ```

mod approx;
mod arith;
pub mod bulk;
mod coeffs;
mod emit;
mod pow;
mod shims;
mod wide;

pub(crate) use wide::{demote_combine, promote_halves};

use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2};
use cranelift_codegen::ir::{
    AbiParam, ExtFuncData, ExternalName, FuncRef, InstBuilder, Signature, Type, UserExternalName,
    Value,
};
use cranelift_codegen::isa::{CallConv, TargetIsa};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITBuilder;
use cranelift_module::{FuncId, Linkage, Module, ModuleResult};

pub use shims::{
    erf_f64, erfc_f64, gelu_erf_f64, gelu_tanh_f64, sigmoid_f64, silu_f64, tp_math_cos_f64,
    tp_math_erf_f64, tp_math_exp_f64, tp_math_expm1_f64, tp_math_gelu_erf_f64,
    tp_math_gelu_tanh_f64, tp_math_log_f64, tp_math_log1p_f64, tp_math_pow_f64,
    tp_math_sigmoid_f64, tp_math_silu_f64, tp_math_sin_f64, tp_math_tanh_f64,
};
use shims::{
    tp_libm_acos_f64, tp_libm_acosh_f64, tp_libm_asin_f64, tp_libm_asinh_f64, tp_libm_atan_f64,
    tp_libm_atan2_f64, tp_libm_atanh_f64, tp_libm_copysign_f64, tp_libm_cosh_f64, tp_libm_exp2_f64,
    tp_libm_fmod_f64, tp_libm_hypot_f64, tp_libm_log2_f64, tp_libm_log10_f64, tp_libm_sinh_f64,
    tp_libm_tan_f64,
};
use tensorplay_ir::{LibmFn, LibmFn2};

use emit::Em;

/// A unary math function the library can emit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Hyperbolic tangent.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Error function.
    Erf,
    /// `0.5 x (1 + erf(x / sqrt 2))`.
    GeluErf,
    /// `0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x sigmoid(x)`.
    Silu,
    /// Sine (f32: through the f64 shim per lane for now).
    Sin,
    /// Cosine (f32: through the f64 shim per lane for now).
    Cos,
    /// `log(1 + x)`, accurate near 0.
    Log1p,
    /// `e^x - 1`, accurate near 0.
    Expm1,
}

impl MathFn {
    /// Every function, in shim-index order.
    pub const ALL: [MathFn; 12] = [
        MathFn::Exp,
        MathFn::Log,
        MathFn::Tanh,
        MathFn::Sigmoid,
        MathFn::Erf,
        MathFn::GeluErf,
        MathFn::GeluTanh,
        MathFn::Silu,
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Log1p,
        MathFn::Expm1,
    ];

    /// Lower-case name (`"exp"`, `"gelu_tanh"`, ...).
    ///
    /// ```
    /// use tensorplay_compiler::codegen::cpu::math::MathFn;
    /// assert_eq!(MathFn::GeluTanh.name(), "gelu_tanh");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            MathFn::Exp => "exp",
            MathFn::Log => "log",
            MathFn::Tanh => "tanh",
            MathFn::Sigmoid => "sigmoid",
            MathFn::Erf => "erf",
            MathFn::GeluErf => "gelu_erf",
            MathFn::GeluTanh => "gelu_tanh",
            MathFn::Silu => "silu",
            MathFn::Sin => "sin",
            MathFn::Cos => "cos",
            MathFn::Log1p => "log1p",
            MathFn::Expm1 => "expm1",
        }
    }

    /// The `f64` implementation (what the f64 shims compute).
    ///
    /// ```
    /// use tensorplay_compiler::codegen::cpu::math::MathFn;
    /// assert_eq!(MathFn::Exp.eval_f64(0.0), 1.0);
    /// assert_eq!(MathFn::Sigmoid.eval_f64(f64::NEG_INFINITY), 0.0);
    /// assert!(MathFn::Silu.eval_f64(f64::NEG_INFINITY).is_nan());
    /// ```
    pub fn eval_f64(self, x: f64) -> f64 {
        (SHIMS[self.shim_index()].1)(x)
    }

    /// Whether the f32 forms are emitted inline (false: a shim call per lane).
    pub fn is_inline_f32(self) -> bool {
        !matches!(self, MathFn::Sin | MathFn::Cos)
    }

    fn shim_index(self) -> usize {
        self as usize
    }
}

type UnaryShim = extern "C" fn(f64) -> f64;

const SHIMS: [(&str, UnaryShim); 12] = [
    ("tp_math_exp_f64", tp_math_exp_f64),
    ("tp_math_log_f64", tp_math_log_f64),
    ("tp_math_tanh_f64", tp_math_tanh_f64),
    ("tp_math_sigmoid_f64", tp_math_sigmoid_f64),
    ("tp_math_erf_f64", tp_math_erf_f64),
    ("tp_math_gelu_erf_f64", tp_math_gelu_erf_f64),
    ("tp_math_gelu_tanh_f64", tp_math_gelu_tanh_f64),
    ("tp_math_silu_f64", tp_math_silu_f64),
    ("tp_math_sin_f64", tp_math_sin_f64),
    ("tp_math_cos_f64", tp_math_cos_f64),
    ("tp_math_log1p_f64", tp_math_log1p_f64),
    ("tp_math_expm1_f64", tp_math_expm1_f64),
];

/// The f64 libm functions of [`LibmFn`] (same order as `LibmFn::ALL`).
const LIBM_SHIMS: [(&str, UnaryShim); 12] = [
    ("tp_libm_tan_f64", tp_libm_tan_f64),
    ("tp_libm_asin_f64", tp_libm_asin_f64),
    ("tp_libm_acos_f64", tp_libm_acos_f64),
    ("tp_libm_atan_f64", tp_libm_atan_f64),
    ("tp_libm_sinh_f64", tp_libm_sinh_f64),
    ("tp_libm_cosh_f64", tp_libm_cosh_f64),
    ("tp_libm_asinh_f64", tp_libm_asinh_f64),
    ("tp_libm_acosh_f64", tp_libm_acosh_f64),
    ("tp_libm_atanh_f64", tp_libm_atanh_f64),
    ("tp_libm_log2_f64", tp_libm_log2_f64),
    ("tp_libm_log10_f64", tp_libm_log10_f64),
    ("tp_libm_exp2_f64", tp_libm_exp2_f64),
];

type BinaryShim = extern "C" fn(f64, f64) -> f64;

/// The f64 libm functions of [`LibmFn2`] (same order as `LibmFn2::ALL`).
const LIBM2_SHIMS: [(&str, BinaryShim); 4] = [
    ("tp_libm_atan2_f64", tp_libm_atan2_f64),
    ("tp_libm_hypot_f64", tp_libm_hypot_f64),
    ("tp_libm_fmod_f64", tp_libm_fmod_f64),
    ("tp_libm_copysign_f64", tp_libm_copysign_f64),
];

/// Number of shims: one per [`MathFn`], `pow`, one per [`LibmFn`] and per [`LibmFn2`].
pub const NUM_SHIMS: usize = 13 + LIBM_SHIMS.len() + LIBM2_SHIMS.len();
const POW_SHIM: usize = 12;
const POW_SHIM_NAME: &str = "tp_math_pow_f64";
/// Shim index of the first [`LibmFn`], then of the first [`LibmFn2`].
const LIBM_SHIM: usize = 13;
const LIBM2_SHIM: usize = LIBM_SHIM + LIBM_SHIMS.len();

fn libm_shim_index(f: LibmFn) -> usize {
    LIBM_SHIM + LibmFn::ALL.iter().position(|&g| g == f).expect("in ALL")
}

fn libm2_shim_index(f: LibmFn2) -> usize {
    LIBM2_SHIM + LibmFn2::ALL.iter().position(|&g| g == f).expect("in ALL")
}

/// Number of `f64` parameters of shim `idx`.
fn shim_params(idx: usize) -> usize {
    if idx == POW_SHIM || idx >= LIBM2_SHIM {
        2
    } else {
        1
    }
}

/// A shim the JIT must be able to resolve: its symbol name, its address and
/// its number of `f64` parameters (it returns one `f64`).
#[derive(Clone, Copy, Debug)]
pub struct ShimSymbol {
    /// Symbol name (also the name [`MathShims::declare`] imports).
    pub name: &'static str,
    /// Address of the `extern "C"` function.
    pub addr: *const u8,
    /// Number of `f64` parameters (1, or 2 for pow).
    pub params: usize,
}

/// Every shim symbol, for registering in a JIT builder by hand
/// ([`MathShims::register_symbols`] does it for a [`JITBuilder`]).
///
/// ```
/// use tensorplay_compiler::codegen::cpu::math::{shim_symbols, NUM_SHIMS};
/// let syms = shim_symbols();
/// assert_eq!(syms.len(), NUM_SHIMS);
/// assert_eq!(syms[0].name, "tp_math_exp_f64");
/// ```
pub fn shim_symbols() -> [ShimSymbol; NUM_SHIMS] {
    let mut out = [ShimSymbol {
        name: POW_SHIM_NAME,
        addr: tp_math_pow_f64 as *const u8,
        params: 2,
    }; NUM_SHIMS];
    for (slot, (name, f)) in out.iter_mut().zip(SHIMS) {
        *slot = ShimSymbol {
            name,
            addr: f as *const u8,
            params: 1,
        };
    }
    for (slot, (name, f)) in out[LIBM_SHIM..].iter_mut().zip(LIBM_SHIMS) {
        *slot = ShimSymbol {
            name,
            addr: f as *const u8,
            params: 1,
        };
    }
    for (slot, (name, f)) in out[LIBM2_SHIM..].iter_mut().zip(LIBM2_SHIMS) {
        *slot = ShimSymbol {
            name,
            addr: f as *const u8,
            params: 2,
        };
    }
    out
}

/// The f64 shims declared (as imports) in one [`Module`].
///
/// Declare once per module; [`emit_unary`] / [`emit_pow`] import the needed
/// ones into the function being built on first use (reusing an import the
/// caller already made with `declare_func_in_func`).
#[derive(Clone, Copy, Debug)]
pub struct MathShims {
    ids: [FuncId; NUM_SHIMS],
    call_conv: CallConv,
}

impl MathShims {
    /// Registers every shim's address under its symbol name.
    pub fn register_symbols(builder: &mut JITBuilder) {
        for s in shim_symbols() {
            builder.symbol(s.name, s.addr);
        }
    }

    /// Declares every shim as an imported function of `module`.
    ///
    /// # Errors
    /// Whatever [`Module::declare_function`] reports (e.g. a clashing
    /// declaration of the same name with another signature).
    #[allow(
        clippy::result_large_err,
        reason = "returns cranelift_module's own result type, like Module::declare_function"
    )]
    pub fn declare<M: Module + ?Sized>(module: &mut M) -> ModuleResult<MathShims> {
        let call_conv = module.isa().default_call_conv();
        let mut ids = Vec::with_capacity(NUM_SHIMS);
        for s in shim_symbols() {
            let sig = shim_signature(call_conv, s.params);
            ids.push(module.declare_function(s.name, Linkage::Import, &sig)?);
        }
        let ids: [FuncId; NUM_SHIMS] = ids.try_into().expect("NUM_SHIMS ids");
        Ok(MathShims { ids, call_conv })
    }

    /// The declared id of `f`'s f64 shim.
    pub fn func_id(&self, f: MathFn) -> FuncId {
        self.ids[f.shim_index()]
    }

    /// The declared id of the f64 pow shim.
    pub fn pow_func_id(&self) -> FuncId {
        self.ids[POW_SHIM]
    }
}

fn shim_signature(call_conv: CallConv, params: usize) -> Signature {
    let mut sig = Signature::new(call_conv);
    for _ in 0..params {
        sig.params.push(AbiParam::new(F64));
    }
    sig.returns.push(AbiParam::new(F64));
    sig
}

/// Per-compilation settings of the math library.
#[derive(Clone, Copy, Debug)]
pub struct MathCtx {
    has_fma: bool,
    shims: Option<MathShims>,
}

impl MathCtx {
    /// A context that emits `fma` iff `has_fma`, without f64 shims (f64
    /// values and f32 sin/cos then panic in [`emit_unary`]).
    ///
    /// ```
    /// use tensorplay_compiler::codegen::cpu::math::MathCtx;
    /// assert!(!MathCtx::new(false).has_fma());
    /// ```
    pub fn new(has_fma: bool) -> MathCtx {
        MathCtx {
            has_fma,
            shims: None,
        }
    }

    /// A context for `isa`, with `has_fma` from [`isa_has_fma`].
    pub fn for_isa(isa: &dyn TargetIsa) -> MathCtx {
        MathCtx::new(isa_has_fma(isa))
    }

    /// Adds the module's f64 shims.
    pub fn with_shims(mut self, shims: MathShims) -> MathCtx {
        self.shims = Some(shims);
        self
    }

    /// Whether `fma` is emitted.
    pub fn has_fma(&self) -> bool {
        self.has_fma
    }

    /// The shims, if any.
    pub fn shims(&self) -> Option<&MathShims> {
        self.shims.as_ref()
    }
}

/// Whether `isa` executes CLIF `fma` natively (x86-64: the `has_fma` flag,
/// as detected by `cranelift_native`; aarch64 and s390x: always). Without
/// it, Cranelift would turn `fma` into a libcall, so the library uses
/// `mul` + `add` instead.
pub fn isa_has_fma(isa: &dyn TargetIsa) -> bool {
    match isa.name() {
        "x64" => isa
            .isa_flags()
            .iter()
            .any(|v| v.name == "has_fma" && v.as_bool() == Some(true)),
        "aarch64" | "s390x" => true,
        _ => false,
    }
}

/// Whether [`emit_unary`] / [`emit_pow`] accept values of type `ty`.
pub fn supports(ty: Type) -> bool {
    ty == F32 || ty == F32X4 || ty == F64 || ty == F64X2
}

/// Emits `f(x)` for `x` of type `f32`, `f32x4`, `f64` or `f64x2`, returning
/// the value (same type).
///
/// # Panics
/// On any other type, and for `f64`/`f64x2` values (and f32 sin/cos) when
/// `ctx` has no [`MathShims`].
pub fn emit_unary(fb: &mut FunctionBuilder, ctx: &MathCtx, f: MathFn, x: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    match ty {
        F32 | F32X4 if f.is_inline_f32() => {
            let em = &mut Em::new(fb, ty, ctx.has_fma);
            match f {
                MathFn::Exp => approx::exp(em, x),
                MathFn::Log => approx::log(em, x),
                MathFn::Tanh => approx::tanh(em, x),
                MathFn::Sigmoid => approx::sigmoid(em, x),
                MathFn::Erf => approx::erf(em, x),
                MathFn::GeluErf => approx::gelu_erf(em, x),
                MathFn::GeluTanh => approx::gelu_tanh(em, x),
                MathFn::Silu => approx::silu(em, x),
                MathFn::Log1p => approx::log1p(em, x),
                MathFn::Expm1 => approx::expm1(em, x),
                MathFn::Sin | MathFn::Cos => unreachable!(),
            }
        }
        F32 | F32X4 => per_lane(fb, ctx, f.shim_index(), &[x], true),
        F64 | F64X2 => per_lane(fb, ctx, f.shim_index(), &[x], false),
        _ => panic!("math::emit_unary: unsupported type {ty}"),
    }
}

/// Emits `pow(x, y)` (C99 / PyTorch semantics) for `x`, `y` of the same type
/// `f32`, `f32x4`, `f64` or `f64x2`.
///
/// # Panics
/// On other or mismatched types, and for f64 types when `ctx` has no
/// [`MathShims`].
pub fn emit_pow(fb: &mut FunctionBuilder, ctx: &MathCtx, x: Value, y: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    assert_eq!(
        ty,
        fb.func.dfg.value_type(y),
        "math::emit_pow: operand types differ"
    );
    match ty {
        F32 | F32X4 => pow::pow_f32(&mut Em::new(fb, ty, ctx.has_fma), x, y),
        F64 | F64X2 => per_lane(fb, ctx, POW_SHIM, &[x, y], false),
        _ => panic!("math::emit_pow: unsupported type {ty}"),
    }
}

/// Emits the libm function `f` for `x` of type `f32`, `f32x4`, `f64` or `f64x2`: a call per
/// lane to its f64 shim, with f32 lanes promoted and the result rounded once (the same bits as
/// eager, which computes `f.eval(x as f64) as f32`).
///
/// # Panics
/// On other types, and when `ctx` has no [`MathShims`].
pub fn emit_libm(fb: &mut FunctionBuilder, ctx: &MathCtx, f: LibmFn, x: Value) -> Value {
    let ty = fb.func.dfg.value_type(x);
    match ty {
        F32 | F32X4 => per_lane(fb, ctx, libm_shim_index(f), &[x], true),
        F64 | F64X2 => per_lane(fb, ctx, libm_shim_index(f), &[x], false),
        _ => panic!("math::emit_libm: unsupported type {ty}"),
    }
}

/// Emits the two-operand libm function `f` (as [`emit_libm`]) for `x`, `y` of the same type.
///
/// # Panics
/// On other or mismatched types, and when `ctx` has no [`MathShims`].
pub fn emit_libm2(
    fb: &mut FunctionBuilder,
    ctx: &MathCtx,
    f: LibmFn2,
    x: Value,
    y: Value,
) -> Value {
    let ty = fb.func.dfg.value_type(x);
    assert_eq!(
        ty,
        fb.func.dfg.value_type(y),
        "math::emit_libm2: operand types differ"
    );
    match ty {
        F32 | F32X4 => per_lane(fb, ctx, libm2_shim_index(f), &[x, y], true),
        F64 | F64X2 => per_lane(fb, ctx, libm2_shim_index(f), &[x, y], false),
        _ => panic!("math::emit_libm2: unsupported type {ty}"),
    }
}

/// Imports shim `idx` into the function being built (or finds an existing
/// import of it).
fn import_shim(fb: &mut FunctionBuilder, ctx: &MathCtx, idx: usize) -> FuncRef {
    let shims = ctx
        .shims
        .as_ref()
        .expect("math: f64 functions need MathCtx::with_shims");
    let name = UserExternalName::new(0, shims.ids[idx].as_u32());
    for (fref, data) in fb.func.dfg.ext_funcs.iter() {
        if let ExternalName::User(r) = data.name
            && fb.func.params.user_named_funcs()[r] == name
        {
            return fref;
        }
    }
    let params = shim_params(idx);
    let signature = fb.import_signature(shim_signature(shims.call_conv, params));
    let user = fb.func.declare_imported_user_function(name);
    fb.import_function(ExtFuncData {
        name: ExternalName::user(user),
        signature,
        colocated: false,
        patchable: false,
    })
}

/// Calls shim `idx` once per lane. `f32_lanes`: the values are f32 (promote
/// each lane to f64 and demote the result).
fn per_lane(
    fb: &mut FunctionBuilder,
    ctx: &MathCtx,
    idx: usize,
    args: &[Value],
    f32_lanes: bool,
) -> Value {
    let fref = import_shim(fb, ctx, idx);
    let ty = fb.func.dfg.value_type(args[0]);
    let lanes = ty.lane_count();
    let mut results = Vec::with_capacity(lanes as usize);
    for lane in 0..lanes {
        let lane_args: Vec<Value> = args
            .iter()
            .map(|&a| {
                let v = if ty.is_vector() {
                    fb.ins().extractlane(a, lane as u8)
                } else {
                    a
                };
                if f32_lanes {
                    fb.ins().fpromote(F64, v)
                } else {
                    v
                }
            })
            .collect();
        let call = fb.ins().call(fref, &lane_args);
        let r = fb.inst_results(call)[0];
        results.push(if f32_lanes {
            fb.ins().fdemote(F32, r)
        } else {
            r
        });
    }
    if !ty.is_vector() {
        return results[0];
    }
    let mut v = fb.ins().splat(ty, results[0]);
    for (lane, &r) in results.iter().enumerate().skip(1) {
        v = fb.ins().insertlane(v, r, lane as u8);
    }
    v
}
