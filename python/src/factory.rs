//! Tensor factories: `tensor(data)`, `zeros/ones/empty/full/arange/randn/rand(*size)` and
//! `manual_seed`, with PyTorch's `dtype=`, `device=` and `requires_grad=` keywords.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tensorplay::{DType, Device, Scalar, Tensor};

use crate::convert::{to_device, to_dtype, to_scalar, type_name};
use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// Walks nested sequences, collecting the leaves and checking the shape is rectangular.
fn flatten(
    obj: &Bound<'_, PyAny>,
    depth: usize,
    shape: &mut Vec<usize>,
    out: &mut Vec<Scalar>,
) -> PyResult<()> {
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
        if shape.len() == depth {
            shape.push(items.len());
        } else if shape.len() < depth || shape[depth] != items.len() {
            return Err(PyValueError::new_err(format!(
                "expected sequence of length {} at dim {depth} (got {})",
                shape.get(depth).copied().unwrap_or(0),
                items.len()
            )));
        }
        for item in &items {
            flatten(item, depth + 1, shape, out)?;
        }
        return Ok(());
    }
    if shape.len() != depth {
        return Err(PyValueError::new_err(
            "a ragged nested sequence cannot become a tensor",
        ));
    }
    if let Ok(t) = obj.extract::<PyRef<'_, PyTensor>>()
        && t.t.numel() == 1
    {
        let v = t.t.detach().to_vec_f64().py_err()?[0];
        out.push(if t.t.dtype().is_float() {
            Scalar::Float(v)
        } else {
            Scalar::Int(v as i64)
        });
        return Ok(());
    }
    let s = to_scalar(obj)
        .or_else(|| {
            obj.call_method0("__index__")
                .and_then(|v| v.extract::<i64>())
                .ok()
                .map(Scalar::Int)
        })
        .or_else(|| {
            obj.call_method0("__float__")
                .and_then(|v| v.extract::<f64>())
                .ok()
                .map(Scalar::Float)
        })
        .ok_or_else(|| {
            PyTypeError::new_err(format!(
                "cannot make a tensor element from {}",
                type_name(obj)
            ))
        })?;
    out.push(s);
    Ok(())
}

fn finish(
    t: Tensor,
    dtype: Option<DType>,
    device: Option<Device>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    if crate::callbacks::in_fake_mode() {
        // Inside a Python fake kernel: metadata only, on the requested device.
        let dtype = dtype.unwrap_or(t.dtype());
        return Ok(Tensor::empty_fake(
            t.shape(),
            dtype,
            device.unwrap_or(t.device()),
        ));
    }
    let mut t = t;
    if let Some(d) = dtype
        && d != t.dtype()
    {
        t = t.to_dtype(d).py_err()?;
    }
    if let Some(dev) = device
        && dev != t.device()
    {
        t = t.to_device(dev).py_err()?;
    }
    if requires_grad {
        t = t.requires_grad_(true).py_err()?;
    }
    Ok(t)
}

fn opt_dtype(d: Option<&Bound<'_, PyAny>>) -> PyResult<Option<DType>> {
    d.filter(|d| !d.is_none()).map(to_dtype).transpose()
}

fn opt_device(d: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Device>> {
    d.filter(|d| !d.is_none()).map(to_device).transpose()
}

/// `tensor(data, dtype=None, device=None, requires_grad=False)`: a new tensor holding a copy of
/// `data` (nested lists of numbers, a number or a tensor). Floats give float32, ints int64,
/// bools bool unless `dtype` says otherwise.
#[pyfunction]
#[pyo3(signature = (data, *, dtype = None, device = None, requires_grad = false))]
pub fn tensor(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyTensor>> {
    let (dtype, device) = (opt_dtype(dtype)?, opt_device(device)?);
    if let Ok(t) = data.extract::<PyRef<'_, PyTensor>>() {
        let copy = t.t.detach().clone_tensor().py_err()?;
        return PyTensor::wrap(py, finish(copy, dtype, device, requires_grad)?);
    }
    let mut shape = Vec::new();
    let mut vals = Vec::new();
    flatten(data, 0, &mut shape, &mut vals)?;
    let t = if vals.iter().any(|s| matches!(s, Scalar::Float(_))) {
        let v: Vec<f64> = vals
            .iter()
            .map(|s| match *s {
                Scalar::Float(f) => f,
                Scalar::Int(i) => i as f64,
                Scalar::Bool(b) => f64::from(u8::from(b)),
            })
            .collect();
        let t = Tensor::from_vec(v, &shape).py_err()?;
        t.to_dtype(dtype.unwrap_or(DType::F32)).py_err()?
    } else if !vals.is_empty() && vals.iter().all(|s| matches!(s, Scalar::Bool(_))) {
        let v: Vec<bool> = vals
            .iter()
            .map(|s| matches!(s, Scalar::Bool(true)))
            .collect();
        Tensor::from_vec(v, &shape).py_err()?
    } else if vals.is_empty() {
        Tensor::zeros(&shape, dtype.unwrap_or(DType::F32))
    } else {
        let v: Vec<i64> = vals
            .iter()
            .map(|s| match *s {
                Scalar::Int(i) => i,
                Scalar::Bool(b) => i64::from(b),
                Scalar::Float(f) => f as i64,
            })
            .collect();
        Tensor::from_vec(v, &shape).py_err()?
    };
    PyTensor::wrap(py, finish(t, dtype, device, requires_grad)?)
}

/// `*size` as PyTorch takes it: `zeros(2, 3)` or `zeros((2, 3))` / `zeros([2, 3])`.
fn sizes(size: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    if size.len() == 1 {
        let first = size.get_item(0)?;
        if first.is_instance_of::<PyList>() || first.is_instance_of::<PyTuple>() {
            return first.extract::<Vec<i64>>().and_then(check_sizes);
        }
    }
    size.extract::<Vec<i64>>()
        .map_err(|_| PyTypeError::new_err("sizes must be integers (or one tuple/list of integers)"))
        .and_then(check_sizes)
}

fn check_sizes(v: Vec<i64>) -> PyResult<Vec<usize>> {
    v.into_iter()
        .map(|s| {
            usize::try_from(s).map_err(|_| PyValueError::new_err(format!("negative dimension {s}")))
        })
        .collect()
}

/// A clear error (not a panic in the allocator) for a shape whose size in bytes overflows.
fn check_bytes(shape: &[usize], dtype: DType) -> PyResult<()> {
    let bytes = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize);
    match bytes {
        Some(_) => Ok(()),
        None => Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "shape {shape:?} of dtype {} is too large: its size in bytes overflows",
            crate::convert::dtype_name(dtype)
        ))),
    }
}

/// `v` as a fill value of `dtype` (a bool for bool tensors).
fn fill(dtype: DType, v: i64) -> Scalar {
    if dtype == DType::Bool {
        Scalar::Bool(v != 0)
    } else {
        Scalar::Int(v)
    }
}

macro_rules! factory {
    ($name:ident, $doc:literal, |$shape:ident, $dtype:ident| $make:expr) => {
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (*size, dtype = None, device = None, requires_grad = false))]
        pub fn $name(
            py: Python<'_>,
            size: &Bound<'_, PyTuple>,
            dtype: Option<&Bound<'_, PyAny>>,
            device: Option<&Bound<'_, PyAny>>,
            requires_grad: bool,
        ) -> PyResult<Py<PyTensor>> {
            let $shape = sizes(size)?;
            let $dtype = opt_dtype(dtype)?.unwrap_or(DType::F32);
            check_bytes(&$shape, $dtype)?;
            let t: Tensor = if crate::callbacks::in_fake_mode() {
                Tensor::empty_fake(&$shape, $dtype, Device::Cpu)
            } else {
                $make
            };
            PyTensor::wrap(py, finish(t, None, opt_device(device)?, requires_grad)?)
        }
    };
}

factory!(zeros, "`zeros(*size)`: a tensor of zeros.", |s, d| {
    Tensor::try_full(&s, fill(d, 0), d).py_err()?
});
factory!(ones, "`ones(*size)`: a tensor of ones.", |s, d| {
    Tensor::try_full(&s, fill(d, 1), d).py_err()?
});
factory!(
    empty,
    "`empty(*size)`: an uninitialised tensor (zero-filled here).",
    |s, d| Tensor::try_full(&s, fill(d, 0), d).py_err()?
);
factory!(
    randn,
    "`randn(*size)`: standard normal samples (seeded by `manual_seed`).",
    |s, d| Tensor::randn(&s, d).py_err()?
);
factory!(
    rand,
    "`rand(*size)`: uniform samples in [0, 1) (seeded by `manual_seed`).",
    |s, d| Tensor::rand(&s, d).py_err()?
);

/// `full(size, fill_value)`: a tensor filled with `fill_value` (dtype from the value when not
/// given: bool, int64 or float32).
#[pyfunction]
#[pyo3(signature = (size, fill_value, *, dtype = None, device = None, requires_grad = false))]
pub fn full(
    py: Python<'_>,
    size: Vec<i64>,
    fill_value: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyTensor>> {
    let value = to_scalar(fill_value).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "fill_value must be a number, got {}",
            type_name(fill_value)
        ))
    })?;
    let dtype = opt_dtype(dtype)?.unwrap_or(match value {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(_) => DType::I64,
        Scalar::Float(_) => DType::F32,
    });
    let t = Tensor::try_full(&check_sizes(size)?, value, dtype).py_err()?;
    PyTensor::wrap(py, finish(t, None, opt_device(device)?, requires_grad)?)
}

/// `arange(end)`, `arange(start, end, step=1)`: int64 for integer bounds, else float32.
#[pyfunction]
#[pyo3(signature = (start, end = None, step = None, *, dtype = None, device = None, requires_grad = false))]
#[allow(clippy::too_many_arguments)]
pub fn arange(
    py: Python<'_>,
    start: &Bound<'_, PyAny>,
    end: Option<&Bound<'_, PyAny>>,
    step: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    requires_grad: bool,
) -> PyResult<Py<PyTensor>> {
    let num = |o: &Bound<'_, PyAny>| -> PyResult<Scalar> {
        to_scalar(o).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "arange bounds must be numbers, got {}",
                type_name(o)
            ))
        })
    };
    let (a, b) = match end {
        Some(e) => (num(start)?, num(e)?),
        None => (Scalar::Int(0), num(start)?),
    };
    let s = step.map(num).transpose()?.unwrap_or(Scalar::Int(1));
    let all_int = [a, b, s].iter().all(|v| matches!(v, Scalar::Int(_)));
    let f = |v: Scalar| match v {
        Scalar::Int(i) => i as f64,
        Scalar::Float(f) => f,
        Scalar::Bool(b) => f64::from(u8::from(b)),
    };
    let dtype = opt_dtype(dtype)?.unwrap_or(if all_int { DType::I64 } else { DType::F32 });
    let t = Tensor::arange(f(a), f(b), f(s), dtype).py_err()?;
    PyTensor::wrap(py, finish(t, None, opt_device(device)?, requires_grad)?)
}

/// Seeds the generator behind `rand`/`randn`/dropout.
#[pyfunction]
pub fn manual_seed(seed: u64) {
    tensorplay::manual_seed(seed);
}

/// `_like(kind, t)`: `empty_like`/`zeros_like`/`ones_like` of the runtime (fake inputs give fake
/// results, so these work in fake kernels).
#[pyfunction]
pub fn _like(py: Python<'_>, kind: &str, t: PyRef<'_, PyTensor>) -> PyResult<Py<PyTensor>> {
    let t = &t.t;
    let out = match kind {
        "empty" => Tensor::empty_like(t),
        "zeros" => Tensor::zeros_like(t),
        "ones" => Tensor::ones_like(t),
        other => {
            return Err(PyValueError::new_err(format!(
                "_like: unknown kind `{other}`"
            )));
        }
    };
    PyTensor::wrap(py, out)
}
