//! The pointwise loop nest: the kernel's prologue and epilogue, row segments of the flattened
//! range over one or two loop dims, tiles of a staged kernel, and each stage's walk over a tile
//! in full vectors and a masked tail.

use iced_x86::code_asm::*;

use crate::codegen::cpu::args::offsets;
use crate::codegen::cpu::wide_asm::imp::frame::{
    COL, END, Emit, INNER, PAGE, PARAMS, POS, REM, SAVED, SEG, row_slot, stride_slot,
};
use crate::codegen::cpu::wide_asm::imp::{Asm, Lanes};

impl Asm<'_> {
    pub(super) fn kernel(&mut self) -> Emit {
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
    pub(super) fn prologue(&mut self, done: CodeLabel) -> Emit {
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
    pub(super) fn row_addresses(&mut self) -> Emit {
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
    pub(super) fn next_row_addresses(&mut self) -> Emit {
        for k in 0..self.layout.classes.len() {
            self.a.mov(rax, qword_ptr(rsp + stride_slot(k)))?;
            self.a.add(qword_ptr(rsp + row_slot(k)), rax)?;
        }
        Ok(())
    }

    /// Places `done`: restores the frame and returns; then the constant data.
    pub(super) fn epilogue(&mut self, done: &mut CodeLabel) -> Emit {
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
}
