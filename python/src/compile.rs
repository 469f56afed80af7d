//! `tensorplay.compile`: a Python function over tensors captured and compiled by the Rust
//! compiler. The function runs (under the GIL) only while the compiler captures it; compiled calls
//! run with the GIL released, taking it back only for Python custom-op kernels inside the graph.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tensorplay::Tensor;
use tensorplay::compiler::{CompiledFn, compile};

use crate::call::call_tensor_fn;
use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// A compiled function: call it with tensors; it returns a tuple of tensors.
#[pyclass(name = "_Compiled", module = "tensorplay._C", frozen)]
pub struct Compiled {
    f: Arc<CompiledFn>,
}

#[pymethods]
impl Compiled {
    #[new]
    fn new(func: Py<PyAny>) -> Compiled {
        let func = Arc::new(func);
        Compiled {
            f: Arc::new(compile(move |xs: &[Tensor]| {
                call_tensor_fn(&func, "compile", xs)
            })),
        }
    }

    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: Vec<PyRef<'_, PyTensor>>) -> PyResult<Py<PyTuple>> {
        let xs: Vec<Tensor> = args.iter().map(|a| a.t.clone()).collect();
        let f = self.f.clone();
        let outs = py.detach(move || f.call(&xs)).py_err()?;
        let items: Vec<Py<PyAny>> = outs
            .into_iter()
            .map(|t| Ok(PyTensor::wrap(py, t)?.into_any()))
            .collect::<PyResult<_>>()?;
        Ok(PyTuple::new(py, items)?.unbind())
    }

    /// How many graphs were compiled (one per guard set).
    #[getter]
    fn num_compiled(&self) -> usize {
        self.f.num_compiled()
    }

    /// How many calls ran eagerly (capture failed or the recompile limit was hit).
    #[getter]
    fn eager_calls(&self) -> usize {
        self.f.eager_calls()
    }

    /// The latest compiled graph as text (`None` before the first call).
    fn graph(&self) -> Option<String> {
        self.f.latest().map(|g| g.graph().to_string())
    }

    /// What the compiler made of the latest graph: fused regions, barriers and why.
    fn explain(&self) -> Option<String> {
        self.f.latest().map(|g| g.explain())
    }
}
