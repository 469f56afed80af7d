//! A direct (no im2col) forward for stride-1, undilated, ungrouped convolutions, chosen over
//! the im2col forward when padding adds little work ([`chosen`]).
//!
//! The images are zero-padded into `[C, images, Hp, Wp]`; then for each kernel offset
//! `(ki, kj)` the input window is the padded buffer shifted by `ki * Wp + kj`, a plain strided
//! `[C, images * Hp * Wp]` matrix, so the convolution is `kH * kW` accumulated products
//! `W[:, :, ki, kj] · shifted` over padded positions (the positions past each row's `OW` and
//! past each image's `OH` are computed and dropped). No `[C * kH * kW, L]` matrix is built;
//! the price is `Hp * Wp / (OH * OW)` extra work and `kH * kW` passes over the output.

use std::ops::Range;

use super::geometry::Geometry;
use super::im2col::Real;
use super::products::{Base, Split, product};

/// Most padded positions per output position for which the direct forward is chosen.
///
/// Measured (`docs/PERFORMANCE.md`, "Convolution"): at ResNet-18's 56x56 layer (58x58 padded,
/// 1.07) the direct forward took 0.82–0.97 of the im2col forward's time; at its 14x14 layer
/// (16x16 padded, 1.31) 1.15–1.28 of it.
const MAX_PADDED_RATIO: f64 = 1.15;

/// Whether [`forward_direct_images`] computes `g`.
pub(crate) fn applies(g: &Geometry) -> bool {
    g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.groups == 1 && g.c > 0
}

/// Whether the forward of `g` runs here rather than through im2col: it [`applies`] and the
/// padded plane is at most [`MAX_PADDED_RATIO`] times the output plane. `TP_CONV_ALGO=im2col`
/// (or `=direct`) forces the choice (where the direct forward applies), for measuring.
pub(crate) fn chosen(g: &Geometry) -> bool {
    if !applies(g) || g.l() == 0 {
        return false;
    }
    match std::env::var("TP_CONV_ALGO").as_deref() {
        Ok("im2col") => false,
        Ok("direct") => true,
        _ => {
            let padded = (g.oh + g.kh - 1) * (g.ow + g.kw - 1);
            padded as f64 <= MAX_PADDED_RATIO * g.l() as f64
        }
    }
}

/// The forward of images `imgs` into `out` (`[N, O, L]`) by shifted products.
///
/// # Safety
/// `out` addresses a live `[N, O, L]` buffer of which this call alone writes images `imgs`;
/// [`applies`] holds for `g`.
pub(crate) unsafe fn forward_direct_images<F: Real>(
    g: &Geometry,
    s: &Split,
    (xs, ws, bias): (&[F], &[F], Option<&[F]>),
    out: Base<F>,
    imgs: Range<usize>,
) {
    let (hp, wp) = (g.oh + g.kh - 1, g.ow + g.kw - 1);
    let (pp, taps, l) = (hp * wp, g.kh * g.kw, g.l());
    for lo in imgs.clone().step_by(s.batch.max(1)) {
        let nb = (imgs.end - lo).min(s.batch.max(1));
        let ld = nb * pp;
        let mut xp = vec![F::default(); g.c * ld];
        for b in 0..nb {
            for c in 0..g.c {
                let src = &xs[((lo + b) * g.c + c) * g.h * g.w..][..g.h * g.w];
                for (y, row) in src.chunks(g.w).enumerate() {
                    let at = c * ld + b * pp + (y + g.pt) * wp + g.pl;
                    xp[at..at + g.w].copy_from_slice(row);
                }
            }
        }
        let cols = ld - ((g.kh - 1) * wp + g.kw - 1);
        let mut acc = vec![F::default(); g.o * ld];
        for tap in 0..taps {
            let shift = (tap / g.kw) * wp + tap % g.kw;
            // SAFETY: `acc` is this call's own; the weight tap (row stride C * taps, column
            // stride taps) and the shifted window (`cols` columns past `shift` stay inside
            // `xp`'s rows) are live and read-only.
            unsafe {
                product(
                    (g.o, cols, g.c),
                    (acc.as_mut_ptr(), ld as isize, 1),
                    (ws[tap..].as_ptr(), (g.c * taps) as isize, taps as isize),
                    (xp[shift..].as_ptr(), ld as isize, 1),
                    tap > 0,
                    s.par,
                );
            }
        }
        for b in 0..nb {
            for o in 0..g.o {
                let v = bias.map_or(F::default(), |bs| bs[o]);
                // SAFETY: image `lo + b`, channel `o` of `out` is this call's to write.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(out.at(((lo + b) * g.o + o) * l), l) };
                for (oy, row) in dst.chunks_mut(g.ow).enumerate() {
                    let src = &acc[o * ld + b * pp + oy * wp..][..g.ow];
                    for (d, &x) in row.iter_mut().zip(src) {
                        *d = x + v;
                    }
                }
            }
        }
    }
}
