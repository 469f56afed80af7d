//! softmax and log_softmax along one dim.
//!
//! Numerically stable: each lane subtracts its maximum before exponentiating, so no finite input
//! overflows. A lane containing NaN gives NaN everywhere; a lane of all `-inf` gives NaN (PyTorch).
//! f32, f16 and bf16 compute in f32 (f16/bf16 round once at the end); f64 computes in f64.
//!
//! The kernel views the (contiguous) input as `[outer, n, inner]` with the softmax dim in the
//! middle. With `inner == 1` (the last dim) it makes three passes per row — max, exp-and-sum, scale
//! — on rows that sit in L1; otherwise it walks `n` rows of `inner` adjacent lanes at once so every
//! pass is unit-stride. Work is split across the shared pool by rows (or lane blocks).

use rayon::prelude::*;
use tensorplay_ir::shape::normalize_dim;
use tensorplay_ir::{DType, Error, OpClass, Result};

use super::{
    AutocastPolicy, DerivativeFn, FillFn, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::iter::{PAR_MIN_ELEMS, SendPtr};
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::Args;

/// `softmax(Tensor self, int dim) -> Tensor`: `exp(x - max) / sum(exp(x - max))` along `dim`.
pub static SOFTMAX: OpDef = softmax_op(
    "softmax",
    "softmax(Tensor self, int dim) -> Tensor",
    softmax_fill::<false>,
    softmax_grad,
    false,
);

/// `log_softmax(Tensor self, int dim) -> Tensor`: `x - max - log(sum(exp(x - max)))` along `dim`.
pub static LOG_SOFTMAX: OpDef = softmax_op(
    "log_softmax",
    "log_softmax(Tensor self, int dim) -> Tensor",
    softmax_fill::<true>,
    log_softmax_grad,
    true,
);

/// The `OpDef` of softmax or (`log`) log_softmax: a reduction-class op over one dim, filled by
/// `fill`, differentiated by `grad` from its saved output, computed in f32 under autocast.
const fn softmax_op(
    name: &'static str,
    schema: &'static str,
    fill: FillFn,
    grad: DerivativeFn,
    log: bool,
) -> OpDef {
    OpDef {
        name,
        schema,
        class: OpClass::Reduction,
        kernel: Kernel::Compute {
            meta: softmax_meta,
            fill,
        },
        derivative: Some(grad),
        saved: Saved::Outputs,
        lower: Lower::Softmax { log },
        autocast: AutocastPolicy::F32,
        vmap: VmapRule::Derived,
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&SOFTMAX, &LOG_SOFTMAX];

fn softmax_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    normalize_dim(a.op, a.int(1)?, x.rank())?;
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            a.op,
            format!("input dtype must be floating point, got {}", x.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

/// The float type a softmax computes in, with the few operations the kernel needs.
trait SoftFloat: Copy + Send + Sync + PartialOrd + 'static {
    const NEG_INF: Self;
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// `exp(x)` for `x <= 0` (or NaN), the only inputs a stabilized softmax produces.
    fn exp_nonpos(self) -> Self;
    fn ln(self) -> Self;
    fn nan() -> Self;
    fn widen(self) -> f64;
    fn narrow(v: f64) -> Self;
}

/// Implements [`SoftFloat`] for the primitive float types, each with its `exp_nonpos`.
macro_rules! soft_float {
    ($($F:ident: exp_nonpos = $exp:path),*) => {$(
        impl SoftFloat for $F {
            const NEG_INF: Self = $F::NEG_INFINITY;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn exp_nonpos(self) -> Self {
                $exp(self)
            }
            fn ln(self) -> Self {
                $F::ln(self)
            }
            fn nan() -> Self {
                $F::NAN
            }
            #[inline(always)]
            #[allow(clippy::unnecessary_cast, reason = "a no-op for f64")]
            fn widen(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            #[allow(clippy::unnecessary_cast, reason = "a no-op for f64")]
            fn narrow(v: f64) -> Self {
                v as $F
            }
        }
    )*};
}
soft_float!(f32: exp_nonpos = exp_nonpos_f32, f64: exp_nonpos = f64::exp);

/// `exp(x)` in f32 for `x <= 0` (NaN gives NaN), branch-free so loops over it vectorize.
///
/// `x = k ln2 + r` with `|r| <= ln2 / 2` (ln2 split in two so `k ln2` is exact), `exp(r)` from its
/// Taylor series to degree 7 (truncation error below 1e-8 relative), scaled by `2^k`. The scale is
/// applied in two steps, `2^(k+64)` (exact: a normal power of two) and then `2^-64`, so results
/// in the subnormal range (`-103.97 < x < -87.3`) round once instead of flushing to 0 — the
/// compiler's softmax keeps them too, and compiled == eager there. `exp(0)` is exactly 1.
#[inline(always)]
pub(crate) fn exp_nonpos_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // 355 / 512, exact in 9 bits
    const LN2_LO: f32 = -2.121_944_4e-4; // ln 2 - LN2_HI
    const ROUND: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const TWO_M64: f32 = f32::from_bits(0x1f80_0000); // 2^-64
    // The clamp keeps 2^(k+64) a normal number (k in [-150, 91]). Below -104 the result is 0
    // (`exp_nonpos_f32(-104.0) == 0` is tested): those lanes are computed at 0 and replaced,
    // because computing them ends in an underflowing multiply, which x86 cores run as a
    // microcode assist — a row masked with -inf (causal attention) ran 4-5x slower. NaN fails
    // every comparison and stays NaN.
    let under = x < -104.0;
    let xc = if under {
        0.0
    } else if x > 63.0 {
        63.0
    } else {
        x
    };
    let t = xc * LOG2E + ROUND;
    let k = t - ROUND;
    let ki = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (xc - k * LN2_HI) - k * LN2_LO;
    let p = 1.0 / 5040.0;
    let p = p * r + 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let er = (p * r * r + r) + 1.0;
    let scale = f32::from_bits(((ki + 127 + 64) as u32) << 23);
    let e = (er * scale) * TWO_M64;
    if under { 0.0 } else { e }
}

/// Lanes of the row kernels: wide enough for the compiler to use full vector registers.
const LANES: usize = 16;

/// Maximum of `xs`, NaN if any element is NaN (`-inf` for an all `-inf` row).
#[inline(always)]
fn row_max<F: SoftFloat>(xs: &[F]) -> F {
    let mut lanes = [F::NEG_INF; LANES];
    let mut nan = [false; LANES];
    let mut it = xs.chunks_exact(LANES);
    for c in &mut it {
        for k in 0..LANES {
            let v = c[k];
            lanes[k] = if v > lanes[k] { v } else { lanes[k] };
            #[allow(clippy::eq_op)]
            let is_nan = v != v;
            nan[k] |= is_nan;
        }
    }
    let mut m = F::NEG_INF;
    let mut any_nan = nan.iter().any(|&b| b);
    for &v in lanes.iter().chain(it.remainder()) {
        m = if v > m { v } else { m };
        #[allow(clippy::eq_op)]
        let is_nan = v != v;
        any_nan |= is_nan;
    }
    if any_nan { F::nan() } else { m }
}

/// Elements summed in `F` lanes before the partial sum is added into an f64 total, so the error
/// of long sums does not grow with their length.
const SUM_BLOCK: usize = 1024;

/// Writes `exp(x - m)` into `out` (when given) and returns the sum of those values.
#[inline(always)]
fn row_exp_sum<F: SoftFloat>(xs: &[F], m: F, mut out: Option<&mut [F]>) -> F {
    let mut total = 0f64;
    for (b, xb) in xs.chunks(SUM_BLOCK).enumerate() {
        let mut lanes = [F::ZERO; LANES];
        match out.as_deref_mut() {
            Some(out) => {
                let ob = &mut out[b * SUM_BLOCK..b * SUM_BLOCK + xb.len()];
                let mut xi = xb.chunks_exact(LANES);
                let mut oi = ob.chunks_exact_mut(LANES);
                for (c, o) in (&mut xi).zip(&mut oi) {
                    for k in 0..LANES {
                        let e = c[k].sub(m).exp_nonpos();
                        o[k] = e;
                        lanes[k] = lanes[k].add(e);
                    }
                }
                for (k, (&v, o)) in xi.remainder().iter().zip(oi.into_remainder()).enumerate() {
                    let e = v.sub(m).exp_nonpos();
                    *o = e;
                    lanes[k] = lanes[k].add(e);
                }
            }
            None => {
                let mut xi = xb.chunks_exact(LANES);
                for c in &mut xi {
                    for k in 0..LANES {
                        lanes[k] = lanes[k].add(c[k].sub(m).exp_nonpos());
                    }
                }
                for (k, &v) in xi.remainder().iter().enumerate() {
                    lanes[k] = lanes[k].add(v.sub(m).exp_nonpos());
                }
            }
        }
        total += lanes.iter().fold(F::ZERO, |s, &v| s.add(v)).widen();
    }
    F::narrow(total)
}

/// softmax (or log_softmax when `LOG`) of one contiguous row.
#[inline(always)]
fn softmax_row<F: SoftFloat, const LOG: bool>(xs: &[F], out: &mut [F]) {
    let m = row_max(xs);
    if LOG {
        let shift = m.add(row_exp_sum(xs, m, None).ln());
        for (o, &v) in out.iter_mut().zip(xs) {
            *o = v.sub(shift);
        }
    } else {
        let inv = F::ONE.div(row_exp_sum(xs, m, Some(out)));
        for o in out.iter_mut() {
            *o = o.mul(inv);
        }
    }
}

/// Scratch of the middle-dim kernel, one per task: per-lane maxima, NaN flags and sums.
struct ColumnScratch<F> {
    m: Vec<F>,
    nan: Vec<bool>,
    part: Vec<F>,
    total: Vec<f64>,
    s: Vec<F>,
}

impl<F: SoftFloat> ColumnScratch<F> {
    fn new() -> Self {
        ColumnScratch {
            m: Vec::new(),
            nan: Vec::new(),
            part: Vec::new(),
            total: Vec::new(),
            s: Vec::new(),
        }
    }
}

/// softmax over the middle dim of a contiguous `[outer, n, inner]` block: `w` adjacent lanes
/// starting at `x`/`out`, rows `inner` apart.
///
/// # Safety
/// `x` and `out` must be valid for the `n` rows of `w` elements each.
#[inline(always)]
unsafe fn softmax_columns<F: SoftFloat, const LOG: bool>(
    x: *const F,
    out: *mut F,
    n: usize,
    inner: usize,
    w: usize,
    sc: &mut ColumnScratch<F>,
) {
    // SAFETY: the caller guarantees `n` rows of `w` elements, `inner` apart, at `x` and `out`; the
    // input is initialised and `out` is a different (fresh) tensor, so the views never alias.
    let row = |i: usize| unsafe { std::slice::from_raw_parts(x.add(i * inner), w) };
    // SAFETY: as for `row`; only one output row view is live at a time.
    let row_out = |i: usize| unsafe { std::slice::from_raw_parts_mut(out.add(i * inner), w) };
    let ColumnScratch {
        m,
        nan,
        part,
        total,
        s,
    } = sc;
    m.clear();
    m.resize(w, F::NEG_INF);
    nan.clear();
    nan.resize(w, false);
    for i in 0..n {
        for (mj, &v) in m.iter_mut().zip(row(i)) {
            *mj = if v > *mj { v } else { *mj };
        }
        for (nj, &v) in nan.iter_mut().zip(row(i)) {
            #[allow(clippy::eq_op)]
            let is_nan = v != v;
            *nj |= is_nan;
        }
    }
    for (mj, &nj) in m.iter_mut().zip(nan.iter()) {
        if nj {
            *mj = F::nan();
        }
    }
    // Sums in `F` over blocks of rows, flushed into f64 totals.
    part.clear();
    part.resize(w, F::ZERO);
    total.clear();
    total.resize(w, 0.0);
    for i in 0..n {
        if LOG {
            for ((pj, &mj), &v) in part.iter_mut().zip(m.iter()).zip(row(i)) {
                *pj = pj.add(v.sub(mj).exp_nonpos());
            }
        } else {
            let o = row_out(i);
            for ((oj, &mj), &v) in o.iter_mut().zip(m.iter()).zip(row(i)) {
                *oj = v.sub(mj).exp_nonpos();
            }
            for (pj, &e) in part.iter_mut().zip(o.iter()) {
                *pj = pj.add(e);
            }
        }
        if (i + 1) % (SUM_BLOCK / 4) == 0 || i + 1 == n {
            for (t, p) in total.iter_mut().zip(part.iter_mut()) {
                *t += p.widen();
                *p = F::ZERO;
            }
        }
    }
    s.clear();
    if LOG {
        s.extend(
            total
                .iter()
                .zip(m.iter())
                .map(|(&t, &mj)| mj.add(F::narrow(t).ln())),
        );
        for i in 0..n {
            for ((o, &v), &shift) in row_out(i).iter_mut().zip(row(i)).zip(s.iter()) {
                *o = v.sub(shift);
            }
        }
    } else {
        s.extend(total.iter().map(|&t| F::ONE.div(F::narrow(t))));
        for i in 0..n {
            for (o, &inv) in row_out(i).iter_mut().zip(s.iter()) {
                *o = o.mul(inv);
            }
        }
    }
}

/// Lane block of the middle-dim kernel: `n` rows of this many lanes stay in cache across passes.
const COLS: usize = 256;

/// The shape of one softmax call: `[outer, n, inner]` over contiguous data.
#[derive(Clone, Copy)]
struct Layout<F> {
    x: SendPtr<F>,
    out: SendPtr<F>,
    n: usize,
    inner: usize,
}

impl<F: SoftFloat> Layout<F> {
    /// Number of lane blocks per outer index (middle-dim kernel).
    fn blocks(&self) -> usize {
        self.inner.div_ceil(COLS)
    }

    /// softmax of rows `rows` (last-dim kernel, `inner == 1`).
    #[inline(always)]
    fn rows<const LOG: bool>(self, rows: std::ops::Range<usize>) {
        let n = self.n;
        for i in rows {
            // SAFETY: a `Layout` describes contiguous `[outer, n, inner]` data at `x` and a fresh
            // output of the same size at `out`; with `inner == 1`, row `i < outer` is `n`
            // elements at `i * n`, and each row goes to one thread.
            let xs = unsafe { std::slice::from_raw_parts(self.x.at((i * n) as isize), n) };
            // SAFETY: as for `xs`; `out` never aliases `x`.
            let os = unsafe { std::slice::from_raw_parts_mut(self.out.at((i * n) as isize), n) };
            softmax_row::<F, LOG>(xs, os);
        }
    }

    /// softmax of lane blocks `units` (middle-dim kernel): unit `u` is outer index
    /// `u / blocks`, lanes `COLS * (u % blocks)..`.
    #[inline(always)]
    fn units<const LOG: bool>(self, units: std::ops::Range<usize>) {
        let (n, inner, blocks) = (self.n, self.inner, self.blocks());
        let mut sc = ColumnScratch::new();
        for u in units {
            let (o, b) = (u / blocks, u % blocks);
            let j = b * COLS;
            let w = COLS.min(inner - j);
            let base = (o * n * inner + j) as isize;
            // SAFETY: lanes `j..j + w` of outer index `o` lie inside both `[outer, n, inner]`
            // buffers, each unit goes to one thread, and `out` never aliases `x`.
            unsafe {
                softmax_columns::<F, LOG>(self.x.at(base), self.out.at(base), n, inner, w, &mut sc)
            };
        }
    }

    /// Runs `rows` or `units` over `range`, compiled for AVX-512 or AVX2 when the CPU has them
    /// (the exp polynomial then runs 16 or 8 lanes wide instead of SSE2's 4).
    fn run<const LOG: bool>(self, range: std::ops::Range<usize>) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked above).
            unsafe { self.run_avx512::<LOG>(range) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked above).
            unsafe { self.run_avx2::<LOG>(range) };
            return;
        }
        self.run_generic::<LOG>(range);
    }

    #[inline(always)]
    fn run_generic<const LOG: bool>(self, range: std::ops::Range<usize>) {
        if self.inner == 1 {
            self.rows::<LOG>(range)
        } else {
            self.units::<LOG>(range)
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn run_avx512<const LOG: bool>(self, range: std::ops::Range<usize>) {
        self.run_generic::<LOG>(range)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn run_avx2<const LOG: bool>(self, range: std::ops::Range<usize>) {
        self.run_generic::<LOG>(range)
    }
}

/// Computes softmax of the contiguous `x` into the contiguous `out` (same shape, dtype `F`).
fn softmax_contiguous<F: SoftFloat, const LOG: bool>(
    op: &str,
    x: &Tensor,
    out: &Tensor,
    dim: usize,
) -> Result<()> {
    let numel = x.numel();
    if numel == 0 {
        return Ok(());
    }
    let shape = x.shape();
    let n = shape.get(dim).copied().unwrap_or(1);
    let inner: usize = shape.iter().skip(dim + 1).product();
    let outer = numel / (n * inner);
    let layout = Layout {
        x: SendPtr(x.data_ptr(op)? as *mut F),
        out: SendPtr(out.data_ptr(op)? as *mut F),
        n,
        inner,
    };
    // Work items: rows for the last-dim kernel, lane blocks otherwise.
    let items = if inner == 1 {
        outer
    } else {
        outer * layout.blocks()
    };
    let threads = parallel::num_threads();
    if threads > 1 && numel >= PAR_MIN_ELEMS && items > 1 {
        let chunks = items.min(threads * 4);
        let per = items.div_ceil(chunks);
        parallel::pool().install(|| {
            (0..chunks)
                .into_par_iter()
                .for_each(|c| layout.run::<LOG>((c * per).min(items)..((c + 1) * per).min(items)))
        });
    } else {
        layout.run::<LOG>(0..items);
    }
    Ok(())
}

fn softmax_fill<const LOG: bool>(a: Args, outs: &[Tensor]) -> Result<()> {
    let x = a.tensor(0)?;
    let out = &outs[0];
    let dim = normalize_dim(a.op, a.int(1)?, x.rank())?;
    match x.dtype() {
        DType::F32 => softmax_contiguous::<f32, LOG>(a.op, &x.contiguous()?, out, dim),
        DType::F64 => softmax_contiguous::<f64, LOG>(a.op, &x.contiguous()?, out, dim),
        DType::F16 | DType::BF16 => {
            let x32 = x.to_dtype(DType::F32)?.contiguous()?;
            let tmp = Tensor::empty(x.shape(), DType::F32);
            softmax_contiguous::<f32, LOG>(a.op, &x32, &tmp, dim)?;
            super::cast::copy_convert(a.op, out, &tmp)
        }
        d => Err(Error::dtype(
            a.op,
            format!("input dtype must be floating point, got {d}"),
        )),
    }
}

/// The op's output for use in its derivative: the saved (detached) output, or — when the
/// backward pass is itself being recorded (`create_graph`) — the output recomputed from the input,
/// so that second derivatives see its dependence on the input.
fn output_for_grad(c: &GradCtx, op: &'static OpDef) -> Result<Tensor> {
    let x = c.args.tensor(0)?;
    if crate::autograd::is_grad_enabled() && x.requires_grad() {
        call1(op, c.args.values)
    } else {
        Ok(c.outputs[0].clone())
    }
}

/// d softmax: `out * (g - sum(g * out, dim))`.
fn softmax_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let dim = c.args.int(1)?;
    let (g, out) = (c.grad(0)?, output_for_grad(c, &SOFTMAX)?);
    let dot = g.mul(&out)?.sum(&[dim], true)?;
    Ok(vec![Some(out.mul(&g.sub(&dot)?)?)])
}

/// d log_softmax: `g - exp(out) * sum(g, dim)`.
fn log_softmax_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let dim = c.args.int(1)?;
    let (g, out) = (c.grad(0)?, output_for_grad(c, &LOG_SOFTMAX)?);
    let total = g.sum(&[dim], true)?;
    Ok(vec![Some(g.sub(&out.exp()?.mul(&total)?)?)])
}

impl Tensor {
    /// softmax along `dim` (negative counts from the end); floating input only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f32, 0.0, 1.0, f32::NEG_INFINITY], &[2, 2])?;
    /// let y = x.softmax(-1)?.to_vec::<f32>()?;
    /// assert_eq!(y, vec![0.5, 0.5, 1.0, 0.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn softmax(&self, dim: i64) -> Result<Tensor> {
        call1(&SOFTMAX, &[self.into(), dim.into()])
    }

    /// log of softmax along `dim`, computed as `x - max - log(sum(exp(x - max)))` (no underflow
    /// to `-inf` for very negative inputs).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 0.0], &[2])?;
    /// let y = x.log_softmax(0)?.to_vec::<f64>()?;
    /// assert!((y[0] + std::f64::consts::LN_2).abs() < 1e-15);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn log_softmax(&self, dim: i64) -> Result<Tensor> {
        call1(&LOG_SOFTMAX, &[self.into(), dim.into()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_nonpos_f32_is_accurate() {
        // Relative error over the normal range, ulps (of the f32 result) over the subnormal one.
        let mut worst_rel = 0f64;
        let mut worst_ulp = 0f64;
        let mut x = 0f32;
        while x > -110.0 {
            let want = (x as f64).exp();
            let got = exp_nonpos_f32(x) as f64;
            if want >= f32::MIN_POSITIVE as f64 {
                worst_rel = worst_rel.max(((got - want) / want).abs());
            } else {
                // A subnormal ulp is 2^-149.
                worst_ulp = worst_ulp.max((got - want).abs() / 2f64.powi(-149));
            }
            x -= 0.000_731;
        }
        // Within 2 ulp of f32 (2^-23 = 1.19e-7 per ulp); subnormal results round once.
        assert!(worst_rel < 2.4e-7, "worst relative error {worst_rel:e}");
        assert!(worst_ulp <= 1.0, "worst subnormal error {worst_ulp} ulp");
        assert_eq!(exp_nonpos_f32(0.0), 1.0);
        assert_eq!(exp_nonpos_f32(-0.0), 1.0);
        assert_eq!(exp_nonpos_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpos_f32(-200.0), 0.0);
        // The shortcut below -104 returns what the computation gives there: +0.
        assert_eq!(exp_nonpos_f32(-104.0).to_bits(), 0);
        assert_eq!(exp_nonpos_f32(-104.000_01).to_bits(), 0);
        assert!(
            exp_nonpos_f32(-90.0) > 0.0,
            "exp(-90) is a subnormal, not 0"
        );
        assert!(exp_nonpos_f32(f32::NAN).is_nan());
    }

    /// Runs one kernel path over a whole `[outer, n, inner]` f32 input.
    fn run_path(x: &[f32], n: usize, inner: usize, log: bool, path: &str) -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        let layout = Layout {
            x: SendPtr(x.as_ptr() as *mut f32),
            out: SendPtr(out.as_mut_ptr()),
            n,
            inner,
        };
        let items = if inner == 1 {
            x.len() / n
        } else {
            x.len() / (n * inner) * layout.blocks()
        };
        // The test only asks for SIMD paths the CPU supports; `x` and `out` hold `x.len()` elements.
        match (path, log) {
            ("generic", false) => layout.run_generic::<false>(0..items),
            ("generic", true) => layout.run_generic::<true>(0..items),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports the path (see above).
            ("avx2", false) => unsafe { layout.run_avx2::<false>(0..items) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports the path (see above).
            ("avx2", true) => unsafe { layout.run_avx2::<true>(0..items) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports the path (see above).
            ("avx512", false) => unsafe { layout.run_avx512::<false>(0..items) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports the path (see above).
            ("avx512", true) => unsafe { layout.run_avx512::<true>(0..items) },
            _ => unreachable!("unknown path {path}"),
        }
        out
    }

    #[test]
    fn every_cpu_path_matches_f64() {
        let mut paths = vec!["generic"];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                paths.push("avx2");
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                paths.push("avx512");
            }
        }
        // Rows of 1100 (several lanes plus a remainder), then a middle dim with 300 lanes.
        for (n, inner) in [(1100usize, 1usize), (37, 300)] {
            let x: Vec<f32> = (0..3 * n * inner)
                .map(|i| ((i * 7919 % 2003) as f32 - 1000.0) * 0.013)
                .collect();
            for log in [false, true] {
                // f64 reference per lane.
                let mut want = vec![0f64; x.len()];
                for o in 0..3 {
                    for j in 0..inner {
                        let idx: Vec<usize> = (0..n).map(|i| (o * n + i) * inner + j).collect();
                        let m = idx.iter().map(|&i| x[i] as f64).fold(f64::MIN, f64::max);
                        let s: f64 = idx.iter().map(|&i| (x[i] as f64 - m).exp()).sum();
                        for &i in &idx {
                            let v = x[i] as f64 - m;
                            want[i] = if log { v - s.ln() } else { v.exp() / s };
                        }
                    }
                }
                for &path in &paths {
                    let got = run_path(&x, n, inner, log, path);
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        let tol = 1e-6 * w.abs().max(if log { 1.0 } else { 1e-3 });
                        assert!(
                            (g as f64 - w).abs() <= tol,
                            "{path} log={log} [{i}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
