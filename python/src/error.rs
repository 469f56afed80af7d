//! Errors across the boundary: Rust errors become the Python exception PyTorch raises in that
//! case, and a Python exception raised inside a Python callback (kernel, fake kernel, backward,
//! vmap rule, compiled function) travels through the Rust runtime and reaches the caller unchanged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

use pyo3::exceptions::{PyIndexError, PyLookupError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use tensorplay::Error;

/// Python exceptions raised inside callbacks, waiting for the Rust error that carries their
/// token to come back out to Python.
static PENDING: LazyLock<Mutex<HashMap<u64, PyErr>>> = LazyLock::new(Default::default);
static NEXT: AtomicU64 = AtomicU64::new(1);
const TOKEN: &str = "[pyerr:";

/// Keeps `err` and returns a Rust error that names it; [`to_py`] turns that error back into
/// `err` itself (same type, message and traceback).
pub fn stash(py: Python<'_>, op: &str, err: PyErr) -> Error {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let text = err.to_string();
    let _ = py;
    pending().insert(id, err);
    Error::Unsupported {
        op: op.to_string(),
        msg: format!("a Python callback raised {text} {TOKEN}{id}]"),
    }
}

fn pending() -> std::sync::MutexGuard<'static, HashMap<u64, PyErr>> {
    // A panic while the map was held leaves it usable: it holds no invariant across entries.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

fn take_stashed(msg: &str) -> Option<PyErr> {
    let start = msg.rfind(TOKEN)? + TOKEN.len();
    let end = msg[start..].find(']')? + start;
    let id: u64 = msg[start..end].parse().ok()?;
    pending().remove(&id)
}

/// Whether an argument error is about a type or a count (PyTorch: `TypeError`) rather than a
/// value (`ValueError`).
fn is_type_error(arg: &str, expected: &str, got: &str) -> bool {
    const TYPE_NAMES: [&str; 16] = [
        "Tensor",
        "Tensor?",
        "Tensor[]",
        "Tensor?[]",
        "int",
        "float",
        "bool",
        "str",
        "int[]",
        "float[]",
        "bool[]",
        "ScalarType",
        "Device",
        "SymInt",
        "SymInt[]",
        "None",
    ];
    TYPE_NAMES.contains(&got)
        || arg == "args"
        || arg == "kwargs"
        || expected.contains("argument")
        || got.contains("argument")
        || got.starts_with("unexpected keyword")
}

/// The Python exception for a Rust error: the stashed callback exception when it carries one,
/// else `TypeError` (argument types and counts), `ValueError` (bad values, names and schemas),
/// `LookupError` (missing ops and kernels) or `RuntimeError` (dispatch, shape, dtype, device,
/// autograd, compile and opcheck errors), with the Rust message.
pub fn to_py(err: Error) -> PyErr {
    let msg = err.to_string();
    if let Some(e) = take_stashed(&msg) {
        return e;
    }
    match &err {
        Error::Argument {
            op,
            arg,
            expected,
            got,
        } => {
            if op.starts_with("index") && arg == "indices" {
                PyIndexError::new_err(msg)
            } else if is_type_error(arg, expected, got) {
                PyTypeError::new_err(msg)
            } else {
                PyValueError::new_err(msg)
            }
        }
        Error::Lookup(_) => PyLookupError::new_err(msg),
        Error::Schema { .. } => PyValueError::new_err(msg),
        Error::Registration(m) if m.contains("invalid operator name") || m.contains("schema") => {
            PyValueError::new_err(msg)
        }
        // A failed check is not a bad argument, whatever its text names (`test_schema`).
        Error::Opcheck { .. } => PyRuntimeError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

/// `Result<T, tensorplay::Error>` → `PyResult<T>`.
pub trait IntoPyResult<T> {
    /// Converts the error with [`to_py`].
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for tensorplay::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
