//! The registers fixed for a whole kernel or row: constants, parameters and helpers (set at the
//! start and again after bulk calls) and the inputs broadcast along the inner dim (per row).

use iced_x86::code_asm::*;

use crate::codegen::cpu::wide_asm::imp::Asm;
use crate::codegen::cpu::wide_asm::imp::frame::{Emit, PARAMS, row_slot, xmm, ymm, zmm};
use crate::codegen::kernel::{Inst, Lit};

impl Asm<'_> {
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
    pub(super) fn fixed_values(&mut self) -> Emit {
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
    pub(super) fn row_broadcasts(&mut self) -> Emit {
        for i in 0..self.spec.insts.len() {
            if let (Inst::Load { input }, Some(r)) = (&self.spec.insts[i], self.plan.fixed[i]) {
                self.a.mov(rax, qword_ptr(rsp + row_slot(*input)))?;
                self.broadcast_mem(r, qword_ptr(rax))?;
            }
        }
        Ok(())
    }
}
