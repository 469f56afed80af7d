//! `conv_transpose2d` (PyTorch's `torch.nn.functional.conv_transpose2d`, sometimes called a
//! deconvolution) and its backward `conv_transpose2d_backward`.
//!
//! The input is `[N, C_in, H, W]`, the weight `[C_in, C_out / groups, kH, kW]`, and each
//! output size is `(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
//! Both ops run the convolution kernels over the geometry of the convolution they are the
//! adjoint of (`geometry::transposed_geometry`); f16/bf16 compute in f32 and round once.

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, OpClass, Result};

use super::geometry::{output_mask_at, transposed_geometry};
use super::{TRANSPOSED, kernel};
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::tensor::Tensor;
use crate::value::Args;

/// `conv_transpose2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=[1, 1],
/// int[2] padding=[0, 0], int[2] output_padding=[0, 0], int groups=1,
/// int[2] dilation=[1, 1]) -> Tensor`, PyTorch's argument order. Each `output_padding` entry
/// must be smaller than the stride or the dilation of its dim.
pub static CONV_TRANSPOSE2D: OpDef = OpDef {
    name: "conv_transpose2d",
    schema: "conv_transpose2d(Tensor input, Tensor weight, Tensor? bias=None, \
             int[2] stride=[1, 1], int[2] padding=[0, 0], int[2] output_padding=[0, 0], \
             int groups=1, int[2] dilation=[1, 1]) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: forward_meta,
        fill: kernel::transposed_forward_fill,
    },
    derivative: Some(forward_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::LowPrecision,
    vmap: VmapRule::Derived,
};

/// `conv_transpose2d_backward(Tensor grad_output, Tensor input, Tensor weight, int[2] stride,
/// int[2] padding, int[2] output_padding, int groups, int[2] dilation,
/// bool[3] output_mask=[True, True, True]) -> (Tensor grad_input, Tensor grad_weight,
/// Tensor grad_bias)`. An output whose mask entry is false is returned as zeros without being
/// computed.
pub static CONV_TRANSPOSE2D_BACKWARD: OpDef = OpDef {
    name: "conv_transpose2d_backward",
    schema: "conv_transpose2d_backward(Tensor grad_output, Tensor input, Tensor weight, \
             int[2] stride, int[2] padding, int[2] output_padding, int groups, \
             int[2] dilation, bool[3] output_mask=[True, True, True]) -> (Tensor grad_input, \
             Tensor grad_weight, Tensor grad_bias)",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: backward_meta,
        fill: kernel::transposed_backward_fill,
    },
    derivative: Some(backward_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

fn forward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, wt) = (a.tensor(0)?, a.tensor(1)?);
    let g = transposed_geometry(a.op, x, wt, a)?;
    if let Some(b) = a.opt_tensor(2)?
        && (b.shape() != [g.c] || b.dtype() != x.dtype())
    {
        return Err(Error::argument(
            a.op,
            "bias",
            format!("a [{}] tensor of dtype {}", g.c, x.dtype()),
            format!("shape {} of dtype {}", fmt_shape(b.shape()), b.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(&[g.n, g.c, g.h, g.w], x.dtype())])
}

fn backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (go, x, wt) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let g = transposed_geometry(a.op, x, wt, a)?;
    output_mask_at(a, 8)?;
    let want = [g.n, g.c, g.h, g.w];
    if go.shape() != want || go.dtype() != x.dtype() {
        return Err(Error::argument(
            a.op,
            "grad_output",
            format!("shape {} of dtype {}", fmt_shape(&want), x.dtype()),
            format!("shape {} of dtype {}", fmt_shape(go.shape()), go.dtype()),
        ));
    }
    Ok(vec![
        OutSpec::new(x.shape(), x.dtype()),
        OutSpec::new(wt.shape(), x.dtype()),
        OutSpec::new(&[g.c], x.dtype()),
    ])
}

fn forward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    TRANSPOSED.forward_grad(c)
}

fn backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    TRANSPOSED.backward_grad(c)
}
