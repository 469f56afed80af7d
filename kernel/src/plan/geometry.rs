//! The loop geometry of a launch, step by step: the iteration shape, every operand's strides
//! over it, the kept and reduced loop dims (unit dims dropped, uniform neighbours merged),
//! column mode and the innermost stride classes.

use smallvec::{SmallVec, smallvec};
use tensorplay_ir::shape::{broadcast_shapes, fmt_shape};
use tensorplay_ir::{Error, ReduceOp, Result};

use crate::plan::operand::{OP, PlanOperand};
use crate::spec::{KernelSpec, LoopKind, StrideClass};

pub(super) type Strides = SmallVec<[isize; 8]>;

/// A list of loop dims: size and per-operand stride.
pub(super) type DimList = Vec<(usize, Strides)>;

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

/// The iteration shape: `iter_shape` when given; else for pointwise kernels and softmax the
/// output shape (or the broadcast of the inputs when there is no output), for reductions the
/// broadcast of the inputs widened to the output's kept sizes. Errors unless it has the spec's
/// rank.
pub(super) fn iteration_shape<T: PlanOperand>(
    spec: &KernelSpec,
    inputs: &[&T],
    outputs: &[&T],
    iter_shape: Option<&[usize]>,
) -> Result<SmallVec<[usize; 8]>> {
    let rank = spec.rank;
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
    Ok(shape)
}

/// The kept and the reduced dims of the iteration space.
pub(super) fn kept_and_reduced(kind: &LoopKind, rank: usize) -> (Vec<usize>, Vec<usize>) {
    match kind {
        LoopKind::Pointwise => ((0..rank).collect(), Vec::new()),
        LoopKind::Reduce { dims, .. } => (
            (0..rank).filter(|d| !dims.contains(d)).collect(),
            dims.clone(),
        ),
        LoopKind::Softmax { .. } if rank == 0 => (Vec::new(), Vec::new()),
        LoopKind::Softmax { .. } => ((0..rank - 1).collect(), vec![rank - 1]),
    }
}

/// The strides of output `k` over the iteration shape (0 along reduced dims), its shape checked
/// against the loop kind; errors for an output whose elements overlap.
pub(super) fn output_strides<T: PlanOperand>(
    kind: &LoopKind,
    k: usize,
    t: &T,
    shape: &[usize],
    kept_dims: &[usize],
    red_dims: &[usize],
) -> Result<Strides> {
    let rank = shape.len();
    let st: Strides = match kind {
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
                        fmt_shape(shape)
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
            if t.shape() != shape {
                return Err(Error::shape(
                    OP,
                    format!(
                        "output {k} has shape {}, expected the iteration shape {}",
                        fmt_shape(t.shape()),
                        fmt_shape(shape)
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
    Ok(st)
}

/// The kept and the reduced loop dims, each group with unit dims dropped and uniform neighbours
/// merged (softmax rows keep their one reduced dim), and at least one dim per group (reduced:
/// only for reductions and softmax).
pub(super) fn loop_dims(
    kind: &LoopKind,
    shape: &[usize],
    op_strides: &[Strides],
    kept_dims: &[usize],
    red_dims: &[usize],
) -> (DimList, DimList) {
    let nops = op_strides.len();
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
    match kind {
        LoopKind::Pointwise => (pad(coalesce(group(kept_dims))), Vec::new()),
        LoopKind::Reduce { .. } => (
            pad(coalesce(group(kept_dims))),
            pad(coalesce(group(red_dims))),
        ),
        LoopKind::Softmax { .. } => (pad(coalesce(group(kept_dims))), pad(group(red_dims))),
    }
}

/// `amax`/`amin` have no identity: errors when there are kept points but nothing to reduce.
pub(super) fn check_extremum_identity(
    kind: &LoopKind,
    range: usize,
    per_unit: usize,
    shape: &[usize],
) -> Result<()> {
    if let LoopKind::Reduce {
        op: op @ (ReduceOp::Amax | ReduceOp::Amin),
        ..
    } = kind
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
                fmt_shape(shape)
            ),
        ));
    }
    Ok(())
}

/// Column mode (for a vector kernel): a strided reduced inner dim (for every input that
/// varies along the kept inner dim) next to a unit-stride kept inner dim (for some input) —
/// `sum(dim=0)` of a row-major matrix. An input broadcast along the kept inner dim (stride 0
/// there, such as layer norm's `[B, T, 1]` statistics in the weight gradient
/// `sum(g * (x - mean) * rstd, dims=[0, 1])`) is one value per reduced point, splat across the
/// columns, whatever its reduced stride.
pub(super) fn column_mode(kind: &LoopKind, kept: &DimList, reduced: &DimList, nin: usize) -> bool {
    matches!(kind, LoopKind::Reduce { .. }) && {
        let (ksize, kst) = kept.last().expect("padded");
        let (rsize, rst) = reduced.last().expect("padded");
        *ksize >= 2
            && *rsize >= 2
            && (0..nin).all(|op| rst[op] != 1 || kst[op] == 0)
            && (0..nin).any(|op| kst[op] == 1)
    }
}

/// The stride class of every operand's innermost loop dim (all unit when that dim has one
/// element; a rows-mode reduction's outputs are always `Zero`).
pub(super) fn inner_classes(
    kind: &LoopKind,
    all: &DimList,
    nin: usize,
    kept_inner: bool,
) -> Vec<StrideClass> {
    let (inner_size, inner_strides) = all.last().expect("at least one loop dim");
    let mut classes: Vec<StrideClass> = inner_strides.iter().map(|&s| StrideClass::of(s)).collect();
    if *inner_size <= 1 {
        classes.iter_mut().for_each(|c| *c = StrideClass::Unit);
    }
    if matches!(kind, LoopKind::Reduce { .. }) && !kept_inner {
        classes[nin..]
            .iter_mut()
            .for_each(|c| *c = StrideClass::Zero);
    }
    classes
}
