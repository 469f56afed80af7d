//! Activations with attributes: `leaky_relu(negative_slope)` and `softplus(beta, threshold)`.
//! Floating inputs only (PyTorch has no integer forms); f16/bf16 compute in f32 and round once.
//! Their scalar lowerings are expressions over `ScalarOp`s with the attributes as literals.

use half::{bf16, f16};
use tensorplay_ir::graph::Attr;
use tensorplay_ir::{DType, Error, OpClass, Result, ScalarExpr, ScalarOp};

use super::lowering::attr_num;
use super::{
    AutocastPolicy, DTypeRule, GradCtx, Kernel, Lower, OpDef, OutSpec, Pointwise, Saved, VmapRule,
};
use crate::dispatch::call1;
use crate::kernels::map::map1;
use crate::tensor::Tensor;
use crate::value::{Args, Value};

/// A floating input's spec (same shape and dtype); other dtypes are an error naming `op`.
fn float_meta(op: &str, a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(Error::dtype(
            op,
            format!("expected a floating point tensor, got {}", x.dtype()),
        ));
    }
    Ok(vec![OutSpec::new(x.shape(), x.dtype())])
}

/// Maps `f32`/`f64` scalar functions over argument 0 into `out` (halves through f32).
fn float_map(
    a: Args,
    out: &Tensor,
    f32f: impl Fn(f32) -> f32 + Sync,
    f64f: impl Fn(f64) -> f64 + Sync,
) -> Result<()> {
    let x = a.tensor(0)?;
    let op = a.op;
    match out.dtype() {
        DType::F32 => map1::<f32, f32>(op, out, x, f32f),
        DType::F64 => map1::<f64, f64>(op, out, x, f64f),
        DType::F16 => map1::<f16, f16>(op, out, x, |v| f16::from_f32(f32f(v.to_f32()))),
        DType::BF16 => map1::<bf16, bf16>(op, out, x, |v| bf16::from_f32(f32f(v.to_f32()))),
        d => Err(Error::dtype(
            op,
            format!("expected a floating point tensor, got {d}"),
        )),
    }
}

// ---- leaky_relu ----------------------------------------------------------------------------

/// PyTorch's default `negative_slope`.
pub const LEAKY_RELU_SLOPE: f64 = 0.01;

fn leaky_relu_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let s = a.float(1)?;
    let s32 = s as f32;
    float_map(
        a,
        &outs[0],
        |x| if x > 0.0 { x } else { x * s32 },
        |x| if x > 0.0 { x } else { x * s },
    )
}

/// `grad * (x > 0 ? 1 : slope)`.
fn leaky_relu_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let s = c.args.float(1)?;
    let pos = x.gt_scalar(0.0)?.to_dtype(g.dtype())?;
    let factor = pos.mul_scalar(1.0 - s)?.add_scalar(s)?;
    Ok(vec![Some(g.mul(&factor)?)])
}

/// `where(x > 0, x, x * negative_slope)`.
fn leaky_relu_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    let s = attr_num(
        "leaky_relu",
        "negative_slope",
        attrs.first(),
        LEAKY_RELU_SLOPE,
    )?;
    let x = ScalarExpr::arg(0);
    Ok(ScalarExpr::op(
        ScalarOp::Where,
        [
            ScalarExpr::op(ScalarOp::Gt, [x.clone(), ScalarExpr::lit(0.0)]),
            x.clone(),
            ScalarExpr::op(ScalarOp::Mul, [x, ScalarExpr::lit(s)]),
        ],
    ))
}

/// `leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor`
pub static LEAKY_RELU: OpDef = OpDef {
    name: "leaky_relu",
    schema: "leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: |a| float_meta("leaky_relu", a),
        fill: leaky_relu_fill,
    },
    derivative: Some(leaky_relu_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise {
        expr: leaky_relu_lowering,
        dtype: DTypeRule::FloatOnly,
        float_only: false,
    }),
    autocast: AutocastPolicy::Keep,
    vmap: VmapRule::Derived,
};

// ---- softplus ------------------------------------------------------------------------------

/// PyTorch's default `beta` and `threshold`.
pub const SOFTPLUS_BETA: f64 = 1.0;
pub const SOFTPLUS_THRESHOLD: f64 = 20.0;

fn softplus_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (b, t) = (a.float(1)?, a.float(2)?);
    let (b32, t32) = (b as f32, t as f32);
    float_map(
        a,
        &outs[0],
        |x| {
            let z = x * b32;
            if z > t32 { x } else { z.exp().ln_1p() / b32 }
        },
        |x| {
            let z = x * b;
            if z > t { x } else { z.exp().ln_1p() / b }
        },
    )
}

/// `grad * (x beta > threshold ? 1 : sigmoid(x beta))`.
fn softplus_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let (b, t) = (c.args.float(1)?, c.args.float(2)?);
    let z = x.mul_scalar(b)?;
    let linear = z.gt_scalar(t)?;
    let one = Tensor::ones(&[], z.dtype());
    let factor = Tensor::where_cond(&linear, &one, &z.sigmoid()?)?;
    Ok(vec![Some(g.mul(&factor)?)])
}

/// `where(x * beta > threshold, x, log1p(exp(x * beta)) / beta)`.
fn softplus_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    let b = attr_num("softplus", "beta", attrs.first(), SOFTPLUS_BETA)?;
    let t = attr_num("softplus", "threshold", attrs.get(1), SOFTPLUS_THRESHOLD)?;
    let x = ScalarExpr::arg(0);
    let z = ScalarExpr::op(ScalarOp::Mul, [x.clone(), ScalarExpr::lit(b)]);
    let soft = ScalarExpr::op(
        ScalarOp::Div,
        [
            ScalarExpr::op(
                ScalarOp::Log1p,
                [ScalarExpr::op(ScalarOp::Exp, [z.clone()])],
            ),
            ScalarExpr::lit(b),
        ],
    );
    Ok(ScalarExpr::op(
        ScalarOp::Where,
        [
            ScalarExpr::op(ScalarOp::Gt, [z, ScalarExpr::lit(t)]),
            x,
            soft,
        ],
    ))
}

/// `softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor`
pub static SOFTPLUS: OpDef = OpDef {
    name: "softplus",
    schema: "softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
    class: OpClass::Elementwise,
    kernel: Kernel::Compute {
        meta: |a| float_meta("softplus", a),
        fill: softplus_fill,
    },
    derivative: Some(softplus_grad),
    saved: Saved::Inputs,
    lower: Lower::Pointwise(Pointwise {
        expr: softplus_lowering,
        dtype: DTypeRule::FloatOnly,
        float_only: false,
    }),
    autocast: AutocastPolicy::F32,
    vmap: VmapRule::Derived,
};

impl Tensor {
    /// `x` where `x > 0`, else `x * negative_slope` (PyTorch's default slope is
    /// [`LEAKY_RELU_SLOPE`]). Floating tensors only.
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![-2.0f32, 3.0], &[2])?;
    /// assert_eq!(x.leaky_relu(0.1)?.to_vec::<f32>()?, vec![-2.0 * 0.1, 3.0]);
    /// assert!(Tensor::from_vec(vec![1i64], &[1])?.leaky_relu(0.1).is_err());
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn leaky_relu(&self, negative_slope: f64) -> Result<Tensor> {
        call1(&LEAKY_RELU, &[self.into(), Value::Float(negative_slope)])
    }

    /// `log(1 + exp(beta x)) / beta`, or `x` itself where `beta x > threshold` (PyTorch's
    /// defaults are [`SOFTPLUS_BETA`] and [`SOFTPLUS_THRESHOLD`]). Floating tensors only.
    ///
    /// ```
    /// use tensorplay_runtime::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 30.0], &[2])?;
    /// let y = x.softplus(1.0, 20.0)?.to_vec::<f64>()?;
    /// assert!((y[0] - 2f64.ln()).abs() < 1e-15);
    /// assert_eq!(y[1], 30.0);
    /// # Ok::<(), tensorplay_runtime::Error>(())
    /// ```
    pub fn softplus(&self, beta: f64, threshold: f64) -> Result<Tensor> {
        call1(
            &SOFTPLUS,
            &[self.into(), Value::Float(beta), Value::Float(threshold)],
        )
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[&LEAKY_RELU, &SOFTPLUS];
