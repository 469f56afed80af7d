//! The plan of an assembled kernel: its stages around the bulk calls, the vector registers fixed
//! for the whole kernel (constants, parameters, broadcast inputs, the helpers operations need),
//! the scratch slots of values that cross stages or feed a bulk call, and the tile length.

use tensorplay_ir::ScalarOp;

use crate::codegen::cpu::wide_asm::imp::frame::{Emit, MAX_TILE, Refusal, SCRATCH_ELEMS};
use crate::codegen::cpu::wide_asm::lowering::outlined;
use crate::codegen::kernel::{Inst, KernelSpec, LoopLayout, StrideClass};

/// Constants an operation needs besides its operands, each held in a fixed register.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Helper {
    Zero,
    One,
    AbsMask,
    SignBit,
    Bits(u32),
}

impl Helper {
    pub(super) fn bits(self) -> u32 {
        match self {
            Helper::Zero => 0,
            Helper::One => 1.0f32.to_bits(),
            Helper::AbsMask => 0x7fff_ffff,
            Helper::SignBit => 0x8000_0000,
            Helper::Bits(b) => b,
        }
    }
}

/// The helpers of one inline operation.
fn helpers_of(op: &ScalarOp) -> Vec<Helper> {
    use ScalarOp::*;
    let narrow = |v: f64| Helper::Bits((v as f32).to_bits());
    match op {
        Relu => vec![Helper::Zero],
        Reciprocal | Rsqrt => vec![Helper::One],
        Abs => vec![Helper::AbsMask],
        Neg => vec![Helper::SignBit],
        LogicalNot => vec![Helper::Bits(u32::MAX)],
        Clamp { min, max } => min.iter().chain(max).map(|&v| narrow(v)).collect(),
        _ => Vec::new(),
    }
}

/// How the kernel is split into stages around calls of bulk kernels, and where every value
/// lives. Without outlined operations there is one stage and no scratch.
pub(super) struct Plan {
    pub(super) live: Vec<bool>,
    /// Per value: the stage that computes it (loads and fixed values: 0, available in
    /// every stage).
    pub(super) stage: Vec<usize>,
    /// Per value: the bulk kernel computing it, for outlined operations.
    pub(super) bulk: Vec<Option<usize>>,
    pub(super) stages: usize,
    /// Per value: the fixed vector register holding it for the whole kernel (constants,
    /// parameters, inputs broadcast along the inner dim).
    pub(super) fixed: Vec<Option<u8>>,
    pub(super) helpers: Vec<(Helper, u8)>,
    /// Per value: its scratch slot, and the stage that writes it (bulk results: written by
    /// their call, which follows stage `stage - 1`).
    pub(super) slot: Vec<Option<(usize, usize)>>,
    pub(super) slots: usize,
    /// Per value: the output a bulk call writes it to directly, when storing it there is
    /// its only use (no slot, no store in the body).
    pub(super) direct_out: Vec<Option<usize>>,
    /// Elements per tile (`usize::MAX`: the whole row segment, when there are no slots).
    pub(super) tile: usize,
}

/// Plans `spec` under `layout` with `vregs` vector registers (`wide`: AVX-512), or refuses it
/// when its values do not fit the registers or the scratch budget.
pub(super) fn plan(spec: &KernelSpec, layout: &LoopLayout, vregs: u8, wide: bool) -> Emit<Plan> {
    let live = spec.liveness();
    let (stage, bulk, stages) = stages(spec, &live);
    if stages > 1 && layout.in_place {
        // Stores would have to wait for the last stage; Cranelift's staging does that.
        return Err(Refusal::TooLarge);
    }
    let (fixed, helpers) = fixed_registers(spec, layout, &live, vregs, wide)?;
    let direct_out = direct_outputs(spec, &live, &bulk);
    let (slot, slots) = scratch_slots(spec, layout, &live, &stage, &bulk, &direct_out);
    let tile = tile_len(slots)?;
    Ok(Plan {
        live,
        stage,
        bulk,
        stages,
        fixed,
        helpers,
        slot,
        slots,
        direct_out,
        tile,
    })
}

/// Per value: the stage that computes it and, for outlined operations, the bulk kernel that
/// does; then the number of stages (a value computed by a bulk call is one stage later than
/// its arguments).
fn stages(spec: &KernelSpec, live: &[bool]) -> (Vec<usize>, Vec<Option<usize>>, usize) {
    let n = spec.insts.len();
    let mut stage = vec![0usize; n];
    let mut bulk = vec![None; n];
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        if let Inst::Op { op, args, .. } = inst {
            let s = args.iter().map(|&a| stage[a]).max().unwrap_or(0);
            bulk[i] = outlined(op);
            stage[i] = s + usize::from(bulk[i].is_some());
        }
    }
    let stages = 1
        + (0..n)
            .filter(|&i| live[i])
            .map(|i| stage[i])
            .max()
            .unwrap_or(0);
    (stage, bulk, stages)
}

/// Per value, the vector register fixed to it for the whole kernel; and each helper with its
/// register.
type FixedRegisters = (Vec<Option<u8>>, Vec<(Helper, u8)>);

/// Fixed registers: constants, parameters, broadcast inputs, then helpers (per value, and the
/// helpers with their registers); refused when they leave no register for the body.
fn fixed_registers(
    spec: &KernelSpec,
    layout: &LoopLayout,
    live: &[bool],
    vregs: u8,
    wide: bool,
) -> Emit<FixedRegisters> {
    let mut next: u8 = 0;
    let mut fixed = vec![None; spec.insts.len()];
    let mut helpers: Vec<(Helper, u8)> = Vec::new();
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let pinned = match inst {
            Inst::Const { .. } | Inst::Param { .. } => true,
            Inst::Load { input } => layout.classes[*input] == StrideClass::Zero,
            _ => false,
        };
        if pinned {
            fixed[i] = Some(next);
            next += 1;
        }
        if let Inst::Op { op, .. } = inst {
            for h in helpers_of(op) {
                if !helpers.iter().any(|&(g, _)| g == h) {
                    helpers.push((h, next));
                    next += 1;
                }
            }
        }
    }
    // AVX2 keeps the tail's lane mask and the NaN masks of `maximum`/`minimum` in two more.
    if !wide {
        next += 2;
    }
    if next >= vregs {
        return Err(Refusal::TooLarge);
    }
    Ok((fixed, helpers))
}

/// Per value: the output its bulk call writes it to, when it is a bulk result only stored to
/// that one output.
fn direct_outputs(spec: &KernelSpec, live: &[bool], bulk: &[Option<usize>]) -> Vec<Option<usize>> {
    let n = spec.insts.len();
    let mut uses = vec![0usize; n];
    let mut stored_to = vec![None; n];
    for (i, inst) in spec.insts.iter().enumerate() {
        match inst {
            Inst::Op { args, .. } if live[i] => args.iter().for_each(|&a| uses[a] += 1),
            Inst::Store { output, value } => {
                uses[*value] += 1;
                stored_to[*value] = Some(*output);
            }
            _ => {}
        }
    }
    (0..n)
        .map(|v| {
            (bulk[v].is_some() && uses[v] == 1)
                .then_some(stored_to[v])
                .flatten()
        })
        .collect()
}

/// The scratch slots of the values that cross stages or feed a bulk call (per value: its slot
/// and the stage that writes it), and their number.
fn scratch_slots(
    spec: &KernelSpec,
    layout: &LoopLayout,
    live: &[bool],
    stage: &[usize],
    bulk: &[Option<usize>],
    direct_out: &[Option<usize>],
) -> (Vec<Option<(usize, usize)>>, usize) {
    let n = spec.insts.len();
    let mut slot_stage: Vec<Option<usize>> = vec![None; n];
    let need_slot = |v: usize, s: usize, slot_stage: &mut Vec<Option<usize>>| {
        slot_stage[v] = Some(slot_stage[v].map_or(s, |t| t.min(s)));
    };
    for (i, inst) in spec.insts.iter().enumerate() {
        if !live[i] {
            continue;
        }
        match inst {
            Inst::Op { args, .. } if bulk[i].is_some() => {
                // The call after stage `stage - 1` reads its arguments from memory: a
                // unit-stride input straight from the tensor, anything else from a slot.
                let call = stage[i] - 1;
                for &a in args {
                    match spec.insts[a] {
                        Inst::Load { input } if layout.classes[input] == StrideClass::Unit => {}
                        Inst::Op { .. } => need_slot(a, stage[a], &mut slot_stage),
                        _ => need_slot(a, call, &mut slot_stage),
                    }
                }
                if direct_out[i].is_none() {
                    need_slot(i, stage[i], &mut slot_stage);
                }
            }
            Inst::Op { args, .. } => {
                for &a in args {
                    if stage[a] < stage[i] && matches!(spec.insts[a], Inst::Op { .. }) {
                        need_slot(a, stage[a], &mut slot_stage);
                    }
                }
            }
            _ => {}
        }
    }
    let mut slot = vec![None; n];
    let mut slots = 0;
    for v in 0..n {
        if let Some(s) = slot_stage[v] {
            slot[v] = Some((slots, s));
            slots += 1;
        }
    }
    (slot, slots)
}

/// Elements per tile for `slots` scratch slots: the whole row segment without any (one
/// stage, or bulk calls reading and writing tensors only), else what the scratch budget allows
/// (refused below 64).
fn tile_len(slots: usize) -> Emit<usize> {
    Ok(if slots == 0 {
        usize::MAX
    } else {
        let per = (SCRATCH_ELEMS / slots.max(1)) / 16 * 16;
        if per < 64 {
            return Err(Refusal::TooLarge);
        }
        per.min(MAX_TILE)
    })
}
