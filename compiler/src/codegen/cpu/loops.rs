//! The loop nests of the three kernel kinds, written as guard + do-while loops (so Cranelift
//! hoists loop invariants), with the inner loop strip-mined into 4-vector, 1-vector and scalar
//! phases.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, F64, F64X2, I8, I32, I64};
use cranelift_codegen::ir::{
    Block, BlockArg, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value,
};
use tensorplay_ir::CompileKind;
use tensorplay_ir::{DType, Error, ReduceOp, Result};

use super::emit::{Emitter, Lanes, Row};
use super::math::{MathFn, demote_combine, emit_unary, promote_halves};
use super::staging;
use crate::codegen::kernel::LoopKind;

/// Elements a float sum accumulates in its compute lanes before adding into the f64 total.
pub(super) const SUM_BLOCK: i64 = 4096;

/// Kept points per column-mode panel (their accumulators live in a stack buffer).
pub(super) const PANEL: i64 = 1024;

/// Vectors per iteration of the unrolled loop.
const UNROLL: i64 = 4;

/// Vector accumulators of a float sum reduction (32 f32 lanes): enough independent add chains
/// to hide the add latency at any vector width. The assembled full-width reductions keep the
/// same 32 lanes (two zmm or four ymm registers), so every code generator adds in one order.
pub(super) const SUM_UNROLL: i64 = 8;

/// A loop body: gets the emitter, the induction value and the carried state, returns the new
/// state.
type Body<'x, 'a, 'b> = dyn FnMut(&mut Emitter<'a, 'b>, Value, &[Value]) -> Result<Vec<Value>> + 'x;

/// One element (or vector) step of a strip-mined run: `(emitter, i, k, vector, slot, state)`;
/// `slot` says which accumulator (0..4: vector accumulators, 4: the scalar one) to update.
type Step<'x, 'a, 'b> =
    dyn FnMut(&mut Emitter<'a, 'b>, Value, i64, bool, usize, &mut Vec<Value>) -> Result<()> + 'x;

/// Replaces the reduced value at element `i + k` (`(emitter, i, k, vector)`), e.g. with
/// `exp(x - max)` in softmax.
type MapFn<'x, 'a, 'b> = dyn FnMut(&mut Emitter<'a, 'b>, Value, i64, bool) -> Result<Value> + 'x;

/// The work of one row segment: `(emitter, operand bases, segment length)`.
type SegFn<'x, 'a, 'b> = dyn FnMut(&mut Emitter<'a, 'b>, Vec<Value>, Value) -> Result<()> + 'x;

/// The work of one row segment that also needs its flattened start index:
/// `(emitter, operand bases, segment length, flattened index of its first element)`.
type IdxSegFn<'x, 'a, 'b> =
    dyn FnMut(&mut Emitter<'a, 'b>, Vec<Value>, Value, Value) -> Result<()> + 'x;

/// The work of one row of a reduction or softmax: `(emitter, operand bases, row index)`.
type RowFn<'x, 'a, 'b> = dyn FnMut(&mut Emitter<'a, 'b>, Vec<Value>, Value) -> Result<()> + 'x;

fn args(vals: &[Value]) -> Vec<BlockArg> {
    vals.iter().map(|&v| BlockArg::Value(v)).collect()
}

fn internal(msg: impl Into<String>) -> Error {
    Error::compile(CompileKind::Codegen, format!("cpu codegen: {}", msg.into()))
}

/// The vector form of a row constant in a vector step, else its scalar form.
fn pick(vector: bool, scalar: Value, splat: Option<Value>, what: &str) -> Result<Value> {
    if vector {
        splat.ok_or_else(|| internal(what))
    } else {
        Ok(scalar)
    }
}

/// How a reduction accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acc {
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
    /// `body(i, state)` for `i = i0, i0 + step, ...` while `i + step <= end`; returns the first `i`
    /// not run and the final state. Emitted as a guard and a do-while loop.
    pub(super) fn strip(
        &mut self,
        i0: Value,
        end: Value,
        step: i64,
        state: &[Value],
        body: &mut Body<'_, 'a, 'b>,
    ) -> Result<(Value, Vec<Value>)> {
        let lim = self.fb.ins().iadd_imm_s(end, -step);
        let header = self.fb.create_block();
        let exit = self.fb.create_block();
        let mut types: Vec<Type> = vec![I64];
        types.extend(state.iter().map(|&v| self.ty_of(v)));
        for &t in &types {
            self.fb.append_block_param(header, t);
            self.fb.append_block_param(exit, t);
        }
        let mut init = vec![i0];
        init.extend_from_slice(state);
        let go = self.fb.ins().icmp(IntCC::SignedLessThanOrEqual, i0, lim);
        self.fb
            .ins()
            .brif(go, header, &args(&init), exit, &args(&init));
        self.fb.switch_to_block(header);
        let params = self.fb.block_params(header).to_vec();
        let next_state = body(self, params[0], &params[1..])?;
        let i2 = self.fb.ins().iadd_imm_s(params[0], step);
        let again = self.fb.ins().icmp(IntCC::SignedLessThanOrEqual, i2, lim);
        let mut next = vec![i2];
        next.extend(next_state);
        self.fb
            .ins()
            .brif(again, header, &args(&next), exit, &args(&next));
        self.fb.seal_block(header);
        self.fb.switch_to_block(exit);
        self.fb.seal_block(exit);
        let out = self.fb.block_params(exit).to_vec();
        Ok((out[0], out[1..].to_vec()))
    }

    /// Runs `step` over elements `[start, end)`: [`UNROLL`] vectors at a time, single vectors,
    /// then scalars (scalars only in a scalar kernel).
    pub(super) fn run(
        &mut self,
        start: Value,
        end: Value,
        state: Vec<Value>,
        step: &mut Step<'_, 'a, 'b>,
    ) -> Result<Vec<Value>> {
        self.run_unrolled(start, end, UNROLL, state, step)
    }

    /// [`run`](Self::run) with `unroll` vectors per iteration of the unrolled loop (vector
    /// steps get slots `0..unroll`, scalar steps slot `unroll`).
    fn run_unrolled(
        &mut self,
        start: Value,
        end: Value,
        unroll: i64,
        state: Vec<Value>,
        step: &mut Step<'_, 'a, 'b>,
    ) -> Result<Vec<Value>> {
        let l = self.lanes.count();
        let (mut i, mut st) = (start, state);
        if self.lanes != Lanes::Scalar {
            (i, st) = self.strip(i, end, unroll * l, &st, &mut |e, i, s| {
                let mut s = s.to_vec();
                for u in 0..unroll {
                    step(e, i, u * l, true, u as usize, &mut s)?;
                }
                Ok(s)
            })?;
            (i, st) = self.strip(i, end, l, &st, &mut |e, i, s| {
                let mut s = s.to_vec();
                step(e, i, 0, true, 0, &mut s)?;
                Ok(s)
            })?;
        }
        let (_, st) = self.strip(i, end, 1, &st, &mut |e, i, s| {
            let mut s = s.to_vec();
            step(e, i, 0, false, unroll as usize, &mut s)?;
            Ok(s)
        })?;
        Ok(st)
    }

    /// `body(i, state)` for `i` in `[0, n)`.
    fn for_range(
        &mut self,
        n: Value,
        state: &[Value],
        body: &mut Body<'_, 'a, 'b>,
    ) -> Result<Vec<Value>> {
        let zero = self.fb.ins().iconst(I64, 0);
        Ok(self.strip(zero, n, 1, state, body)?.1)
    }

    /// The row base address of every operand for loop-dim counters `c` (dims `0..c.len()`) plus
    /// `extra` elements along dim `extra_dim` (when given).
    fn bases(&mut self, c: &[Value], extra: Option<(usize, Value)>) -> Vec<Value> {
        (0..self.num_operands())
            .map(|op| {
                let mut off: Option<Value> = None;
                let terms: Vec<(Value, Value)> = c
                    .iter()
                    .enumerate()
                    .map(|(d, &cv)| (cv, self.strides[op][d]))
                    .chain(extra.map(|(d, v)| (v, self.strides[op][d])))
                    .collect();
                for (cv, s) in terms {
                    let t = self.fb.ins().imul(cv, s);
                    off = Some(match off {
                        None => t,
                        Some(o) => self.fb.ins().iadd(o, t),
                    });
                }
                match off {
                    None => self.ptrs[op],
                    Some(o) => {
                        let size = self.operand_dtype(op).size() as i64;
                        let bytes = self.fb.ins().ishl_imm_s(o, size.trailing_zeros() as i64);
                        self.fb.ins().iadd(self.ptrs[op], bytes)
                    }
                }
            })
            .collect()
    }

    /// Splits flat index `idx` into counters over loop dims `0..n` (row-major).
    fn decompose(&mut self, idx: Value, n: usize) -> Vec<Value> {
        let mut c = vec![idx; n];
        let mut rest = idx;
        for d in (1..n).rev() {
            c[d] = self.fb.ins().urem(rest, self.shape[d]);
            rest = self.fb.ins().udiv(rest, self.shape[d]);
        }
        if n > 0 {
            c[0] = rest;
        }
        c
    }

    /// Advances counters over loop dims `0..c.len()` by one (odometer, branch-free).
    fn increment(&mut self, c: &[Value]) -> Vec<Value> {
        let mut out = c.to_vec();
        let mut carry: Option<Value> = None;
        for d in (0..c.len()).rev() {
            let inc = match carry {
                None => self.fb.ins().iadd_imm_s(c[d], 1),
                Some(k) => {
                    let k64 = self.fb.ins().uextend(I64, k);
                    self.fb.ins().iadd(c[d], k64)
                }
            };
            if d == 0 {
                out[d] = inc;
                break;
            }
            let wrap = self.fb.ins().icmp(IntCC::Equal, inc, self.shape[d]);
            let zero = self.fb.ins().iconst(I64, 0);
            out[d] = self.fb.ins().select(wrap, zero, inc);
            carry = Some(wrap);
        }
        out
    }

    /// Emits the whole kernel body for the spec's loop kind (the current block is the entry
    /// block, after [`Emitter::load_args`]); ends with a return.
    pub(super) fn emit_kernel(&mut self) -> Result<()> {
        let exit = self.fb.create_block();
        let setup = self.fb.create_block();
        let go = self
            .fb
            .ins()
            .icmp(IntCC::SignedLessThan, self.start, self.end);
        self.fb.ins().brif(go, setup, &[], exit, &[]);
        self.fb.switch_to_block(setup);
        self.fb.seal_block(setup);
        match &self.spec.kind {
            LoopKind::Pointwise => self.pointwise(exit)?,
            LoopKind::Reduce { op, value, .. } if self.layout.kept_inner => {
                let (op, value) = (*op, *value);
                self.column_reduce(exit, op, value)?
            }
            LoopKind::Reduce { op, value, .. } => {
                let (op, value) = (*op, *value);
                self.rows(exit, &mut |e, row, idx| e.reduce_row(op, value, row, idx))?
            }
            LoopKind::Softmax { value, log } => {
                let (value, log) = (*value, *log);
                self.rows(exit, &mut |e, row, _| e.softmax_row(value, log, row))?
            }
        }
        self.fb.switch_to_block(exit);
        self.fb.seal_block(exit);
        self.fb.ins().return_(&[]);
        Ok(())
    }

    /// Pointwise: walks the flattened element range `[start, end)` row by row (a row is the
    /// innermost loop dim; the first and last rows may be partial).
    fn pointwise(&mut self, exit: Block) -> Result<()> {
        if let Some(plan) = staging::plan(self.spec, self.layout, &self.live, self.lanes, self.bulk)
        {
            return self.staged_pointwise(exit, &plan);
        }
        let outer = self.layout.dims - 1;
        self.segments(exit, outer, &mut |e, base, n| {
            let hoisted = e.hoist(&base)?;
            let row = Row { base, hoisted };
            let zero = e.fb.ins().iconst(I64, 0);
            e.run(zero, n, Vec::new(), &mut |e, i, k, vector, _, _| {
                e.eval(&row, i, k, vector, true)?;
                Ok(())
            })?;
            Ok(())
        })
    }

    /// Walks the flattened range `[start, end)` over loop dims `0..outer` and the innermost loop
    /// dim, one row segment at a time (the first and last segments may be partial rows): calls
    /// `per_segment(operand bases at the segment's first element, segment length)`.
    fn segments(
        &mut self,
        exit: Block,
        outer: usize,
        per_segment: &mut SegFn<'_, 'a, 'b>,
    ) -> Result<()> {
        let (start, end) = (self.start, self.end);
        self.segments_between(start, end, exit, outer, &mut |e, base, n, _| {
            per_segment(e, base, n)
        })
    }

    /// [`Emitter::segments`] over the flattened range `[start, end)` (non-empty); `per_segment`
    /// also gets the flattened index of the segment's first element.
    pub(super) fn segments_between(
        &mut self,
        start: Value,
        end: Value,
        exit: Block,
        outer: usize,
        per_segment: &mut IdxSegFn<'_, 'a, 'b>,
    ) -> Result<()> {
        let dims = self.layout.dims;
        let inner = self.shape[dims - 1];
        let (row0, col0) = if outer == 0 {
            let z = self.fb.ins().iconst(I64, 0);
            (z, start)
        } else {
            let r = self.fb.ins().udiv(start, inner);
            let m = self.fb.ins().imul(r, inner);
            (r, self.fb.ins().isub(start, m))
        };
        let counters = self.decompose(row0, outer);
        let row_block = self.fb.create_block();
        for _ in 0..(2 + counters.len()) {
            self.fb.append_block_param(row_block, I64);
        }
        let mut init = vec![start, col0];
        init.extend(&counters);
        self.fb.ins().jump(row_block, &args(&init));
        self.fb.switch_to_block(row_block);
        let p = self.fb.block_params(row_block).to_vec();
        let (idx, col, c) = (p[0], p[1], p[2..].to_vec());
        let left_in_row = self.fb.ins().isub(inner, col);
        let left = self.fb.ins().isub(end, idx);
        let n = self.fb.ins().smin(left_in_row, left);
        let base = self.bases(&c, Some((dims - 1, col)));
        per_segment(self, base, n, idx)?;
        if outer == 0 {
            self.fb.ins().jump(exit, &[]);
        } else {
            let idx2 = self.fb.ins().iadd(idx, n);
            let more = self.fb.ins().icmp(IntCC::SignedLessThan, idx2, end);
            let next = self.fb.create_block();
            self.fb.ins().brif(more, next, &[], exit, &[]);
            self.fb.switch_to_block(next);
            self.fb.seal_block(next);
            let c2 = self.increment(&c);
            let zero = self.fb.ins().iconst(I64, 0);
            let mut a = vec![idx2, zero];
            a.extend(c2);
            self.fb.ins().jump(row_block, &args(&a));
        }
        self.fb.seal_block(row_block);
        Ok(())
    }

    /// Reductions and softmax: walks the flattened row range `[start, end)` over the kept loop
    /// dims, calling `per_row(row bases at the kept point, row index)`.
    fn rows(&mut self, exit: Block, per_row: &mut RowFn<'_, 'a, 'b>) -> Result<()> {
        let kept = self.layout.dims - self.layout.reduced;
        let counters = self.decompose(self.start, kept);
        let row_block = self.fb.create_block();
        for _ in 0..(1 + kept) {
            self.fb.append_block_param(row_block, I64);
        }
        let mut init = vec![self.start];
        init.extend(&counters);
        self.fb.ins().jump(row_block, &args(&init));
        self.fb.switch_to_block(row_block);
        let p = self.fb.block_params(row_block).to_vec();
        let (idx, c) = (p[0], p[1..].to_vec());
        let base = self.bases(&c, None);
        per_row(self, base, idx)?;
        let idx2 = self.fb.ins().iadd_imm_s(idx, 1);
        let more = self.fb.ins().icmp(IntCC::SignedLessThan, idx2, self.end);
        let next = self.fb.create_block();
        self.fb.ins().brif(more, next, &[], exit, &[]);
        self.fb.switch_to_block(next);
        self.fb.seal_block(next);
        let c2 = self.increment(&c);
        let mut a = vec![idx2];
        a.extend(c2);
        self.fb.ins().jump(row_block, &args(&a));
        self.fb.seal_block(row_block);
        Ok(())
    }

    // ---- reductions ------------------------------------------------------------------------

    fn acc_kind(op: ReduceOp, d: DType) -> Acc {
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
    fn reduce_value(
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
    fn combine(&mut self, acc: Acc, a: Value, b: Value) -> Value {
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
    fn identity(&mut self, acc: Acc, ty: Type) -> Value {
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
    fn accumulate(
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
    fn reduce_row(
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

    fn widen_f64(&mut self, v: Value) -> Value {
        if self.ty_of(v) == F32 {
            self.fb.ins().fpromote(F64, v)
        } else {
            v
        }
    }

    /// A float sum over `[0, n)` in blocks of [`SUM_BLOCK`] elements: each block accumulates in
    /// compute lanes, its sum is added into the f64 `total`.
    #[allow(clippy::too_many_arguments)]
    fn block_sum(
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
    fn reduced_count(&mut self) -> Value {
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

    // ---- column reductions -----------------------------------------------------------------

    /// Column mode (`layout.kept_inner`): the loop dims are `[kept outer.., reduced..,
    /// kept inner]`; `[start, end)` ranges over kept points. Each row segment of kept points is
    /// cut into panels of [`PANEL`] columns whose accumulators live in a stack buffer (in L1); for
    /// every reduced point the panel's contiguous run of input is streamed into the buffer with
    /// the usual 4-vector loop. So strided reductions such as `sum(dim=0)` of a row-major matrix
    /// read memory row by row. Float sums accumulate in f64; float extrema propagate NaN.
    fn column_reduce(&mut self, exit: Block, op: ReduceOp, value: usize) -> Result<()> {
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

    // ---- softmax -----------------------------------------------------------------------------

    /// One softmax row: max pass, exp-and-sum pass (storing `exp(x - max)` when the output keeps
    /// the compute precision), scale pass. log-softmax: `x - (max + log(sum))`.
    fn softmax_row(&mut self, value: usize, log: bool, base: Vec<Value>) -> Result<()> {
        let d = self
            .spec
            .value_dtype(value)
            .ok_or_else(|| internal("softmax value has no dtype"))?;
        let hoisted = self.hoist(&base)?;
        let row = Row { base, hoisted };
        let n = self.shape[self.layout.dims - 1];
        let zero = self.fb.ins().iconst(I64, 0);
        let sty = self.repr(d, false)?;
        let vector = self.lanes != Lanes::Scalar;
        if let Some((input, [max_fn, sub_exp_fn, mul_fn, sub_fn])) = self.softmax_bulk_row(value) {
            // A contiguous f32 input row: every pass but the sum is one bulk call (same bits
            // as the passes below; a NaN row max only changes which NaN the row holds).
            let out_op = self.spec.inputs.len();
            let (x, out) = (row.base[input], row.base[out_op]);
            let m = self.call_row_max(max_fn, x, n);
            self.call_with_scalar(sub_exp_fn, x, m, out, n);
            let mut exp_at = |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| {
                e.load_operand(&row, out_op, DType::F32, i, k, vec)
            };
            let total0 = self.fb.ins().f64const(0.0);
            let total =
                self.block_sum(Acc::FloatSum, value, &row, n, d, total0, Some(&mut exp_at))?;
            let s = self.fb.ins().fdemote(F32, total);
            if log {
                let ls = emit_unary(self.fb, self.math, MathFn::Log, s);
                let shift = self.fb.ins().fadd(m, ls);
                self.call_with_scalar(sub_fn, x, shift, out, n);
            } else {
                let one = self.fconst(F32, 1.0);
                let inv = self.fb.ins().fdiv(one, s);
                self.call_with_scalar(mul_fn, out, inv, out, n);
            }
            return Ok(());
        }
        // Pass 1: the row maximum (NaN entries make the whole row NaN through the sum).
        let (m, _) = self.accumulate(Acc::FloatMax, value, &row, zero, n, d, None)?;
        let m_vec = if vector {
            let vty = self.repr(d, true)?;
            Some(self.fb.ins().splat(vty, m))
        } else {
            None
        };
        let out_dtype = self.spec.outputs[0];
        let bulk_exp = self.softmax_bulk_exp();
        // Whether pass 2 leaves exp(x - max) in the output row for pass 3 to scale (a bulk exp
        // needs an f32 output, so it always does unless `log`).
        let keep_e = !log && !out_dtype.is_half();
        // Pass 2: sum of exp(x - max) in blocks, with an f64 total.
        let total0 = self.fb.ins().f64const(0.0);
        let total = if let Some(exp_addr) = bulk_exp {
            // With a bulk exp, the (contiguous f32) output row holds x - max, then
            // exp(x - max) in place, then the sum reads it back.
            self.run(zero, n, Vec::new(), &mut |e, i, k, vec, _, _| {
                let env = e.eval(&row, i, k, vec, false)?;
                let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                let mm = pick(vec, m, m_vec, "no vector max")?;
                let t = e.fb.ins().fsub(x, mm);
                e.store_output(&row, 0, i, k, vec, t)
            })?;
            let out_op = self.spec.inputs.len();
            self.call_bulk_in_place(exp_addr, row.base[out_op], n);
            let mut exp_at = |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| {
                e.load_operand(&row, out_op, DType::F32, i, k, vec)
            };
            self.block_sum(Acc::FloatSum, value, &row, n, d, total0, Some(&mut exp_at))?
        } else {
            let mut exp_at =
                |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| -> Result<Value> {
                    let env = e.eval(&row, i, k, vec, false)?;
                    let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                    let mm = pick(vec, m, m_vec, "no vector max")?;
                    let t = e.fb.ins().fsub(x, mm);
                    let ex = emit_unary(e.fb, e.math, MathFn::Exp, t);
                    if keep_e {
                        e.store_output(&row, 0, i, k, vec, ex)?;
                    }
                    Ok(ex)
                };
            self.block_sum(Acc::FloatSum, value, &row, n, d, total0, Some(&mut exp_at))?
        };
        let s = if sty == F32 {
            self.fb.ins().fdemote(F32, total)
        } else {
            total
        };
        // Pass 3.
        if log {
            let ls = emit_unary(self.fb, self.math, MathFn::Log, s);
            let shift = self.fb.ins().fadd(m, ls);
            let shift_vec = if vector {
                let vty = self.repr(d, true)?;
                Some(self.fb.ins().splat(vty, shift))
            } else {
                None
            };
            self.run(zero, n, Vec::new(), &mut |e, i, k, vec, _, _| {
                let env = e.eval(&row, i, k, vec, false)?;
                let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                let sh = pick(vec, shift, shift_vec, "no vector shift")?;
                let y = e.fb.ins().fsub(x, sh);
                e.store_output(&row, 0, i, k, vec, y)
            })?;
        } else {
            let one = self.fconst(sty, 1.0);
            let inv = self.fb.ins().fdiv(one, s);
            let inv_vec = if vector {
                let vty = self.repr(d, true)?;
                Some(self.fb.ins().splat(vty, inv))
            } else {
                None
            };
            let out_input = self.spec.inputs.len();
            self.run(zero, n, Vec::new(), &mut |e, i, k, vec, _, _| {
                let ex = if keep_e {
                    e.load_operand(&row, out_input, out_dtype, i, k, vec)?
                } else {
                    let env = e.eval(&row, i, k, vec, false)?;
                    let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                    let mm = pick(vec, m, m_vec, "no vector max")?;
                    let t = e.fb.ins().fsub(x, mm);
                    emit_unary(e.fb, e.math, MathFn::Exp, t)
                };
                let iv = pick(vec, inv, inv_vec, "no vector inverse")?;
                let y = e.fb.ins().fmul(ex, iv);
                e.store_output(&row, 0, i, k, vec, y)
            })?;
        }
        Ok(())
    }
}
