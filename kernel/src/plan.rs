//! Launch plans: validating operands against a spec and planning the loop nest (broadcast
//! strides, dropping unit dims, merging dims that step uniformly) — the geometry every target
//! launches a kernel over. A plan depends only on the spec and the operands' shapes and strides,
//! so callers that launch repeatedly keep it ([`LaunchPlan::detach`]) and bind fresh pointers.

use smallvec::{SmallVec, smallvec};
use tensorplay_ir::shape::{broadcast_shapes, broadcast_strides, fmt_shape};
use tensorplay_ir::{DType, Device, Error, ReduceOp, Result};

use crate::spec::{KernelSpec, LoopKind, LoopLayout, StrideClass};

/// The op name errors of this module carry.
const OP: &str = "compiled kernel";

type Strides = SmallVec<[isize; 8]>;

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

/// Everything a kernel call needs, derived from the tensors: the layout to compile for, the
/// loop shape and strides, the operand pointers and how much work there is.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    /// The layout (the second half of the cache key).
    layout: LoopLayout,
    /// Loop dim sizes.
    shape: SmallVec<[i64; 8]>,
    /// Element strides, operand-major (`operands * dims`).
    strides: Vec<i64>,
    ptrs: Ptrs,
    /// Where the operands live: `ptrs` are host addresses on the CPU, device addresses on a
    /// CUDA device (such a plan is only handed to the CUDA launcher).
    device: Device,
    /// Pointwise: elements; reductions and softmax: rows (kept points).
    range: usize,
    /// Elements per unit of `range` (1 for pointwise, the row length otherwise).
    per_unit: usize,
    /// What the geometry above was derived from besides the spec: the explicit iteration shape
    /// (if any) and every operand's shape and strides, flattened (see [`PlanKey`]).
    key: PlanKey,
    /// The spec's rank and loop kind (a plan only fits kernels of the spec it was made for).
    rank: usize,
    kind: LoopKind,
}

/// The inputs of planning other than the spec, flattened (each list after its length, so the
/// encoding is unambiguous): `[has_iter_shape, (len, sizes..)?, (rank, sizes.., strides..) per
/// operand]`. Two launches with equal keys (and the same spec) plan to the same loop geometry,
/// whatever their data pointers and storage offsets. The executor keys its last call of a graph
/// the same way (over the graph's inputs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanKey(SmallVec<[isize; 24]>);

impl PlanKey {
    pub fn new<'a, T: PlanOperand + 'a>(
        iter_shape: Option<&[usize]>,
        operands: impl IntoIterator<Item = &'a T>,
    ) -> PlanKey {
        let mut k: SmallVec<[isize; 24]> = SmallVec::new();
        match iter_shape {
            Some(s) => {
                k.push(1);
                k.push(s.len() as isize);
                k.extend(s.iter().map(|&d| d as isize));
            }
            None => k.push(0),
        }
        for t in operands {
            k.push(t.shape().len() as isize);
            k.extend(t.shape().iter().map(|&d| d as isize));
            k.extend_from_slice(t.strides());
        }
        PlanKey(k)
    }

    /// Whether these operands would produce this key (compared in place, without building one).
    pub fn matches<'a, T: PlanOperand + 'a>(
        &self,
        iter_shape: Option<&[usize]>,
        operands: impl IntoIterator<Item = &'a T>,
    ) -> bool {
        let k = self.0.as_slice();
        let mut at = match (iter_shape, k.first()) {
            (Some(s), Some(1)) => {
                let n = s.len();
                if k.len() < 2 + n
                    || k[1] != n as isize
                    || !k[2..2 + n].iter().zip(s).all(|(&a, &b)| a == b as isize)
                {
                    return false;
                }
                2 + n
            }
            (None, Some(0)) => 1,
            _ => return false,
        };
        for t in operands {
            let (shape, strides) = (t.shape(), t.strides());
            let r = shape.len();
            if k.len() < at + 1 + 2 * r || k[at] != r as isize {
                return false;
            }
            let sizes = &k[at + 1..at + 1 + r];
            let steps = &k[at + 1 + r..at + 1 + 2 * r];
            if !sizes.iter().zip(shape).all(|(&a, &b)| a == b as isize) || steps != strides {
                return false;
            }
            at += 1 + 2 * r;
        }
        at == k.len()
    }
}

// SAFETY: the raw pointers are addresses of tensor data the caller keeps alive (and borrowed)
// for the duration of the launch; the plan itself only carries them.
unsafe impl Send for LaunchPlan {}
// SAFETY: see `Send`.
unsafe impl Sync for LaunchPlan {}

impl LaunchPlan {
    /// The loop layout the plan needs a kernel compiled for (the second half of the cache key).
    /// The geometry is read-only: a kernel trusts it, so only `plan` makes it.
    pub fn layout(&self) -> &LoopLayout {
        &self.layout
    }

    /// Loop dim sizes, outermost first.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Element strides of every operand (inputs then outputs), operand-major.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// Data pointers of the operands (inputs then outputs; empty once detached): what another
    /// backend running the same geometry (the CUDA host emulation) hands its kernel.
    pub fn ptrs(&self) -> &[*mut u8] {
        &self.ptrs
    }

    /// The device the operands live on (what the pointers address).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Pointwise: elements; reductions and softmax: rows (kept points).
    pub fn range(&self) -> usize {
        self.range
    }

    /// Elements per unit of [`LaunchPlan::range`] (1 for pointwise, the row length otherwise).
    pub fn per_unit(&self) -> usize {
        self.per_unit
    }

    /// The spec's rank and loop kind the plan was made for (it only fits kernels of that spec).
    pub fn made_for(&self) -> (usize, &LoopKind) {
        (self.rank, &self.kind)
    }

    /// True when there is nothing to compute (an empty iteration space).
    pub fn is_empty(&self) -> bool {
        self.range == 0
    }

    /// The plan without its data pointers: what a caller keeps to launch again on tensors of
    /// the same shapes and strides (`CompiledKernel::relaunch` in `tensorplay-compiler`) (a detached plan cannot be
    /// launched without fresh tensors).
    pub fn detach(mut self) -> LaunchPlan {
        self.ptrs.clear();
        self
    }

    /// Whether tensors with these shapes and strides (and this explicit iteration shape, as
    /// given to [`plan_on`]) plan to exactly this geometry: true when every shape and stride equals
    /// the ones the plan was made from. Data pointers and storage offsets do not matter.
    pub fn fits<T: PlanOperand>(
        &self,
        inputs: &[&T],
        outputs: &[&T],
        iter_shape: Option<&[usize]>,
    ) -> bool {
        self.key
            .matches(iter_shape, inputs.iter().chain(outputs).copied())
    }
}

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
/// [in place](LoopLayout::in_place)). Any other overlap of an output with an input is an error.
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

/// A list of loop dims: size and per-operand stride.
type DimList = Vec<(usize, Strides)>;

/// Drops unit dims and merges adjacent dims that step uniformly for every operand.
fn coalesce(dims: DimList) -> DimList {
    let mut out: DimList = Vec::with_capacity(dims.len());
    for (size, st) in dims {
        if size == 1 {
            continue;
        }
        if let Some((psize, pst)) = out.last_mut()
            && pst.iter().zip(&st).all(|(&p, &s)| p == s * size as isize)
        {
            *psize *= size;
            *pst = st;
            continue;
        }
        out.push((size, st));
    }
    out
}

/// Plans a launch of `spec` on operands on `device` (all of them there; on a CUDA device the
/// plan carries device addresses). `iter_shape` overrides the iteration shape the planner would
/// infer (pointwise and softmax: the output shape; reductions: the broadcast of the inputs,
/// widened to the output's kept sizes) — needed only for reductions whose reduced sizes come
/// from a broadcast inside the region. `vectorized`: whether the target's kernel for `spec`
/// runs vector lanes, which lets a reduction over a strided dim run as columns (the layout's
/// `kept_inner`).
///
/// Errors when counts, dtypes, devices, ranks or shapes do not fit the spec, for fake tensors,
/// for outputs that overlap themselves (stride 0 along a dim of size > 1), and for `amax`/`amin`
/// over an empty reduced space.
pub fn plan_on<T: PlanOperand>(
    spec: &KernelSpec,
    inputs: &[&T],
    outputs: &[&T],
    iter_shape: Option<&[usize]>,
    device: Device,
    vectorized: bool,
) -> Result<LaunchPlan> {
    let (ptrs, in_place) = bind(spec, inputs, outputs, device)?;
    let rank = spec.rank;
    // The iteration shape.
    let shape: SmallVec<[usize; 8]> = match (iter_shape, &spec.kind) {
        (Some(s), _) => s.iter().copied().collect(),
        (None, LoopKind::Pointwise | LoopKind::Softmax { .. }) => match outputs.first() {
            Some(o) => o.shape().iter().copied().collect(),
            None => {
                let mut s: SmallVec<[usize; 8]> = SmallVec::new();
                for t in inputs {
                    s = broadcast_shapes(OP, &s, t.shape())?.into_iter().collect();
                }
                s
            }
        },
        (None, LoopKind::Reduce { dims, keepdim, .. }) => {
            let mut s: SmallVec<[usize; 8]> = smallvec![1; rank];
            for t in inputs {
                s = broadcast_shapes(OP, &s, t.shape())?.into_iter().collect();
            }
            if s.len() == rank {
                let out = outputs[0].shape();
                let kept: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
                let out_kept: Vec<usize> = if *keepdim {
                    kept.iter().filter_map(|&d| out.get(d).copied()).collect()
                } else {
                    out.to_vec()
                };
                if out_kept.len() == kept.len() {
                    for (&d, &o) in kept.iter().zip(&out_kept) {
                        if s[d] == 1 {
                            s[d] = o;
                        }
                    }
                }
            }
            s
        }
    };
    if shape.len() != rank {
        return Err(Error::shape(
            OP,
            format!(
                "the kernel iterates over rank {rank}, but the tensors give the shape {}",
                fmt_shape(&shape)
            ),
        ));
    }
    let nin = inputs.len();
    let nops = nin + outputs.len();
    // Strides of every operand over the iteration shape.
    let mut op_strides: Vec<Strides> = Vec::with_capacity(nops);
    for t in inputs {
        op_strides.push(
            broadcast_strides(OP, t.shape(), t.strides(), &shape)?
                .into_iter()
                .collect(),
        );
    }
    let (kept_dims, red_dims): (Vec<usize>, Vec<usize>) = match &spec.kind {
        LoopKind::Pointwise => ((0..rank).collect(), Vec::new()),
        LoopKind::Reduce { dims, .. } => (
            (0..rank).filter(|d| !dims.contains(d)).collect(),
            dims.clone(),
        ),
        LoopKind::Softmax { .. } if rank == 0 => (Vec::new(), Vec::new()),
        LoopKind::Softmax { .. } => ((0..rank - 1).collect(), vec![rank - 1]),
    };
    for (k, t) in outputs.iter().enumerate() {
        let st: Strides = match &spec.kind {
            LoopKind::Reduce { keepdim, .. } => {
                let want: Vec<usize> = if *keepdim {
                    (0..rank)
                        .map(|d| if red_dims.contains(&d) { 1 } else { shape[d] })
                        .collect()
                } else {
                    kept_dims.iter().map(|&d| shape[d]).collect()
                };
                if t.shape() != want.as_slice() {
                    return Err(Error::shape(
                        OP,
                        format!(
                            "output {k} has shape {}, expected {} (the reduction of {})",
                            fmt_shape(t.shape()),
                            fmt_shape(&want),
                            fmt_shape(&shape)
                        ),
                    ));
                }
                let mut st: Strides = smallvec![0; rank];
                for (j, &d) in kept_dims.iter().enumerate() {
                    st[d] = if *keepdim {
                        t.strides()[d]
                    } else {
                        t.strides()[j]
                    };
                }
                st
            }
            _ => {
                if t.shape() != shape.as_slice() {
                    return Err(Error::shape(
                        OP,
                        format!(
                            "output {k} has shape {}, expected the iteration shape {}",
                            fmt_shape(t.shape()),
                            fmt_shape(&shape)
                        ),
                    ));
                }
                t.strides().iter().copied().collect()
            }
        };
        if let Some(d) = (0..rank).find(|&d| st[d] == 0 && shape[d] > 1 && !red_dims.contains(&d)) {
            return Err(Error::argument(
                OP,
                format!("output {k}"),
                "an output whose elements do not overlap",
                format!("stride 0 along dim {d} of size {}", shape[d]),
            ));
        }
        op_strides.push(st);
    }
    let group = |dims: &[usize]| -> DimList {
        dims.iter()
            .map(|&d| (shape[d], op_strides.iter().map(|s| s[d]).collect()))
            .collect()
    };
    let pad = |mut g: DimList| -> DimList {
        if g.is_empty() {
            g.push((1, smallvec![0; nops]));
        }
        g
    };
    let (kept, reduced) = match &spec.kind {
        LoopKind::Pointwise => (pad(coalesce(group(&kept_dims))), Vec::new()),
        LoopKind::Reduce { .. } => (
            pad(coalesce(group(&kept_dims))),
            pad(coalesce(group(&red_dims))),
        ),
        LoopKind::Softmax { .. } => (pad(coalesce(group(&kept_dims))), pad(group(&red_dims))),
    };
    let range: usize = kept.iter().map(|d| d.0).product();
    let per_unit: usize = reduced.iter().map(|d| d.0).product();
    if let LoopKind::Reduce {
        op: op @ (ReduceOp::Amax | ReduceOp::Amin),
        ..
    } = &spec.kind
        && per_unit == 0
        && range > 0
    {
        return Err(Error::shape(
            if *op == ReduceOp::Amax {
                "amax"
            } else {
                "amin"
            },
            format!(
                "cannot reduce over an empty dim (input shape {}); the operation has no identity",
                fmt_shape(&shape)
            ),
        ));
    }
    // Column mode: a strided reduced inner dim (for every input) next to a unit-stride kept
    // inner dim (for some input) — `sum(dim=0)` of a row-major matrix — in a vector kernel.
    let kept_inner = matches!(spec.kind, LoopKind::Reduce { .. }) && {
        let (ksize, kst) = kept.last().expect("padded");
        let (rsize, rst) = reduced.last().expect("padded");
        *ksize >= 2
            && *rsize >= 2
            && (0..nin).all(|op| rst[op] != 1)
            && (0..nin).any(|op| kst[op] == 1)
            && vectorized
    };
    let all: DimList = if kept_inner {
        let (inner, outer) = kept.split_last().expect("padded");
        outer
            .iter()
            .chain(&reduced)
            .chain(std::iter::once(inner))
            .cloned()
            .collect()
    } else {
        kept.iter().chain(&reduced).cloned().collect()
    };
    let dims = all.len();
    let (inner_size, inner_strides) = all.last().cloned().expect("at least one loop dim");
    let mut classes: Vec<StrideClass> = inner_strides.iter().map(|&s| StrideClass::of(s)).collect();
    if inner_size <= 1 {
        classes.iter_mut().for_each(|c| *c = StrideClass::Unit);
    }
    if matches!(spec.kind, LoopKind::Reduce { .. }) && !kept_inner {
        classes[nin..]
            .iter_mut()
            .for_each(|c| *c = StrideClass::Zero);
    }
    let mut strides = Vec::with_capacity(nops * dims);
    for op in 0..nops {
        strides.extend(all.iter().map(|d| d.1[op] as i64));
    }
    let range = if matches!(spec.kind, LoopKind::Pointwise) {
        all.iter().map(|d| d.0).product()
    } else {
        range
    };
    Ok(LaunchPlan {
        layout: LoopLayout {
            dims,
            reduced: reduced.len(),
            kept_inner,
            in_place,
            classes,
        },
        shape: all.iter().map(|d| d.0 as i64).collect(),
        strides,
        ptrs,
        device,
        range,
        per_unit: if matches!(spec.kind, LoopKind::Pointwise) {
            1
        } else {
            per_unit
        },
        key: PlanKey::new(iter_shape, inputs.iter().chain(outputs).copied()),
        rank,
        kind: spec.kind.clone(),
    })
}
