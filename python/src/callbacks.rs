//! Python callables run by the Rust dispatcher: kernels and fake kernels, autograd formulas
//! (`setup_context` + `backward` with a Python context object) and vmap rules. Each takes the GIL
//! only while the Python code runs (from whichever thread the runtime calls it), and a Python
//! exception becomes a Rust error that carries it back to the Python caller unchanged.

use std::cell::Cell;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tensorplay::ir::schema::Schema;
use tensorplay::library::autograd::SetupContextBox;
use tensorplay::library::{AutogradCtx, Grad, VmapInfo};
use tensorplay::{Result, Tensor, Value};

use crate::convert::{py_to_outputs, type_name, value_to_py};
use crate::error::stash;
use crate::inflight;
use crate::tensor::PyTensor;

/// Positional and keyword arguments for a Python callable from bound schema values
/// (keyword-only parameters are passed by name; no dict when there are none). A tensor the
/// calling Python code passed positionally is handed over as that same object.
fn py_args<'py>(
    py: Python<'py>,
    schema: &Schema,
    args: &[Value],
) -> PyResult<(Bound<'py, PyTuple>, Option<Bound<'py, PyDict>>)> {
    let mut pos = Vec::with_capacity(args.len());
    let mut kw: Option<Bound<'py, PyDict>> = None;
    for (i, v) in args.iter().enumerate() {
        let obj = match v {
            Value::Tensor(t) => match inflight::input_object(py, t) {
                Some(o) => o,
                None => value_to_py(py, v)?,
            },
            _ => value_to_py(py, v)?,
        };
        match schema.params.get(i) {
            Some(p) if p.kwarg_only => kw
                .get_or_insert_with(|| PyDict::new(py))
                .set_item(&p.name, obj)?,
            _ => pos.push(obj),
        }
    }
    Ok((PyTuple::new(py, pos)?, kw))
}

thread_local! {
    /// Set while a Python fake kernel runs on this thread: the factories make fake tensors.
    static FAKE_MODE: Cell<bool> = const { Cell::new(false) };
}

/// Whether a Python fake kernel is running on this thread (factories then make fake tensors,
/// like PyTorch's fake mode).
pub fn in_fake_mode() -> bool {
    FAKE_MODE.with(Cell::get)
}

/// Restores the fake-mode flag when dropped.
struct FakeModeGuard(bool);

impl Drop for FakeModeGuard {
    fn drop(&mut self) {
        FAKE_MODE.with(|f| f.set(self.0));
    }
}

/// A Python function as a boxed kernel of the op with `schema`; a `fake` kernel runs with the
/// factories in fake mode.
pub fn kernel(
    func: Py<PyAny>,
    schema: Schema,
    fake: bool,
) -> impl Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync + 'static {
    let op = schema.qualified_name();
    move |args: &[Value]| {
        Python::attach(|py| {
            let _mode = fake.then(|| FakeModeGuard(FAKE_MODE.with(|f| f.replace(true))));
            let run = || -> PyResult<Vec<Tensor>> {
                let (a, kw) = py_args(py, &schema, args)?;
                let out = func.bind(py).call(a, kw.as_ref())?;
                inflight::note_outputs(&out);
                py_to_outputs(&out)
            };
            run().map_err(|e| stash(py, &op, e))
        })
    }
}

/// The Python context object kept in the runtime's [`AutogradCtx`].
struct PyCtx(Py<PyAny>);

/// `setup_context(ctx, inputs, output)` (optional) for the op with `schema`: builds a fresh
/// `ctx_class()` object with `needs_input_grad`, runs the user's function on it and keeps the
/// object (and its saved tensors) for `backward`. Without a user function nothing runs here (no
/// GIL, no object): `backward` builds the object then.
pub fn setup_context(
    ctx_class: Py<PyAny>,
    setup: Option<Py<PyAny>>,
    schema: Schema,
) -> SetupContextBox {
    let op = schema.qualified_name();
    Box::new(
        move |ctx: &mut AutogradCtx, args: &[Value], outs: &[Tensor]| {
            if setup.is_none() {
                return Ok(());
            }
            Python::attach(|py| {
                let mut run = || -> PyResult<()> {
                    let obj = ctx_class.bind(py).call0()?;
                    obj.setattr(
                        "needs_input_grad",
                        PyTuple::new(py, ctx.needs_input_grad())?,
                    )?;
                    if let Some(setup) = &setup {
                        let inputs: Vec<Py<PyAny>> = args
                            .iter()
                            .map(|v| value_to_py(py, v))
                            .collect::<PyResult<_>>()?;
                        let outs_py: Vec<Py<PyAny>> = outs
                            .iter()
                            .map(|t| Ok(PyTensor::wrap(py, t.clone())?.into_any()))
                            .collect::<PyResult<_>>()?;
                        let output: Py<PyAny> = if outs_py.len() == 1 {
                            outs_py[0].clone_ref(py)
                        } else {
                            PyTuple::new(py, outs_py)?.into_any().unbind()
                        };
                        setup
                            .bind(py)
                            .call1((&obj, PyTuple::new(py, inputs)?, output))?;
                    }
                    let saved = obj.getattr("saved_tensors")?;
                    let saved = py_to_outputs(&saved)?;
                    let refs: Vec<&Tensor> = saved.iter().collect();
                    ctx.save_for_backward(&refs);
                    ctx.set_typed(Arc::new(PyCtx(obj.unbind())));
                    Ok(())
                };
                run().map_err(|e| stash(py, &op, e))
            })
        },
    )
}

fn to_grad(obj: &Bound<'_, PyAny>) -> PyResult<Grad> {
    if obj.is_none() {
        return Ok(Grad::None);
    }
    if let Ok(t) = obj.extract::<PyRef<'_, PyTensor>>() {
        return Ok(Grad::Tensor(t.t.clone()));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj
            .try_iter()?
            .map(|o| {
                let o = o?;
                if o.is_none() {
                    Ok(None)
                } else {
                    Ok(Some(o.extract::<PyRef<'_, PyTensor>>()?.t.clone()))
                }
            })
            .collect::<PyResult<_>>()?;
        return Ok(Grad::List(items));
    }
    Err(PyTypeError::new_err(format!(
        "backward must return tensors or None, got {}",
        type_name(obj)
    )))
}

/// `backward(ctx, *grads)` → one gradient per input (a tuple) or a single gradient.
pub fn backward(
    func: Py<PyAny>,
    ctx_class: Py<PyAny>,
    op: String,
) -> impl Fn(&AutogradCtx, &[Option<Tensor>]) -> Result<Vec<Grad>> + Send + Sync + 'static {
    move |ctx: &AutogradCtx, grads: &[Option<Tensor>]| {
        Python::attach(|py| {
            let run = || -> PyResult<Vec<Grad>> {
                let obj = match ctx.typed().and_then(|s| s.downcast_ref::<PyCtx>()) {
                    Some(c) => c.0.clone_ref(py),
                    None => {
                        let obj = ctx_class.bind(py).call0()?;
                        obj.setattr(
                            "needs_input_grad",
                            PyTuple::new(py, ctx.needs_input_grad())?,
                        )?;
                        obj.unbind()
                    }
                };
                let mut args: Vec<Py<PyAny>> = vec![obj];
                for g in grads {
                    args.push(match g {
                        Some(t) => PyTensor::wrap(py, t.clone())?.into_any(),
                        None => py.None(),
                    });
                }
                let out = func.bind(py).call1(PyTuple::new(py, args)?)?;
                if out.is_instance_of::<PyTuple>() {
                    out.try_iter()?.map(|g| to_grad(&g?)).collect()
                } else {
                    Ok(vec![to_grad(&out)?])
                }
            };
            run().map_err(|e| stash(py, &op, e))
        })
    }
}

/// What a vmap rule returns: the outputs and the batch dim of each.
type VmapOut = Result<(Vec<Tensor>, Vec<Option<usize>>)>;

/// A `register_vmap` rule: `func(info, in_dims, *args) -> (outputs, out_dims)`; `info` is
/// `info_class(batch_size, randomness)`.
pub fn vmap_rule(
    func: Py<PyAny>,
    info_class: Py<PyAny>,
    schema: Schema,
) -> impl Fn(&VmapInfo, &[Option<usize>], &[Value]) -> VmapOut + Send + Sync + 'static {
    let op = schema.qualified_name();
    move |info: &VmapInfo, in_dims: &[Option<usize>], args: &[Value]| {
        Python::attach(|py| {
            let run = || -> PyResult<(Vec<Tensor>, Vec<Option<usize>>)> {
                let info = info_class
                    .bind(py)
                    .call1((info.batch_size, info.randomness.as_str()))?;
                let dims = PyTuple::new(py, in_dims)?;
                let (a, kw) = py_args(py, &schema, args)?;
                let mut all: Vec<Bound<'_, PyAny>> = vec![info, dims.into_any()];
                all.extend(a.iter());
                let out = func.bind(py).call(PyTuple::new(py, all)?, kw.as_ref())?;
                let (outs, dims): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                    out.extract().map_err(|_| {
                        PyTypeError::new_err("a vmap rule must return (outputs, out_dims)")
                    })?;
                let outs = py_to_outputs(&outs)?;
                let dims: Vec<Option<usize>> = if let Ok(d) = dims.extract::<Option<usize>>() {
                    vec![d; outs.len()]
                } else {
                    dims.extract()?
                };
                Ok((outs, dims))
            };
            run().map_err(|e| stash(py, &op, e))
        })
    }
}
