//! The validated sizes of a convolution call ([`Geometry`]) and the argument readers the ops
//! and kernels share.

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, Result};

use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `conv2d`'s op name, here so that the modules beside the op table (`images.rs`) name the op
/// without importing `mod.rs`.
pub(super) const CONV2D_NAME: &str = "conv2d";

/// The validated sizes of one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    /// Padding before the first row and column (the padding after them only sizes the output).
    pub pt: usize,
    pub pl: usize,
    pub dh: usize,
    pub dw: usize,
    pub groups: usize,
    pub oh: usize,
    pub ow: usize,
}

impl Geometry {
    /// Input channels per group.
    pub fn cg(&self) -> usize {
        self.c / self.groups
    }
    /// Output channels per group.
    pub fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of one group's im2col matrix (`C/g * kH * kW`).
    pub fn k(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    /// Output positions per image.
    pub fn l(&self) -> usize {
        self.oh * self.ow
    }
}

/// Reads an int list argument of `len` entries (or one entry repeated), each at least `min`.
fn int_list<const N: usize>(
    op: &str,
    a: Args,
    i: usize,
    name: &str,
    min: i64,
) -> Result<[usize; N]> {
    let v = a.ints(i)?;
    let bad = || {
        Error::argument(
            op,
            name,
            format!("{N} integers (or one) each at least {min}"),
            format!("{v:?}"),
        )
    };
    let full: Vec<i64> = match v.len() {
        1 => vec![v[0]; N],
        n if n == N => v.to_vec(),
        _ => return Err(bad()),
    };
    if full.iter().any(|&x| x < min) {
        return Err(bad());
    }
    let mut out = [0usize; N];
    for (o, x) in out.iter_mut().zip(full) {
        *o = x as usize;
    }
    Ok(out)
}

/// Padding as `[top, bottom, left, right]` from 1, 2 (`[h, w]`) or 4 entries.
fn padding(op: &str, a: Args, i: usize) -> Result<[usize; 4]> {
    let v = a.ints(i)?;
    let full = match v.len() {
        1 => vec![v[0]; 4],
        2 => vec![v[0], v[0], v[1], v[1]],
        4 => v.to_vec(),
        _ => vec![-1],
    };
    if full.len() != 4 || full.iter().any(|&x| x < 0) {
        return Err(Error::argument(
            op,
            "padding",
            "1, 2 ([h, w]) or 4 ([top, bottom, left, right]) non-negative integers",
            format!("{v:?}"),
        ));
    }
    Ok([full[0], full[1], full[2], full[3]].map(|x| x as usize))
}

/// Checks `input` and `weight` (and the size arguments at 3..=6) and returns the geometry.
pub(crate) fn geometry(op: &str, x: &Tensor, wt: &Tensor, a: Args) -> Result<Geometry> {
    if x.rank() != 4 {
        return Err(Error::argument(
            op,
            "input",
            "a 4-D [N, C, H, W] tensor",
            format!("shape {}", fmt_shape(x.shape())),
        ));
    }
    if wt.rank() != 4 {
        return Err(Error::argument(
            op,
            "weight",
            "a 4-D [out_channels, in_channels / groups, kH, kW] tensor",
            format!("shape {}", fmt_shape(wt.shape())),
        ));
    }
    if !x.dtype().is_float() || wt.dtype() != x.dtype() {
        return Err(Error::dtype(
            op,
            format!(
                "expected floating input and weight of one dtype, got {} and {}",
                x.dtype(),
                wt.dtype()
            ),
        ));
    }
    let [sh, sw] = int_list::<2>(op, a, 3, "stride", 1)?;
    let [pt, pb, pl, pr] = padding(op, a, 4)?;
    let [dh, dw] = int_list::<2>(op, a, 5, "dilation", 1)?;
    let groups = a.int(6)?;
    let (xs, ws) = (x.shape(), wt.shape());
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, kh, kw) = (ws[0], ws[2], ws[3]);
    if groups < 1 || c % groups as usize != 0 || o % groups as usize != 0 {
        return Err(Error::argument(
            op,
            "groups",
            format!("a positive divisor of in_channels {c} and out_channels {o}"),
            groups.to_string(),
        ));
    }
    let groups = groups as usize;
    if ws[1] != c / groups {
        return Err(Error::argument(
            op,
            "weight",
            format!(
                "{} input channels per group (input has {c} channels, groups = {groups})",
                c / groups
            ),
            format!("shape {}", fmt_shape(ws)),
        ));
    }
    let span_h = dh * (kh.max(1) - 1) + 1;
    let span_w = dw * (kw.max(1) - 1) + 1;
    if kh == 0 || kw == 0 || h + pt + pb < span_h || w + pl + pr < span_w {
        return Err(Error::argument(
            op,
            "weight",
            format!(
                "a (dilated) kernel no larger than the padded input {}x{}",
                h + pt + pb,
                w + pl + pr
            ),
            format!("kernel {kh}x{kw} with dilation {dh}x{dw}"),
        ));
    }
    Ok(Geometry {
        n,
        c,
        h,
        w,
        o,
        kh,
        kw,
        sh,
        sw,
        pt,
        pl,
        dh,
        dw,
        groups,
        oh: (h + pt + pb - span_h) / sh + 1,
        ow: (w + pl + pr - span_w) / sw + 1,
    })
}

/// `conv2d_backward`'s `output_mask` argument (index 7; absent means all three).
pub(crate) fn output_mask(a: Args) -> Result<[bool; 3]> {
    output_mask_at(a, 7)
}

/// The `output_mask` argument at index `i` (absent means all three).
pub(crate) fn output_mask_at(a: Args, i: usize) -> Result<[bool; 3]> {
    match a.values.get(i) {
        None | Some(Value::None) => Ok([true; 3]),
        Some(Value::BoolList(v)) if v.len() == 3 => Ok([v[0], v[1], v[2]]),
        Some(other) => Err(Error::argument(
            a.op,
            "output_mask",
            "3 booleans",
            other.type_name(),
        )),
    }
}

/// Checks a transposed convolution's `input` `[N, C_in, H, W]` and `weight`
/// `[C_in, C_out / groups, kH, kW]` (and the size arguments at 3..=7: stride, padding,
/// output_padding, groups, dilation) and returns the geometry of the convolution it is the
/// adjoint of: that convolution's input is the transposed one's output `[N, C_out, OH, OW]`,
/// its output is the transposed one's input, and its weight is the same tensor.
pub(crate) fn transposed_geometry(op: &str, x: &Tensor, wt: &Tensor, a: Args) -> Result<Geometry> {
    if x.rank() != 4 {
        return Err(Error::argument(
            op,
            "input",
            "a 4-D [N, C_in, H, W] tensor",
            format!("shape {}", fmt_shape(x.shape())),
        ));
    }
    if wt.rank() != 4 {
        return Err(Error::argument(
            op,
            "weight",
            "a 4-D [in_channels, out_channels / groups, kH, kW] tensor",
            format!("shape {}", fmt_shape(wt.shape())),
        ));
    }
    if !x.dtype().is_float() || wt.dtype() != x.dtype() {
        return Err(Error::dtype(
            op,
            format!(
                "expected floating input and weight of one dtype, got {} and {}",
                x.dtype(),
                wt.dtype()
            ),
        ));
    }
    let stride = int_list::<2>(op, a, 3, "stride", 1)?;
    let pad = int_list::<2>(op, a, 4, "padding", 0)?;
    let out_pad = int_list::<2>(op, a, 5, "output_padding", 0)?;
    let groups = a.int(6)?;
    let dil = int_list::<2>(op, a, 7, "dilation", 1)?;
    let (xs, ws) = (x.shape(), wt.shape());
    let (n, c_in, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    if groups < 1 || c_in % groups as usize != 0 {
        return Err(Error::argument(
            op,
            "groups",
            format!("a positive divisor of in_channels {c_in}"),
            groups.to_string(),
        ));
    }
    let groups = groups as usize;
    if ws[0] != c_in {
        return Err(Error::argument(
            op,
            "weight",
            format!(
                "{c_in} rows, one per input channel ([in_channels, out_channels / groups, kH, kW])"
            ),
            format!("shape {}", fmt_shape(ws)),
        ));
    }
    for d in 0..2 {
        if out_pad[d] >= stride[d] && out_pad[d] >= dil[d] {
            return Err(Error::argument(
                op,
                "output_padding",
                format!(
                    "each entry smaller than the stride {stride:?} or the dilation {dil:?} of its dim"
                ),
                format!("{out_pad:?}"),
            ));
        }
    }
    let (kh, kw) = (ws[2], ws[3]);
    // (in - 1) * stride - 2 * pad + dilation * (k - 1) + output_padding + 1
    let size = |d: usize, len: usize, k: usize| -> i64 {
        (len as i64 - 1) * stride[d] as i64 - 2 * pad[d] as i64
            + dil[d] as i64 * (k as i64 - 1)
            + out_pad[d] as i64
            + 1
    };
    let (oh, ow) = (size(0, h, kh), size(1, w, kw));
    if kh == 0 || kw == 0 || oh < 1 || ow < 1 {
        return Err(Error::argument(
            op,
            "padding",
            "a padding that leaves a non-empty output",
            format!("padding {pad:?} with kernel {kh}x{kw}, giving an output of {oh}x{ow}"),
        ));
    }
    Ok(Geometry {
        n,
        c: ws[1] * groups,
        h: oh as usize,
        w: ow as usize,
        o: c_in,
        kh,
        kw,
        sh: stride[0],
        sw: stride[1],
        pt: pad[0],
        pl: pad[1],
        dh: dil[0],
        dw: dil[1],
        groups,
        oh: h,
        ow: w,
    })
}
