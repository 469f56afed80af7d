//! The x86-64 assembler of full-width kernels (System V): the plan and frame of a kernel, then
//! its instructions: the pointwise loop nest (`pointwise`), row sums (`reduce`), one vector of
//! a stage (`body`), the instruction emitters (`ops`), the fixed registers (`fixed`) and the
//! bulk calls between stages (`bulk`).

use iced_x86::code_asm::*;
use tensorplay_ir::ReduceOp;

use crate::codegen::cpu::code::WideCode;
use crate::codegen::cpu::math::bulk::Level;
use crate::codegen::cpu::wide_asm::imp::frame::{Emit, OPERANDS, POINTER_REGS, Refusal, SUM_LANES};
use crate::codegen::cpu::wide_asm::imp::plan::{Plan, plan};
use crate::codegen::kernel::{KernelSpec, LoopKind, LoopLayout, StrideClass, ValueId};

/// Emits the same instruction on ymm (AVX2) or zmm (AVX-512) registers.
macro_rules! vop {
    ($s:expr, $ins:ident, $d:expr, $x:expr, $y:expr) => {
        if $s.wide {
            $s.a.$ins(zmm($d), zmm($x), zmm($y))
        } else {
            $s.a.$ins(ymm($d), ymm($x), ymm($y))
        }
    };
    ($s:expr, $ins:ident, $d:expr, $x:expr) => {
        if $s.wide {
            $s.a.$ins(zmm($d), zmm($x))
        } else {
            $s.a.$ins(ymm($d), ymm($x))
        }
    };
}

mod body;
mod bulk;
mod fixed;
mod frame;
mod ops;
mod plan;
mod pointwise;
mod reduce;

/// Whether a body iteration covers all lanes or only the tail's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lanes {
    Full,
    Tail,
}

/// One kernel being assembled.
struct Asm<'a> {
    a: CodeAssembler,
    spec: &'a KernelSpec,
    layout: &'a LoopLayout,
    /// AVX-512 (zmm registers, opmask tails) rather than AVX2.
    wide: bool,
    lanes: usize,
    plan: Plan,
    /// Operand `k`'s pointer register (unit-stride operands): at the current tile's start.
    ptr_reg: Vec<Option<AsmRegister64>>,
    /// AVX2: the register holding the tail's lane mask, and a scratch for NaN masks.
    mask_reg: u8,
    scratch_reg: u8,
    /// Vector registers free for the values of a stage's body.
    body_regs: Vec<u8>,
    /// AVX2: lane indices 0..8 (data after the code).
    iota: CodeLabel,
    frame: i32,
    /// Frame offset of scratch slot 0, and bytes per slot.
    slots_at: i32,
    tile_bytes: i32,
    /// Reductions: the operation and the reduced value.
    reduce: Option<(ReduceOp, ValueId)>,
    /// Reductions: the accumulator registers (`SUM_LANES / lanes` of them), the registers
    /// that combine them, and the frame offset of `SUM_LANES` f32 where the accumulators
    /// are combined followed by `SUM_LANES` f32 holding a block's last partial vectors.
    accs: Vec<u8>,
    temps: [u8; 4],
    sums_at: i32,
}

fn e(err: Refusal) -> Option<String> {
    match err {
        Refusal::TooLarge => None,
        Refusal::Asm(err) => Some(format!("x86 assembler: {err}")),
    }
}

/// Assembles `spec` for `layout` at `level`'s width into executable code, `None` when it is
/// refused (its values do not fit); an `Err` is an assembler failure.
pub(super) fn assemble(
    spec: &KernelSpec,
    layout: &LoopLayout,
    level: Level,
) -> Result<Option<WideCode>, String> {
    let mut summary = String::new();
    let code = match machine_code(spec, layout, level, &mut summary) {
        Ok(code) => code,
        Err(err) => return e(err).map_or(Ok(None), Err),
    };
    let mut map = memmap2::MmapMut::map_anon(code.len()).map_err(|err| err.to_string())?;
    map.copy_from_slice(&code);
    let map = map.make_exec().map_err(|err| err.to_string())?;
    Ok(Some(WideCode::new(map, level.lanes(), summary)))
}

/// The machine code of `spec` for `layout` at `level`: its plan (described in `summary`), its
/// registers and frame, then its instructions.
fn machine_code(
    spec: &KernelSpec,
    layout: &LoopLayout,
    level: Level,
    summary: &mut String,
) -> Emit<Vec<u8>> {
    let wide = level == Level::Avx512;
    let vregs: u8 = if wide { 32 } else { 16 };
    let plan = plan(spec, layout, vregs, wide)?;
    let reduce = match &spec.kind {
        LoopKind::Reduce { op, value, .. } => Some((*op, *value)),
        _ => None,
    };
    // A row sum keeps SUM_LANES lanes in `groups` accumulator registers.
    let groups = (SUM_LANES / level.lanes()) as u8;
    *summary = match (reduce, plan.tile) {
        (Some(_), _) => format!("row sums: {SUM_LANES} lanes in {groups} accumulators"),
        (None, usize::MAX) => format!("{} stage(s), no scratch", plan.stages),
        (None, t) => format!(
            "{} stages, {} scratch slots, tiles of {t}",
            plan.stages, plan.slots
        ),
    };
    let nops = spec.inputs.len() + spec.outputs.len();
    let mut ptr_reg = vec![None; nops];
    let mut regs = POINTER_REGS.iter();
    for (k, slot) in ptr_reg.iter_mut().enumerate() {
        if layout.classes[k] == StrideClass::Unit {
            *slot = Some(*regs.next().ok_or(Refusal::TooLarge)?);
        }
    }
    let f = frame_layout(&plan, nops, wide, vregs, reduce.is_some().then_some(groups))?;
    let mut a = CodeAssembler::new(64)?;
    let iota = a.create_label();
    let mut asm = Asm {
        a,
        spec,
        layout,
        wide,
        lanes: level.lanes(),
        mask_reg: f.first_body.saturating_sub(2),
        scratch_reg: f.first_body.saturating_sub(1),
        body_regs: f.body_regs,
        plan,
        ptr_reg,
        iota,
        frame: f.frame,
        slots_at: f.slots_at,
        tile_bytes: f.tile_bytes,
        reduce,
        accs: f.accs,
        temps: f.temps,
        sums_at: f.sums_at,
    };
    asm.kernel()?;
    Ok(asm.a.assemble(0)?)
}

/// Where a kernel keeps its values: the first vector register of the body's and the body's
/// registers, a row sum's accumulators and combining registers, and its frame (scratch slots,
/// the row sum's combination area, the frame size).
struct FrameLayout {
    first_body: u8,
    body_regs: Vec<u8>,
    accs: Vec<u8>,
    temps: [u8; 4],
    slots_at: i32,
    tile_bytes: i32,
    sums_at: i32,
    frame: i32,
}

/// The registers and frame of a kernel with `plan`, `nops` operands and `vregs` vector registers;
/// `groups`: a row sum's accumulator registers. Refused when a row sum leaves too few registers.
fn frame_layout(
    plan: &Plan,
    nops: usize,
    wide: bool,
    vregs: u8,
    groups: Option<u8>,
) -> Emit<FrameLayout> {
    let first_body = plan
        .fixed
        .iter()
        .flatten()
        .chain(plan.helpers.iter().map(|(_, r)| r))
        .map(|&r| r + 1)
        .max()
        .unwrap_or(0)
        + if wide { 0 } else { 2 };
    let slots_at = (OPERANDS as u32 + 16 * nops as u32).next_multiple_of(64) as i32;
    let tile_bytes = if plan.slots == 0 {
        0
    } else {
        4 * plan.tile as i32
    };
    let mut frame_end = slots_at + tile_bytes * plan.slots as i32;
    let mut body_regs: Vec<u8> = (first_body..vregs).rev().collect();
    let (mut accs, mut temps, mut sums_at) = (Vec::new(), [0u8; 4], 0);
    if let Some(groups) = groups {
        // Accumulators: the highest registers; four low ones (xmm-addressable) for
        // combining them, which may coincide with accumulators (those are stored to
        // the frame before the combination starts) or body registers (idle then).
        accs = body_regs.drain(..groups as usize).collect();
        if first_body + 4 > 16 || body_regs.len() < 4 {
            return Err(Refusal::TooLarge);
        }
        temps = [first_body, first_body + 1, first_body + 2, first_body + 3];
        sums_at = (frame_end as u32).next_multiple_of(64) as i32;
        frame_end = sums_at + 2 * 4 * SUM_LANES as i32;
    }
    // Six pushes and the return address: a frame of 8 mod 16 keeps rsp 16-aligned.
    let frame = (frame_end as u32).next_multiple_of(16) as i32 + 8;
    Ok(FrameLayout {
        first_body,
        body_regs,
        accs,
        temps,
        slots_at,
        tile_bytes,
        sums_at,
        frame,
    })
}
