//! Gradient clipping, PyTorch's `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_`.
//!
//! [`clip_grad_norm_`] computes the total norm with **one compiled graph** over every gradient
//! (captured once per norm type and list of dtypes over flat 1-D operands with dynamic
//! lengths, so it serves any parameter shapes of the same dtypes and one-element-or-not pattern): one fused reduction kernel per gradient
//! (`|g|ᵖ` and its sum in one pass, no temporary) and the combination of the per-gradient norms,
//! as PyTorch's `_foreach_norm` + `vector_norm(stack(..))` do. The reduction kernels are not
//! launched as one group (the group launch is for pointwise kernels), so the norm costs one
//! kernel call per gradient. The scaling `g *= min(1, max_norm / (norm + 1e-6))` is one
//! in-place launch of a compiled pointwise kernel over every gradient (skipped when the factor
//! is 1, which leaves the gradients unchanged, as PyTorch's multiplication by 1 does).
//! [`clip_grad_value_`] clamps every gradient with one in-place launch.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use tensorplay_ir::{DType, Device, Error, Result, TensorMeta};
use tensorplay_runtime::Tensor;
use tensorplay_runtime::autograd::no_grad;

use super::fused::{Fused, Set};
use crate::capture::{CaptureOptions, capture};
use crate::executor::CompiledGraph;

/// Compiled total-norm graphs by norm type (bits) and the gradients' dtypes and length classes
/// (0, 1 or more elements: a dynamic size guard keeps 0 and 1 apart from the rest).
type NormKey = (u64, Vec<(DType, usize)>);
static NORMS: LazyLock<Mutex<HashMap<NormKey, Arc<CompiledGraph>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
/// At most this many norm graphs are kept (the cache is emptied when it is full).
const MAX_NORMS: usize = 32;

/// `g * c` in place, and `clamp(g, lo, hi)` in place.
static SCALE: LazyLock<Mutex<Fused>> = LazyLock::new(|| {
    Mutex::new(Fused::new(
        Box::new(|xs| Ok(vec![xs[0].mul(&xs[1])?])),
        1,
        0,
        1,
    ))
});
static CLAMP: LazyLock<Mutex<Fused>> = LazyLock::new(|| {
    Mutex::new(Fused::new(
        Box::new(|xs| Ok(vec![xs[0].maximum(&xs[1])?.minimum(&xs[2])?])),
        1,
        0,
        2,
    ))
});

/// The total `p`-norm of `grads` (flat), as PyTorch computes it: each gradient's norm in its
/// dtype, then the norm of those norms.
fn total_norm(grads: &[Tensor], p: f64) -> Result<Vec<Tensor>> {
    let norms = grads
        .iter()
        .map(|g| g.norm(p, &[], false))
        .collect::<Result<Vec<_>>>()?;
    let dtype = norms
        .iter()
        .map(Tensor::dtype)
        .reduce(|a, b| if a.size() >= b.size() { a } else { b })
        .unwrap_or(DType::F32);
    let norms = norms
        .iter()
        .map(|n| n.to_dtype(dtype))
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![Tensor::stack(&norms, 0)?.norm(p, &[], false)?])
}

fn check(op: &str, params: &[Tensor]) -> Result<Vec<Tensor>> {
    let grads: Vec<Tensor> = params.iter().filter_map(Tensor::grad).collect();
    for (i, g) in grads.iter().enumerate() {
        if !g.dtype().is_float() || g.is_fake() || g.device() != Device::Cpu {
            return Err(Error::argument(
                op,
                format!("gradient {i}"),
                "a real floating-point CPU tensor",
                format!("{g:?}"),
            ));
        }
    }
    Ok(grads)
}

fn clip_norm(params: &[Tensor], max_norm: f64, norm_type: f64, fused: bool) -> Result<f64> {
    const OP: &str = "clip_grad_norm_";
    if norm_type.is_nan() {
        return Err(Error::argument(OP, "norm_type", "a number or ±inf", "NaN"));
    }
    let grads = check(OP, params)?;
    if grads.is_empty() {
        return Ok(0.0);
    }
    let _g = no_grad();
    let flat = grads
        .iter()
        .map(|g| g.reshape(&[g.numel()]))
        .collect::<Result<Vec<_>>>()?;
    let total = if fused {
        let key: NormKey = (
            norm_type.to_bits(),
            flat.iter().map(|g| (g.dtype(), g.numel().min(2))).collect(),
        );
        let graph = {
            let mut cache = NORMS.lock();
            match cache.get(&key) {
                Some(g) => g.clone(),
                None => {
                    let metas: Vec<TensorMeta> = key
                        .1
                        .iter()
                        .map(|&(dtype, n)| TensorMeta::new(&[n], dtype, Device::Cpu))
                        .collect();
                    let g = capture(
                        |xs| total_norm(xs, norm_type),
                        &metas,
                        CaptureOptions { dynamic: true },
                    )?;
                    let g = Arc::new(CompiledGraph::new(&g)?);
                    if cache.len() >= MAX_NORMS {
                        cache.clear();
                    }
                    cache.insert(key, g.clone());
                    g
                }
            }
        };
        graph.run(&flat)?.swap_remove(0)
    } else {
        total_norm(&flat, norm_type)?.swap_remove(0)
    };
    // PyTorch: `max_norm / (total + 1e-6)` clamped to 1, in the norm's dtype.
    let coef = Tensor::scalar(max_norm)
        .to_dtype(total.dtype())?
        .div(&total.add_scalar(1e-6)?)?
        .clamp_max(1.0)?
        .to_dtype(DType::F64)?
        .item::<f64>()?;
    let total = total.to_dtype(DType::F64)?.item::<f64>()?;
    if coef != 1.0 {
        let sets: Vec<Set> = grads
            .iter()
            .map(|g| Set {
                written: vec![g.clone()],
                read: vec![],
                scalars: vec![coef],
            })
            .collect();
        SCALE.lock().run(fused, &sets)?;
    }
    Ok(total)
}

/// Scales the gradients of `params` (those that have one) in place so that their total
/// `norm_type`-norm (2.0, 1.0, `f64::INFINITY`, or any other `p`) is at most `max_norm`, and
/// returns the total norm before clipping — PyTorch's `clip_grad_norm_`: the factor is
/// `min(1, max_norm / (norm + 1e-6))`, computed in the gradients' dtype. Fused: the norm is
/// one compiled graph over every gradient and the scaling one in-place kernel launch (see the
/// [module docs](self)); [`clip_grad_norm_eager`] is the op-by-op reference.
///
/// ```
/// use tensorplay_compiler::optim::clip_grad_norm_;
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::zeros(&[2], DType::F32).requires_grad_(true)?;
/// let g = Tensor::from_vec(vec![3.0f32, 4.0], &[2])?;
/// w.mul(&g)?.sum_all()?.backward()?; // grad = [3, 4], norm 5
/// let norm = clip_grad_norm_(&[w.clone()], 1.0, 2.0)?;
/// assert!((norm - 5.0).abs() < 1e-6);
/// let clipped = w.grad().unwrap().to_vec::<f32>()?;
/// assert!((clipped[0] - 0.6).abs() < 1e-6 && (clipped[1] - 0.8).abs() < 1e-6);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn clip_grad_norm_(params: &[Tensor], max_norm: f64, norm_type: f64) -> Result<f64> {
    clip_norm(params, max_norm, norm_type, true)
}

/// [`clip_grad_norm_`] op by op through the dispatcher (the reference).
pub fn clip_grad_norm_eager(params: &[Tensor], max_norm: f64, norm_type: f64) -> Result<f64> {
    clip_norm(params, max_norm, norm_type, false)
}

/// Clamps every gradient of `params` (those that have one) to `[-clip_value, clip_value]` in
/// place with one launch of a compiled kernel (PyTorch's `clip_grad_value_`).
///
/// ```
/// use tensorplay_compiler::optim::clip_grad_value_;
/// use tensorplay_runtime::{DType, Tensor};
/// let w = Tensor::zeros(&[3], DType::F32).requires_grad_(true)?;
/// w.mul(&Tensor::from_vec(vec![-3.0f32, 0.5, 2.0], &[3])?)?.sum_all()?.backward()?;
/// clip_grad_value_(&[w.clone()], 1.0)?;
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?, vec![-1.0, 0.5, 1.0]);
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn clip_grad_value_(params: &[Tensor], clip_value: f64) -> Result<()> {
    const OP: &str = "clip_grad_value_";
    if clip_value.is_nan() || clip_value < 0.0 {
        return Err(Error::argument(
            OP,
            "clip_value",
            "a number >= 0",
            clip_value.to_string(),
        ));
    }
    let grads = check(OP, params)?;
    let sets: Vec<Set> = grads
        .into_iter()
        .map(|g| Set {
            written: vec![g],
            read: vec![],
            scalars: vec![-clip_value, clip_value],
        })
        .collect();
    CLAMP.lock().run(true, &sets)
}
