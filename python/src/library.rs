//! The Rust half of `tensorplay.library`: defining custom ops whose kernels are Python functions,
//! and every registration (kernels, fake kernels, autograd, autocast, vmap, enabling kernels),
//! `get_kernel`, `opcheck` and the `Library` class. Argument parsing, decorators and schema
//! inference from annotations live in `tensorplay/library.py`.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tensorplay::library::{self as lib, KernelEnabledGuard, KernelFn, Library, OpcheckOptions};
use tensorplay::{Tensor, Value};

use crate::callbacks;
use crate::convert::{outputs_to_py, to_dtype, to_param_value, to_value};
use crate::error::IntoPyResult;

/// `tensorplay.library.Library(ns, kind)`: registrations made through it are removed when it is
/// destroyed (or `_destroy()` is called).
#[pyclass(name = "Library", module = "tensorplay._C", subclass)]
pub struct PyLibrary {
    lib: Option<Library>,
}

impl PyLibrary {
    fn get(&self) -> PyResult<&Library> {
        self.lib
            .as_ref()
            .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("this Library was destroyed"))
    }
}

/// The Rust library behind an optional `lib=` argument.
fn lib_of<'a>(l: &'a Option<PyRef<'_, PyLibrary>>) -> PyResult<Option<&'a Library>> {
    l.as_ref().map(|l| l.get()).transpose()
}

fn schema_of(op: &str) -> PyResult<tensorplay::ir::schema::Schema> {
    Ok(lib::op_handle(op).py_err()?.schema())
}

#[pymethods]
impl PyLibrary {
    #[new]
    #[pyo3(signature = (namespace, kind = "DEF"))]
    fn new(namespace: &str, kind: &str) -> PyResult<PyLibrary> {
        Ok(PyLibrary {
            lib: Some(Library::new(namespace, kind).py_err()?),
        })
    }

    /// The namespace.
    #[getter]
    fn ns(&self) -> PyResult<String> {
        Ok(self.get()?.namespace().to_string())
    }

    /// `DEF`, `IMPL` or `FRAGMENT`.
    #[getter]
    fn kind(&self) -> PyResult<String> {
        Ok(format!("{:?}", self.get()?.kind()).to_uppercase())
    }

    /// Defines an op from a schema (`"add(Tensor a, Tensor b) -> Tensor"`); returns its name.
    #[pyo3(signature = (schema, alias_analysis = "", tags = Vec::new()))]
    fn define(&self, schema: &str, alias_analysis: &str, tags: Vec<String>) -> PyResult<String> {
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        self.get()?.define(schema, alias_analysis, &tags).py_err()
    }

    /// Registers a Python kernel for `op_name` in the slot `device_type`/`dispatch_key` names.
    #[pyo3(signature = (op_name, func, device_type = "CompositeExplicitAutograd", dispatch_key = "", allow_override = true))]
    fn _impl(
        &self,
        op_name: &str,
        func: Py<PyAny>,
        device_type: &str,
        dispatch_key: &str,
        allow_override: bool,
    ) -> PyResult<()> {
        let l = self.get()?;
        let qual = if op_name.contains("::") {
            op_name.to_string()
        } else {
            format!("{}::{op_name}", l.namespace())
        };
        let qual = qual
            .split('(')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let schema = schema_of(&qual)?;
        l.r#impl(
            op_name,
            callbacks::kernel(func, schema, false),
            device_type,
            dispatch_key,
            allow_override,
        )
        .py_err()
    }

    /// Always an error: the dispatcher has no per-key fallthrough table.
    fn fallback(&self, kind: &str) -> PyResult<()> {
        self.get()?.fallback(kind).py_err()
    }

    /// Removes everything registered through this library.
    fn _destroy(&mut self) {
        self.lib = None;
    }
}

/// Defines a custom op whose default (or per-device) kernel is the Python function `func`.
#[pyfunction]
#[pyo3(signature = (name, func, schema, mutates_args, device_types, triton = false, lib = None))]
pub fn _custom_op(
    name: &str,
    func: Py<PyAny>,
    schema: &str,
    mutates_args: Vec<String>,
    device_types: Option<Vec<String>>,
    triton: bool,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<String> {
    let mut b = if triton {
        lib::triton_op(name)
    } else {
        lib::custom_op(name)
    };
    b = b.schema(schema).mutates_args(mutates_args);
    if let Some(types) = &device_types {
        let types: Vec<&str> = types.iter().map(String::as_str).collect();
        b = b.device_types(&types[..]);
    }
    if let Some(l) = lib_of(&lib)? {
        b = b.lib(l);
    }
    let full = if schema.trim_start().starts_with('(') {
        format!("{name}{schema}")
    } else {
        schema.to_string()
    };
    let parsed = tensorplay::ir::schema::Schema::parse(&full).py_err()?;
    let op = b.build(callbacks::kernel(func, parsed, false)).py_err()?;
    Ok(op.schema().to_string())
}

/// `define(qualname, schema, lib)`.
#[pyfunction]
#[pyo3(signature = (qualname, schema = None, lib = None))]
pub fn _define(
    qualname: &str,
    schema: Option<&str>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    lib::define(qualname, schema, lib_of(&lib)?).py_err()
}

/// `impl(qualname, types, func, lib)`: `types` are `CPU`/`CUDA`/`Composite…` spellings.
#[pyfunction]
#[pyo3(signature = (qualname, types, func, lib = None))]
pub fn _impl(
    qualname: &str,
    types: Vec<String>,
    func: Py<PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    let k = callbacks::kernel(func, schema_of(qualname)?, false);
    lib::r#impl(qualname, &types, k, lib_of(&lib)?).py_err()
}

/// `register_kernel(op, device_types, func, lib)`: `None`/`[]`, `default` and `Composite…` keys
/// are the device-agnostic slot.
#[pyfunction]
#[pyo3(signature = (op, device_types, func, lib = None))]
pub fn _register_kernel(
    op: &str,
    device_types: Vec<String>,
    func: Py<PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    let types: Vec<&str> = device_types.iter().map(String::as_str).collect();
    let k = callbacks::kernel(func, schema_of(op)?, false);
    lib::register_kernel(op, &types[..], k, lib_of(&lib)?).py_err()
}

/// `register_fake(op, func, lib, allow_override)`.
#[pyfunction]
#[pyo3(signature = (op, func, lib = None, allow_override = true))]
pub fn _register_fake(
    op: &str,
    func: Py<PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
    allow_override: bool,
) -> PyResult<()> {
    let k = callbacks::kernel(func, schema_of(op)?, true);
    lib::register_fake(op, k, lib_of(&lib)?, allow_override).py_err()
}

/// `register_autograd(op, backward, setup_context, ctx_class, lib)`.
#[pyfunction]
#[pyo3(signature = (op, backward, setup_context, ctx_class, lib = None))]
pub fn _register_autograd(
    op: &str,
    backward: Py<PyAny>,
    setup_context: Option<Py<PyAny>>,
    ctx_class: Py<PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    let schema = schema_of(op)?;
    let ctx2 = Python::attach(|py| ctx_class.clone_ref(py));
    let setup = callbacks::setup_context(ctx_class, setup_context, schema.clone());
    let bw = callbacks::backward(backward, ctx2, schema.qualified_name());
    lib::register_autograd(op, bw, Some(setup), lib_of(&lib)?).py_err()
}

/// `register_autocast(op, device_type, cast_inputs, lib)`.
#[pyfunction]
#[pyo3(signature = (op, device_type, cast_inputs, lib = None))]
pub fn _register_autocast(
    op: &str,
    device_type: &str,
    cast_inputs: &Bound<'_, PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    lib::register_autocast(op, device_type, to_dtype(cast_inputs)?, lib_of(&lib)?).py_err()
}

/// `register_vmap(op, func, info_class, lib)`.
#[pyfunction]
#[pyo3(signature = (op, func, info_class, lib = None))]
pub fn _register_vmap(
    op: &str,
    func: Py<PyAny>,
    info_class: Py<PyAny>,
    lib: Option<PyRef<'_, PyLibrary>>,
) -> PyResult<()> {
    let rule = callbacks::vmap_rule(func, info_class, schema_of(op)?);
    lib::register_vmap(op, rule, lib_of(&lib)?).py_err()
}

/// The effect of `set_kernel_enabled`, undone by `restore()` (or when collected).
#[pyclass(name = "_KernelEnabled", module = "tensorplay._C")]
pub struct KernelEnabled {
    guard: Option<KernelEnabledGuard>,
    previous: bool,
    warning: Option<String>,
}

#[pymethods]
impl KernelEnabled {
    /// The flag before the change.
    #[getter]
    fn previous(&self) -> bool {
        self.previous
    }

    /// The warning when the slot held no kernel.
    #[getter]
    fn warning(&self) -> Option<String> {
        self.warning.clone()
    }

    /// Restores the previous flag.
    fn restore(&mut self) {
        self.guard = None;
    }
}

/// `set_kernel_enabled(op, device_type, enabled)`.
#[pyfunction]
pub fn _set_kernel_enabled(op: &str, device_type: &str, enabled: bool) -> PyResult<KernelEnabled> {
    let g = lib::op_handle(op)
        .py_err()?
        .set_kernel_enabled(device_type, enabled)
        .py_err()?;
    Ok(KernelEnabled {
        previous: g.previous(),
        warning: g.warning().map(str::to_string),
        guard: Some(g),
    })
}

/// A kernel from `get_kernel`: calling it runs that kernel directly (no dispatch).
#[pyclass(name = "_Kernel", module = "tensorplay._C", frozen)]
pub struct PyKernel {
    f: KernelFn,
    op: String,
}

#[pymethods]
impl PyKernel {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let schema = schema_of(&self.op)?;
        let mut values: Vec<Value> = Vec::new();
        for (i, a) in args.iter().enumerate() {
            values.push(match schema.params.get(i) {
                Some(p) => to_param_value(p, &a)?,
                None => to_value(&a)?,
            });
        }
        if let Some(kw) = kwargs {
            for p in schema.params.iter().skip(values.len()) {
                match kw.get_item(&p.name)? {
                    Some(v) => values.push(to_param_value(p, &v)?),
                    None => break,
                }
            }
        }
        let f = self.f.clone();
        let outs: Vec<Tensor> = py.detach(move || f(&values)).py_err()?;
        outputs_to_py(py, outs, schema.returns.len())
    }

    fn __repr__(&self) -> String {
        format!("<kernel of {}>", self.op)
    }
}

/// `get_kernel(op, dispatch_key)`; `LookupError` when nothing usable is registered.
#[pyfunction]
pub fn _get_kernel(op: &str, dispatch_key: &str) -> PyResult<PyKernel> {
    let f = lib::get_kernel(op, dispatch_key).py_err()?;
    Ok(PyKernel {
        f,
        op: op.to_string(),
    })
}

/// `opcheck(op, args, kwargs, test_utils, raise_exception, atol, rtol)` → the failure map.
#[pyfunction]
#[pyo3(signature = (op, args, kwargs, test_utils, raise_exception, atol, rtol))]
#[allow(clippy::too_many_arguments)]
pub fn _opcheck(
    py: Python<'_>,
    op: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    test_utils: Vec<String>,
    raise_exception: bool,
    atol: Option<f64>,
    rtol: Option<f64>,
) -> PyResult<BTreeMap<String, String>> {
    let schema = schema_of(op)?;
    let mut values = Vec::new();
    for (i, a) in args.iter().enumerate() {
        values.push(match schema.params.get(i) {
            Some(p) => to_param_value(p, &a)?,
            None => to_value(&a)?,
        });
    }
    let mut kw: Vec<(String, Value)> = Vec::new();
    if let Some(k) = kwargs {
        for (name, v) in k.iter() {
            let name: String = name.extract()?;
            let value = match schema.param(&name) {
                Some(p) => to_param_value(p, &v)?,
                None => to_value(&v)?,
            };
            kw.push((name, value));
        }
    }
    let opts = OpcheckOptions {
        test_utils,
        raise_exception,
        atol,
        rtol,
    };
    let op = op.to_string();
    py.detach(move || {
        let kw: Vec<(&str, Value)> = kw.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        lib::opcheck(op.as_str(), &values, &kw, opts)
    })
    .py_err()
}

/// `tensorplay.library.get_ctx()`'s native half: the context of the fake kernel running on this
/// thread (a `LookupError` outside one).
#[pyclass(name = "_FakeCtx", module = "tensorplay._C", frozen)]
pub struct PyFakeCtx {
    ctx: lib::FakeCtx,
}

#[pymethods]
impl PyFakeCtx {
    /// A fresh data-dependent size in `min..=max` as `(id, min, max, hint)`: `hint` is the
    /// concrete value fake shapes use (sizes are concrete in TensorPlay's shapes).
    #[pyo3(signature = (min, max))]
    fn new_dynamic_size(
        &self,
        min: usize,
        max: Option<usize>,
    ) -> PyResult<(u64, usize, Option<usize>, usize)> {
        let s = self.ctx.new_dynamic_size(min, max).py_err()?;
        Ok((s.id(), s.min(), s.max(), s.hint()))
    }

    /// The op whose fake kernel is running.
    #[getter]
    fn op(&self) -> String {
        self.ctx.op().to_string()
    }
}

/// The context of the fake kernel running on this thread.
#[pyfunction]
pub fn _get_ctx() -> PyResult<PyFakeCtx> {
    Ok(PyFakeCtx {
        ctx: lib::get_ctx().py_err()?,
    })
}
