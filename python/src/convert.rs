//! Conversions between Python objects and the runtime's values: `tensorplay.dtype` and
//! `tensorplay.device` objects, boxed [`Value`]s for op arguments (guided by the schema where
//! there is one), and op results back to Python.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};
use tensorplay::ir::schema::{BaseType, Param, SchemaType};
use tensorplay::{DType, Device, Scalar, Tensor, Value};

use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// `tensorplay.dtype`: one of the seven element types.
#[pyclass(name = "dtype", module = "tensorplay", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType {
    /// The runtime dtype.
    pub dtype: DType,
}

/// PyTorch's spelling of a dtype (`float32`, `int64`, ...).
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::Bool => "bool",
    }
}

#[pymethods]
impl PyDType {
    fn __repr__(&self) -> String {
        format!("tensorplay.{}", dtype_name(self.dtype))
    }

    /// Whether the dtype is a floating-point type.
    #[getter]
    fn is_floating_point(&self) -> bool {
        self.dtype.is_float()
    }

    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.dtype.size()
    }
}

/// `tensorplay.device("cpu")`, `device("cuda", 0)`, `device("cuda:1")`.
#[pyclass(name = "device", module = "tensorplay", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDevice {
    /// The runtime device.
    pub device: Device,
}

#[pymethods]
impl PyDevice {
    #[new]
    #[pyo3(signature = (type_or_name, index = None))]
    fn new(type_or_name: &Bound<'_, PyAny>, index: Option<u16>) -> PyResult<PyDevice> {
        if let Ok(d) = type_or_name.extract::<PyRef<'_, PyDevice>>() {
            return Ok(*d);
        }
        let name: String = type_or_name.extract()?;
        let device: Device = name.parse().py_err()?;
        match (device, index) {
            (d, None) => Ok(PyDevice { device: d }),
            (Device::Cuda(_), Some(i)) if !name.contains(':') => Ok(PyDevice {
                device: Device::Cuda(i),
            }),
            (Device::Cpu, Some(0)) => Ok(PyDevice {
                device: Device::Cpu,
            }),
            _ => Err(PyValueError::new_err(format!(
                "device(): index {index:?} does not fit device string `{name}`"
            ))),
        }
    }

    /// `"cpu"`, `"cuda"` or `"meta"`.
    #[getter]
    fn r#type(&self) -> &'static str {
        self.device.kind()
    }

    /// The CUDA device index (`None` on the CPU).
    #[getter]
    fn index(&self) -> Option<u16> {
        match self.device {
            Device::Cuda(i) => Some(i),
            _ => None,
        }
    }

    fn __repr__(&self) -> String {
        match self.device {
            Device::Cuda(i) => format!("device(type='cuda', index={i})"),
            d => format!("device(type='{}')", d.kind()),
        }
    }

    fn __str__(&self) -> String {
        self.device.to_string()
    }
}

/// A dtype from a `tensorplay.dtype` or a name (`"float32"`, `"f32"`).
pub fn to_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(d) = obj.extract::<PyRef<'_, PyDType>>() {
        return Ok(d.dtype);
    }
    if let Ok(s) = obj.extract::<String>() {
        return s.parse().py_err();
    }
    Err(PyTypeError::new_err(format!(
        "expected a tensorplay.dtype, got {}",
        type_name(obj)
    )))
}

/// A device from a `tensorplay.device`, a string (`"cuda:0"`) or an index (a CUDA device).
pub fn to_device(obj: &Bound<'_, PyAny>) -> PyResult<Device> {
    if let Ok(d) = obj.extract::<PyRef<'_, PyDevice>>() {
        return Ok(d.device);
    }
    if let Ok(s) = obj.extract::<String>() {
        return s.parse().py_err();
    }
    if let Ok(i) = obj.extract::<u16>() {
        return Ok(Device::Cuda(i));
    }
    Err(PyTypeError::new_err(format!(
        "expected a tensorplay.device or a device string, got {}",
        type_name(obj)
    )))
}

/// The Python type name of `obj`, for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// A Python number as a [`Scalar`], or `None` for anything else.
pub fn to_scalar(obj: &Bound<'_, PyAny>) -> Option<Scalar> {
    if obj.is_instance_of::<PyBool>() {
        return obj.extract::<bool>().ok().map(Scalar::Bool);
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<i64>().ok().map(Scalar::Int);
    }
    if obj.is_instance_of::<PyFloat>() {
        return obj.extract::<f64>().ok().map(Scalar::Float);
    }
    None
}

fn list_value(items: &[Bound<'_, PyAny>]) -> PyResult<Value> {
    let tensors: Vec<Option<Tensor>> = items
        .iter()
        .map(|o| {
            if o.is_none() {
                Some(None)
            } else {
                o.extract::<PyRef<'_, PyTensor>>()
                    .ok()
                    .map(|t| Some(t.t.clone()))
            }
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default();
    if !items.is_empty() && tensors.len() == items.len() {
        if tensors.iter().all(Option::is_some) {
            return Ok(Value::TensorList(tensors.into_iter().flatten().collect()));
        }
        return Ok(Value::OptionalTensorList(tensors));
    }
    let scalars: Option<Vec<Scalar>> = items.iter().map(to_scalar).collect();
    let Some(scalars) = scalars else {
        return Err(PyTypeError::new_err(
            "a list argument must hold tensors (or None) or numbers of one kind",
        ));
    };
    if !scalars.is_empty() && scalars.iter().all(|s| matches!(s, Scalar::Bool(_))) {
        return Ok(Value::BoolList(
            scalars
                .iter()
                .map(|s| matches!(s, Scalar::Bool(true)))
                .collect(),
        ));
    }
    if scalars.iter().all(|s| matches!(s, Scalar::Int(_))) {
        return Ok(Value::IntList(
            scalars
                .iter()
                .map(|s| if let Scalar::Int(i) = s { *i } else { 0 })
                .collect(),
        ));
    }
    Ok(Value::FloatList(
        scalars
            .iter()
            .map(|s| match s {
                Scalar::Int(i) => *i as f64,
                Scalar::Float(f) => *f,
                Scalar::Bool(b) => f64::from(u8::from(*b)),
            })
            .collect(),
    ))
}

/// A Python object as a boxed [`Value`] with no schema to guide it.
pub fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::None);
    }
    if let Ok(t) = obj.extract::<PyRef<'_, PyTensor>>() {
        return Ok(Value::Tensor(t.t.clone()));
    }
    if let Some(s) = to_scalar(obj) {
        return Ok(match s {
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
        });
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Value::Str(obj.extract()?));
    }
    if let Ok(d) = obj.extract::<PyRef<'_, PyDType>>() {
        return Ok(Value::DType(d.dtype));
    }
    if let Ok(d) = obj.extract::<PyRef<'_, PyDevice>>() {
        return Ok(Value::Device(d.device));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
        return list_value(&items);
    }
    // numpy scalars and other numbers.
    if let Ok(i) = obj
        .call_method0("__index__")
        .and_then(|v| v.extract::<i64>())
    {
        return Ok(Value::Int(i));
    }
    if let Ok(f) = obj
        .call_method0("__float__")
        .and_then(|v| v.extract::<f64>())
    {
        return Ok(Value::Float(f));
    }
    Err(PyTypeError::new_err(format!(
        "cannot pass an object of type {} to an operator",
        type_name(obj)
    )))
}

/// A Python object as the value for schema parameter `param`: a Python number for a `Tensor`
/// parameter becomes a wrapped scalar (it only raises the promotion category, as in PyTorch); a
/// device string for a `Device` parameter and a dtype for a `ScalarType` one are converted.
pub fn to_param_value(param: &Param, obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    // The common case first: a tensor is a tensor value whatever the parameter's type.
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(Value::Tensor(t.get().t.clone()));
    }
    let ty = match &param.ty {
        SchemaType::Optional(inner) => inner.as_ref(),
        t => t,
    };
    // PyTorch takes one int where a dim list is expected (`x.sum(1)`).
    if let SchemaType::List(inner, _) = ty
        && matches!(
            inner.as_ref(),
            SchemaType::Base(BaseType::Int | BaseType::SymInt)
        )
        && !obj.is_instance_of::<PyBool>()
        && let Ok(i) = obj.cast::<PyInt>()
    {
        return Ok(Value::IntList(vec![i.extract()?]));
    }
    if let SchemaType::Base(base) = ty {
        match base {
            BaseType::Tensor => {
                if let Some(s) = to_scalar(obj) {
                    return Ok(Value::Tensor(Tensor::wrapped_scalar(s)));
                }
            }
            BaseType::Device if obj.is_instance_of::<PyString>() => {
                return Ok(Value::Device(to_device(obj)?));
            }
            BaseType::ScalarType if obj.is_instance_of::<PyString>() => {
                return Ok(Value::DType(to_dtype(obj)?));
            }
            _ => {}
        }
    }
    to_value(obj)
}

/// A value as the Python object a Python kernel receives.
pub fn value_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    let tensor =
        |t: &Tensor| -> PyResult<Py<PyAny>> { Ok(PyTensor::wrap(py, t.clone())?.into_any()) };
    Ok(match v {
        Value::Tensor(t) => tensor(t)?,
        Value::OptionalTensor(Some(t)) => tensor(t)?,
        Value::OptionalTensor(None) | Value::None => py.None(),
        Value::TensorList(ts) => {
            let items: Vec<Py<PyAny>> = ts.iter().map(tensor).collect::<PyResult<_>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::OptionalTensorList(ts) => {
            let items: Vec<Py<PyAny>> = ts
                .iter()
                .map(|t| t.as_ref().map_or_else(|| Ok(py.None()), tensor))
                .collect::<PyResult<_>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::Float(f) => f.into_pyobject(py)?.into_any().unbind(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Str(s) => PyString::new(py, s).into_any().unbind(),
        Value::IntList(v) => PyList::new(py, v)?.into_any().unbind(),
        Value::FloatList(v) => PyList::new(py, v)?.into_any().unbind(),
        Value::BoolList(v) => PyList::new(py, v)?.into_any().unbind(),
        Value::DType(d) => Py::new(py, PyDType { dtype: *d })?.into_any(),
        Value::Device(d) => Py::new(py, PyDevice { device: *d })?.into_any(),
        Value::SymInt(s) => s.to_i64().into_pyobject(py)?.into_any().unbind(),
        Value::SymIntList(l) => PyList::new(py, l.to_ints())?.into_any().unbind(),
    })
}

/// Op outputs as Python: nothing → `None`, one tensor → the tensor, several → a tuple.
pub fn outputs_to_py(py: Python<'_>, outs: Vec<Tensor>, returns: usize) -> PyResult<Py<PyAny>> {
    match (outs.len(), returns) {
        (0, _) => Ok(py.None()),
        (1, r) if r <= 1 => Ok(PyTensor::wrap(
            py,
            outs.into_iter().next().unwrap_or_else(|| unreachable!()),
        )?
        .into_any()),
        _ => {
            let items: Vec<Py<PyAny>> = outs
                .into_iter()
                .map(|t| Ok(PyTensor::wrap(py, t)?.into_any()))
                .collect::<PyResult<_>>()?;
            Ok(PyTuple::new(py, items)?.into_any().unbind())
        }
    }
}

/// A Python callback's result as output tensors: `None` → none, a tensor → one, a tuple or list
/// of tensors → those.
pub fn py_to_outputs(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if obj.is_none() {
        return Ok(vec![]);
    }
    if let Ok(t) = obj.extract::<PyRef<'_, PyTensor>>() {
        return Ok(vec![t.t.clone()]);
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        return obj
            .try_iter()?
            .map(|o| {
                let o = o?;
                o.extract::<PyRef<'_, PyTensor>>()
                    .map(|t| t.t.clone())
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "a kernel must return tensors, got an element of type {}",
                            type_name(&o)
                        ))
                    })
            })
            .collect();
    }
    Err(PyTypeError::new_err(format!(
        "a kernel must return a Tensor, a tuple of tensors or None, got {}",
        type_name(obj)
    )))
}
