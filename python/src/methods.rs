//! `Tensor` methods that are PyTorch composites rather than op-table entries: reshaping and
//! transposing views, dtype/device conversion. Each runs the Rust method (through the dispatcher,
//! so autograd and capture see it) with the GIL released.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tensorplay::{DType, Device, Tensor};

use crate::convert::{PyDType, PyDevice, to_device, type_name};
use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// `*shape` as PyTorch takes it: `(2, 3)` or one tuple/list.
fn shape_args(args: &Bound<'_, PyTuple>) -> PyResult<Vec<i64>> {
    if args.len() == 1 {
        let a = args.get_item(0)?;
        if a.is_instance_of::<PyList>() || a.is_instance_of::<PyTuple>() {
            return a.extract();
        }
    }
    args.extract()
        .map_err(|_| PyTypeError::new_err("a shape must be integers or one tuple/list of integers"))
}

fn run(
    py: Python<'_>,
    t: &Tensor,
    f: impl FnOnce(Tensor) -> tensorplay::Result<Tensor> + Send,
) -> PyResult<Py<PyTensor>> {
    let t = t.clone();
    let out = py.detach(move || f(t)).py_err()?;
    PyTensor::wrap(py, out)
}

#[pymethods]
impl PyTensor {
    /// `reshape(*shape)` (one `-1` is inferred): a view when the strides allow, else a copy.
    #[pyo3(signature = (*shape))]
    fn reshape(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyTensor>> {
        let s = shape_args(shape)?;
        run(py, &self.t, move |t| t.reshape_infer(&s))
    }

    /// `view(*shape)`: as `reshape` (views when possible).
    #[pyo3(signature = (*shape))]
    fn view(&self, py: Python<'_>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyTensor>> {
        if shape.len() == 1
            && let Ok(d) = shape.get_item(0)?.extract::<PyRef<'_, PyDType>>()
        {
            return Err(PyTypeError::new_err(format!(
                "view(dtype) (a bit cast to {}) is not supported; use .to(dtype)",
                d.dtype
            )));
        }
        self.reshape(py, shape)
    }

    /// Swaps two dims (a view).
    fn transpose(&self, py: Python<'_>, dim0: i64, dim1: i64) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, move |t| t.transpose(dim0, dim1))
    }

    /// Transpose of a matrix (a view).
    fn t(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.t())
    }

    /// All dims reversed (a view).
    #[getter(T)]
    fn t_all(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        let rank = self.t.rank() as i64;
        let dims: Vec<i64> = (0..rank).rev().collect();
        run(py, &self.t, move |t| t.permute(&dims))
    }

    /// A new dim of size 1 at `dim`.
    fn unsqueeze(&self, py: Python<'_>, dim: i64) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, move |t| t.unsqueeze(dim))
    }

    /// Drops size-1 dims (all, or just `dim`).
    #[pyo3(signature = (dim = None))]
    fn squeeze(&self, py: Python<'_>, dim: Option<i64>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, move |t| t.squeeze(dim))
    }

    /// Merges dims `start_dim..=end_dim` into one.
    #[pyo3(signature = (start_dim = 0, end_dim = -1))]
    fn flatten(&self, py: Python<'_>, start_dim: i64, end_dim: i64) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, move |t| t.flatten(start_dim, end_dim))
    }

    /// The same values in row-major layout (`self` when already contiguous).
    fn contiguous(slf: Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if slf.get().t.is_contiguous() {
            return Ok(slf.into_any().unbind());
        }
        Ok(run(py, &slf.get().t, |t| t.contiguous())?.into_any())
    }

    /// `to(dtype)`, `to(device)`, `to(device, dtype)`, `to(other_tensor)`, with `dtype=`/`device=`.
    #[pyo3(signature = (*args, dtype = None, device = None, copy = false, non_blocking = false))]
    fn to(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        dtype: Option<PyRef<'_, PyDType>>,
        device: Option<&Bound<'_, PyAny>>,
        copy: bool,
        non_blocking: bool,
    ) -> PyResult<Py<PyTensor>> {
        let _ = non_blocking;
        let mut want_dtype: Option<DType> = dtype.map(|d| d.dtype);
        let mut want_device: Option<Device> = device.map(to_device).transpose()?;
        for a in args.iter() {
            if let Ok(d) = a.extract::<PyRef<'_, PyDType>>() {
                want_dtype = Some(d.dtype);
            } else if let Ok(o) = a.extract::<PyRef<'_, PyTensor>>() {
                want_dtype = Some(o.t.dtype());
                want_device = Some(o.t.device());
            } else if a.extract::<PyRef<'_, PyDevice>>().is_ok() || a.extract::<String>().is_ok() {
                want_device = Some(to_device(&a)?);
            } else {
                return Err(PyTypeError::new_err(format!(
                    "to() received an invalid combination of arguments: {}",
                    type_name(&a)
                )));
            }
        }
        run(py, &self.t, move |mut t| {
            let before = t.clone();
            if let Some(d) = want_device
                && d != t.device()
            {
                t = t.to_device(d)?;
            }
            if let Some(d) = want_dtype
                && d != t.dtype()
            {
                t = t.to_dtype(d)?;
            }
            if copy && t.storage().same(before.storage()) {
                t = t.clone_tensor()?;
            }
            Ok(t)
        })
    }

    /// `to(float32)`.
    fn float(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::F32))
    }

    /// `to(float64)`.
    fn double(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::F64))
    }

    /// `to(float16)`.
    fn half(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::F16))
    }

    /// `to(bfloat16)`.
    fn bfloat16(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::BF16))
    }

    /// `to(int64)`.
    fn long(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::I64))
    }

    /// `to(int32)`.
    fn int(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::I32))
    }

    /// `to(bool)`.
    fn bool(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| t.to_dtype(DType::Bool))
    }

    /// A copy on the CPU (`self` when already there).
    fn cpu(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        run(py, &self.t, |t| {
            if t.device() == Device::Cpu {
                Ok(t)
            } else {
                t.to_device(Device::Cpu)
            }
        })
    }

    /// A copy on CUDA device `device` (default 0).
    #[pyo3(signature = (device = None))]
    fn cuda(&self, py: Python<'_>, device: Option<u16>) -> PyResult<Py<PyTensor>> {
        let d = Device::Cuda(device.unwrap_or(0));
        run(py, &self.t, move |t| {
            if t.device() == d {
                Ok(t)
            } else {
                t.to_device(d)
            }
        })
    }
}
