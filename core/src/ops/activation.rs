//! Activations with attributes: `leaky_relu(negative_slope)`, `softplus(beta, threshold)`,
//! `elu`, `hardtanh`, `hardsigmoid`, `hardswish`, `mish` and `logit`.
//! Floating inputs only (PyTorch has no integer forms); f16/bf16 compute in f32 and round once.
//! Their scalar lowerings are expressions over `ScalarOp`s with the attributes as literals.

use half::{bf16, f16};
use tensorplay_ir::graph::Attr;
use tensorplay_ir::{DType, Error, OpClass, Result, ScalarExpr, ScalarOp};

use super::lowering::{attr_f64, attr_num};
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

/// Declares an activation's `OpDef`: elementwise, computed by `meta` (`float`: [`float_meta`]
/// under the op's name) and `fill`, differentiated by `grad` from the saved inputs, lowered to the
/// pointwise expression `lower` under `DTypeRule::$dtype` (never `float_only`), cast by
/// `AutocastPolicy::$autocast`, batched by the derived vmap rule. Its doc is its schema.
macro_rules! activation {
    ($STATIC:ident, $name:literal, $schema:literal, meta = float, $($rest:tt)*) => {
        activation!($STATIC, $name, $schema, meta = |a| float_meta($name, a), $($rest)*);
    };
    ($STATIC:ident, $name:literal, $schema:literal, meta = $meta:expr, fill = $fill:expr,
     grad = $grad:expr, lower = $lower:expr, dtype = $dtype:ident, autocast = $ac:ident) => {
        #[doc = concat!("`", $schema, "`")]
        pub static $STATIC: OpDef = OpDef {
            name: $name,
            schema: $schema,
            class: OpClass::Elementwise,
            kernel: Kernel::Compute {
                meta: $meta,
                fill: $fill,
            },
            derivative: Some($grad),
            saved: Saved::Inputs,
            lower: Lower::Pointwise(Pointwise {
                expr: $lower,
                dtype: DTypeRule::$dtype,
                float_only: false,
            }),
            autocast: AutocastPolicy::$ac,
            vmap: VmapRule::Derived,
        };
    };
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

activation! {
    LEAKY_RELU, "leaky_relu",
    "leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
    meta = float, fill = leaky_relu_fill, grad = leaky_relu_grad,
    lower = leaky_relu_lowering, dtype = FloatOnly, autocast = Keep
}

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

activation! {
    SOFTPLUS, "softplus",
    "softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
    meta = float, fill = softplus_fill, grad = softplus_grad,
    lower = softplus_lowering, dtype = FloatOnly, autocast = F32
}

impl Tensor {
    /// `x` where `x > 0`, else `x * negative_slope` (PyTorch's default slope is
    /// [`LEAKY_RELU_SLOPE`]). Floating tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-2.0f32, 3.0], &[2])?;
    /// assert_eq!(x.leaky_relu(0.1)?.to_vec::<f32>()?, vec![-2.0 * 0.1, 3.0]);
    /// assert!(Tensor::from_vec(vec![1i64], &[1])?.leaky_relu(0.1).is_err());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn leaky_relu(&self, negative_slope: f64) -> Result<Tensor> {
        call1(&LEAKY_RELU, &[self.into(), Value::Float(negative_slope)])
    }

    /// `log(1 + exp(beta x)) / beta`, or `x` itself where `beta x > threshold` (PyTorch's
    /// defaults are [`SOFTPLUS_BETA`] and [`SOFTPLUS_THRESHOLD`]). Floating tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 30.0], &[2])?;
    /// let y = x.softplus(1.0, 20.0)?.to_vec::<f64>()?;
    /// assert!((y[0] - 2f64.ln()).abs() < 1e-15);
    /// assert_eq!(y[1], 30.0);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn softplus(&self, beta: f64, threshold: f64) -> Result<Tensor> {
        call1(
            &SOFTPLUS,
            &[self.into(), Value::Float(beta), Value::Float(threshold)],
        )
    }
}

// ---- elu -----------------------------------------------------------------------------------

/// `(scale, alpha * scale, input_scale)` of an elu call.
fn elu_coefs(a: Args) -> Result<(f64, f64, f64)> {
    let (alpha, scale, input_scale) = (a.float(1)?, a.float(2)?, a.float(3)?);
    Ok((scale, alpha * scale, input_scale))
}

fn elu_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (pos, neg, inp) = elu_coefs(a)?;
    let (p32, n32, i32_) = (pos as f32, neg as f32, inp as f32);
    float_map(
        a,
        &outs[0],
        |x| {
            if x > 0.0 {
                x * p32
            } else {
                (x * i32_).exp_m1() * n32
            }
        },
        |x| {
            if x > 0.0 {
                x * pos
            } else {
                (x * inp).exp_m1() * neg
            }
        },
    )
}

/// `grad * scale` where `x > 0`, else `grad * alpha * scale * input_scale * exp(x input_scale)`.
fn elu_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let (pos, neg, inp) = elu_coefs(c.args)?;
    let neg_slope = x.mul_scalar(inp)?.exp()?.mul_scalar(neg * inp)?;
    let pos_slope = Tensor::try_full(&[], pos, neg_slope.dtype())?;
    let slope = Tensor::where_cond(&x.gt_scalar(0.0)?, &pos_slope, &neg_slope)?;
    Ok(vec![Some(g.mul(&slope)?)])
}

/// `where(x > 0, x * scale, expm1(x * input_scale) * (alpha * scale))`.
fn elu_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    let alpha = attr_num("elu", "alpha", attrs.first(), 1.0)?;
    let scale = attr_num("elu", "scale", attrs.get(1), 1.0)?;
    let inp = attr_num("elu", "input_scale", attrs.get(2), 1.0)?;
    let x = ScalarExpr::arg(0);
    let neg = ScalarExpr::op(
        ScalarOp::Mul,
        [
            ScalarExpr::op(
                ScalarOp::Expm1,
                [ScalarExpr::op(
                    ScalarOp::Mul,
                    [x.clone(), ScalarExpr::lit(inp)],
                )],
            ),
            ScalarExpr::lit(alpha * scale),
        ],
    );
    Ok(ScalarExpr::op(
        ScalarOp::Where,
        [
            ScalarExpr::op(ScalarOp::Gt, [x.clone(), ScalarExpr::lit(0.0)]),
            ScalarExpr::op(ScalarOp::Mul, [x, ScalarExpr::lit(scale)]),
            neg,
        ],
    ))
}

activation! {
    ELU, "elu",
    "elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor",
    meta = float, fill = elu_fill, grad = elu_grad,
    lower = elu_lowering, dtype = FloatOnly, autocast = Keep
}

// ---- hardtanh ------------------------------------------------------------------------------

fn hardtanh_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let (lo, hi) = (a.float(1)?, a.float(2)?);
    let (lo32, hi32) = (lo as f32, hi as f32);
    // NaN propagates, as clamp's comparisons leave it.
    float_map(
        a,
        &outs[0],
        |x| {
            let v = if x < lo32 { lo32 } else { x };
            if v > hi32 { hi32 } else { v }
        },
        |x| {
            let v = if x < lo { lo } else { x };
            if v > hi { hi } else { v }
        },
    )
}

/// `grad` strictly inside `(min_val, max_val)`, else 0 (PyTorch's rule).
fn hardtanh_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let (lo, hi) = (c.args.float(1)?, c.args.float(2)?);
    let inside = x.gt_scalar(lo)?.logical_and(&x.lt_scalar(hi)?)?;
    Ok(vec![Some(g.mul(&inside.to_dtype(g.dtype())?)?)])
}

fn hardtanh_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    Ok(ScalarExpr::unary(ScalarOp::Clamp {
        min: Some(attr_num("hardtanh", "min_val", attrs.first(), -1.0)?),
        max: Some(attr_num("hardtanh", "max_val", attrs.get(1), 1.0)?),
    }))
}

/// [`float_meta`], and `min_val <= max_val` (PyTorch's functional `hardtanh` raises otherwise;
/// NaN bounds pass, as there).
fn hardtanh_meta(a: Args) -> Result<Vec<OutSpec>> {
    let (lo, hi) = (a.float(1)?, a.float(2)?);
    if lo > hi {
        return Err(Error::argument(
            "hardtanh",
            "min_val",
            format!("at most max_val ({hi})"),
            lo.to_string(),
        ));
    }
    float_meta("hardtanh", a)
}

activation! {
    HARDTANH, "hardtanh",
    "hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
    meta = hardtanh_meta, fill = hardtanh_fill, grad = hardtanh_grad,
    lower = hardtanh_lowering, dtype = FloatOnly, autocast = Keep
}

// ---- hardsigmoid, hardswish ----------------------------------------------------------------

/// `min(max(x + 3, 0), 6)` with NaN propagating, in `f32` or `f64`.
macro_rules! relu6_shift {
    ($x:expr) => {{
        let t = $x + 3.0;
        let t = if t < 0.0 { 0.0 } else { t };
        if t > 6.0 { 6.0 } else { t }
    }};
}

/// `clamp(x + 3, 0, 6)` as an expression.
fn relu6_shift_expr() -> ScalarExpr {
    ScalarExpr::op(
        ScalarOp::Clamp {
            min: Some(0.0),
            max: Some(6.0),
        },
        [ScalarExpr::op(
            ScalarOp::Add,
            [ScalarExpr::arg(0), ScalarExpr::lit(3.0)],
        )],
    )
}

fn hardsigmoid_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    float_map(
        a,
        &outs[0],
        |x: f32| relu6_shift!(x) / 6.0,
        |x: f64| relu6_shift!(x) / 6.0,
    )
}

/// grad / 6 strictly inside (-3, 3), else 0.
fn hardsigmoid_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let inside = x.gt_scalar(-3.0)?.logical_and(&x.lt_scalar(3.0)?)?;
    Ok(vec![Some(
        g.mul(&inside.to_dtype(g.dtype())?)?.div_scalar(6.0)?,
    )])
}

/// `clamp(x + 3, 0, 6) / 6`.
fn hardsigmoid_lowering(_: &[&Attr]) -> Result<ScalarExpr> {
    Ok(ScalarExpr::op(
        ScalarOp::Div,
        [relu6_shift_expr(), ScalarExpr::lit(6.0)],
    ))
}

activation! {
    HARDSIGMOID, "hardsigmoid",
    "hardsigmoid(Tensor self) -> Tensor",
    meta = float, fill = hardsigmoid_fill, grad = hardsigmoid_grad,
    lower = hardsigmoid_lowering, dtype = FloatOnly, autocast = Keep
}

fn hardswish_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    float_map(
        a,
        &outs[0],
        |x: f32| x * relu6_shift!(x) / 6.0,
        |x: f64| x * relu6_shift!(x) / 6.0,
    )
}

/// 0 at and below -3, grad (x / 3 + 0.5) strictly inside (-3, 3), grad at and above 3 (and at
/// NaN), as PyTorch's `x <= -3 ? 0 : (x < 3 ? x/3 + 0.5 : 1)`.
fn hardswish_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let z = Tensor::zeros(&[], g.dtype());
    let one = Tensor::ones(&[], g.dtype());
    let mid = x.div_scalar(3.0)?.add_scalar(0.5)?;
    let slope = Tensor::where_cond(&x.lt_scalar(3.0)?, &mid, &one)?;
    let slope = Tensor::where_cond(&x.le_scalar(-3.0)?, &z, &slope)?;
    Ok(vec![Some(g.mul(&slope)?)])
}

/// `x * clamp(x + 3, 0, 6) / 6`.
fn hardswish_lowering(_: &[&Attr]) -> Result<ScalarExpr> {
    Ok(ScalarExpr::op(
        ScalarOp::Div,
        [
            ScalarExpr::op(ScalarOp::Mul, [ScalarExpr::arg(0), relu6_shift_expr()]),
            ScalarExpr::lit(6.0),
        ],
    ))
}

activation! {
    HARDSWISH, "hardswish",
    "hardswish(Tensor self) -> Tensor",
    meta = float, fill = hardswish_fill, grad = hardswish_grad,
    lower = hardswish_lowering, dtype = FloatOnly, autocast = Keep
}

// ---- mish ----------------------------------------------------------------------------------

/// Below this, `mish(x) = x tanh(log1p(e^x))` equals `silu(x) = x / (1 + e^-x)` to within
/// `e^x / 2` relative (< 2^-55), and silu keeps subnormal results at full precision where the
/// product `x * e^x` of the literal form would amplify the rounding of a subnormal `e^x`.
const MISH_TAIL: f64 = -38.0;

/// mish in f64: the literal form, or silu in the far negative tail.
fn mish_f64(x: f64) -> f64 {
    if x < MISH_TAIL {
        super::unary::silu_f64(x)
    } else {
        x * x.exp().ln_1p().tanh()
    }
}

/// f32 (and halves) evaluate in f64 and round once: the three steep functions would otherwise
/// compound their roundings.
fn mish_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    float_map(a, &outs[0], |x| mish_f64(x as f64) as f32, mish_f64)
}

/// tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
fn mish_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let t = x.exp()?.log1p()?.tanh()?;
    let sech2 = t.mul(&t)?.neg()?.add_scalar(1.0)?;
    let d = t.add(&x.mul(&x.sigmoid()?)?.mul(&sech2)?)?;
    Ok(vec![Some(g.mul(&d)?)])
}

/// `where(x < MISH_TAIL, silu(x), x * tanh(log1p(exp(x))))`.
fn mish_lowering(_: &[&Attr]) -> Result<ScalarExpr> {
    let x = ScalarExpr::arg(0);
    let sp = ScalarExpr::op(
        ScalarOp::Log1p,
        [ScalarExpr::op(ScalarOp::Exp, [x.clone()])],
    );
    Ok(ScalarExpr::op(
        ScalarOp::Where,
        [
            ScalarExpr::op(ScalarOp::Lt, [x.clone(), ScalarExpr::lit(MISH_TAIL)]),
            ScalarExpr::op(ScalarOp::Silu, [x.clone()]),
            ScalarExpr::op(ScalarOp::Mul, [x, ScalarExpr::op(ScalarOp::Tanh, [sp])]),
        ],
    ))
}

activation! {
    MISH, "mish",
    "mish(Tensor self) -> Tensor",
    meta = float, fill = mish_fill, grad = mish_grad,
    lower = mish_lowering, dtype = FloatOnly, autocast = Keep
}

// ---- logit ---------------------------------------------------------------------------------

/// Same shape; integer and bool inputs give f32 (PyTorch promotes them).
fn logit_meta(a: Args) -> Result<Vec<OutSpec>> {
    let x = a.tensor(0)?;
    a.opt_float(1)?;
    Ok(vec![OutSpec::new(x.shape(), x.dtype().to_float())])
}

fn logit_fill(a: Args, outs: &[Tensor]) -> Result<()> {
    let eps = a.opt_float(1)?;
    let x = super::binary::as_dtype(a.tensor(0)?, outs[0].dtype())?;
    let values = [Value::Tensor(x), Value::None];
    let b = Args::new(a.op, &values);
    // The same operations compiled code runs: clamp (NaN kept), then log(x / (1 - x)); f16 and
    // bf16 compute in f32 and round once.
    match eps {
        None => float_map(
            b,
            &outs[0],
            |x: f32| (x / (1.0 - x)).ln(),
            |x: f64| (x / (1.0 - x)).ln(),
        ),
        Some(e) => {
            // PyTorch's clamp, `x < lo ? lo : (x > hi ? hi : x)` with `lo = eps` and `hi = 1 - eps`
            // computed in the compute dtype (f32 below f64): for `eps > 0.5` (lo > hi) values
            // below `lo` become `lo` and the rest `hi`.
            let (lo32, hi32) = (e as f32, 1.0 - e as f32);
            float_map(
                b,
                &outs[0],
                |x| {
                    let v = if x < lo32 {
                        lo32
                    } else if x > hi32 {
                        hi32
                    } else {
                        x
                    };
                    (v / (1.0 - v)).ln()
                },
                |x| {
                    let v = if x < e {
                        e
                    } else if x > 1.0 - e {
                        1.0 - e
                    } else {
                        x
                    };
                    (v / (1.0 - v)).ln()
                },
            )
        }
    }
}

/// `grad / (x (1 - x))`; outside `[eps, 1 - eps]` 0 when `eps` is given, outside `[0, 1]` NaN
/// when not (PyTorch's rule).
fn logit_grad(c: &GradCtx) -> Result<Vec<Option<Tensor>>> {
    let (x, g) = (c.args.tensor(0)?, c.grad(0)?);
    let d = g.div(&x.mul(&x.neg()?.add_scalar(1.0)?)?)?;
    let (lo, hi, fill) = match c.args.opt_float(1)? {
        Some(e) => (e, 1.0 - e, 0.0),
        None => (0.0, 1.0, f64::NAN),
    };
    let outside = x.lt_scalar(lo)?.logical_or(&x.gt_scalar(hi)?)?;
    let fill = Tensor::try_full(&[], fill, d.dtype())?;
    Ok(vec![Some(Tensor::where_cond(&outside, &fill, &d)?)])
}

fn logit_lowering(attrs: &[&Attr]) -> Result<ScalarExpr> {
    let mut x = ScalarExpr::arg(0);
    if let Some(e) = attr_f64("logit", "eps", attrs.first())? {
        // `x < lo ? lo : (x > hi ? hi : x)` with `hi = 1 - lo` in the compute dtype, as eager.
        let lo = ScalarExpr::lit(e);
        let hi = ScalarExpr::op(ScalarOp::Sub, [ScalarExpr::lit(1.0), lo.clone()]);
        let upper = ScalarExpr::op(
            ScalarOp::Where,
            [
                ScalarExpr::op(ScalarOp::Gt, [x.clone(), hi.clone()]),
                hi,
                x.clone(),
            ],
        );
        x = ScalarExpr::op(
            ScalarOp::Where,
            [ScalarExpr::op(ScalarOp::Lt, [x, lo.clone()]), lo, upper],
        );
    }
    let q = ScalarExpr::op(
        ScalarOp::Div,
        [
            x.clone(),
            ScalarExpr::op(ScalarOp::Sub, [ScalarExpr::lit(1.0), x]),
        ],
    );
    Ok(ScalarExpr::op(ScalarOp::Log, [q]))
}

activation! {
    LOGIT, "logit",
    "logit(Tensor self, float? eps=None) -> Tensor",
    meta = logit_meta, fill = logit_fill, grad = logit_grad,
    lower = logit_lowering, dtype = Float, autocast = Keep
}

impl Tensor {
    /// Exponential linear unit: `x * scale` where `x > 0`, else
    /// `alpha * scale * (exp(x * input_scale) - 1)` (PyTorch's defaults are all 1). Floating
    /// tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-1.0f64, 2.0], &[2])?;
    /// let y = x.elu(1.0, 1.0, 1.0)?.to_vec::<f64>()?;
    /// assert_eq!(y, vec![(-1.0f64).exp_m1(), 2.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn elu(&self, alpha: f64, scale: f64, input_scale: f64) -> Result<Tensor> {
        call1(
            &ELU,
            &[
                self.into(),
                Value::Float(alpha),
                Value::Float(scale),
                Value::Float(input_scale),
            ],
        )
    }

    /// `clamp(x, min_val, max_val)` as an activation (PyTorch's defaults are -1 and 1); NaN
    /// propagates. Floating tensors only; `min_val > max_val` is an argument error (as
    /// PyTorch's `torch.nn.functional.hardtanh`).
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-3.0f32, 0.5, 2.0], &[3])?;
    /// assert_eq!(x.hardtanh(-1.0, 1.0)?.to_vec::<f32>()?, vec![-1.0, 0.5, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn hardtanh(&self, min_val: f64, max_val: f64) -> Result<Tensor> {
        call1(
            &HARDTANH,
            &[self.into(), Value::Float(min_val), Value::Float(max_val)],
        )
    }

    /// `min(max(x + 3, 0), 6) / 6`. Floating tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-4.0f32, 0.0, 4.0], &[3])?;
    /// assert_eq!(x.hardsigmoid()?.to_vec::<f32>()?, vec![0.0, 0.5, 1.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn hardsigmoid(&self) -> Result<Tensor> {
        call1(&HARDSIGMOID, &[self.into()])
    }

    /// `x * min(max(x + 3, 0), 6) / 6`. Floating tensors only.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![-4.0f32, 1.0, 4.0], &[3])?;
    /// assert_eq!(x.hardswish()?.to_vec::<f32>()?, vec![-0.0, 1.0 * 4.0 / 6.0, 4.0]);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn hardswish(&self) -> Result<Tensor> {
        call1(&HARDSWISH, &[self.into()])
    }

    /// `x * tanh(softplus(x))` (softplus without threshold, as PyTorch's mish). Floating
    /// tensors only; f32 evaluates in f64 and rounds once.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.0f64, 1.0], &[2])?;
    /// let y = x.mish()?.to_vec::<f64>()?;
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 0.865_098_388_267_310_3).abs() < 1e-14);
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn mish(&self) -> Result<Tensor> {
        call1(&MISH, &[self.into()])
    }

    /// `log(x / (1 - x))`, with `x` first clamped to `[eps, 1 - eps]` when `eps` is given
    /// (NaN passes the clamp). Integer and bool tensors compute in f32.
    ///
    /// ```
    /// use tensorplay_core::Tensor;
    /// let x = Tensor::from_vec(vec![0.5f32, 0.0, 1.0], &[3])?;
    /// assert_eq!(x.logit(None)?.to_vec::<f32>()?, vec![0.0, f32::NEG_INFINITY, f32::INFINITY]);
    /// let y = x.logit(Some(0.25))?.to_vec::<f32>()?;
    /// assert_eq!(y[1], (0.25f32 / 0.75).ln());
    /// # Ok::<(), tensorplay_core::Error>(())
    /// ```
    pub fn logit(&self, eps: Option<f64>) -> Result<Tensor> {
        call1(
            &LOGIT,
            &[self.into(), eps.map_or(Value::None, Value::Float)],
        )
    }
}

/// Every op of this family.
pub static OPS: &[&OpDef] = &[
    &LEAKY_RELU,
    &SOFTPLUS,
    &ELU,
    &HARDTANH,
    &HARDSIGMOID,
    &HARDSWISH,
    &MISH,
    &LOGIT,
];
