//! `tensorplay.nn.functional`'s composite functions over `tensorplay::nn` (linear, layer_norm,
//! rms_norm, dropout, embedding, the losses and attention), with PyTorch's parameter names; the
//! CNN functions (convolutions, pooling, batch and group norm) are in `nn_cnn`, `pad` and
//! `interpolate` in `nn_resize`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tensorplay::nn::{self, Reduction};

use crate::nn_args::{T, opt, run};
use crate::tensor::PyTensor;

fn reduction(r: &str) -> PyResult<Reduction> {
    match r {
        "mean" => Ok(Reduction::Mean),
        "sum" => Ok(Reduction::Sum),
        "none" => Ok(Reduction::None),
        other => Err(PyValueError::new_err(format!(
            "{other} is not a valid value for reduction"
        ))),
    }
}

/// `linear(input, weight, bias=None)`: `input @ weight.T + bias`.
#[pyfunction]
#[pyo3(signature = (input, weight, bias = None))]
pub fn linear(
    py: Python<'_>,
    input: T<'_>,
    weight: T<'_>,
    bias: Option<T<'_>>,
) -> PyResult<Py<PyTensor>> {
    let (x, w, b) = (input.t.clone(), weight.t.clone(), opt(&bias));
    run(py, move || nn::linear(&x, &w, b.as_ref()))
}

/// `layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)`.
#[pyfunction]
#[pyo3(signature = (input, normalized_shape, weight = None, bias = None, eps = 1e-5))]
pub fn layer_norm(
    py: Python<'_>,
    input: T<'_>,
    normalized_shape: Vec<usize>,
    weight: Option<T<'_>>,
    bias: Option<T<'_>>,
    eps: f64,
) -> PyResult<Py<PyTensor>> {
    let (x, w, b) = (input.t.clone(), opt(&weight), opt(&bias));
    run(py, move || {
        nn::layer_norm(&x, &normalized_shape, w.as_ref(), b.as_ref(), eps)
    })
}

/// `rms_norm(input, normalized_shape, weight=None, eps=None)`.
#[pyfunction]
#[pyo3(signature = (input, normalized_shape, weight = None, eps = None))]
pub fn rms_norm(
    py: Python<'_>,
    input: T<'_>,
    normalized_shape: Vec<usize>,
    weight: Option<T<'_>>,
    eps: Option<f64>,
) -> PyResult<Py<PyTensor>> {
    let (x, w) = (input.t.clone(), opt(&weight));
    run(py, move || {
        nn::rms_norm(&x, &normalized_shape, w.as_ref(), eps)
    })
}

/// `dropout(input, p=0.5, training=True)` (seeded by `manual_seed`).
#[pyfunction]
#[pyo3(signature = (input, p = 0.5, training = true, inplace = false))]
pub fn dropout(
    py: Python<'_>,
    input: T<'_>,
    p: f64,
    training: bool,
    inplace: bool,
) -> PyResult<Py<PyTensor>> {
    if inplace {
        return Err(PyValueError::new_err(
            "dropout(inplace=True) is not supported",
        ));
    }
    let x = input.t.clone();
    run(py, move || nn::dropout_global(&x, p, training))
}

/// `embedding(input, weight, padding_idx=None)`.
#[pyfunction]
#[pyo3(signature = (input, weight, padding_idx = None))]
pub fn embedding(
    py: Python<'_>,
    input: T<'_>,
    weight: T<'_>,
    padding_idx: Option<i64>,
) -> PyResult<Py<PyTensor>> {
    let (x, w) = (input.t.clone(), weight.t.clone());
    run(py, move || nn::embedding_padded(&x, &w, padding_idx))
}

/// `mse_loss(input, target, reduction="mean")`.
#[pyfunction]
#[pyo3(signature = (input, target, reduction = "mean"))]
pub fn mse_loss(
    py: Python<'_>,
    input: T<'_>,
    target: T<'_>,
    reduction: &str,
) -> PyResult<Py<PyTensor>> {
    let (x, y, r) = (
        input.t.clone(),
        target.t.clone(),
        self::reduction(reduction)?,
    );
    run(py, move || nn::mse_loss(&x, &y, r))
}

/// `nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean")`.
#[pyfunction]
#[pyo3(signature = (input, target, weight = None, ignore_index = -100, reduction = "mean"))]
pub fn nll_loss(
    py: Python<'_>,
    input: T<'_>,
    target: T<'_>,
    weight: Option<T<'_>>,
    ignore_index: i64,
    reduction: &str,
) -> PyResult<Py<PyTensor>> {
    let (x, y, w, r) = (
        input.t.clone(),
        target.t.clone(),
        opt(&weight),
        self::reduction(reduction)?,
    );
    run(py, move || {
        nn::nll_loss_weighted(&x, &y, w.as_ref(), ignore_index, r)
    })
}

/// `cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
/// label_smoothing=0.0)`.
#[pyfunction]
#[pyo3(signature = (input, target, weight = None, ignore_index = -100, reduction = "mean", label_smoothing = 0.0))]
pub fn cross_entropy(
    py: Python<'_>,
    input: T<'_>,
    target: T<'_>,
    weight: Option<T<'_>>,
    ignore_index: i64,
    reduction: &str,
    label_smoothing: f64,
) -> PyResult<Py<PyTensor>> {
    let (x, y, w, r) = (
        input.t.clone(),
        target.t.clone(),
        opt(&weight),
        self::reduction(reduction)?,
    );
    run(py, move || {
        nn::cross_entropy_weighted(&x, &y, w.as_ref(), ignore_index, label_smoothing, r)
    })
}

/// `scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
/// is_causal=False, scale=None)`.
#[pyfunction]
#[pyo3(signature = (query, key, value, attn_mask = None, dropout_p = 0.0, is_causal = false, scale = None))]
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention(
    py: Python<'_>,
    query: T<'_>,
    key: T<'_>,
    value: T<'_>,
    attn_mask: Option<T<'_>>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
) -> PyResult<Py<PyTensor>> {
    let (q, k, v, m) = (
        query.t.clone(),
        key.t.clone(),
        value.t.clone(),
        opt(&attn_mask),
    );
    run(py, move || {
        nn::scaled_dot_product_attention(&q, &k, &v, m.as_ref(), dropout_p, is_causal, scale)
    })
}

/// Adds the functions to `m` (the `_C._nn` submodule).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(linear, m)?)?;
    m.add_function(wrap_pyfunction!(layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(dropout, m)?)?;
    m.add_function(wrap_pyfunction!(embedding, m)?)?;
    m.add_function(wrap_pyfunction!(mse_loss, m)?)?;
    m.add_function(wrap_pyfunction!(nll_loss, m)?)?;
    m.add_function(wrap_pyfunction!(cross_entropy, m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, m)?)?;
    crate::nn_cnn::register(m)?;
    crate::nn_resize::register(m)
}
