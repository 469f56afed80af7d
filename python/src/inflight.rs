//! The Python objects of the custom-op call in flight on this thread, so that a Python kernel
//! receives the caller's own tensor objects and the caller gets back the very object the kernel
//! returned — as in PyTorch, where one tensor has one Python object — instead of fresh wrappers
//! (each a Python allocation). Objects are only ever reused for the *same* runtime tensor
//! ([`Tensor::same`]), so a frame that does not match (cast, batched or detached tensors) costs
//! nothing but the wrap it would have cost anyway.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tensorplay::Tensor;

use crate::tensor::PyTensor;

/// One call: the caller's positional arguments and what its Python kernel returned.
struct Frame {
    args: Py<PyTuple>,
    outs: Vec<Py<PyAny>>,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Pops its frame when dropped (drop it with the GIL held).
pub struct FrameGuard(());

/// Opens a frame for a call with positional `args`.
pub fn enter(args: &Bound<'_, PyTuple>) -> FrameGuard {
    let frame = Frame {
        args: args.clone().unbind(),
        outs: Vec::new(),
    };
    FRAMES.with(|f| f.borrow_mut().push(frame));
    FrameGuard(())
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        // Dropped outside the borrow: releasing the objects may run Python code that calls ops.
        let frame = FRAMES.with(|f| f.borrow_mut().pop());
        drop(frame);
    }
}

/// `obj` itself when it is the Python object of `t`.
fn same_tensor(obj: &Bound<'_, PyAny>, t: &Tensor) -> Option<Py<PyAny>> {
    let b = obj.cast::<PyTensor>().ok()?;
    b.get().t.same(t).then(|| obj.clone().unbind())
}

/// The caller's Python object for `t` when the innermost call passed it positionally. (Nothing
/// here runs Python code, so the borrow cannot be re-entered.)
pub fn input_object(py: Python<'_>, t: &Tensor) -> Option<Py<PyAny>> {
    FRAMES.with(|f| {
        let frames = f.borrow();
        let args = frames.last()?.args.bind(py);
        args.iter().find_map(|a| same_tensor(&a, t))
    })
}

/// Records the Python kernel's result (a tensor, or a tuple or list of them) in the innermost
/// frame, if any.
pub fn note_outputs(out: &Bound<'_, PyAny>) {
    let has_frame = FRAMES.with(|f| !f.borrow().is_empty());
    if !has_frame {
        return;
    }
    let objs: Vec<Py<PyAny>> = if out.is_instance_of::<PyTensor>() {
        vec![out.clone().unbind()]
    } else if let Ok(t) = out.cast::<PyTuple>() {
        t.iter().map(Bound::unbind).collect()
    } else if let Ok(l) = out.cast::<PyList>() {
        l.iter().map(Bound::unbind).collect()
    } else {
        return;
    };
    let old = FRAMES.with(|f| {
        f.borrow_mut()
            .last_mut()
            .map(|fr| std::mem::replace(&mut fr.outs, objs))
    });
    drop(old);
}

impl FrameGuard {
    /// The Python object for output `t`: what the kernel returned when it is that tensor, else a
    /// new wrapper.
    pub fn output_object(&self, py: Python<'_>, t: Tensor) -> PyResult<Py<PyAny>> {
        let found = FRAMES.with(|f| {
            let frames = f.borrow();
            let outs = &frames.last()?.outs;
            outs.iter().find_map(|o| same_tensor(o.bind(py), &t))
        });
        if let Some(o) = found {
            return Ok(o);
        }
        Ok(PyTensor::wrap(py, t)?.into_any())
    }
}
