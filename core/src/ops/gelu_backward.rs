//! `gelu_backward(grad_output, self, approximate)`: `grad_output * gelu'(self)` as one
//! elementwise op (PyTorch's name and schema), the derivative `gelu` records.
//!
//! Eagerly, contiguous f32 operands of one shape run in one pass over tiles: the tile's
//! polynomial, the math library's vector `tanh` (or `erf` and `exp`) in place, and the
//! derivative's arithmetic — instead of the sixteen elementwise ops of the formula written
//! with tensor ops, which every other layout and dtype still runs. Compiled graphs lower it
//! to one scalar expression, fused like any elementwise op. Its own derivative (double
//! backward) is `gelu_backward` for `grad_output` and `grad_output * gelu''(self)` for `self`.

use std::f64::consts::{FRAC_1_SQRT_2, PI};

use rayon::prelude::*;
use tensorplay_ir::graph::Attr;
use tensorplay_ir::shape::broadcast_shapes;
use tensorplay_ir::{DType, Error, OpClass, Result, ScalarExpr, ScalarOp};
use tensorplay_math::MathFn;
use tensorplay_math::bulk::{self, BulkOp, UnaryFn};

use super::binary::{as_dtype, result_type};
use super::lowering::{DTypeRule, Lower, Pointwise};
use super::{AutocastPolicy, GeluApproximate, GradCtx, Kernel, OpDef, OutSpec, Saved, VmapRule};
use crate::dispatch::call1;
use crate::parallel;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// `sqrt(2 / pi)`, the tanh form's scale.
const K: f64 = 0.797_884_560_802_865_4;
/// The tanh form's cubic coefficient.
const C: f64 = 0.044_715;

/// `gelu_backward(Tensor grad_output, Tensor self, *, str approximate="none") -> Tensor`
pub static GELU_BACKWARD: OpDef = OpDef {
    name: "gelu_backward",
    schema: "gelu_backward(Tensor grad_output, Tensor self, *, str approximate=\"none\") -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: gelu_backward_meta,
        fill: gelu_backward_fill,
    },
    derivative: Some(gelu_backward_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise::op(gelu_backward_expr, DTypeRule::Float)),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&GELU_BACKWARD];

/// The `approximate` argument (argument 2; absent means `"none"`).
fn form(a: Args) -> Result<GeluApproximate> {
    match a.values.get(2) {
        None | Some(Value::None) => Ok(GeluApproximate::None),
        Some(_) => GeluApproximate::parse(a.str(2)?),
    }
}

fn gelu_backward_meta(a: Args) -> Result<Vec<OutSpec>> {
    form(a)?;
    let (g, x) = (a.tensor(0)?, a.tensor(1)?);
    let shape = broadcast_shapes(a.op, g.shape(), x.shape())?;
    let dtype = result_type(g, x);
    if !dtype.is_float() {
        return Err(Error::dtype(
            a.op,
            format!(
                "expected floating operands, got {} and {}",
                g.dtype(),
                x.dtype()
            ),
        ));
    }
    Ok(vec![OutSpec::new(&shape, dtype)])
}

/// `gelu'(x)` from tensor ops (any dtype and layout; differentiable).
fn derivative_ops(x: &Tensor, f: GeluApproximate) -> Result<Tensor> {
    match f {
        GeluApproximate::None => {
            // Phi(x) + x * phi(x)
            let cdf = x
                .mul_scalar(FRAC_1_SQRT_2)?
                .erf()?
                .add_scalar(1.0)?
                .mul_scalar(0.5)?;
            let pdf = x
                .mul(x)?
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(1.0 / (2.0 * PI).sqrt())?;
            cdf.add(&x.mul(&pdf)?)
        }
        GeluApproximate::Tanh => {
            // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3))
            let x2 = x.mul(x)?;
            let t = x2
                .mul_scalar(C)?
                .add_scalar(1.0)?
                .mul(x)?
                .mul_scalar(K)?
                .tanh()?;
            let left = t.add_scalar(1.0)?.mul_scalar(0.5)?;
            let sech2 = t.mul(&t)?.neg()?.add_scalar(1.0)?;
            let du = x2.mul_scalar(3.0 * C)?.add_scalar(1.0)?.mul_scalar(K)?;
            left.add(&x.mul(&sech2)?.mul(&du)?.mul_scalar(0.5)?)
        }
    }
}

/// `gelu''(x)` from tensor ops: `phi(x) (2 - x^2)` for the erf form; for the tanh form
/// `(1 - t^2) (u' - x t u'^2 + 3 k c x^2)` with `u' = k (1 + 3 c x^2)`.
fn second_derivative_ops(x: &Tensor, f: GeluApproximate) -> Result<Tensor> {
    let x2 = x.mul(x)?;
    match f {
        GeluApproximate::None => {
            let pdf = x2
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(1.0 / (2.0 * PI).sqrt())?;
            pdf.mul(&x2.neg()?.add_scalar(2.0)?)
        }
        GeluApproximate::Tanh => {
            let t = x2
                .mul_scalar(C)?
                .add_scalar(1.0)?
                .mul(x)?
                .mul_scalar(K)?
                .tanh()?;
            let sech2 = t.mul(&t)?.neg()?.add_scalar(1.0)?;
            let du = x2.mul_scalar(3.0 * C)?.add_scalar(1.0)?.mul_scalar(K)?;
            let inner = du
                .sub(&x.mul(&t)?.mul(&du)?.mul(&du)?)?
                .add(&x2.mul_scalar(3.0 * K * C)?)?;
            sech2.mul(&inner)
        }
    }
}

fn gelu_backward_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let f = form(a)?;
    let out = &outs[0];
    // f16/bf16 compute in f32 and round once (as compiled code does).
    let compute = if out.dtype().is_half() {
        DType::F32
    } else {
        out.dtype()
    };
    let (g, x) = (
        as_dtype(a.tensor(0)?, compute)?,
        as_dtype(a.tensor(1)?, compute)?,
    );
    let one_pass = compute == DType::F32
        && g.shape() == out.shape()
        && x.shape() == out.shape()
        && g.is_contiguous()
        && x.is_contiguous();
    if one_pass && let Some(k) = tile_kernels(f) {
        if out.dtype() == DType::F32 {
            return fill_f32(a.op, out, &g, &x, k);
        }
        let tmp = Tensor::empty(out.shape(), DType::F32);
        fill_f32(a.op, &tmp, &g, &x, k)?;
        return super::cast::copy_convert(a.op, out, &tmp);
    }
    let r = g.mul(&derivative_ops(&x, f)?)?;
    super::cast::copy_convert(a.op, out, &r)
}

/// The library's vector kernels a tile needs, per form.
#[derive(Clone, Copy)]
enum Tiles {
    Tanh(UnaryFn),
    Erf { erf: UnaryFn, exp: UnaryFn },
}

/// The tile kernels of form `f`, when the host has them.
fn tile_kernels(f: GeluApproximate) -> Option<Tiles> {
    let k = |m| bulk::eager_unary(BulkOp::Math(m));
    Some(match f {
        GeluApproximate::Tanh => Tiles::Tanh(k(MathFn::Tanh)?),
        GeluApproximate::None => Tiles::Erf {
            erf: k(MathFn::Erf)?,
            exp: k(MathFn::Exp)?,
        },
    })
}

/// Elements per tile: two f32 scratch rows stay in L1.
const TILE: usize = 512;

fn fill_f32(op: &str, out: &Tensor, g: &Tensor, x: &Tensor, kernels: Tiles) -> Result<()> {
    let n = out.numel();
    // SAFETY: `out` is a fresh contiguous f32 tensor of `n` elements, `g` and `x` contiguous
    // f32 tensors of the same `n` elements, alive for this call; `out` aliases neither.
    let (o, gs, xs) = unsafe {
        (
            std::slice::from_raw_parts_mut(out.data_ptr(op)? as *mut f32, n),
            std::slice::from_raw_parts(g.data_ptr(op)? as *const f32, n),
            std::slice::from_raw_parts(x.data_ptr(op)? as *const f32, n),
        )
    };
    let run = |(i, o): (usize, &mut [f32])| {
        let at = i * TILE;
        tile(o, &gs[at..at + o.len()], &xs[at..at + o.len()], kernels);
    };
    if parallel::num_threads() > 1 && n >= crate::kernels::iter::PAR_MIN_ELEMS {
        parallel::pool().install(|| o.par_chunks_mut(TILE).enumerate().for_each(run));
    } else {
        o.chunks_mut(TILE).enumerate().for_each(run);
    }
    Ok(())
}

/// One tile: `o[i] = g[i] * gelu'(x[i])`.
fn tile(o: &mut [f32], g: &[f32], x: &[f32], kernels: Tiles) {
    let n = o.len();
    let mut a = [0f32; TILE];
    let a = &mut a[..n];
    match kernels {
        Tiles::Tanh(tanh) => {
            let (k, kc) = (K as f32, (K * C) as f32);
            for (u, &v) in a.iter_mut().zip(x) {
                *u = v * (k + kc * (v * v));
            }
            // SAFETY: in place over `n` elements of one live buffer.
            unsafe { tanh(a.as_ptr(), a.as_mut_ptr(), n) };
            let k3c = (3.0 * K * C) as f32;
            for i in 0..n {
                let (t, v) = (a[i], x[i]);
                let d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * (k + k3c * (v * v));
                o[i] = g[i] * d;
            }
        }
        Tiles::Erf { erf, exp } => {
            let mut b = [0f32; TILE];
            let b = &mut b[..n];
            for i in 0..n {
                a[i] = x[i] * FRAC_1_SQRT_2 as f32;
                b[i] = -0.5 * (x[i] * x[i]);
            }
            // SAFETY: in place over `n` elements of live buffers.
            unsafe {
                erf(a.as_ptr(), a.as_mut_ptr(), n);
                exp(b.as_ptr(), b.as_mut_ptr(), n);
            }
            let inv = (1.0 / (2.0 * PI).sqrt()) as f32;
            for i in 0..n {
                o[i] = g[i] * (0.5 * (1.0 + a[i]) + x[i] * (b[i] * inv));
            }
        }
    }
}

fn gelu_backward_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let f = form(c.args)?;
    let (g, x) = (c.args.tensor(0)?, c.args.tensor(1)?);
    let up = c.grad(0)?;
    let d_grad = call1(
        &GELU_BACKWARD,
        &[
            Value::Tensor(up.clone()),
            Value::Tensor(x.clone()),
            Value::Str(f.as_str().into()),
        ],
    )?;
    let d_x = up.mul(g)?.mul(&second_derivative_ops(x, f)?)?;
    Ok(vec![
        Some(d_grad.sum_to_shape_of(g)?),
        Some(d_x.sum_to_shape_of(x)?),
    ])
}

/// `g * gelu'(x)` as a scalar expression over operands `g` (0) and `x` (1).
fn gelu_backward_expr(attrs: &[&Attr]) -> Result<ScalarExpr> {
    let f = match attrs.first() {
        None | Some(Attr::None) => GeluApproximate::None,
        Some(Attr::Str(s)) => GeluApproximate::parse(s)?,
        Some(other) => {
            return Err(Error::argument(
                "gelu_backward",
                "approximate",
                "\"none\" or \"tanh\"",
                other.to_string(),
            ));
        }
    };
    let (g, x) = (ScalarExpr::arg(0), ScalarExpr::arg(1));
    let lit = ScalarExpr::lit;
    let mul = |a: ScalarExpr, b: ScalarExpr| ScalarExpr::op(ScalarOp::Mul, [a, b]);
    let add = |a: ScalarExpr, b: ScalarExpr| ScalarExpr::op(ScalarOp::Add, [a, b]);
    let x2 = mul(x.clone(), x.clone());
    let d = match f {
        GeluApproximate::Tanh => {
            let u = mul(x.clone(), add(lit(K), mul(lit(K * C), x2.clone())));
            let t = ScalarExpr::op(ScalarOp::Tanh, [u]);
            let left = mul(lit(0.5), add(lit(1.0), t.clone()));
            let sech2 = ScalarExpr::op(ScalarOp::Sub, [lit(1.0), mul(t.clone(), t)]);
            let du = add(lit(K), mul(lit(3.0 * K * C), x2));
            add(left, mul(mul(lit(0.5), x), mul(sech2, du)))
        }
        GeluApproximate::None => {
            let erf = ScalarExpr::op(ScalarOp::Erf, [mul(lit(FRAC_1_SQRT_2), x.clone())]);
            let cdf = mul(lit(0.5), add(lit(1.0), erf));
            let pdf = mul(
                lit(1.0 / (2.0 * PI).sqrt()),
                ScalarExpr::op(ScalarOp::Exp, [mul(lit(-0.5), x2)]),
            );
            add(cdf, mul(x, pdf))
        }
    };
    Ok(mul(g, d))
}
