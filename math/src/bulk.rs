//! Bulk math kernels: precompiled AVX-512 / AVX2+FMA loops that apply one
//! expensive f32 operation to a whole buffer.
//!
//! # Why
//!
//! Cranelift's x86-64 back end only emits 128-bit vectors, so the inline
//! `f32x4` math of the compiler's `emit_unary` runs at a quarter (or
//! half) of the width the CPU offers. Fused kernels therefore stage the
//! argument of an expensive operation into a small L1-resident scratch tile
//! (≤ 512 elements) and call one of these kernels over the tile: the loop
//! runs at 16 (AVX-512) or 8 (AVX2) lanes, and the cost of the call and the
//! tile round trip is amortized over the tile.
//!
//! # Levels
//!
//! - [`Level::Avx512`]: AVX-512 F + DQ + VL + BW (and FMA), 16 lanes;
//! - [`Level::Avx2`]: AVX2 + FMA, 8 lanes.
//!
//! [`level`] picks the host's best level once (`None` on other hosts and
//! architectures, or when `TP_BULK_MATH=0` is set — then callers keep their
//! inline `f32x4` code). [`unary_at`] / [`binary_at`] give a kernel of a
//! given level whenever the host supports it (they ignore `TP_BULK_MATH`, so
//! tests and benchmarks can always reach both).
//!
//! # Accuracy contract
//!
//! Every kernel of `Math(Exp | Log | Tanh | Sigmoid | Erf | GeluErf |
//! GeluTanh | Silu | Log1p | Expm1)`, `Sqrt`, `Div` and `Pow` returns, for every input, the
//! same bits as the inline CLIF code of the compiler's `emit_unary` /
//! the compiler's `emit_pow` (FMA form) and of CLIF `sqrt` / `fdiv`,
//! at every level and for every length and alignment; the only freedom is
//! the payload and sign of a NaN result (a NaN stays a NaN). This holds by
//! construction: each approximation is written once, generic over the
//! [`Arith`](crate::arith::Arith) vocabulary, and instantiated both for the CLIF emitter and for a
//! Rust f32 lane whose operations are the same IEEE operations (always with a
//! fused `fma`). So the accuracy tables in the [crate docs](crate) apply unchanged.
//!
//! `Math(Sin)` / `Math(Cos)` have no bulk kernel (`None`): their inline f32
//! form calls the correctly rounded f64 shim per lane.
//!
//! # How the loops are built
//!
//! Each kernel is a `#[target_feature]` function around one generic driver:
//! blocks of 4 vectors are copied to a stack array, the algorithm runs on
//! each lane in a loop that LLVM vectorizes (all operations are inlined,
//! branch-free, lane-independent), and the results are copied out. The last
//! `n % lanes` elements go through the same one-vector block, zero-padded, so
//! the remainder is computed by the same vector instructions as the body.
//! In-place use is safe because a block is read completely before it is
//! written.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use std::sync::OnceLock;

use crate::MathFn;
use crate::approx;
use crate::arith::S32;
use crate::pow;

/// `out[i] = f(x[i])` for `i < n`. `x == out` (in place) is allowed; otherwise no overlap.
pub type UnaryFn = unsafe extern "C" fn(x: *const f32, out: *mut f32, n: usize);
/// `out[i] = f(a[i], b[i])` for `i < n`. `out` may equal `a` or `b`.
pub type BinaryFn = unsafe extern "C" fn(a: *const f32, b: *const f32, out: *mut f32, n: usize);

/// Row maximum of `x[0..n]`, bit-identical to the inline `f32x4` row max of a softmax
/// kernel (see [`row_max`]); reads nothing when `n == 0`.
pub type RowMaxFn = unsafe extern "C" fn(x: *const f32, n: usize) -> f32;
/// `out[i] = f(x[i], s)` for `i < n` with one scalar `s` (see [`RowScalarOp`]). `x == out` (in
/// place) is allowed; otherwise no overlap. Touches nothing when `n == 0`.
pub type ScalarFn = unsafe extern "C" fn(x: *const f32, s: f32, out: *mut f32, n: usize);

/// A row operation with one scalar operand, as the passes of a softmax row need them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowScalarOp {
    /// `exp(x - s)`: the f32 subtraction, then the shared `exp` approximation (the same bits
    /// as CLIF `fsub` followed by the compiler's `emit_unary` of `Exp`).
    SubExp,
    /// `x * s` (IEEE f32 multiplication).
    Mul,
    /// `x - s` (IEEE f32 subtraction).
    Sub,
}

/// An operation that may have bulk kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BulkOp {
    /// A unary math function (as the compiler's `emit_unary`).
    Math(MathFn),
    /// IEEE square root (unary).
    Sqrt,
    /// IEEE division `a / b` (binary).
    Div,
    /// `pow(a, b)` with C99 / PyTorch semantics (binary, as
    /// the compiler's `emit_pow`).
    Pow,
}

impl BulkOp {
    /// Number of operands: 1 for `Math(_)` and `Sqrt`, 2 for `Div` and `Pow`.
    ///
    /// ```
    /// use tensorplay_math::bulk::BulkOp;
    /// assert_eq!(BulkOp::Sqrt.arity(), 1);
    /// assert_eq!(BulkOp::Pow.arity(), 2);
    /// ```
    pub fn arity(self) -> usize {
        match self {
            BulkOp::Math(_) | BulkOp::Sqrt => 1,
            BulkOp::Div | BulkOp::Pow => 2,
        }
    }

    /// Lower-case name (`"exp"`, `"sqrt"`, `"div"`, `"pow"`, ...).
    ///
    /// ```
    /// use tensorplay_math::{MathFn, bulk::BulkOp};
    /// assert_eq!(BulkOp::Math(MathFn::GeluTanh).name(), "gelu_tanh");
    /// assert_eq!(BulkOp::Div.name(), "div");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            BulkOp::Math(f) => f.name(),
            BulkOp::Sqrt => "sqrt",
            BulkOp::Div => "div",
            BulkOp::Pow => "pow",
        }
    }
}

/// Instruction-set level of a bulk kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// AVX-512 F + DQ + VL + BW with FMA: 16 f32 lanes.
    Avx512,
    /// AVX2 + FMA: 8 f32 lanes.
    Avx2,
}

impl Level {
    /// Both levels, best first.
    pub const ALL: [Level; 2] = [Level::Avx512, Level::Avx2];

    /// f32 lanes per vector.
    pub fn lanes(self) -> usize {
        match self {
            Level::Avx512 => 16,
            Level::Avx2 => 8,
        }
    }

    /// Whether the host CPU can run kernels of this level (ignores
    /// `TP_BULK_MATH`).
    pub fn is_supported(self) -> bool {
        host_supports(self)
    }
}

#[cfg(target_arch = "x86_64")]
fn host_supports(level: Level) -> bool {
    let avx2 =
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    match level {
        Level::Avx2 => avx2,
        Level::Avx512 => {
            avx2 && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn host_supports(_level: Level) -> bool {
    false
}

/// Whether a `TP_BULK_MATH` value enables bulk kernels: `0`, `false`, `off`
/// and `no` (any case, surrounding spaces ignored) disable them; anything
/// else, and an unset variable, leaves them on.
///
/// ```
/// use tensorplay_math::bulk::env_enables;
/// assert!(env_enables(None));
/// assert!(env_enables(Some("1")));
/// assert!(!env_enables(Some("0")));
/// assert!(!env_enables(Some(" Off ")));
/// ```
pub fn env_enables(value: Option<&str>) -> bool {
    match value {
        None => true,
        Some(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off" | "no"
        ),
    }
}

/// The highest level a `TP_BULK_ISA` value allows: `avx512` (or unset) allows both, `avx2`
/// caps the kernels at [`Level::Avx2`] — so an AVX-512 host can run and benchmark the code an
/// AVX2-only host gets. Case and surrounding spaces are ignored; any other value is an error
/// naming the variable and the accepted values.
///
/// ```
/// use tensorplay_math::bulk::{Level, isa_cap};
/// assert_eq!(isa_cap(None).unwrap(), Level::Avx512);
/// assert_eq!(isa_cap(Some(" AVX2 ")).unwrap(), Level::Avx2);
/// assert!(isa_cap(Some("sse9")).is_err());
/// ```
pub fn isa_cap(value: Option<&str>) -> std::result::Result<Level, String> {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(Level::Avx512),
        Some(v) if v == "avx512" => Ok(Level::Avx512),
        Some(v) if v == "avx2" => Ok(Level::Avx2),
        Some(v) => Err(format!(
            "TP_BULK_ISA: expected `avx512` or `avx2`, got `{v}`"
        )),
    }
}

/// The cap from `TP_BULK_ISA`, read once (see [`isa_cap`]). An invalid value is reported once
/// on stderr and leaves the kernels uncapped (the variable is a benchmarking switch, read where
/// no error can be returned).
pub fn level_cap() -> Level {
    static CAP: OnceLock<Level> = OnceLock::new();
    *CAP.get_or_init(|| {
        let var = std::env::var("TP_BULK_ISA").ok();
        isa_cap(var.as_deref()).unwrap_or_else(|e| {
            eprintln!("tensorplay: {e}; using the host's best level");
            Level::Avx512
        })
    })
}

/// The host's best level, detected once: AVX-512 F+DQ+VL+BW (with FMA) →
/// [`Level::Avx512`], AVX2+FMA → [`Level::Avx2`], otherwise (and on other
/// architectures, and when `TP_BULK_MATH` disables them, see
/// [`env_enables`]) `None` — callers then keep their inline `f32x4` code.
/// `TP_BULK_ISA=avx2` skips AVX-512 ([`level_cap`]).
pub fn level() -> Option<Level> {
    static LEVEL: OnceLock<Option<Level>> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let var = std::env::var("TP_BULK_MATH").ok();
        env_enables(var.as_deref()).then(eager_level).flatten()
    })
}

/// The unary kernel of `op` at the host's best [`level`]; `None` when bulk
/// kernels are unavailable or `op` is not a unary op with a kernel.
pub fn unary(op: BulkOp) -> Option<UnaryFn> {
    unary_at(op, level()?)
}

/// The binary kernel of `op` at the host's best [`level`]; `None` when bulk
/// kernels are unavailable or `op` is not a binary op.
pub fn binary(op: BulkOp) -> Option<BinaryFn> {
    binary_at(op, level()?)
}

/// The unary kernel of `op` at `level`, if the host supports that level
/// (regardless of `TP_BULK_MATH`) and `op` is unary with a kernel.
pub fn unary_at(op: BulkOp, level: Level) -> Option<UnaryFn> {
    if !level.is_supported() {
        return None;
    }
    imp::unary(op, level)
}

/// The binary kernel of `op` at `level`, if the host supports that level
/// (regardless of `TP_BULK_MATH`) and `op` is binary.
pub fn binary_at(op: BulkOp, level: Level) -> Option<BinaryFn> {
    if !level.is_supported() {
        return None;
    }
    imp::binary(op, level)
}

/// The row-max kernel at the host's best [`level`]; `None` when bulk kernels are unavailable.
///
/// It returns NaN when any element is NaN; otherwise the same bits as the inline CLIF row
/// maximum of an `f32x4` kernel (`Emitter::accumulate` with `FloatMax`), including the sign of
/// a zero maximum: that accumulation keeps 4 vector accumulators of 4 lanes (element `i` of
/// the 16-element blocks goes to accumulator `(i / 4) % 4`, lane `i % 4`; the following
/// 4-element blocks to accumulator 0; the last `n % 4` elements to a scalar one), replaces an
/// accumulator only by a strictly greater value, and folds accumulators 0..3, then lanes 0..3,
/// then the scalar, keeping the earlier operand on ties. So when the maximum is ±0 the result
/// is the first zero (by element) of the first (lane, accumulator) pair holding a zero, and
/// the scalar tail's first zero only when no vector lane holds one. The softmax rows that use
/// it either produce NaN everywhere for a NaN row (as the inline code) or need these bits.
/// With `n == 0` it reads nothing and returns `-inf`.
pub fn row_max() -> Option<RowMaxFn> {
    row_max_at(level()?)
}

/// The row-max kernel at `level`, if the host supports that level (regardless of
/// `TP_BULK_MATH`).
pub fn row_max_at(level: Level) -> Option<RowMaxFn> {
    if !level.is_supported() {
        return None;
    }
    imp::row_max(level)
}

/// The kernel of `op` at the host's best [`level`]; `None` when bulk kernels are unavailable.
pub fn scalar_op(op: RowScalarOp) -> Option<ScalarFn> {
    scalar_op_at(op, level()?)
}

/// The kernel of `op` at `level`, if the host supports that level (regardless of
/// `TP_BULK_MATH`).
pub fn scalar_op_at(op: RowScalarOp, level: Level) -> Option<ScalarFn> {
    if !level.is_supported() {
        return None;
    }
    imp::scalar_op(op, level)
}

// ---------------------------------------------------------------------------
// The per-lane operations.

/// A unary operation on one f32 lane (inlined into the vectorized loop).
trait Unary {
    fn eval(x: f32) -> f32;
}

/// A binary operation on one f32 lane.
trait Binary {
    fn eval(a: f32, b: f32) -> f32;
}

/// The lane operation of every approximated row of the function table ([`MathFn`]) and the
/// kernel lookup over them.
macro_rules! math_lane_ops {
    ($($(#[$doc:meta])* $V:ident => $name:literal, f64 = $f64:expr,
       f32 = $kind:ident $(($approx:ident))?, shim = $shim:ident, cuda = $cuda:literal;)*) => {
        /// One zero-sized lane operation per [`MathFn`]: its f32 approximation (a function
        /// without one never gets a kernel, see `math_kernel`).
        mod lane {
            use crate::arith::S32;
            $(
                pub(super) struct $V;
                impl super::Unary for $V {
                    #[inline(always)]
                    fn eval(x: f32) -> f32 {
                        let y: Option<f32> = f32_form!($kind $(($approx))?, &mut S32, x);
                        y.unwrap_or(x)
                    }
                }
            )*
        }

        /// The kernel of `f` built by the drivers `D`; `None` for a function whose f32 form is
        /// the f64 function rounded once (no approximation to vectorize).
        fn math_kernel<D: Drivers>(f: MathFn) -> Option<UnaryFn> {
            if !f.is_inline_f32() {
                return None;
            }
            Some(match f {
                $(MathFn::$V => D::unary::<lane::$V>(),)*
            })
        }
    };
}

math_fns!(math_lane_ops);

struct SqrtOp;
impl Unary for SqrtOp {
    #[inline(always)]
    fn eval(x: f32) -> f32 {
        x.sqrt()
    }
}

struct DivOp;
impl Binary for DivOp {
    #[inline(always)]
    fn eval(a: f32, b: f32) -> f32 {
        a / b
    }
}

struct PowOp;
impl Binary for PowOp {
    #[inline(always)]
    fn eval(a: f32, b: f32) -> f32 {
        pow::pow_f32(&mut S32, a, b)
    }
}

/// An operation on one f32 lane and a scalar shared by the whole row.
trait WithScalar {
    fn eval(x: f32, s: f32) -> f32;
}

struct SubExpOp;
impl WithScalar for SubExpOp {
    #[inline(always)]
    fn eval(x: f32, s: f32) -> f32 {
        approx::exp(&mut S32, x - s)
    }
}

struct MulScalarOp;
impl WithScalar for MulScalarOp {
    #[inline(always)]
    fn eval(x: f32, s: f32) -> f32 {
        x * s
    }
}

struct SubScalarOp;
impl WithScalar for SubScalarOp {
    #[inline(always)]
    fn eval(x: f32, s: f32) -> f32 {
        x - s
    }
}

// ---------------------------------------------------------------------------
// Drivers.

/// Applies `O` to `len <= B` elements through a `B`-lane stack block.
///
/// # Safety
/// `x` readable and `out` writable for `len` elements.
#[inline(always)]
unsafe fn block1<O: Unary, const B: usize>(x: *const f32, out: *mut f32, len: usize) {
    let mut a = [0.0f32; B];
    // SAFETY: the caller guarantees `len` readable elements; `len <= B`.
    unsafe { std::ptr::copy_nonoverlapping(x, a.as_mut_ptr(), len) };
    let mut r = [0.0f32; B];
    for (r, &a) in r.iter_mut().zip(&a) {
        *r = O::eval(a);
    }
    // SAFETY: the caller guarantees `len` writable elements.
    unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), out, len) };
}

/// Keeps LLVM from vectorizing a block loop *across* blocks (with the lane
/// loop fully unrolled inside, it would otherwise do so at a narrow width
/// instead of vectorizing the lanes of each block). An empty `asm!` costs
/// nothing at run time.
#[inline(always)]
fn block_boundary() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty instruction sequence.
    unsafe {
        std::arch::asm!("", options(nomem, nostack, preserves_flags))
    };
}

/// Blocks of `B` (several vectors), then of `L` (one vector), then one
/// zero-padded block of `L` for the remainder.
///
/// # Safety
/// `x` readable and `out` writable for `n` elements.
#[inline(always)]
unsafe fn run1<O: Unary, const B: usize, const L: usize>(x: *const f32, out: *mut f32, n: usize) {
    let mut i = 0;
    // SAFETY: (all blocks) `i + len <= n`.
    unsafe {
        while n - i >= B {
            block1::<O, B>(x.add(i), out.add(i), B);
            block_boundary();
            i += B;
        }
        while n - i >= L {
            block1::<O, L>(x.add(i), out.add(i), L);
            block_boundary();
            i += L;
        }
        if i < n {
            block1::<O, L>(x.add(i), out.add(i), n - i);
        }
    }
}

/// Binary counterpart of [`block1`].
///
/// # Safety
/// `a`, `b` readable and `out` writable for `len` elements.
#[inline(always)]
unsafe fn block2<O: Binary, const B: usize>(
    a: *const f32,
    b: *const f32,
    out: *mut f32,
    len: usize,
) {
    let mut x = [0.0f32; B];
    let mut y = [0.0f32; B];
    // SAFETY: the caller guarantees `len` readable elements; `len <= B`.
    unsafe {
        std::ptr::copy_nonoverlapping(a, x.as_mut_ptr(), len);
        std::ptr::copy_nonoverlapping(b, y.as_mut_ptr(), len);
    }
    let mut r = [0.0f32; B];
    for ((r, &x), &y) in r.iter_mut().zip(&x).zip(&y) {
        *r = O::eval(x, y);
    }
    // SAFETY: the caller guarantees `len` writable elements.
    unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), out, len) };
}

/// Binary counterpart of [`run1`].
///
/// # Safety
/// `a`, `b` readable and `out` writable for `n` elements.
#[inline(always)]
unsafe fn run2<O: Binary, const B: usize, const L: usize>(
    a: *const f32,
    b: *const f32,
    out: *mut f32,
    n: usize,
) {
    let mut i = 0;
    // SAFETY: (all blocks) `i + len <= n`.
    unsafe {
        while n - i >= B {
            block2::<O, B>(a.add(i), b.add(i), out.add(i), B);
            block_boundary();
            i += B;
        }
        while n - i >= L {
            block2::<O, L>(a.add(i), b.add(i), out.add(i), L);
            block_boundary();
            i += L;
        }
        if i < n {
            block2::<O, L>(a.add(i), b.add(i), out.add(i), n - i);
        }
    }
}

/// [`WithScalar`] counterpart of [`block1`].
///
/// # Safety
/// `x` readable and `out` writable for `len` elements.
#[inline(always)]
unsafe fn block_s<O: WithScalar, const B: usize>(x: *const f32, s: f32, out: *mut f32, len: usize) {
    let mut a = [0.0f32; B];
    // SAFETY: the caller guarantees `len` readable elements; `len <= B`.
    unsafe { std::ptr::copy_nonoverlapping(x, a.as_mut_ptr(), len) };
    let mut r = [0.0f32; B];
    for (r, &a) in r.iter_mut().zip(&a) {
        *r = O::eval(a, s);
    }
    // SAFETY: the caller guarantees `len` writable elements.
    unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), out, len) };
}

/// [`WithScalar`] counterpart of [`run1`].
///
/// # Safety
/// `x` readable and `out` writable for `n` elements.
#[inline(always)]
unsafe fn run_s<O: WithScalar, const B: usize, const L: usize>(
    x: *const f32,
    s: f32,
    out: *mut f32,
    n: usize,
) {
    let mut i = 0;
    // SAFETY: (all blocks) `i + len <= n`.
    unsafe {
        while n - i >= B {
            block_s::<O, B>(x.add(i), s, out.add(i), B);
            block_boundary();
            i += B;
        }
        while n - i >= L {
            block_s::<O, L>(x.add(i), s, out.add(i), L);
            block_boundary();
            i += L;
        }
        if i < n {
            block_s::<O, L>(x.add(i), s, out.add(i), n - i);
        }
    }
}

/// The maximum of `x[0..n]` over `B` independent lanes (NaN if any element is NaN), then the
/// sign of a zero maximum fixed up as [`row_max`] documents.
///
/// # Safety
/// `x` readable for `n` elements.
#[inline(always)]
unsafe fn run_max<const B: usize>(x: *const f32, n: usize) -> f32 {
    let mut acc = [f32::NEG_INFINITY; B];
    let mut nan = [0u32; B];
    let mut step = |a: &[f32; B]| {
        for ((m, u), &v) in acc.iter_mut().zip(nan.iter_mut()).zip(a) {
            *m = if v > *m { v } else { *m };
            *u |= u32::from(v.is_nan());
        }
    };
    let mut i = 0;
    while n - i >= B {
        let mut a = [0.0f32; B];
        // SAFETY: `i + B <= n` elements are readable.
        unsafe { std::ptr::copy_nonoverlapping(x.add(i), a.as_mut_ptr(), B) };
        step(&a);
        i += B;
    }
    if i < n {
        let mut a = [f32::NEG_INFINITY; B];
        // SAFETY: `n - i < B` elements are readable.
        unsafe { std::ptr::copy_nonoverlapping(x.add(i), a.as_mut_ptr(), n - i) };
        step(&a);
    }
    if nan.iter().any(|&u| u != 0) {
        return f32::NAN;
    }
    let m = acc
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    if m != 0.0 {
        return m;
    }
    // SAFETY: `n` readable elements (n > 0: the maximum is a zero element).
    clif_zero_max(unsafe { std::slice::from_raw_parts(x, n) })
}

/// The zero the inline `f32x4` row max returns for a row whose maximum is ±0 (see
/// [`row_max`]): the first zero of the smallest (lane, accumulator) pair, the scalar tail
/// last. Rare, so plain scalar code.
#[cold]
fn clif_zero_max(x: &[f32]) -> f32 {
    let n = x.len();
    let (unrolled, vectors) = (n / 16 * 16, n / 4 * 4);
    let key = |i: usize| {
        if i < unrolled {
            (i % 4, (i / 4) % 4, i)
        } else if i < vectors {
            (i % 4, 0, i)
        } else {
            (4, 0, i)
        }
    };
    (0..n)
        .filter(|&i| x[i] == 0.0)
        .min_by_key(|&i| key(i))
        .map_or(0.0, |i| x[i])
}

/// A family of loop drivers (one ISA level): turns a lane operation into a kernel.
trait Drivers {
    fn unary<O: Unary>() -> UnaryFn;
    fn binary<O: Binary>() -> BinaryFn;
}

/// The unary kernel of `op` built by the drivers `D` (`None`: no such unary kernel).
fn unary_kernel<D: Drivers>(op: BulkOp) -> Option<UnaryFn> {
    Some(match op {
        BulkOp::Math(f) => return math_kernel::<D>(f),
        BulkOp::Sqrt => D::unary::<SqrtOp>(),
        BulkOp::Div | BulkOp::Pow => return None,
    })
}

/// The binary kernel of `op` built by the drivers `D` (`None`: no such binary kernel).
fn binary_kernel<D: Drivers>(op: BulkOp) -> Option<BinaryFn> {
    Some(match op {
        BulkOp::Div => D::binary::<DivOp>(),
        BulkOp::Pow => D::binary::<PowOp>(),
        BulkOp::Math(_) | BulkOp::Sqrt => return None,
    })
}

/// The drivers compiled for the baseline target: the same lane code and block structure, so
/// the same bits (`f32::mul_add` is a correctly rounded fma in software where the CPU has
/// none), at whatever width the baseline ISA allows.
struct Portable;

/// # Safety
/// Pointers as [`UnaryFn`].
unsafe extern "C" fn portable1<O: Unary>(x: *const f32, out: *mut f32, n: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { run1::<O, 32, 8>(x, out, n) }
}

/// # Safety
/// Pointers as [`BinaryFn`].
unsafe extern "C" fn portable2<O: Binary>(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
    // SAFETY: forwarded from the caller.
    unsafe { run2::<O, 32, 8>(a, b, out, n) }
}

impl Drivers for Portable {
    fn unary<O: Unary>() -> UnaryFn {
        portable1::<O>
    }
    fn binary<O: Binary>() -> BinaryFn {
        portable2::<O>
    }
}

/// The baseline-target build of `op`'s unary kernel: what [`eager_unary`] runs on hosts
/// without AVX2+FMA, available on every host so tests can hold it to the same bits.
pub fn unary_portable(op: BulkOp) -> Option<UnaryFn> {
    unary_kernel::<Portable>(op)
}

/// The baseline-target build of `op`'s binary kernel (see [`unary_portable`]).
pub fn binary_portable(op: BulkOp) -> Option<BinaryFn> {
    binary_kernel::<Portable>(op)
}

/// The level eager kernels run at ([`eager_unary`]; `None`: the baseline-target loops): the
/// best level the host supports within [`level_cap`], ignoring `TP_BULK_MATH` (which
/// only chooses the shape of the compiler's code; every level returns the same bits).
pub fn eager_level() -> Option<Level> {
    static LEVEL: OnceLock<Option<Level>> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = level_cap();
        Level::ALL
            .into_iter()
            .filter(|&l| cap == Level::Avx512 || l == Level::Avx2)
            .find(|l| l.is_supported())
    })
}

/// The unary kernel eager ops run for `op`: the bulk kernel at the best level the host
/// supports (capped by `TP_BULK_ISA`, not switched off by `TP_BULK_MATH`), or on hosts without
/// AVX2+FMA the same loop built for the baseline target. Every choice returns the same bits
/// (the accuracy contract above), so eager results do not depend on the machine. `None` only
/// when `op` has no unary kernel (`Sin`, `Cos`, binary ops).
///
/// ```
/// use tensorplay_math::{MathFn, bulk::{BulkOp, eager_unary}};
/// let f = eager_unary(BulkOp::Math(MathFn::Exp)).unwrap();
/// let x = [0.0f32, 1.0, -1.0];
/// let mut y = [0.0f32; 3];
/// // SAFETY: both buffers hold 3 elements.
/// unsafe { f(x.as_ptr(), y.as_mut_ptr(), 3) };
/// assert_eq!(y[0], 1.0);
/// assert!((y[1] - std::f32::consts::E).abs() <= 2.0 * f32::EPSILON * y[1]);
/// assert!(eager_unary(BulkOp::Math(MathFn::Sin)).is_none());
/// ```
pub fn eager_unary(op: BulkOp) -> Option<UnaryFn> {
    match eager_level() {
        Some(level) => imp::unary(op, level),
        None => unary_portable(op),
    }
}

/// The binary kernel eager ops run for `op` (as [`eager_unary`]); `None` when `op` is unary.
pub fn eager_binary(op: BulkOp) -> Option<BinaryFn> {
    match eager_level() {
        Some(level) => imp::binary(op, level),
        None => binary_portable(op),
    }
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::*;

    /// # Safety
    /// The host must support [`Level::Avx512`]; pointers as [`UnaryFn`].
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
    unsafe extern "C" fn u512<O: Unary>(x: *const f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run1::<O, 64, 16>(x, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx2`]; pointers as [`UnaryFn`].
    #[target_feature(enable = "avx2,fma")]
    unsafe extern "C" fn u256<O: Unary>(x: *const f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run1::<O, 32, 8>(x, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx512`]; pointers as [`BinaryFn`].
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
    unsafe extern "C" fn b512<O: Binary>(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run2::<O, 64, 16>(a, b, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx2`]; pointers as [`BinaryFn`].
    #[target_feature(enable = "avx2,fma")]
    unsafe extern "C" fn b256<O: Binary>(a: *const f32, b: *const f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run2::<O, 32, 8>(a, b, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx512`]; pointers as [`ScalarFn`].
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
    unsafe extern "C" fn s512<O: WithScalar>(x: *const f32, s: f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run_s::<O, 64, 16>(x, s, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx2`]; pointers as [`ScalarFn`].
    #[target_feature(enable = "avx2,fma")]
    unsafe extern "C" fn s256<O: WithScalar>(x: *const f32, s: f32, out: *mut f32, n: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { run_s::<O, 32, 8>(x, s, out, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx512`]; `x` as [`RowMaxFn`].
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")]
    unsafe extern "C" fn max512(x: *const f32, n: usize) -> f32 {
        // SAFETY: forwarded from the caller.
        unsafe { run_max::<64>(x, n) }
    }

    /// # Safety
    /// The host must support [`Level::Avx2`]; `x` as [`RowMaxFn`].
    #[target_feature(enable = "avx2,fma")]
    unsafe extern "C" fn max256(x: *const f32, n: usize) -> f32 {
        // SAFETY: forwarded from the caller.
        unsafe { run_max::<32>(x, n) }
    }

    pub(super) fn row_max(level: Level) -> Option<RowMaxFn> {
        Some(match level {
            Level::Avx512 => max512,
            Level::Avx2 => max256,
        })
    }

    fn s<O: WithScalar>(level: Level) -> ScalarFn {
        match level {
            Level::Avx512 => s512::<O>,
            Level::Avx2 => s256::<O>,
        }
    }

    pub(super) fn scalar_op(op: RowScalarOp, level: Level) -> Option<ScalarFn> {
        Some(match op {
            RowScalarOp::SubExp => s::<SubExpOp>(level),
            RowScalarOp::Mul => s::<MulScalarOp>(level),
            RowScalarOp::Sub => s::<SubScalarOp>(level),
        })
    }

    /// The AVX-512 drivers.
    struct Wide512;
    impl Drivers for Wide512 {
        fn unary<O: Unary>() -> UnaryFn {
            u512::<O>
        }
        fn binary<O: Binary>() -> BinaryFn {
            b512::<O>
        }
    }

    /// The AVX2 drivers.
    struct Wide256;
    impl Drivers for Wide256 {
        fn unary<O: Unary>() -> UnaryFn {
            u256::<O>
        }
        fn binary<O: Binary>() -> BinaryFn {
            b256::<O>
        }
    }

    pub(super) fn unary(op: BulkOp, level: Level) -> Option<UnaryFn> {
        match level {
            Level::Avx512 => unary_kernel::<Wide512>(op),
            Level::Avx2 => unary_kernel::<Wide256>(op),
        }
    }

    pub(super) fn binary(op: BulkOp, level: Level) -> Option<BinaryFn> {
        match level {
            Level::Avx512 => binary_kernel::<Wide512>(op),
            Level::Avx2 => binary_kernel::<Wide256>(op),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    use super::*;

    pub(super) fn unary(_op: BulkOp, _level: Level) -> Option<UnaryFn> {
        None
    }

    pub(super) fn binary(_op: BulkOp, _level: Level) -> Option<BinaryFn> {
        None
    }

    pub(super) fn row_max(_level: Level) -> Option<RowMaxFn> {
        None
    }

    pub(super) fn scalar_op(_op: RowScalarOp, _level: Level) -> Option<ScalarFn> {
        None
    }
}
