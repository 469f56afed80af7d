//! The loop nests of the three kernel kinds, written as guard + do-while loops (so Cranelift
//! hoists loop invariants), with the inner loop strip-mined into 4-vector, 1-vector and scalar
//! phases: the loop building blocks, the pointwise walk over row segments and the walk over
//! rows here; row reductions (`reduce`), column reductions (`column`) and softmax rows
//! (`softmax`) in their own files.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{Block, BlockArg, InstBuilder, Type, Value};
use tensorplay_ir::{CompileKind, Error, Result};

use crate::codegen::cpu::emit::{Emitter, Row};
use crate::codegen::cpu::staging;
use crate::codegen::cpu::types::Lanes;
use crate::codegen::kernel::LoopKind;

mod column;
mod reduce;
mod softmax;

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
}
