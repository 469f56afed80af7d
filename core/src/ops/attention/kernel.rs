//! The per-head loops of fused attention, on contiguous `f32`/`f64` rows.
//!
//! One head is a query block `q` (`L x E`), keys `k` (`S x E`) and values `v` (`S x Ev`). Both
//! directions walk the queries in blocks of [`ROWS`] rows and express each step as a small
//! matrix product ([`gemm`]) over operands laid out once per head, with the product's
//! columns padded to [`W`] lanes:
//!
//! - forward: scores `Q_b Kᵀ` (a `ROWS x S` tile, never the `L x S` matrix), then per row the
//!   scale, the mask, the maximum, `exp(s - max)`, the sum and the log-sum-exp, then `P_b V`;
//! - backward (flash-attention's schedule): the probabilities recomputed from the saved
//!   log-sum-exp, `dP = dO_b Vᵀ`, `dS = P ∘ (dP - δ) · scale`, then `dQ_b = dS K`,
//!   `dV += Pᵀ dO_b` and `dK += dSᵀ Q_b`.
//!
//! With `is_causal`, a block stops at the last key its last row sees: the products skip the
//! upper triangle. Rows that see no key (every score masked) produce a zero output row, a
//! log-sum-exp of `-inf` and zero gradients, as PyTorch 2.15's fused kernels do.
//!
//! With attention dropout, each row's probabilities are dropped after its log-sum-exp (which
//! stays the undropped one) by the counter-based decisions of [`super::dropout`]; the backward
//! regenerates them per element (no mask tensor in either direction).
//!
//! Products are accumulated with fused multiply-adds (`mul_add`) and row sums over eight
//! partial sums, in one order on every host.

use tensorplay_math::MathFn;
use tensorplay_math::bulk::{self, BulkOp, UnaryFn};

use super::dropout::Dropout;

/// The floating types the loops run in: `f32` (also the compute type of f16/bf16) and `f64`.
pub(super) trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::AddAssign
{
    const ZERO: Self;
    const NEG_INF: Self;
    fn of(x: f64) -> Self;
    fn ln(self) -> Self;
    /// `self * a + b`, rounded once.
    fn fma(self, a: Self, b: Self) -> Self;
    /// `xs[j] = exp(xs[j])` for every `j` (`exp(-inf) = 0`).
    fn exp_all(xs: &mut [Self]);
}

/// The eager bulk kernel for `exp`, when the host has one.
fn exp_kernel() -> Option<UnaryFn> {
    static K: std::sync::OnceLock<Option<UnaryFn>> = std::sync::OnceLock::new();
    *K.get_or_init(|| bulk::eager_unary(BulkOp::Math(MathFn::Exp)))
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const NEG_INF: f32 = f32::NEG_INFINITY;
    fn of(x: f64) -> f32 {
        x as f32
    }
    fn ln(self) -> f32 {
        f32::ln(self)
    }
    #[inline(always)]
    fn fma(self, a: f32, b: f32) -> f32 {
        self.mul_add(a, b)
    }
    fn exp_all(xs: &mut [f32]) {
        match exp_kernel() {
            // SAFETY: in place over `xs.len()` elements of one live slice.
            Some(k) => unsafe { k(xs.as_ptr(), xs.as_mut_ptr(), xs.len()) },
            None => xs.iter_mut().for_each(|x| *x = x.exp()),
        }
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const NEG_INF: f64 = f64::NEG_INFINITY;
    fn of(x: f64) -> f64 {
        x
    }
    fn ln(self) -> f64 {
        f64::ln(self)
    }
    #[inline(always)]
    fn fma(self, a: f64, b: f64) -> f64 {
        self.mul_add(a, b)
    }
    fn exp_all(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = x.exp());
    }
}

/// A head's mask: none, or a boolean (true: attend) or additive float matrix read through
/// row and column strides in elements (0 for broadcast dims).
#[derive(Clone, Copy)]
pub(super) enum Mask<'a, F> {
    None,
    Bool(&'a [bool], isize, isize, usize),
    Float(&'a [F], isize, isize, usize),
}

/// Sizes and flags shared by every head of a call.
#[derive(Clone, Copy)]
pub(super) struct Dims<F> {
    /// Query rows, key rows, query/key width, value width.
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
    pub causal: bool,
    pub scale: F,
    /// Attention dropout (`None` when `dropout_p` is 0) and the head's index among the call's
    /// heads (the dropout counter's high part).
    pub dropout: Option<Dropout<F>>,
    pub head: usize,
}

/// A head's operand: row `i` starts at `data[i * rs]` (its elements are contiguous).
#[derive(Clone, Copy)]
pub(super) struct Rows<'a, F> {
    pub data: &'a [F],
    pub rs: usize,
}

impl<'a, F> Rows<'a, F> {
    /// The first `width` elements of row `i`.
    #[inline(always)]
    fn row(&self, i: usize, width: usize) -> &'a [F] {
        if width == 0 {
            return &[];
        }
        &self.data[i * self.rs..][..width]
    }

    /// Rows from `i` on, as a product operand.
    #[inline(always)]
    fn from(&self, i: usize) -> Mat<'a, F> {
        Mat {
            // Empty when the rows are (zero-width rows may all start past the end).
            data: self.data.get(i * self.rs..).unwrap_or(&[]),
            rs: self.rs,
            cs: 1,
        }
    }
}

/// Lanes of one column chunk of a product: products' column counts are padded to a multiple.
const W: usize = 16;
/// Rows of `C` one register tile computes.
const R: usize = 4;
/// Query rows per block.
const ROWS: usize = 16;

/// `n` rounded up to a multiple of [`W`].
fn pad(n: usize) -> usize {
    n.div_ceil(W) * W
}

/// A read-only operand `A` of a product: element `(r, p)` at `data[r * rs + p * cs]`.
#[derive(Clone, Copy)]
struct Mat<'a, F> {
    data: &'a [F],
    rs: usize,
    cs: usize,
}

/// `C[m x n] (+)= A[m x k] · B[k x n]`: `B`'s rows start every `ldb` elements and `C`'s every
/// `ldc`; `n` is a multiple of [`W`]. Register tiles of [`R`] rows by `W` columns accumulate
/// along `k` with fused multiply-adds.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gemm<F: Real>(
    (m, n, k): (usize, usize, usize),
    a: Mat<F>,
    b: &[F],
    ldb: usize,
    c: &mut [F],
    ldc: usize,
    accumulate: bool,
) {
    debug_assert!(n % W == 0);
    let mut i = 0;
    while i + R <= m {
        tile_rows::<F, R>(i, (n, k), a, b, ldb, c, ldc, accumulate);
        i += R;
    }
    while i < m {
        tile_rows::<F, 1>(i, (n, k), a, b, ldb, c, ldc, accumulate);
        i += 1;
    }
}

/// Rows `i..i + T` of [`gemm`]'s `C`, one `T x W` register tile per column chunk.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile_rows<F: Real, const T: usize>(
    i: usize,
    (n, k): (usize, usize),
    a: Mat<F>,
    b: &[F],
    ldb: usize,
    c: &mut [F],
    ldc: usize,
    accumulate: bool,
) {
    for j in (0..n).step_by(W) {
        let mut acc = [[F::ZERO; W]; T];
        if accumulate {
            for (t, row) in acc.iter_mut().enumerate() {
                row.copy_from_slice(&c[(i + t) * ldc + j..][..W]);
            }
        }
        for p in 0..k {
            let bp: &[F; W] = b[p * ldb + j..][..W].try_into().expect("W lanes");
            for (t, row) in acc.iter_mut().enumerate() {
                let x = a.data[(i + t) * a.rs + p * a.cs];
                for (y, &z) in row.iter_mut().zip(bp) {
                    *y = x.fma(z, *y);
                }
            }
        }
        for (t, row) in acc.iter().enumerate() {
            c[(i + t) * ldc + j..][..W].copy_from_slice(row);
        }
    }
}

/// Lanes of the row reductions ([`row_sum`], [`row_max`]): partial results per lane, combined
/// in one fixed order, so the result does not depend on the host's vector width.
const LANES: usize = 8;

/// `xs[0] + xs[1] + ...` over [`LANES`] partial sums (vectorizable, unlike one running sum).
#[inline(always)]
fn row_sum<F: Real>(xs: &[F]) -> F {
    let mut acc = [F::ZERO; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
        *a += x;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// The largest of `xs` (`-inf` when empty or all `-inf`), lane by lane.
#[inline(always)]
fn row_max<F: Real>(xs: &[F]) -> F {
    let max = |m: F, x: F| if x > m { x } else { m };
    let mut acc = [F::NEG_INF; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = max(*a, x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
        *a = max(*a, x);
    }
    acc.iter().fold(F::NEG_INF, |m, &x| max(m, x))
}

/// The `cols x rows` transpose of `src`'s first `rows` rows, in rows of `ld >= rows` elements
/// (zero-padded). Groups of [`LANES`] source rows fill [`LANES`] contiguous elements of each
/// destination row at a time.
#[inline(always)]
fn transposed<F: Real>(src: Rows<F>, rows: usize, cols: usize, ld: usize) -> Vec<F> {
    let mut dst = vec![F::ZERO; cols * ld];
    let mut r0 = 0;
    while r0 + LANES <= rows {
        let group: [&[F]; LANES] = std::array::from_fn(|t| src.row(r0 + t, cols));
        for (d, out) in dst.chunks_exact_mut(ld).take(cols).enumerate() {
            let out = &mut out[r0..r0 + LANES];
            for (o, row) in out.iter_mut().zip(&group) {
                *o = row[d];
            }
        }
        r0 += LANES;
    }
    for r in r0..rows {
        for (d, &x) in src.row(r, cols).iter().enumerate() {
            dst[d * ld + r] = x;
        }
    }
    dst
}

/// `src`'s first `rows` rows of `cols` elements, in rows of `ld >= cols` elements (zero-padded).
#[inline(always)]
fn padded<F: Real>(src: Rows<F>, rows: usize, cols: usize, ld: usize) -> Vec<F> {
    let mut dst = vec![F::ZERO; rows * ld];
    for r in 0..rows {
        dst[r * ld..r * ld + cols].copy_from_slice(src.row(r, cols));
    }
    dst
}

/// Element index of mask entry `(i, j)`.
#[inline(always)]
fn at(base: usize, rs: isize, cs: isize, i: usize, j: usize) -> usize {
    (base as isize + i as isize * rs + j as isize * cs) as usize
}

impl<F: Real> Dims<F> {
    /// Keys visible to query row `i` before the mask: all, or `0..=i` when causal (top-left
    /// aligned, as PyTorch's `is_causal`).
    #[inline(always)]
    fn visible(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.s)
        } else {
            self.s
        }
    }

    /// Scales the raw scores `s[..n]` of row `i` and applies the mask; the entries from `n`
    /// on are set to `-inf`.
    #[inline(always)]
    fn finish_scores(&self, mask: Mask<F>, i: usize, s: &mut [F]) {
        let n = self.visible(i);
        let (seen, unseen) = s.split_at_mut(n);
        unseen.iter_mut().for_each(|x| *x = F::NEG_INF);
        let scale = self.scale;
        seen.iter_mut().for_each(|x| *x = *x * scale);
        match mask {
            Mask::None => {}
            Mask::Bool(m, rs, cs, base) => {
                for (j, x) in seen.iter_mut().enumerate() {
                    if !m[at(base, rs, cs, i, j)] {
                        *x = F::NEG_INF;
                    }
                }
            }
            Mask::Float(m, rs, cs, base) => {
                for (j, x) in seen.iter_mut().enumerate() {
                    *x += m[at(base, rs, cs, i, j)];
                }
            }
        }
    }

    /// The dropout counter of row `i`'s first key.
    #[inline(always)]
    fn counter(&self, i: usize) -> u64 {
        ((self.head * self.l + i) * self.s) as u64
    }

    /// The query blocks: first row, rows, and the keys the block's rows can see at most.
    fn blocks(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        (0..self.l).step_by(ROWS).map(move |i0| {
            let rows = ROWS.min(self.l - i0);
            (i0, rows, self.visible(i0 + rows - 1))
        })
    }
}

/// The forward of one head: `out` (`L x Ev`) and `lse` (`L`).
#[inline(always)]
pub(super) fn forward<F: Real>(
    dims: &Dims<F>,
    (q, k, v): (Rows<F>, Rows<F>, Rows<F>),
    mask: Mask<F>,
    out: &mut [F],
    lse: &mut [F],
) {
    let Dims { s, e, ev, .. } = *dims;
    let (sp, evp) = (pad(s), pad(ev));
    let kt = transposed(k, s, e, sp);
    let vp = padded(v, s, ev, evp);
    let mut sc = vec![F::ZERO; ROWS * sp];
    let mut ob = vec![F::ZERO; ROWS * evp];
    let (mut totals, mut maxes) = ([F::ZERO; ROWS], [F::ZERO; ROWS]);
    for (i0, rows, keys) in dims.blocks() {
        let kp = pad(keys);
        gemm((rows, kp, e), q.from(i0), &kt, sp, &mut sc, sp, false);
        // Per row: scale, mask, subtract the maximum; then one `exp` over the block's tile
        // (entries past the visible keys, and rows that see none, are -inf: exp gives 0).
        for r in 0..rows {
            let row = &mut sc[r * sp..(r + 1) * sp];
            dims.finish_scores(mask, i0 + r, &mut row[..keys]);
            let m = row_max(&row[..keys]);
            maxes[r] = m;
            let seen = if m == F::NEG_INF { 0 } else { keys };
            row[..seen].iter_mut().for_each(|x| *x = *x - m);
            row[seen..].iter_mut().for_each(|x| *x = F::NEG_INF);
        }
        F::exp_all(&mut sc[..rows * sp]);
        for r in 0..rows {
            let i = i0 + r;
            if maxes[r] == F::NEG_INF {
                lse[i] = F::NEG_INF;
                continue;
            }
            totals[r] = row_sum(&sc[r * sp..r * sp + keys]);
            lse[i] = maxes[r] + totals[r].ln();
            if let Some(d) = &dims.dropout {
                // The log-sum-exp and the totals are the undropped ones; the kept
                // probabilities are scaled by 1 / (1 - p).
                let n = dims.counter(i);
                for (j, x) in sc[r * sp..r * sp + keys].iter_mut().enumerate() {
                    *x = if d.keep(n + j as u64) {
                        *x * d.inv_keep
                    } else {
                        F::ZERO
                    };
                }
            }
        }
        let pa = Mat {
            data: &sc,
            rs: sp,
            cs: 1,
        };
        gemm((rows, evp, keys), pa, &vp, evp, &mut ob, evp, false);
        for r in 0..rows {
            let i = i0 + r;
            let o = &mut out[i * ev..(i + 1) * ev];
            if lse[i] == F::NEG_INF {
                o.iter_mut().for_each(|x| *x = F::ZERO);
                continue;
            }
            let inv = F::of(1.0) / totals[r];
            for (x, &y) in o.iter_mut().zip(&ob[r * evp..r * evp + ev]) {
                *x = y * inv;
            }
        }
    }
}

/// The backward of one head: `dq` (`L x E`), `dk` (`S x E`) and `dv` (`S x Ev`), all
/// overwritten, from the output gradient `g`, the forward's `out` and `lse`, and the gradient
/// `glse` of the log-sum-exp (zeros when it has none).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn backward<F: Real>(
    dims: &Dims<F>,
    (q, k, v): (Rows<F>, Rows<F>, Rows<F>),
    mask: Mask<F>,
    (out, lse, g, glse): (Rows<F>, &[F], Rows<F>, &[F]),
    dq: &mut [F],
    dk: &mut [F],
    dv: &mut [F],
) {
    let Dims { s, e, ev, .. } = *dims;
    let (sp, ep, evp) = (pad(s), pad(e), pad(ev));
    let kt = transposed(k, s, e, sp);
    let vt = transposed(v, s, ev, sp);
    let kp = padded(k, s, e, ep);
    let qp = padded(q, dims.l, e, ep);
    let gp = padded(g, dims.l, ev, evp);
    let (mut dkp, mut dvp) = (vec![F::ZERO; s * ep], vec![F::ZERO; s * evp]);
    let (mut p, mut ds) = (vec![F::ZERO; ROWS * sp], vec![F::ZERO; ROWS * sp]);
    let mut dqb = vec![F::ZERO; ROWS * ep];
    for (i0, rows, keys) in dims.blocks() {
        let kpad = pad(keys);
        gemm((rows, kpad, e), q.from(i0), &kt, sp, &mut p, sp, false);
        gemm((rows, kpad, ev), g.from(i0), &vt, sp, &mut ds, sp, false);
        // The probabilities: scores less the log-sum-exp, then one `exp` over the tile (-inf
        // past the visible keys and in rows that see none: exp gives 0).
        for r in 0..rows {
            let i = i0 + r;
            let pr = &mut p[r * sp..(r + 1) * sp];
            if lse[i] == F::NEG_INF {
                pr.iter_mut().for_each(|x| *x = F::NEG_INF);
                continue;
            }
            dims.finish_scores(mask, i, &mut pr[..keys]);
            pr[..keys].iter_mut().for_each(|x| *x = *x - lse[i]);
            pr[keys..].iter_mut().for_each(|x| *x = F::NEG_INF);
        }
        F::exp_all(&mut p[..rows * sp]);
        for r in 0..rows {
            let i = i0 + r;
            let (pr, dr) = (
                &mut p[r * sp..r * sp + kpad],
                &mut ds[r * sp..r * sp + kpad],
            );
            if lse[i] == F::NEG_INF {
                dr.iter_mut().for_each(|x| *x = F::ZERO);
                continue;
            }
            // ds_j = p_j (dp_j - g_i . out_i + dlse_i) · scale: the softmax's backward plus
            // the log-sum-exp's (whose derivative by s_j is p_j).
            let delta = g
                .row(i, ev)
                .iter()
                .zip(out.row(i, ev))
                .fold(F::ZERO, |a, (&x, &y)| x.fma(y, a))
                - glse[i];
            let seen = dims.visible(i);
            match &dims.dropout {
                None => {
                    for (d, &pj) in dr[..seen].iter_mut().zip(pr.iter()) {
                        *d = pj * (*d - delta) * dims.scale;
                    }
                }
                Some(drop) => {
                    // With dropout the product gave dP̃ (of the dropped probabilities P̃):
                    // dP = dP̃ ∘ keep / (1 - p), and P becomes P̃ for dV = P̃ᵀ dO. delta is
                    // unchanged: Σ_j p_j dp_j = Σ_j p̃_j dp̃_j = g_i . out_i.
                    let n = dims.counter(i);
                    for (j, (d, pj)) in dr[..seen].iter_mut().zip(pr.iter_mut()).enumerate() {
                        let keep = drop.keep(n + j as u64);
                        let dp = if keep { *d * drop.inv_keep } else { F::ZERO };
                        *d = *pj * (dp - delta) * dims.scale;
                        *pj = if keep { *pj * drop.inv_keep } else { F::ZERO };
                    }
                }
            }
            dr[seen..].iter_mut().for_each(|x| *x = F::ZERO);
        }
        let da = Mat {
            data: &ds,
            rs: sp,
            cs: 1,
        };
        gemm((rows, ep, keys), da, &kp, ep, &mut dqb, ep, false);
        for r in 0..rows {
            let i = i0 + r;
            dq[i * e..(i + 1) * e].copy_from_slice(&dqb[r * ep..r * ep + e]);
        }
        let pt = Mat {
            data: &p,
            rs: 1,
            cs: sp,
        };
        gemm(
            (keys, evp, rows),
            pt,
            &gp[i0 * evp..],
            evp,
            &mut dvp,
            evp,
            true,
        );
        let dst = Mat {
            data: &ds,
            rs: 1,
            cs: sp,
        };
        gemm(
            (keys, ep, rows),
            dst,
            &qp[i0 * ep..],
            ep,
            &mut dkp,
            ep,
            true,
        );
    }
    for j in 0..s {
        dk[j * e..(j + 1) * e].copy_from_slice(&dkp[j * ep..j * ep + e]);
        dv[j * ev..(j + 1) * ev].copy_from_slice(&dvp[j * evp..j * evp + ev]);
    }
}
