//! f32 pointwise kernels and row sums assembled directly at the host's full vector width: 8
//! lanes with AVX2, 16 with AVX-512.
//!
//! Cranelift's x86-64 back end has only 128-bit vector types, so its kernels run f32 work 4
//! lanes at a time; a chain of cheap IEEE operations (`x * 1.1 + 0.3`, `relu(x + b) + r`) is
//! then bound by instruction count where a hand loop moves 8 or 16 elements per instruction.
//! For pointwise kernels whose operands are all f32, over one or two loop dims, with inputs
//! contiguous or broadcast along the inner dim, this module writes the machine code itself
//! with `iced-x86`'s assembler: the loop nest, one full-width vector per operation, masked
//! tails. Each inline operation ([`lowerable`]) is the same instruction the eager kernel and
//! the Cranelift kernel execute per lane (`vaddps` for `addss`, `vsqrtps` for `sqrtss`,
//! sign-mask `and`/`xor` for `abs`/`neg`, compares and blends for the NaN rules of `maximum`;
//! comparisons give all-ones lane masks, which `where` blends on), so results are
//! bit-identical to both; nothing is contracted into FMAs.
//!
//! Transcendentals and the general `pow` are handed to the bulk kernels (the same algorithm,
//! the same bits, see [`super::math::bulk`]), as Cranelift's staged kernels do: the row is
//! walked in tiles of at most 512 elements; per tile, stage 0 computes what the first bulk
//! calls read and spills it to scratch slots on the stack (a unit-stride input is read by the
//! call straight from the tensor), the calls run over the tile, stage 1 reloads their results,
//! and so on. Each store happens in the stage where its value exists; values a later stage
//! reads again are spilled once, loads are repeated (from L1). The last stage prefetches the
//! next tile's operands (the bulk calls touch no tensor memory, so the hardware prefetcher
//! alone falls behind at DRAM sizes).
//!
//! f32 sums and means of rows whose value is computed inline are assembled too, in the
//! accumulation order of Cranelift's reduction kernels (32 lanes per block of 4096 elements:
//! two zmm or four ymm accumulators, the block tail and the combination in the same order), so
//! a compiled sum is the same bits whichever generator and ISA produced it.
//!
//! Assembling takes tens of microseconds against Cranelift's half millisecond. Everything
//! else (other dtypes, casts, bool tensors, strided operands, deeper loop nests, other
//! reductions, column reductions, reductions of outlined values, softmax, in-place kernels
//! with outlined operations) is compiled by Cranelift as before; [`assemble`] answers `None`
//! for it.
//!
//! The kernel has the common entry `extern "C" fn(*const KernelArgs)` (System V, the only ABI
//! it is built for) and honours every field a pointwise kernel reads: any `[start, end)` of the
//! flattened iteration, rows of any length, outer strides of any value.

use memmap2::Mmap;
use tensorplay_ir::{DType, ReduceOp, ScalarOp};

use super::emit::liveness;
use super::math::bulk::Level;
use crate::codegen::kernel::{Inst, KernelSpec, Lit, LoopKind, LoopLayout, StrideClass};

/// Executable machine code of one assembled kernel.
pub(super) struct WideCode {
    /// The mapping holding the code (read + execute).
    pub(super) map: Mmap,
    /// f32 lanes per vector (8 or 16).
    pub(super) lanes: usize,
    /// How the kernel is organised, for `TP_LOGS=clif`: stages, scratch slots, tile length.
    pub(super) summary: String,
    /// Counts the mapping in `live_kernels` while it exists.
    _live: super::compile::LiveCode,
}

/// Whether `op` has a full-width lowering here: the IEEE operations, the exact sign
/// operations, rounding to integral values, the NaN-propagating `maximum`/`minimum`/`clamp`/
/// `relu`, comparisons and `where` on f32, and the logical operations on their bools (held as
/// all-ones / all-zeros lanes).
pub(super) fn lowerable(op: &ScalarOp) -> bool {
    use ScalarOp::*;
    matches!(
        op,
        Add | Sub
            | Eq
            | Ne
            | Lt
            | Le
            | Gt
            | Ge
            | Where
            | LogicalNot
            | LogicalAnd
            | LogicalOr
            | LogicalXor
            | Mul
            | Div
            | Sqrt
            | Rsqrt
            | Reciprocal
            | Square
            | Neg
            | Abs
            | Relu
            | Maximum
            | Minimum
            | Clamp { .. }
            | Floor
            | Ceil
            | Round
    )
}

/// The address of the bulk kernel that computes `op` (in f32) at the host's level, for the
/// operations handed to bulk kernels: transcendentals and the general `pow`. Division and `sqrt`
/// have bulk kernels too, but here they run inline at full width.
fn outlined(op: &ScalarOp) -> Option<usize> {
    if lowerable(op) {
        return None;
    }
    super::staging::bulk_op(*op, DType::F32).and_then(super::staging::bulk_addr)
}

/// Whether `spec` under `layout` can be assembled: a pointwise kernel over one or two loop dims,
/// or an f32 sum or mean over the inner dim of rows, whose live instructions are all f32 loads,
/// constants, parameters, [`lowerable`] operations (pointwise kernels also outlined ones) and
/// stores, with every input unit-stride or broadcast along the inner dim and every pointwise
/// output unit-stride. `spec` is a validated one ([`KernelSpec::validate`]).
pub(super) fn eligible(spec: &KernelSpec, layout: &LoopLayout) -> bool {
    let f32_only = spec
        .inputs
        .iter()
        .chain(&spec.outputs)
        .all(|&d| d == DType::F32);
    let nin = spec.inputs.len();
    let reduction = matches!(spec.kind, LoopKind::Reduce { .. });
    let classes_ok = layout.classes.iter().enumerate().all(|(k, c)| match c {
        StrideClass::Unit => true,
        // A reduction's output is written once per row (class Zero).
        StrideClass::Zero => k < nin || reduction,
        StrideClass::Strided => false,
    });
    let live = liveness(spec);
    let insts_ok = spec.insts.iter().zip(&live).all(|(inst, &l)| {
        !l || match inst {
            Inst::Load { .. } | Inst::Store { .. } => true,
            Inst::Const { value, dtype } => matches!(
                (dtype, value),
                (DType::F32, Lit::Float(_)) | (DType::Bool, Lit::Bool(_))
            ),
            Inst::Param { dtype, .. } => *dtype == DType::F32,
            // f32 arithmetic, f32 comparisons (to bool) and logic on those bools; the
            // validated spec fixes the result and operand dtypes from `compute`.
            Inst::Op { op, compute, .. } => {
                use ScalarOp::{LogicalAnd, LogicalNot, LogicalOr, LogicalXor};
                let logical = matches!(op, LogicalNot | LogicalAnd | LogicalOr | LogicalXor);
                match compute {
                    DType::F32 => !logical && (lowerable(op) || outlined(op).is_some()),
                    DType::Bool => logical,
                    _ => false,
                }
            }
            Inst::Cast { .. } => false,
        }
    });
    let kind_ok =
        match &spec.kind {
            LoopKind::Pointwise => (1..=2).contains(&layout.dims) && !spec.outputs.is_empty(),
            // f32 sums and means of rows: one kept and one reduced loop dim, the value computed
            // inline (no bulk calls).
            LoopKind::Reduce { op, value, .. } => {
                matches!(op, ReduceOp::Sum | ReduceOp::Mean)
                    && layout.dims == 2
                    && layout.reduced == 1
                    && !layout.kept_inner
                    && spec.value_dtype(*value) == Some(DType::F32)
                    && spec.insts.iter().zip(&live).all(|(inst, &l)| {
                        !l || !matches!(inst, Inst::Op { op, .. } if !lowerable(op))
                    })
            }
            LoopKind::Softmax { .. } => false,
        };
    kind_ok && f32_only && classes_ok && insts_ok
}

/// Assembles `spec` for `layout` at `level`'s width, or `None` when it is not [`eligible`], the
/// host lacks the level, or its values do not fit the vector registers (then Cranelift
/// compiles it). An `Err` is an internal assembler failure.
pub(super) fn assemble(
    spec: &KernelSpec,
    layout: &LoopLayout,
    level: Level,
) -> Result<Option<WideCode>, String> {
    if !enabled() || !host_ready(level) || !eligible(spec, layout) {
        return Ok(None);
    }
    imp::assemble(spec, layout, level)
}

/// Whether assembled kernels are on: `TP_WIDE_ASM=0` (`false`, `off`, `no`) leaves every kernel
/// to Cranelift (for comparisons; the results are the same bits).
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        tensorplay_math::bulk::env_enables(std::env::var("TP_WIDE_ASM").ok().as_deref())
    })
}

#[cfg(all(target_arch = "x86_64", unix))]
fn host_ready(level: Level) -> bool {
    level.is_supported()
}

#[cfg(not(all(target_arch = "x86_64", unix)))]
fn host_ready(_level: Level) -> bool {
    false
}

#[cfg(not(all(target_arch = "x86_64", unix)))]
mod imp {
    use super::*;
    pub(super) fn assemble(
        _spec: &KernelSpec,
        _layout: &LoopLayout,
        _level: Level,
    ) -> Result<Option<WideCode>, String> {
        Ok(None)
    }
}

#[cfg(all(target_arch = "x86_64", unix))]
mod imp {
    use super::*;
    use crate::codegen::cpu::args::offsets;
    use crate::codegen::kernel::ValueId;
    use iced_x86::Register;
    use iced_x86::code_asm::*;

    /// The general-purpose registers that hold unit-stride operand pointers in the inner loop
    /// (`rax`, `rcx`, `rdx` are scratch; `r9`-`r11` the loop counters; `rsp` the frame).
    const POINTER_REGS: [AsmRegister64; 9] = [rsi, rdi, r8, rbx, rbp, r12, r13, r14, r15];
    /// Callee-saved registers the kernel uses (pushed in the prologue).
    const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];
    /// Pointer registers a bulk call may clobber (saved around it).
    const CALL_CLOBBERED: [AsmRegister64; 3] = [rsi, rdi, r8];

    // Frame slots (bytes from `rsp`).
    const POS: i32 = 0; // first flattened element not yet done
    const END: i32 = 8; // one past the last element of this call
    const INNER: i32 = 16; // inner dim size
    const COL: i32 = 24; // column where the current row segment starts
    const SEG: i32 = 32; // length of the current row segment
    const REM: i32 = 40; // elements of the segment not yet done (staged kernels tile it)
    const PARAMS: i32 = 48; // the scalar arguments
    const TILE_LEN: i32 = 56; // elements of the current tile (saved across bulk calls)
    const SAVE: i32 = 64; // CALL_CLOBBERED, saved across bulk calls
    const OPERANDS: i32 = SAVE + 8 * CALL_CLOBBERED.len() as i32;
    /// Per operand `k`: the address of its current row's element 0 ...
    fn row_slot(k: usize) -> i32 {
        OPERANDS + 16 * k as i32
    }
    /// ... and the byte stride from one row to the next.
    fn stride_slot(k: usize) -> i32 {
        OPERANDS + 8 + 16 * k as i32
    }

    // Reductions reuse slots the pointwise loop needs: no row segments, no tiles.
    const TOTAL: i32 = COL; // the current row's f64 total
    const REST: i32 = SEG; // where the current block's last partial vectors start
    const PARTIALS_AT: i32 = REM; // `KernelArgs::partials`

    /// Lanes a row sum accumulates in: the Cranelift kernels' order (`SUM_UNROLL` vectors of
    /// four lanes), kept by every width.
    const SUM_LANES: usize = 4 * super::super::loops::SUM_UNROLL as usize;
    /// Elements a row sum accumulates in f32 lanes before adding into its f64 total.
    const SUM_BLOCK: i32 = super::super::loops::SUM_BLOCK as i32;

    /// Largest tile of a staged kernel, in elements, and the scratch budget over all its slots
    /// (16 KiB: half of L1).
    const MAX_TILE: usize = 512;
    const SCRATCH_ELEMS: usize = 4096;
    /// The stack is grown one page at a time (each page touched), so a large frame never skips
    /// the guard page.
    const PAGE: i32 = 4096;

    /// `roundps`/`rndscaleps` immediates: round to nearest even / down / up, no precision
    /// exception.
    const ROUND_NEAREST: u32 = 0x08;
    const ROUND_DOWN: u32 = 0x09;
    const ROUND_UP: u32 = 0x0A;
    /// `cmpps` predicates: unordered (either operand NaN); the comparisons (quiet, ordered
    /// except `!=`).
    const CMP_UNORD: u32 = 3;
    const CMP_EQ_OQ: u32 = 0x00;
    const CMP_LT_OQ: u32 = 0x11;
    const CMP_LE_OQ: u32 = 0x12;
    const CMP_NEQ_UQ: u32 = 0x04;
    const CMP_GE_OQ: u32 = 0x1D;
    const CMP_GT_OQ: u32 = 0x1E;

    /// Constants an operation needs besides its operands, each held in a fixed register.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Helper {
        Zero,
        One,
        AbsMask,
        SignBit,
        Bits(u32),
    }

    impl Helper {
        fn bits(self) -> u32 {
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
    struct Plan {
        live: Vec<bool>,
        /// Per value: the stage that computes it (loads and fixed values: 0, available in
        /// every stage).
        stage: Vec<usize>,
        /// Per value: the bulk kernel computing it, for outlined operations.
        bulk: Vec<Option<usize>>,
        stages: usize,
        /// Per value: the fixed vector register holding it for the whole kernel (constants,
        /// parameters, inputs broadcast along the inner dim).
        fixed: Vec<Option<u8>>,
        helpers: Vec<(Helper, u8)>,
        /// Per value: its scratch slot, and the stage that writes it (bulk results: written by
        /// their call, which follows stage `stage - 1`).
        slot: Vec<Option<(usize, usize)>>,
        slots: usize,
        /// Per value: the output a bulk call writes it to directly, when storing it there is
        /// its only use (no slot, no store in the body).
        direct_out: Vec<Option<usize>>,
        /// Elements per tile (`usize::MAX`: the whole row segment, when there are no slots).
        tile: usize,
    }

    /// Why a kernel was not assembled after all.
    enum Refusal {
        /// Its values do not fit the vector registers or the scratch budget: Cranelift
        /// compiles it.
        TooLarge,
        Asm(IcedError),
    }

    impl From<IcedError> for Refusal {
        fn from(e: IcedError) -> Self {
            Refusal::Asm(e)
        }
    }

    type Emit<T = ()> = std::result::Result<T, Refusal>;

    fn plan(spec: &KernelSpec, layout: &LoopLayout, vregs: u8, wide: bool) -> Emit<Plan> {
        let n = spec.insts.len();
        let live = liveness(spec);
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
        if stages > 1 && layout.in_place {
            // Stores would have to wait for the last stage; Cranelift's staging does that.
            return Err(Refusal::TooLarge);
        }

        // Fixed registers: constants, parameters, broadcast inputs, then helpers.
        let mut next: u8 = 0;
        let mut fixed = vec![None; n];
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

        // A bulk result only stored to one output is written there by its call.
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
        let direct_out: Vec<Option<usize>> = (0..n)
            .map(|v| {
                (bulk[v].is_some() && uses[v] == 1)
                    .then_some(stored_to[v])
                    .flatten()
            })
            .collect();
        // The values that cross stages or feed a bulk call get scratch slots.
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
        // Without scratch slots (one stage, or bulk calls reading and writing tensors only)
        // a tile is the whole row segment.
        let tile = if slots == 0 {
            usize::MAX
        } else {
            let per = (SCRATCH_ELEMS / slots.max(1)) / 16 * 16;
            if per < 64 {
                return Err(Refusal::TooLarge);
            }
            per.min(MAX_TILE)
        };
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

    fn e(err: Refusal) -> Option<String> {
        match err {
            Refusal::TooLarge => None,
            Refusal::Asm(err) => Some(format!("x86 assembler: {err}")),
        }
    }

    pub(super) fn assemble(
        spec: &KernelSpec,
        layout: &LoopLayout,
        level: Level,
    ) -> Result<Option<WideCode>, String> {
        let wide = level == Level::Avx512;
        let vregs: u8 = if wide { 32 } else { 16 };
        let mut summary = String::new();
        let result = (|| -> Emit<Vec<u8>> {
            let plan = plan(spec, layout, vregs, wide)?;
            let reduce = match &spec.kind {
                LoopKind::Reduce { op, value, .. } => Some((*op, *value)),
                _ => None,
            };
            // A row sum keeps SUM_LANES lanes in `groups` accumulator registers.
            let groups = (SUM_LANES / level.lanes()) as u8;
            summary = match (reduce, plan.tile) {
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
            if reduce.is_some() {
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
            let mut a = CodeAssembler::new(64)?;
            let iota = a.create_label();
            let mut asm = Asm {
                a,
                spec,
                layout,
                wide,
                lanes: level.lanes(),
                mask_reg: first_body.saturating_sub(2),
                scratch_reg: first_body.saturating_sub(1),
                body_regs,
                plan,
                ptr_reg,
                iota,
                frame,
                slots_at,
                tile_bytes,
                reduce,
                accs,
                temps,
                sums_at,
            };
            asm.kernel()?;
            Ok(asm.a.assemble(0)?)
        })();
        let code = match result {
            Ok(code) => code,
            Err(err) => return e(err).map_or(Ok(None), Err),
        };
        let mut map = memmap2::MmapMut::map_anon(code.len()).map_err(|err| err.to_string())?;
        map.copy_from_slice(&code);
        let map = map.make_exec().map_err(|err| err.to_string())?;
        Ok(Some(WideCode {
            map,
            lanes: level.lanes(),
            summary,
            _live: crate::codegen::cpu::compile::LiveCode::new(),
        }))
    }

    fn ymm(i: u8) -> AsmRegisterYmm {
        get_ymm(Register::YMM0 + u32::from(i)).expect("ymm index < 16")
    }
    fn zmm(i: u8) -> AsmRegisterZmm {
        get_zmm(Register::ZMM0 + u32::from(i)).expect("zmm index < 32")
    }
    fn xmm(i: u8) -> AsmRegisterXmm {
        get_xmm(Register::XMM0 + u32::from(i)).expect("xmm index < 16")
    }

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

    impl Asm<'_> {
        fn kernel(&mut self) -> Emit {
            if let Some((op, _)) = self.reduce {
                return self.reduce_kernel(op);
            }
            let nops = self.layout.classes.len();
            let two_dims = self.layout.dims == 2;
            let tiled = self.plan.tile != usize::MAX;
            let mut done = self.a.create_label();
            let mut row = self.a.create_label();
            let mut tile = self.a.create_label();
            let mut next = self.a.create_label();

            self.prologue(done)?;
            let inner_at = 8 * (self.layout.dims as i32 - 1);
            self.a.mov(rax, qword_ptr(r9 + inner_at))?;
            self.a.mov(qword_ptr(rsp + INNER), rax)?;
            self.a.test(rax, rax)?;
            self.a.jle(done)?;
            if two_dims {
                // row = pos / inner, col = pos % inner; each operand's row address and stride.
                self.a.mov(rax, qword_ptr(rsp + POS))?;
                self.a.xor(edx, edx)?;
                self.a.div(qword_ptr(rsp + INNER))?;
                self.a.mov(qword_ptr(rsp + COL), rdx)?;
                self.a.mov(rcx, rax)?;
                self.row_addresses()?;
            } else {
                self.a.mov(rax, qword_ptr(rsp + POS))?;
                self.a.mov(qword_ptr(rsp + COL), rax)?;
                for k in 0..nops {
                    self.a.mov(rax, qword_ptr(r8 + 8 * k as i32))?;
                    self.a.mov(qword_ptr(rsp + row_slot(k)), rax)?;
                }
            }
            self.fixed_values()?;

            // One row segment: [col, min(inner, col + end - pos)).
            self.a.set_label(&mut row)?;
            self.a.mov(r9, qword_ptr(rsp + INNER))?;
            self.a.sub(r9, qword_ptr(rsp + COL))?;
            self.a.mov(rax, qword_ptr(rsp + END))?;
            self.a.sub(rax, qword_ptr(rsp + POS))?;
            self.a.cmp(rax, r9)?;
            self.a.cmovb(r9, rax)?;
            self.a.mov(qword_ptr(rsp + SEG), r9)?;
            self.a.mov(qword_ptr(rsp + REM), r9)?;
            self.a.mov(rdx, qword_ptr(rsp + COL))?;
            self.a.shl(rdx, 2)?;
            for k in 0..nops {
                if let Some(p) = self.ptr_reg[k] {
                    self.a.mov(p, qword_ptr(rsp + row_slot(k)))?;
                    self.a.add(p, rdx)?;
                }
            }
            self.row_broadcasts()?;

            // Tiles of the segment (or the segment as one): r9 elements from the pointers.
            self.a.set_label(&mut tile)?;
            self.a.mov(r9, qword_ptr(rsp + REM))?;
            if tiled {
                self.a.mov(rax, self.plan.tile as u64)?;
                self.a.cmp(r9, rax)?;
                self.a.cmova(r9, rax)?;
            }
            for s in 0..self.plan.stages {
                self.stage_loop(s)?;
                if s + 1 < self.plan.stages {
                    self.bulk_calls(s)?;
                }
            }
            if tiled {
                for k in 0..nops {
                    if let Some(p) = self.ptr_reg[k] {
                        self.a.lea(p, qword_ptr(p + r9 * 4))?;
                    }
                }
                self.a.sub(qword_ptr(rsp + REM), r9)?;
                self.a.jnz(tile)?;
            }

            // Next row.
            self.a.set_label(&mut next)?;
            self.a.mov(rax, qword_ptr(rsp + POS))?;
            self.a.add(rax, qword_ptr(rsp + SEG))?;
            self.a.mov(qword_ptr(rsp + POS), rax)?;
            self.a.cmp(rax, qword_ptr(rsp + END))?;
            self.a.jge(done)?;
            self.a.mov(qword_ptr(rsp + COL), 0)?;
            if two_dims {
                self.next_row_addresses()?;
            }
            self.a.jmp(row)?;

            self.epilogue(&mut done)
        }

        /// Saves the callee-saved registers, grows the stack a page at a time, copies `params`,
        /// `start` and `end` to the frame (jumping to `done` when the range is empty), and
        /// leaves the argument pointer in `r10`, `ptrs` in `r8`, `shape` in `r9` and `strides`
        /// in `r11`.
        fn prologue(&mut self, done: CodeLabel) -> Emit {
            for r in SAVED {
                self.a.push(r)?;
            }
            let mut left = self.frame;
            while left > PAGE {
                self.a.sub(rsp, PAGE)?;
                self.a.mov(qword_ptr(rsp), 0)?;
                left -= PAGE;
            }
            self.a.sub(rsp, left)?;
            // Arguments: rdi.
            self.a.mov(r10, rdi)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::PARAMS))?;
            self.a.mov(qword_ptr(rsp + PARAMS), rax)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::START))?;
            self.a.mov(qword_ptr(rsp + POS), rax)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::END))?;
            self.a.mov(qword_ptr(rsp + END), rax)?;
            self.a.cmp(rax, qword_ptr(rsp + POS))?;
            self.a.jle(done)?;
            self.a.mov(r8, qword_ptr(r10 + offsets::PTRS))?;
            self.a.mov(r9, qword_ptr(r10 + offsets::SHAPE))?;
            self.a.mov(r11, qword_ptr(r10 + offsets::STRIDES))?;
            Ok(())
        }

        /// Two loop dims: each operand's row stride in bytes and the address of row `rcx`'s
        /// element 0, from `ptrs` in `r8` and `strides` in `r11` (as the prologue leaves them).
        fn row_addresses(&mut self) -> Emit {
            for k in 0..self.layout.classes.len() {
                self.a.mov(rax, qword_ptr(r11 + 16 * k as i32))?;
                self.a.shl(rax, 2)?;
                self.a.mov(qword_ptr(rsp + stride_slot(k)), rax)?;
                self.a.imul_2(rax, rcx)?;
                self.a.add(rax, qword_ptr(r8 + 8 * k as i32))?;
                self.a.mov(qword_ptr(rsp + row_slot(k)), rax)?;
            }
            Ok(())
        }

        /// Steps every operand's row address to the next row.
        fn next_row_addresses(&mut self) -> Emit {
            for k in 0..self.layout.classes.len() {
                self.a.mov(rax, qword_ptr(rsp + stride_slot(k)))?;
                self.a.add(qword_ptr(rsp + row_slot(k)), rax)?;
            }
            Ok(())
        }

        /// Places `done`: restores the frame and returns; then the constant data.
        fn epilogue(&mut self, done: &mut CodeLabel) -> Emit {
            self.a.set_label(done)?;
            self.a.vzeroupper()?;
            self.a.add(rsp, self.frame)?;
            for r in SAVED.iter().rev() {
                self.a.pop(*r)?;
            }
            self.a.ret()?;

            if !self.wide {
                let iota: Vec<u8> = (0u32..8).flat_map(|j| j.to_le_bytes()).collect();
                self.a.set_label(&mut self.iota)?;
                self.a.db(&iota)?;
            }
            Ok(())
        }

        /// The tail's lane mask for `rcx` remaining elements (any count: at least a vector's
        /// worth enables every lane): `k1` on AVX-512, the mask register on AVX2.
        fn tail_mask(&mut self) -> Emit {
            if self.wide {
                // `rcx` < 32 where this runs (`shl` counts modulo 32); `kmovw` keeps 16 bits.
                self.a.mov(eax, 1)?;
                self.a.shl(eax, cl)?;
                self.a.sub(eax, 1)?;
                self.a.kmovw(k1, eax)?;
            } else {
                let m = self.mask_reg;
                self.a.vmovd(xmm(m), ecx)?;
                self.a.vpbroadcastd(ymm(m), xmm(m))?;
                self.a.vpcmpgtd(ymm(m), ymm(m), ymmword_ptr(self.iota))?;
            }
            Ok(())
        }

        /// A sum or mean of each row in `[start, end)` (loop dims `[kept, reduced]`), in the
        /// order of the Cranelift kernel: per block of `SUM_BLOCK` elements, `SUM_LANES`
        /// lanes (the accumulator registers side by side) add groups of `SUM_LANES` elements;
        /// the block's last partial vectors are computed masked into memory, their groups of
        /// four added to lanes 0..4, the rest one by one into a scalar; the lane groups of four
        /// are then added in order, their four lanes in order, the scalar last, and the block's
        /// f32 sum is added to the row's f64 total. The total goes to `partials[row]` when
        /// `partials` is set, else (divided by the row length for a mean) to the output.
        fn reduce_kernel(&mut self, op: ReduceOp) -> Emit {
            let nops = self.layout.classes.len();
            let out = self.spec.inputs.len();
            let lanes = self.lanes as i32;
            let accs = self.accs.clone();
            let [t0, t1, t2, t3] = self.temps;
            let sums = self.sums_at;
            let rest_at = sums + 4 * SUM_LANES as i32;
            let [
                mut done,
                mut row,
                mut block,
                mut main,
                mut rest,
                mut combine,
                mut chunks,
                mut scalars,
                mut scalar,
                mut groups,
                mut finish,
                mut finalize,
                mut next,
            ]: [CodeLabel; 13] = std::array::from_fn(|_| self.a.create_label());

            self.prologue(done)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::PARTIALS))?;
            self.a.mov(qword_ptr(rsp + PARTIALS_AT), rax)?;
            self.a.mov(rax, qword_ptr(r9 + 8))?;
            self.a.mov(qword_ptr(rsp + INNER), rax)?;
            self.a.mov(rcx, qword_ptr(rsp + POS))?;
            self.row_addresses()?;
            self.fixed_values()?;

            // One row: r11 walks its r9 elements.
            self.a.set_label(&mut row)?;
            for k in 0..nops {
                if let Some(p) = self.ptr_reg[k] {
                    self.a.mov(p, qword_ptr(rsp + row_slot(k)))?;
                }
            }
            self.row_broadcasts()?;
            self.a.mov(qword_ptr(rsp + TOTAL), 0)?;
            self.a.xor(r11d, r11d)?;
            self.a.mov(r9, qword_ptr(rsp + INNER))?;

            // One block: [r11, r10 = min(r11 + SUM_BLOCK, r9)); full groups up to rcx.
            self.a.set_label(&mut block)?;
            self.a.cmp(r11, r9)?;
            self.a.jae(finish)?;
            self.a.lea(r10, qword_ptr(r11 + SUM_BLOCK))?;
            self.a.cmp(r10, r9)?;
            self.a.cmova(r10, r9)?;
            for &acc in &accs {
                vop!(self, vxorps, acc, acc, acc)?;
            }
            self.a.mov(rcx, r10)?;
            self.a.and(rcx, -(SUM_LANES as i32))?;
            self.a.cmp(r11, rcx)?;
            self.a.jae(rest)?;
            self.a.set_label(&mut main)?;
            for &acc in &accs {
                let v = self.body(0, Lanes::Full)?.expect("the reduced value");
                vop!(self, vaddps, acc, acc, v)?;
                self.a.add(r11, lanes)?;
            }
            self.a.cmp(r11, rcx)?;
            self.a.jb(main)?;

            // The block's last r10 - r11 < SUM_LANES elements, computed into memory.
            self.a.set_label(&mut rest)?;
            self.a.mov(qword_ptr(rsp + REST), r11)?;
            for u in 0..accs.len() as i32 {
                self.a.cmp(r11, r10)?;
                self.a.jae(combine)?;
                self.a.mov(rcx, r10)?;
                self.a.sub(rcx, r11)?;
                self.tail_mask()?;
                let v = self.body(0, Lanes::Tail)?.expect("the reduced value");
                self.store(rsp + (rest_at + 4 * lanes * u), v, Lanes::Full)?;
                self.a.add(r11, lanes)?;
            }

            // Combine: lane groups of four in xmm registers.
            self.a.set_label(&mut combine)?;
            for (u, &acc) in accs.iter().enumerate() {
                self.store(rsp + (sums + 4 * lanes * u as i32), acc, Lanes::Full)?;
            }
            self.a.mov(rax, r10)?;
            self.a.sub(rax, qword_ptr(rsp + REST))?;
            self.a.mov(r11, r10)?;
            self.a.vmovups(xmm(t0), xmmword_ptr(rsp + sums))?;
            // Groups of four of the rest into lanes 0..4 (rdx: elements of the rest used).
            self.a.xor(edx, edx)?;
            self.a.set_label(&mut chunks)?;
            self.a.lea(rcx, qword_ptr(rdx + 4))?;
            self.a.cmp(rcx, rax)?;
            self.a.ja(scalars)?;
            self.a
                .vaddps(xmm(t0), xmm(t0), xmmword_ptr(rsp + rdx * 4 + rest_at))?;
            self.a.mov(rdx, rcx)?;
            self.a.jmp(chunks)?;
            // The rest's last elements into a scalar.
            self.a.set_label(&mut scalars)?;
            self.a.vxorps(xmm(t1), xmm(t1), xmm(t1))?;
            self.a.set_label(&mut scalar)?;
            self.a.cmp(rdx, rax)?;
            self.a.jae(groups)?;
            self.a
                .vaddss(xmm(t1), xmm(t1), dword_ptr(rsp + rdx * 4 + rest_at))?;
            self.a.inc(rdx)?;
            self.a.jmp(scalar)?;
            self.a.set_label(&mut groups)?;
            for g in 1..SUM_LANES as i32 / 4 {
                self.a
                    .vaddps(xmm(t0), xmm(t0), xmmword_ptr(rsp + (sums + 16 * g)))?;
            }
            // Lanes 0, 1, 2, 3 in order, then the scalar; into the f64 total.
            self.a.vmovshdup(xmm(t2), xmm(t0))?;
            self.a.vaddss(xmm(t3), xmm(t0), xmm(t2))?;
            self.a.vpermilps(xmm(t2), xmm(t0), 2)?;
            self.a.vaddss(xmm(t3), xmm(t3), xmm(t2))?;
            self.a.vpermilps(xmm(t2), xmm(t0), 3)?;
            self.a.vaddss(xmm(t3), xmm(t3), xmm(t2))?;
            self.a.vaddss(xmm(t3), xmm(t3), xmm(t1))?;
            self.a.vcvtss2sd(xmm(t3), xmm(t3), xmm(t3))?;
            self.a.vmovsd(xmm(t2), qword_ptr(rsp + TOTAL))?;
            self.a.vaddsd(xmm(t2), xmm(t2), xmm(t3))?;
            self.a.vmovsd(qword_ptr(rsp + TOTAL), xmm(t2))?;
            self.a.jmp(block)?;

            // The row's result: raw to `partials[row]`, or finalized to the output.
            self.a.set_label(&mut finish)?;
            self.a.vmovsd(xmm(t0), qword_ptr(rsp + TOTAL))?;
            self.a.mov(rax, qword_ptr(rsp + PARTIALS_AT))?;
            self.a.test(rax, rax)?;
            self.a.jz(finalize)?;
            self.a.mov(rcx, qword_ptr(rsp + POS))?;
            self.a.vmovsd(qword_ptr(rax + rcx * 8), xmm(t0))?;
            self.a.jmp(next)?;
            self.a.set_label(&mut finalize)?;
            if op == ReduceOp::Mean {
                // Eager: total * (1 / n) in f64 (a mean over nothing is 0 * inf = NaN).
                self.a.vcvtsi2sd(xmm(t1), xmm(t1), qword_ptr(rsp + INNER))?;
                self.a.mov(rax, 1.0f64.to_bits())?;
                self.a.vmovq(xmm(t2), rax)?;
                self.a.vdivsd(xmm(t2), xmm(t2), xmm(t1))?;
                self.a.vmulsd(xmm(t0), xmm(t0), xmm(t2))?;
            }
            self.a.vcvtsd2ss(xmm(t0), xmm(t0), xmm(t0))?;
            self.a.mov(rax, qword_ptr(rsp + row_slot(out)))?;
            self.a.vmovss(dword_ptr(rax), xmm(t0))?;

            // Next row.
            self.a.set_label(&mut next)?;
            self.a.mov(rax, qword_ptr(rsp + POS))?;
            self.a.inc(rax)?;
            self.a.mov(qword_ptr(rsp + POS), rax)?;
            self.a.cmp(rax, qword_ptr(rsp + END))?;
            self.a.jge(done)?;
            self.next_row_addresses()?;
            self.a.jmp(row)?;

            self.epilogue(&mut done)
        }

        /// Stage `s` over the tile's `r9` elements: full vectors, then a masked tail.
        fn stage_loop(&mut self, s: usize) -> Emit {
            let mut main = self.a.create_label();
            let mut tail = self.a.create_label();
            let mut end = self.a.create_label();
            self.a.xor(r11d, r11d)?;
            self.a.mov(r10, r9)?;
            self.a.and(r10, -(self.lanes as i32))?;
            self.a.jz(tail)?;
            self.a.set_label(&mut main)?;
            self.body(s, Lanes::Full)?;
            if s + 1 == self.plan.stages && self.plan.tile != usize::MAX {
                // Staged kernels touch tensor memory in bursts (a tile's stages, then bulk
                // calls that touch none), which the hardware prefetcher does not keep ahead
                // of at DRAM sizes: the last stage fetches the next tile's operands (outputs
                // too, so their lines are owned before the stores). Not stage 0: with nothing
                // to compute there (`a * sigmoid(a)`) the prefetches would come in one burst.
                let ahead = 4 * self.plan.tile as i32;
                // An AVX2 vector is half a cache line: prefetch on every other one.
                let mut skip = (!self.wide).then(|| self.a.create_label());
                if let Some(skip) = skip {
                    self.a.test(r11d, 8)?;
                    self.a.jnz(skip)?;
                }
                for k in 0..self.layout.classes.len() {
                    if let Some(p) = self.ptr_reg[k] {
                        self.a.prefetcht0(byte_ptr(p + r11 * 4 + ahead))?;
                    }
                }
                if let Some(skip) = skip.as_mut() {
                    self.a.set_label(skip)?;
                }
            }
            self.a.add(r11, self.lanes as i32)?;
            self.a.cmp(r11, r10)?;
            self.a.jb(main)?;
            self.a.set_label(&mut tail)?;
            self.a.cmp(r11, r9)?;
            self.a.jae(end)?;
            self.a.mov(rcx, r9)?;
            self.a.sub(rcx, r11)?;
            self.tail_mask()?;
            self.body(s, Lanes::Tail)?;
            self.a.set_label(&mut end)?;
            // (A label of its own: the next instruction may carry another.)
            self.a.zero_bytes()?;
            Ok(())
        }

        /// The bulk kernels called after stage `s`, over the tile; then the vector registers
        /// (all caller-saved) are set again.
        fn bulk_calls(&mut self, s: usize) -> Emit {
            self.a.mov(qword_ptr(rsp + TILE_LEN), r9)?;
            for (j, r) in CALL_CLOBBERED.iter().enumerate() {
                self.a.mov(qword_ptr(rsp + SAVE + 8 * j as i32), *r)?;
            }
            for v in 0..self.spec.insts.len() {
                let (Some(addr), true) = (self.plan.bulk[v], self.plan.stage[v] == s + 1) else {
                    continue;
                };
                let Inst::Op { args, .. } = &self.spec.insts[v] else {
                    continue;
                };
                let arg_regs = [rdi, rsi, rdx, rcx];
                let mut regs = arg_regs.iter();
                for &x in args {
                    let r = *regs
                        .next()
                        .expect("bulk kernels take at most two arguments");
                    self.address_of(r, x)?;
                }
                let out = *regs.next().expect("a result register");
                self.address_of(out, v)?;
                let n = *regs.next().expect("a length register");
                self.a.mov(n, qword_ptr(rsp + TILE_LEN))?;
                self.a.mov(rax, addr as u64)?;
                // Clean upper state for the callee (whatever code it runs).
                self.a.vzeroupper()?;
                self.a.call(rax)?;
            }
            for (j, r) in CALL_CLOBBERED.iter().enumerate() {
                self.a.mov(*r, qword_ptr(rsp + SAVE + 8 * j as i32))?;
            }
            self.a.mov(r9, qword_ptr(rsp + TILE_LEN))?;
            self.fixed_values()?;
            self.row_broadcasts()
        }

        /// `r` = where value `v` is in memory for a bulk call: its slot, or its tensor (a
        /// unit-stride input, read from the tile's start).
        fn address_of(&mut self, r: AsmRegister64, v: ValueId) -> Emit {
            match self.plan.slot[v] {
                Some((k, _)) => {
                    let at = self.slots_at + self.tile_bytes * k as i32;
                    self.a.lea(r, qword_ptr(rsp + at))?;
                }
                None => {
                    let operand = match (&self.spec.insts[v], self.plan.direct_out[v]) {
                        (_, Some(output)) => self.spec.inputs.len() + output,
                        (Inst::Load { input }, None) => *input,
                        _ => unreachable!("values without a slot are loads or direct results"),
                    };
                    let p = self.ptr_reg[operand].expect("a unit-stride operand");
                    let saved = CALL_CLOBBERED.iter().position(|&c| c == p);
                    match saved {
                        Some(j) => self.a.mov(r, qword_ptr(rsp + SAVE + 8 * j as i32))?,
                        None => self.a.mov(r, p)?,
                    }
                }
            }
            Ok(())
        }

        /// Broadcasts the f32 at `mem` to every lane of register `r`.
        fn broadcast_mem(&mut self, r: u8, mem: AsmMemoryOperand) -> Emit {
            let mem = dword_ptr(mem);
            if self.wide {
                self.a.vbroadcastss(zmm(r), mem)?;
            } else {
                self.a.vbroadcastss(ymm(r), mem)?;
            }
            Ok(())
        }

        /// Broadcasts the f32 with `bits` to every lane of register `r`.
        fn broadcast_bits(&mut self, r: u8, bits: u32) -> Emit {
            self.a.mov(eax, bits)?;
            if self.wide {
                self.a.vpbroadcastd(zmm(r), eax)?;
            } else {
                self.a.vmovd(xmm(r), eax)?;
                self.a.vbroadcastss(ymm(r), xmm(r))?;
            }
            Ok(())
        }

        /// Sets the registers holding constants, parameters and helpers (at the start, and
        /// again after bulk calls, which clobber every vector register).
        fn fixed_values(&mut self) -> Emit {
            self.a.mov(rdx, qword_ptr(rsp + PARAMS))?;
            for i in 0..self.spec.insts.len() {
                let Some(r) = self.plan.fixed[i] else {
                    continue;
                };
                match &self.spec.insts[i] {
                    Inst::Const {
                        value: Lit::Float(v),
                        ..
                    } => self.broadcast_bits(r, (*v as f32).to_bits())?,
                    Inst::Const {
                        value: Lit::Bool(b),
                        ..
                    } => self.broadcast_bits(r, if *b { u32::MAX } else { 0 })?,
                    Inst::Param { index, .. } => {
                        self.broadcast_mem(r, qword_ptr(rdx + 8 * *index as i32))?
                    }
                    _ => {}
                }
            }
            for (h, r) in self.plan.helpers.clone() {
                self.broadcast_bits(r, h.bits())?;
            }
            Ok(())
        }

        /// Sets the registers of inputs broadcast along the inner dim: this row's value.
        fn row_broadcasts(&mut self) -> Emit {
            for i in 0..self.spec.insts.len() {
                if let (Inst::Load { input }, Some(r)) = (&self.spec.insts[i], self.plan.fixed[i]) {
                    self.a.mov(rax, qword_ptr(rsp + row_slot(*input)))?;
                    self.broadcast_mem(r, qword_ptr(rax))?;
                }
            }
            Ok(())
        }

        fn helper(&self, h: Helper) -> u8 {
            self.plan
                .helpers
                .iter()
                .find(|&&(g, _)| g == h)
                .map(|&(_, r)| r)
                .expect("helper registered by helpers_of")
        }

        /// The memory of value `v`'s scratch slot at element `r11` of the tile.
        fn slot_mem(&self, v: ValueId) -> AsmMemoryOperand {
            let (k, _) = self.plan.slot[v].expect("a slot");
            rsp + r11 * 4 + (self.slots_at + self.tile_bytes * k as i32)
        }

        /// One vector of stage `s` at element `r11` of the tile: the loads, reloads and
        /// operations the stage needs, its stores and its spills to scratch slots. A
        /// reduction's body answers the register holding the reduced value.
        fn body(&mut self, s: usize, lanes: Lanes) -> Emit<Option<u8>> {
            let spec = self.spec;
            let n = spec.insts.len();
            let p = &self.plan;
            // What this stage computes and spills, and each value's last read in it.
            let spills: Vec<bool> = (0..n)
                .map(|v| matches!(p.slot[v], Some((_, w)) if w == s) && p.bulk[v].is_none())
                .collect();
            let computes: Vec<bool> = (0..n)
                .map(|v| {
                    p.live[v]
                        && p.stage[v] == s
                        && p.bulk[v].is_none()
                        && matches!(spec.insts[v], Inst::Op { .. })
                })
                .collect();
            let mut last = vec![None::<usize>; n];
            for i in 0..n {
                if spills[i] {
                    last[i] = Some(i);
                }
                match &spec.insts[i] {
                    Inst::Op { args, .. } if computes[i] => {
                        args.iter().for_each(|&a| last[a] = Some(i));
                    }
                    Inst::Store { value, .. }
                        if p.stage[*value] == s && p.direct_out[*value].is_none() =>
                    {
                        last[*value] = Some(i)
                    }
                    _ => {}
                }
            }
            // The reduced value is read after the body (never released within it).
            let result = self.reduce.map(|(_, v)| v);
            if let Some(v) = result {
                last[v] = Some(n);
            }
            let pinned: Vec<bool> = p.fixed.iter().map(Option::is_some).collect();
            let mut free = self.body_regs.clone();
            let mut reg: Vec<Option<u8>> = p.fixed.clone();
            // Frees `v`'s register after its last read in this stage (`at`).
            let release = |v: usize, at: usize, reg: &mut Vec<Option<u8>>, free: &mut Vec<u8>| {
                if last[v] == Some(at)
                    && !pinned[v]
                    && let Some(r) = reg[v].take()
                {
                    free.push(r);
                }
            };
            // An in-place kernel (one stage) loads every input of a vector before it stores.
            let is_load = |i: &usize| matches!(spec.insts[*i], Inst::Load { .. });
            let order: Vec<usize> = if self.layout.in_place {
                (0..n)
                    .filter(is_load)
                    .chain((0..n).filter(|i| !is_load(i)))
                    .collect()
            } else {
                (0..n).collect()
            };
            for i in order {
                if !self.plan.live[i] {
                    continue;
                }
                match &spec.insts[i] {
                    Inst::Load { input } if reg[i].is_none() && last[i].is_some() => {
                        let d = free.pop().ok_or(Refusal::TooLarge)?;
                        let ptr = self.ptr_reg[*input].expect("unit-stride input");
                        self.load(d, ptr + r11 * 4, lanes)?;
                        reg[i] = Some(d);
                    }
                    Inst::Op { op, args, .. } if computes[i] => {
                        let d = free.pop().ok_or(Refusal::TooLarge)?;
                        let x: Vec<u8> = args.iter().map(|&v| reg[v].expect("defined")).collect();
                        self.op(op, d, &x)?;
                        reg[i] = Some(d);
                        for &v in args {
                            release(v, i, &mut reg, &mut free);
                        }
                    }
                    Inst::Op { .. } if last[i].is_some() && reg[i].is_none() => {
                        // Computed by an earlier stage or a bulk call: reload from its slot.
                        let d = free.pop().ok_or(Refusal::TooLarge)?;
                        let mem = self.slot_mem(i);
                        self.load(d, mem, lanes)?;
                        reg[i] = Some(d);
                    }
                    Inst::Store { output, value }
                        if self.plan.stage[*value] == s
                            && self.plan.direct_out[*value].is_none() =>
                    {
                        let k = spec.inputs.len() + output;
                        let ptr = self.ptr_reg[k].expect("outputs are unit-stride");
                        let v = reg[*value].expect("defined");
                        self.store(ptr + r11 * 4, v, lanes)?;
                        release(*value, i, &mut reg, &mut free);
                    }
                    _ => {}
                }
                if spills[i] {
                    let v = reg[i].expect("materialized before its spill");
                    let mem = self.slot_mem(i);
                    self.store(mem, v, lanes)?;
                    release(i, i, &mut reg, &mut free);
                }
            }
            Ok(result.and_then(|v| reg[v]))
        }

        fn load(&mut self, d: u8, mem: AsmMemoryOperand, lanes: Lanes) -> Emit {
            match (self.wide, lanes) {
                (true, Lanes::Full) => self.a.vmovups(zmm(d), zmmword_ptr(mem))?,
                (true, Lanes::Tail) => self.a.vmovups(zmm(d).k1().z(), zmmword_ptr(mem))?,
                (false, Lanes::Full) => self.a.vmovups(ymm(d), ymmword_ptr(mem))?,
                (false, Lanes::Tail) => {
                    self.a
                        .vmaskmovps(ymm(d), ymm(self.mask_reg), ymmword_ptr(mem))?
                }
            }
            Ok(())
        }

        fn store(&mut self, mem: AsmMemoryOperand, v: u8, lanes: Lanes) -> Emit {
            match (self.wide, lanes) {
                (true, Lanes::Full) => self.a.vmovups(zmmword_ptr(mem), zmm(v))?,
                (true, Lanes::Tail) => self.a.vmovups(zmmword_ptr(mem).k1(), zmm(v))?,
                (false, Lanes::Full) => self.a.vmovups(ymmword_ptr(mem), ymm(v))?,
                (false, Lanes::Tail) => {
                    self.a
                        .vmaskmovps(ymmword_ptr(mem), ymm(self.mask_reg), ymm(v))?
                }
            }
            Ok(())
        }

        /// `d = op(x..)`. `d` differs from every operand register (it is allocated before they
        /// are freed), so multi-instruction sequences may write it early.
        fn op(&mut self, op: &ScalarOp, d: u8, x: &[u8]) -> Emit {
            use ScalarOp::*;
            match op {
                Add => vop!(self, vaddps, d, x[0], x[1])?,
                Sub => vop!(self, vsubps, d, x[0], x[1])?,
                Mul => vop!(self, vmulps, d, x[0], x[1])?,
                Div => vop!(self, vdivps, d, x[0], x[1])?,
                Square => vop!(self, vmulps, d, x[0], x[0])?,
                Sqrt => vop!(self, vsqrtps, d, x[0])?,
                Rsqrt => {
                    vop!(self, vsqrtps, d, x[0])?;
                    let one = self.helper(Helper::One);
                    vop!(self, vdivps, d, one, d)?
                }
                Reciprocal => {
                    let one = self.helper(Helper::One);
                    vop!(self, vdivps, d, one, x[0])?
                }
                Neg => {
                    let m = self.helper(Helper::SignBit);
                    vop!(self, vxorps, d, x[0], m)?
                }
                Abs => {
                    let m = self.helper(Helper::AbsMask);
                    vop!(self, vandps, d, x[0], m)?
                }
                // `maxps(0, x)` is `0 > x ? 0 : x`: +0 below zero, x itself at -0 and NaN.
                Relu => {
                    let z = self.helper(Helper::Zero);
                    vop!(self, vmaxps, d, z, x[0])?
                }
                // Eager: `a` if `a > b` (`a < b`) or `a` is NaN, else `b`. `maxps(a, b)` is
                // `a > b ? a : b`; lanes where `a` is NaN then take `a`.
                Maximum | Minimum => {
                    if *op == Maximum {
                        vop!(self, vmaxps, d, x[0], x[1])?;
                    } else {
                        vop!(self, vminps, d, x[0], x[1])?;
                    }
                    self.take_where_nan(d, x[0])?
                }
                // `v < lo ? lo : v` is `maxps(lo, v)`, `v > hi ? hi : v` is `minps(hi, v)`; a
                // NaN bound is the result (eager's rule).
                Clamp { min, max } => {
                    let mut v = x[0];
                    let narrow = |b: f64| Helper::Bits((b as f32).to_bits());
                    if let Some(lo) = min {
                        let l = self.helper(narrow(*lo));
                        if lo.is_nan() {
                            vop!(self, vmovaps, d, l)?;
                        } else {
                            vop!(self, vmaxps, d, l, v)?;
                        }
                        v = d;
                    }
                    if let Some(hi) = max {
                        let h = self.helper(narrow(*hi));
                        if hi.is_nan() {
                            vop!(self, vmovaps, d, h)?;
                        } else {
                            vop!(self, vminps, d, h, v)?;
                        }
                        v = d;
                    }
                    if v != d {
                        vop!(self, vmovaps, d, v)?;
                    }
                }
                // Bools are lane masks: all ones for true. The predicates are Cranelift's
                // `FloatCC` ones: ordered, except `!=` (true when either side is NaN).
                Eq => self.compare(d, x[0], x[1], CMP_EQ_OQ)?,
                Ne => self.compare(d, x[0], x[1], CMP_NEQ_UQ)?,
                Lt => self.compare(d, x[0], x[1], CMP_LT_OQ)?,
                Le => self.compare(d, x[0], x[1], CMP_LE_OQ)?,
                Gt => self.compare(d, x[0], x[1], CMP_GT_OQ)?,
                Ge => self.compare(d, x[0], x[1], CMP_GE_OQ)?,
                LogicalNot => {
                    let ones = self.helper(Helper::Bits(u32::MAX));
                    vop!(self, vxorps, d, x[0], ones)?
                }
                LogicalAnd => vop!(self, vandps, d, x[0], x[1])?,
                LogicalOr => vop!(self, vorps, d, x[0], x[1])?,
                LogicalXor => vop!(self, vxorps, d, x[0], x[1])?,
                // where(c, a, b): a in the lanes where c is set.
                Where => {
                    if self.wide {
                        self.a.vpmovd2m(k2, zmm(x[0]))?;
                        self.a.vblendmps(zmm(d).k2(), zmm(x[2]), zmm(x[1]))?;
                    } else {
                        self.a.vblendvps(ymm(d), ymm(x[2]), ymm(x[1]), ymm(x[0]))?;
                    }
                }
                Floor => self.round(d, x[0], ROUND_DOWN)?,
                Ceil => self.round(d, x[0], ROUND_UP)?,
                Round => self.round(d, x[0], ROUND_NEAREST)?,
                other => unreachable!("{other:?} is neither inline nor outlined"),
            }
            Ok(())
        }

        /// `d` = the lane mask of `a <pred> b`.
        fn compare(&mut self, d: u8, a: u8, b: u8, pred: u32) -> Result<(), IcedError> {
            if self.wide {
                self.a.vcmpps(k2, zmm(a), zmm(b), pred)?;
                self.a.vpmovm2d(zmm(d), k2)
            } else {
                self.a.vcmpps(ymm(d), ymm(a), ymm(b), pred)
            }
        }

        /// Lanes of `d` where `a` is NaN become `a`.
        fn take_where_nan(&mut self, d: u8, a: u8) -> Result<(), IcedError> {
            if self.wide {
                self.a.vcmpps(k2, zmm(a), zmm(a), CMP_UNORD)?;
                self.a.vmovaps(zmm(d).k2(), zmm(a))
            } else {
                let t = self.scratch_reg;
                self.a.vcmpps(ymm(t), ymm(a), ymm(a), CMP_UNORD)?;
                self.a.vblendvps(ymm(d), ymm(d), ymm(a), ymm(t))
            }
        }

        fn round(&mut self, d: u8, x: u8, imm: u32) -> Result<(), IcedError> {
            if self.wide {
                self.a.vrndscaleps(zmm(d), zmm(x), imm)
            } else {
                self.a.vroundps(ymm(d), ymm(x), imm)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every lowerable operation, every supported layout, rows of every tail length and calls
    //! over arbitrary `[start, end)`: the assembled kernel writes the same bits as Cranelift's
    //! inline kernel, and nothing outside its range.

    use super::*;
    use crate::codegen::cpu::{CodegenOptions, KernelArgs, compile_with};
    use crate::codegen::kernel::ValueId;

    fn op(op: ScalarOp, args: Vec<ValueId>) -> Inst {
        Inst::Op {
            op,
            args,
            compute: DType::F32,
            out: DType::F32,
        }
    }

    fn store(output: usize, value: ValueId) -> Inst {
        Inst::Store { output, value }
    }

    fn konst(v: f64) -> Inst {
        Inst::Const {
            value: Lit::Float(v),
            dtype: DType::F32,
        }
    }

    fn spec(nin: usize, nout: usize, insts: Vec<Inst>) -> KernelSpec {
        KernelSpec {
            rank: 2,
            inputs: vec![DType::F32; nin],
            outputs: vec![DType::F32; nout],
            insts,
            kind: LoopKind::Pointwise,
        }
    }

    /// `out = f(x)` and `out = f(x, y)` for every lowerable op, plus chains with constants,
    /// parameters, two outputs and stores of fixed values.
    fn programs() -> Vec<KernelSpec> {
        use ScalarOp::*;
        let mut v = Vec::new();
        let unary = [
            Sqrt,
            Rsqrt,
            Reciprocal,
            Square,
            Neg,
            Abs,
            Relu,
            Floor,
            Ceil,
            Round,
            Clamp {
                min: Some(-0.5),
                max: None,
            },
            Clamp {
                min: None,
                max: Some(0.25),
            },
            Clamp {
                min: Some(-1.0),
                max: Some(1.0),
            },
            Clamp {
                min: Some(f64::NAN),
                max: Some(2.0),
            },
            Clamp {
                min: Some(0.1),
                max: Some(f64::NAN),
            },
        ];
        let unary_store = |u: ScalarOp| {
            spec(
                1,
                1,
                vec![Inst::Load { input: 0 }, op(u, vec![0]), store(0, 1)],
            )
        };
        v.extend(unary.into_iter().map(unary_store));
        for b in [Add, Sub, Mul, Div, Maximum, Minimum] {
            v.push(spec(
                2,
                1,
                vec![
                    Inst::Load { input: 0 },
                    Inst::Load { input: 1 },
                    op(b, vec![0, 1]),
                    store(0, 2),
                ],
            ));
        }
        // W6: sqrt(abs((((x*1.1+0.3)*x-0.7)/(x*x+1))+x)), with 0.3 a parameter.
        v.push(spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                konst(1.1),
                op(Mul, vec![0, 1]),
                Inst::Param {
                    index: 0,
                    dtype: DType::F32,
                },
                op(Add, vec![2, 3]),
                op(Mul, vec![4, 0]),
                konst(0.7),
                op(Sub, vec![5, 6]),
                op(Mul, vec![0, 0]),
                konst(1.0),
                op(Add, vec![8, 9]),
                op(Div, vec![7, 10]),
                op(Add, vec![11, 0]),
                op(Abs, vec![12]),
                op(Sqrt, vec![13]),
                store(0, 14),
            ],
        ));
        // Staged: one outlined op reading a tensor directly (W1), one feeding an inline op
        // (W2), two in one stage, a later stage reloading inputs and spilled values, `pow`
        // with a constant exponent (a slot written from a fixed register), and outlined ops
        // nested (a bulk result feeding a bulk call), each with an output per stage.
        v.push(unary_store(GeluTanh));
        v.push(unary_store(Exp));
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                op(Silu, vec![0]),
                Inst::Load { input: 1 },
                op(Mul, vec![1, 2]),
                store(0, 3),
            ],
        ));
        v.push(spec(
            2,
            2,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                op(Mul, vec![0, 1]),
                konst(0.5),
                op(Add, vec![2, 3]),
                op(Tanh, vec![4]),
                op(Neg, vec![0]),
                op(Exp, vec![6]),
                op(Mul, vec![7, 1]),
                op(Add, vec![5, 8]),
                op(Sub, vec![9, 4]),
                store(0, 10),
                store(1, 4),
            ],
        ));
        v.push(spec(
            2,
            2,
            vec![
                Inst::Load { input: 0 },
                konst(2.5),
                op(Pow, vec![0, 1]),
                op(Exp, vec![0]),
                Inst::Load { input: 1 },
                op(Pow, vec![3, 4]),
                op(Sigmoid, vec![5]),
                op(Add, vec![6, 2]),
                store(0, 7),
                store(1, 3),
            ],
        ));
        // Comparisons feeding `where`, through the logical ops and a bool constant:
        // where(((x >= y) & !(x < 0)) | (x != y) ^ (x == 1) ^ (x <= y) ^ (x > 0) ^ true, x, 0.5 * y)
        let cmp = |o: ScalarOp, args: Vec<ValueId>| Inst::Op {
            op: o,
            args,
            compute: DType::F32,
            out: DType::Bool,
        };
        let logic = |o: ScalarOp, args: Vec<ValueId>| Inst::Op {
            op: o,
            args,
            compute: DType::Bool,
            out: DType::Bool,
        };
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                cmp(Ge, vec![0, 1]),
                konst(0.0),
                cmp(Lt, vec![0, 3]),
                logic(LogicalNot, vec![4]),
                logic(LogicalAnd, vec![2, 5]),
                cmp(Ne, vec![0, 1]),
                konst(1.0),
                cmp(Eq, vec![0, 8]),
                logic(LogicalXor, vec![7, 9]),
                cmp(Le, vec![0, 1]),
                logic(LogicalXor, vec![10, 11]),
                cmp(Gt, vec![0, 3]),
                logic(LogicalXor, vec![12, 13]),
                Inst::Const {
                    value: Lit::Bool(true),
                    dtype: DType::Bool,
                },
                logic(LogicalXor, vec![14, 15]),
                logic(LogicalOr, vec![6, 16]),
                konst(0.5),
                op(Mul, vec![18, 1]),
                op(Where, vec![17, 0, 19]),
                store(0, 20),
            ],
        ));
        // A comparison whose bool crosses a bulk call: where(exp(x) > y, x, y).
        v.push(spec(
            2,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                cmp(Gt, vec![0, 1]),
                op(Exp, vec![0]),
                cmp(Gt, vec![3, 1]),
                logic(LogicalAnd, vec![2, 4]),
                op(Where, vec![5, 0, 1]),
                store(0, 6),
            ],
        ));
        // W3-like with two outputs, one of them a constant and one a maximum of loads.
        v.push(spec(
            3,
            3,
            vec![
                Inst::Load { input: 0 },
                Inst::Load { input: 1 },
                op(Add, vec![0, 1]),
                op(Relu, vec![2]),
                Inst::Load { input: 2 },
                op(Add, vec![3, 4]),
                store(0, 5),
                konst(-2.5),
                store(1, 7),
                op(Maximum, vec![4, 1]),
                store(2, 9),
            ],
        ));
        v
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        /// Mostly ordinary values, some special ones (NaNs with payloads, zeros, infinities,
        /// subnormals, halfway cases for rounding).
        fn value(&mut self) -> f32 {
            const SPECIAL: [f32; 12] = [
                0.0,
                -0.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                1.0e-40,
                -1.0e-40,
                0.5,
                -2.5,
                1.0,
                -1.0,
                0.25,
            ];
            match self.below(8) {
                0 => SPECIAL[self.below(SPECIAL.len())],
                1 => f32::from_bits(0x7fc0_0000 | (self.next() as u32 & 0x3f_ffff)),
                _ => (self.below(2_000_001) as f32 - 1_000_000.0) / 250_000.0,
            }
        }
    }

    const GUARD: u32 = 0xdead_beef;

    /// Runs `entry` over `[start, end)` of a `rows x inner` iteration where input `k`'s rows
    /// step by `outer[k]` elements and its inner stride is `inner_stride[k]`; returns every
    /// output buffer (with its guard padding).
    #[allow(clippy::too_many_arguments)]
    fn run(
        entry: crate::codegen::cpu::KernelFn,
        spec: &KernelSpec,
        dims: usize,
        rows: usize,
        inner: usize,
        outer: &[usize],
        inner_stride: &[usize],
        inputs: &[Vec<f32>],
        start: usize,
        end: usize,
    ) -> Vec<Vec<u32>> {
        let nin = spec.inputs.len();
        let total = rows * inner;
        let mut outs: Vec<Vec<f32>> = (0..spec.outputs.len())
            .map(|_| vec![f32::from_bits(GUARD); total + 32])
            .collect();
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|v| v.as_ptr() as *mut u8).collect();
        ptrs.extend(outs.iter_mut().map(|v| v.as_mut_ptr() as *mut u8));
        let shape: Vec<i64> = if dims == 2 {
            vec![rows as i64, inner as i64]
        } else {
            vec![total as i64]
        };
        let mut strides = Vec::new();
        for k in 0..nin + spec.outputs.len() {
            let (o, i) = if k < nin {
                (outer[k], inner_stride[k])
            } else {
                (inner, 1)
            };
            if dims == 2 {
                strides.extend([o as i64, i as i64]);
            } else {
                strides.push(i as i64);
            }
        }
        let params = [0.3f32.to_bits() as u64];
        let args = KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
            start: start as i64,
            end: end as i64,
            partials: std::ptr::null_mut(),
            params: params.as_ptr(),
        };
        // SAFETY: every input holds at least `(rows - 1) * outer + inner * stride` elements,
        // every output `rows * inner` (plus guard); `[start, end)` lies within the iteration.
        unsafe { entry(&args) };
        outs.iter()
            .map(|v| v.iter().map(|x| x.to_bits()).collect())
            .collect()
    }

    #[test]
    fn assembled_kernels_match_cranelift_bit_for_bit() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let levels: Vec<Level> = Level::ALL.into_iter().filter(|l| host_ready(*l)).collect();
        if levels.is_empty() {
            eprintln!("skipped: this host has neither AVX2 nor AVX-512 (or is not x86-64 Unix)");
            return;
        }
        let inline = CodegenOptions { bulk_math: false };
        let mut checked = 0usize;
        for spec in programs() {
            let nin = spec.inputs.len();
            let nops = nin + spec.outputs.len();
            // (dims, class of each input): all unit; the last input broadcast along the inner
            // dim; in two dims also a row vector (unit inner, outer stride 0).
            let mut layouts: Vec<(usize, Vec<StrideClass>, bool)> = vec![
                (1, vec![StrideClass::Unit; nin], false),
                (2, vec![StrideClass::Unit; nin], false),
                (2, vec![StrideClass::Unit; nin], true),
            ];
            if nin > 1 {
                let mut c = vec![StrideClass::Unit; nin];
                c[nin - 1] = StrideClass::Zero;
                layouts.push((1, c.clone(), false));
                layouts.push((2, c, false));
            }
            for (dims, in_classes, row_vector) in layouts {
                let mut classes = in_classes.clone();
                classes.extend(vec![StrideClass::Unit; spec.outputs.len()]);
                assert_eq!(classes.len(), nops);
                let layout = LoopLayout {
                    dims,
                    reduced: 0,
                    kept_inner: false,
                    in_place: false,
                    classes,
                };
                let reference = compile_with(&spec, &layout, &inline).expect("cranelift");
                for &level in &levels {
                    let wide = imp::assemble(&spec, &layout, level)
                        .expect("assembles")
                        .unwrap_or_else(|| panic!("{spec} {layout} is eligible"));
                    assert_eq!(wide.lanes, level.lanes());
                    // SAFETY: see `finish_wide`.
                    let entry: crate::codegen::cpu::KernelFn =
                        unsafe { std::mem::transmute(wide.map.as_ptr()) };
                    let shapes: &[(usize, usize)] = if dims == 2 {
                        &[
                            (1, 1),
                            (3, 5),
                            (2, 16),
                            (4, 17),
                            (3, 31),
                            (2, 100),
                            (2, 700),
                        ]
                    } else {
                        &[(1, 1), (1, 7), (1, 8), (1, 15), (1, 16), (1, 33), (1, 1029)]
                    };
                    for &(rows, inner) in shapes {
                        let total = rows * inner;
                        let mut outer = Vec::new();
                        let mut stride = Vec::new();
                        let mut inputs = Vec::new();
                        for c in &in_classes {
                            let (o, s) = match c {
                                StrideClass::Zero => (1 + rng.below(3), 0),
                                _ if row_vector && dims == 2 => (0, 1),
                                _ => (inner + rng.below(3), 1),
                            };
                            let (o, s) = if dims == 1 { (0, s) } else { (o, s) };
                            let len = (rows.saturating_sub(1)) * o + inner.max(1) * s + 1;
                            outer.push(o);
                            stride.push(s);
                            inputs.push((0..len).map(|_| rng.value()).collect::<Vec<f32>>());
                        }
                        let mut ranges = vec![(0, total)];
                        for _ in 0..4 {
                            let a = rng.below(total + 1);
                            let b = rng.below(total + 1);
                            ranges.push((a.min(b), a.max(b)));
                        }
                        for (start, end) in ranges {
                            let args = (dims, rows, inner, &outer, &stride, &inputs, start, end);
                            let got = run(
                                entry, &spec, args.0, args.1, args.2, args.3, args.4, args.5,
                                args.6, args.7,
                            );
                            // SAFETY: `reference` was compiled for this spec and layout.
                            let want = run(
                                unsafe { reference.entry() },
                                &spec,
                                dims,
                                rows,
                                inner,
                                &outer,
                                &stride,
                                &inputs,
                                start,
                                end,
                            );
                            for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                                for (j, (a, b)) in g.iter().zip(w).enumerate() {
                                    // With two NaN operands x86 returns the first one's
                                    // payload, and Cranelift may commute an add; any NaN is
                                    // the same result then (the numerics contract).
                                    let nan = |x: u32| f32::from_bits(x).is_nan();
                                    assert!(
                                        a == b || (nan(*a) && nan(*b) && *a != GUARD),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         [{start}, {end}) output {o} element {j}: \
                                         {a:#x} vs Cranelift {b:#x}"
                                    );
                                    if !(start..end).contains(&j) {
                                        assert_eq!(*a, GUARD, "wrote outside its range");
                                    }
                                }
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    /// Reduction kernels over `[kept, reduced]` loop dims: `sum`/`mean` of `value` (insts as
    /// in a pointwise spec, without stores).
    fn row_reduction(op: tensorplay_ir::ReduceOp, nin: usize, insts: Vec<Inst>) -> KernelSpec {
        let value = insts.len() - 1;
        KernelSpec {
            rank: 2,
            inputs: vec![DType::F32; nin],
            outputs: vec![DType::F32],
            insts,
            kind: LoopKind::Reduce {
                op,
                value,
                dims: vec![1],
                keepdim: false,
            },
        }
    }

    /// Runs a row reduction over rows `[start, end)` of `rows x inner` (input `k` with row
    /// stride `outer[k]`, inner stride `stride[k]`); returns the output buffer and the partials
    /// (when asked for), as bits.
    #[allow(clippy::too_many_arguments)]
    fn run_rows(
        entry: crate::codegen::cpu::KernelFn,
        rows: usize,
        inner: usize,
        outer: &[usize],
        stride: &[usize],
        inputs: &[Vec<f32>],
        (start, end): (usize, usize),
        partials: bool,
    ) -> (Vec<u32>, Vec<u64>) {
        let mut out = vec![f32::from_bits(GUARD); rows + 4];
        let mut parts = vec![u64::from(GUARD); rows + 4];
        let mut ptrs: Vec<*mut u8> = inputs.iter().map(|v| v.as_ptr() as *mut u8).collect();
        ptrs.push(out.as_mut_ptr() as *mut u8);
        let shape = [rows as i64, inner as i64];
        let mut strides: Vec<i64> = Vec::new();
        for (&o, &s) in outer.iter().zip(stride) {
            strides.extend([o as i64, s as i64]);
        }
        strides.extend([1, 0]);
        let params = [0.3f32.to_bits() as u64];
        let args = KernelArgs {
            ptrs: ptrs.as_ptr(),
            shape: shape.as_ptr(),
            strides: strides.as_ptr(),
            start: start as i64,
            end: end as i64,
            partials: if partials {
                parts.as_mut_ptr() as *mut u8
            } else {
                std::ptr::null_mut()
            },
            params: params.as_ptr(),
        };
        // SAFETY: every input holds `(rows - 1) * outer + (inner - 1) * stride + 1` elements,
        // the output and the partials `rows` (plus guard); `[start, end)` are rows.
        unsafe { entry(&args) };
        (out.iter().map(|x| x.to_bits()).collect(), parts)
    }

    #[test]
    fn assembled_row_sums_match_cranelift_bit_for_bit() {
        use ScalarOp::*;
        use tensorplay_ir::ReduceOp::{Mean, Sum};
        let levels: Vec<Level> = Level::ALL.into_iter().filter(|l| host_ready(*l)).collect();
        if levels.is_empty() {
            eprintln!("skipped: this host has neither AVX2 nor AVX-512 (or is not x86-64 Unix)");
            return;
        }
        let load = |input| Inst::Load { input };
        let param = Inst::Param {
            index: 0,
            dtype: DType::F32,
        };
        let mut programs = Vec::new();
        for op in [Sum, Mean] {
            programs.push(row_reduction(op, 1, vec![load(0)]));
            programs.push(row_reduction(
                op,
                2,
                vec![load(0), load(1), self::op(Mul, vec![0, 1])],
            ));
            programs.push(row_reduction(
                op,
                2,
                vec![
                    load(0),
                    param.clone(),
                    self::op(Add, vec![0, 1]),
                    self::op(Relu, vec![2]),
                    load(1),
                    self::op(Sub, vec![3, 4]),
                ],
            ));
            programs.push(row_reduction(
                op,
                1,
                vec![
                    load(0),
                    konst(0.0),
                    Inst::Op {
                        op: Gt,
                        args: vec![0, 1],
                        compute: DType::F32,
                        out: DType::Bool,
                    },
                    konst(-2.5),
                    self::op(Where, vec![2, 0, 3]),
                ],
            ));
        }
        let cranelift = CodegenOptions { bulk_math: false };
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut checked = 0usize;
        for spec in &programs {
            let nin = spec.inputs.len();
            let mut input_classes = vec![vec![StrideClass::Unit; nin]];
            if nin > 1 {
                let mut c = vec![StrideClass::Unit; nin];
                c[nin - 1] = StrideClass::Zero;
                input_classes.push(c);
            }
            for in_classes in input_classes {
                let mut classes = in_classes.clone();
                classes.push(StrideClass::Zero);
                let layout = LoopLayout {
                    dims: 2,
                    reduced: 1,
                    kept_inner: false,
                    in_place: false,
                    classes,
                };
                assert!(eligible(spec, &layout), "{spec} {layout}");
                let reference = compile_with(spec, &layout, &cranelift).expect("cranelift");
                for &level in &levels {
                    let wide = imp::assemble(spec, &layout, level)
                        .expect("assembles")
                        .unwrap_or_else(|| panic!("{spec} {layout} assembles"));
                    // SAFETY: see `finish_wide`.
                    let entry: crate::codegen::cpu::KernelFn =
                        unsafe { std::mem::transmute(wide.map.as_ptr()) };
                    for &(rows, inner) in &[
                        (1, 0),
                        (3, 1),
                        (2, 3),
                        (3, 4),
                        (2, 7),
                        (2, 31),
                        (3, 32),
                        (2, 33),
                        (2, 47),
                        (4, 100),
                        (1, 4095),
                        (2, 4096),
                        (1, 4097),
                        (2, 2 * 4096 + 37),
                    ] {
                        let mut outer = Vec::new();
                        let mut stride = Vec::new();
                        let mut inputs = Vec::new();
                        for c in &in_classes {
                            let (o, s) = match c {
                                StrideClass::Zero => (1 + rng.below(2), 0),
                                _ => (inner + rng.below(3), 1),
                            };
                            let len = rows * o + inner * s + 1;
                            outer.push(o);
                            stride.push(s);
                            let values = (0..len).map(|_| match rng.below(500) {
                                0 => rng.value(),
                                _ => (rng.below(2_000_001) as f32 - 1e6) / 250_000.0,
                            });
                            inputs.push(values.collect::<Vec<f32>>());
                        }
                        let a = rng.below(rows + 1);
                        let b = rng.below(rows + 1);
                        for range in [(0, rows), (a.min(b), a.max(b))] {
                            for partials in [false, true] {
                                let args = (rows, inner, &outer, &stride, &inputs, range);
                                let got = run_rows(
                                    entry, args.0, args.1, args.2, args.3, args.4, args.5, partials,
                                );
                                // SAFETY: `reference` was compiled for this spec and layout.
                                let want = run_rows(
                                    unsafe { reference.entry() },
                                    rows,
                                    inner,
                                    &outer,
                                    &stride,
                                    &inputs,
                                    range,
                                    partials,
                                );
                                let nan = |x: u32| f32::from_bits(x).is_nan();
                                let nan64 = |x: u64| f64::from_bits(x).is_nan();
                                for (j, (g, w)) in got.0.iter().zip(&want.0).enumerate() {
                                    assert!(
                                        g == w || (nan(*g) && nan(*w)),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         {range:?} partials {partials} row {j}: {g:#x} vs \
                                         Cranelift {w:#x}"
                                    );
                                }
                                for (j, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
                                    assert!(
                                        g == w || (nan64(*g) && nan64(*w)),
                                        "{level:?} {spec}{layout} rows {rows} inner {inner} \
                                         {range:?} partial {j}: {g:#x} vs Cranelift {w:#x}"
                                    );
                                }
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 400, "{checked}");
    }

    #[test]
    fn in_place_kernels_read_before_they_write() {
        // p = p - 0.5 * g, with p both input 0 and output 0.
        let spec = spec(
            2,
            1,
            vec![
                Inst::Load { input: 1 },
                konst(0.5),
                op(ScalarOp::Mul, vec![0, 1]),
                Inst::Load { input: 0 },
                op(ScalarOp::Sub, vec![3, 2]),
                store(0, 4),
            ],
        );
        let layout = LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: true,
            classes: vec![StrideClass::Unit; 3],
        };
        for level in Level::ALL.into_iter().filter(|l| host_ready(*l)) {
            let wide = imp::assemble(&spec, &layout, level).unwrap().unwrap();
            // SAFETY: see `finish_wide`.
            let entry: crate::codegen::cpu::KernelFn =
                unsafe { std::mem::transmute(wide.map.as_ptr()) };
            let n = 37;
            let mut p: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let g: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
            let ptrs = [
                p.as_mut_ptr() as *mut u8,
                g.as_ptr() as *mut u8,
                p.as_mut_ptr() as *mut u8,
            ];
            let shape = [n as i64];
            let strides = [1i64, 1, 1];
            let args = KernelArgs {
                ptrs: ptrs.as_ptr(),
                shape: shape.as_ptr(),
                strides: strides.as_ptr(),
                start: 0,
                end: n as i64,
                partials: std::ptr::null_mut(),
                params: std::ptr::null(),
            };
            // SAFETY: the three pointers cover 37 elements.
            unsafe { entry(&args) };
            assert!(p.iter().all(|&v| v == 0.0), "{level:?}: {p:?}");
        }
    }

    #[test]
    fn staged_in_place_kernels_stay_with_cranelift() {
        // p = exp(p): stores would have to wait for the last stage.
        let spec = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Exp, vec![0]),
                store(0, 1),
            ],
        );
        let mut layout = LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: true,
            classes: vec![StrideClass::Unit; 2],
        };
        for level in Level::ALL.into_iter().filter(|l| host_ready(*l)) {
            assert!(imp::assemble(&spec, &layout, level).unwrap().is_none());
            layout.in_place = false;
            assert!(imp::assemble(&spec, &layout, level).unwrap().is_some());
            layout.in_place = true;
        }
    }

    #[test]
    fn eligibility_names_what_stays_with_cranelift() {
        let layout = |classes: Vec<StrideClass>| LoopLayout {
            dims: 1,
            reduced: 0,
            kept_inner: false,
            in_place: false,
            classes,
        };
        let unit2 = layout(vec![StrideClass::Unit; 2]);
        let p = programs();
        assert!(p.iter().all(|s| eligible(
            s,
            &layout(vec![StrideClass::Unit; s.inputs.len() + s.outputs.len()])
        )));
        // A libm function (no bulk kernel), a cast, a strided operand, f64 and three loop dims
        // are not.
        let libm = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Libm(tensorplay_ir::LibmFn::ALL[0]), vec![0]),
                store(0, 1),
            ],
        );
        assert!(!eligible(&libm, &unit2));
        let cast = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                Inst::Cast {
                    arg: 0,
                    to: DType::F32,
                },
                store(0, 1),
            ],
        );
        assert!(!eligible(&cast, &unit2));
        assert!(!eligible(
            &p[0],
            &layout(vec![StrideClass::Strided, StrideClass::Unit])
        ));
        assert!(!eligible(
            &p[0],
            &layout(vec![StrideClass::Unit, StrideClass::Zero])
        ));
        let mut f64_spec = p[0].clone();
        f64_spec.inputs = vec![DType::F64];
        assert!(!eligible(&f64_spec, &unit2));
        let mut deep = unit2.clone();
        deep.dims = 3;
        assert!(!eligible(&p[0], &deep));
        // Reductions: f32 sums and means of rows computed inline; not other reductions, not
        // column mode, not a value needing a bulk kernel, not without a kept loop dim.
        let rows = LoopLayout {
            dims: 2,
            reduced: 1,
            kept_inner: false,
            in_place: false,
            classes: vec![StrideClass::Unit, StrideClass::Zero],
        };
        let sum = row_reduction(
            tensorplay_ir::ReduceOp::Sum,
            1,
            vec![Inst::Load { input: 0 }],
        );
        assert!(eligible(&sum, &rows));
        let mut amax = sum.clone();
        amax.kind = LoopKind::Reduce {
            op: tensorplay_ir::ReduceOp::Amax,
            value: 0,
            dims: vec![1],
            keepdim: false,
        };
        assert!(!eligible(&amax, &rows));
        let columns = LoopLayout {
            kept_inner: true,
            dims: 3,
            ..rows.clone()
        };
        assert!(!eligible(&sum, &columns));
        let exp = row_reduction(
            tensorplay_ir::ReduceOp::Sum,
            1,
            vec![Inst::Load { input: 0 }, op(ScalarOp::Exp, vec![0])],
        );
        assert!(!eligible(&exp, &rows));
        let one_dim = LoopLayout {
            dims: 1,
            ..rows.clone()
        };
        assert!(!eligible(&sum, &one_dim));
    }
}
