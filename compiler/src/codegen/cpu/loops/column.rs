//! Column reductions (`layout.kept_inner`): panels of kept points whose accumulators live in a
//! stack buffer, the reduced points streamed into them row by row, and their finalized values.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I64};
use cranelift_codegen::ir::{
    Block, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value,
};
use tensorplay_ir::{DType, ReduceOp, Result};

use crate::codegen::cpu::emit::{Emitter, Row};
use crate::codegen::cpu::loops::reduce::Acc;
use crate::codegen::cpu::loops::{PANEL, internal};
use crate::codegen::cpu::math::{demote_combine, promote_halves};
use crate::codegen::cpu::types::Lanes;

impl<'a, 'b> Emitter<'a, 'b> {
    /// Column mode (`layout.kept_inner`): the loop dims are `[kept outer.., reduced..,
    /// kept inner]`; `[start, end)` ranges over kept points. Each row segment of kept points is
    /// cut into panels of [`PANEL`] columns whose accumulators live in a stack buffer (in L1); for
    /// every reduced point the panel's contiguous run of input is streamed into the buffer with
    /// the usual 4-vector loop. So strided reductions such as `sum(dim=0)` of a row-major matrix
    /// read memory row by row. Float sums accumulate in f64; float extrema propagate NaN.
    pub(super) fn column_reduce(&mut self, exit: Block, op: ReduceOp, value: usize) -> Result<()> {
        let d = self
            .spec
            .value_dtype(value)
            .ok_or_else(|| internal("reduced value has no dtype"))?;
        let acc = Self::acc_kind(op, d);
        let wide = acc == Acc::FloatSum;
        let scalar_ty = self.repr(d, false)?;
        let buf_ty = if wide { F64 } else { scalar_ty };
        let esize = buf_ty.bytes() as i64;
        let slot = self.fb.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (PANEL * esize) as u32,
            4,
        ));
        let outer = self.layout.dims - self.layout.reduced - 1;
        let first = outer;
        self.segments(exit, outer, &mut |e, base, n| {
            let buf = e.fb.ins().stack_addr(I64, slot, 0);
            let zero = e.fb.ins().iconst(I64, 0);
            let bound = e.fb.ins().iadd_imm_s(n, PANEL - 1);
            e.strip(zero, bound, PANEL, &[], &mut |e, p0, _| {
                let rest = e.fb.ins().isub(n, p0);
                let panel = e.fb.ins().iconst(I64, PANEL);
                let pn = e.fb.ins().smin(rest, panel);
                let z = e.fb.ins().iconst(I64, 0);
                // Initialize the accumulators.
                e.run(z, pn, Vec::new(), &mut |e, j, k, vector, _, _| {
                    let ty = e.acc_type(wide, d, vector)?;
                    let id = e.identity(acc, ty);
                    e.buf_store(buf, esize, j, k, vector, wide, &[id, id])
                })?;
                // Stream every reduced point's panel into them.
                e.column_nest(first, acc, value, d, &base, buf, esize, p0, pn)?;
                // Finalize and store.
                let out_row = Row {
                    base: base.clone(),
                    hoisted: vec![None; e.spec.inputs.len()],
                };
                e.run(z, pn, Vec::new(), &mut |e, j, k, vector, _, _| {
                    let parts = e.buf_load(buf, esize, j, k, vector, wide, d)?;
                    let v = e.column_finish(op, wide, d, vector, parts)?;
                    let i = e.fb.ins().iadd(p0, j);
                    e.store_output(&out_row, 0, i, k, vector, v)
                })?;
                Ok(Vec::new())
            })?;
            Ok(())
        })
    }

    /// The accumulator register type of a column buffer entry group.
    fn acc_type(&self, wide: bool, d: DType, vector: bool) -> Result<Type> {
        Ok(match (wide, vector) {
            (true, true) => F64X2,
            (true, false) => F64,
            (false, v) => self.repr(d, v)?,
        })
    }

    /// How many accumulator registers one value spans (an f32x4 sum widens into two f64x2).
    fn acc_parts(&self, wide: bool, vector: bool) -> usize {
        if wide && vector && self.lanes == Lanes::F32x4 {
            2
        } else {
            1
        }
    }

    /// Loads the accumulators of buffer entries `j + k ..`.
    #[allow(clippy::too_many_arguments)]
    fn buf_load(
        &mut self,
        buf: Value,
        esize: i64,
        j: Value,
        k: i64,
        vector: bool,
        wide: bool,
        d: DType,
    ) -> Result<Vec<Value>> {
        let ty = self.acc_type(wide, d, vector)?;
        let off = self.fb.ins().ishl_imm_s(j, esize.trailing_zeros() as i64);
        let addr = self.fb.ins().iadd(buf, off);
        let fl = MemFlagsData::trusted();
        Ok((0..self.acc_parts(wide, vector) as i64)
            .map(|p| {
                let o = ((k + 2 * p) * esize) as i32;
                self.fb.ins().load(ty, fl, addr, o)
            })
            .collect())
    }

    /// Stores accumulators to buffer entries `j + k ..`.
    #[allow(clippy::too_many_arguments)]
    fn buf_store(
        &mut self,
        buf: Value,
        esize: i64,
        j: Value,
        k: i64,
        vector: bool,
        wide: bool,
        vals: &[Value],
    ) -> Result<()> {
        let off = self.fb.ins().ishl_imm_s(j, esize.trailing_zeros() as i64);
        let addr = self.fb.ins().iadd(buf, off);
        let fl = MemFlagsData::trusted();
        for (p, &v) in vals.iter().take(self.acc_parts(wide, vector)).enumerate() {
            let o = ((k + 2 * p as i64) * esize) as i32;
            self.fb.ins().store(fl, v, addr, o);
        }
        Ok(())
    }

    /// The finalized value of a buffer entry group (mean scaling, narrowing of f64 sums).
    fn column_finish(
        &mut self,
        op: ReduceOp,
        wide: bool,
        d: DType,
        vector: bool,
        mut parts: Vec<Value>,
    ) -> Result<Value> {
        if !wide {
            return Ok(parts[0]);
        }
        if op == ReduceOp::Mean {
            let cnt = self.reduced_count();
            let cf = self.fb.ins().fcvt_from_sint(F64, cnt);
            let one = self.fb.ins().f64const(1.0);
            let scale = self.fb.ins().fdiv(one, cf);
            let scale = if vector {
                self.fb.ins().splat(F64X2, scale)
            } else {
                scale
            };
            for p in parts.iter_mut() {
                *p = self.fb.ins().fmul(*p, scale);
            }
        }
        let vty = self.repr(d, vector)?;
        Ok(match vty {
            F32X4 => demote_combine(self.fb, parts[0], parts[1]),
            F32 => self.fb.ins().fdemote(F32, parts[0]),
            _ => parts[0],
        })
    }

    /// The reduced-dim loops of a column panel (state: the input bases, stepping by each reduced
    /// dim's byte stride); at each reduced point the panel's values update the buffer.
    #[allow(clippy::too_many_arguments)]
    fn column_nest(
        &mut self,
        dim: usize,
        acc: Acc,
        value: usize,
        d: DType,
        base: &[Value],
        buf: Value,
        esize: i64,
        p0: Value,
        pn: Value,
    ) -> Result<()> {
        let nin = self.spec.inputs.len();
        let last = self.layout.dims - 2;
        let wide = acc == Acc::FloatSum;
        let n = self.shape[dim];
        let bases: Vec<Value> = base[..nin].to_vec();
        self.for_range(n, &bases, &mut |e, _, st| {
            let mut here: Vec<Value> = st.to_vec();
            here.extend_from_slice(&base[nin..]);
            if dim < last {
                e.column_nest(dim + 1, acc, value, d, &here, buf, esize, p0, pn)?;
            } else {
                let hoisted = e.hoist(&here)?;
                let row = Row {
                    base: here.clone(),
                    hoisted,
                };
                let z = e.fb.ins().iconst(I64, 0);
                e.run(z, pn, Vec::new(), &mut |e, j, k, vector, _, _| {
                    let i = e.fb.ins().iadd(p0, j);
                    let v = e.reduce_value(value, acc, &row, i, k, vector)?;
                    let old = e.buf_load(buf, esize, j, k, vector, wide, d)?;
                    let new = if wide {
                        if e.ty_of(v) == F32X4 {
                            let (lo, hi) = promote_halves(e.fb, v);
                            vec![e.fb.ins().fadd(old[0], lo), e.fb.ins().fadd(old[1], hi)]
                        } else {
                            let w = e.widen_f64(v);
                            vec![e.fb.ins().fadd(old[0], w)]
                        }
                    } else if matches!(acc, Acc::FloatMax | Acc::FloatMin) {
                        // NaN-sticky: a NaN value replaces the accumulator, and a NaN
                        // accumulator never compares below or above anything.
                        let cc = if acc == Acc::FloatMax {
                            FloatCC::GreaterThan
                        } else {
                            FloatCC::LessThan
                        };
                        let better = e.fb.ins().fcmp(cc, v, old[0]);
                        let nan = e.fb.ins().fcmp(FloatCC::Unordered, v, v);
                        let take = e.fb.ins().bor(better, nan);
                        vec![e.select(take, v, old[0])]
                    } else {
                        vec![e.combine(acc, old[0], v)]
                    };
                    e.buf_store(buf, esize, j, k, vector, wide, &new)
                })?;
            }
            // Step the input bases along this reduced dim.
            Ok((0..nin)
                .map(|op| {
                    let size = e.operand_dtype(op).size() as i64;
                    let sb = e.fb.ins().imul_imm_s(e.strides[op][dim], size);
                    e.fb.ins().iadd(st[op], sb)
                })
                .collect())
        })?;
        Ok(())
    }
}
