//! [`KernelSpec::validate`]: the well-formedness check every code generator runs before
//! emitting (SSA order, operand indices, arities, dtypes, the loop kind).

use tensorplay_ir::{CompileKind, DType, Error, Result, ScalarOp};

use crate::spec::inst::{Inst, ValueId};
use crate::spec::kernel::{KernelSpec, LoopKind, MAX_RANK};
use crate::spec::lit::Lit;
use crate::spec::print::{op_name, reduce_name};
use crate::spec::rules::{op_accepts, reduce_out_dtype};

fn invalid(msg: String) -> Error {
    Error::compile(CompileKind::Lowering, format!("kernel spec: {msg}"))
}

/// What the body check counts for the loop-kind check.
struct Counts {
    /// How many times each output is stored.
    stored: Vec<usize>,
    /// How many `Param`s there are so far.
    params: usize,
}

impl KernelSpec {
    /// Checks that the spec is well formed: SSA order, operand indices, arities, the dtype of
    /// every argument and result, and the loop kind. Code generators call it before emitting, so
    /// a hand-built spec can never produce wrong machine code — only an error.
    ///
    /// ```
    /// use tensorplay_kernel::spec::{Inst, KernelSpec, LoopKind};
    /// use tensorplay_ir::{DType, ScalarOp};
    /// let mut k = KernelSpec { rank: 1, inputs: vec![DType::F32], outputs: vec![DType::F32],
    ///     insts: vec![
    ///         Inst::Load { input: 0 },
    ///         Inst::Op { op: ScalarOp::Exp, args: vec![0], compute: DType::F32, out: DType::F32 },
    ///         Inst::Store { output: 0, value: 1 },
    ///     ],
    ///     kind: LoopKind::Pointwise };
    /// assert!(k.validate().is_ok());
    /// k.insts[1] = Inst::Op { op: ScalarOp::Exp, args: vec![0], compute: DType::I32, out: DType::I32 };
    /// assert!(k.validate().is_err()); // exp computes in a floating dtype
    /// ```
    pub fn validate(&self) -> Result<()> {
        if self.rank > MAX_RANK {
            return Err(invalid(format!("rank {} exceeds {MAX_RANK}", self.rank)));
        }
        let mut counts = Counts {
            stored: vec![0usize; self.outputs.len()],
            params: 0,
        };
        for (i, inst) in self.insts.iter().enumerate() {
            self.check_inst(i, inst, &mut counts)?;
        }
        self.check_loop_kind(&counts.stored)
    }

    /// The dtype of value `a` used by instruction `i` (defined before it, and not a store).
    fn arg_dtype(&self, i: ValueId, a: ValueId) -> Result<DType> {
        if a >= i {
            return Err(invalid(format!(
                "%{i} uses %{a}, which is not defined before it"
            )));
        }
        self.value_dtype(a)
            .ok_or_else(|| invalid(format!("%{i} uses a store (%{a}) as a value")))
    }

    /// Checks instruction `i` and counts its stores and params.
    fn check_inst(&self, i: ValueId, inst: &Inst, counts: &mut Counts) -> Result<()> {
        match inst {
            Inst::Load { input } => {
                if *input >= self.inputs.len() {
                    return Err(invalid(format!(
                        "%{i} loads input {input} but there are {}",
                        self.inputs.len()
                    )));
                }
            }
            Inst::Const { value, dtype } => {
                let ok = match value {
                    Lit::Float(_) => dtype.is_float(),
                    Lit::Int(_) => dtype.is_int(),
                    Lit::Bool(_) => *dtype == DType::Bool,
                };
                if !ok {
                    return Err(invalid(format!(
                        "%{i}: constant {value} cannot have dtype {dtype}"
                    )));
                }
            }
            Inst::Param { index, .. } => {
                if *index != counts.params {
                    return Err(invalid(format!(
                        "%{i} reads param {index}, but it is param number {}",
                        counts.params
                    )));
                }
                counts.params += 1;
            }
            Inst::Op {
                op,
                args,
                compute,
                out,
            } => self.check_op(i, *op, args, *compute, *out)?,
            Inst::Cast { arg, .. } => {
                self.arg_dtype(i, *arg)?;
            }
            Inst::Store { output, value } => {
                let d = self.arg_dtype(i, *value)?;
                let Some(&want) = self.outputs.get(*output) else {
                    return Err(invalid(format!(
                        "store to output {output} but there are {}",
                        self.outputs.len()
                    )));
                };
                if d != want {
                    return Err(invalid(format!(
                        "store of a {d} value to {want} output {output}"
                    )));
                }
                counts.stored[*output] += 1;
            }
        }
        Ok(())
    }

    /// Checks an `Op` instruction: arity, compute dtype, result dtype and operand dtypes.
    fn check_op(
        &self,
        i: ValueId,
        op: ScalarOp,
        args: &[ValueId],
        compute: DType,
        out: DType,
    ) -> Result<()> {
        if args.len() != op.arity() {
            return Err(invalid(format!(
                "%{i}: {} takes {} operands, got {}",
                op_name(&op),
                op.arity(),
                args.len()
            )));
        }
        if !op_accepts(op, compute) {
            return Err(invalid(format!(
                "%{i}: {} cannot compute in {compute}",
                op_name(&op)
            )));
        }
        let want_out = if op.is_predicate() {
            DType::Bool
        } else {
            compute
        };
        if out != want_out {
            return Err(invalid(format!(
                "%{i}: {} in {compute} produces {want_out}, not {out}",
                op_name(&op)
            )));
        }
        for (k, &a) in args.iter().enumerate() {
            let d = self.arg_dtype(i, a)?;
            let want = match op {
                ScalarOp::Where if k == 0 => DType::Bool,
                _ => compute,
            };
            if d != want {
                return Err(invalid(format!(
                    "%{i}: operand {k} of {} is {d}, expected {want}",
                    op_name(&op)
                )));
            }
        }
        Ok(())
    }

    /// Checks the loop kind against the body: pointwise kernels store every output once;
    /// reductions and softmax write their one output themselves, of the right dtype.
    fn check_loop_kind(&self, stored: &[usize]) -> Result<()> {
        let value_of = |v: ValueId| -> Result<DType> {
            self.value_dtype(v)
                .ok_or_else(|| invalid(format!("the loop value %{v} is not a value")))
        };
        match &self.kind {
            LoopKind::Pointwise => {
                if let Some(o) = stored.iter().position(|&n| n != 1) {
                    return Err(invalid(format!(
                        "output {o} is stored {} times (expected once)",
                        stored[o]
                    )));
                }
            }
            LoopKind::Reduce {
                op,
                value,
                dims,
                keepdim: _,
            } => {
                if self.outputs.len() != 1 || stored.iter().any(|&n| n != 0) {
                    return Err(invalid(
                        "a reduction writes exactly one output, with no stores".into(),
                    ));
                }
                if dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= self.rank) {
                    return Err(invalid(format!(
                        "reduced dims {dims:?} must be sorted, distinct and below rank {}",
                        self.rank
                    )));
                }
                let d = value_of(*value)?;
                let want = reduce_out_dtype(*op, d)?;
                if self.outputs[0] != want {
                    return Err(invalid(format!(
                        "{} of {d} produces {want}, but the output is {}",
                        reduce_name(*op),
                        self.outputs[0]
                    )));
                }
            }
            LoopKind::Softmax { value, .. } => {
                if self.outputs.len() != 1 || stored.iter().any(|&n| n != 0) {
                    return Err(invalid(
                        "a softmax writes exactly one output, with no stores".into(),
                    ));
                }
                let d = value_of(*value)?;
                if !d.is_float() || self.outputs[0] != d {
                    return Err(invalid(format!(
                        "softmax of {d} into {}: both must be the same floating dtype",
                        self.outputs[0]
                    )));
                }
            }
        }
        Ok(())
    }
}
