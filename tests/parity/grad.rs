//! Gradient cases: `record.py`'s `gcase` ran the op in PyTorch with some tensor arguments as
//! leaves and recorded their gradients for a random upstream gradient; here the same arguments
//! become leaves of TensorPlay's autograd, the forward runs as a forward case would, and
//! `autograd::grad` gives the gradients compared with PyTorch's.

use crate::compare::ulp_tolerance;
use crate::data::{Arg, Case};
use tensorplay::{DType, Error, Result, Tensor, autograd};

fn leaf(t: &Tensor) -> Result<Tensor> {
    t.detach().requires_grad_(true)
}

/// The gradients of the case's leaves (in the order of `wrt`, a list's tensors in order); a
/// leaf no output depends on gets zeros, as PyTorch's `materialize_grads=True`.
pub(crate) fn run(c: &Case) -> Result<Vec<Tensor>> {
    let spec = c.grad.as_ref().expect("a gradient case");
    let mut args = c.args.clone();
    let mut leaves = Vec::new();
    for &i in &spec.wrt {
        args[i] = match &args[i] {
            Arg::Tensor(t) => {
                let l = leaf(t)?;
                leaves.push(l.clone());
                Arg::Tensor(l)
            }
            Arg::Tensors(ts) => {
                let ls = ts.iter().map(leaf).collect::<Result<Vec<_>>>()?;
                leaves.extend(ls.iter().cloned());
                Arg::Tensors(ls)
            }
            _ => panic!("case {}: argument {i} is not a tensor", c.index),
        };
    }
    let forward = Case {
        index: c.index,
        op: c.op,
        args,
        kw: c.kw.clone(),
        expect: None,
        error: None,
        grad: None,
        reference: false,
    };
    let outs = crate::run::run(&forward)?;
    if outs.len() != spec.up.len() {
        return Err(Error::argument(
            c.op,
            "outputs",
            format!("{} outputs (PyTorch's)", spec.up.len()),
            outs.len().to_string(),
        ));
    }
    let (ys, ups): (Vec<Tensor>, Vec<Option<Tensor>>) = outs
        .iter()
        .zip(&spec.up)
        .filter_map(|(y, u)| u.as_ref().map(|u| (y.clone(), Some(u.clone()))))
        .unzip();
    let grads = autograd::grad(&ys, &leaves, &ups, false)?;
    Ok(grads
        .into_iter()
        .zip(&leaves)
        .map(|(g, l)| g.unwrap_or_else(|| Tensor::zeros_like(l)))
        .collect())
}

/// The machine epsilon of a float dtype (the ulp of 1).
pub(crate) fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F32 => 2f64.powi(-23),
        _ => 2f64.powi(-52),
    }
}

/// Ulps of the largest gradient element every element of a gradient may be off by.
pub(crate) const NORMWISE_ULPS: f64 = 4.0;

/// The absolute bound of a gradient's elements: [`NORMWISE_ULPS`] ulps of its largest finite
/// element (PyTorch's). A backward formula sums terms of the size of the largest gradients
/// (the chain rule's, a reduction's, a normalization's `x̂·Σ g·x̂`), in its own order, so the
/// rounding error of a small element is absolute at that scale, not relative to the element.
pub(crate) fn abs_bound(want: &Tensor) -> f64 {
    if !want.dtype().is_float() {
        return 0.0;
    }
    let max = want
        .to_vec_f64()
        .unwrap()
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    NORMWISE_ULPS * eps(want.dtype()) * max
}

/// Ulp tolerance of an op's gradients: its forward's, and at least that of an accumulating
/// op (a backward formula sums — over broadcast dims, reduced dims, the terms of a chain rule —
/// in its own order): 4 ulp, 1 for f16/bf16.
pub(crate) fn tolerance(op: &str, dtype: DType) -> u64 {
    ulp_tolerance(op, dtype).max(if dtype.is_half() { 1 } else { 4 })
}
