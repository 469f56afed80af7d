//! Operand access: element addresses by stride class, scalar and vector loads and stores in each
//! dtype's register representation, the values hoisted per row, the scalar arguments, and the
//! scratch slots a staged kernel reads outlined values from.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I8, I16X8, I32, I64, I64X2};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use tensorplay_ir::{DType, Result};

use crate::codegen::cpu::emit::{Emitter, Hoisted, Row, data_flags, internal};
use crate::codegen::cpu::types::{Buf, Lanes};
use crate::codegen::kernel::{Inst, StrideClass};

impl<'a, 'b> Emitter<'a, 'b> {
    /// Address and immediate offset of element `i + k` of operand `op` in `row`.
    fn elem_addr(&mut self, row: &Row, op: usize, i: Value, k: i64) -> (Value, i32) {
        let size = self.operand_dtype(op).size() as i64;
        let base = row.base[op];
        match self.layout.classes[op] {
            StrideClass::Unit => {
                let off = self.fb.ins().ishl_imm_s(i, size.trailing_zeros() as i64);
                (self.fb.ins().iadd(base, off), (k * size) as i32)
            }
            StrideClass::Strided => {
                let ii = if k == 0 {
                    i
                } else {
                    self.fb.ins().iadd_imm_s(i, k)
                };
                let off = self.fb.ins().imul(ii, self.inner_bytes[op]);
                (self.fb.ins().iadd(base, off), 0)
            }
            StrideClass::Zero => (base, 0),
        }
    }

    /// Loads one element of `dtype` at `addr + off`, in its scalar representation.
    fn load_scalar(&mut self, dtype: DType, addr: Value, off: i32) -> Value {
        let fl = data_flags();
        match dtype {
            DType::F32 => self.fb.ins().load(F32, fl, addr, off),
            DType::F64 => self.fb.ins().load(F64, fl, addr, off),
            DType::I32 => self.fb.ins().load(I32, fl, addr, off),
            DType::I64 => self.fb.ins().load(I64, fl, addr, off),
            DType::Bool => self.fb.ins().load(I8, fl, addr, off),
            DType::F16 => {
                let h = self.fb.ins().uload16(I32, fl, addr, off);
                self.f16_bits_to_f32(h)
            }
            DType::BF16 => {
                let h = self.fb.ins().uload16(I32, fl, addr, off);
                self.bf16_bits_to_f32(h)
            }
        }
    }

    /// Stores one element of `dtype` (given in its scalar representation) at `addr + off`.
    pub(crate) fn store_scalar(&mut self, dtype: DType, v: Value, addr: Value, off: i32) {
        let fl = data_flags();
        match dtype {
            DType::F16 => {
                let h = self.f32_to_f16_bits(v);
                self.fb.ins().istore16(fl, h, addr, off);
            }
            DType::BF16 => {
                let h = self.f32_to_bf16_bits(v);
                self.fb.ins().istore16(fl, h, addr, off);
            }
            _ => {
                self.fb.ins().store(fl, v, addr, off);
            }
        }
    }

    /// A vector from per-lane scalar values (floats, or bools turned into a lane mask).
    fn build_vector(&mut self, dtype: DType, lanes: Vec<Value>) -> Result<Value> {
        let vty = self.repr(dtype, true)?;
        if dtype == DType::Bool {
            let lane_ty = vty.lane_type();
            let ext: Vec<Value> = lanes
                .into_iter()
                .map(|l| self.fb.ins().uextend(lane_ty, l))
                .collect();
            let mut v = self.fb.ins().splat(vty, ext[0]);
            for (j, &x) in ext.iter().enumerate().skip(1) {
                v = self.fb.ins().insertlane(v, x, j as u8);
            }
            let zero = self.iconst(vty, 0);
            return Ok(self.fb.ins().icmp(IntCC::NotEqual, v, zero));
        }
        let mut v = self.fb.ins().splat(vty, lanes[0]);
        for (j, &x) in lanes.iter().enumerate().skip(1) {
            v = self.fb.ins().insertlane(v, x, j as u8);
        }
        Ok(v)
    }

    /// The scalar lanes of a vector value of `dtype` (bool masks become i8 0/1).
    fn split_vector(&mut self, dtype: DType, v: Value) -> Vec<Value> {
        let n = self.lanes.count() as u8;
        (0..n)
            .map(|j| {
                let x = self.fb.ins().extractlane(v, j);
                if dtype == DType::Bool {
                    let one = self.iconst(self.ty_of(x), 1);
                    let b = self.fb.ins().band(x, one);
                    self.fb.ins().ireduce(I8, b)
                } else {
                    x
                }
            })
            .collect()
    }

    /// Loads input `input` at element `i + k` of the row (a vector of lanes `i + k ..` when
    /// `vector`), in its register representation; inputs hoisted for the row come from the
    /// hoist.
    pub(super) fn load_input(
        &mut self,
        row: &Row,
        input: usize,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        if let Some((s, v)) = row.hoisted[input] {
            return if vector {
                v.ok_or_else(|| internal("hoisted input has no vector form"))
            } else {
                Ok(s)
            };
        }
        let dtype = self.spec.inputs[input];
        self.load_operand(row, input, dtype, i, k, vector)
    }

    /// Loads operand `op` (of `dtype`) at element `i + k` of the row, by its stride class.
    pub(crate) fn load_operand(
        &mut self,
        row: &Row,
        op: usize,
        dtype: DType,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        if !vector {
            let (addr, off) = self.elem_addr(row, op, i, k);
            return Ok(self.load_scalar(dtype, addr, off));
        }
        let class = self.layout.classes[op];
        let fl = data_flags();
        if class == StrideClass::Unit && dtype != DType::Bool {
            let (addr, off) = self.elem_addr(row, op, i, k);
            return Ok(match dtype {
                DType::F32 => self.fb.ins().load(F32X4, fl, addr, off),
                DType::F64 => self.fb.ins().load(F64X2, fl, addr, off),
                DType::F16 => {
                    let h = self.fb.ins().uload16x4(fl, addr, off);
                    self.f16_bits_to_f32(h)
                }
                DType::BF16 => {
                    let h = self.fb.ins().uload16x4(fl, addr, off);
                    self.bf16_bits_to_f32(h)
                }
                other => return Err(internal(format!("vector load of {other}"))),
            });
        }
        if class == StrideClass::Zero {
            let s = self.load_scalar(dtype, row.base[op], 0);
            return self.build_vector(dtype, vec![s; self.lanes.count() as usize]);
        }
        let mut lanes = Vec::new();
        for j in 0..self.lanes.count() {
            let (addr, off) = self.elem_addr(row, op, i, k + j);
            lanes.push(self.load_scalar(dtype, addr, off));
        }
        self.build_vector(dtype, lanes)
    }

    /// Stores `v` to output `output` at element `i + k` of the row (lanes `i + k ..` when
    /// `vector`).
    pub(crate) fn store_output(
        &mut self,
        row: &Row,
        output: usize,
        i: Value,
        k: i64,
        vector: bool,
        v: Value,
    ) -> Result<()> {
        let op = self.spec.inputs.len() + output;
        let dtype = self.spec.outputs[output];
        if !vector {
            let (addr, off) = self.elem_addr(row, op, i, k);
            self.store_scalar(dtype, v, addr, off);
            return Ok(());
        }
        let fl = data_flags();
        if self.layout.classes[op] == StrideClass::Unit && dtype != DType::Bool {
            let (addr, off) = self.elem_addr(row, op, i, k);
            match dtype {
                DType::F32 | DType::F64 => {
                    self.fb.ins().store(fl, v, addr, off);
                }
                DType::F16 | DType::BF16 => {
                    let h = if dtype == DType::F16 {
                        self.f32_to_f16_bits(v)
                    } else {
                        self.f32_to_bf16_bits(v)
                    };
                    let packed = self.fb.ins().unarrow(h, h);
                    debug_assert_eq!(self.ty_of(packed), I16X8);
                    let q = self.bitcast(I64X2, packed);
                    let low = self.fb.ins().extractlane(q, 0);
                    self.fb.ins().store(fl, low, addr, off);
                }
                other => return Err(internal(format!("vector store of {other}"))),
            }
            return Ok(());
        }
        let parts = self.split_vector(dtype, v);
        for (j, x) in parts.into_iter().enumerate() {
            let (addr, off) = self.elem_addr(row, op, i, k + j as i64);
            self.store_scalar(dtype, x, addr, off);
        }
        Ok(())
    }

    /// Loads the inputs that are constant along the inner dim (class `Zero`) at the row's base,
    /// then the live scalar arguments. Rows hold no calls (a staged kernel's bulk calls come
    /// between its stages' rows), so these registers are never spilled around one.
    pub(crate) fn hoist(&mut self, base: &[Value]) -> Result<Vec<Hoisted>> {
        let mut out = Vec::with_capacity(self.spec.inputs.len());
        let loaded: Vec<bool> = (0..self.spec.inputs.len())
            .map(|k| {
                self.spec.insts.iter().enumerate().any(|(i, inst)| {
                    self.live[i] && matches!(inst, Inst::Load { input } if *input == k)
                })
            })
            .collect();
        for (input, &used) in loaded.iter().enumerate() {
            if !used || self.layout.classes[input] != StrideClass::Zero {
                out.push(None);
                continue;
            }
            let dtype = self.spec.inputs[input];
            let s = self.load_scalar(dtype, base[input], 0);
            let v = if self.lanes == Lanes::Scalar {
                None
            } else if dtype == DType::Bool {
                let vty = self.repr(DType::Bool, true)?;
                let lane = self.fb.ins().uextend(vty.lane_type(), s);
                let spl = self.fb.ins().splat(vty, lane);
                let zero = self.iconst(vty, 0);
                Some(self.fb.ins().icmp(IntCC::NotEqual, spl, zero))
            } else {
                let vty = self.repr(dtype, true)?;
                Some(self.fb.ins().splat(vty, s))
            };
            out.push(Some((s, v)));
        }
        let vector = self.lanes != Lanes::Scalar;
        for (k, inst) in self.spec.insts.iter().enumerate() {
            if let Inst::Param { index, dtype } = *inst {
                let h = if self.live[k] {
                    let s = self.param(index, dtype, false)?;
                    let v = if vector && (dtype.is_float() || dtype == DType::Bool) {
                        Some(self.vector_param(s, dtype)?)
                    } else {
                        None
                    };
                    Some((s, v))
                } else {
                    None
                };
                out.push(h);
            }
        }
        Ok(out)
    }

    /// Scalar argument `index` in its register representation, read from its 8-byte slot (the
    /// value in the low bytes, see [`ScalarArgs`](crate::codegen::cpu::ScalarArgs)) here. Rows
    /// read their arguments once ([`hoist`](Self::hoist)); the slot is deliberately not marked
    /// read-only, so Cranelift does not hoist the read further, out of every loop: a
    /// kernel-wide value occupies a vector register across the bulk calls of a staged kernel
    /// and is spilled and reloaded around each (measured: W1 15–25 % slower).
    pub(super) fn param(&mut self, index: usize, dtype: DType, vector: bool) -> Result<Value> {
        let flags = MemFlagsData::trusted();
        let off = i32::try_from(index * 8)
            .map_err(|_| internal(format!("param {index} is out of range")))?;
        let s = match dtype {
            DType::Bool => {
                let b = self.fb.ins().load(I8, flags, self.params, off);
                // Any nonzero byte is true; normalise to 0/1.
                let zero = self.fb.ins().iconst(I8, 0);
                self.fb.ins().icmp(IntCC::NotEqual, b, zero)
            }
            d => {
                let ty = self.repr(d, false)?;
                self.fb.ins().load(ty, flags, self.params, off)
            }
        };
        if !vector {
            return Ok(s);
        }
        self.vector_param(s, dtype)
    }

    /// The vector form of a scalar argument's value `s`.
    fn vector_param(&mut self, s: Value, dtype: DType) -> Result<Value> {
        let vty = self.repr(dtype, true)?;
        Ok(if dtype == DType::Bool {
            let lane = self.fb.ins().uextend(vty.lane_type(), s);
            let spl = self.fb.ins().splat(vty, lane);
            let zero = self.iconst(vty, 0);
            self.fb.ins().icmp(IntCC::NotEqual, spl, zero)
        } else {
            self.fb.ins().splat(vty, s)
        })
    }

    /// The address of element `i + k` of scratch slot `slot` in the current segment.
    pub(crate) fn slot_addr(&mut self, slot: usize, i: Value, k: i64) -> Result<(Value, i32)> {
        let row = self
            .scratch_row
            .ok_or_else(|| internal("scratch read outside a staged kernel"))?;
        let off = self.fb.ins().ishl_imm_s(i, 2);
        let addr = self.fb.ins().iadd(row, off);
        Ok((addr, (slot as i64 * self.slot_bytes + k * 4) as i32))
    }

    /// Loads an outlined value (f32) at element `i + k` of the segment from `buf`.
    pub(super) fn load_staged(
        &mut self,
        row: &Row,
        buf: Buf,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        match buf {
            Buf::Operand(op) => self.load_operand(row, op, DType::F32, i, k, vector),
            Buf::Slot(slot) => {
                let (addr, off) = self.slot_addr(slot, i, k)?;
                let ty = if vector { F32X4 } else { F32 };
                Ok(self
                    .fb
                    .ins()
                    .load(ty, MemFlagsData::new().with_notrap(), addr, off))
            }
        }
    }
}
