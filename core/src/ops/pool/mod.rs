//! 2-D pooling over the last two dims of a `[N, C, H, W]` (or unbatched `[C, H, W]`) tensor:
//! `max_pool2d_with_indices`, `avg_pool2d`, `adaptive_avg_pool2d`, and a backward op for each.
//!
//! Semantics are PyTorch's: output sizes (with `ceil_mode`, a window may not start in the right
//! padding), `-inf` padding for max pooling with NaN winning, indices as flat positions
//! `h * W + w` within each plane, `avg_pool2d`'s divisor (the window clipped to the padded
//! input with `count_include_pad`, to the input without it, or `divisor_override`), and adaptive
//! windows `[floor(i * H / OH), ceil((i + 1) * H / OH))`. Kernels ([`kernel`]) run one plane per
//! task; sums accumulate in the compute dtype (f32 for f32/f16/bf16, f64 for f64) in window
//! order, as PyTorch's CPU kernels do, and halves round once.
//!
//! Derivatives: each forward's is its backward op; each backward is linear in the output
//! gradient, so its own derivative is the forward pooling (average pools) or a gather at the
//! saved indices (max pooling): double backward works.

mod kernel;

use tensorplay_ir::shape::fmt_shape;
use tensorplay_ir::{DType, Error, OpClass, Result};

use crate::dispatch::{call, call1};
use crate::ops::{AutocastPolicy, GradCtx, Kernel, Lower, OpDef, OutSpec, Saved, VmapRule};
use crate::tensor::Tensor;
use crate::value::{Args, Value};

macro_rules! pool_op {
    ($name:ident, $op:literal, $schema:literal, $meta:path, $fill:path, $grad:expr) => {
        #[doc = concat!("`", $schema, "`")]
        pub static $name: OpDef = OpDef {
            name: $op,
            schema: $schema,
            class: OpClass::Opaque,
            kernel: Kernel::Compute {
                meta: $meta,
                fill: $fill,
            },
            derivative: $grad,
            saved: Saved::All,
            lower: Lower::None,
            autocast: AutocastPolicy::Keep,
            vmap: VmapRule::Derived,
        };
    };
}

pool_op!(
    MAX_POOL2D_WITH_INDICES,
    "max_pool2d_with_indices",
    "max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], \
     int[2] padding=[0, 0], int[2] dilation=[1, 1], bool ceil_mode=False) -> (Tensor, Tensor)",
    max_meta,
    kernel::max_fill,
    Some(max_grad)
);
pool_op!(
    MAX_POOL2D_WITH_INDICES_BACKWARD,
    "max_pool2d_with_indices_backward",
    "max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor",
    max_backward_meta,
    kernel::max_backward_fill,
    Some(max_backward_grad)
);
pool_op!(
    AVG_POOL2D,
    "avg_pool2d",
    "avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=[0, 0], \
     bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor",
    avg_meta,
    kernel::avg_fill,
    Some(avg_grad)
);
pool_op!(
    AVG_POOL2D_BACKWARD,
    "avg_pool2d_backward",
    "avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, \
     int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor",
    avg_backward_meta,
    kernel::avg_backward_fill,
    Some(avg_backward_grad)
);
pool_op!(
    ADAPTIVE_AVG_POOL2D,
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d(Tensor self, int[2] output_size) -> Tensor",
    adaptive_meta,
    kernel::adaptive_fill,
    Some(adaptive_grad)
);
pool_op!(
    ADAPTIVE_AVG_POOL2D_BACKWARD,
    "adaptive_avg_pool2d_backward",
    "adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor",
    adaptive_backward_meta,
    kernel::adaptive_backward_fill,
    Some(adaptive_backward_grad)
);

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &MAX_POOL2D_WITH_INDICES,
    &MAX_POOL2D_WITH_INDICES_BACKWARD,
    &AVG_POOL2D,
    &AVG_POOL2D_BACKWARD,
    &ADAPTIVE_AVG_POOL2D,
    &ADAPTIVE_AVG_POOL2D_BACKWARD,
];

/// The validated sizes of a pooling call: input and output plane sizes, and the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
    pub dh: usize,
    pub dw: usize,
}

impl Geometry {
    /// The output's shape: the input's leading dims, then `[oh, ow]`.
    fn out_shape(&self, x: &Tensor) -> Vec<usize> {
        let s = x.shape();
        let mut v = s[..s.len() - 2].to_vec();
        v.extend([self.oh, self.ow]);
        v
    }
}

/// Checks `self` is a floating 3-D or 4-D tensor with non-empty planes.
fn check_input(op: &str, x: &Tensor) -> Result<()> {
    if !(x.rank() == 3 || x.rank() == 4) || x.shape()[x.rank() - 2..].contains(&0) {
        return Err(Error::argument(
            op,
            "self",
            "a 3-D [C, H, W] or 4-D [N, C, H, W] tensor with non-empty H and W",
            format!("shape {}", fmt_shape(x.shape())),
        ));
    }
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            op,
            format!("self: expected a floating tensor, got {}", x.dtype()),
        ));
    }
    Ok(())
}

/// An `int[2]` argument (one entry means both dims), each at least `min`; `empty` is used for
/// an empty list when given.
fn pair(
    op: &str,
    a: Args,
    i: usize,
    name: &str,
    min: i64,
    empty: Option<[usize; 2]>,
) -> Result<[usize; 2]> {
    let v = match a.values.get(i) {
        None | Some(Value::None) => &[][..],
        Some(_) => a.ints(i)?,
    };
    let full = match (v.len(), empty) {
        (0, Some(e)) => return Ok(e),
        (1, _) => [v[0], v[0]],
        (2, _) => [v[0], v[1]],
        _ => [min - 1, 0],
    };
    if full.iter().any(|&x| x < min) {
        return Err(Error::argument(
            op,
            name,
            format!("1 or 2 integers, each at least {min}"),
            format!("{v:?}"),
        ));
    }
    Ok(full.map(|x| x as usize))
}

/// PyTorch's pooled size along one dim.
fn pooled(size: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    let span = (d * (k - 1) + 1) as i64;
    let num = size as i64 + 2 * p as i64 - span + if ceil { s as i64 - 1 } else { 0 };
    if num < 0 {
        return None;
    }
    let mut out = num / s as i64 + 1;
    if ceil && (out - 1) * s as i64 >= size as i64 + p as i64 {
        out -= 1;
    }
    (out >= 1).then_some(out as usize)
}

/// The geometry of a windowed pooling call whose `self` is at `xi` and size arguments start
/// at `ki` (`kernel_size, stride, padding`, then `dilation` when `dilated`), with `ceil_mode`
/// at `ceil_at`.
fn window(
    op: &str,
    a: Args,
    xi: usize,
    ki: usize,
    dilated: bool,
    ceil_at: usize,
) -> Result<Geometry> {
    let x = a.tensor(xi)?;
    check_input(op, x)?;
    let [kh, kw] = pair(op, a, ki, "kernel_size", 1, None)?;
    let [sh, sw] = pair(op, a, ki + 1, "stride", 1, Some([kh, kw]))?;
    let [ph, pw] = pair(op, a, ki + 2, "padding", 0, Some([0, 0]))?;
    let [dh, dw] = if dilated {
        pair(op, a, ki + 3, "dilation", 1, Some([1, 1]))?
    } else {
        [1, 1]
    };
    let ceil = a.bool(ceil_at)?;
    // PyTorch: padding at most half of the (dilated, for max pooling) kernel.
    let (eh, ew) = if dilated {
        ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
    } else {
        (kh, kw)
    };
    if 2 * ph > eh || 2 * pw > ew {
        return Err(Error::argument(
            op,
            "padding",
            format!("at most half of the kernel size {kh}x{kw}"),
            format!("[{ph}, {pw}]"),
        ));
    }
    let s = x.shape();
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    let (Some(oh), Some(ow)) = (
        pooled(h, kh, sh, ph, dh, ceil),
        pooled(w, kw, sw, pw, dw, ceil),
    ) else {
        return Err(Error::argument(
            op,
            "kernel_size",
            format!(
                "a window that fits the padded input {}x{}",
                h + 2 * ph,
                w + 2 * pw
            ),
            format!("{kh}x{kw} (dilation {dh}x{dw}, stride {sh}x{sw})"),
        ));
    };
    Ok(Geometry {
        h,
        w,
        oh,
        ow,
        kh,
        kw,
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
    })
}

/// The `output_size` argument (index 1) of `adaptive_avg_pool2d`.
fn output_size(a: Args) -> Result<[usize; 2]> {
    pair(a.op, a, 1, "output_size", 1, None)
}

/// The geometry of an adaptive pooling of `x` to `[oh, ow]`.
fn adaptive(op: &str, x: &Tensor, [oh, ow]: [usize; 2]) -> Result<Geometry> {
    check_input(op, x)?;
    let s = x.shape();
    let (h, w) = (s[s.len() - 2], s[s.len() - 1]);
    Ok(Geometry {
        h,
        w,
        oh,
        ow,
        kh: 0,
        kw: 0,
        sh: 1,
        sw: 1,
        ph: 0,
        pw: 0,
        dh: 1,
        dw: 1,
    })
}

/// Checks `grad_output` has the forward output's shape and `self`'s dtype.
fn check_grad(op: &str, go: &Tensor, x: &Tensor, g: &Geometry) -> Result<()> {
    let want = g.out_shape(x);
    if go.shape() != want.as_slice() || go.dtype() != x.dtype() {
        return Err(Error::argument(
            op,
            "grad_output",
            format!("shape {} of dtype {}", fmt_shape(&want), x.dtype()),
            format!("shape {} of dtype {}", fmt_shape(go.shape()), go.dtype()),
        ));
    }
    Ok(())
}

fn max_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = window(a.op, a, 0, 1, true, 5)?;
    let x = a.tensor(0)?;
    let shape = g.out_shape(x);
    Ok(vec![
        OutSpec::new(&shape, x.dtype()),
        OutSpec::new(&shape, DType::I64),
    ])
}

fn max_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (go, x, idx) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    check_input(a.op, x)?;
    if idx.dtype() != DType::I64 || idx.shape() != go.shape() {
        return Err(Error::argument(
            a.op,
            "indices",
            format!(
                "an i64 tensor of grad_output's shape {}",
                fmt_shape(go.shape())
            ),
            format!("{} of shape {}", idx.dtype(), fmt_shape(idx.shape())),
        ));
    }
    let lead = &x.shape()[..x.rank() - 2];
    if go.rank() != x.rank() || &go.shape()[..go.rank() - 2] != lead || go.dtype() != x.dtype() {
        return Err(Error::argument(
            a.op,
            "grad_output",
            format!("leading dims {} and dtype {}", fmt_shape(lead), x.dtype()),
            format!("shape {} of dtype {}", fmt_shape(go.shape()), go.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

fn avg_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = window(a.op, a, 0, 1, false, 4)?;
    divisor_override(a, 6)?;
    let x = a.tensor(0)?;
    Ok(vec![OutSpec::new(&g.out_shape(x), x.dtype())])
}

fn avg_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let g = window(a.op, a, 1, 2, false, 5)?;
    divisor_override(a, 7)?;
    let (go, x) = (a.tensor(0)?, a.tensor(1)?);
    check_grad(a.op, go, x, &g)?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

fn adaptive_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    let g = adaptive(a.op, x, output_size(a)?)?;
    Ok(vec![OutSpec::new(&g.out_shape(x), x.dtype())])
}

fn adaptive_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (go, x) = (a.tensor(0)?, a.tensor(1)?);
    check_input(a.op, x)?;
    if go.rank() != x.rank() || go.shape()[..go.rank() - 2] != x.shape()[..x.rank() - 2] {
        return Err(Error::argument(
            a.op,
            "grad_output",
            format!("the leading dims of self {}", fmt_shape(x.shape())),
            format!("shape {}", fmt_shape(go.shape())),
        ));
    }
    if go.dtype() != x.dtype() || go.shape()[go.rank() - 2..].contains(&0) {
        return Err(Error::argument(
            a.op,
            "grad_output",
            format!("a non-empty tensor of dtype {}", x.dtype()),
            format!("{} of shape {}", go.dtype(), fmt_shape(go.shape())),
        ));
    }
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

/// The optional `divisor_override` (non-zero when given).
pub(crate) fn divisor_override(a: Args, i: usize) -> Result<Option<i64>> {
    match a.values.get(i) {
        None | Some(Value::None) => Ok(None),
        Some(_) => {
            let d = a.int(i)?;
            if d == 0 {
                return Err(Error::argument(
                    a.op,
                    "divisor_override",
                    "a non-zero integer",
                    "0",
                ));
            }
            Ok(Some(d))
        }
    }
}

fn max_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let x = c.args.tensor(0)?;
    let gx = call1(
        &MAX_POOL2D_WITH_INDICES_BACKWARD,
        &[
            Value::Tensor(c.grad(0)?),
            Value::Tensor(x.clone()),
            Value::Tensor(c.outputs[1].clone()),
        ],
    )?;
    Ok(vec![Some(gx)])
}

/// `d grad_output = ggx` gathered at the indices (per plane).
fn max_backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (go, idx) = (c.args.tensor(0)?, c.args.tensor(2)?);
    let ggx = c.grad(0)?;
    let lead = &go.shape()[..go.rank() - 2];
    let flat = |t: &Tensor| -> Result<Tensor> {
        let mut s = lead.to_vec();
        s.push(t.shape()[t.rank() - 2] * t.shape()[t.rank() - 1]);
        t.reshape(&s)
    };
    let d_go = flat(&ggx)?
        .gather(go.rank() as i64 - 2, &flat(idx)?)?
        .reshape(go.shape())?;
    Ok(vec![Some(d_go), None, None])
}

fn avg_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let mut args = vec![Value::Tensor(c.grad(0)?)];
    args.extend(c.args.values.iter().cloned());
    // The forward's defaults, spelled out for the backward's schema.
    args.resize(8, Value::None);
    for (i, default) in [(3, Value::IntList(vec![])), (4, Value::IntList(vec![0, 0]))] {
        if matches!(args[i], Value::None) {
            args[i] = default;
        }
    }
    for (i, default) in [(5, false), (6, true)] {
        if matches!(args[i], Value::None) {
            args[i] = Value::Bool(default);
        }
    }
    Ok(vec![Some(call1(&AVG_POOL2D_BACKWARD, &args)?)])
}

/// `d grad_output = avg_pool2d(ggx)` with the same sizes.
fn avg_backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let mut args = vec![Value::Tensor(c.grad(0)?)];
    args.extend(c.args.values[2..].iter().cloned());
    Ok(vec![Some(call1(&AVG_POOL2D, &args)?), None])
}

fn adaptive_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let gx = call1(
        &ADAPTIVE_AVG_POOL2D_BACKWARD,
        &[
            Value::Tensor(c.grad(0)?),
            Value::Tensor(c.args.tensor(0)?.clone()),
        ],
    )?;
    Ok(vec![Some(gx)])
}

/// `d grad_output = adaptive_avg_pool2d(ggx, grad_output's size)`.
fn adaptive_backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let go = c.args.tensor(0)?;
    let size = go.shape()[go.rank() - 2..]
        .iter()
        .map(|&s| s as i64)
        .collect();
    let d = call(
        &ADAPTIVE_AVG_POOL2D,
        &[Value::Tensor(c.grad(0)?), Value::IntList(size)],
    )?;
    Ok(vec![d.into_iter().next(), None])
}
