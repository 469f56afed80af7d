//! The per-head loops of fused attention, on contiguous `f32`/`f64` rows.
//!
//! One head is a query block `q` (`L x E`), keys `k` (`S x E`) and values `v` (`S x Ev`). The
//! forward visits one query row at a time: its scores against every visible key (a row of `S`
//! values, never the `L x S` matrix), the row's maximum, `exp(s - max)` in place, the weighted
//! sum of value rows and the row's log-sum-exp. The backward recomputes each row's
//! probabilities from the saved log-sum-exp (flash-attention's schedule, one row at a time
//! instead of a tile: rows are short at the sizes CPUs train), and accumulates the key and value
//! gradients of the head as it goes. Keys are transposed once per head so the score loop runs
//! along contiguous keys.
//!
//! Rows that see no key (every score masked) produce a zero output row, a log-sum-exp of
//! `-inf` and zero gradients, as PyTorch 2.15's fused kernels do.

use tensorplay_math::bulk::{self, RowScalarOp, ScalarFn};

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
    /// `row[j] = exp(row[j] - m)` for every `j`.
    fn sub_exp(row: &mut [Self], m: Self);
}

/// The eager bulk kernel for `exp(x - s)`, when the host has one.
fn sub_exp_kernel() -> Option<ScalarFn> {
    static K: std::sync::OnceLock<Option<ScalarFn>> = std::sync::OnceLock::new();
    *K.get_or_init(|| bulk::scalar_op_at(RowScalarOp::SubExp, bulk::eager_level()?))
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
    fn sub_exp(row: &mut [f32], m: f32) {
        match sub_exp_kernel() {
            // SAFETY: in place over `row.len()` elements of one live slice.
            Some(k) => unsafe { k(row.as_ptr(), m, row.as_mut_ptr(), row.len()) },
            None => row.iter_mut().for_each(|x| *x = (*x - m).exp()),
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
    fn sub_exp(row: &mut [f64], m: f64) {
        row.iter_mut().for_each(|x| *x = (*x - m).exp());
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

    /// `s[j] = scale * q_i . k_j` for the visible keys of row `i`, then the mask. Returns the
    /// number of leading entries of `s` in use.
    #[inline(always)]
    fn scores(&self, q_row: &[F], kt: &[F], mask: Mask<F>, i: usize, s: &mut [F]) -> usize {
        let n = self.visible(i);
        let s = &mut s[..n];
        s.iter_mut().for_each(|x| *x = F::ZERO);
        for (d, &a) in q_row.iter().enumerate() {
            let col = &kt[d * self.s..d * self.s + n];
            for (x, &b) in s.iter_mut().zip(col) {
                *x += a * b;
            }
        }
        let scale = self.scale;
        s.iter_mut().for_each(|x| *x = *x * scale);
        match mask {
            Mask::None => {}
            Mask::Bool(m, rs, cs, base) => {
                for (j, x) in s.iter_mut().enumerate() {
                    if !m[at(base, rs, cs, i, j)] {
                        *x = F::NEG_INF;
                    }
                }
            }
            Mask::Float(m, rs, cs, base) => {
                for (j, x) in s.iter_mut().enumerate() {
                    *x += m[at(base, rs, cs, i, j)];
                }
            }
        }
        n
    }
}

/// Element index of mask entry `(i, j)`.
#[inline(always)]
fn at(base: usize, rs: isize, cs: isize, i: usize, j: usize) -> usize {
    (base as isize + i as isize * rs + j as isize * cs) as usize
}

/// `dst[d * rows + r] = src[r * cols + d]`: the `cols x rows` transpose of a `rows x cols` block.
#[inline(always)]
fn transpose<F: Real>(src: &[F], rows: usize, cols: usize, dst: &mut [F]) {
    for r in 0..rows {
        for (d, &x) in src[r * cols..(r + 1) * cols].iter().enumerate() {
            dst[d * rows + r] = x;
        }
    }
}

/// `acc += w * row`, elementwise.
#[inline(always)]
fn axpy<F: Real>(acc: &mut [F], w: F, row: &[F]) {
    for (a, &x) in acc.iter_mut().zip(row) {
        *a += w * x;
    }
}

#[inline(always)]
fn dot<F: Real>(a: &[F], b: &[F]) -> F {
    a.iter().zip(b).fold(F::ZERO, |acc, (&x, &y)| acc + x * y)
}

/// The forward of one head: `out` (`L x Ev`) and `lse` (`L`).
#[inline(always)]
pub(super) fn forward<F: Real>(
    dims: &Dims<F>,
    (q, k, v): (&[F], &[F], &[F]),
    mask: Mask<F>,
    out: &mut [F],
    lse: &mut [F],
) {
    let Dims { l, s, e, ev, .. } = *dims;
    let mut kt = vec![F::ZERO; e * s];
    transpose(k, s, e, &mut kt);
    let mut row = vec![F::ZERO; s];
    for i in 0..l {
        let n = dims.scores(&q[i * e..(i + 1) * e], &kt, mask, i, &mut row);
        let o = &mut out[i * ev..(i + 1) * ev];
        o.iter_mut().for_each(|x| *x = F::ZERO);
        let m = row[..n]
            .iter()
            .fold(F::NEG_INF, |m, &x| if x > m { x } else { m });
        if n == 0 || m == F::NEG_INF {
            lse[i] = F::NEG_INF;
            continue;
        }
        F::sub_exp(&mut row[..n], m);
        let mut total = F::ZERO;
        for (j, &p) in row[..n].iter().enumerate() {
            total += p;
            axpy(o, p, &v[j * ev..(j + 1) * ev]);
        }
        let inv = F::of(1.0) / total;
        o.iter_mut().for_each(|x| *x = *x * inv);
        lse[i] = m + total.ln();
    }
}

/// The backward of one head: `dq` (`L x E`), `dk` (`S x E`) and `dv` (`S x Ev`), all
/// overwritten, from the output gradient `g`, the forward's `out` and `lse`, and the gradient
/// `glse` of the log-sum-exp (zeros when it has none).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn backward<F: Real>(
    dims: &Dims<F>,
    (q, k, v): (&[F], &[F], &[F]),
    mask: Mask<F>,
    (out, lse, g, glse): (&[F], &[F], &[F], &[F]),
    dq: &mut [F],
    dk: &mut [F],
    dv: &mut [F],
) {
    let Dims { l, s, e, ev, .. } = *dims;
    let mut kt = vec![F::ZERO; e * s];
    transpose(k, s, e, &mut kt);
    let mut vt = vec![F::ZERO; ev * s];
    transpose(v, s, ev, &mut vt);
    let (mut p, mut dp) = (vec![F::ZERO; s], vec![F::ZERO; s]);
    dk.iter_mut().for_each(|x| *x = F::ZERO);
    dv.iter_mut().for_each(|x| *x = F::ZERO);
    for i in 0..l {
        let dq_i = &mut dq[i * e..(i + 1) * e];
        dq_i.iter_mut().for_each(|x| *x = F::ZERO);
        if lse[i] == F::NEG_INF {
            continue;
        }
        let q_i = &q[i * e..(i + 1) * e];
        let n = dims.scores(q_i, &kt, mask, i, &mut p);
        F::sub_exp(&mut p[..n], lse[i]);
        let g_i = &g[i * ev..(i + 1) * ev];
        // ds_j = p_j (dp_j - g_i . out_i + dlse_i): the softmax's backward plus the
        // log-sum-exp's (whose derivative by s_j is p_j).
        let delta = dot(g_i, &out[i * ev..(i + 1) * ev]) - glse[i];
        // dp[j] = g_i . v_j, along contiguous keys.
        let dp = &mut dp[..n];
        dp.iter_mut().for_each(|x| *x = F::ZERO);
        for (c, &a) in g_i.iter().enumerate() {
            for (x, &b) in dp.iter_mut().zip(&vt[c * s..c * s + n]) {
                *x += a * b;
            }
        }
        for j in 0..n {
            let pj = p[j];
            axpy(&mut dv[j * ev..(j + 1) * ev], pj, g_i);
            let ds = pj * (dp[j] - delta) * dims.scale;
            axpy(dq_i, ds, &k[j * e..(j + 1) * e]);
            axpy(&mut dk[j * e..(j + 1) * e], ds, q_i);
        }
    }
}
