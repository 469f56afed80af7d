//! `gelu_backward`: the one-pass f32 kernel against the formula written with tensor ops (f64),
//! every other layout and dtype, gelu's gradient through it, and its own derivative (double
//! backward) by finite differences.

use tensorplay_runtime::autograd::{self, GradcheckOptions, gradcheck};
use tensorplay_runtime::ops::gelu_backward::GELU_BACKWARD;
use tensorplay_runtime::{DType, Result, Tensor, Value, dispatch::call1};

fn gelu_backward(g: &Tensor, x: &Tensor, form: &str) -> Result<Tensor> {
    call1(
        &GELU_BACKWARD,
        &[
            Value::Tensor(g.clone()),
            Value::Tensor(x.clone()),
            Value::Str(form.into()),
        ],
    )
}

/// `g * gelu'(x)` in f64 from its closed form.
fn reference(g: f64, x: f64, form: &str) -> f64 {
    let d = if form == "tanh" {
        let (k, c) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
        let t = (k * (x + c * x * x * x)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x)
    } else {
        let cdf = 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
        cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
    };
    g * d
}

fn worst(got: &Tensor, g: &Tensor, x: &Tensor, form: &str) -> f64 {
    let (got, g, x) = (
        got.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        g.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        x.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    got.iter()
        .zip(g.iter().zip(&x))
        // Relative to the scale of the terms: near gelu's minimum (x ~ -0.75) the derivative
        // is a cancellation of terms of size ~0.5 |g|.
        .map(|(o, (&g, &x))| {
            (o - reference(g, x, form)).abs()
                / (reference(g, x, form).abs() + 0.5 * g.abs()).max(1e-30)
        })
        .fold(0.0, f64::max)
}

#[test]
fn matches_the_closed_form_in_every_layout_and_dtype() -> Result<()> {
    // 70_001 elements: many tiles, a ragged last one, and the thread pool.
    let x = Tensor::randn_seeded(&[70_001], DType::F32, 1)?.mul_scalar(3.0)?;
    let g = Tensor::randn_seeded(&[70_001], DType::F32, 2)?;
    for form in ["none", "tanh"] {
        let y = gelu_backward(&g, &x, form)?;
        assert!(
            worst(&y, &g, &x, form) < 1e-4,
            "{form}: {}",
            worst(&y, &g, &x, form)
        );
        // Strided operands, f64, halves and a broadcast gradient take the tensor-op formula.
        let xt = Tensor::randn_seeded(&[40, 30], DType::F32, 3)?.transpose(0, 1)?;
        let gt = Tensor::randn_seeded(&[30, 40], DType::F32, 4)?;
        let y = gelu_backward(&gt, &xt, form)?;
        assert!(worst(&y, &gt, &xt, form) < 1e-4);
        let (x64, g64) = (x.to_dtype(DType::F64)?, g.to_dtype(DType::F64)?);
        let y = gelu_backward(&g64, &x64, form)?;
        assert_eq!(y.dtype(), DType::F64);
        assert!(worst(&y, &g64, &x64, form) < 1e-12);
        let (xh, gh) = (x.to_dtype(DType::BF16)?, g.to_dtype(DType::BF16)?);
        let y = gelu_backward(&gh, &xh, form)?;
        assert_eq!(y.dtype(), DType::BF16);
        assert!(worst(&y, &gh, &xh, form) < 2e-2);
        let gb = Tensor::ones(&[1], DType::F32);
        let y = gelu_backward(&gb, &x, form)?;
        assert!(worst(&y, &gb.expand(&[70_001])?, &x, form) < 1e-4);
    }
    Ok(())
}

#[test]
fn gelu_gradient_and_double_backward() -> Result<()> {
    for form in ["none", "tanh"] {
        let x = Tensor::randn_seeded(&[3, 4], DType::F64, 5)?.requires_grad_(true)?;
        let y = x.gelu(form)?;
        let g = autograd::grad(&[y.sum_all()?], std::slice::from_ref(&x), &[None], true)?
            .remove(0)
            .unwrap();
        let want = gelu_backward(&Tensor::ones(&[3, 4], DType::F64), &x.detach(), form)?;
        assert_eq!(g.detach().to_vec::<f64>()?, want.to_vec::<f64>()?);
        // Both inputs of gelu_backward, through its derivative, against finite differences.
        let ins = [
            Tensor::randn_seeded(&[3, 4], DType::F64, 6)?.requires_grad_(true)?,
            Tensor::randn_seeded(&[3, 4], DType::F64, 7)?.requires_grad_(true)?,
        ];
        gradcheck(
            |t| gelu_backward(&t[0], &t[1], form),
            &ins,
            GradcheckOptions::default(),
        )?;
    }
    Ok(())
}

#[test]
fn bad_arguments_are_errors() {
    let x = Tensor::ones(&[2], DType::F32);
    let msg = gelu_backward(&x, &x, "fast").unwrap_err().to_string();
    assert!(msg.contains("approximate"), "{msg}");
    let i = Tensor::ones(&[2], DType::I64);
    let msg = gelu_backward(&i, &i, "none").unwrap_err().to_string();
    assert!(msg.contains("gelu_backward"), "{msg}");
    let msg = gelu_backward(&x, &Tensor::ones(&[3], DType::F32), "none")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("gelu_backward"), "{msg}");
}
