//! `tensorplay.Tensor`: the Python class over the Rust [`Tensor`] — metadata, data access
//! (`item`, `tolist`, numpy's array interface), indexing, autograd entry points and the tensor
//! factories. Op methods and operators are attached from the op table by `tensorplay/_ops.py`.

use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyEllipsis, PyList, PySlice, PyTuple};
use tensorplay::{DType, Device, Idx, Tensor, autograd};

use crate::convert::{PyDType, PyDevice, to_dtype, to_scalar, type_name};
use crate::error::IntoPyResult;

/// A tensor: a handle to the Rust runtime's tensor (cloning shares data and autograd state).
#[pyclass(name = "Tensor", module = "tensorplay", frozen, weakref, subclass)]
pub struct PyTensor {
    /// The runtime tensor.
    pub t: Tensor,
}

impl PyTensor {
    /// A new Python object for `t`.
    pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Py<PyTensor>> {
        Py::new(py, PyTensor { t })
    }
}

/// One Python index (`int`, `slice`, `None`, `...`, a tensor or a list of ints/bools) as an [`Idx`].
fn to_idx(obj: &Bound<'_, PyAny>) -> PyResult<Idx> {
    if obj.is_none() {
        return Ok(Idx::NewAxis);
    }
    if obj.is_instance_of::<PyEllipsis>() {
        return Ok(Idx::Ellipsis);
    }
    if let Ok(t) = obj.extract::<PyRef<'_, PyTensor>>() {
        return Ok(Idx::Tensor(t.t.clone()));
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        let get = |name: &str| -> PyResult<Option<i64>> {
            let v = s.getattr(name)?;
            if v.is_none() {
                Ok(None)
            } else {
                v.extract().map(Some)
            }
        };
        let (start, end, step) = (get("start")?, get("stop")?, get("step")?);
        if start.is_none() && end.is_none() && step.is_none() {
            return Ok(Idx::Full);
        }
        return Ok(Idx::Slice {
            start,
            end,
            step: step.unwrap_or(1),
        });
    }
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "indexing with a Python bool is not supported",
        ));
    }
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Idx::Int(i));
    }
    if obj.is_instance_of::<PyList>() {
        let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
        if !items.is_empty() && items.iter().all(|o| o.is_instance_of::<PyBool>()) {
            let v: Vec<bool> = items.iter().map(|o| o.extract()).collect::<PyResult<_>>()?;
            let n = v.len();
            return Ok(Idx::Tensor(Tensor::from_vec(v, &[n]).py_err()?));
        }
        let v: Vec<i64> = items.iter().map(|o| o.extract()).collect::<PyResult<_>>()?;
        let n = v.len();
        return Ok(Idx::Tensor(Tensor::from_vec(v, &[n]).py_err()?));
    }
    Err(PyTypeError::new_err(format!(
        "only integers, slices, None, ..., lists and tensors are valid indices (got {})",
        type_name(obj)
    )))
}

fn to_indices(key: &Bound<'_, PyAny>) -> PyResult<Vec<Idx>> {
    if key.is_instance_of::<PyTuple>() {
        key.try_iter()?.map(|k| to_idx(&k?)).collect()
    } else {
        Ok(vec![to_idx(key)?])
    }
}

/// Nested Python lists of `vals` (row-major) with `shape`.
fn nest(py: Python<'_>, shape: &[usize], vals: &[Py<PyAny>]) -> PyResult<Py<PyAny>> {
    match shape.split_first() {
        None => Ok(vals[0].clone_ref(py)),
        Some((&n, rest)) => {
            let chunk: usize = rest.iter().product();
            let items: Vec<Py<PyAny>> = (0..n)
                .map(|i| nest(py, rest, &vals[i * chunk..(i + 1) * chunk]))
                .collect::<PyResult<_>>()?;
            Ok(PyList::new(py, items)?.into_any().unbind())
        }
    }
}

/// The elements of `t` as Python numbers of its kind (bool, int or float), row-major.
fn py_values(py: Python<'_>, t: &Tensor) -> PyResult<Vec<Py<PyAny>>> {
    let t = t.detach();
    let dtype = t.dtype();
    if dtype == DType::Bool {
        let v = t.to_vec::<bool>().py_err()?;
        return v
            .into_iter()
            .map(|b| Ok(PyBool::new(py, b).to_owned().into_any().unbind()))
            .collect();
    }
    if dtype.is_float() {
        let v = t.to_vec_f64().py_err()?;
        return v
            .into_iter()
            .map(|f| Ok(f.into_pyobject(py)?.into_any().unbind()))
            .collect();
    }
    let v = t.to_dtype(DType::I64).py_err()?.to_vec::<i64>().py_err()?;
    v.into_iter()
        .map(|i| Ok(i.into_pyobject(py)?.into_any().unbind()))
        .collect()
}

/// numpy's type string for a dtype (`bfloat16` has none).
fn typestr(d: DType) -> PyResult<&'static str> {
    Ok(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
        DType::BF16 => {
            return Err(PyTypeError::new_err(
                "numpy has no bfloat16 dtype; convert with .float() first",
            ));
        }
    })
}

#[pymethods]
impl PyTensor {
    /// The sizes, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.shape())
    }

    /// `size()` (a tuple) or `size(dim)` (one size; negative dims count from the end).
    #[pyo3(signature = (dim = None))]
    fn size(&self, py: Python<'_>, dim: Option<i64>) -> PyResult<Py<PyAny>> {
        match dim {
            None => Ok(PyTuple::new(py, self.t.shape())?.into_any().unbind()),
            Some(d) => {
                let rank = self.t.rank() as i64;
                let i = if d < 0 { d + rank } else { d };
                if !(0..rank).contains(&i) {
                    return Err(PyIndexError::new_err(format!(
                        "Dimension out of range (expected to be in range of [{}, {}], but got {d})",
                        -rank,
                        rank - 1
                    )));
                }
                Ok(self.t.shape()[i as usize]
                    .into_pyobject(py)?
                    .into_any()
                    .unbind())
            }
        }
    }

    /// Strides in elements.
    fn stride<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.strides())
    }

    /// The element type.
    #[getter]
    fn dtype(&self) -> PyDType {
        PyDType {
            dtype: self.t.dtype(),
        }
    }

    /// Where the data lives.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice {
            device: self.t.device(),
        }
    }

    /// Whether the data is on a CUDA device.
    #[getter]
    fn is_cuda(&self) -> bool {
        matches!(self.t.device(), Device::Cuda(_))
    }

    /// The number of dims.
    #[getter]
    fn ndim(&self) -> usize {
        self.t.rank()
    }

    /// The number of dims.
    fn dim(&self) -> usize {
        self.t.rank()
    }

    /// The number of elements.
    fn numel(&self) -> usize {
        self.t.numel()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.t
            .shape()
            .first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    /// Whether the elements are laid out row-major without gaps.
    fn is_contiguous(&self) -> bool {
        self.t.is_contiguous()
    }

    /// Whether the dtype is floating point.
    fn is_floating_point(&self) -> bool {
        self.t.dtype().is_float()
    }

    /// The single element as a Python number.
    fn item(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.t.numel() != 1 {
            return Err(PyRuntimeError::new_err(format!(
                "a Tensor with {} elements cannot be converted to Scalar",
                self.t.numel()
            )));
        }
        let vals = py_values(py, &self.t)?;
        Ok(vals[0].clone_ref(py))
    }

    /// The elements as nested lists of Python numbers (a number for a 0-d tensor).
    fn tolist(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let vals = py_values(py, &self.t)?;
        nest(py, self.t.shape(), &vals)
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        self.item(py)?.bind(py).is_truthy()
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.item(py)?.bind(py).extract()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        let v = self.item(py)?;
        let v = v.bind(py);
        v.extract::<i64>()
            .or_else(|_| Ok(v.extract::<f64>()?.trunc() as i64))
    }

    fn __index__(&self, py: Python<'_>) -> PyResult<i64> {
        if self.t.dtype().is_float() || self.t.numel() != 1 {
            return Err(PyTypeError::new_err(
                "only integer tensors of a single element can be converted to an index",
            ));
        }
        self.item(py)?.bind(py).extract()
    }

    fn __repr__(&self) -> String {
        let text = self.t.to_string();
        match self.t.grad_fn_name() {
            Some(n) if text.ends_with(')') => {
                format!("{}, grad_fn=<{n}>)", &text[..text.len() - 1])
            }
            _ if self.t.requires_grad() && text.ends_with(')') => {
                format!("{}, requires_grad=True)", &text[..text.len() - 1])
            }
            _ => text,
        }
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyTensor>> {
        let idx = to_indices(key)?;
        let t = self.t.clone();
        let out = py.detach(move || t.index(&idx)).py_err()?;
        PyTensor::wrap(py, out)
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let idx = to_indices(key)?;
        let values = if let Ok(v) = value.extract::<PyRef<'_, PyTensor>>() {
            v.t.clone()
        } else if let Some(s) = to_scalar(value) {
            Tensor::try_full(&[], s, self.t.dtype())
                .py_err()?
                .to_device(self.t.device())
                .py_err()?
        } else {
            return Err(PyTypeError::new_err(format!(
                "can only assign a tensor or a number, got {}",
                type_name(value)
            )));
        };
        let t = self.t.clone();
        py.detach(move || t.index_put_(&idx, &values, false))
            .py_err()?;
        Ok(())
    }

    // ---- autograd ---------------------------------------------------------------------------

    /// Whether gradients are tracked for this tensor.
    #[getter]
    fn requires_grad(&self) -> bool {
        self.t.requires_grad()
    }

    #[setter(requires_grad)]
    fn set_requires_grad(&self, value: bool) -> PyResult<()> {
        self.t.clone().requires_grad_(value).py_err().map(|_| ())
    }

    /// Marks a leaf as requiring gradients (in place); returns `self`.
    #[pyo3(signature = (requires_grad = true))]
    fn requires_grad_(slf: Bound<'_, Self>, requires_grad: bool) -> PyResult<Bound<'_, Self>> {
        slf.get().t.clone().requires_grad_(requires_grad).py_err()?;
        Ok(slf)
    }

    /// The accumulated gradient of a leaf (`None` before `backward`).
    #[getter]
    fn grad(&self, py: Python<'_>) -> PyResult<Option<Py<PyTensor>>> {
        self.t.grad().map(|g| PyTensor::wrap(py, g)).transpose()
    }

    /// Only `None` can be assigned (it clears the gradient).
    #[setter(grad)]
    fn set_grad(&self, value: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        match value {
            Some(v) if !v.is_none() => Err(PyTypeError::new_err(
                "only None can be assigned to .grad (it clears the gradient)",
            )),
            _ => {
                self.t.zero_grad();
                Ok(())
            }
        }
    }

    /// True for tensors no differentiable op produced.
    #[getter]
    fn is_leaf(&self) -> bool {
        self.t.is_leaf()
    }

    /// The name of the backward node that produced this tensor.
    #[getter]
    fn grad_fn(&self) -> Option<String> {
        self.t.grad_fn_name().map(str::to_string)
    }

    /// `Tensor(data, requires_grad=False)`: a new tensor object sharing `data`'s storage, without
    /// its autograd history, as a leaf that requires grad when asked — what subclasses such as
    /// `tensorplay.nn.Parameter` are built from. `TypeError` when `data` is not a tensor.
    #[new]
    #[pyo3(signature = (data, requires_grad = false))]
    fn py_new(data: &Bound<'_, PyAny>, requires_grad: bool) -> PyResult<PyTensor> {
        let Ok(src) = data.cast::<PyTensor>() else {
            return Err(PyTypeError::new_err(format!(
                "Tensor(data): data must be a Tensor (use tensorplay.tensor for Python data), got {}",
                type_name(data)
            )));
        };
        let t = src.get().t.detach();
        if requires_grad {
            t.clone().requires_grad_(true).py_err()?;
        }
        Ok(PyTensor { t })
    }

    /// The same data without autograd history.
    fn detach(&self, py: Python<'_>) -> PyResult<Py<PyTensor>> {
        PyTensor::wrap(py, self.t.detach())
    }

    /// Backpropagates into the leaves' `.grad` (`gradient` is required for non-scalars). The
    /// graph is kept after a backward pass, so `retain_graph` is accepted for compatibility.
    #[pyo3(signature = (gradient = None, retain_graph = None, create_graph = false))]
    fn backward(
        &self,
        py: Python<'_>,
        gradient: Option<PyRef<'_, PyTensor>>,
        retain_graph: Option<bool>,
        create_graph: bool,
    ) -> PyResult<()> {
        let _ = retain_graph;
        let roots = [self.t.clone()];
        let grads = [gradient.map(|g| g.t.clone())];
        py.detach(move || autograd::backward(&roots, &grads, create_graph))
            .py_err()
    }

    // ---- data exchange ----------------------------------------------------------------------

    /// numpy's array interface: `numpy.asarray(t)` views a CPU tensor's memory without a copy.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.t.requires_grad() {
            return Err(PyRuntimeError::new_err(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.",
            ));
        }
        if self.t.device() != Device::Cpu {
            return Err(PyTypeError::new_err(format!(
                "can't convert {} device tensor to numpy; use .cpu() first",
                self.t.device()
            )));
        }
        let ts = typestr(self.t.dtype())?;
        let ptr = self.t.data_ptr("numpy").py_err()? as usize;
        let item = self.t.dtype().size() as isize;
        let strides: Vec<isize> = self.t.strides().iter().map(|s| s * item).collect();
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, self.t.shape())?)?;
        d.set_item("typestr", ts)?;
        d.set_item("data", (ptr, false))?;
        d.set_item("strides", PyTuple::new(py, strides)?)?;
        Ok(d)
    }

    /// The address of element `[0, .., 0]`.
    fn data_ptr(&self) -> PyResult<usize> {
        Ok(self.t.data_ptr("data_ptr").py_err()? as usize)
    }
}

/// `tensorplay._C._from_bytes(data, shape, dtype)`: a CPU tensor holding a copy of `data`
/// (row-major elements of `dtype`).
#[pyfunction]
pub fn _from_bytes(
    py: Python<'_>,
    data: &[u8],
    shape: Vec<usize>,
    dtype: &Bound<'_, PyAny>,
) -> PyResult<Py<PyTensor>> {
    let dtype = to_dtype(dtype)?;
    let numel: usize = shape.iter().product();
    if data.len() != numel * dtype.size() {
        return Err(PyValueError::new_err(format!(
            "{} bytes do not fill a tensor of {numel} {} elements",
            data.len(),
            crate::convert::dtype_name(dtype)
        )));
    }
    let t = Tensor::empty(&shape, dtype);
    if numel > 0 {
        let ptr = t.data_ptr("from_numpy").py_err()?;
        // SAFETY: `t` is a fresh contiguous CPU tensor of `numel` elements of `dtype`, i.e.
        // exactly `data.len()` bytes (checked above), and it cannot overlap the Python buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
    }
    PyTensor::wrap(py, t)
}

/// The dtype of an array-interface `typestr` in native (little-endian) byte order.
fn typestr_dtype(typestr: &str) -> Option<DType> {
    let native = if cfg!(target_endian = "little") {
        '<'
    } else {
        '>'
    };
    let (order, code) = typestr.split_at(1);
    let order = order.chars().next()?;
    if code != "b1" && order != native && order != '=' {
        return None;
    }
    Some(match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "b1" => DType::Bool,
        _ => return None,
    })
}

/// `tensorplay._C._from_array_interface(obj)`: a CPU tensor sharing the memory of `obj` (a
/// numpy array, or any object with numpy's `__array_interface__`), which it keeps alive until
/// the last view goes; `None` when the memory cannot be shared and the caller must copy: a
/// read-only array, a dtype or byte order the runtime does not have, strides that are not
/// multiples of the element size, an address not aligned to it, or no elements.
#[pyfunction]
pub fn _from_array_interface(
    py: Python<'_>,
    obj: Bound<'_, PyAny>,
) -> PyResult<Option<Py<PyTensor>>> {
    let ai = obj.getattr("__array_interface__")?;
    let ai = ai.cast::<PyDict>()?;
    let item = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        ai.get_item(k)?.ok_or_else(|| {
            PyValueError::new_err(format!("from_numpy: __array_interface__ has no {k:?}"))
        })
    };
    let (addr, readonly): (usize, bool) = item("data")?.extract()?;
    let shape: Vec<usize> = item("shape")?.extract()?;
    let typestr: String = item("typestr")?.extract()?;
    let Some(dtype) = typestr_dtype(&typestr) else {
        return Ok(None);
    };
    let size = dtype.size();
    let numel: usize = shape.iter().product();
    if readonly || numel == 0 || !addr.is_multiple_of(size) {
        return Ok(None);
    }
    let strides: Vec<isize> = match ai.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let bytes: Vec<isize> = s.extract()?;
            if bytes.iter().any(|b| b % size as isize != 0) {
                return Ok(None);
            }
            bytes.iter().map(|b| b / size as isize).collect()
        }
        _ => tensorplay::ir::shape::contiguous_strides(&shape).to_vec(),
    };
    // The elements the layout reaches, relative to `addr`: the storage spans exactly them.
    let (mut lo, mut hi) = (0isize, 0isize);
    for (&n, &s) in shape.iter().zip(&strides) {
        let reach = (n as isize - 1) * s;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    let base = addr.wrapping_add_signed(lo * size as isize) as *mut u8;
    let bytes = (hi - lo + 1) as usize * size;
    let owner: Box<dyn std::any::Any + Send + Sync> = Box::new(obj.clone().unbind());
    // SAFETY: a writable array interface promises `bytes` bytes from `base` (the extent of
    // its own layout) for as long as the object lives; the storage holds the object until its
    // last view goes.
    let t = unsafe {
        Tensor::from_external(base, bytes, &shape, &strides, (-lo) as usize, dtype, owner)
    }
    .py_err()?;
    Ok(Some(PyTensor::wrap(py, t)?))
}
