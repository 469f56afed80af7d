//! The lowering state ([`Lowerer`]): the body built so far and the tables that keep it small
//! (one load per input, one cast per value and dtype, one `Param` per scalar constant and dtype,
//! one `Const` per value and dtype, one instruction per distinct op on the same operands), and
//! the [`Operand`]s ops are lowered over.
//!
//! The last table is common-subexpression elimination: an op's scalar expression is a tree, so
//! a formula that names a value twice (`gelu_backward`'s `tanh(u)` appears three times, `x²`
//! four) would otherwise compute it once per mention. Every scalar op is pure, so equal
//! instructions over equal operands are one value.

use std::collections::HashMap;

use tensorplay_ir::dtype::Tier;
use tensorplay_ir::graph::{Graph, ValueRef};
use tensorplay_ir::{CompileKind, DType, Error, NodeId, Result};

use crate::spec::inst::{Inst, ValueId};
use crate::spec::lit::Lit;

/// An operand while lowering: a value of the body, a kernel input not loaded yet, or a scalar
/// constant of the graph (with the constant's own dtype and its position among the region's
/// inputs), which becomes a kernel argument when used.
#[derive(Debug, Clone, Copy)]
pub(super) enum Operand {
    Value(ValueId),
    Input(usize),
    Scalar(Lit, DType, usize),
}

/// The lowering of one region in progress.
pub(super) struct Lowerer<'g> {
    pub(super) g: &'g Graph,
    pub(super) insts: Vec<Inst>,
    pub(super) inputs: Vec<DType>,
    pub(super) input_refs: Vec<ValueRef>,
    pub(super) env: HashMap<ValueRef, Operand>,
    consts: HashMap<(Lit, DType), ValueId>,
    /// (region input, dtype) → its `Param` value.
    param_ids: HashMap<(usize, DType), ValueId>,
    pub(super) params: Vec<Lit>,
    casts: HashMap<(ValueId, DType), ValueId>,
    loads: HashMap<usize, ValueId>,
    /// Every op instruction already in the body → its value.
    ops: HashMap<Inst, ValueId>,
    /// Per operand of the op being lowered: whether it is a 0-d tensor (promotion tier).
    pub(super) zero_dim: Vec<bool>,
}

pub(super) fn compile_err(msg: String) -> Error {
    Error::compile(CompileKind::Lowering, msg)
}

impl<'g> Lowerer<'g> {
    /// An empty body over `g`.
    pub(super) fn new(g: &'g Graph) -> Self {
        Lowerer {
            g,
            insts: Vec::new(),
            inputs: Vec::new(),
            input_refs: Vec::new(),
            env: HashMap::new(),
            consts: HashMap::new(),
            param_ids: HashMap::new(),
            params: Vec::new(),
            casts: HashMap::new(),
            loads: HashMap::new(),
            ops: HashMap::new(),
            zero_dim: Vec::new(),
        }
    }

    /// Appends `inst`, or returns the value of an equal op instruction already in the body.
    pub(super) fn push(&mut self, inst: Inst) -> ValueId {
        let is_op = matches!(inst, Inst::Op { .. });
        if is_op && let Some(&id) = self.ops.get(&inst) {
            return id;
        }
        self.insts.push(inst);
        let id = self.insts.len() - 1;
        if is_op {
            self.ops.insert(self.insts[id].clone(), id);
        }
        id
    }

    pub(super) fn dtype_of(&self, id: ValueId) -> DType {
        match &self.insts[id] {
            Inst::Load { input } => self.inputs[*input],
            Inst::Const { dtype, .. } | Inst::Param { dtype, .. } => *dtype,
            Inst::Op { out, .. } => *out,
            Inst::Cast { to, .. } => *to,
            Inst::Store { .. } => DType::Bool,
        }
    }

    pub(super) fn operand(&self, v: ValueRef, user: NodeId) -> Result<Operand> {
        self.env.get(&v).copied().ok_or_else(|| {
            compile_err(format!(
                "lowering {}: its operand {}.{} is neither computed in the region nor one of \
                 the region's inputs",
                self.g.describe(user),
                v.node,
                v.output
            ))
        })
    }

    /// The operand as a value of the body (loading an input on first use).
    pub(super) fn materialize(&mut self, o: Operand) -> ValueId {
        match o {
            Operand::Value(id) => id,
            Operand::Input(k) => {
                if let Some(&id) = self.loads.get(&k) {
                    return id;
                }
                let id = self.push(Inst::Load { input: k });
                self.loads.insert(k, id);
                id
            }
            Operand::Scalar(lit, dtype, src) => self.param(src, lit, dtype),
        }
    }

    /// The scalar constant at region input `src` as a kernel argument of `dtype` (one per
    /// constant and dtype).
    pub(super) fn param(&mut self, src: usize, lit: Lit, dtype: DType) -> ValueId {
        if let Some(&id) = self.param_ids.get(&(src, dtype)) {
            return id;
        }
        let index = self.params.len();
        self.params.push(lit.convert(dtype));
        let id = self.push(Inst::Param { index, dtype });
        self.param_ids.insert((src, dtype), id);
        id
    }

    pub(super) fn constant(&mut self, value: Lit, dtype: DType) -> ValueId {
        if let Some(&id) = self.consts.get(&(value, dtype)) {
            return id;
        }
        let id = self.push(Inst::Const { value, dtype });
        self.consts.insert((value, dtype), id);
        id
    }

    pub(super) fn operand_dtype(&self, o: Operand) -> DType {
        match o {
            Operand::Value(id) => self.dtype_of(id),
            Operand::Input(k) => self.inputs[k],
            Operand::Scalar(_, d, _) => d,
        }
    }

    /// The operand converted to `dtype`: scalars become kernel arguments of `dtype` directly.
    pub(super) fn coerce(&mut self, o: Operand, dtype: DType) -> ValueId {
        if let Operand::Scalar(lit, _, src) = o {
            return self.param(src, lit, dtype);
        }
        let id = self.materialize(o);
        if self.dtype_of(id) == dtype {
            return id;
        }
        if let Some(&c) = self.casts.get(&(id, dtype)) {
            return c;
        }
        let c = self.push(Inst::Cast { arg: id, to: dtype });
        self.casts.insert((id, dtype), c);
        c
    }

    /// Eager's result type of several operands (PyTorch's `result_type`, see
    /// [`DType::result_type`]): scalar constants only raise the category, 0-d tensors only raise
    /// it over dimensioned tensors (when every operand is a scalar, they promote like tensors).
    /// `ops` is a suffix of the op's operands (`where` skips its condition).
    pub(super) fn promote(&self, ops: &[Operand]) -> DType {
        let skip = self.zero_dim.len().saturating_sub(ops.len());
        DType::result_type(ops.iter().enumerate().map(|(i, &o)| match o {
            Operand::Scalar(_, d, _) => (d, Tier::Wrapped),
            _ if self.zero_dim.get(skip + i).copied().unwrap_or(false) => {
                (self.operand_dtype(o), Tier::ZeroDim)
            }
            _ => (self.operand_dtype(o), Tier::Dim),
        }))
        .unwrap_or(DType::F32)
    }
}
