//! Staged pointwise kernels: handing a kernel's expensive f32 math to the wide bulk kernels of
//! [`super::math::bulk`].
//!
//! Cranelift emits 4-lane vectors on x86-64, so a transcendental evaluated inline costs tens of
//! 4-lane instructions per vector, while a bulk kernel runs the same algorithm (bit-identical
//! results) 16 or 8 lanes wide. A *staged* kernel walks its element range in tiles of at most
//! [`StagePlan::tile`] elements. Per tile, stage 0 evaluates what the first bulk calls need and
//! stores their arguments to scratch slots on the stack; the bulk calls then run over the whole
//! tile; stage 1 reads their results back from the slots, and so on. Every store to an output
//! happens in the first stage where its value exists. Cheap values that a later stage needs again
//! are recomputed there (their loads hit L1) rather than kept in more slots.
//!
//! Outlined are the transcendental functions, the general `pow`, and also division and `sqrt`:
//! their 4-lane forms are throughput-bound on the divider, and the bulk forms give identical
//! (correctly rounded) results at two to four times the rate, which pays for the scratch round
//! trip (W6 measured 13.5 → 16 GB/s).
//!
//! When the kernel iterates a single loop dim, tiles are contiguous runs of every unit-stride
//! operand, so a bulk call reads an f32 input straight from the tensor and writes a result that
//! is stored unchanged to an f32 output straight into it.
//!
//! In an [in-place](crate::codegen::kernel::LoopLayout::in_place) layout an output may be an
//! input's memory, so every store waits for the last stage and no bulk call writes an output:
//! the earlier stages (and the bulk calls between them) read the tile's inputs intact.

use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{
    AbiParam, Block, BlockArg, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind,
    Value,
};
use tensorplay_ir::{CompileKind, DType, Error, Result, ScalarOp};

use crate::codegen::cpu::emit::{Emitter, Row};
use crate::codegen::cpu::math::bulk::{self, BulkOp};
use crate::codegen::cpu::types::{Buf, Lanes};
use crate::codegen::kernel::{Inst, KernelSpec, LoopKind, LoopLayout, StrideClass, ValueId};

/// Largest tile, in elements.
const MAX_TILE: i64 = 512;

/// Scratch budget per kernel invocation (f32 elements over all slots): 16 KiB, half of L1.
const SCRATCH_ELEMS: i64 = 4096;

/// More slots than this and the kernel is not staged (tiles would get too short).
const MAX_SLOTS: usize = 32;

/// One call of a bulk kernel over a tile.
#[derive(Debug, Clone)]
pub(super) struct BulkCall {
    /// The instruction it computes.
    pub inst: ValueId,
    /// The bulk operation.
    pub op: BulkOp,
    /// The address of the host's bulk kernel for `op`.
    pub addr: usize,
    /// Argument buffers, in order.
    pub args: Vec<Buf>,
    /// Result buffer.
    pub out: Buf,
}

/// How a pointwise kernel is split into stages around bulk calls.
#[derive(Debug, Clone)]
pub(super) struct StagePlan {
    /// Per stage: the instructions evaluated (stores included only in their stage).
    pub live: Vec<Vec<bool>>,
    /// Per stage: values stored to a scratch slot after they are evaluated.
    pub spills: Vec<Vec<(ValueId, usize)>>,
    /// Per stage: the bulk calls made after the stage's walk over the tile.
    pub calls: Vec<Vec<BulkCall>>,
    /// Per instruction: the buffer an outlined value is read from in later stages.
    pub reads: Vec<Option<Buf>>,
    /// Number of scratch slots.
    pub slots: usize,
    /// Elements per tile (a multiple of 16).
    pub tile: i64,
}

/// The bulk operation computing `op` in `compute`, when the host has a bulk kernel for it.
pub(super) fn bulk_op(op: ScalarOp, compute: DType) -> Option<BulkOp> {
    if !matches!(compute, DType::F32 | DType::F16 | DType::BF16) {
        return None;
    }
    let b = match op {
        ScalarOp::Math(f) => BulkOp::Math(f),
        ScalarOp::Pow => BulkOp::Pow,
        ScalarOp::Sqrt => BulkOp::Sqrt,
        ScalarOp::Div => BulkOp::Div,
        // Cheap ops stay inline (exhaustive, so a new op states whether it is outlined).
        ScalarOp::Neg
        | ScalarOp::Abs
        | ScalarOp::Rsqrt
        | ScalarOp::Reciprocal
        | ScalarOp::Relu
        | ScalarOp::Floor
        | ScalarOp::Ceil
        | ScalarOp::Round
        | ScalarOp::Sign
        | ScalarOp::Square
        | ScalarOp::LogicalNot
        | ScalarOp::Cast
        | ScalarOp::Add
        | ScalarOp::Sub
        | ScalarOp::Mul
        | ScalarOp::Maximum
        | ScalarOp::Minimum
        | ScalarOp::Eq
        | ScalarOp::Ne
        | ScalarOp::Lt
        | ScalarOp::Le
        | ScalarOp::Gt
        | ScalarOp::Ge
        | ScalarOp::LogicalAnd
        | ScalarOp::LogicalOr
        | ScalarOp::LogicalXor
        | ScalarOp::Where
        | ScalarOp::Clamp { .. }
        // Libm functions are shim calls per lane (no bulk kernel yet); the rest are cheap.
        | ScalarOp::Libm(_)
        | ScalarOp::Libm2(_)
        | ScalarOp::NanToNum { .. }
        | ScalarOp::BitAnd
        | ScalarOp::BitOr
        | ScalarOp::BitXor
        | ScalarOp::BitNot
        | ScalarOp::Shl
        | ScalarOp::Shr => return None,
    };
    bulk_addr(b).map(|_| b)
}

/// The address of the host's bulk kernel for `op`.
pub(super) fn bulk_addr(op: BulkOp) -> Option<usize> {
    match op.arity() {
        1 => bulk::unary(op).map(|f| f as usize),
        2 => bulk::binary(op).map(|f| f as usize),
        _ => None,
    }
}

/// The stage plan for a pointwise `spec` with `layout` and liveness `live`, or `None` when the
/// kernel has nothing to outline (or is not a vector f32 kernel, or `bulk` is off).
pub(super) fn plan(
    spec: &KernelSpec,
    layout: &LoopLayout,
    live: &[bool],
    lanes: Lanes,
    bulk: bool,
) -> Option<StagePlan> {
    if !bulk || lanes != Lanes::F32x4 || !matches!(spec.kind, LoopKind::Pointwise) {
        return None;
    }
    let n = spec.insts.len();
    let outlined = outlined_ops(spec, live);
    if outlined.iter().all(Option::is_none) {
        return None;
    }
    let level = levels(spec, &outlined);
    let last = (0..n).filter(|&i| live[i]).map(|i| level[i]).max()?;
    let placed = place_calls(spec, layout, &outlined, &level, last)?;
    if placed.slots > MAX_SLOTS {
        return None;
    }
    let stage_live = stage_liveness(spec, layout, live, &level, last, &placed);
    let slots = placed.slots;
    let tile = if slots == 0 {
        MAX_TILE
    } else {
        (SCRATCH_ELEMS / slots as i64 / 16 * 16).clamp(64, MAX_TILE)
    };
    Some(StagePlan {
        live: stage_live,
        spills: placed.spills,
        calls: placed.calls,
        reads: placed.reads,
        slots,
        tile,
    })
}

/// Per instruction: the bulk operation that computes it, for the live ops the host has a bulk
/// kernel for.
fn outlined_ops(spec: &KernelSpec, live: &[bool]) -> Vec<Option<BulkOp>> {
    spec.insts
        .iter()
        .enumerate()
        .map(|(id, inst)| match inst {
            // A division by a constant stays inline: the bulk form would copy the constant
            // into a scratch slot per element, which costs what the wide divider saves.
            Inst::Op {
                op: ScalarOp::Div,
                args,
                ..
            } if args
                .iter()
                .any(|&a| matches!(spec.insts[a], Inst::Const { .. } | Inst::Param { .. })) =>
            {
                None
            }
            Inst::Op { op, compute, .. } if live[id] => bulk_op(*op, *compute),
            _ => None,
        })
        .collect()
}

/// Per instruction, its level: how many bulk calls must run before its value exists.
fn levels(spec: &KernelSpec, outlined: &[Option<BulkOp>]) -> Vec<usize> {
    let mut level = vec![0usize; spec.insts.len()];
    for (id, inst) in spec.insts.iter().enumerate() {
        level[id] = match inst {
            Inst::Load { .. } | Inst::Const { .. } | Inst::Param { .. } => 0,
            Inst::Op { args, .. } => {
                args.iter().map(|&a| level[a]).max().unwrap_or(0)
                    + usize::from(outlined[id].is_some())
            }
            Inst::Cast { arg, .. } => level[*arg],
            Inst::Store { value, .. } => level[*value],
        };
    }
    level
}

/// The bulk calls of every stage and the buffers they read and write: the scratch slots, the
/// values spilled to them, and the stores a call makes itself.
struct Placement {
    /// Number of scratch slots.
    slots: usize,
    /// Per instruction: the buffer an outlined value is read from in later stages.
    reads: Vec<Option<Buf>>,
    /// Per instruction: a store done by the bulk call computing its value.
    done_stores: Vec<bool>,
    /// Per stage: values stored to a scratch slot after they are evaluated.
    spills: Vec<Vec<(ValueId, usize)>>,
    /// Per stage: the bulk calls made after the stage's walk over the tile.
    calls: Vec<Vec<BulkCall>>,
}

impl Placement {
    fn new_slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }
}

/// Places the calls of the `outlined` ops (whose values exist at their `level`, up to `last`)
/// and their buffers; `None` when the host lacks one of their bulk kernels.
fn place_calls(
    spec: &KernelSpec,
    layout: &LoopLayout,
    outlined: &[Option<BulkOp>],
    level: &[usize],
    last: usize,
) -> Option<Placement> {
    let n = spec.insts.len();
    let mut p = Placement {
        slots: 0,
        reads: vec![None; n],
        done_stores: vec![false; n],
        spills: vec![Vec::new(); last + 1],
        calls: vec![Vec::new(); last + 1],
    };
    let mut spilled: Vec<Option<usize>> = vec![None; n];
    // By stage, then instruction order: a value spilled for several calls is stored in the
    // stage of the earliest one (instruction order alone can put a later-stage consumer first).
    let mut order: Vec<ValueId> = (0..n).filter(|&u| outlined[u].is_some()).collect();
    order.sort_by_key(|&u| level[u]);
    for u in order {
        let Some(op) = outlined[u] else { continue };
        let Inst::Op { args, .. } = &spec.insts[u] else {
            continue;
        };
        let stage = level[u] - 1;
        let mut bufs = Vec::with_capacity(args.len());
        for &a in args {
            let buf = if let Some(b) = p.reads[a] {
                b
            } else if let Some(b) = direct_input(spec, layout, a) {
                b
            } else if let Some(k) = spilled[a] {
                Buf::Slot(k)
            } else {
                let k = p.new_slot();
                spilled[a] = Some(k);
                p.spills[stage].push((a, k));
                Buf::Slot(k)
            };
            bufs.push(buf);
        }
        let out = match direct_output(spec, layout, u) {
            Some((s, op)) => {
                p.done_stores[s] = true;
                Buf::Operand(op)
            }
            None => Buf::Slot(p.new_slot()),
        };
        p.reads[u] = Some(out);
        let addr = bulk_addr(op)?;
        p.calls[stage].push(BulkCall {
            inst: u,
            op,
            addr,
            args: bufs,
            out,
        });
    }
    Some(p)
}

/// Value `v` as an input a bulk call can read in place: a load of a unit-stride f32 input of a
/// one-dim layout.
fn direct_input(spec: &KernelSpec, layout: &LoopLayout, v: ValueId) -> Option<Buf> {
    match spec.insts[v] {
        Inst::Load { input }
            if layout.dims == 1
                && spec.inputs[input] == DType::F32
                && layout.classes[input] == StrideClass::Unit =>
        {
            Some(Buf::Operand(input))
        }
        _ => None,
    }
}

/// The store (and its operand) that bulk result `u` goes to straight from its call: a result
/// stored unchanged to a contiguous f32 output of a one-dim layout (not in place: later stages
/// may still read the input that output overwrites).
fn direct_output(spec: &KernelSpec, layout: &LoopLayout, u: ValueId) -> Option<(usize, usize)> {
    let n_in = spec.inputs.len();
    spec.insts
        .iter()
        .enumerate()
        .find_map(|(s, inst)| match inst {
            Inst::Store { output, value }
                if *value == u
                    && layout.dims == 1
                    && !layout.in_place
                    && spec.outputs[*output] == DType::F32
                    && spec.value_dtype(u) == Some(DType::F32)
                    && layout.classes[n_in + output] == StrideClass::Unit =>
            {
                Some((s, n_in + output))
            }
            _ => None,
        })
}

/// Per stage: what must be evaluated, backwards from its roots (the stores it performs and the
/// values it spills). A store is performed in the first stage where its value exists, or in
/// place in the last (after every read of the inputs the outputs overwrite).
fn stage_liveness(
    spec: &KernelSpec,
    layout: &LoopLayout,
    live: &[bool],
    level: &[usize],
    last: usize,
    placed: &Placement,
) -> Vec<Vec<bool>> {
    let n = spec.insts.len();
    let store_stage = |id: ValueId| if layout.in_place { last } else { level[id] };
    let mut stage_live = Vec::with_capacity(last + 1);
    for (s, stage_spills) in placed.spills.iter().enumerate() {
        let mut need = vec![false; n];
        for (id, inst) in spec.insts.iter().enumerate() {
            if let Inst::Store { .. } = inst
                && live[id]
                && store_stage(id) == s
                && !placed.done_stores[id]
            {
                need[id] = true;
            }
        }
        for &(v, _) in stage_spills {
            need[v] = true;
        }
        for id in (0..n).rev() {
            if !need[id] {
                continue;
            }
            match &spec.insts[id] {
                Inst::Op { .. } if placed.reads[id].is_some() => {}
                Inst::Op { args, .. } => args.iter().for_each(|&a| need[a] = true),
                Inst::Cast { arg, .. } => need[*arg] = true,
                Inst::Store { value, .. } => need[*value] = true,
                Inst::Load { .. } | Inst::Const { .. } | Inst::Param { .. } => {}
            }
        }
        stage_live.push(need);
    }
    stage_live
}

/// The plan as text, one line per stage (`TP_LOGS=clif`).
impl std::fmt::Display for StagePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "staged: tile={} slots={}", self.tile, self.slots)?;
        for (s, live) in self.live.iter().enumerate() {
            write!(
                f,
                "  stage {s}: {} insts",
                live.iter().filter(|&&l| l).count()
            )?;
            for (v, k) in &self.spills[s] {
                write!(f, ", %{v} -> slot{k}")?;
            }
            for c in &self.calls[s] {
                let args: Vec<String> = c.args.iter().map(|b| b.to_string()).collect();
                write!(
                    f,
                    "; %{} = bulk {}({}) -> {}",
                    c.inst,
                    c.op.name(),
                    args.join(", "),
                    c.out
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn internal(msg: impl Into<String>) -> Error {
    Error::compile(CompileKind::Codegen, format!("cpu codegen: {}", msg.into()))
}

fn args(vals: &[Value]) -> Vec<BlockArg> {
    vals.iter().map(|&v| BlockArg::Value(v)).collect()
}

impl<'a, 'b> Emitter<'a, 'b> {
    /// Pointwise kernel in stages around bulk calls (see the module docs).
    pub(super) fn staged_pointwise(&mut self, exit: Block, plan: &StagePlan) -> Result<()> {
        let full_live = std::mem::take(&mut self.live);
        self.reads = plan.reads.clone();
        self.slot_bytes = plan.tile * 4;
        let scratch = if plan.slots > 0 {
            let bytes = plan.slots as i64 * self.slot_bytes;
            let ss = self.fb.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                u32::try_from(bytes).map_err(|_| internal("scratch too large"))?,
                6,
            ));
            Some(self.fb.ins().stack_addr(I64, ss, 0))
        } else {
            None
        };
        let mut unary_sig = Signature::new(self.call_conv);
        unary_sig.params.extend([AbiParam::new(I64); 3]);
        let mut binary_sig = Signature::new(self.call_conv);
        binary_sig.params.extend([AbiParam::new(I64); 4]);
        let unary_ref = self.fb.import_signature(unary_sig);
        let binary_ref = self.fb.import_signature(binary_sig);

        let tile_block = self.fb.create_block();
        self.fb.append_block_param(tile_block, I64);
        self.fb.ins().jump(tile_block, &args(&[self.start]));
        self.fb.switch_to_block(tile_block);
        let t0 = self.fb.block_params(tile_block)[0];
        let t_next = self.fb.ins().iadd_imm_s(t0, plan.tile);
        let t1 = self.fb.ins().smin(t_next, self.end);
        let count = self.fb.ins().isub(t1, t0);
        let outer = self.layout.dims - 1;
        for s in 0..plan.live.len() {
            self.live = plan.live[s].clone();
            if self.live.iter().any(|&l| l) {
                let after = self.fb.create_block();
                let spills = plan.spills[s].clone();
                self.segments_between(t0, t1, after, outer, &mut |e, base, n, idx| {
                    e.scratch_row = match scratch {
                        Some(sc) => {
                            let rel = e.fb.ins().isub(idx, t0);
                            let off = e.fb.ins().ishl_imm_s(rel, 2);
                            Some(e.fb.ins().iadd(sc, off))
                        }
                        None => None,
                    };
                    let hoisted = e.hoist(&base)?;
                    let row = Row { base, hoisted };
                    let zero = e.fb.ins().iconst(I64, 0);
                    e.run(zero, n, Vec::new(), &mut |e, i, k, vector, _, _| {
                        let env = e.eval(&row, i, k, vector, true)?;
                        for &(v, slot) in &spills {
                            let x =
                                env[v].ok_or_else(|| internal("spilled value not evaluated"))?;
                            let (addr, off) = e.slot_addr(slot, i, k)?;
                            e.fb.ins()
                                .store(MemFlagsData::new().with_notrap(), x, addr, off);
                        }
                        Ok(())
                    })?;
                    Ok(())
                })?;
                self.fb.switch_to_block(after);
                self.fb.seal_block(after);
            }
            for call in &plan.calls[s] {
                let mut call_args = Vec::with_capacity(call.args.len() + 2);
                for &b in call.args.iter().chain(std::iter::once(&call.out)) {
                    call_args.push(self.tile_ptr(b, scratch, t0)?);
                }
                call_args.push(count);
                let sig = if call.args.len() == 1 {
                    unary_ref
                } else {
                    binary_ref
                };
                let callee = self.fb.ins().iconst(I64, call.addr as i64);
                self.fb.ins().call_indirect(sig, callee, &call_args);
            }
        }
        let more = self.fb.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::SignedLessThan,
            t1,
            self.end,
        );
        self.fb
            .ins()
            .brif(more, tile_block, &args(&[t1]), exit, &[]);
        self.fb.seal_block(tile_block);
        self.live = full_live;
        self.reads.clear();
        self.scratch_row = None;
        Ok(())
    }

    /// The address of the tile starting at flattened element `t0` in buffer `b`.
    fn tile_ptr(&mut self, b: Buf, scratch: Option<Value>, t0: Value) -> Result<Value> {
        Ok(match b {
            Buf::Slot(k) => {
                let sc = scratch.ok_or_else(|| internal("slot without scratch"))?;
                self.fb.ins().iadd_imm_s(sc, k as i64 * self.slot_bytes)
            }
            Buf::Operand(op) => {
                // One loop dim, unit stride, f32: element t0 is at ptr + 4 * t0.
                let off = self.fb.ins().ishl_imm_s(t0, 2);
                self.fb.ins().iadd(self.ptrs[op], off)
            }
        })
    }
}
