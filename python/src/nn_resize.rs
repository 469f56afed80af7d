//! `tensorplay.nn.functional.pad` and `interpolate` over `tensorplay::nn::{pad, interpolate}`,
//! with PyTorch's signatures: `pad` takes a sequence of ints, `interpolate` an `int` or a
//! sequence for `size` and a number or a sequence for `scale_factor`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use tensorplay::nn::{self, InterpolateMode, PadMode};

use crate::error::IntoPyResult;
use crate::nn_args::{T, run};
use crate::tensor::PyTensor;

fn arg_error(op: &str, arg: &str, expected: &str, got: &Bound<'_, PyAny>) -> PyErr {
    let repr = got
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "{op}: invalid argument `{arg}`: expected {expected}, got {repr}"
    ))
}

/// A Python number or a sequence of numbers, each read by `item` (`int`s refuse floats).
fn one_or_many<V>(
    op: &str,
    arg: &str,
    expected: &str,
    v: &Bound<'_, PyAny>,
    item: impl Fn(&Bound<'_, PyAny>) -> PyResult<V>,
) -> PyResult<Vec<V>> {
    if let Ok(x) = item(v) {
        return Ok(vec![x]);
    }
    if v.is_instance_of::<pyo3::types::PyString>() {
        return Err(arg_error(op, arg, expected, v));
    }
    v.try_iter()
        .and_then(|it| it.map(|x| item(&x?)).collect::<PyResult<Vec<V>>>())
        .map_err(|_| arg_error(op, arg, expected, v))
}

fn int(v: &Bound<'_, PyAny>) -> PyResult<i64> {
    v.extract()
}

fn float(v: &Bound<'_, PyAny>) -> PyResult<f64> {
    v.extract()
}

/// `pad(input, pad, mode="constant", value=None)`: `pad` is `(left, right)` of the last dim,
/// then of the dim before, and so on; negative sizes crop. Modes `"constant"` (with `value`,
/// default 0), `"reflect"`, `"replicate"`, `"circular"`.
#[pyfunction]
#[pyo3(signature = (input, pad, mode = "constant", value = None))]
pub fn pad(
    py: Python<'_>,
    input: T<'_>,
    pad: &Bound<'_, PyAny>,
    mode: &str,
    value: Option<f64>,
) -> PyResult<Py<PyTensor>> {
    let sizes = one_or_many("pad", "pad", "a sequence of ints", pad, int)?;
    let mode = PadMode::parse(mode).py_err()?;
    let x = input.t.clone();
    run(py, move || nn::pad(&x, &sizes, mode, value.unwrap_or(0.0)))
}

/// `interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
/// recompute_scale_factor=None, antialias=False)` over `[N, C, d...]` inputs with 1 to 3
/// spatial dims. Modes `"nearest"`, `"nearest-exact"`, `"linear"`, `"bilinear"`,
/// `"trilinear"`, `"area"`; `antialias=True` and `"bicubic"` are not implemented (errors).
#[pyfunction]
#[pyo3(signature = (input, size = None, scale_factor = None, mode = "nearest", align_corners = None, recompute_scale_factor = None, antialias = false))]
#[allow(clippy::too_many_arguments)]
pub fn interpolate(
    py: Python<'_>,
    input: T<'_>,
    size: Option<&Bound<'_, PyAny>>,
    scale_factor: Option<&Bound<'_, PyAny>>,
    mode: &str,
    align_corners: Option<bool>,
    recompute_scale_factor: Option<bool>,
    antialias: bool,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "interpolate";
    if antialias {
        return Err(PyValueError::new_err(
            "interpolate: invalid argument `antialias`: expected False (anti-aliasing is not \
             implemented), got True",
        ));
    }
    let size = match size {
        Some(s) => {
            let v = one_or_many(OP, "size", "an int or a sequence of ints", s, int)?;
            if v.iter().any(|&d| d < 0) {
                return Err(PyValueError::new_err(format!(
                    "{OP}: invalid argument `size`: expected sizes of at least 0, got {v:?}"
                )));
            }
            Some(v.into_iter().map(|d| d as usize).collect::<Vec<usize>>())
        }
        None => None,
    };
    let scale: Option<Vec<f64>> = scale_factor
        .map(|s| {
            one_or_many(
                OP,
                "scale_factor",
                "a number or a sequence of numbers",
                s,
                float,
            )
        })
        .transpose()?;
    let mode = InterpolateMode::parse(mode).py_err()?;
    let x = input.t.clone();
    run(py, move || {
        nn::interpolate(
            &x,
            size.as_deref(),
            scale.as_deref(),
            mode,
            align_corners,
            recompute_scale_factor,
        )
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pad, m)?)?;
    m.add_function(wrap_pyfunction!(interpolate, m)?)?;
    Ok(())
}
