//! Evaluating a kernel body at one element (or vector): the walk over its live instructions,
//! with constants, scalar arguments and staged reads, its stores (after the body in place), and
//! the dispatch of each op by compute dtype.

use cranelift_codegen::ir::Value;
use tensorplay_ir::{DType, Result, ScalarOp};

use crate::codegen::cpu::emit::{Emitter, Row, internal};
use crate::codegen::kernel::{Inst, Lit, ValueId};

impl<'a, 'b> Emitter<'a, 'b> {
    /// Evaluates the live body at element `i + k` of `row` (a vector when `vector`), performing
    /// its stores when `stores`; returns every evaluated value. In an
    /// [in-place](crate::codegen::kernel::LoopLayout::in_place) layout the stores come after
    /// the whole body, so no load of the element sees an output already written over it.
    pub(crate) fn eval(
        &mut self,
        row: &Row,
        i: Value,
        k: i64,
        vector: bool,
        stores: bool,
    ) -> Result<Vec<Option<Value>>> {
        let spec = self.spec;
        let mut env: Vec<Option<Value>> = vec![None; spec.insts.len()];
        let get = |env: &[Option<Value>], a: ValueId| {
            env[a].ok_or_else(|| internal(format!("%{a} used before it was evaluated")))
        };
        let defer = self.layout.in_place;
        let mut deferred: Vec<(usize, ValueId)> = Vec::new();
        for (id, inst) in spec.insts.iter().enumerate() {
            if !self.live[id] {
                continue;
            }
            if let Some(buf) = self.reads.get(id).copied().flatten() {
                env[id] = Some(self.load_staged(row, buf, i, k, vector)?);
                continue;
            }
            let v = match inst {
                Inst::Load { input } => Some(self.load_input(row, *input, i, k, vector)?),
                Inst::Const { value, dtype } => Some(self.constant(*value, *dtype, vector)?),
                Inst::Param { index, dtype } => {
                    let hoisted = row
                        .hoisted
                        .get(spec.inputs.len() + index)
                        .copied()
                        .flatten();
                    Some(match (hoisted, vector) {
                        (Some((s, _)), false) => s,
                        (Some((_, Some(v))), true) => v,
                        _ => self.param(*index, *dtype, vector)?,
                    })
                }
                Inst::Op {
                    op, args, compute, ..
                } => {
                    let a: Vec<Value> =
                        args.iter().map(|&x| get(&env, x)).collect::<Result<_>>()?;
                    Some(self.op(*op, *compute, &a)?)
                }
                Inst::Cast { arg, to } => {
                    let from = spec
                        .value_dtype(*arg)
                        .ok_or_else(|| internal("cast of a non-value"))?;
                    let x = get(&env, *arg)?;
                    Some(self.cast(x, from, *to)?)
                }
                Inst::Store { output, value } => {
                    if stores && defer {
                        deferred.push((*output, *value));
                    } else if stores {
                        let x = get(&env, *value)?;
                        self.store_output(row, *output, i, k, vector, x)?;
                    }
                    None
                }
            };
            env[id] = v;
        }
        for (output, value) in deferred {
            let x = get(&env, value)?;
            self.store_output(row, output, i, k, vector, x)?;
        }
        Ok(env)
    }

    /// A constant in its register representation.
    fn constant(&mut self, value: Lit, dtype: DType, vector: bool) -> Result<Value> {
        let ty = self.repr(dtype, vector)?;
        Ok(match value {
            Lit::Float(v) => self.fconst(ty, v),
            Lit::Int(v) => self.iconst(ty, v),
            Lit::Bool(b) => {
                let v = if vector { -(b as i64) } else { b as i64 };
                self.iconst(ty, v)
            }
        })
    }

    /// Emits `op` computing in `compute` on operands already in that dtype's representation
    /// (bool for `where`'s condition and logical ops).
    pub(super) fn op(&mut self, op: ScalarOp, compute: DType, a: &[Value]) -> Result<Value> {
        if compute.is_float() {
            self.float_op(op, compute, a)
        } else if compute == DType::Bool {
            self.bool_op(op, a)
        } else {
            self.int_op(op, compute, a)
        }
    }
}
