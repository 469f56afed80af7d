//! The layout changes a convolution's products need: `im2col` gathers, for one image and one
//! group, every input value each output position reads into a `[C_g * kH * kW, OH * OW]`
//! matrix (zeros where the window overhangs the padding); `col2im` is its adjoint, adding such
//! a matrix back onto an image (overlapping windows accumulate). Both take the matrix's row
//! stride, so the columns of several images can sit side by side in one wider matrix (one
//! product over a batch of images).

use super::geometry::Geometry;

/// The float types the convolution kernels compute in.
pub(crate) trait Real:
    crate::element::Element + std::ops::Add<Output = Self> + std::ops::AddAssign + Default
{
}
impl Real for f32 {}
impl Real for f64 {}

/// For kernel offset `k` (dilated), the output positions along one axis whose input index
/// `o * stride - pad + k * dilation` lies inside `[0, size)`: the half-open range of `o`.
fn valid_range(out: usize, size: usize, stride: usize, pad: usize, off: usize) -> (usize, usize) {
    // o * stride + off >= pad  and  o * stride + off < pad + size
    let lo = pad.saturating_sub(off).div_ceil(stride);
    let hi = if pad + size > off {
        (pad + size - off).div_ceil(stride)
    } else {
        0
    };
    (lo.min(out), hi.min(out).max(lo.min(out)))
}

/// Fills `col` (`[cg * kh * kw, oh * ow]`, rows `ld` apart) from `img` (`[cg, h, w]`,
/// contiguous).
pub(crate) fn im2col<F: Real>(g: &Geometry, img: &[F], col: &mut [F], ld: usize) {
    let l = g.oh * g.ow;
    let mut row = 0;
    for c in 0..g.cg() {
        let plane = &img[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            let (ylo, yhi) = valid_range(g.oh, g.h, g.sh, g.pt, ki * g.dh);
            for kj in 0..g.kw {
                let (xlo, xhi) = valid_range(g.ow, g.w, g.sw, g.pl, kj * g.dw);
                let dst = &mut col[row * ld..row * ld + l];
                row += 1;
                dst[..ylo * g.ow].fill(F::default());
                dst[yhi * g.ow..].fill(F::default());
                for oy in ylo..yhi {
                    let iy = oy * g.sh + ki * g.dh - g.pt;
                    let src = &plane[iy * g.w..(iy + 1) * g.w];
                    let d = &mut dst[oy * g.ow..(oy + 1) * g.ow];
                    d[..xlo].fill(F::default());
                    d[xhi..].fill(F::default());
                    if xlo >= xhi {
                        continue;
                    }
                    let ix0 = xlo * g.sw + kj * g.dw - g.pl;
                    if g.sw == 1 {
                        d[xlo..xhi].copy_from_slice(&src[ix0..ix0 + (xhi - xlo)]);
                    } else {
                        for (i, v) in d[xlo..xhi].iter_mut().enumerate() {
                            *v = src[ix0 + i * g.sw];
                        }
                    }
                }
            }
        }
    }
}

/// Adds `col` (`[cg * kh * kw, oh * ow]`, rows `ld` apart) onto `img` (`[cg, h, w]`): the
/// adjoint of [`im2col`].
pub(crate) fn col2im<F: Real>(g: &Geometry, col: &[F], img: &mut [F], ld: usize) {
    let l = g.oh * g.ow;
    let mut row = 0;
    for c in 0..g.cg() {
        let plane = &mut img[c * g.h * g.w..(c + 1) * g.h * g.w];
        for ki in 0..g.kh {
            let (ylo, yhi) = valid_range(g.oh, g.h, g.sh, g.pt, ki * g.dh);
            for kj in 0..g.kw {
                let (xlo, xhi) = valid_range(g.ow, g.w, g.sw, g.pl, kj * g.dw);
                let src = &col[row * ld..row * ld + l];
                row += 1;
                if xlo >= xhi {
                    continue;
                }
                for oy in ylo..yhi {
                    let iy = oy * g.sh + ki * g.dh - g.pt;
                    let dst = &mut plane[iy * g.w..(iy + 1) * g.w];
                    let s = &src[oy * g.ow + xlo..oy * g.ow + xhi];
                    let ix0 = xlo * g.sw + kj * g.dw - g.pl;
                    if g.sw == 1 {
                        for (d, &v) in dst[ix0..ix0 + s.len()].iter_mut().zip(s) {
                            *d += v;
                        }
                    } else {
                        for (i, &v) in s.iter().enumerate() {
                            dst[ix0 + i * g.sw] += v;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ranges_clip_to_the_padded_input() {
        // size 4, pad 1, stride 1, 4 outputs: offset 0 reads input -1..3, so o = 0 is padding.
        assert_eq!(valid_range(4, 4, 1, 1, 0), (1, 4));
        assert_eq!(valid_range(4, 4, 1, 1, 2), (0, 3));
        // stride 2 over 5 inputs, pad 0, offset 1: o * 2 + 1 < 5 for o in 0..2.
        assert_eq!(valid_range(3, 5, 2, 0, 1), (0, 2));
        // a dilated offset beyond the padded input: nothing.
        assert_eq!(valid_range(2, 2, 1, 0, 5), (0, 0));
    }
}
