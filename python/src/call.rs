//! Calling operators from Python: the generic `_C._call(qualname, args, kwargs)` every op
//! function and method goes through (arguments bound to the op's schema; the GIL released while
//! the runtime works), the op table for `tensorplay/_ops.py`, grad mode, autocast, `autograd.grad`
//! and `vmap`.

use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tensorplay::library::registry;
use tensorplay::{Tensor, Value, autocast, autograd, dispatch, ops};

use crate::convert::{outputs_to_py, py_to_outputs, to_dtype, to_param_value, to_value};
use crate::error::{IntoPyResult, stash};
use crate::inflight;
use crate::tensor::PyTensor;

/// `_call(qualname, args, kwargs)`: calls any registered op through the dispatcher.
#[pyfunction]
#[pyo3(signature = (qualname, args, kwargs = None))]
pub fn _call(
    py: Python<'_>,
    qualname: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    call_op(py, qualname, args, kwargs, false)
}

/// The base class of `tensorplay.library.CustomOpDef`: calling an instance calls the op
/// `qualname` straight from C (no Python frame, no argument re-packing). Its kernels are Python
/// functions, so the call keeps the GIL they would take back at once, and the kernel sees the
/// caller's tensor objects (see `inflight`).
#[pyclass(name = "_CustomOpCall", module = "tensorplay._C", subclass, frozen)]
pub struct CustomOpCall {
    qualname: String,
}

#[pymethods]
impl CustomOpCall {
    #[new]
    #[pyo3(signature = (qualname, *_rest, **_kw))]
    fn new(
        qualname: &str,
        _rest: &Bound<'_, PyTuple>,
        _kw: Option<&Bound<'_, PyDict>>,
    ) -> CustomOpCall {
        CustomOpCall {
            qualname: qualname
                .split('(')
                .next()
                .unwrap_or(qualname)
                .trim()
                .to_string(),
        }
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        call_op(py, &self.qualname, args, kwargs, true)
    }
}

/// Binds `args`/`kwargs` to the schema of `qualname` and runs it through the dispatcher. A custom
/// op's call opens an `inflight` frame (its Python kernel gets the caller's tensor objects, the
/// caller the kernel's); `keep_gil` runs it without releasing the GIL (for ops whose kernels are
/// Python functions); otherwise the GIL is released while the runtime works.
///
/// The GIL is kept only when the layers around the kernel do no parallel work: inside an
/// autocast region (input casts) or under vmap (stacking per-sample results) it is released as
/// usual, since a thread holding the GIL must never wait for the thread pool — a pool worker may
/// itself be waiting for the GIL in another thread's Python callback.
pub(crate) fn call_op(
    py: Python<'_>,
    qualname: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    keep_gil: bool,
) -> PyResult<Py<PyAny>> {
    let op = registry().get(qualname).py_err()?;
    let schema = op.schema();
    let mut positional = schema.params.iter().filter(|p| !p.kwarg_only);
    let mut values = Vec::with_capacity(args.len());
    for a in args.iter() {
        values.push(match positional.next() {
            Some(p) => to_param_value(p, &a)?,
            None => to_value(&a)?,
        });
    }
    let mut kw: Vec<(String, Value)> = Vec::new();
    if let Some(kwargs) = kwargs {
        for (k, v) in kwargs.iter() {
            let name: String = k.extract()?;
            let value = match schema.param(&name) {
                Some(p) => to_param_value(p, &v)?,
                None => to_value(&v)?,
            };
            kw.push((name, value));
        }
    }
    let returns = schema.returns.len();
    let frame = op.builtin().is_none().then(|| inflight::enter(args));
    let keep_gil = keep_gil && !autocast::any_active() && tensorplay::vmap::depth() == 0;
    let outs = if keep_gil {
        dispatch::call_operator(&op, &values, &kw)
    } else {
        let op = op.clone();
        py.detach(move || dispatch::call_operator(&op, &values, &kw))
    }
    .py_err()?;
    match frame {
        Some(frame) if !outs.is_empty() => {
            let objs: Vec<Py<PyAny>> = outs
                .into_iter()
                .map(|t| frame.output_object(py, t))
                .collect::<PyResult<_>>()?;
            if objs.len() == 1 && returns <= 1 {
                Ok(objs.into_iter().next().unwrap_or_else(|| py.None()))
            } else {
                Ok(PyTuple::new(py, objs)?.into_any().unbind())
            }
        }
        _ => outputs_to_py(py, outs, returns),
    }
}

/// `_op_table()`: `(qualname, schema text)` of every registered op, builtin ops first.
#[pyfunction]
pub fn _op_table() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = ops::all_ops()
        .iter()
        .map(|d| (format!("tp::{}", d.name), format!("tp::{}", d.schema)))
        .collect();
    for name in registry().names() {
        if !out.iter().any(|(n, _)| *n == name)
            && let Ok(op) = registry().get(&name)
        {
            out.push((name, op.schema().to_string()));
        }
    }
    out
}

/// `_schema(qualname)`: the schema text of a registered op.
#[pyfunction]
pub fn _schema(qualname: &str) -> PyResult<String> {
    Ok(registry().get(qualname).py_err()?.schema().to_string())
}

/// Grad mode for a `with` block: enter sets it, exit restores the previous mode.
#[pyclass(name = "_GradMode", module = "tensorplay._C", unsendable)]
pub struct GradMode {
    enabled: bool,
    guard: Option<autograd::GradModeGuard>,
}

#[pymethods]
impl GradMode {
    #[new]
    fn new(enabled: bool) -> GradMode {
        GradMode {
            enabled,
            guard: None,
        }
    }

    fn __enter__(&mut self) {
        self.guard = Some(if self.enabled {
            autograd::enable_grad()
        } else {
            autograd::no_grad()
        });
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.guard = None;
        false
    }
}

/// Whether ops on this thread record autograd history.
#[pyfunction]
pub fn is_grad_enabled() -> bool {
    autograd::is_grad_enabled()
}

/// Autocast for a `with` block (`device_type`, `dtype`); exit restores the previous state.
#[pyclass(name = "_Autocast", module = "tensorplay._C", unsendable)]
pub struct Autocast {
    device_type: String,
    dtype: tensorplay::DType,
    enabled: bool,
    guard: Option<autocast::AutocastGuard>,
}

#[pymethods]
impl Autocast {
    #[new]
    #[pyo3(signature = (device_type, dtype, enabled = true))]
    fn new(device_type: String, dtype: &Bound<'_, PyAny>, enabled: bool) -> PyResult<Autocast> {
        Ok(Autocast {
            device_type,
            dtype: to_dtype(dtype)?,
            enabled,
            guard: None,
        })
    }

    fn __enter__(&mut self) -> PyResult<()> {
        if self.enabled {
            self.guard = Some(autocast::autocast(&self.device_type, self.dtype).py_err()?);
        }
        Ok(())
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.guard = None;
        false
    }
}

fn tensors(objs: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if let Ok(t) = objs.extract::<PyRef<'_, PyTensor>>() {
        return Ok(vec![t.t.clone()]);
    }
    py_to_outputs(objs)
}

/// `autograd.grad(outputs, inputs, grad_outputs=None, create_graph=False)`.
#[pyfunction]
#[pyo3(signature = (outputs, inputs, grad_outputs = None, retain_graph = None, create_graph = false, allow_unused = None))]
pub fn grad(
    py: Python<'_>,
    outputs: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    grad_outputs: Option<&Bound<'_, PyAny>>,
    retain_graph: Option<bool>,
    create_graph: bool,
    allow_unused: Option<bool>,
) -> PyResult<Py<PyTuple>> {
    let _ = (retain_graph, allow_unused);
    let outs = tensors(outputs)?;
    let ins = tensors(inputs)?;
    let gos: Vec<Option<Tensor>> = match grad_outputs.filter(|g| !g.is_none()) {
        None => vec![None; outs.len()],
        Some(g) => tensors(g)?.into_iter().map(Some).collect(),
    };
    let grads = py
        .detach(move || autograd::grad(&outs, &ins, &gos, create_graph))
        .py_err()?;
    let items: Vec<Py<PyAny>> = grads
        .into_iter()
        .map(|g| match g {
            Some(t) => Ok(PyTensor::wrap(py, t)?.into_any()),
            None => Ok(py.None()),
        })
        .collect::<PyResult<_>>()?;
    Ok(PyTuple::new(py, items)?.unbind())
}

/// Calls a Python function on tensors from Rust (any thread): takes the GIL only for the call;
/// a Python exception comes back as a Rust error that carries it.
pub fn call_tensor_fn(
    func: &Py<PyAny>,
    what: &str,
    xs: &[Tensor],
) -> tensorplay::Result<Vec<Tensor>> {
    Python::attach(|py| {
        let run = || -> PyResult<Vec<Tensor>> {
            let args: Vec<Py<PyAny>> = xs
                .iter()
                .map(|t| Ok(PyTensor::wrap(py, t.clone())?.into_any()))
                .collect::<PyResult<_>>()?;
            let out = func.bind(py).call1(PyTuple::new(py, args)?)?;
            py_to_outputs(&out)
        };
        run().map_err(|e| stash(py, what, e))
    })
}

/// `_vmap(func, in_dims, out_dims, args)`: runs `func` vectorised over the batch dims.
#[pyfunction]
pub fn _vmap(
    py: Python<'_>,
    func: Py<PyAny>,
    in_dims: Vec<Option<i64>>,
    out_dims: Vec<i64>,
    args: Vec<PyRef<'_, PyTensor>>,
) -> PyResult<Py<PyTuple>> {
    if in_dims.len() != args.len() {
        return Err(PyTypeError::new_err(format!(
            "vmap: in_dims has {} entries for {} inputs",
            in_dims.len(),
            args.len()
        )));
    }
    let xs: Vec<Tensor> = args.iter().map(|a| a.t.clone()).collect();
    let func = Arc::new(func);
    let outs = py
        .detach(move || {
            let f = tensorplay::vmap(
                move |ts: &[Tensor]| call_tensor_fn(&func, "vmap", ts),
                in_dims,
                out_dims,
            );
            f(&xs)
        })
        .py_err()?;
    let items: Vec<Py<PyAny>> = outs
        .into_iter()
        .map(|t| Ok(PyTensor::wrap(py, t)?.into_any()))
        .collect::<PyResult<_>>()?;
    Ok(PyTuple::new(py, items)?.unbind())
}
