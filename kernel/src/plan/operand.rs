//! What planning needs of an operand ([`PlanOperand`]) and binding operands to a spec
//! ([`bind`]): counts, dtypes and devices checked, data pointers taken, overlaps found.

use smallvec::SmallVec;
use tensorplay_ir::{DType, Device, Error, Result};

use crate::spec::{KernelSpec, LoopKind};

/// The op name errors of this module carry.
pub(super) const OP: &str = "compiled kernel";

/// What planning needs of an operand (a tensor: `tensorplay-core` implements it).
pub trait PlanOperand {
    /// Size of each dimension.
    fn shape(&self) -> &[usize];
    /// Strides in elements.
    fn strides(&self) -> &[isize];
    /// Element type.
    fn dtype(&self) -> DType;
    /// Where the data lives.
    fn device(&self) -> Device;
    /// The address of element `[0, .., 0]` (a device address on a CUDA device), or an error
    /// for operands without data.
    fn address(&self) -> Result<*mut u8>;
    /// Whether `self` and `other` view the same storage (only such operands can overlap).
    fn shares_storage(&self, other: &Self) -> bool;
}

/// Operand data pointers, inputs then outputs.
pub type Ptrs = SmallVec<[*mut u8; 8]>;

/// Checks an operand's dtype and device and returns its data pointer. The argument name for
/// the error (`input k` / `output k`) is only built on the error path: this runs on every launch.
fn check_operand<T: PlanOperand>(
    t: &T,
    k: usize,
    output: bool,
    want: DType,
    device: Device,
) -> Result<*mut u8> {
    let what = || format!("{} {k}", if output { "output" } else { "input" });
    if t.dtype() != want {
        return Err(Error::argument(
            OP,
            what(),
            format!("a {want} tensor"),
            format!("a {} tensor", t.dtype()),
        ));
    }
    if t.device() != device {
        return Err(Error::device(
            OP,
            format!(
                "{} is on {}, but the kernel runs on {device}",
                what(),
                t.device()
            ),
        ));
    }
    t.address()
}

/// The operand count check and the data pointers of every operand (inputs, then outputs),
/// their dtypes and devices checked against `spec`; and whether some output of a pointwise
/// kernel is exactly an input's elements (the layout is then
/// [in place](crate::spec::LoopLayout::in_place)). Any other overlap of an output with an input is an error.
pub fn bind<T: PlanOperand>(
    spec: &KernelSpec,
    inputs: &[&T],
    outputs: &[&T],
    device: Device,
) -> Result<(Ptrs, bool)> {
    if inputs.len() != spec.inputs.len() || outputs.len() != spec.outputs.len() {
        return Err(Error::argument(
            OP,
            "inputs, outputs",
            format!(
                "{} inputs and {} outputs",
                spec.inputs.len(),
                spec.outputs.len()
            ),
            format!("{} inputs and {} outputs", inputs.len(), outputs.len()),
        ));
    }
    let mut ptrs = Ptrs::new();
    for (k, (t, &d)) in inputs.iter().zip(&spec.inputs).enumerate() {
        ptrs.push(check_operand(*t, k, false, d, device)?);
    }
    for (k, (t, &d)) in outputs.iter().zip(&spec.outputs).enumerate() {
        ptrs.push(check_operand(*t, k, true, d, device)?);
    }
    let n_in = inputs.len();
    let pointwise = matches!(spec.kind, LoopKind::Pointwise);
    let mut in_place = false;
    for (o, out) in outputs.iter().enumerate() {
        // Every storage is its own allocation: only tensors on one storage can overlap (the
        // common case, a fresh output, needs no byte ranges).
        if !inputs.iter().any(|i| i.shares_storage(out)) {
            continue;
        }
        let Some(span_o) = byte_span(*out, ptrs[n_in + o]) else {
            continue;
        };
        for (i, input) in inputs.iter().enumerate() {
            if !input.shares_storage(out) {
                continue;
            }
            let Some(span_i) = byte_span(*input, ptrs[i]) else {
                continue;
            };
            if span_o.0 >= span_i.1 || span_i.0 >= span_o.1 {
                continue;
            }
            let same_elements = ptrs[i] == ptrs[n_in + o]
                && spec.inputs[i] == spec.outputs[o]
                && input.shape() == out.shape()
                && input.strides() == out.strides();
            if pointwise && same_elements {
                in_place = true;
                continue;
            }
            return Err(Error::argument(
                OP,
                format!("output {o}"),
                "memory disjoint from every input, or (pointwise kernels) exactly one input's \
                 elements: same address, dtype, shape and strides",
                format!("a tensor overlapping input {i}"),
            ));
        }
    }
    Ok((ptrs, in_place))
}

/// The bytes `[lo, hi)` a tensor's elements occupy from its data pointer `ptr` (None when empty).
fn byte_span<T: PlanOperand>(t: &T, ptr: *mut u8) -> Option<(usize, usize)> {
    if t.shape().contains(&0) {
        return None;
    }
    let size = t.dtype().size() as isize;
    let (mut lo, mut hi) = (0isize, size);
    for (&n, &st) in t.shape().iter().zip(t.strides()) {
        let reach = (n as isize - 1) * st * size;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    let base = ptr as usize;
    Some((base.wrapping_add_signed(lo), base.wrapping_add_signed(hi)))
}
