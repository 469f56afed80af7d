//! 2-D convolution: `conv2d` and its backward `conv2d_backward`, the ops `nn::conv2d` and
//! `nn::conv1d` run, and the transposed convolution `conv_transpose2d` with its backward
//! ([`transpose`]).
//!
//! Semantics are PyTorch's (`torch.nn.functional.conv2d`, a cross-correlation) over
//! channels-first `[N, C, H, W]` inputs and `[O, C / groups, kH, kW]` weights, with stride,
//! dilation, groups and zero padding given per side (`[top, bottom, left, right]`, so the
//! `"same"` padding of an even kernel, which pads one more on the bottom/right as PyTorch does,
//! needs no separate pad). The unbatched `[C, H, W]` form, 1-D convolution and the `"same"` /
//! `"valid"` spellings are handled by `nn`.
//!
//! Kernels ([`kernel`], [`products`]): each image is lowered to a `[C/g * kH * kW, OH * OW]`
//! matrix ([`im2col`]) and multiplied by the group's `[O/g, C/g * kH * kW]` weight through the
//! `gemm` crate; the batch is cut into one chunk of images per pool thread, otherwise (fewer
//! images than threads) the product itself is parallel. A stride-1, undilated, ungrouped
//! forward whose padding adds little work runs the direct kernel instead ([`direct`]: shifted
//! products over the zero-padded image, no im2col matrix); `docs/PERFORMANCE.md`
//! ("Convolution") has the measurements behind both choices and behind one image a product.
//! The backward computes the input gradient as `W^T · grad` folded back with `col2im`, the
//! weight gradient as `grad · col^T` summed over the batch, and the bias gradient as a sum.
//! f16/bf16 compute in f32 and round once.
//!
//! Derivatives: `conv2d`'s is `conv2d_backward` (only the gradients that are needed). The
//! backward is linear in each of its operands, so its own derivative is made of `conv2d` and
//! `conv2d_backward` again: double backward works to any order. The transposed pair is
//! differentiated the same way ([`Pair`] holds the rules once for both).
//!
//! A transposed convolution is the adjoint of a convolution: its forward is that
//! convolution's input gradient (`W^T · x` folded with `col2im`), its input gradient that
//! convolution itself, its weight gradient that convolution's weight gradient with image and
//! gradient swapped. The same kernels run both pairs over one [`geometry::Geometry`].
//!
//! Both ops are opaque in compiled graphs (barriers, like matmul).

mod direct;
mod geometry;
mod im2col;
mod images;
mod kernel;
mod products;
mod transpose;

pub use self::images::ConvImages;
pub use self::transpose::{CONV_TRANSPOSE2D, CONV_TRANSPOSE2D_BACKWARD};

use self::geometry::{geometry, output_mask, output_mask_at};

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{Error, OpClass, Result};

use crate::dispatch::call;
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=[1, 1],
/// int[4] padding=[0, 0, 0, 0], int[2] dilation=[1, 1], int groups=1) -> Tensor`, with
/// `padding` as `[top, bottom, left, right]` (a 2-list `[pad_h, pad_w]` is accepted too).
pub static CONV2D: OpDef = OpDef {
    name: geometry::CONV2D_NAME,
    schema: "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=[1, 1], \
             int[4] padding=[0, 0, 0, 0], int[2] dilation=[1, 1], int groups=1) -> Tensor",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: forward_meta,
        fill: kernel::forward_fill,
    },
    derivative: Some(conv2d_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::LowPrecision,
    vmap: VmapRule::Derived,
};

/// `conv2d_backward(Tensor grad_output, Tensor input, Tensor weight, int[2] stride,
/// int[4] padding, int[2] dilation, int groups, bool[3] output_mask=[True, True, True])
/// -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)`. An output whose mask entry
/// is false is returned as zeros without being computed.
pub static CONV2D_BACKWARD: OpDef = OpDef {
    name: "conv2d_backward",
    schema: "conv2d_backward(Tensor grad_output, Tensor input, Tensor weight, int[2] stride, \
             int[4] padding, int[2] dilation, int groups, \
             bool[3] output_mask=[True, True, True]) -> (Tensor grad_input, \
             Tensor grad_weight, Tensor grad_bias)",
    class: OpClass::Opaque,
    kernel: Kernel::Compute {
        meta: backward_meta,
        fill: kernel::backward_fill,
    },
    derivative: Some(conv2d_backward_grad),
    saved: Saved::Inputs,
    lower: Lower::None,
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &CONV2D,
    &CONV2D_BACKWARD,
    &CONV_TRANSPOSE2D,
    &CONV_TRANSPOSE2D_BACKWARD,
];

fn forward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (x, wt) = (a.tensor(0)?, a.tensor(1)?);
    let g = geometry(a.op, x, wt, a)?;
    if let Some(b) = a.opt_tensor(2)?
        && (b.shape() != [g.o] || b.dtype() != x.dtype())
    {
        return Err(Error::argument(
            a.op,
            "bias",
            format!("a [{}] tensor of dtype {}", g.o, x.dtype()),
            format!("shape {} of dtype {}", fmt_shape(b.shape()), b.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(&[g.n, g.o, g.oh, g.ow], x.dtype())])
}

fn backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (go, x, wt) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let g = geometry(a.op, x, wt, a)?;
    output_mask(a)?;
    let want = [g.n, g.o, g.oh, g.ow];
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
        OutSpec::new(&[g.o], x.dtype()),
    ])
}

/// A convolution op and its backward, as their derivatives see them: both take the same size
/// arguments at the same positions, and the backward's output mask follows them.
struct Pair {
    forward: &'static OpDef,
    backward: &'static OpDef,
    /// Where the size arguments sit in both ops' argument lists.
    sizes: std::ops::Range<usize>,
}

const CONV: Pair = Pair {
    forward: &CONV2D,
    backward: &CONV2D_BACKWARD,
    sizes: 3..7,
};

const TRANSPOSED: Pair = Pair {
    forward: &transpose::CONV_TRANSPOSE2D,
    backward: &transpose::CONV_TRANSPOSE2D_BACKWARD,
    sizes: 3..8,
};

impl Pair {
    /// The size arguments of a call, as values.
    fn size_args(&self, a: Args) -> Vec<Value> {
        a.values[self.sizes.clone()].to_vec()
    }

    /// `backward(grad, input, weight, sizes…, mask)`.
    fn backward_call(
        &self,
        grad: &Tensor,
        input: &Tensor,
        weight: &Tensor,
        sizes: &[Value],
        mask: [bool; 3],
    ) -> Result<Vec<Tensor>> {
        let mut args = vec![
            Value::Tensor(grad.clone()),
            Value::Tensor(input.clone()),
            Value::Tensor(weight.clone()),
        ];
        args.extend(sizes.iter().cloned());
        args.push(Value::BoolList(mask.to_vec()));
        call(self.backward, &args)
    }

    /// `forward(input, weight)` without bias, with the given size arguments.
    fn forward_call(&self, input: &Tensor, weight: &Tensor, sizes: &[Value]) -> Result<Tensor> {
        let mut args = vec![
            Value::Tensor(input.clone()),
            Value::Tensor(weight.clone()),
            Value::None,
        ];
        args.extend(sizes.iter().cloned());
        Ok(call(self.forward, &args)?.swap_remove(0))
    }

    /// The forward's derivative: the backward, computing only the gradients that are needed.
    fn forward_grad(&self, c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
        let (x, wt) = (c.args.tensor(0)?, c.args.tensor(1)?);
        let bias = c.args.opt_tensor(2)?;
        let mask = [
            x.requires_grad(),
            wt.requires_grad(),
            bias.is_some_and(|b| b.requires_grad()),
        ];
        let g = c.grad(0)?;
        let got = self.backward_call(&g, x, wt, &self.size_args(c.args), mask)?;
        let mut out: Vec<Option<Tensor>> = got
            .into_iter()
            .zip(mask)
            .map(|(t, m)| m.then_some(t))
            .collect();
        if bias.is_none() {
            out.pop();
        }
        Ok(out)
    }

    /// The backward's derivative. With `gi = B_in(go, W)`, `gw = B_w(go, x)`, `gb = sum(go)`
    /// (each linear in each operand, and the adjoints of the forward `F`):
    /// `d go = F(ggi, W) + F(x, ggw) + ggb`, `d x = B_in(go, ggw)` and `d W = B_w(go, ggi)`.
    fn backward_grad(&self, c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
        let (go, x, wt) = (c.args.tensor(0)?, c.args.tensor(1)?, c.args.tensor(2)?);
        let sizes = self.size_args(c.args);
        let used = output_mask_at(c.args, self.sizes.end)?;
        let gg: Vec<Option<Tensor>> = (0..3)
            .map(|i| c.grads.get(i).cloned().flatten().filter(|_| used[i]))
            .collect();
        let mut d_go: Option<Tensor> = None;
        let mut add = |t: Tensor| -> Result<()> {
            d_go = Some(match d_go.take() {
                Some(acc) => acc.add(&t)?,
                None => t,
            });
            Ok(())
        };
        if let Some(ggi) = &gg[0] {
            add(self.forward_call(ggi, wt, &sizes)?)?;
        }
        if let Some(ggw) = &gg[1] {
            add(self.forward_call(x, ggw, &sizes)?)?;
        }
        if let Some(ggb) = &gg[2] {
            add(ggb.reshape(&[1, ggb.numel(), 1, 1])?.expand(go.shape())?)?;
        }
        let d_x = match &gg[1] {
            Some(ggw) if x.requires_grad() => Some(
                self.backward_call(go, x, ggw, &sizes, [true, false, false])?
                    .swap_remove(0),
            ),
            _ => None,
        };
        let d_w = match &gg[0] {
            Some(ggi) if wt.requires_grad() => Some(
                self.backward_call(go, ggi, wt, &sizes, [false, true, false])?
                    .swap_remove(1),
            ),
            _ => None,
        };
        Ok(vec![d_go, d_x, d_w])
    }
}

fn conv2d_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    CONV.forward_grad(c)
}

fn conv2d_backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    CONV.backward_grad(c)
}
