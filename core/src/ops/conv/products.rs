//! The convolution's matrix products over a batch: the forward, the input gradient and the
//! weight gradient, each an im2col (or col2im) layout change around one `gemm` call per
//! *batch* of images.
//!
//! The batch is cut into one contiguous chunk of images per pool thread ([`Split`]); inside a
//! chunk, images can be taken a few at a time so that one product covers at least
//! `TP_CONV_COLS` output positions (default [`TARGET_COLS`]: one image a product, the
//! fastest measured): their im2col matrices sit side by side
//! (`[C/g * kH * kW, images * OH * OW]`), and the product packs the weight once for all of
//! them. At small spatial sizes (ResNet-18's 14x14 layers: 196 positions an image) a per-image
//! product is thin and repacks the `[256, 2304]` weight for every image; the batched product
//! does not. The output and gradient blocks of several images are not one strided matrix
//! (`[N, O, L]` puts each image's channels between them), so a batched product writes to a
//! scratch `[O/g, images * L]` matrix that is scattered into place (with the bias) and reads
//! gradients gathered the same way; those copies cost `1 / (C/g * kH * kW)` of the product.

use std::ops::Range;

use rayon::prelude::*;

use super::geometry::Geometry;
use super::im2col::{Real, col2im, im2col};
use crate::parallel;

/// Below this many multiply-adds a call runs on the calling thread.
const PAR_MIN_FLOPS: usize = 1 << 18;

/// Output positions one product aims to cover (images are added until it does): 1, so one
/// image a product. Batching images into wider products (`TP_CONV_COLS=1024` and others) was
/// measured slower at both ResNet-18 shapes (`docs/PERFORMANCE.md`, "Convolution": the wider
/// column matrix leaves the cache before the product reads it, and the weight repacking it
/// saves is a few percent of a product with 256 output rows); the knob stays for re-measuring.
const TARGET_COLS: usize = 1;

/// `dst (+)= lhs · rhs` for row-major strided matrices (`(pointer, row stride, col stride)`).
///
/// # Safety
/// Every addressed element lies in live memory of `F`; `dst` overlaps neither operand.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn product<F: Real>(
    (m, n, k): (usize, usize, usize),
    dst: (*mut F, isize, isize),
    lhs: (*const F, isize, isize),
    rhs: (*const F, isize, isize),
    accumulate: bool,
    par: gemm::Parallelism,
) {
    // SAFETY: forwarded contract; gemm takes column strides first. dst = alpha * dst + beta *
    // lhs * rhs, with alpha read only when `accumulate`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2,
            dst.1,
            accumulate,
            lhs.0,
            lhs.2,
            lhs.1,
            rhs.0,
            rhs.2,
            rhs.1,
            F::from_f64(1.0),
            F::from_f64(1.0),
            false,
            false,
            false,
            par,
        )
    }
}

/// A raw base pointer shared by chunk tasks, each writing its own disjoint block.
#[derive(Clone, Copy)]
pub(super) struct Base<F>(pub *mut F);
// SAFETY: tasks write disjoint blocks (see each use).
unsafe impl<F> Send for Base<F> {}
// SAFETY: as above.
unsafe impl<F> Sync for Base<F> {}

impl<F> Base<F> {
    /// The pointer `at` elements past the base (a method, so closures capture the `Send`
    /// wrapper rather than its raw field).
    pub(super) fn at(self, at: usize) -> *mut F {
        self.0.wrapping_add(at)
    }

    /// The `len` elements from `at` as a slice.
    ///
    /// # Safety
    /// They are live, and no other task reads or writes them while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice<'a>(self, at: usize, len: usize) -> &'a mut [F] {
        // SAFETY: forwarded contract.
        unsafe { std::slice::from_raw_parts_mut(self.at(at), len) }
    }
}

/// How a batch spreads over the pool: `chunks` contiguous image ranges (one task each), each
/// product over at most `batch` images, and the parallelism inside each product.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Split {
    pub chunks: usize,
    pub batch: usize,
    pub par: gemm::Parallelism,
}

impl Split {
    /// One chunk per thread when there are at least as many images as threads; fewer images
    /// than threads run in turn with each product parallel; small calls stay on the calling
    /// thread.
    pub(crate) fn new(g: &Geometry) -> Split {
        let threads = parallel::num_threads();
        let flops = g.n * g.o * g.k() * g.l();
        let (chunks, par) = if threads < 2 || flops < PAR_MIN_FLOPS {
            (1, gemm::Parallelism::None)
        } else if g.n >= threads {
            (threads, gemm::Parallelism::None)
        } else {
            (1, gemm::Parallelism::Rayon(threads))
        };
        let target = std::env::var("TP_CONV_COLS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(TARGET_COLS);
        let batch = target.div_ceil(g.l().max(1)).clamp(1, g.n.max(1));
        Split { chunks, batch, par }
    }

    /// Chunk `c`'s images.
    pub(crate) fn chunk(&self, n: usize, c: usize) -> Range<usize> {
        c * n / self.chunks..(c + 1) * n / self.chunks
    }

    /// `f` over every chunk: in parallel on the pool when there are several, else on the
    /// calling thread (inside the pool when the products are parallel); the first error.
    pub(crate) fn for_chunks<E: Send>(
        &self,
        n: usize,
        f: impl Fn(Range<usize>) -> Result<(), E> + Send + Sync,
    ) -> Result<(), E> {
        if self.chunks > 1 {
            parallel::pool().install(|| {
                (0..self.chunks)
                    .into_par_iter()
                    .try_for_each(|c| f(self.chunk(n, c)))
            })
        } else if matches!(self.par, gemm::Parallelism::None) {
            f(0..n)
        } else {
            parallel::pool().install(|| f(0..n))
        }
    }

    /// The sub-batches of `images`, at most `batch` images each.
    fn batches(&self, images: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let b = self.batch.max(1);
        images
            .clone()
            .step_by(b)
            .map(move |lo| lo..(lo + b).min(images.end))
    }
}

/// Copies `wide` (`[O/g, images * L]`) into group `grp`'s channel rows of the first
/// `images` images of `nl` (`[images, O, L]`), adding `bias` per channel if given: the
/// adjoint layout change of [`gather`].
fn scatter<F: Real>(
    g: &Geometry,
    images: usize,
    grp: usize,
    wide: &[F],
    nl: &mut [F],
    bias: Option<&[F]>,
) {
    let (l, og) = (g.l(), g.og());
    let ld = images * l;
    for b in 0..images {
        for r in 0..og {
            let at = (b * g.o + grp * og + r) * l;
            let src = &wide[r * ld + b * l..r * ld + b * l + l];
            let dst = &mut nl[at..at + l];
            match bias {
                None => dst.copy_from_slice(src),
                Some(bias) => {
                    let v = bias[grp * og + r];
                    for (d, &x) in dst.iter_mut().zip(src) {
                        *d = x + v;
                    }
                }
            }
        }
    }
}

/// One chunk's scratch: the im2col matrix of a sub-batch (`[C/g * kH * kW, images * L]`,
/// images side by side) and, when a product covers several images, the `[O/g, images * L]`
/// block gathered from or scattered to `[images, O, L]` (empty otherwise). The forward and both
/// gradient products run their chunk through [`Scratch::each_block`].
struct Scratch<F> {
    col: Vec<F>,
    wide: Vec<F>,
}

impl<F: Real> Scratch<F> {
    /// Buffers for the largest sub-batch of `imgs` under `s`.
    fn new(g: &Geometry, s: &Split, imgs: &Range<usize>) -> Scratch<F> {
        let (k, l, og) = (g.k(), g.l(), g.og());
        let most = s.batch.min(imgs.len()).max(1);
        let wide = if most > 1 {
            vec![F::default(); og * most * l]
        } else {
            Vec::new()
        };
        Scratch {
            col: vec![F::default(); k * most * l],
            wide,
        }
    }

    /// `step(scratch, sub, grp)` for each sub-batch `sub` of `imgs` (at most `s.batch` images)
    /// and each group `grp`, in that order, with one scratch for the whole chunk: the loop
    /// the forward and both gradient products share.
    fn each_block(
        g: &Geometry,
        s: &Split,
        imgs: Range<usize>,
        mut step: impl FnMut(&mut Scratch<F>, &Range<usize>, usize),
    ) {
        let mut sc = Scratch::new(g, s, &imgs);
        for sub in s.batches(imgs) {
            for grp in 0..g.groups {
                step(&mut sc, &sub, grp);
            }
        }
    }

    /// im2col of group `grp` of images `sub` of `xs` (`[N, C, H, W]`) into `col`, side by side.
    fn im2col(&mut self, g: &Geometry, xs: &[F], sub: &Range<usize>, grp: usize) {
        let (img, plane) = (g.c * g.h * g.w, g.cg() * g.h * g.w);
        let ld = sub.len() * g.l();
        for (b, i) in sub.clone().enumerate() {
            let at = i * img + grp * plane;
            im2col(g, &xs[at..at + plane], &mut self.col[b * g.l()..], ld);
        }
    }

    /// Group `grp`'s gradient rows of images `sub` of `gos` (`[N, O, L]`) as one
    /// `[O/g, images * L]` matrix (row stride `images * L`): in place for one image, else
    /// gathered into `wide`.
    fn grad_rows(&mut self, g: &Geometry, gos: &[F], sub: &Range<usize>, grp: usize) -> *const F {
        let (l, og) = (g.l(), g.og());
        if sub.len() == 1 {
            gos[(sub.start * g.o + grp * og) * l..].as_ptr()
        } else {
            let nl = &gos[sub.start * g.o * l..sub.end * g.o * l];
            gather(g, sub.len(), grp, nl, &mut self.wide);
            self.wide.as_ptr()
        }
    }
}

/// The forward of images `imgs` into `out` (`[N, O, L]`, the whole output's base): per
/// sub-batch and group, im2col side by side, one product, scattered into place with the bias.
///
/// # Safety
/// `out` addresses a live `[N, O, L]` buffer of which this call alone writes images `imgs`.
pub(crate) unsafe fn forward_images<F: Real>(
    g: &Geometry,
    s: &Split,
    (xs, ws, bias): (&[F], &[F], Option<&[F]>),
    out: Base<F>,
    imgs: Range<usize>,
) {
    let (k, l, og) = (g.k(), g.l(), g.og());
    Scratch::each_block(g, s, imgs, |sc, sub, grp| {
        let ld = sub.len() * l;
        sc.im2col(g, xs, sub, grp);
        let direct = sub.len() == 1;
        let dst = if direct {
            out.at((sub.start * g.o + grp * og) * l)
        } else {
            sc.wide.as_mut_ptr()
        };
        // SAFETY: `dst` is this call's own block of `out` (one image, one group) or its
        // own scratch; the weight block and `col` are live and read-only here.
        unsafe {
            product(
                (og, ld, k),
                (dst, ld as isize, 1),
                (ws[grp * og * k..].as_ptr(), k as isize, 1),
                (sc.col.as_ptr(), ld as isize, 1),
                false,
                s.par,
            );
        }
        // SAFETY: images `sub` of `out` are this call's to write.
        let nl = unsafe { out.slice(sub.start * g.o * l, sub.len() * g.o * l) };
        if direct {
            if let Some(bias) = bias {
                let block = &mut nl[grp * og * l..(grp + 1) * og * l];
                for (row, &v) in block.chunks_mut(l).zip(&bias[grp * og..]) {
                    row.iter_mut().for_each(|x| *x += v);
                }
            }
        } else {
            scatter(g, sub.len(), grp, &sc.wide, nl, bias);
        }
    });
}

/// `grad_input[i, grp] = col2im(W_grp^T · grad[i, grp])` over images `imgs` into `gi`
/// (`[N, C, H, W]`, the whole gradient's base), several images per product.
///
/// # Safety
/// `gi` addresses a live `[N, C, H, W]` buffer of which this call alone writes images `imgs`.
pub(crate) unsafe fn grad_input_images<F: Real>(
    g: &Geometry,
    s: &Split,
    (gos, ws): (&[F], &[F]),
    gi: Base<F>,
    imgs: Range<usize>,
) {
    let (k, l, og, cg) = (g.k(), g.l(), g.og(), g.cg());
    let (img, plane) = (g.c * g.h * g.w, cg * g.h * g.w);
    Scratch::each_block(g, s, imgs, |sc, sub, grp| {
        let ld = sub.len() * l;
        // SAFETY: images `sub` of `gi` are this call's to write (one slice alive at a time).
        let dst = unsafe { gi.slice(sub.start * img, sub.len() * img) };
        if grp == 0 {
            dst.fill(F::default());
        }
        let rhs = sc.grad_rows(g, gos, sub, grp);
        // SAFETY: `col` is this call's buffer; the weight block (read transposed: row
        // stride 1, column stride k) and `rhs` are live and read-only.
        unsafe {
            product(
                (k, ld, og),
                (sc.col.as_mut_ptr(), ld as isize, 1),
                (ws[grp * og * k..].as_ptr(), 1, k as isize),
                (rhs, ld as isize, 1),
                false,
                s.par,
            );
        }
        for b in 0..sub.len() {
            let at = b * img + grp * plane;
            col2im(g, &sc.col[b * l..], &mut dst[at..at + plane], ld);
        }
    });
}

/// Copies group `grp`'s channel rows of the first `images` images of `nl`
/// (`[images, O, L]`) into `wide` (`[O/g, images * L]`).
fn gather<F: Real>(g: &Geometry, images: usize, grp: usize, nl: &[F], wide: &mut [F]) {
    let (l, og) = (g.l(), g.og());
    let ld = images * l;
    for b in 0..images {
        for r in 0..og {
            let at = (b * g.o + grp * og + r) * l;
            wide[r * ld + b * l..r * ld + b * l + l].copy_from_slice(&nl[at..at + l]);
        }
    }
}

/// Adds `sum over images imgs of grad[i, grp] · im2col(x[i, grp])^T` onto `acc` (`[O, K]`),
/// several images per product.
pub(crate) fn grad_weight_images<F: Real>(
    g: &Geometry,
    s: &Split,
    (gos, xs): (&[F], &[F]),
    acc: &mut [F],
    imgs: Range<usize>,
) {
    let (k, l, og) = (g.k(), g.l(), g.og());
    Scratch::each_block(g, s, imgs, |sc, sub, grp| {
        let ld = sub.len() * l;
        sc.im2col(g, xs, sub, grp);
        let lhs = sc.grad_rows(g, gos, sub, grp);
        // SAFETY: `acc` is the caller's own `o x k` buffer; `lhs` and `col` (read
        // transposed: row stride 1, column stride ld) are live and read-only.
        unsafe {
            product(
                (og, k, ld),
                (acc[grp * og * k..].as_mut_ptr(), k as isize, 1),
                (lhs, ld as isize, 1),
                (sc.col.as_ptr(), 1, ld as isize),
                true,
                s.par,
            );
        }
    });
}

/// `dst[c] = sum over images and positions of src[i, c, :]`, for `src` `[n, c, l]`
/// (accumulated in f64: the bias gradient).
pub(crate) fn channel_sums<F: Real>(src: &[F], (n, c, l): (usize, usize, usize), dst: &mut [F]) {
    for (ch, v) in dst.iter_mut().enumerate().take(c) {
        let mut acc = 0f64;
        for i in 0..n {
            let at = (i * c + ch) * l;
            acc += src[at..at + l].iter().map(|v| v.to_f64()).sum::<f64>();
        }
        *v = F::from_f64(acc);
    }
}
