//! `tensorplay.save_file` / `tensorplay.load_file`: a dict of named tensors to and from a
//! safetensors file, through the Rust `nn` crate's checkpoint functions (PyTorch's
//! `safetensors.torch.save_file` / `load_file` read and write the same files).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorplay::nn::{StateDict, load_safetensors, save_safetensors};

use crate::convert::type_name;
use crate::error::IntoPyResult;
use crate::tensor::PyTensor;

/// `save_file(tensors, filename)`: writes the `{name: Tensor}` dict; `TypeError` naming the
/// first key that is not a string or value that is not a tensor.
#[pyfunction]
pub fn save_file(py: Python<'_>, tensors: &Bound<'_, PyDict>, filename: &str) -> PyResult<()> {
    let mut state = StateDict::new();
    for (k, v) in tensors.iter() {
        let name: String = k.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "save_file: tensors: keys must be strings, got {}",
                type_name(&k)
            ))
        })?;
        let t = v.cast::<PyTensor>().map_err(|_| {
            PyTypeError::new_err(format!(
                "save_file: tensors['{name}'] must be a Tensor, got {}",
                type_name(&v)
            ))
        })?;
        state.insert(name, t.get().t.detach());
    }
    let path = filename.to_string();
    py.detach(move || save_safetensors(&state, &path)).py_err()
}

/// `load_file(filename)`: the file's tensors as a `{name: Tensor}` dict, sorted by name.
#[pyfunction]
pub fn load_file<'py>(py: Python<'py>, filename: &str) -> PyResult<Bound<'py, PyDict>> {
    let path = filename.to_string();
    let state = py.detach(move || load_safetensors(&path)).py_err()?;
    let out = PyDict::new(py);
    for (name, t) in state.iter() {
        out.set_item(name, PyTensor::wrap(py, t.clone())?)?;
    }
    Ok(out)
}
