//! Row sums and means of f32 rows, in the accumulation order of Cranelift's reduction kernels:
//! 32 lanes per block of 4096 elements (two zmm or four ymm accumulators), the block's last
//! partial vectors through memory, the lanes combined in a fixed order into an f64 total.

use iced_x86::code_asm::*;
use tensorplay_ir::ReduceOp;

use crate::codegen::cpu::args::offsets;
use crate::codegen::cpu::wide_asm::imp::frame::{
    END, Emit, INNER, PARTIALS_AT, POS, REST, SUM_BLOCK, SUM_LANES, TOTAL, row_slot, xmm, ymm, zmm,
};
use crate::codegen::cpu::wide_asm::imp::{Asm, Lanes};

/// The labels of a row-sum kernel.
struct SumLabels {
    done: CodeLabel,
    row: CodeLabel,
    block: CodeLabel,
    main: CodeLabel,
    rest: CodeLabel,
    combine: CodeLabel,
    chunks: CodeLabel,
    scalars: CodeLabel,
    scalar: CodeLabel,
    groups: CodeLabel,
    finish: CodeLabel,
    finalize: CodeLabel,
    next: CodeLabel,
}

impl Asm<'_> {
    /// A sum or mean of each row in `[start, end)` (loop dims `[kept, reduced]`), in the
    /// order of the Cranelift kernel: per block of `SUM_BLOCK` elements, `SUM_LANES`
    /// lanes (the accumulator registers side by side) add groups of `SUM_LANES` elements;
    /// the block's last partial vectors are computed masked into memory, their groups of
    /// four added to lanes 0..4, the rest one by one into a scalar; the lane groups of four
    /// are then added in order, their four lanes in order, the scalar last, and the block's
    /// f32 sum is added to the row's f64 total. The total goes to `partials[row]` when
    /// `partials` is set, else (divided by the row length for a mean) to the output.
    pub(super) fn reduce_kernel(&mut self, op: ReduceOp) -> Emit {
        let nops = self.layout.classes.len();
        let [
            done,
            row,
            block,
            main,
            rest,
            combine,
            chunks,
            scalars,
            scalar,
            groups,
            finish,
            finalize,
            next,
        ]: [CodeLabel; 13] = std::array::from_fn(|_| self.a.create_label());
        let mut l = SumLabels {
            done,
            row,
            block,
            main,
            rest,
            combine,
            chunks,
            scalars,
            scalar,
            groups,
            finish,
            finalize,
            next,
        };

        self.prologue(l.done)?;
        self.a.mov(rax, qword_ptr(r10 + offsets::PARTIALS))?;
        self.a.mov(qword_ptr(rsp + PARTIALS_AT), rax)?;
        self.a.mov(rax, qword_ptr(r9 + 8))?;
        self.a.mov(qword_ptr(rsp + INNER), rax)?;
        self.a.mov(rcx, qword_ptr(rsp + POS))?;
        self.row_addresses()?;
        self.fixed_values()?;

        // One row: r11 walks its r9 elements.
        self.a.set_label(&mut l.row)?;
        for k in 0..nops {
            if let Some(p) = self.ptr_reg[k] {
                self.a.mov(p, qword_ptr(rsp + row_slot(k)))?;
            }
        }
        self.row_broadcasts()?;
        self.a.mov(qword_ptr(rsp + TOTAL), 0)?;
        self.a.xor(r11d, r11d)?;
        self.a.mov(r9, qword_ptr(rsp + INNER))?;

        self.sum_block_groups(&mut l)?;
        self.sum_block_rest(&mut l)?;
        self.combine_block_rest(&mut l)?;
        self.add_block_to_total(&mut l)?;
        self.row_result(op, &mut l)?;

        // Next row.
        self.a.set_label(&mut l.next)?;
        self.a.mov(rax, qword_ptr(rsp + POS))?;
        self.a.inc(rax)?;
        self.a.mov(qword_ptr(rsp + POS), rax)?;
        self.a.cmp(rax, qword_ptr(rsp + END))?;
        self.a.jge(l.done)?;
        self.next_row_addresses()?;
        self.a.jmp(l.row)?;

        self.epilogue(&mut l.done)
    }

    /// One block: `[r11, r10 = min(r11 + SUM_BLOCK, r9))`; its full groups of `SUM_LANES`
    /// elements, up to `rcx`, into the accumulators.
    fn sum_block_groups(&mut self, l: &mut SumLabels) -> Emit {
        let lanes = self.lanes as i32;
        let accs = self.accs.clone();
        self.a.set_label(&mut l.block)?;
        self.a.cmp(r11, r9)?;
        self.a.jae(l.finish)?;
        self.a.lea(r10, qword_ptr(r11 + SUM_BLOCK))?;
        self.a.cmp(r10, r9)?;
        self.a.cmova(r10, r9)?;
        for &acc in &accs {
            vop!(self, vxorps, acc, acc, acc)?;
        }
        self.a.mov(rcx, r10)?;
        self.a.and(rcx, -(SUM_LANES as i32))?;
        self.a.cmp(r11, rcx)?;
        self.a.jae(l.rest)?;
        self.a.set_label(&mut l.main)?;
        for &acc in &accs {
            let v = self.body(0, Lanes::Full)?.expect("the reduced value");
            vop!(self, vaddps, acc, acc, v)?;
            self.a.add(r11, lanes)?;
        }
        self.a.cmp(r11, rcx)?;
        self.a.jb(l.main)?;
        Ok(())
    }

    /// The block's last `r10 - r11 < SUM_LANES` elements, computed into memory.
    fn sum_block_rest(&mut self, l: &mut SumLabels) -> Emit {
        let lanes = self.lanes as i32;
        let rest_at = self.sums_at + 4 * SUM_LANES as i32;
        self.a.set_label(&mut l.rest)?;
        self.a.mov(qword_ptr(rsp + REST), r11)?;
        for u in 0..self.accs.len() as i32 {
            self.a.cmp(r11, r10)?;
            self.a.jae(l.combine)?;
            self.a.mov(rcx, r10)?;
            self.a.sub(rcx, r11)?;
            self.tail_mask()?;
            let v = self.body(0, Lanes::Tail)?.expect("the reduced value");
            self.store(rsp + (rest_at + 4 * lanes * u), v, Lanes::Full)?;
            self.a.add(r11, lanes)?;
        }
        Ok(())
    }

    /// Combine: the accumulators to memory, lane groups of four in xmm registers; the rest's
    /// groups of four into lanes 0..4, its last elements into a scalar.
    fn combine_block_rest(&mut self, l: &mut SumLabels) -> Emit {
        let lanes = self.lanes as i32;
        let accs = self.accs.clone();
        let [t0, t1, _, _] = self.temps;
        let sums = self.sums_at;
        let rest_at = sums + 4 * SUM_LANES as i32;
        self.a.set_label(&mut l.combine)?;
        for (u, &acc) in accs.iter().enumerate() {
            self.store(rsp + (sums + 4 * lanes * u as i32), acc, Lanes::Full)?;
        }
        self.a.mov(rax, r10)?;
        self.a.sub(rax, qword_ptr(rsp + REST))?;
        self.a.mov(r11, r10)?;
        self.a.vmovups(xmm(t0), xmmword_ptr(rsp + sums))?;
        // Groups of four of the rest into lanes 0..4 (rdx: elements of the rest used).
        self.a.xor(edx, edx)?;
        self.a.set_label(&mut l.chunks)?;
        self.a.lea(rcx, qword_ptr(rdx + 4))?;
        self.a.cmp(rcx, rax)?;
        self.a.ja(l.scalars)?;
        self.a
            .vaddps(xmm(t0), xmm(t0), xmmword_ptr(rsp + rdx * 4 + rest_at))?;
        self.a.mov(rdx, rcx)?;
        self.a.jmp(l.chunks)?;
        // The rest's last elements into a scalar.
        self.a.set_label(&mut l.scalars)?;
        self.a.vxorps(xmm(t1), xmm(t1), xmm(t1))?;
        self.a.set_label(&mut l.scalar)?;
        self.a.cmp(rdx, rax)?;
        self.a.jae(l.groups)?;
        self.a
            .vaddss(xmm(t1), xmm(t1), dword_ptr(rsp + rdx * 4 + rest_at))?;
        self.a.inc(rdx)?;
        self.a.jmp(l.scalar)?;
        Ok(())
    }

    /// The other lane groups of four added in order, then lanes 0, 1, 2, 3 in order and the
    /// scalar; the block's sum into the f64 total, and on to the next block.
    fn add_block_to_total(&mut self, l: &mut SumLabels) -> Emit {
        let [t0, t1, t2, t3] = self.temps;
        let sums = self.sums_at;
        self.a.set_label(&mut l.groups)?;
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
        self.a.jmp(l.block)?;
        Ok(())
    }

    /// The row's result: raw to `partials[row]`, or finalized (a mean divided by the row
    /// length) to the output.
    fn row_result(&mut self, op: ReduceOp, l: &mut SumLabels) -> Emit {
        let out = self.spec.inputs.len();
        let [t0, t1, t2, _] = self.temps;
        self.a.set_label(&mut l.finish)?;
        self.a.vmovsd(xmm(t0), qword_ptr(rsp + TOTAL))?;
        self.a.mov(rax, qword_ptr(rsp + PARTIALS_AT))?;
        self.a.test(rax, rax)?;
        self.a.jz(l.finalize)?;
        self.a.mov(rcx, qword_ptr(rsp + POS))?;
        self.a.vmovsd(qword_ptr(rax + rcx * 8), xmm(t0))?;
        self.a.jmp(l.next)?;
        self.a.set_label(&mut l.finalize)?;
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
        Ok(())
    }
}
