//! f32 pointwise kernels assembled directly at the host's full vector width: 8 lanes with AVX2,
//! 16 with AVX-512.
//!
//! Cranelift's x86-64 back end has only 128-bit vector types, so its kernels run f32 work 4
//! lanes at a time; a chain of cheap IEEE operations (`x * 1.1 + 0.3`, `relu(x + b) + r`) is
//! then bound by instruction count where a hand loop moves 8 or 16 elements per instruction.
//! For those kernels — every operand f32, every operation one of the correctly rounded IEEE
//! operations or an exact sign/select operation (see [`lowerable`]), one or two loop dims,
//! inputs contiguous or broadcast along the inner dim — this module writes the machine code
//! itself with `iced-x86`'s assembler: the loop nest, one full-width vector per operation, a
//! masked tail, no call-outs. Each operation is the same instruction the eager kernel and the
//! Cranelift kernel execute per lane (`vaddps` for `addss`, `vsqrtps` for `sqrtss`, sign-mask
//! `and`/`xor` for `abs`/`neg`, compares and blends for the NaN rules of `maximum`), so results
//! are bit-identical to both; nothing is contracted into FMAs. Assembling takes microseconds,
//! against Cranelift's half millisecond for the same kernel.
//!
//! Everything else (other dtypes, transcendentals, casts, strided operands, deeper loop
//! nests, reductions, softmax) is compiled by Cranelift as before; [`assemble`] answers `None`
//! for it.
//!
//! The kernel has the common entry `extern "C" fn(*const KernelArgs)` (System V, the only ABI
//! it is built for) and honours every field a pointwise kernel reads: any `[start, end)` of the
//! flattened iteration, rows of any length, outer strides of any value.

use memmap2::Mmap;
use tensorplay_ir::{DType, ScalarOp};

use super::emit::liveness;
use super::math::bulk::Level;
use crate::codegen::kernel::{Inst, KernelSpec, Lit, LoopKind, LoopLayout, StrideClass};

/// Executable machine code of one assembled kernel.
pub(super) struct WideCode {
    /// The mapping holding the code (read + execute).
    pub(super) map: Mmap,
    /// f32 lanes per vector (8 or 16).
    pub(super) lanes: usize,
}

/// Whether `op` has a full-width lowering here (computing in f32): the IEEE operations, the
/// exact sign operations, rounding to integral values, and the NaN-propagating
/// `maximum`/`minimum`/`clamp`/`relu`.
pub(super) fn lowerable(op: &ScalarOp) -> bool {
    use ScalarOp::*;
    matches!(
        op,
        Add | Sub
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

/// Whether `spec` under `layout` can be assembled: a pointwise kernel over one or two loop dims
/// whose live instructions are all f32 loads, constants, parameters, [`lowerable`] operations
/// and stores, with every input unit-stride or broadcast along the inner dim and every output
/// unit-stride.
pub(super) fn eligible(spec: &KernelSpec, layout: &LoopLayout) -> bool {
    let f32_only = spec
        .inputs
        .iter()
        .chain(&spec.outputs)
        .all(|&d| d == DType::F32);
    let nin = spec.inputs.len();
    let classes_ok = layout.classes.iter().enumerate().all(|(k, c)| match c {
        StrideClass::Unit => true,
        StrideClass::Zero => k < nin,
        StrideClass::Strided => false,
    });
    let live = liveness(spec);
    let insts_ok = spec.insts.iter().zip(&live).all(|(inst, &l)| {
        !l || match inst {
            Inst::Load { .. } | Inst::Store { .. } => true,
            Inst::Const { value, dtype } => *dtype == DType::F32 && matches!(value, Lit::Float(_)),
            Inst::Param { dtype, .. } => *dtype == DType::F32,
            Inst::Op {
                op, compute, out, ..
            } => *compute == DType::F32 && *out == DType::F32 && lowerable(op),
            Inst::Cast { .. } => false,
        }
    });
    matches!(spec.kind, LoopKind::Pointwise)
        && (1..=2).contains(&layout.dims)
        && !spec.outputs.is_empty()
        && f32_only
        && classes_ok
        && insts_ok
}

/// Assembles `spec` for `layout` at `level`'s width, or `None` when it is not [`eligible`], the
/// host lacks the level, or its values do not fit the vector registers (then Cranelift
/// compiles it). An `Err` is an internal assembler failure.
pub(super) fn assemble(
    spec: &KernelSpec,
    layout: &LoopLayout,
    level: Level,
) -> Result<Option<WideCode>, String> {
    if !host_ready(level) || !eligible(spec, layout) {
        return Ok(None);
    }
    imp::assemble(spec, layout, level)
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
    use iced_x86::Register;
    use iced_x86::code_asm::*;

    /// The general-purpose registers that hold unit-stride operand pointers in the inner loop
    /// (`rax`, `rcx`, `rdx` are scratch; `r9`-`r11` the loop counters; `rsp` the frame).
    const POINTER_REGS: [AsmRegister64; 9] = [rsi, rdi, r8, rbx, rbp, r12, r13, r14, r15];
    /// Callee-saved registers the kernel uses (pushed in the prologue).
    const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

    // Frame slots (bytes from `rsp`).
    const POS: i32 = 0; // first flattened element not yet done
    const END: i32 = 8; // one past the last element of this call
    const INNER: i32 = 16; // inner dim size
    const COL: i32 = 24; // column where the current row segment starts
    /// Per operand `k`: the address of its current row's element 0 ...
    fn row_slot(k: usize) -> i32 {
        32 + 16 * k as i32
    }
    /// ... and the byte stride from one row to the next.
    fn stride_slot(k: usize) -> i32 {
        40 + 16 * k as i32
    }

    /// `roundps`/`rndscaleps` immediates: round to nearest even / down / up, no precision
    /// exception.
    const ROUND_NEAREST: u32 = 0x08;
    const ROUND_DOWN: u32 = 0x09;
    const ROUND_UP: u32 = 0x0A;
    /// `cmpps` predicate: unordered (either operand NaN).
    const CMP_UNORD: u32 = 3;

    /// Where a spec value lives while the kernel runs.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Home {
        /// Not computed (dead) or a store.
        None,
        /// A vector register holding it for the whole kernel (constants, parameters, inputs
        /// broadcast along the inner dim: set before the loops or once per row).
        Fixed(u8),
        /// Computed in the loop body into a register picked then.
        Body,
    }

    /// Constants an operation needs besides its operands, each held in a fixed register.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
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

    /// The helpers of one operation.
    fn helpers_of(op: &ScalarOp) -> Vec<Helper> {
        use ScalarOp::*;
        let narrow = |v: f64| Helper::Bits((v as f32).to_bits());
        match op {
            Relu => vec![Helper::Zero],
            Reciprocal | Rsqrt => vec![Helper::One],
            Abs => vec![Helper::AbsMask],
            Neg => vec![Helper::SignBit],
            Clamp { min, max } => min.iter().chain(max).map(|&v| narrow(v)).collect(),
            _ => Vec::new(),
        }
    }

    /// One kernel being assembled.
    struct Asm<'a> {
        a: CodeAssembler,
        spec: &'a KernelSpec,
        layout: &'a LoopLayout,
        wide: bool,
        lanes: usize,
        live: Vec<bool>,
        homes: Vec<Home>,
        helpers: Vec<(Helper, u8)>,
        /// Operand `k`'s inner-loop pointer register (unit-stride operands).
        ptr_reg: Vec<Option<AsmRegister64>>,
        /// Vector registers free for body values (the rest are fixed).
        body_regs: Vec<u8>,
        /// AVX2: the register holding the tail's lane mask ...
        tail_mask: u8,
        /// ... and a scratch for the NaN masks of `maximum`/`minimum`.
        scratch: u8,
        iota: CodeLabel,
        frame: i32,
    }

    fn e(err: IcedError) -> String {
        format!("x86 assembler: {err}")
    }

    pub(super) fn assemble(
        spec: &KernelSpec,
        layout: &LoopLayout,
        level: Level,
    ) -> Result<Option<WideCode>, String> {
        let wide = level == Level::Avx512;
        let vregs: u8 = if wide { 32 } else { 16 };
        let nops = spec.inputs.len() + spec.outputs.len();
        let nin = spec.inputs.len();
        let live = liveness(spec);

        // Operand pointers: one register per unit-stride operand.
        let mut ptr_reg = vec![None; nops];
        let mut next_ptr = POINTER_REGS.iter();
        for (k, slot) in ptr_reg.iter_mut().enumerate() {
            if layout.classes[k] == StrideClass::Unit {
                match next_ptr.next() {
                    Some(&r) => *slot = Some(r),
                    None => return Ok(None),
                }
            }
        }

        // Fixed registers: constants, parameters, broadcast inputs, helpers.
        let mut next_fixed: u8 = 0;
        let mut homes = vec![Home::None; spec.insts.len()];
        let mut helpers: Vec<(Helper, u8)> = Vec::new();
        for (i, inst) in spec.insts.iter().enumerate() {
            if !live[i] {
                continue;
            }
            homes[i] = match inst {
                Inst::Const { .. } | Inst::Param { .. } => {
                    next_fixed += 1;
                    Home::Fixed(next_fixed - 1)
                }
                Inst::Load { input } if layout.classes[*input] == StrideClass::Zero => {
                    next_fixed += 1;
                    Home::Fixed(next_fixed - 1)
                }
                Inst::Load { .. } | Inst::Op { .. } => Home::Body,
                Inst::Store { .. } | Inst::Cast { .. } => Home::None,
            };
            if let Inst::Op { op, .. } = inst {
                for h in helpers_of(op) {
                    if !helpers.iter().any(|&(g, _)| g == h) {
                        helpers.push((h, next_fixed));
                        next_fixed += 1;
                    }
                }
            }
        }
        // AVX2 keeps the tail's lane mask and NaN masks in vector registers (AVX-512: in
        // opmask registers k1, k2).
        let (tail_mask, scratch) = (next_fixed, next_fixed + 1);
        if !wide {
            next_fixed += 2;
        }
        if next_fixed >= vregs {
            return Ok(None);
        }
        let body_regs: Vec<u8> = (next_fixed..vregs).rev().collect();
        if !fits(spec, &live, &homes, body_regs.len()) {
            return Ok(None);
        }

        let mut a = CodeAssembler::new(64).map_err(e)?;
        let iota = a.create_label();
        // Frame: 4 slots + 2 per operand, padded so that rsp stays 16-byte aligned after the
        // six pushes and the return address.
        let frame = (32 + 16 * nops as i32) + 8;
        let mut asm = Asm {
            a,
            spec,
            layout,
            wide,
            lanes: level.lanes(),
            live,
            homes,
            helpers,
            ptr_reg,
            body_regs,
            tail_mask,
            scratch,
            iota,
            frame,
        };
        asm.kernel(nin).map_err(e)?;
        let code = asm.a.assemble(0).map_err(e)?;
        let mut map = memmap2::MmapMut::map_anon(code.len()).map_err(|err| err.to_string())?;
        map.copy_from_slice(&code);
        let map = map.make_exec().map_err(|err| err.to_string())?;
        Ok(Some(WideCode {
            map,
            lanes: level.lanes(),
        }))
    }

    /// Whether the body's values fit `avail` registers under the allocation [`Asm::body`] does
    /// (every load first, then each operation's result allocated before its operands are
    /// freed).
    fn fits(spec: &KernelSpec, live: &[bool], homes: &[Home], avail: usize) -> bool {
        let last = last_uses(spec, live);
        let mut in_use = 0usize;
        let mut peak = 0usize;
        let body = |i: usize| homes[i] == Home::Body;
        for (i, inst) in spec.insts.iter().enumerate() {
            if body(i) && matches!(inst, Inst::Load { .. }) {
                in_use += 1;
            }
        }
        peak = peak.max(in_use);
        for (i, inst) in spec.insts.iter().enumerate() {
            if !live[i] {
                continue;
            }
            if let Inst::Op { args, .. } = inst {
                in_use += 1;
                peak = peak.max(in_use);
                for &v in dedup(args).iter() {
                    if body(v) && last[v] == i {
                        in_use -= 1;
                    }
                }
            }
            if let Inst::Store { value, .. } = inst
                && body(*value)
                && last[*value] == i
            {
                in_use -= 1;
            }
        }
        peak <= avail
    }

    /// The index of the last instruction that reads each value (or the value's own index).
    fn last_uses(spec: &KernelSpec, live: &[bool]) -> Vec<usize> {
        let mut last: Vec<usize> = (0..spec.insts.len()).collect();
        for (i, inst) in spec.insts.iter().enumerate() {
            if !live[i] {
                continue;
            }
            match inst {
                Inst::Op { args, .. } => args.iter().for_each(|&v| last[v] = i),
                Inst::Store { value, .. } => last[*value] = i,
                _ => {}
            }
        }
        last
    }

    fn dedup(args: &[usize]) -> Vec<usize> {
        let mut v = args.to_vec();
        v.sort_unstable();
        v.dedup();
        v
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

    impl Asm<'_> {
        fn kernel(&mut self, nin: usize) -> Result<(), IcedError> {
            let nops = self.layout.classes.len();
            let two_dims = self.layout.dims == 2;
            let mut done = self.a.create_label();
            let mut row = self.a.create_label();
            let mut main = self.a.create_label();
            let mut tail = self.a.create_label();
            let mut next = self.a.create_label();

            // Prologue: save callee-saved registers, make the frame. Arguments: rdi.
            for r in SAVED {
                self.a.push(r)?;
            }
            self.a.sub(rsp, self.frame)?;
            self.a.mov(r10, rdi)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::START))?;
            self.a.mov(qword_ptr(rsp + POS), rax)?;
            self.a.mov(rax, qword_ptr(r10 + offsets::END))?;
            self.a.mov(qword_ptr(rsp + END), rax)?;
            self.a.cmp(rax, qword_ptr(rsp + POS))?;
            self.a.jle(done)?;
            self.a.mov(r8, qword_ptr(r10 + offsets::PTRS))?;
            self.a.mov(r9, qword_ptr(r10 + offsets::SHAPE))?;
            self.a.mov(r11, qword_ptr(r10 + offsets::STRIDES))?;
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
                for k in 0..nops {
                    let outer = 8 * (2 * k as i32);
                    self.a.mov(rax, qword_ptr(r11 + outer))?;
                    self.a.shl(rax, 2)?;
                    self.a.mov(qword_ptr(rsp + stride_slot(k)), rax)?;
                    self.a.imul_2(rax, rcx)?;
                    self.a.add(rax, qword_ptr(r8 + 8 * k as i32))?;
                    self.a.mov(qword_ptr(rsp + row_slot(k)), rax)?;
                }
            } else {
                self.a.mov(rax, qword_ptr(rsp + POS))?;
                self.a.mov(qword_ptr(rsp + COL), rax)?;
                for k in 0..nops {
                    self.a.mov(rax, qword_ptr(r8 + 8 * k as i32))?;
                    self.a.mov(qword_ptr(rsp + row_slot(k)), rax)?;
                }
            }
            self.fixed_values(r10)?;

            // One row segment: [col, min(inner, col + end - pos)).
            self.a.set_label(&mut row)?;
            self.a.mov(r9, qword_ptr(rsp + INNER))?;
            self.a.sub(r9, qword_ptr(rsp + COL))?;
            self.a.mov(rax, qword_ptr(rsp + END))?;
            self.a.sub(rax, qword_ptr(rsp + POS))?;
            self.a.cmp(rax, r9)?;
            self.a.cmovb(r9, rax)?;
            self.a.mov(rdx, qword_ptr(rsp + COL))?;
            self.a.shl(rdx, 2)?;
            for k in 0..nops {
                match self.ptr_reg[k] {
                    Some(p) => {
                        self.a.mov(p, qword_ptr(rsp + row_slot(k)))?;
                        self.a.add(p, rdx)?;
                    }
                    None => {
                        // Broadcast along the row: this row's value in its fixed register.
                        debug_assert!(k < nin);
                        self.a.mov(rax, qword_ptr(rsp + row_slot(k)))?;
                        for i in 0..self.spec.insts.len() {
                            if let (Inst::Load { input }, Home::Fixed(r)) =
                                (&self.spec.insts[i], self.homes[i])
                                && *input == k
                            {
                                self.broadcast_mem(r, qword_ptr(rax))?;
                            }
                        }
                    }
                }
            }
            self.a.xor(r11d, r11d)?;
            self.a.mov(r10, r9)?;
            self.a.and(r10, -(self.lanes as i32))?;
            self.a.test(r10, r10)?;
            self.a.jz(tail)?;
            self.a.set_label(&mut main)?;
            self.body(Lanes::Full)?;
            self.a.add(r11, self.lanes as i32)?;
            self.a.cmp(r11, r10)?;
            self.a.jb(main)?;
            self.a.set_label(&mut tail)?;
            self.a.cmp(r11, r9)?;
            self.a.jae(next)?;
            self.a.mov(rcx, r9)?;
            self.a.sub(rcx, r11)?;
            if self.wide {
                self.a.mov(eax, 1)?;
                self.a.shl(eax, cl)?;
                self.a.sub(eax, 1)?;
                self.a.kmovw(k1, eax)?;
            } else {
                let m = self.tail_mask;
                self.a.vmovd(xmm(m), ecx)?;
                self.a.vpbroadcastd(ymm(m), xmm(m))?;
                self.a.vpcmpgtd(ymm(m), ymm(m), ymmword_ptr(self.iota))?;
            }
            self.body(Lanes::Tail)?;

            // Next row.
            self.a.set_label(&mut next)?;
            self.a.mov(rax, qword_ptr(rsp + POS))?;
            self.a.add(rax, r9)?;
            self.a.mov(qword_ptr(rsp + POS), rax)?;
            self.a.cmp(rax, qword_ptr(rsp + END))?;
            self.a.jge(done)?;
            self.a.mov(qword_ptr(rsp + COL), 0)?;
            if two_dims {
                for k in 0..nops {
                    self.a.mov(rax, qword_ptr(rsp + stride_slot(k)))?;
                    self.a.add(qword_ptr(rsp + row_slot(k)), rax)?;
                }
            }
            self.a.jmp(row)?;

            self.a.set_label(&mut done)?;
            self.a.vzeroupper()?;
            self.a.add(rsp, self.frame)?;
            for r in SAVED.iter().rev() {
                self.a.pop(*r)?;
            }
            self.a.ret()?;

            if !self.wide {
                // Lane indices 0..8, compared with the remaining count for the tail mask.
                let iota: Vec<u8> = (0u32..8).flat_map(|j| j.to_le_bytes()).collect();
                self.a.set_label(&mut self.iota)?;
                self.a.db(&iota)?;
            }
            Ok(())
        }

        /// Broadcasts the f32 at `mem` to every lane of register `r`.
        fn broadcast_mem(&mut self, r: u8, mem: AsmMemoryOperand) -> Result<(), IcedError> {
            let mem = dword_ptr(mem);
            if self.wide {
                self.a.vbroadcastss(zmm(r), mem)
            } else {
                self.a.vbroadcastss(ymm(r), mem)
            }
        }

        /// Broadcasts the f32 with `bits` to every lane of register `r`.
        fn broadcast_bits(&mut self, r: u8, bits: u32) -> Result<(), IcedError> {
            self.a.mov(eax, bits)?;
            if self.wide {
                self.a.vpbroadcastd(zmm(r), eax)
            } else {
                self.a.vmovd(xmm(r), eax)?;
                self.a.vbroadcastss(ymm(r), xmm(r))
            }
        }

        /// Sets the registers that hold a value for the whole call: constants, parameters
        /// (`args` holds the `KernelArgs` pointer) and helper constants.
        fn fixed_values(&mut self, args: AsmRegister64) -> Result<(), IcedError> {
            let has_params = self
                .spec
                .insts
                .iter()
                .enumerate()
                .any(|(i, inst)| self.live[i] && matches!(inst, Inst::Param { .. }));
            if has_params {
                self.a.mov(rdx, qword_ptr(args + offsets::PARAMS))?;
            }
            for i in 0..self.spec.insts.len() {
                let Home::Fixed(r) = self.homes[i] else {
                    continue;
                };
                match &self.spec.insts[i] {
                    Inst::Const {
                        value: Lit::Float(v),
                        ..
                    } => self.broadcast_bits(r, (*v as f32).to_bits())?,
                    Inst::Param { index, .. } => {
                        self.broadcast_mem(r, qword_ptr(rdx + 8 * *index as i32))?
                    }
                    _ => {}
                }
            }
            for (h, r) in self.helpers.clone() {
                self.broadcast_bits(r, h.bits())?;
            }
            Ok(())
        }

        fn helper(&self, h: Helper) -> u8 {
            self.helpers
                .iter()
                .find(|&&(g, _)| g == h)
                .map(|&(_, r)| r)
                .expect("helper registered by helpers_of")
        }

        /// One vector of every operand at element `r11` of the row: loads, operations, stores.
        fn body(&mut self, lanes: Lanes) -> Result<(), IcedError> {
            let spec = self.spec;
            let last = last_uses(spec, &self.live);
            let mut free = self.body_regs.clone();
            let mut reg: Vec<Option<u8>> = vec![None; spec.insts.len()];
            for (i, h) in self.homes.iter().enumerate() {
                if let Home::Fixed(r) = h {
                    reg[i] = Some(*r);
                }
            }
            // Every load first: an in-place output is written only after all reads.
            for (i, inst) in spec.insts.iter().enumerate() {
                if let (Inst::Load { input }, Home::Body) = (inst, self.homes[i]) {
                    let d = free.pop().expect("checked by fits");
                    reg[i] = Some(d);
                    let p = self.ptr_reg[*input].expect("unit-stride input");
                    self.load(d, p, lanes)?;
                }
            }
            for (i, inst) in spec.insts.iter().enumerate() {
                if !self.live[i] {
                    continue;
                }
                match inst {
                    Inst::Op { op, args, .. } => {
                        let d = free.pop().expect("checked by fits");
                        let x: Vec<u8> = args.iter().map(|&v| reg[v].expect("defined")).collect();
                        self.op(op, d, &x)?;
                        reg[i] = Some(d);
                        for v in dedup(args) {
                            if self.homes[v] == Home::Body && last[v] == i {
                                free.push(reg[v].expect("defined"));
                            }
                        }
                    }
                    Inst::Store { output, value } => {
                        let k = spec.inputs.len() + output;
                        let p = self.ptr_reg[k].expect("outputs are unit-stride");
                        self.store(p, reg[*value].expect("defined"), lanes)?;
                        if self.homes[*value] == Home::Body && last[*value] == i {
                            free.push(reg[*value].expect("defined"));
                        }
                    }
                    _ => {}
                }
            }
            Ok(())
        }

        fn load(&mut self, d: u8, p: AsmRegister64, lanes: Lanes) -> Result<(), IcedError> {
            match (self.wide, lanes) {
                (true, Lanes::Full) => self.a.vmovups(zmm(d), zmmword_ptr(p + r11 * 4)),
                (true, Lanes::Tail) => self.a.vmovups(zmm(d).k1().z(), zmmword_ptr(p + r11 * 4)),
                (false, Lanes::Full) => self.a.vmovups(ymm(d), ymmword_ptr(p + r11 * 4)),
                (false, Lanes::Tail) => {
                    self.a
                        .vmaskmovps(ymm(d), ymm(self.tail_mask), ymmword_ptr(p + r11 * 4))
                }
            }
        }

        fn store(&mut self, p: AsmRegister64, v: u8, lanes: Lanes) -> Result<(), IcedError> {
            match (self.wide, lanes) {
                (true, Lanes::Full) => self.a.vmovups(zmmword_ptr(p + r11 * 4), zmm(v)),
                (true, Lanes::Tail) => self.a.vmovups(zmmword_ptr(p + r11 * 4).k1(), zmm(v)),
                (false, Lanes::Full) => self.a.vmovups(ymmword_ptr(p + r11 * 4), ymm(v)),
                (false, Lanes::Tail) => {
                    self.a
                        .vmaskmovps(ymmword_ptr(p + r11 * 4), ymm(self.tail_mask), ymm(v))
                }
            }
        }

        /// `d = op(x..)`. `d` differs from every operand register (it is allocated before they
        /// are freed), so multi-instruction sequences may write it early.
        fn op(&mut self, op: &ScalarOp, d: u8, x: &[u8]) -> Result<(), IcedError> {
            use ScalarOp::*;
            match op {
                Add => vop!(self, vaddps, d, x[0], x[1]),
                Sub => vop!(self, vsubps, d, x[0], x[1]),
                Mul => vop!(self, vmulps, d, x[0], x[1]),
                Div => vop!(self, vdivps, d, x[0], x[1]),
                Square => vop!(self, vmulps, d, x[0], x[0]),
                Sqrt => vop!(self, vsqrtps, d, x[0]),
                Rsqrt => {
                    vop!(self, vsqrtps, d, x[0])?;
                    let one = self.helper(Helper::One);
                    vop!(self, vdivps, d, one, d)
                }
                Reciprocal => {
                    let one = self.helper(Helper::One);
                    vop!(self, vdivps, d, one, x[0])
                }
                Neg => {
                    let m = self.helper(Helper::SignBit);
                    vop!(self, vxorps, d, x[0], m)
                }
                Abs => {
                    let m = self.helper(Helper::AbsMask);
                    vop!(self, vandps, d, x[0], m)
                }
                // `maxps(0, x)` is `0 > x ? 0 : x`: +0 below zero, x itself at -0 and NaN.
                Relu => {
                    let z = self.helper(Helper::Zero);
                    vop!(self, vmaxps, d, z, x[0])
                }
                // Eager: `a` if `a > b` (`a < b`) or `a` is NaN, else `b`. `maxps(a, b)` is
                // `a > b ? a : b`; lanes where `a` is NaN then take `a`.
                Maximum | Minimum => {
                    if *op == Maximum {
                        vop!(self, vmaxps, d, x[0], x[1])?;
                    } else {
                        vop!(self, vminps, d, x[0], x[1])?;
                    }
                    self.take_where_nan(d, x[0])
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
                    Ok(())
                }
                Floor => self.round(d, x[0], ROUND_DOWN),
                Ceil => self.round(d, x[0], ROUND_UP),
                Round => self.round(d, x[0], ROUND_NEAREST),
                other => unreachable!("{other:?} is not lowerable (eligible checked it)"),
            }
        }

        /// Lanes of `d` where `a` is NaN become `a`.
        fn take_where_nan(&mut self, d: u8, a: u8) -> Result<(), IcedError> {
            if self.wide {
                self.a.vcmpps(k2, zmm(a), zmm(a), CMP_UNORD)?;
                self.a.vmovaps(zmm(d).k2(), zmm(a))
            } else {
                let t = self.scratch;
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
        for u in unary {
            v.push(spec(
                1,
                1,
                vec![
                    Inst::Load { input: 0 },
                    op(u, vec![0]),
                    Inst::Store {
                        output: 0,
                        value: 1,
                    },
                ],
            ));
        }
        for b in [Add, Sub, Mul, Div, Maximum, Minimum] {
            v.push(spec(
                2,
                1,
                vec![
                    Inst::Load { input: 0 },
                    Inst::Load { input: 1 },
                    op(b, vec![0, 1]),
                    Inst::Store {
                        output: 0,
                        value: 2,
                    },
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
                Inst::Store {
                    output: 0,
                    value: 14,
                },
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
                Inst::Store {
                    output: 0,
                    value: 5,
                },
                konst(-2.5),
                Inst::Store {
                    output: 1,
                    value: 7,
                },
                op(Maximum, vec![4, 1]),
                Inst::Store {
                    output: 2,
                    value: 9,
                },
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
                        &[(1, 1), (3, 5), (2, 16), (4, 17), (3, 31), (2, 100)]
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
                Inst::Store {
                    output: 0,
                    value: 4,
                },
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
        // A transcendental, a strided operand, a reduction, f64 and three loop dims are not.
        let exp = spec(
            1,
            1,
            vec![
                Inst::Load { input: 0 },
                op(ScalarOp::Exp, vec![0]),
                Inst::Store {
                    output: 0,
                    value: 1,
                },
            ],
        );
        assert!(!eligible(&exp, &unit2));
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
        let mut reduce = p[0].clone();
        reduce.kind = LoopKind::Reduce {
            op: tensorplay_ir::ReduceOp::Sum,
            value: 1,
            dims: vec![0],
            keepdim: false,
        };
        assert!(!eligible(&reduce, &unit2));
    }
}
