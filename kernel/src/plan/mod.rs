//! Launch plans: validating operands against a spec and planning the loop nest (broadcast
//! strides, dropping unit dims, merging dims that step uniformly) — the geometry every target
//! launches a kernel over. A plan depends only on the spec and the operands' shapes and strides,
//! so callers that launch repeatedly keep it ([`LaunchPlan::detach`]) and bind fresh pointers.

mod geometry;
mod operand;

use smallvec::SmallVec;
use tensorplay_ir::shape::broadcast_strides;
use tensorplay_ir::{Device, Result};

use crate::plan::geometry::{
    DimList, Strides, check_extremum_identity, column_mode, inner_classes, iteration_shape,
    kept_and_reduced, loop_dims, output_strides,
};
use crate::plan::operand::OP;
pub use crate::plan::operand::{PlanOperand, Ptrs, bind};
use crate::spec::{KernelSpec, LoopKind, LoopLayout};

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
    let shape = iteration_shape(spec, inputs, outputs, iter_shape)?;
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
    let (kept_dims, red_dims) = kept_and_reduced(&spec.kind, rank);
    for (k, t) in outputs.iter().enumerate() {
        op_strides.push(output_strides(
            &spec.kind, k, *t, &shape, &kept_dims, &red_dims,
        )?);
    }
    let (kept, reduced) = loop_dims(&spec.kind, &shape, &op_strides, &kept_dims, &red_dims);
    let range: usize = kept.iter().map(|d| d.0).product();
    let per_unit: usize = reduced.iter().map(|d| d.0).product();
    check_extremum_identity(&spec.kind, range, per_unit, &shape)?;
    let kept_inner = vectorized && column_mode(&spec.kind, &kept, &reduced, nin);
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
    let classes = inner_classes(&spec.kind, &all, nin, kept_inner);
    let mut strides = Vec::with_capacity(nops * dims);
    for op in 0..nops {
        strides.extend(all.iter().map(|d| d.1[op] as i64));
    }
    let pointwise = matches!(spec.kind, LoopKind::Pointwise);
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
        range: if pointwise {
            all.iter().map(|d| d.0).product()
        } else {
            range
        },
        per_unit: if pointwise { 1 } else { per_unit },
        key: PlanKey::new(iter_shape, inputs.iter().chain(outputs).copied()),
        rank,
        kind: spec.kind.clone(),
    })
}
