//! `tensorplay.nn.functional`'s CNN functions over `tensorplay::nn` (`conv1d`, `conv2d`,
//! `conv_transpose2d`,
//! `max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d`, `batch_norm`, `group_norm`), with
//! PyTorch's signatures: size arguments take an `int` or a tuple, as in `torch.nn.functional`.
//!
//! A size argument is checked here, before the Rust call, so that a bad one names the Python
//! function and the argument (`conv2d: invalid argument `stride`: expected ..., got ...`); an
//! option PyTorch has and the runtime does not (an `output_size` of 0) is refused the same way.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use tensorplay::Error;
use tensorplay::nn::{self, ConvPadding};

use crate::error::to_py;
use crate::nn_args::{T, opt, run};
use crate::tensor::PyTensor;

/// A size argument as Python gave it: an `int`, or a tuple or list of `int`s (and `None`s,
/// which only `adaptive_avg_pool2d`'s `output_size` accepts). Extraction never fails; the
/// checks ([`Ints::sizes`]) name the function and the argument.
#[derive(Clone, Debug)]
pub struct Ints {
    /// The entries (one for an `int`); `None` when the object is not an int or a sequence of
    /// ints and `None`s.
    vals: Option<Vec<Option<i64>>>,
    /// Whether the object was a single `int`.
    scalar: bool,
    /// The object's `repr()`, for error messages.
    repr: String,
}

impl Ints {
    /// The default `v` (a Python `int`).
    fn of(v: i64) -> Self {
        Ints {
            vals: Some(vec![Some(v)]),
            scalar: true,
            repr: v.to_string(),
        }
    }

    /// Whether this is an empty tuple or list (`max_pool2d`/`avg_pool2d`'s `stride=()` means
    /// the kernel size, as in PyTorch).
    fn is_empty(&self) -> bool {
        self.vals.as_ref().is_some_and(|v| v.is_empty())
    }

    /// One entry per spatial dim (`dims` of them) from an `int` or a tuple of 1 or `dims`
    /// ints, each at least `min`.
    fn sizes(&self, op: &str, name: &str, dims: usize, min: i64) -> PyResult<Vec<usize>> {
        let ints: Option<Vec<i64>> = self.vals.as_ref().and_then(|v| v.iter().copied().collect());
        let Some(ints) = ints else {
            let plural = if dims == 1 { "" } else { "s" };
            return Err(PyTypeError::new_err(arg_msg(
                op,
                name,
                &format!("an int or a tuple of {dims} int{plural}"),
                &self.repr,
            )));
        };
        if (ints.len() != 1 && ints.len() != dims) || ints.iter().any(|&v| v < min) {
            let count = if dims == 1 {
                "1 integer".to_string()
            } else {
                format!("1 or {dims} integers")
            };
            return Err(PyValueError::new_err(arg_msg(
                op,
                name,
                &format!("{count}, each at least {min}"),
                &self.repr,
            )));
        }
        Ok((0..dims)
            .map(|d| ints[d.min(ints.len() - 1)] as usize)
            .collect())
    }
}

impl FromPyObject<'_, '_> for Ints {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        let repr = obj
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| obj.get_type().to_string());
        let entry = |o: &Bound<'_, PyAny>| -> Option<Option<i64>> {
            if o.is_none() {
                Some(None)
            } else {
                o.extract::<i64>().ok().map(Some)
            }
        };
        let (vals, scalar) = if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
            let items: Vec<Bound<'_, PyAny>> = obj.try_iter()?.collect::<PyResult<_>>()?;
            (items.iter().map(entry).collect(), false)
        } else if obj.is_none() {
            (None, true)
        } else {
            (obj.extract::<i64>().ok().map(|v| vec![Some(v)]), true)
        };
        Ok(Ints { vals, scalar, repr })
    }
}

/// A convolution's `padding`: PyTorch's `"same"`/`"valid"` or a size argument.
#[derive(Clone, Debug)]
pub enum Padding {
    /// A string (checked by [`Padding::resolve`]).
    Str(String),
    /// An `int` or a tuple of ints.
    Ints(Ints),
}

impl FromPyObject<'_, '_> for Padding {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.cast::<PyString>() {
            return Ok(Padding::Str(s.to_cow()?.into_owned()));
        }
        Ok(Padding::Ints(obj.extract()?))
    }
}

impl Padding {
    /// The runtime's padding for a convolution over `dims` spatial dims.
    fn resolve(&self, op: &str, dims: usize) -> PyResult<ConvPadding> {
        match self {
            Padding::Str(s) if s == "same" => Ok(ConvPadding::Same),
            Padding::Str(s) if s == "valid" => Ok(ConvPadding::Valid),
            Padding::Str(s) => Err(PyValueError::new_err(arg_msg(
                op,
                "padding",
                "\"same\", \"valid\", an int or a tuple of ints",
                &format!("{s:?}"),
            ))),
            Padding::Ints(i) => Ok(ConvPadding::Explicit(i.sizes(op, "padding", dims, 0)?)),
        }
    }
}

/// The runtime's argument-error text (`Error::Argument`'s display).
fn arg_msg(op: &str, name: &str, expected: &str, got: &str) -> String {
    Error::argument(op, name, expected, got).to_string()
}

/// `err` reported by the Python function `to` rather than the runtime's op `from` (the op
/// `max_pool2d_with_indices` behind `max_pool2d`).
fn renamed(err: Error, from: &str, to: &str) -> Error {
    match err {
        Error::Argument {
            op,
            arg,
            expected,
            got,
        } if op == from => Error::argument(to, arg, expected, got),
        Error::DType { op, msg } if op == from => Error::dtype(to, msg),
        other => other,
    }
}

/// A positive `groups`/`num_groups` as `usize`.
fn positive(op: &str, name: &str, v: i64) -> PyResult<usize> {
    if v < 1 {
        return Err(PyValueError::new_err(arg_msg(
            op,
            name,
            "a positive integer",
            &v.to_string(),
        )));
    }
    Ok(v as usize)
}

/// Checks a pooling input is 3-D `[C, H, W]` or 4-D `[N, C, H, W]`.
fn pool_input(op: &str, x: &tensorplay::Tensor) -> PyResult<()> {
    if x.rank() == 3 || x.rank() == 4 {
        return Ok(());
    }
    Err(to_py(Error::argument(
        op,
        "input",
        "a 3-D [C, H, W] or 4-D [N, C, H, W] tensor",
        format!("shape {:?}", x.shape()),
    )))
}

/// A pooling `stride`: `None` or an empty tuple means the kernel size (the runtime's `[]`).
fn pool_stride(op: &str, stride: &Option<Ints>) -> PyResult<Vec<usize>> {
    match stride {
        Some(s) if !s.is_empty() => s.sizes(op, "stride", 2, 1),
        _ => Ok(Vec::new()),
    }
}

/// `conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`: input
/// `[N, C, L]` (or unbatched `[C, L]`), weight `[O, C / groups, k]`; `padding` is an int, a
/// 1-tuple, `"valid"` or `"same"` (stride 1 only).
#[pyfunction]
#[pyo3(
    signature = (input, weight, bias = None, stride = Ints::of(1), padding = Padding::Ints(Ints::of(0)), dilation = Ints::of(1), groups = 1),
    text_signature = "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)"
)]
#[allow(clippy::too_many_arguments)]
pub fn conv1d(
    py: Python<'_>,
    input: T<'_>,
    weight: T<'_>,
    bias: Option<T<'_>>,
    stride: Ints,
    padding: Padding,
    dilation: Ints,
    groups: i64,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "conv1d";
    let stride = stride.sizes(OP, "stride", 1, 1)?[0];
    let dilation = dilation.sizes(OP, "dilation", 1, 1)?[0];
    let padding = padding.resolve(OP, 1)?;
    if padding == ConvPadding::Same && stride != 1 {
        return Err(PyValueError::new_err(arg_msg(
            OP,
            "padding",
            "stride 1 with padding=\"same\"",
            &format!("stride {stride}"),
        )));
    }
    let groups = positive(OP, "groups", groups)?;
    let (x, w, b) = (input.t.clone(), weight.t.clone(), opt(&bias));
    run(py, move || {
        nn::conv1d(&x, &w, b.as_ref(), stride, padding, dilation, groups)
    })
}

/// `conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)`: input
/// `[N, C, H, W]` (or unbatched `[C, H, W]`), weight `[O, C / groups, kH, kW]`; `stride`,
/// `padding` and `dilation` take an int or a pair; `padding` also `"valid"` or `"same"`
/// (stride 1 only).
#[pyfunction]
#[pyo3(
    signature = (input, weight, bias = None, stride = Ints::of(1), padding = Padding::Ints(Ints::of(0)), dilation = Ints::of(1), groups = 1),
    text_signature = "(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)"
)]
#[allow(clippy::too_many_arguments)]
pub fn conv2d(
    py: Python<'_>,
    input: T<'_>,
    weight: T<'_>,
    bias: Option<T<'_>>,
    stride: Ints,
    padding: Padding,
    dilation: Ints,
    groups: i64,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "conv2d";
    let stride = stride.sizes(OP, "stride", 2, 1)?;
    let dilation = dilation.sizes(OP, "dilation", 2, 1)?;
    let padding = padding.resolve(OP, 2)?;
    let groups = positive(OP, "groups", groups)?;
    let (x, w, b) = (input.t.clone(), weight.t.clone(), opt(&bias));
    run(py, move || {
        nn::conv2d(&x, &w, b.as_ref(), &stride, padding, &dilation, groups)
    })
}

/// `conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
/// groups=1, dilation=1)`: input `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`), weight
/// `[C_in, C_out / groups, kH, kW]`; `stride`, `padding`, `output_padding` and `dilation`
/// take an int or a pair; each `output_padding` entry is smaller than the stride or the
/// dilation of its dim.
#[pyfunction]
#[pyo3(
    signature = (input, weight, bias = None, stride = Ints::of(1), padding = Ints::of(0), output_padding = Ints::of(0), groups = 1, dilation = Ints::of(1)),
    text_signature = "(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1)"
)]
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d(
    py: Python<'_>,
    input: T<'_>,
    weight: T<'_>,
    bias: Option<T<'_>>,
    stride: Ints,
    padding: Ints,
    output_padding: Ints,
    groups: i64,
    dilation: Ints,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "conv_transpose2d";
    let stride = stride.sizes(OP, "stride", 2, 1)?;
    let padding = padding.sizes(OP, "padding", 2, 0)?;
    let output_padding = output_padding.sizes(OP, "output_padding", 2, 0)?;
    let dilation = dilation.sizes(OP, "dilation", 2, 1)?;
    let groups = positive(OP, "groups", groups)?;
    let (x, w, b) = (input.t.clone(), weight.t.clone(), opt(&bias));
    run(py, move || {
        nn::conv_transpose2d(
            &x,
            &w,
            b.as_ref(),
            &stride,
            &padding,
            &output_padding,
            groups,
            &dilation,
        )
    })
}

/// `max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
/// return_indices=False)`: input `[N, C, H, W]` or `[C, H, W]`; `stride` defaults to the
/// kernel size; padding counts as `-inf` and is at most half the kernel. With
/// `return_indices`, returns `(output, indices)`, the indices flat (`h * W + w`) within each
/// input plane, as PyTorch's.
#[pyfunction]
#[pyo3(
    signature = (input, kernel_size, stride = None, padding = Ints::of(0), dilation = Ints::of(1), ceil_mode = false, return_indices = false),
    text_signature = "(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False)"
)]
#[allow(clippy::too_many_arguments)]
pub fn max_pool2d(
    py: Python<'_>,
    input: T<'_>,
    kernel_size: Ints,
    stride: Option<Ints>,
    padding: Ints,
    dilation: Ints,
    ceil_mode: bool,
    return_indices: bool,
) -> PyResult<Py<PyAny>> {
    const OP: &str = "max_pool2d";
    pool_input(OP, &input.t)?;
    let kernel = kernel_size.sizes(OP, "kernel_size", 2, 1)?;
    let stride = pool_stride(OP, &stride)?;
    let padding = padding.sizes(OP, "padding", 2, 0)?;
    let dilation = dilation.sizes(OP, "dilation", 2, 1)?;
    let x = input.t.clone();
    let (y, i) = py
        .detach(move || {
            nn::max_pool2d_with_indices(&x, &kernel, &stride, &padding, &dilation, ceil_mode)
        })
        .map_err(|e| to_py(renamed(e, "max_pool2d_with_indices", OP)))?;
    let y = PyTensor::wrap(py, y)?.into_any();
    if !return_indices {
        return Ok(y);
    }
    let i = PyTensor::wrap(py, i)?.into_any();
    Ok(PyTuple::new(py, [y, i])?.into_any().unbind())
}

/// `avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
/// count_include_pad=True, divisor_override=None)`: input `[N, C, H, W]` or `[C, H, W]`;
/// `stride` defaults to the kernel size; each window's sum is divided by `divisor_override`
/// (non-zero) when given, else by its size counting the padding (`count_include_pad`) or not.
#[pyfunction]
#[pyo3(
    signature = (input, kernel_size, stride = None, padding = Ints::of(0), ceil_mode = false, count_include_pad = true, divisor_override = None),
    text_signature = "(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None)"
)]
#[allow(clippy::too_many_arguments)]
pub fn avg_pool2d(
    py: Python<'_>,
    input: T<'_>,
    kernel_size: Ints,
    stride: Option<Ints>,
    padding: Ints,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "avg_pool2d";
    pool_input(OP, &input.t)?;
    let kernel = kernel_size.sizes(OP, "kernel_size", 2, 1)?;
    let stride = pool_stride(OP, &stride)?;
    let padding = padding.sizes(OP, "padding", 2, 0)?;
    let x = input.t.clone();
    run(py, move || {
        nn::avg_pool2d(
            &x,
            &kernel,
            &stride,
            &padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
        )
    })
}

/// `adaptive_avg_pool2d(input, output_size)`: input `[N, C, H, W]` or `[C, H, W]`;
/// `output_size` is an int or a pair whose `None` entries keep the input's size. An output
/// size of 0 (an empty result in PyTorch) is refused.
#[pyfunction]
#[pyo3(signature = (input, output_size))]
pub fn adaptive_avg_pool2d(
    py: Python<'_>,
    input: T<'_>,
    output_size: Ints,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "adaptive_avg_pool2d";
    pool_input(OP, &input.t)?;
    let shape = input.t.shape();
    let hw = [shape[shape.len() - 2], shape[shape.len() - 1]];
    let filled = match &output_size.vals {
        Some(v) if !output_size.scalar && v.len() == 2 => Ints {
            vals: Some(
                v.iter()
                    .zip(hw)
                    .map(|(o, d)| Some(o.unwrap_or(d as i64)))
                    .collect(),
            ),
            ..output_size.clone()
        },
        Some(_) if !output_size.scalar => {
            return Err(PyValueError::new_err(arg_msg(
                OP,
                "output_size",
                "an int or a pair of ints (or None)",
                &output_size.repr,
            )));
        }
        _ => output_size.clone(),
    };
    let size = filled.sizes(OP, "output_size", 2, 1)?;
    let x = input.t.clone();
    run(py, move || nn::adaptive_avg_pool2d(&x, &size))
}

/// `batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
/// momentum=0.1, eps=1e-05)`: input `[N, C, *]`. In training mode the batch's statistics
/// normalize and the running ones (when given) are updated in place:
/// `running = (1 - momentum) * running + momentum * batch` (the variance unbiased). In
/// evaluation mode the running statistics are required, as in PyTorch.
#[pyfunction]
#[pyo3(signature = (input, running_mean, running_var, weight = None, bias = None, training = false, momentum = 0.1, eps = 1e-5))]
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    py: Python<'_>,
    input: T<'_>,
    running_mean: Option<T<'_>>,
    running_var: Option<T<'_>>,
    weight: Option<T<'_>>,
    bias: Option<T<'_>>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> PyResult<Py<PyTensor>> {
    const OP: &str = "batch_norm";
    if !training && running_mean.is_none() && running_var.is_none() {
        return Err(PyValueError::new_err(arg_msg(
            OP,
            "running_mean",
            "a tensor in evaluation mode (training=False)",
            "None",
        )));
    }
    let (x, rm, rv) = (input.t.clone(), opt(&running_mean), opt(&running_var));
    let (w, b) = (opt(&weight), opt(&bias));
    run(py, move || {
        nn::batch_norm(
            &x,
            rm.as_ref(),
            rv.as_ref(),
            w.as_ref(),
            b.as_ref(),
            training,
            momentum,
            eps,
        )
    })
}

/// `group_norm(input, num_groups, weight=None, bias=None, eps=1e-05)`: input `[N, C, *]`,
/// its channels split into `num_groups` groups, each normalized per sample, then scaled and
/// shifted per channel.
#[pyfunction]
#[pyo3(signature = (input, num_groups, weight = None, bias = None, eps = 1e-5))]
pub fn group_norm(
    py: Python<'_>,
    input: T<'_>,
    num_groups: i64,
    weight: Option<T<'_>>,
    bias: Option<T<'_>>,
    eps: f64,
) -> PyResult<Py<PyTensor>> {
    let groups = positive("group_norm", "num_groups", num_groups)?;
    let (x, w, b) = (input.t.clone(), opt(&weight), opt(&bias));
    run(py, move || {
        nn::group_norm(&x, groups, w.as_ref(), b.as_ref(), eps)
    })
}

/// Adds the functions to `m` (the `_C._nn` submodule).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv1d, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose2d, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(avg_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(adaptive_avg_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm, m)?)?;
    m.add_function(wrap_pyfunction!(group_norm, m)?)?;
    Ok(())
}
