//! [`KernelSpec`] and its [`LoopKind`]: what a code generator compiles, and the small queries
//! on it (value dtypes, scalar argument dtypes).

use tensorplay_ir::{DType, ReduceOp};

use crate::spec::inst::{Inst, ValueId};

/// Largest iteration rank a kernel accepts (a guard against absurd specs, far above real use).
pub const MAX_RANK: usize = 16;

/// The loop nest a kernel runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LoopKind {
    /// Every instruction at every point of the iteration shape; outputs have that shape.
    Pointwise,
    /// Reduces `value` over `dims` of the iteration space into the single output (whose shape is
    /// the iteration shape without those dims, or with them as 1 when `keepdim`). Float sums
    /// accumulate in f32 (f64 for f64) lanes per block and f64 across blocks; integer and bool
    /// sums and products in i64; `amax`/`amin` propagate NaN; `mean` divides at the end.
    Reduce {
        op: ReduceOp,
        value: ValueId,
        /// Reduced dims (sorted, distinct, below the rank).
        dims: Vec<usize>,
        keepdim: bool,
    },
    /// Softmax (or log-softmax when `log`) of `value` along the last dim, one row at a time; the
    /// single output has the iteration shape.
    Softmax { value: ValueId, log: bool },
}

/// A kernel: what to compute at each point and how to loop. See the [`spec` module docs](crate::spec).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSpec {
    /// Rank of the iteration space (for reductions and softmax: of the reduced input).
    pub rank: usize,
    /// Dtype of each kernel input.
    pub inputs: Vec<DType>,
    /// Dtype of each kernel output.
    pub outputs: Vec<DType>,
    /// The body, in SSA order.
    pub insts: Vec<Inst>,
    /// The loop nest.
    pub kind: LoopKind,
}

impl KernelSpec {
    /// Which instructions the kernel needs, by index: backwards from its stores and its loop
    /// value (what every code generator emits; the rest is dead).
    pub fn liveness(&self) -> Vec<bool> {
        let mut live = vec![false; self.insts.len()];
        if let LoopKind::Reduce { value, .. } | LoopKind::Softmax { value, .. } = &self.kind {
            live[*value] = true;
        }
        for i in (0..self.insts.len()).rev() {
            if let Inst::Store { .. } = self.insts[i] {
                live[i] = true;
            }
            if !live[i] {
                continue;
            }
            match &self.insts[i] {
                Inst::Op { args, .. } => args.iter().for_each(|&a| live[a] = true),
                Inst::Cast { arg, .. } => live[*arg] = true,
                Inst::Store { value, .. } => live[*value] = true,
                Inst::Load { .. } | Inst::Const { .. } | Inst::Param { .. } => {}
            }
        }
        live
    }

    /// The dtype of each scalar kernel argument ([`Inst::Param`]), by index.
    ///
    /// ```
    /// use tensorplay_kernel::spec::{Inst, KernelSpec, LoopKind};
    /// use tensorplay_ir::{DType, ScalarOp};
    /// let k = KernelSpec { rank: 1, inputs: vec![DType::F32], outputs: vec![DType::F32],
    ///     insts: vec![
    ///         Inst::Load { input: 0 },
    ///         Inst::Param { index: 0, dtype: DType::F32 },
    ///         Inst::Op { op: ScalarOp::Mul, args: vec![0, 1], compute: DType::F32, out: DType::F32 },
    ///         Inst::Store { output: 0, value: 2 },
    ///     ],
    ///     kind: LoopKind::Pointwise };
    /// assert_eq!(k.param_dtypes(), vec![DType::F32]);
    /// ```
    pub fn param_dtypes(&self) -> Vec<DType> {
        self.insts
            .iter()
            .filter_map(|i| match i {
                Inst::Param { dtype, .. } => Some(*dtype),
                _ => None,
            })
            .collect()
    }

    /// The dtype of value `id` (`None` for a `Store` or an id out of range).
    ///
    /// ```
    /// use tensorplay_kernel::spec::{Inst, KernelSpec, LoopKind};
    /// use tensorplay_ir::DType;
    /// let k = KernelSpec { rank: 1, inputs: vec![DType::I32], outputs: vec![DType::I32],
    ///     insts: vec![Inst::Load { input: 0 }, Inst::Store { output: 0, value: 0 }],
    ///     kind: LoopKind::Pointwise };
    /// assert_eq!(k.value_dtype(0), Some(DType::I32));
    /// assert_eq!(k.value_dtype(1), None);
    /// ```
    pub fn value_dtype(&self, id: ValueId) -> Option<DType> {
        match self.insts.get(id)? {
            Inst::Load { input } => self.inputs.get(*input).copied(),
            Inst::Const { dtype, .. } | Inst::Param { dtype, .. } => Some(*dtype),
            Inst::Op { out, .. } => Some(*out),
            Inst::Cast { to, .. } => Some(*to),
            Inst::Store { .. } => None,
        }
    }
}
