//! Softmax and log-softmax rows: the max pass, the exp-and-sum pass with an f64 total, and the
//! pass that scales (or shifts) the row; a contiguous f32 row runs all but the sum as calls of
//! the bulk row kernels, and a bulk `exp` serves the other f32 rows.

use cranelift_codegen::ir::types::{F32, I64};
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature, Value};
use tensorplay_ir::{DType, Result};

use crate::codegen::cpu::emit::{Emitter, Row};
use crate::codegen::cpu::loops::reduce::Acc;
use crate::codegen::cpu::loops::{internal, pick};
use crate::codegen::cpu::math::bulk::{self, BulkOp};
use crate::codegen::cpu::math::{MathFn, emit_unary};
use crate::codegen::cpu::staging::bulk_addr;
use crate::codegen::cpu::types::Lanes;
use crate::codegen::kernel::{Inst, StrideClass, ValueId};

/// One softmax row: the value it normalises, the row's operands, its length and compute dtype,
/// whether the kernel is vectorized, and the index its passes start at (0).
struct SoftmaxRow<'r> {
    value: usize,
    row: &'r Row,
    n: Value,
    d: DType,
    vector: bool,
    zero: Value,
}

/// A row maximum: its scalar, and its splat in a vector kernel.
type RowMax = (Value, Option<Value>);

impl<'a, 'b> Emitter<'a, 'b> {
    /// One softmax row: max pass, exp-and-sum pass (storing `exp(x - max)` when the output keeps
    /// the compute precision), scale pass. log-softmax: `x - (max + log(sum))`.
    pub(super) fn softmax_row(&mut self, value: usize, log: bool, base: Vec<Value>) -> Result<()> {
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
        let r = SoftmaxRow {
            value,
            row: &row,
            n,
            d,
            vector,
            zero,
        };
        if let Some((input, fns)) = self.softmax_bulk_row(value) {
            return self.softmax_row_bulk(&r, log, input, fns);
        }
        // Pass 1: the row maximum (NaN entries make the whole row NaN through the sum).
        let (m, _) = self.accumulate(Acc::FloatMax, value, &row, zero, n, d, None)?;
        let m_vec = self.splat_row_constant(vector, d, m)?;
        let out_dtype = self.spec.outputs[0];
        let bulk_exp = self.softmax_bulk_exp();
        // Whether pass 2 leaves exp(x - max) in the output row for pass 3 to scale (a bulk exp
        // needs an f32 output, so it always does unless `log`).
        let keep_e = !log && !out_dtype.is_half();
        // Pass 2: sum of exp(x - max) in blocks, with an f64 total.
        let total = self.softmax_exp_sum(&r, (m, m_vec), keep_e, bulk_exp)?;
        let s = if sty == F32 {
            self.fb.ins().fdemote(F32, total)
        } else {
            total
        };
        // Pass 3.
        if log {
            self.log_softmax_shift(&r, m, s)
        } else {
            self.softmax_scale(&r, (m, m_vec), s, keep_e)
        }
    }

    /// The splat of the row constant `v` (of compute dtype `d`) in a vector kernel.
    fn splat_row_constant(&mut self, vector: bool, d: DType, v: Value) -> Result<Option<Value>> {
        Ok(if vector {
            let vty = self.repr(d, true)?;
            Some(self.fb.ins().splat(vty, v))
        } else {
            None
        })
    }

    /// A contiguous f32 input row (`input`), with the bulk row kernels `fns` (row max,
    /// `exp(x - s)`, `x * s`, `x - s`): every pass but the sum is one bulk call (same bits as
    /// the passes of [`softmax_row`](Self::softmax_row); a NaN row max only changes which NaN
    /// the row holds).
    fn softmax_row_bulk(
        &mut self,
        r: &SoftmaxRow,
        log: bool,
        input: usize,
        [max_fn, sub_exp_fn, mul_fn, sub_fn]: [usize; 4],
    ) -> Result<()> {
        let (row, n) = (r.row, r.n);
        let out_op = self.spec.inputs.len();
        let (x, out) = (row.base[input], row.base[out_op]);
        let m = self.call_row_max(max_fn, x, n);
        self.call_with_scalar(sub_exp_fn, x, m, out, n);
        let mut exp_at = |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| {
            e.load_operand(row, out_op, DType::F32, i, k, vec)
        };
        let total0 = self.fb.ins().f64const(0.0);
        let total = self.block_sum(
            Acc::FloatSum,
            r.value,
            row,
            n,
            r.d,
            total0,
            Some(&mut exp_at),
        )?;
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
        Ok(())
    }

    /// Pass 2: the f64 sum of `exp(x - max)` over the row, in blocks; with `keep_e` it leaves
    /// `exp(x - max)` in the output row. With a bulk `exp` (at `bulk_exp`), the (contiguous f32)
    /// output row holds `x - max`, then `exp(x - max)` in place, then the sum reads it back.
    fn softmax_exp_sum(
        &mut self,
        r: &SoftmaxRow,
        (m, m_vec): RowMax,
        keep_e: bool,
        bulk_exp: Option<usize>,
    ) -> Result<Value> {
        let (value, row, n, d) = (r.value, r.row, r.n, r.d);
        let total0 = self.fb.ins().f64const(0.0);
        Ok(if let Some(exp_addr) = bulk_exp {
            self.run(r.zero, n, Vec::new(), &mut |e, i, k, vec, _, _| {
                let env = e.eval(row, i, k, vec, false)?;
                let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                let mm = pick(vec, m, m_vec, "no vector max")?;
                let t = e.fb.ins().fsub(x, mm);
                e.store_output(row, 0, i, k, vec, t)
            })?;
            let out_op = self.spec.inputs.len();
            self.call_bulk_in_place(exp_addr, row.base[out_op], n);
            let mut exp_at = |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| {
                e.load_operand(row, out_op, DType::F32, i, k, vec)
            };
            self.block_sum(Acc::FloatSum, value, row, n, d, total0, Some(&mut exp_at))?
        } else {
            let mut exp_at =
                |e: &mut Emitter<'a, 'b>, i: Value, k: i64, vec: bool| -> Result<Value> {
                    let env = e.eval(row, i, k, vec, false)?;
                    let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                    let mm = pick(vec, m, m_vec, "no vector max")?;
                    let t = e.fb.ins().fsub(x, mm);
                    let ex = emit_unary(e.fb, e.math, MathFn::Exp, t);
                    if keep_e {
                        e.store_output(row, 0, i, k, vec, ex)?;
                    }
                    Ok(ex)
                };
            self.block_sum(Acc::FloatSum, value, row, n, d, total0, Some(&mut exp_at))?
        })
    }

    /// Pass 3 of log-softmax: `x - (max + log(sum))` (`s`: the sum in the compute type).
    fn log_softmax_shift(&mut self, r: &SoftmaxRow, m: Value, s: Value) -> Result<()> {
        let (value, row) = (r.value, r.row);
        let ls = emit_unary(self.fb, self.math, MathFn::Log, s);
        let shift = self.fb.ins().fadd(m, ls);
        let shift_vec = self.splat_row_constant(r.vector, r.d, shift)?;
        self.run(r.zero, r.n, Vec::new(), &mut |e, i, k, vec, _, _| {
            let env = e.eval(row, i, k, vec, false)?;
            let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
            let sh = pick(vec, shift, shift_vec, "no vector shift")?;
            let y = e.fb.ins().fsub(x, sh);
            e.store_output(row, 0, i, k, vec, y)
        })?;
        Ok(())
    }

    /// Pass 3 of softmax: `exp(x - max) * (1 / sum)` (`s`: the sum in the compute type), the
    /// exponential read back from the output row when pass 2 kept it there (`keep_e`).
    fn softmax_scale(
        &mut self,
        r: &SoftmaxRow,
        (m, m_vec): RowMax,
        s: Value,
        keep_e: bool,
    ) -> Result<()> {
        let (value, row) = (r.value, r.row);
        let sty = self.repr(r.d, false)?;
        let out_dtype = self.spec.outputs[0];
        let one = self.fconst(sty, 1.0);
        let inv = self.fb.ins().fdiv(one, s);
        let inv_vec = self.splat_row_constant(r.vector, r.d, inv)?;
        let out_input = self.spec.inputs.len();
        self.run(r.zero, r.n, Vec::new(), &mut |e, i, k, vec, _, _| {
            let ex = if keep_e {
                e.load_operand(row, out_input, out_dtype, i, k, vec)?
            } else {
                let env = e.eval(row, i, k, vec, false)?;
                let x = env[value].ok_or_else(|| internal("softmax value not evaluated"))?;
                let mm = pick(vec, m, m_vec, "no vector max")?;
                let t = e.fb.ins().fsub(x, mm);
                emit_unary(e.fb, e.math, MathFn::Exp, t)
            };
            let iv = pick(vec, inv, inv_vec, "no vector inverse")?;
            let y = e.fb.ins().fmul(ex, iv);
            e.store_output(row, 0, i, k, vec, y)
        })?;
        Ok(())
    }

    /// Whether the host has a bulk `exp` this softmax kernel can use: f32 output with unit
    /// stride (the output row is the scratch) in a vector kernel.
    fn softmax_bulk_exp(&self) -> Option<usize> {
        let out = self.spec.inputs.len();
        if !self.bulk
            || self.lanes != Lanes::F32x4
            || self.spec.outputs[0] != DType::F32
            || self.layout.classes[out] != StrideClass::Unit
        {
            return None;
        }
        bulk_addr(BulkOp::Math(MathFn::Exp))
    }

    /// The bulk row kernels for a softmax of `value` when it is a plain load of a contiguous
    /// f32 input and the bulk `exp` applies ([`Self::softmax_bulk_exp`]): the input, then the
    /// addresses of the row max, `exp(x - s)`, `x * s` and `x - s` kernels.
    fn softmax_bulk_row(&self, value: ValueId) -> Option<(usize, [usize; 4])> {
        self.softmax_bulk_exp()?;
        let input = match self.spec.insts[value] {
            Inst::Load { input }
                if self.spec.inputs[input] == DType::F32
                    && self.layout.classes[input] == StrideClass::Unit =>
            {
                input
            }
            _ => return None,
        };
        let op = |o| bulk::scalar_op(o).map(|f| f as usize);
        Some((
            input,
            [
                bulk::row_max()? as usize,
                op(bulk::RowScalarOp::SubExp)?,
                op(bulk::RowScalarOp::Mul)?,
                op(bulk::RowScalarOp::Sub)?,
            ],
        ))
    }

    /// Calls the row-max kernel at `addr` (`fn(x, n) -> f32`) on `ptr[0..n]`.
    fn call_row_max(&mut self, addr: usize, ptr: Value, n: Value) -> Value {
        let mut sig = Signature::new(self.call_conv);
        sig.params.extend([AbiParam::new(I64); 2]);
        sig.returns.push(AbiParam::new(F32));
        let sig_ref = self.fb.import_signature(sig);
        let callee = self.fb.ins().iconst(I64, addr as i64);
        let call = self.fb.ins().call_indirect(sig_ref, callee, &[ptr, n]);
        self.fb.inst_results(call)[0]
    }

    /// Calls the kernel at `addr` (`fn(x, s, out, n)`, see `bulk::ScalarFn`) on `x[0..n]`.
    fn call_with_scalar(&mut self, addr: usize, x: Value, s: Value, out: Value, n: Value) {
        let mut sig = Signature::new(self.call_conv);
        sig.params.push(AbiParam::new(I64));
        sig.params.push(AbiParam::new(F32));
        sig.params.extend([AbiParam::new(I64); 2]);
        let sig_ref = self.fb.import_signature(sig);
        let callee = self.fb.ins().iconst(I64, addr as i64);
        self.fb
            .ins()
            .call_indirect(sig_ref, callee, &[x, s, out, n]);
    }

    /// Calls the bulk kernel at `addr` (`fn(x, out, n)`) in place on `ptr[0..n]`.
    fn call_bulk_in_place(&mut self, addr: usize, ptr: Value, n: Value) {
        let mut sig = Signature::new(self.call_conv);
        sig.params.extend([AbiParam::new(I64); 3]);
        let sig_ref = self.fb.import_signature(sig);
        let callee = self.fb.ins().iconst(I64, addr as i64);
        self.fb.ins().call_indirect(sig_ref, callee, &[ptr, ptr, n]);
    }
}
