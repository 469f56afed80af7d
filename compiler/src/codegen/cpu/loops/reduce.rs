//! Row reductions: how each reduction accumulates ([`Acc`]), the strip-mined accumulation of a
//! run into vector lanes, the nest over the reduced dims, float sums in blocks with an f64 total,
//! and the row's result (raw to `partials`, or finalized to the output).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F64, I8, I32, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value};
use tensorplay_ir::{DType, ReduceOp, Result};

use crate::codegen::cpu::emit::{Emitter, Row};
use crate::codegen::cpu::loops::{MapFn, SUM_BLOCK, SUM_UNROLL, UNROLL, internal};
use crate::codegen::cpu::types::Lanes;

/// How a reduction accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Acc {
    FloatSum,
    FloatProd,
    FloatMax,
    FloatMin,
    IntSum,
    IntProd,
    IntMax,
    IntMin,
}

impl<'a, 'b> Emitter<'a, 'b> {
    pub(super) fn acc_kind(op: ReduceOp, d: DType) -> Acc {
        match (op, d.is_float()) {
            (ReduceOp::Sum | ReduceOp::Mean, true) => Acc::FloatSum,
            (ReduceOp::Prod, true) => Acc::FloatProd,
            (ReduceOp::Amax, true) => Acc::FloatMax,
            (ReduceOp::Amin, true) => Acc::FloatMin,
            (ReduceOp::Sum | ReduceOp::Mean, false) => Acc::IntSum,
            (ReduceOp::Prod, false) => Acc::IntProd,
            (ReduceOp::Amax, false) => Acc::IntMax,
            (ReduceOp::Amin, false) => Acc::IntMin,
        }
    }

    /// The value being reduced at element `i + k`, widened to i64 for integer accumulations.
    pub(super) fn reduce_value(
        &mut self,
        value: usize,
        acc: Acc,
        row: &Row,
        i: Value,
        k: i64,
        vector: bool,
    ) -> Result<Value> {
        let env = self.eval(row, i, k, vector, false)?;
        let v = env[value].ok_or_else(|| internal("reduced value not evaluated"))?;
        let d = self
            .spec
            .value_dtype(value)
            .ok_or_else(|| internal("reduced value has no dtype"))?;
        Ok(match acc {
            Acc::IntSum | Acc::IntProd | Acc::IntMax | Acc::IntMin => match d {
                DType::I64 => v,
                DType::I32 => self.fb.ins().sextend(I64, v),
                _ => self.fb.ins().uextend(I64, v),
            },
            _ => v,
        })
    }

    /// Combines two partial values of accumulation `acc` (float extrema ignore NaN here; NaN
    /// is tracked separately).
    pub(super) fn combine(&mut self, acc: Acc, a: Value, b: Value) -> Value {
        match acc {
            Acc::FloatSum => self.fb.ins().fadd(a, b),
            Acc::FloatProd => self.fb.ins().fmul(a, b),
            Acc::FloatMax | Acc::FloatMin => {
                let cc = if acc == Acc::FloatMax {
                    FloatCC::GreaterThan
                } else {
                    FloatCC::LessThan
                };
                let better = self.fb.ins().fcmp(cc, b, a);
                self.select(better, b, a)
            }
            Acc::IntSum => self.fb.ins().iadd(a, b),
            Acc::IntProd => self.fb.ins().imul(a, b),
            Acc::IntMax => self.fb.ins().smax(a, b),
            Acc::IntMin => self.fb.ins().smin(a, b),
        }
    }

    /// The identity of accumulation `acc` in type `ty`.
    pub(super) fn identity(&mut self, acc: Acc, ty: Type) -> Value {
        match acc {
            Acc::FloatSum => self.fconst(ty, 0.0),
            Acc::FloatProd => self.fconst(ty, 1.0),
            Acc::FloatMax => self.fconst(ty, f64::NEG_INFINITY),
            Acc::FloatMin => self.fconst(ty, f64::INFINITY),
            Acc::IntSum => self.iconst(ty, 0),
            Acc::IntProd => self.iconst(ty, 1),
            Acc::IntMax => self.iconst(ty, i64::MIN),
            Acc::IntMin => self.iconst(ty, i64::MAX),
        }
    }

    /// Horizontal combination of a vector accumulator.
    fn horizontal(&mut self, acc: Acc, v: Value) -> Value {
        let n = self.lanes.count() as u8;
        let mut s = self.fb.ins().extractlane(v, 0);
        for j in 1..n {
            let x = self.fb.ins().extractlane(v, j);
            s = self.combine(acc, s, x);
        }
        s
    }

    /// Accumulates `value` over `[0, n)` of the current run into compute-typed lanes: returns
    /// the run's combined value (compute repr scalar) and, for float extrema, a NaN flag (i8).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accumulate(
        &mut self,
        acc: Acc,
        value: usize,
        row: &Row,
        start: Value,
        end: Value,
        compute: DType,
        map: Option<&mut MapFn<'_, 'a, 'b>>,
    ) -> Result<(Value, Option<Value>)> {
        let int = matches!(acc, Acc::IntSum | Acc::IntProd | Acc::IntMax | Acc::IntMin);
        let sty = if int { I64 } else { self.repr(compute, false)? };
        let extremum = matches!(acc, Acc::FloatMax | Acc::FloatMin);
        let vector = self.lanes != Lanes::Scalar;
        let vty = if vector {
            Some(self.repr(compute, true)?)
        } else {
            None
        };
        let mask_ty = if vector {
            Some(self.repr(DType::Bool, true)?)
        } else {
            None
        };
        // State: [v0..v_{slots-1}, s] (+ [nan_v0.., nan_s] for float extrema). Plain float
        // sums take more accumulators (see SUM_UNROLL); softmax's sum of exponentials (a
        // `map`) keeps four, its registers go to the exponential.
        let mut state = Vec::new();
        let unroll = if acc == Acc::FloatSum && map.is_none() {
            SUM_UNROLL
        } else {
            UNROLL
        };
        let slots = unroll as usize;
        for _ in 0..slots {
            if let Some(vty) = vty {
                state.push(self.identity(acc, vty));
            }
        }
        state.push(self.identity(acc, sty));
        let nvec = if vector { slots } else { 0 };
        if extremum {
            for _ in 0..nvec {
                let m = mask_ty.expect("vector kernels have a mask type");
                state.push(self.iconst(m, 0));
            }
            state.push(self.fb.ins().iconst(I8, 0));
        }
        let width = nvec + 1;
        let mut map = map;
        let st = self.run_unrolled(start, end, unroll, state, &mut |e, i, k, vec, slot, st| {
            let v = match map.as_deref_mut() {
                Some(f) => f(e, i, k, vec)?,
                None => e.reduce_value(value, acc, row, i, k, vec)?,
            };
            let idx = if vec { slot } else { nvec };
            st[idx] = e.combine(acc, st[idx], v);
            if extremum {
                let nan = e.fb.ins().fcmp(FloatCC::Unordered, v, v);
                st[width + idx] = e.fb.ins().bor(st[width + idx], nan);
            }
            Ok(())
        })?;
        let mut total = st[nvec];
        let mut nan = if extremum {
            Some(st[width + nvec])
        } else {
            None
        };
        if vector {
            let mut v = st[0];
            for &w in &st[1..slots] {
                v = self.combine(acc, v, w);
            }
            let h = self.horizontal(acc, v);
            total = self.combine(acc, h, total);
            if extremum {
                let mut m = st[width];
                for &w in &st[width + 1..width + slots] {
                    m = self.fb.ins().bor(m, w);
                }
                let any = self.fb.ins().vany_true(m);
                let n = nan.expect("extremum tracks NaN");
                nan = Some(self.fb.ins().bor(n, any));
            }
        }
        Ok((total, nan))
    }

    /// One reduction row: reduce over the reduced loop dims from the kept point `base`, then
    /// store the finalized value (or the raw accumulator when `partials` is set).
    pub(super) fn reduce_row(
        &mut self,
        op: ReduceOp,
        value: usize,
        base: Vec<Value>,
        idx: Value,
    ) -> Result<()> {
        let d = self
            .spec
            .value_dtype(value)
            .ok_or_else(|| internal("reduced value has no dtype"))?;
        let acc = Self::acc_kind(op, d);
        let compute_ty = self.repr(d, false)?;
        // Totals: f64 for float sums/products, compute type + NaN flag for float extrema, i64
        // for integers.
        let mut totals: Vec<Value> = match acc {
            Acc::FloatSum | Acc::FloatProd => vec![self.identity(acc, F64)],
            Acc::FloatMax | Acc::FloatMin => {
                let t = self.identity(acc, compute_ty);
                vec![t, self.fb.ins().iconst(I8, 0)]
            }
            _ => vec![self.identity(acc, I64)],
        };
        let kept = self.layout.dims - self.layout.reduced;
        totals = self.reduce_nest(acc, value, d, &base, kept, Vec::new(), totals)?;
        self.finish_reduction(op, acc, d, &totals, &base, idx)
    }

    /// Nested loops over the reduced dims; the innermost one is a strip-mined run.
    #[allow(clippy::too_many_arguments)]
    fn reduce_nest(
        &mut self,
        acc: Acc,
        value: usize,
        d: DType,
        kept_base: &[Value],
        dim: usize,
        outer: Vec<(usize, Value)>,
        totals: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let last = self.layout.dims - 1;
        if dim < last {
            let n = self.shape[dim];
            return self.for_range(n, &totals, &mut |e, r, st| {
                let mut o = outer.clone();
                o.push((dim, r));
                e.reduce_nest(acc, value, d, kept_base, dim + 1, o, st.to_vec())
            });
        }
        // Row base = kept base + the outer reduced counters.
        let base: Vec<Value> = (0..self.num_operands())
            .map(|op| {
                let mut b = kept_base[op];
                for &(dd, r) in &outer {
                    let t = self.fb.ins().imul(r, self.strides[op][dd]);
                    let size = self.operand_dtype(op).size() as i64;
                    let t = self.fb.ins().ishl_imm_s(t, size.trailing_zeros() as i64);
                    b = self.fb.ins().iadd(b, t);
                }
                b
            })
            .collect();
        let hoisted = self.hoist(&base)?;
        let row = Row { base, hoisted };
        let n = self.shape[last];
        let zero = self.fb.ins().iconst(I64, 0);
        match acc {
            Acc::FloatSum => {
                let total = self.block_sum(acc, value, &row, n, d, totals[0], None)?;
                Ok(vec![total])
            }
            Acc::FloatProd => {
                let (p, _) = self.accumulate(acc, value, &row, zero, n, d, None)?;
                let p = self.widen_f64(p);
                Ok(vec![self.fb.ins().fmul(totals[0], p)])
            }
            Acc::FloatMax | Acc::FloatMin => {
                let (m, nan) = self.accumulate(acc, value, &row, zero, n, d, None)?;
                let t = self.combine(acc, totals[0], m);
                let nan = nan.ok_or_else(|| internal("extremum without NaN flag"))?;
                Ok(vec![t, self.fb.ins().bor(totals[1], nan)])
            }
            _ => {
                let (s, _) = self.accumulate(acc, value, &row, zero, n, d, None)?;
                Ok(vec![self.combine(acc, totals[0], s)])
            }
        }
    }

    pub(super) fn widen_f64(&mut self, v: Value) -> Value {
        if self.ty_of(v) == F32 {
            self.fb.ins().fpromote(F64, v)
        } else {
            v
        }
    }

    /// A float sum over `[0, n)` in blocks of [`SUM_BLOCK`] elements: each block accumulates in
    /// compute lanes, its sum is added into the f64 `total`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_sum(
        &mut self,
        acc: Acc,
        value: usize,
        row: &Row,
        n: Value,
        d: DType,
        total: Value,
        mut map: Option<&mut MapFn<'_, 'a, 'b>>,
    ) -> Result<Value> {
        let zero = self.fb.ins().iconst(I64, 0);
        // Blocks j = 0, B, 2B, ... while j < n (i.e. j + B <= n + B - 1).
        let bound = self.fb.ins().iadd_imm_s(n, SUM_BLOCK - 1);
        let (_, st) = self.strip(zero, bound, SUM_BLOCK, &[total], &mut |e, j, st| {
            let jb = e.fb.ins().iadd_imm_s(j, SUM_BLOCK);
            let bend = e.fb.ins().smin(jb, n);
            let (s, _) = e.accumulate(acc, value, row, j, bend, d, map.as_deref_mut())?;
            let s = e.widen_f64(s);
            Ok(vec![e.fb.ins().fadd(st[0], s)])
        })?;
        Ok(st[0])
    }

    /// Writes a reduction row's result: the raw accumulator to `partials[idx]` when partials
    /// are requested, else the finalized value to the output at `base`.
    fn finish_reduction(
        &mut self,
        op: ReduceOp,
        acc: Acc,
        d: DType,
        totals: &[Value],
        base: &[Value],
        idx: Value,
    ) -> Result<()> {
        // The result in its accumulation domain: f64 (floats) or i64 (integers).
        let value = match acc {
            Acc::FloatSum | Acc::FloatProd => totals[0],
            Acc::FloatMax | Acc::FloatMin => {
                let ty = self.ty_of(totals[0]);
                let nan = self.fconst(ty, f64::NAN);
                let t = self.select(totals[1], nan, totals[0]);
                self.widen_f64(t)
            }
            _ => totals[0],
        };
        let has_partials = self.fb.ins().icmp_imm_s(IntCC::NotEqual, self.partials, 0);
        let raw = self.fb.create_block();
        let fin = self.fb.create_block();
        let done = self.fb.create_block();
        self.fb.ins().brif(has_partials, raw, &[], fin, &[]);
        self.fb.switch_to_block(raw);
        self.fb.seal_block(raw);
        let off = self.fb.ins().ishl_imm_s(idx, 3);
        let addr = self.fb.ins().iadd(self.partials, off);
        self.fb
            .ins()
            .store(MemFlagsData::new().with_notrap(), value, addr, 0);
        self.fb.ins().jump(done, &[]);
        self.fb.switch_to_block(fin);
        self.fb.seal_block(fin);
        let out_dtype = self.spec.outputs[0];
        let out_op = self.spec.inputs.len();
        let value = if op == ReduceOp::Mean {
            // Eager: total * (1 / n), in f64 (a mean over nothing is 0 * inf = NaN).
            let count = self.reduced_count();
            let cf = self.fb.ins().fcvt_from_sint(F64, count);
            let one = self.fb.ins().f64const(1.0);
            let scale = self.fb.ins().fdiv(one, cf);
            self.fb.ins().fmul(value, scale)
        } else {
            value
        };
        let stored = match (acc, out_dtype) {
            (Acc::FloatSum | Acc::FloatProd | Acc::FloatMax | Acc::FloatMin, DType::F64) => value,
            (Acc::FloatSum | Acc::FloatProd | Acc::FloatMax | Acc::FloatMin, _) => {
                self.fb.ins().fdemote(F32, value)
            }
            (_, DType::I64) => value,
            (_, DType::I32) => self.fb.ins().ireduce(I32, value),
            (_, DType::Bool) => self.fb.ins().ireduce(I8, value),
            (_, other) => {
                return Err(internal(format!("integer reduction of {d} into {other}")));
            }
        };
        self.store_scalar(out_dtype, stored, base[out_op], 0);
        self.fb.ins().jump(done, &[]);
        self.fb.switch_to_block(done);
        self.fb.seal_block(done);
        Ok(())
    }

    /// Number of reduced elements per kept point (product of the reduced loop dims).
    pub(super) fn reduced_count(&mut self) -> Value {
        let first = if self.layout.kept_inner {
            self.layout.dims - self.layout.reduced - 1
        } else {
            self.layout.dims - self.layout.reduced
        };
        let mut n = self.shape[first];
        for d in first + 1..first + self.layout.reduced {
            n = self.fb.ins().imul(n, self.shape[d]);
        }
        n
    }
}
