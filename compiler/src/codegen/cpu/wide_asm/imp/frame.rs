//! What every part of the assembler shares: the frame slots of a kernel, the roles of its
//! general-purpose registers, the instruction immediates, vector registers by index, and why a
//! kernel is refused.

use iced_x86::Register;
use iced_x86::code_asm::*;

/// The general-purpose registers that hold unit-stride operand pointers in the inner loop
/// (`rax`, `rcx`, `rdx` are scratch; `r9`-`r11` the loop counters; `rsp` the frame).
pub(super) const POINTER_REGS: [AsmRegister64; 9] = [rsi, rdi, r8, rbx, rbp, r12, r13, r14, r15];
/// Callee-saved registers the kernel uses (pushed in the prologue).
pub(super) const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];
/// Pointer registers a bulk call may clobber (saved around it).
pub(super) const CALL_CLOBBERED: [AsmRegister64; 3] = [rsi, rdi, r8];

// Frame slots (bytes from `rsp`).
pub(super) const POS: i32 = 0; // first flattened element not yet done
pub(super) const END: i32 = 8; // one past the last element of this call
pub(super) const INNER: i32 = 16; // inner dim size
pub(super) const COL: i32 = 24; // column where the current row segment starts
pub(super) const SEG: i32 = 32; // length of the current row segment
pub(super) const REM: i32 = 40; // elements of the segment not yet done (staged kernels tile it)
pub(super) const PARAMS: i32 = 48; // the scalar arguments
pub(super) const TILE_LEN: i32 = 56; // elements of the current tile (saved across bulk calls)
pub(super) const SAVE: i32 = 64; // CALL_CLOBBERED, saved across bulk calls
pub(super) const OPERANDS: i32 = SAVE + 8 * CALL_CLOBBERED.len() as i32;
/// Per operand `k`: the address of its current row's element 0 ...
pub(super) fn row_slot(k: usize) -> i32 {
    OPERANDS + 16 * k as i32
}
/// ... and the byte stride from one row to the next.
pub(super) fn stride_slot(k: usize) -> i32 {
    OPERANDS + 8 + 16 * k as i32
}

// Reductions reuse slots the pointwise loop needs: no row segments, no tiles.
pub(super) const TOTAL: i32 = COL; // the current row's f64 total
pub(super) const REST: i32 = SEG; // where the current block's last partial vectors start
pub(super) const PARTIALS_AT: i32 = REM; // `KernelArgs::partials`

/// Lanes a row sum accumulates in: the Cranelift kernels' order (`SUM_UNROLL` vectors of
/// four lanes), kept by every width.
pub(super) const SUM_LANES: usize = 4 * crate::codegen::cpu::loops::SUM_UNROLL as usize;
/// Elements a row sum accumulates in f32 lanes before adding into its f64 total.
pub(super) const SUM_BLOCK: i32 = crate::codegen::cpu::loops::SUM_BLOCK as i32;

/// Largest tile of a staged kernel, in elements, and the scratch budget over all its slots
/// (16 KiB: half of L1).
pub(super) const MAX_TILE: usize = 512;
pub(super) const SCRATCH_ELEMS: usize = 4096;
/// The stack is grown one page at a time (each page touched), so a large frame never skips
/// the guard page.
pub(super) const PAGE: i32 = 4096;

/// `roundps`/`rndscaleps` immediates: round to nearest even / down / up, no precision
/// exception.
pub(super) const ROUND_NEAREST: u32 = 0x08;
pub(super) const ROUND_DOWN: u32 = 0x09;
pub(super) const ROUND_UP: u32 = 0x0A;
/// `cmpps` predicates: unordered (either operand NaN); the comparisons (quiet, ordered
/// except `!=`).
pub(super) const CMP_UNORD: u32 = 3;
pub(super) const CMP_EQ_OQ: u32 = 0x00;
pub(super) const CMP_LT_OQ: u32 = 0x11;
pub(super) const CMP_LE_OQ: u32 = 0x12;
pub(super) const CMP_NEQ_UQ: u32 = 0x04;
pub(super) const CMP_GE_OQ: u32 = 0x1D;
pub(super) const CMP_GT_OQ: u32 = 0x1E;

pub(super) fn ymm(i: u8) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + u32::from(i)).expect("ymm index < 16")
}
pub(super) fn zmm(i: u8) -> AsmRegisterZmm {
    get_zmm(Register::ZMM0 + u32::from(i)).expect("zmm index < 32")
}
pub(super) fn xmm(i: u8) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + u32::from(i)).expect("xmm index < 16")
}

/// Why a kernel was not assembled after all.
pub(super) enum Refusal {
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

pub(super) type Emit<T = ()> = std::result::Result<T, Refusal>;
