//! One vector of a stage: which values the stage computes, reloads, stores and spills, their
//! registers (each freed after its last read), and the full or masked tail loads and stores.

use iced_x86::code_asm::*;

use crate::codegen::cpu::wide_asm::imp::frame::{Emit, Refusal, xmm, ymm, zmm};
use crate::codegen::cpu::wide_asm::imp::{Asm, Lanes};
use crate::codegen::kernel::{Inst, ValueId};

/// What one stage does with each value: spill it to its slot after computing it, compute it
/// (an inline operation), and the last instruction that reads it (`n`, past every one, for the
/// reduced value).
struct StageUses {
    spills: Vec<bool>,
    computes: Vec<bool>,
    last: Vec<Option<usize>>,
}

impl Asm<'_> {
    /// The tail's lane mask for `rcx` remaining elements (any count: at least a vector's
    /// worth enables every lane): `k1` on AVX-512, the mask register on AVX2.
    pub(super) fn tail_mask(&mut self) -> Emit {
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

    /// The memory of value `v`'s scratch slot at element `r11` of the tile.
    fn slot_mem(&self, v: ValueId) -> AsmMemoryOperand {
        let (k, _) = self.plan.slot[v].expect("a slot");
        rsp + r11 * 4 + (self.slots_at + self.tile_bytes * k as i32)
    }

    /// What stage `s` computes and spills, and each value's last read in it.
    fn stage_uses(&self, s: usize) -> StageUses {
        let spec = self.spec;
        let n = spec.insts.len();
        let p = &self.plan;
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
        if let Some((_, v)) = self.reduce {
            last[v] = Some(n);
        }
        StageUses {
            spills,
            computes,
            last,
        }
    }

    /// One vector of stage `s` at element `r11` of the tile: the loads, reloads and
    /// operations the stage needs, its stores and its spills to scratch slots. A
    /// reduction's body answers the register holding the reduced value.
    pub(super) fn body(&mut self, s: usize, lanes: Lanes) -> Emit<Option<u8>> {
        let spec = self.spec;
        let n = spec.insts.len();
        let StageUses {
            spills,
            computes,
            last,
        } = self.stage_uses(s);
        let result = self.reduce.map(|(_, v)| v);
        let p = &self.plan;
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
                    if self.plan.stage[*value] == s && self.plan.direct_out[*value].is_none() =>
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

    pub(super) fn load(&mut self, d: u8, mem: AsmMemoryOperand, lanes: Lanes) -> Emit {
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

    pub(super) fn store(&mut self, mem: AsmMemoryOperand, v: u8, lanes: Lanes) -> Emit {
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
}
