//! Staging through the bulk kernels: the calls after a stage, over the tile, with their
//! arguments and results in scratch slots or read and written in the tensors themselves.

use iced_x86::code_asm::*;

use crate::codegen::cpu::wide_asm::imp::Asm;
use crate::codegen::cpu::wide_asm::imp::frame::{CALL_CLOBBERED, Emit, SAVE, TILE_LEN};
use crate::codegen::kernel::{Inst, ValueId};

impl Asm<'_> {
    /// The bulk kernels called after stage `s`, over the tile; then the vector registers
    /// (all caller-saved) are set again.
    pub(super) fn bulk_calls(&mut self, s: usize) -> Emit {
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
}
