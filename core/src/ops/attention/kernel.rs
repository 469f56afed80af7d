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
//! Products are accumulated with fused multiply-adds (`mul_add`) and row sums and dot products
//! over eight partial sums, in one order on every host.
//!
//! A thread's heads share one [`Workspace`] (transposes, tiles, padded copies), so a head
//! allocates nothing. Operands and gradients whose rows are whole lane chunks (width a multiple
//! of [`W`], as the usual head widths 16, 32, 64) are read and written where they lie; only
//! other widths go through padded copies.

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
/// along `k` with fused multiply-adds. The bounds are checked once here; the tiles index
/// without checks.
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
    assert!(
        n.is_multiple_of(W),
        "attention: product width {n} is not a multiple of {W}"
    );
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * ldc + n <= c.len(),
        "attention: product output out of bounds"
    );
    if k > 0 {
        assert!(
            (m - 1) * a.rs + (k - 1) * a.cs < a.data.len() && (k - 1) * ldb + n <= b.len(),
            "attention: product operand out of bounds"
        );
    }
    let (a, b, c) = (
        Operands {
            ptr: a.data.as_ptr(),
            rs: a.rs,
            cs: a.cs,
        },
        (b.as_ptr(), ldb),
        (c.as_mut_ptr(), ldc),
    );
    let mut i = 0;
    while i + R <= m {
        // SAFETY: rows `i..i + R` < `m`, columns < `n`, depth < `k`: inside the bounds
        // asserted above.
        unsafe { tile_rows::<F, R>(i, (n, k), a, b, c, accumulate) };
        i += R;
    }
    while i < m {
        // SAFETY: as above, for row `i` < `m`.
        unsafe { tile_rows::<F, 1>(i, (n, k), a, b, c, accumulate) };
        i += 1;
    }
}

/// [`Mat`] as a raw pointer, for the unchecked tiles.
#[derive(Clone, Copy)]
struct Operands<F> {
    ptr: *const F,
    rs: usize,
    cs: usize,
}

/// Rows `i..i + T` of [`gemm`]'s `C`, one `T x W` register tile per column chunk.
///
/// # Safety
/// Every element of `A` (rows `i..i + T`, depth `0..k`), of `B` (depth `0..k`, columns
/// `0..n`) and of `C` (rows `i..i + T`, columns `0..n`) lies inside its live allocation, and
/// `C` overlaps neither operand.
#[inline(always)]
unsafe fn tile_rows<F: Real, const T: usize>(
    i: usize,
    (n, k): (usize, usize),
    a: Operands<F>,
    (b, ldb): (*const F, usize),
    (c, ldc): (*mut F, usize),
    accumulate: bool,
) {
    for j in (0..n).step_by(W) {
        let mut acc = [[F::ZERO; W]; T];
        if accumulate {
            for (t, row) in acc.iter_mut().enumerate() {
                // SAFETY: row `i + t`, columns `j..j + W` of `C`: inside the contract's bounds.
                let src = unsafe { std::slice::from_raw_parts(c.add((i + t) * ldc + j), W) };
                row.copy_from_slice(src);
            }
        }
        for p in 0..k {
            // SAFETY: depth `p`, columns `j..j + W` of `B`: inside the contract's bounds.
            let bp = unsafe { &*(b.add(p * ldb + j) as *const [F; W]) };
            for (t, row) in acc.iter_mut().enumerate() {
                // SAFETY: element `(i + t, p)` of `A`: inside the contract's bounds.
                let x = unsafe { *a.ptr.add((i + t) * a.rs + p * a.cs) };
                for (y, &z) in row.iter_mut().zip(bp) {
                    *y = x.fma(z, *y);
                }
            }
        }
        for (t, row) in acc.iter().enumerate() {
            // SAFETY: row `i + t`, columns `j..j + W` of `C`, which no operand overlaps.
            let dst = unsafe { std::slice::from_raw_parts_mut(c.add((i + t) * ldc + j), W) };
            dst.copy_from_slice(row);
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

/// `a · b` over [`LANES`] partial sums of fused multiply-adds, combined as [`row_sum`] does.
#[inline(always)]
fn dot<F: Real>(a: &[F], b: &[F]) -> F {
    let mut acc = [F::ZERO; LANES];
    let (mut xs, mut ys) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (x, y) in (&mut xs).zip(&mut ys) {
        for ((s, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *s = x.fma(y, *s);
        }
    }
    for ((s, &x), &y) in acc.iter_mut().zip(xs.remainder()).zip(ys.remainder()) {
        *s = x.fma(y, *s);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Scratch of the head loops, reused by every head one thread runs: each buffer grows on first
/// use and every head overwrites what it reads (nothing is assumed zero between heads).
pub(super) struct Workspace<F> {
    /// Keys and values transposed (`E x S`, `Ev x S`).
    kt: Vec<F>,
    vt: Vec<F>,
    /// Padded copies of key, query and output-gradient rows whose width is not a multiple of
    /// [`W`] (wider rows are read where they lie).
    copies: [Vec<F>; 3],
    /// The key and value gradient accumulators, when their width is not a multiple of [`W`].
    acc: [Vec<F>; 2],
    /// A block's score (probability) tile and its gradient.
    tile: [Vec<F>; 2],
    /// A block's output (forward) or query-gradient (backward) rows, when their width is not
    /// a multiple of [`W`].
    rows: Vec<F>,
}

impl<F> Workspace<F> {
    pub(super) fn new() -> Workspace<F> {
        Workspace {
            kt: Vec::new(),
            vt: Vec::new(),
            copies: [Vec::new(), Vec::new(), Vec::new()],
            acc: [Vec::new(), Vec::new()],
            tile: [Vec::new(), Vec::new()],
            rows: Vec::new(),
        }
    }
}

/// The first `n` elements of `v`, grown with zeros when it is shorter (contents otherwise
/// left from earlier use).
#[inline(always)]
fn scratch<F: Real>(v: &mut Vec<F>, n: usize) -> &mut [F] {
    if v.len() < n {
        v.resize(n, F::ZERO);
    }
    &mut v[..n]
}

/// The `cols x rows` transpose of `src`'s first `rows` rows into `dst`, in rows of
/// `ld >= rows` elements (zero-padded). Groups of [`LANES`] source rows fill [`LANES`]
/// contiguous elements of each destination row at a time.
#[inline(always)]
fn transpose_into<F: Real>(src: Rows<F>, (rows, cols): (usize, usize), ld: usize, dst: &mut [F]) {
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
    for out in dst.chunks_exact_mut(ld).take(cols) {
        out[rows..].iter_mut().for_each(|x| *x = F::ZERO);
    }
}

/// `src`'s first `rows` rows of `cols` elements as a product's `B` operand and its row
/// stride: the rows where they lie when `cols` is a multiple of [`W`], else a copy in `buf`
/// with rows of `pad(cols)` elements (zero-padded).
#[inline(always)]
fn operand<'a, F: Real>(
    src: Rows<'a, F>,
    rows: usize,
    cols: usize,
    buf: &'a mut Vec<F>,
) -> (&'a [F], usize) {
    if cols.is_multiple_of(W) {
        return (src.data, src.rs);
    }
    let ld = pad(cols);
    let dst = scratch(buf, rows * ld);
    for (r, out) in dst.chunks_exact_mut(ld).enumerate() {
        out[..cols].copy_from_slice(src.row(r, cols));
        out[cols..].iter_mut().for_each(|x| *x = F::ZERO);
    }
    (dst, ld)
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
    ws: &mut Workspace<F>,
) {
    let Dims { s, e, ev, .. } = *dims;
    let (sp, evp) = (pad(s), pad(ev));
    let Workspace {
        kt,
        copies: [vbuf, ..],
        tile: [sc, ..],
        rows: obuf,
        ..
    } = ws;
    let kt = scratch(kt, e * sp);
    transpose_into(k, (s, e), sp, kt);
    let (vb, ldv) = operand(v, s, ev, vbuf);
    let sc = scratch(sc, ROWS * sp);
    let (mut totals, mut maxes) = ([F::ZERO; ROWS], [F::ZERO; ROWS]);
    for (i0, rows, keys) in dims.blocks() {
        // The block's tile: `rows x kp`, rows `kp` apart.
        let kp = pad(keys);
        gemm((rows, kp, e), q.from(i0), kt, sp, sc, kp, false);
        // Per row: scale, mask, subtract the maximum; then one `exp` over the block's tile
        // (entries past the visible keys, and rows that see none, are -inf: exp gives 0).
        for r in 0..rows {
            let row = &mut sc[r * kp..(r + 1) * kp];
            dims.finish_scores(mask, i0 + r, &mut row[..keys]);
            let m = row_max(&row[..keys]);
            maxes[r] = m;
            let seen = if m == F::NEG_INF { 0 } else { keys };
            row[..seen].iter_mut().for_each(|x| *x = *x - m);
            row[seen..].iter_mut().for_each(|x| *x = F::NEG_INF);
        }
        F::exp_all(&mut sc[..rows * kp]);
        for r in 0..rows {
            let i = i0 + r;
            if maxes[r] == F::NEG_INF {
                lse[i] = F::NEG_INF;
                continue;
            }
            totals[r] = row_sum(&sc[r * kp..r * kp + keys]);
            lse[i] = maxes[r] + totals[r].ln();
            if let Some(d) = &dims.dropout {
                // The log-sum-exp and the totals are the undropped ones; the kept
                // probabilities are scaled by 1 / (1 - p).
                let n = dims.counter(i);
                for (j, x) in sc[r * kp..r * kp + keys].iter_mut().enumerate() {
                    *x = if d.keep(n + j as u64) {
                        *x * d.inv_keep
                    } else {
                        F::ZERO
                    };
                }
            }
        }
        let pa = Mat {
            data: sc,
            rs: kp,
            cs: 1,
        };
        // `P_b V` straight into the output rows when they are whole lane chunks.
        let direct = ev.is_multiple_of(W);
        if direct {
            gemm(
                (rows, evp, keys),
                pa,
                vb,
                ldv,
                &mut out[i0 * ev..],
                ev,
                false,
            );
        } else {
            let ob = scratch(obuf, ROWS * evp);
            gemm((rows, evp, keys), pa, vb, ldv, ob, evp, false);
        }
        for r in 0..rows {
            let i = i0 + r;
            let o = &mut out[i * ev..(i + 1) * ev];
            if lse[i] == F::NEG_INF {
                o.iter_mut().for_each(|x| *x = F::ZERO);
                continue;
            }
            let inv = F::of(1.0) / totals[r];
            if direct {
                o.iter_mut().for_each(|x| *x = *x * inv);
            } else {
                for (x, &y) in o.iter_mut().zip(&obuf[r * evp..r * evp + ev]) {
                    *x = y * inv;
                }
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
    saved: (Rows<F>, &[F], Rows<F>, &[F]),
    dq: &mut [F],
    dk: &mut [F],
    dv: &mut [F],
    ws: &mut Workspace<F>,
) {
    let Dims { s, e, ev, .. } = *dims;
    let (sp, ep, evp) = (pad(s), pad(e), pad(ev));
    let g = saved.2;
    let Workspace {
        kt,
        vt,
        copies: [kbuf, qbuf, gbuf],
        acc: [dkbuf, dvbuf],
        tile: [pbuf, dsbuf],
        rows: dqbuf,
    } = ws;
    let kt = scratch(kt, e * sp);
    transpose_into(k, (s, e), sp, kt);
    let vt = scratch(vt, ev * sp);
    transpose_into(v, (s, ev), sp, vt);
    let (kb, ldk) = operand(k, s, e, kbuf);
    let (qb, ldq) = operand(q, dims.l, e, qbuf);
    let (gb, ldg) = operand(g, dims.l, ev, gbuf);
    // The key and value gradients accumulate over the query blocks: in place when their rows
    // are whole lane chunks.
    let (dka, lddk) = if e.is_multiple_of(W) {
        (&mut *dk, e)
    } else {
        (scratch(dkbuf, s * ep), ep)
    };
    let (dva, lddv) = if ev.is_multiple_of(W) {
        (&mut *dv, ev)
    } else {
        (scratch(dvbuf, s * evp), evp)
    };
    dka.iter_mut().for_each(|x| *x = F::ZERO);
    dva.iter_mut().for_each(|x| *x = F::ZERO);
    let (pbuf, dsbuf) = (scratch(pbuf, ROWS * sp), scratch(dsbuf, ROWS * sp));
    for (i0, rows, keys) in dims.blocks() {
        // The block's tiles: `rows x kp`, rows `kp` apart.
        let kp = pad(keys);
        let (p, ds) = (&mut pbuf[..rows * kp], &mut dsbuf[..rows * kp]);
        gemm((rows, kp, e), q.from(i0), kt, sp, p, kp, false);
        gemm((rows, kp, ev), g.from(i0), vt, sp, ds, kp, false);
        dims.probabilities(mask, saved.1, (i0, keys), p);
        dims.score_gradients(saved, (i0, kp), (p, ds));
        let da = Mat {
            data: ds,
            rs: kp,
            cs: 1,
        };
        if e.is_multiple_of(W) {
            gemm((rows, ep, keys), da, kb, ldk, &mut dq[i0 * e..], e, false);
        } else {
            let dqb = scratch(dqbuf, ROWS * ep);
            gemm((rows, ep, keys), da, kb, ldk, dqb, ep, false);
            for r in 0..rows {
                let i = i0 + r;
                dq[i * e..(i + 1) * e].copy_from_slice(&dqb[r * ep..r * ep + e]);
            }
        }
        let pt = Mat {
            data: p,
            rs: 1,
            cs: kp,
        };
        gemm((keys, evp, rows), pt, &gb[i0 * ldg..], ldg, dva, lddv, true);
        let dst = Mat {
            data: ds,
            rs: 1,
            cs: kp,
        };
        gemm((keys, ep, rows), dst, &qb[i0 * ldq..], ldq, dka, lddk, true);
    }
    if !e.is_multiple_of(W) {
        for j in 0..s {
            dk[j * e..(j + 1) * e].copy_from_slice(&dkbuf[j * ep..j * ep + e]);
        }
    }
    if !ev.is_multiple_of(W) {
        for j in 0..s {
            dv[j * ev..(j + 1) * ev].copy_from_slice(&dvbuf[j * evp..j * evp + ev]);
        }
    }
}

impl<F: Real> Dims<F> {
    /// A block's probabilities in its `rows x kp` tile `p` (which holds the raw scores):
    /// scaled, masked, less the log-sum-exp, then one `exp` over the tile (-inf past the
    /// visible keys and in rows that see none: exp gives 0).
    #[inline(always)]
    fn probabilities(&self, mask: Mask<F>, lse: &[F], (i0, keys): (usize, usize), p: &mut [F]) {
        let kp = pad(keys);
        for (r, pr) in p.chunks_exact_mut(kp).enumerate() {
            let i = i0 + r;
            if lse[i] == F::NEG_INF {
                pr.iter_mut().for_each(|x| *x = F::NEG_INF);
                continue;
            }
            self.finish_scores(mask, i, &mut pr[..keys]);
            pr[..keys].iter_mut().for_each(|x| *x = *x - lse[i]);
            pr[keys..].iter_mut().for_each(|x| *x = F::NEG_INF);
        }
        F::exp_all(p);
    }

    /// A block's score gradients in `ds` (which holds `dO_b Vᵀ`), from its probabilities `p`
    /// (dropped in place when the call has dropout, for `dV = P̃ᵀ dO`); both tiles have rows
    /// `kp` apart.
    #[inline(always)]
    fn score_gradients(
        &self,
        (out, lse, g, glse): (Rows<F>, &[F], Rows<F>, &[F]),
        (i0, kp): (usize, usize),
        (p, ds): (&mut [F], &mut [F]),
    ) {
        let rows = p.chunks_exact_mut(kp).zip(ds.chunks_exact_mut(kp));
        for (r, (pr, dr)) in rows.enumerate() {
            let i = i0 + r;
            if lse[i] == F::NEG_INF {
                dr.iter_mut().for_each(|x| *x = F::ZERO);
                continue;
            }
            // ds_j = p_j (dp_j - g_i . out_i + dlse_i) · scale: the softmax's backward plus
            // the log-sum-exp's (whose derivative by s_j is p_j).
            let delta = dot(g.row(i, self.ev), out.row(i, self.ev)) - glse[i];
            let seen = self.visible(i);
            match &self.dropout {
                None => {
                    for (d, &pj) in dr[..seen].iter_mut().zip(pr.iter()) {
                        *d = pj * (*d - delta) * self.scale;
                    }
                }
                Some(drop) => {
                    // With dropout the product gave dP̃ (of the dropped probabilities P̃):
                    // dP = dP̃ ∘ keep / (1 - p), and P becomes P̃ for dV = P̃ᵀ dO. delta is
                    // unchanged: Σ_j p_j dp_j = Σ_j p̃_j dp̃_j = g_i . out_i.
                    let n = self.counter(i);
                    for (j, (d, pj)) in dr[..seen].iter_mut().zip(pr.iter_mut()).enumerate() {
                        let keep = drop.keep(n + j as u64);
                        let dp = if keep { *d * drop.inv_keep } else { F::ZERO };
                        *d = *pj * (dp - delta) * self.scale;
                        *pj = if keep { *pj * drop.inv_keep } else { F::ZERO };
                    }
                }
            }
            dr[seen..].iter_mut().for_each(|x| *x = F::ZERO);
        }
    }
}
