//! The anchor workloads shared by several benchmarks (see `shared/anchors/cpu-anchors.md`), as
//! TensorPlay closures: eager and compiled runs call the same function.

use tensorplay::{Result, Tensor};

/// W1: `0.5*x*(1+tanh(0.7978845608*(x+0.044715*x^3)))`.
pub fn w1(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &xs[0];
    let inner = x
        .add(&x.pow_scalar(3.0)?.mul_scalar(0.044715)?)?
        .mul_scalar(0.7978845608)?;
    Ok(vec![
        x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?,
    ])
}

/// W2: `a*sigmoid(a)*b`.
pub fn w2(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].mul(&xs[0].sigmoid()?)?.mul(&xs[1])?])
}
