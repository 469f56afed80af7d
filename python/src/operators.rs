//! `Tensor`'s arithmetic operators `+ - * /` (and their reflected forms) as native number slots,
//! so that `x + y` runs no Python frame: each is the generic op call (`call::call_op`) of
//! `tp::add`, `tp::sub`, `tp::mul` or `tp::div` with the operands in order. The other operators
//! are attached from the op table by `tensorplay/_ops.py`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::call::call_op;
use crate::tensor::PyTensor;

/// `qualname(a, b)` through the generic op call (binding, dispatch, GIL released).
fn binary(
    py: Python<'_>,
    qualname: &str,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let args = PyTuple::new(py, [a, b])?;
    call_op(py, qualname, &args, None, false)
}

#[pymethods]
impl PyTensor {
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::add", slf.as_any(), other)
    }

    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::add", other, slf.as_any())
    }

    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::sub", slf.as_any(), other)
    }

    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::sub", other, slf.as_any())
    }

    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::mul", slf.as_any(), other)
    }

    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::mul", other, slf.as_any())
    }

    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::div", slf.as_any(), other)
    }

    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf.py(), "tp::div", other, slf.as_any())
    }
}
