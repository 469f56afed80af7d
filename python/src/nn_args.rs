//! What the `nn` binding modules (`nn`, `nn_cnn`, `nn_resize`) share: the tensor argument type
//! and running a Rust `nn` function with the GIL released.

use pyo3::prelude::*;
use tensorplay::{Result, Tensor};

use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// A `tensorplay.Tensor` argument.
pub(crate) type T<'a> = PyRef<'a, PyTensor>;

/// Runs `f` without the GIL (it may use the thread pool) and wraps its tensor.
pub(crate) fn run(
    py: Python<'_>,
    f: impl FnOnce() -> Result<Tensor> + Send,
) -> PyResult<Py<PyTensor>> {
    let out = py.detach(f).py_err()?;
    PyTensor::wrap(py, out)
}

/// An optional tensor argument's Rust tensor.
pub(crate) fn opt(t: &Option<T<'_>>) -> Option<Tensor> {
    t.as_ref().map(|t| t.t.clone())
}
