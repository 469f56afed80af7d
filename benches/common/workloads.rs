//! The anchor workloads shared by several benchmarks (see `shared/anchors/cpu-anchors.md`), as
//! TensorPlay closures: eager and compiled runs call the same function. Each includer uses some
//! of them.
#![allow(dead_code)]

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

/// W3: `relu(x + bias) + r`, bias broadcast over rows.
pub fn w3(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].add(&xs[1])?.relu()?.add(&xs[2])?])
}

/// W4: `(x*w).sum()`.
pub fn w4(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].mul(&xs[1])?.sum_all()?])
}

/// W5: softmax over the last dim.
pub fn w5(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].softmax(-1)?])
}

/// W6: `sqrt(abs((((x*1.1+0.3)*x-0.7)/(x*x+1))+x))` (10 ops).
pub fn w6(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &xs[0];
    let num = x
        .mul_scalar(1.1)?
        .add_scalar(0.3)?
        .mul(x)?
        .sub_scalar(0.7)?;
    let den = x.mul(x)?.add_scalar(1.0)?;
    Ok(vec![num.div(&den)?.add(x)?.abs()?.sqrt()?])
}
