//! Target-independent kernel specs: a fused [`Region`] of a [`Graph`] lowered to SSA scalar code
//! plus a loop kind.
//!
//! A [`KernelSpec`] is what a code generator compiles: the dtypes of the kernel's inputs and
//! outputs, the rank of the iteration space, a list of scalar instructions ([`Inst`]) evaluated
//! at every point of the iteration space, and the [`LoopKind`] (pointwise, a reduction, or
//! softmax rows). Specs are structural values: two regions that compute the same thing on the same
//! dtypes and ranks lower to equal specs, which hash equally, so together with the
//! [`LoopLayout`] of the operands they key the kernel cache. `Display` prints a stable text form
//! (snapshot tests, `TP_LOGS=clif`).
//!
//! # Dtype rules (eager's, see `tensorplay_core::ops::{binary, unary}`)
//!
//! Each op computes in its *compute dtype*: the promotion of its operand dtypes, where scalar
//! constants (captured Rust scalars, [`Constant::Float`]/[`Constant::Int`]/[`Constant::Bool`])
//! only raise the category ([`DType::promote_with_scalar`]). Floating ops on integer or bool
//! inputs compute in f32, division is true division, predicates produce bool. Operands are
//! converted explicitly with [`Inst::Cast`] where their dtype differs from the compute dtype.
//! f16/bf16 values are held in f32 and — unlike eager, which rounds after every op — rounded once,
//! when stored (or when an explicit `to_dtype` asks for a 16-bit float).
//!
//! Lowering reads each op's declared lowering from an [`OpLowerings`] table (the op table of
//! `tensorplay-core`; here a two-op stand-in):
//!
//! ```
//! use tensorplay_kernel::lowering::{DTypeRule, Lower, OpLowerings, Pointwise, expr};
//! use tensorplay_kernel::region::{Region, RegionKind};
//! use tensorplay_kernel::spec::{Lit, lower};
//! use tensorplay_ir::graph::{Constant, GraphBuilder, OpCall};
//! use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
//!
//! struct Table;
//! impl OpLowerings for Table {
//!     fn lowering(&self, call: &OpCall) -> Option<Lower> {
//!         let p = match call.name.as_str() {
//!             "tp::mul" => Pointwise::op(expr::mul, DTypeRule::Promote),
//!             "tp::relu" => Pointwise::op(expr::relu, DTypeRule::NoBool),
//!             _ => return None,
//!         };
//!         Some(Lower::Pointwise(p))
//!     }
//! }
//!
//! let m = TensorMeta::new(&[8], DType::F32, Device::Cpu);
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", m.clone());
//! let two = b.constant(Constant::Float { value: 2.0, dtype: DType::F64 }, Device::Cpu)?;
//! let y = b.op("tp::mul", OpClass::Elementwise, vec![x.into(), two.into()], vec![m.clone()])?;
//! let z = b.op("tp::relu", OpClass::Elementwise, vec![y[0].into()], vec![m])?;
//! b.output(&z)?;
//! let g = b.finish()?;
//! let region = Region { id: 0, kind: RegionKind::Pointwise,
//!     nodes: vec![y[0].node, z[0].node], inputs: vec![x, two], outputs: vec![z[0]] };
//! let k = lower(&g, &region, &Table)?;
//! assert_eq!(k.inputs, vec![x]); // the scalar constant is a kernel argument
//! assert_eq!(k.params, vec![Lit::Float(2.0)]);
//! assert_eq!(k.spec.to_string(), "\
//! kernel pointwise rank=1 inputs=[f32] outputs=[f32]
//!   %0 = load in0 : f32
//!   %1 = param 0 : f32
//!   %2 = mul(%0, %1) : f32
//!   %3 = relu(%2) : f32
//!   store out0, %3
//! ");
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use tensorplay_ir::CompileKind;
use tensorplay_ir::dtype::Tier;

use tensorplay_ir::PowBy;
use tensorplay_ir::graph::attr::fmt_float;
use tensorplay_ir::graph::{Arg, Attr, Constant, Graph, NodeKind, ValueRef};
use tensorplay_ir::{
    Category, DType, Error, LibmFn, LibmFn2, NodeId, ReduceOp, Result, ScalarExpr, ScalarOp,
};

use crate::lowering::{DTypeRule, OpLowerings, pointwise};
use crate::region::{Region, RegionKind};

/// Index of an instruction (and of the value it defines) in [`KernelSpec::insts`].
pub type ValueId = usize;

/// Largest iteration rank a kernel accepts (a guard against absurd specs, far above real use).
pub const MAX_RANK: usize = 16;

/// A scalar literal. Equality and hashing compare floats by bit pattern (so `-0.0 != 0.0` and a
/// NaN equals itself), which is what a cache key needs.
///
/// ```
/// use tensorplay_kernel::spec::Lit;
/// assert_eq!(Lit::Float(f64::NAN), Lit::Float(f64::NAN));
/// assert_ne!(Lit::Float(0.0), Lit::Float(-0.0));
/// assert_eq!(Lit::Int(3).to_string(), "3");
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Lit {
    /// A floating value (already rounded to the constant's dtype).
    Float(f64),
    /// An integer value (already wrapped to the constant's dtype).
    Int(i64),
    /// A truth value.
    Bool(bool),
}

impl Lit {
    fn key(&self) -> (u8, u64) {
        match *self {
            Lit::Float(v) => (0, v.to_bits()),
            Lit::Int(v) => (1, v as u64),
            Lit::Bool(v) => (2, v as u64),
        }
    }

    /// The category of the literal (what a scalar constant contributes to promotion).
    pub fn category(&self) -> Category {
        match self {
            Lit::Float(_) => Category::Floating,
            Lit::Int(_) => Category::Integer,
            Lit::Bool(_) => Category::Bool,
        }
    }

    /// The value converted to `dtype` with the runtime's cast rules (float to int truncates and
    /// saturates, NaN becomes 0; anything to bool is `!= 0`; f16/bf16 round to nearest even via
    /// f32, like eager's conversion of a wrapped scalar).
    ///
    /// ```
    /// use tensorplay_kernel::spec::Lit;
    /// use tensorplay_ir::DType;
    /// assert_eq!(Lit::Float(0.1).convert(DType::F16), Lit::Float(0.0999755859375));
    /// assert_eq!(Lit::Float(-2.7).convert(DType::I32), Lit::Int(-2));
    /// assert_eq!(Lit::Int(1 << 40).convert(DType::I32), Lit::Int(0));
    /// assert_eq!(Lit::Float(f64::NAN).convert(DType::Bool), Lit::Bool(true));
    /// ```
    pub fn convert(self, dtype: DType) -> Lit {
        let as_f64 = |l: Lit| match l {
            Lit::Float(v) => v,
            Lit::Int(v) => v as f64,
            Lit::Bool(v) => v as u8 as f64,
        };
        let as_f32 = |l: Lit| match l {
            Lit::Float(v) => v as f32,
            Lit::Int(v) => v as f32,
            Lit::Bool(v) => v as u8 as f32,
        };
        let as_i64 = |l: Lit| match l {
            Lit::Float(v) => v as i64,
            Lit::Int(v) => v,
            Lit::Bool(v) => v as i64,
        };
        match dtype {
            DType::F64 => Lit::Float(as_f64(self)),
            DType::F32 => Lit::Float(as_f32(self) as f64),
            DType::F16 => Lit::Float(f16_bits_to_f32(f32_to_f16_bits(as_f32(self))) as f64),
            DType::BF16 => Lit::Float(bf16_bits_to_f32(f32_to_bf16_bits(as_f32(self))) as f64),
            DType::I64 => Lit::Int(as_i64(self)),
            DType::I32 => Lit::Int(match self {
                Lit::Float(v) => v as i32 as i64,
                other => as_i64(other) as i32 as i64,
            }),
            DType::Bool => Lit::Bool(match self {
                Lit::Float(v) => v != 0.0,
                Lit::Int(v) => v != 0,
                Lit::Bool(v) => v,
            }),
        }
    }
}

impl PartialEq for Lit {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Lit {}

impl Hash for Lit {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Float(v) => f.write_str(&fmt_float(*v)),
            Lit::Int(v) => write!(f, "{v}"),
            Lit::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// One SSA instruction of a kernel body. Every instruction but `Store` defines the value with its
/// own index.
#[derive(Debug, Clone)]
pub enum Inst {
    /// The element of kernel input `input` at the current point (broadcast and strided loads are
    /// the launcher's business: each input has strides over the iteration space).
    Load { input: usize },
    /// A scalar constant of `dtype` (`value` is already exact in that dtype): only constants
    /// lowering itself introduces (bounds of `clamp`, the pieces of a strength-reduced `pow`).
    Const { value: Lit, dtype: DType },
    /// Scalar kernel argument `index`, of `dtype`: the value of a scalar constant of the graph,
    /// read once per call from [`ScalarArgs`](crate::args::ScalarArgs), so one
    /// compiled kernel serves every value. The `k`-th `Param` of a spec has index `k`.
    Param { index: usize, dtype: DType },
    /// `op` applied to `args` (already of the compute dtype, except `where`'s bool condition and
    /// the bool operands of logical ops), producing `out` (bool for predicates, else `compute`).
    Op {
        op: ScalarOp,
        args: Vec<ValueId>,
        compute: DType,
        out: DType,
    },
    /// A dtype conversion with the runtime's cast rules.
    Cast { arg: ValueId, to: DType },
    /// Writes `value` to kernel output `output` at the current point.
    Store { output: usize, value: ValueId },
}

/// Bitwise identity of a scalar op: its variant and its payload (`Clamp` and `NanToNum` values
/// compared by bits, the libm function by its position).
fn op_key(op: &ScalarOp) -> (std::mem::Discriminant<ScalarOp>, [Option<u64>; 3]) {
    let bits = |v: &Option<f64>| v.map(f64::to_bits);
    let payload = match op {
        ScalarOp::Clamp { min, max } => [bits(min), bits(max), None],
        ScalarOp::NanToNum {
            nan,
            posinf,
            neginf,
        } => [Some(nan.to_bits()), bits(posinf), bits(neginf)],
        ScalarOp::Libm(f) => [
            LibmFn::ALL.iter().position(|g| g == f).map(|i| i as u64),
            None,
            None,
        ],
        ScalarOp::Libm2(f) => [
            LibmFn2::ALL.iter().position(|g| g == f).map(|i| i as u64),
            None,
            None,
        ],
        _ => [None; 3],
    };
    (std::mem::discriminant(op), payload)
}

impl PartialEq for Inst {
    fn eq(&self, other: &Self) -> bool {
        use Inst::*;
        match (self, other) {
            (Load { input: a }, Load { input: b }) => a == b,
            (
                Const {
                    value: a,
                    dtype: da,
                },
                Const {
                    value: b,
                    dtype: db,
                },
            ) => a == b && da == db,
            (
                Param {
                    index: a,
                    dtype: da,
                },
                Param {
                    index: b,
                    dtype: db,
                },
            ) => a == b && da == db,
            (
                Op {
                    op: a,
                    args: aa,
                    compute: ca,
                    out: oa,
                },
                Op {
                    op: b,
                    args: ab,
                    compute: cb,
                    out: ob,
                },
            ) => op_key(a) == op_key(b) && aa == ab && ca == cb && oa == ob,
            (Cast { arg: a, to: ta }, Cast { arg: b, to: tb }) => a == b && ta == tb,
            (
                Store {
                    output: a,
                    value: va,
                },
                Store {
                    output: b,
                    value: vb,
                },
            ) => a == b && va == vb,
            _ => false,
        }
    }
}

impl Eq for Inst {}

impl Hash for Inst {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Inst::Load { input } => input.hash(state),
            Inst::Const { value, dtype } => {
                value.hash(state);
                dtype.hash(state);
            }
            Inst::Param { index, dtype } => {
                index.hash(state);
                dtype.hash(state);
            }
            Inst::Op {
                op,
                args,
                compute,
                out,
            } => {
                op_key(op).hash(state);
                args.hash(state);
                compute.hash(state);
                out.hash(state);
            }
            Inst::Cast { arg, to } => {
                arg.hash(state);
                to.hash(state);
            }
            Inst::Store { output, value } => {
                output.hash(state);
                value.hash(state);
            }
        }
    }
}

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

/// A kernel: what to compute at each point and how to loop. See the [module docs](self).
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

/// How the innermost dimension of one operand steps through memory — the one property of the
/// strides a compiled kernel is specialised on (unit stride: vector loads; zero: a value hoisted
/// out of the inner loop and splatted; anything else: per-element gathers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrideClass {
    /// Stride 1 (adjacent elements).
    Unit,
    /// Stride 0 (a broadcast along the inner dim).
    Zero,
    /// Any other stride (transposed, sliced with a step, negative).
    Strided,
}

impl StrideClass {
    /// The class of an element stride.
    ///
    /// ```
    /// use tensorplay_kernel::spec::StrideClass;
    /// assert_eq!(StrideClass::of(1), StrideClass::Unit);
    /// assert_eq!(StrideClass::of(0), StrideClass::Zero);
    /// assert_eq!(StrideClass::of(-1), StrideClass::Strided);
    /// ```
    pub fn of(stride: isize) -> StrideClass {
        match stride {
            1 => StrideClass::Unit,
            0 => StrideClass::Zero,
            _ => StrideClass::Strided,
        }
    }
}

/// The shape of the loop nest a compiled kernel runs, after the launcher dropped unit dims and
/// merged dims that step uniformly for every operand: how many loop dims there are, how many of
/// them are reduced (0 for pointwise, 1 for softmax rows), where the reduced dims sit, and the
/// [`StrideClass`] of every operand's innermost loop dim (inputs, then outputs). Sizes and
/// strides themselves are runtime arguments, so one layout serves every size.
///
/// ```
/// use tensorplay_kernel::spec::{LoopLayout, StrideClass};
/// let l = LoopLayout { dims: 2, reduced: 0, kept_inner: false, in_place: false,
///                      classes: vec![StrideClass::Unit, StrideClass::Zero] };
/// assert_eq!(l.to_string(), "dims=2 reduced=0 classes=[unit, zero]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoopLayout {
    /// Number of loop dims (at least 1).
    pub dims: usize,
    /// How many loop dims are reduced (reductions: at least 1; softmax: 1; else 0).
    pub reduced: usize,
    /// Reductions only. `false`: the reduced dims are the trailing loop dims (rows mode: each
    /// kept point reduces a run, vectorized along the reduced inner dim). `true`: the loop dims
    /// are `[kept outer.., reduced.., kept inner]` (column mode: a vector of adjacent kept points
    /// accumulates together while the reduced dims are walked, for reductions whose reduced dims
    /// are strided, like `sum(dim=0)` of a row-major matrix).
    pub kept_inner: bool,
    /// Pointwise only: some output is the very memory of an input (same address, dtype, shape
    /// and strides), as in an optimizer's `p -= lr * g`. The kernel then reads every input of
    /// an element before it writes any output of it, and a staged kernel writes its outputs
    /// only in its last stage (earlier stages read inputs the stores would overwrite).
    pub in_place: bool,
    /// Innermost-loop-dim class of each operand, inputs then outputs. In rows mode reduction
    /// outputs are written once per kept point and are always `Zero`.
    pub classes: Vec<StrideClass>,
}

impl fmt::Display for LoopLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let classes: Vec<&str> = self
            .classes
            .iter()
            .map(|c| match c {
                StrideClass::Unit => "unit",
                StrideClass::Zero => "zero",
                StrideClass::Strided => "strided",
            })
            .collect();
        write!(
            f,
            "dims={} reduced={}{}{} classes=[{}]",
            self.dims,
            self.reduced,
            if self.kept_inner { " kept_inner" } else { "" },
            if self.in_place { " in_place" } else { "" },
            classes.join(", ")
        )
    }
}

/// The largest finite value of a floating `dtype` (`nan_to_num`'s default replacement of +inf;
/// its negation replaces -inf).
pub fn largest_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MAX,
        DType::F16 => 65504.0,
        DType::BF16 => f32::from_bits(0x7F7F_0000) as f64,
        _ => f32::MAX as f64,
    }
}

fn lower_name(op: &ScalarOp) -> String {
    match op {
        ScalarOp::Clamp { min, max } => {
            let b = |v: &Option<f64>| v.map_or("none".to_string(), fmt_float);
            format!("clamp[{}, {}]", b(min), b(max))
        }
        ScalarOp::Libm(f) => f.name().to_string(),
        ScalarOp::Libm2(f) => f.name().to_string(),
        ScalarOp::NanToNum {
            nan,
            posinf,
            neginf,
        } => {
            let b = |v: &Option<f64>| v.map_or("none".to_string(), fmt_float);
            format!(
                "nan_to_num[{}, {}, {}]",
                fmt_float(*nan),
                b(posinf),
                b(neginf)
            )
        }
        other => format!("{other:?}").to_lowercase(),
    }
}

fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Prod => "prod",
        ReduceOp::Amax => "amax",
        ReduceOp::Amin => "amin",
    }
}

fn dtype_list(ds: &[DType]) -> String {
    ds.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for KernelSpec {
    /// One header line (kind, rank, operand dtypes) and one line per instruction.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            LoopKind::Pointwise => "pointwise".to_string(),
            LoopKind::Reduce {
                op,
                value,
                dims,
                keepdim,
            } => format!(
                "reduce {}(%{value}) dims={dims:?} keepdim={keepdim}",
                reduce_name(*op)
            ),
            LoopKind::Softmax { value, log } => {
                format!("{}(%{value})", if *log { "log_softmax" } else { "softmax" })
            }
        };
        writeln!(
            f,
            "kernel {kind} rank={} inputs=[{}] outputs=[{}]",
            self.rank,
            dtype_list(&self.inputs),
            dtype_list(&self.outputs)
        )?;
        for (i, inst) in self.insts.iter().enumerate() {
            match inst {
                Inst::Load { input } => writeln!(
                    f,
                    "  %{i} = load in{input} : {}",
                    self.inputs.get(*input).map_or("?", |d| d.name())
                )?,
                Inst::Const { value, dtype } => writeln!(f, "  %{i} = const {value} : {dtype}")?,
                Inst::Param { index, dtype } => writeln!(f, "  %{i} = param {index} : {dtype}")?,
                Inst::Op {
                    op,
                    args,
                    compute,
                    out,
                } => {
                    let args: Vec<String> = args.iter().map(|a| format!("%{a}")).collect();
                    let within = if compute != out {
                        format!(" in {compute}")
                    } else {
                        String::new()
                    };
                    writeln!(
                        f,
                        "  %{i} = {}({}){within} : {out}",
                        lower_name(op),
                        args.join(", ")
                    )?
                }
                Inst::Cast { arg, to } => writeln!(f, "  %{i} = cast %{arg} : {to}")?,
                Inst::Store { output, value } => writeln!(f, "  store out{output}, %{value}")?,
            }
        }
        Ok(())
    }
}

/// Which operand dtypes an op accepts, by compute dtype. Exhaustive on purpose: a new scalar
/// op must state where it computes.
fn op_accepts(op: ScalarOp, compute: DType) -> bool {
    use ScalarOp::*;
    let float = compute.is_float();
    let boolean = compute == DType::Bool;
    match op {
        Exp | Log | Log1p | Expm1 | Sqrt | Rsqrt | Reciprocal | Sin | Cos | Tanh | Sigmoid
        | GeluErf | GeluTanh | Silu | Erf | Div | Libm(_) | Libm2(_) => float,
        Pow => !boolean,
        NanToNum { .. } => true,
        BitAnd | BitOr | BitXor | BitNot => !float,
        Shl | Shr => !float && !boolean,
        Neg | Relu | Sub | Floor | Ceil | Round => !boolean,
        Clamp { .. } => !boolean,
        Cast => false,
        LogicalNot | LogicalAnd | LogicalOr | LogicalXor => boolean,
        Abs | Sign | Square | Add | Mul | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge
        | Where => true,
    }
}

impl KernelSpec {
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
        let err = |msg: String| {
            Err(Error::compile(
                CompileKind::Lowering,
                format!("kernel spec: {msg}"),
            ))
        };
        if self.rank > MAX_RANK {
            return err(format!("rank {} exceeds {MAX_RANK}", self.rank));
        }
        let mut stored = vec![0usize; self.outputs.len()];
        let mut params = 0usize;
        for (i, inst) in self.insts.iter().enumerate() {
            let arg_dtype = |a: ValueId| -> Result<DType> {
                if a >= i {
                    return Err(Error::compile(
                        CompileKind::Lowering,
                        format!("kernel spec: %{i} uses %{a}, which is not defined before it"),
                    ));
                }
                self.value_dtype(a).ok_or_else(|| {
                    Error::compile(
                        CompileKind::Lowering,
                        format!("kernel spec: %{i} uses a store (%{a}) as a value"),
                    )
                })
            };
            match inst {
                Inst::Load { input } => {
                    if *input >= self.inputs.len() {
                        return err(format!(
                            "%{i} loads input {input} but there are {}",
                            self.inputs.len()
                        ));
                    }
                }
                Inst::Const { value, dtype } => {
                    let ok = match value {
                        Lit::Float(_) => dtype.is_float(),
                        Lit::Int(_) => dtype.is_int(),
                        Lit::Bool(_) => *dtype == DType::Bool,
                    };
                    if !ok {
                        return err(format!("%{i}: constant {value} cannot have dtype {dtype}"));
                    }
                }
                Inst::Param { index, .. } => {
                    if *index != params {
                        return err(format!(
                            "%{i} reads param {index}, but it is param number {params}"
                        ));
                    }
                    params += 1;
                }
                Inst::Op {
                    op,
                    args,
                    compute,
                    out,
                } => {
                    if args.len() != op.arity() {
                        return err(format!(
                            "%{i}: {} takes {} operands, got {}",
                            lower_name(op),
                            op.arity(),
                            args.len()
                        ));
                    }
                    if !op_accepts(*op, *compute) {
                        return err(format!(
                            "%{i}: {} cannot compute in {compute}",
                            lower_name(op)
                        ));
                    }
                    let want_out = if op.is_predicate() {
                        DType::Bool
                    } else {
                        *compute
                    };
                    if *out != want_out {
                        return err(format!(
                            "%{i}: {} in {compute} produces {want_out}, not {out}",
                            lower_name(op)
                        ));
                    }
                    for (k, &a) in args.iter().enumerate() {
                        let d = arg_dtype(a)?;
                        let want = match op {
                            ScalarOp::Where if k == 0 => DType::Bool,
                            _ => *compute,
                        };
                        if d != want {
                            return err(format!(
                                "%{i}: operand {k} of {} is {d}, expected {want}",
                                lower_name(op)
                            ));
                        }
                    }
                }
                Inst::Cast { arg, .. } => {
                    arg_dtype(*arg)?;
                }
                Inst::Store { output, value } => {
                    let d = arg_dtype(*value)?;
                    let Some(&want) = self.outputs.get(*output) else {
                        return err(format!(
                            "store to output {output} but there are {}",
                            self.outputs.len()
                        ));
                    };
                    if d != want {
                        return err(format!("store of a {d} value to {want} output {output}"));
                    }
                    stored[*output] += 1;
                }
            }
        }
        let value_of = |v: ValueId| -> Result<DType> {
            self.value_dtype(v).ok_or_else(|| {
                Error::compile(
                    CompileKind::Lowering,
                    format!("kernel spec: the loop value %{v} is not a value"),
                )
            })
        };
        match &self.kind {
            LoopKind::Pointwise => {
                if let Some(o) = stored.iter().position(|&n| n != 1) {
                    return err(format!(
                        "output {o} is stored {} times (expected once)",
                        stored[o]
                    ));
                }
            }
            LoopKind::Reduce {
                op,
                value,
                dims,
                keepdim: _,
            } => {
                if self.outputs.len() != 1 || stored.iter().any(|&n| n != 0) {
                    return err("a reduction writes exactly one output, with no stores".into());
                }
                if dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= self.rank) {
                    return err(format!(
                        "reduced dims {dims:?} must be sorted, distinct and below rank {}",
                        self.rank
                    ));
                }
                let d = value_of(*value)?;
                let want = reduce_out_dtype(*op, d)?;
                if self.outputs[0] != want {
                    return err(format!(
                        "{} of {d} produces {want}, but the output is {}",
                        reduce_name(*op),
                        self.outputs[0]
                    ));
                }
            }
            LoopKind::Softmax { value, .. } => {
                if self.outputs.len() != 1 || stored.iter().any(|&n| n != 0) {
                    return err("a softmax writes exactly one output, with no stores".into());
                }
                let d = value_of(*value)?;
                if !d.is_float() || self.outputs[0] != d {
                    return err(format!(
                        "softmax of {d} into {}: both must be the same floating dtype",
                        self.outputs[0]
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The output dtype of reduction `op` over values of dtype `d` (eager's rule: float sums, means,
/// products and extrema keep the dtype; integer and bool sums and products give i64; means need
/// a floating input).
///
/// ```
/// use tensorplay_kernel::spec::reduce_out_dtype;
/// use tensorplay_ir::{DType, ReduceOp};
/// assert_eq!(reduce_out_dtype(ReduceOp::Sum, DType::Bool)?, DType::I64);
/// assert_eq!(reduce_out_dtype(ReduceOp::Amax, DType::I32)?, DType::I32);
/// assert!(reduce_out_dtype(ReduceOp::Mean, DType::I64).is_err());
/// # Ok::<(), tensorplay_ir::Error>(())
/// ```
pub fn reduce_out_dtype(op: ReduceOp, d: DType) -> Result<DType> {
    match op {
        ReduceOp::Sum | ReduceOp::Prod => Ok(if d.is_float() { d } else { DType::I64 }),
        ReduceOp::Mean if !d.is_float() => Err(Error::dtype(
            "mean",
            format!("input dtype must be floating point, got {d}"),
        )),
        _ => Ok(d),
    }
}

/// A region lowered to a kernel, with the graph values that feed and receive its operands.
#[derive(Debug, Clone, PartialEq)]
pub struct LoweredRegion {
    /// The kernel.
    pub spec: KernelSpec,
    /// For each kernel input, the region input it reads (region inputs that are scalar
    /// constants are kernel arguments instead, see `params`).
    pub inputs: Vec<ValueRef>,
    /// The value of each scalar kernel argument ([`Inst::Param`]), already converted to its
    /// dtype: what a launch passes in [`ScalarArgs`](crate::args::ScalarArgs).
    pub params: Vec<Lit>,
    /// For each kernel output, the region output it writes.
    pub outputs: Vec<ValueRef>,
}

/// An operand while lowering: a value of the body, a kernel input not loaded yet, or a scalar
/// constant of the graph (with the constant's own dtype and its position among the region's
/// inputs), which becomes a kernel argument when used.
#[derive(Debug, Clone, Copy)]
enum Operand {
    Value(ValueId),
    Input(usize),
    Scalar(Lit, DType, usize),
}

struct Lowerer<'g> {
    g: &'g Graph,
    insts: Vec<Inst>,
    inputs: Vec<DType>,
    input_refs: Vec<ValueRef>,
    env: HashMap<ValueRef, Operand>,
    consts: HashMap<(Lit, DType), ValueId>,
    /// (region input, dtype) → its `Param` value.
    param_ids: HashMap<(usize, DType), ValueId>,
    params: Vec<Lit>,
    casts: HashMap<(ValueId, DType), ValueId>,
    loads: HashMap<usize, ValueId>,
    /// Per operand of the op being lowered: whether it is a 0-d tensor (promotion tier).
    zero_dim: Vec<bool>,
}

fn compile_err(msg: String) -> Error {
    Error::compile(CompileKind::Lowering, msg)
}

impl<'g> Lowerer<'g> {
    fn push(&mut self, inst: Inst) -> ValueId {
        self.insts.push(inst);
        self.insts.len() - 1
    }

    fn dtype_of(&self, id: ValueId) -> DType {
        match &self.insts[id] {
            Inst::Load { input } => self.inputs[*input],
            Inst::Const { dtype, .. } | Inst::Param { dtype, .. } => *dtype,
            Inst::Op { out, .. } => *out,
            Inst::Cast { to, .. } => *to,
            Inst::Store { .. } => DType::Bool,
        }
    }

    fn operand(&self, v: ValueRef, user: NodeId) -> Result<Operand> {
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
    fn materialize(&mut self, o: Operand) -> ValueId {
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
    fn param(&mut self, src: usize, lit: Lit, dtype: DType) -> ValueId {
        if let Some(&id) = self.param_ids.get(&(src, dtype)) {
            return id;
        }
        let index = self.params.len();
        self.params.push(lit.convert(dtype));
        let id = self.push(Inst::Param { index, dtype });
        self.param_ids.insert((src, dtype), id);
        id
    }

    fn constant(&mut self, value: Lit, dtype: DType) -> ValueId {
        if let Some(&id) = self.consts.get(&(value, dtype)) {
            return id;
        }
        let id = self.push(Inst::Const { value, dtype });
        self.consts.insert((value, dtype), id);
        id
    }

    fn operand_dtype(&self, o: Operand) -> DType {
        match o {
            Operand::Value(id) => self.dtype_of(id),
            Operand::Input(k) => self.inputs[k],
            Operand::Scalar(_, d, _) => d,
        }
    }

    /// The operand converted to `dtype`: scalars become kernel arguments of `dtype` directly.
    fn coerce(&mut self, o: Operand, dtype: DType) -> ValueId {
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
    fn promote(&self, ops: &[Operand]) -> DType {
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

/// Category of a clamp bound attribute.
fn attr_category(a: &Attr) -> Option<Category> {
    match a {
        Attr::Int(_) => Some(Category::Integer),
        Attr::Float(_) => Some(Category::Floating),
        Attr::Bool(_) => Some(Category::Bool),
        _ => None,
    }
}

fn clamp_attrs(call: &tensorplay_ir::graph::OpCall) -> Vec<&Attr> {
    call.args
        .iter()
        .filter_map(|a| match a {
            Arg::Attr { value, .. } => Some(value),
            _ => None,
        })
        .collect()
}

/// Lowers `region` of `graph` to a [`KernelSpec`], applying eager's dtype rules (see the
/// [module docs](self)). Scalar constants among the region's inputs become scalar kernel
/// arguments ([`Inst::Param`], values in [`LoweredRegion::params`]) — except a `pow` exponent
/// that strength reduction turns into code; every other input becomes a kernel input, in region
/// order.
///
/// Errors (`Error::Compile`, or the dtype error eager would raise) for ops that are not builtin
/// elementwise ops, dtype combinations eager rejects, node metadata that disagrees with eager's
/// rules, reduction or softmax regions with outputs other than their result, and softmax over a
/// dim other than the last.
pub fn lower(graph: &Graph, region: &Region, table: &dyn OpLowerings) -> Result<LoweredRegion> {
    let mut l = Lowerer {
        g: graph,
        insts: Vec::new(),
        inputs: Vec::new(),
        input_refs: Vec::new(),
        env: HashMap::new(),
        consts: HashMap::new(),
        param_ids: HashMap::new(),
        params: Vec::new(),
        casts: HashMap::new(),
        loads: HashMap::new(),
        zero_dim: Vec::new(),
    };
    for (src, &v) in region.inputs.iter().enumerate() {
        if l.env.contains_key(&v) {
            continue;
        }
        let node = graph.node(v.node).ok_or_else(|| {
            compile_err(format!(
                "region {}: input node {} is not in the graph",
                region.id, v.node
            ))
        })?;
        let scalar = match &node.kind {
            NodeKind::Constant(Constant::Float { value, dtype }) => {
                Some((Lit::Float(*value), *dtype))
            }
            NodeKind::Constant(Constant::Int { value, dtype }) => Some((Lit::Int(*value), *dtype)),
            NodeKind::Constant(Constant::Bool(b)) => Some((Lit::Bool(*b), DType::Bool)),
            _ => None,
        };
        let op = match scalar {
            Some((lit, dtype)) => Operand::Scalar(lit, dtype, src),
            None => {
                let meta = graph.meta(v).ok_or_else(|| {
                    compile_err(format!(
                        "region {}: input {}.{} has no metadata",
                        region.id, v.node, v.output
                    ))
                })?;
                l.inputs.push(meta.dtype);
                l.input_refs.push(v);
                Operand::Input(l.inputs.len() - 1)
            }
        };
        l.env.insert(v, op);
    }

    let iter_shape = region.iteration_shape(graph)?;
    let rank = iter_shape.len();
    let mut kind = LoopKind::Pointwise;
    for (pos, &id) in region.nodes.iter().enumerate() {
        let node = graph.node(id).ok_or_else(|| {
            compile_err(format!(
                "region {}: node {id} is not in the graph",
                region.id
            ))
        })?;
        let call = node.as_op().ok_or_else(|| {
            compile_err(format!(
                "region {}: {} is not an op",
                region.id,
                graph.describe(id)
            ))
        })?;
        let meta = node
            .outputs
            .first()
            .ok_or_else(|| compile_err(format!("{} has no output", graph.describe(id))))?;
        let arg_refs = graph.args_of(id)?;
        l.zero_dim = arg_refs
            .iter()
            .map(|&a| graph.meta(a).is_some_and(|m| m.shape.is_empty()))
            .collect();
        let args: Vec<Operand> = arg_refs
            .into_iter()
            .map(|a| l.operand(a, id))
            .collect::<Result<_>>()?;
        let last = pos + 1 == region.nodes.len();
        match &region.kind {
            RegionKind::Reduction {
                reduction,
                op,
                dims,
                keepdim,
            } if *reduction == id => {
                if !last {
                    return Err(Error::unsupported(
                        &call.name,
                        "a reduction region must end with its reduction",
                    ));
                }
                let input = args.first().copied().ok_or_else(|| {
                    compile_err(format!("{} has no tensor input", graph.describe(id)))
                })?;
                let value = l.materialize(input);
                let d = l.dtype_of(value);
                let out = reduce_out_dtype(*op, d)?;
                if out != meta.dtype {
                    return Err(compile_err(format!(
                        "{}: {} of {d} gives {out}, but the node says {}",
                        graph.describe(id),
                        reduce_name(*op),
                        meta.dtype
                    )));
                }
                let dims = if dims.is_empty() && rank > 0 {
                    (0..rank).collect()
                } else {
                    dims.clone()
                };
                kind = LoopKind::Reduce {
                    op: *op,
                    value,
                    dims,
                    keepdim: *keepdim,
                };
                l.env.insert(ValueRef::from(id), Operand::Value(value));
                continue;
            }
            RegionKind::Softmax { node, log } if *node == id => {
                if !last {
                    return Err(Error::unsupported(
                        &call.name,
                        "a softmax region must end with its softmax",
                    ));
                }
                let dim = call.args.iter().find_map(|a| match a {
                    Arg::Attr {
                        value: Attr::Int(d),
                        ..
                    } => Some(*d),
                    _ => None,
                });
                if let Some(d) = dim {
                    let d = tensorplay_ir::shape::normalize_dim(&call.name, d, rank)?;
                    if rank > 0 && d + 1 != rank {
                        return Err(Error::unsupported(
                            &call.name,
                            format!(
                                "fused softmax runs along the last dim, got dim {d} of rank {rank}"
                            ),
                        ));
                    }
                }
                let input = args.first().copied().ok_or_else(|| {
                    compile_err(format!("{} has no tensor input", graph.describe(id)))
                })?;
                let d = l.operand_dtype(input);
                if !d.is_float() || d != meta.dtype {
                    return Err(Error::dtype(
                        &call.name,
                        format!(
                            "input dtype must be floating point and match the output, got {d} -> {}",
                            meta.dtype
                        ),
                    ));
                }
                let value = l.materialize(input);
                kind = LoopKind::Softmax { value, log: *log };
                l.env.insert(ValueRef::from(id), Operand::Value(value));
                continue;
            }
            _ => {}
        }
        let (expr, p) = pointwise(table, call)?.ok_or_else(|| {
            Error::unsupported(
                &call.name,
                "not a builtin elementwise op; it cannot be fused into a kernel",
            )
        })?;
        let value = lower_op(&mut l, call, &expr, p.dtype, &args, meta.dtype)?;
        l.env.insert(ValueRef::from(id), Operand::Value(value));
    }

    let mut outputs = Vec::new();
    let mut output_refs = Vec::new();
    match kind {
        LoopKind::Pointwise => {
            for &v in &region.outputs {
                let meta = graph.meta(v).ok_or_else(|| {
                    compile_err(format!(
                        "region output {}.{} has no metadata",
                        v.node, v.output
                    ))
                })?;
                if meta.shape != iter_shape {
                    return Err(Error::unsupported(
                        "fusion",
                        format!(
                            "region {} output {} has shape {}, not the iteration shape {}",
                            region.id,
                            graph.describe(v.node),
                            tensorplay_ir::shape::fmt_shape(&meta.shape),
                            tensorplay_ir::shape::fmt_shape(&iter_shape)
                        ),
                    ));
                }
                let o = l.operand(v, v.node)?;
                let value = l.coerce(o, meta.dtype);
                outputs.push(meta.dtype);
                output_refs.push(v);
                let output = outputs.len() - 1;
                l.push(Inst::Store { output, value });
            }
        }
        LoopKind::Reduce { .. } | LoopKind::Softmax { .. } => {
            let result = match &region.kind {
                RegionKind::Reduction { reduction, .. } => *reduction,
                RegionKind::Softmax { node, .. } => *node,
                RegionKind::Pointwise => unreachable!("loop kind follows the region kind"),
            };
            if region.outputs != [ValueRef::from(result)] {
                return Err(Error::unsupported(
                    "fusion",
                    format!(
                        "region {}: a reduction or softmax region must output exactly its result",
                        region.id
                    ),
                ));
            }
            let meta = graph
                .meta(ValueRef::from(result))
                .ok_or_else(|| compile_err(format!("{} has no output", graph.describe(result))))?;
            outputs.push(meta.dtype);
            output_refs.push(ValueRef::from(result));
        }
    }
    if matches!(
        region.kind,
        RegionKind::Reduction { .. } | RegionKind::Softmax { .. }
    ) && matches!(kind, LoopKind::Pointwise)
    {
        return Err(compile_err(format!(
            "region {}: its reduction or softmax node is not among its nodes",
            region.id
        )));
    }
    let spec = KernelSpec {
        rank,
        inputs: l.inputs,
        outputs,
        insts: l.insts,
        kind,
    };
    spec.validate()?;
    Ok(LoweredRegion {
        spec,
        inputs: l.input_refs,
        params: l.params,
        outputs: output_refs,
    })
}

/// Lowers one elementwise op with eager's dtype rules; returns the value holding its result.
fn lower_op(
    l: &mut Lowerer,
    call: &tensorplay_ir::graph::OpCall,
    expr: &ScalarExpr,
    rule: DTypeRule,
    args: &[Operand],
    meta_dtype: DType,
) -> Result<ValueId> {
    use ScalarOp::*;
    let name = call.name.as_str();
    if args.len() != expr.arity() {
        return Err(compile_err(format!(
            "{name}: expected {} tensor operands, got {}",
            expr.arity(),
            args.len()
        )));
    }
    let n = args.len();
    let bool_err = || Err(Error::dtype(name, "bool tensors are not supported"));
    let d0 = l.operand_dtype(args[0]);
    // (compute dtype, operand dtypes) by the op's declared dtype rule.
    let (compute, operand_dtypes): (DType, Vec<DType>) = match rule {
        DTypeRule::Cast => {
            let x = l.materialize(args[0]);
            return Ok(l.coerce(Operand::Value(x), meta_dtype));
        }
        DTypeRule::Float => (d0.to_float(), vec![d0.to_float(); n]),
        DTypeRule::FloatOnly => {
            if !d0.is_float() {
                return Err(Error::dtype(
                    name,
                    format!("expected a floating point tensor, got {d0}"),
                ));
            }
            (d0, vec![d0; n])
        }
        DTypeRule::NoBool => {
            if d0 == DType::Bool {
                return bool_err();
            }
            (d0, vec![d0; n])
        }
        DTypeRule::Same => (d0, vec![d0; n]),
        DTypeRule::BoolToI64 => {
            let c = if d0 == DType::Bool { DType::I64 } else { d0 };
            (c, vec![c; n])
        }
        DTypeRule::Logical => (DType::Bool, vec![DType::Bool; n]),
        DTypeRule::Promote => {
            let c = l.promote(args);
            (c, vec![c; n])
        }
        DTypeRule::PromoteNoBool => {
            let c = l.promote(args);
            if c == DType::Bool {
                return Err(Error::dtype(
                    name,
                    "two bool operands are not supported (use logical ops)",
                ));
            }
            (c, vec![c; n])
        }
        DTypeRule::PromoteFloat => {
            let c = l.promote(args).to_float();
            (c, vec![c; n])
        }
        DTypeRule::Where => {
            if d0 != DType::Bool {
                return Err(Error::dtype(
                    "where",
                    format!("condition must be a bool tensor, got {d0}"),
                ));
            }
            let c = l.promote(&args[1..]);
            (c, vec![DType::Bool, c, c])
        }
        DTypeRule::Clamp => {
            let Some(Clamp { min, max }) = expr.single_op() else {
                return Err(compile_err(format!(
                    "{name}: the clamp rule needs a clamp lowering, got {expr}"
                )));
            };
            if d0 == DType::Bool {
                return bool_err();
            }
            let attrs = clamp_attrs(call);
            let cats: Vec<Category> = attrs.iter().filter_map(|a| attr_category(a)).collect();
            let c = cats
                .iter()
                .fold(d0, |d, &cat| DType::promote_with_scalar(d, cat));
            if !c.is_float() {
                // Integer clamp is exactly maximum-then-minimum with the (exact) integer bounds.
                let x = l.coerce(args[0], c);
                let bound = |a: Option<&&Attr>| match a {
                    Some(Attr::Int(v)) => Some(*v),
                    Some(Attr::Bool(b)) => Some(*b as i64),
                    _ => None,
                };
                let mut v = x;
                for (b, bop) in [
                    (bound(attrs.first()), Maximum),
                    (bound(attrs.get(1)), Minimum),
                ] {
                    if let Some(b) = b {
                        if c == DType::I32 && i32::try_from(b).is_err() {
                            return Err(Error::argument(
                                "clamp",
                                if bop == Maximum { "min" } else { "max" },
                                "a bound representable in the tensor's dtype i32",
                                b.to_string(),
                            ));
                        }
                        let k = l.constant(Lit::Int(b), c);
                        v = l.push(Inst::Op {
                            op: bop,
                            args: vec![v, k],
                            compute: c,
                            out: c,
                        });
                    }
                }
                if v == x && min.is_none() && max.is_none() {
                    return Err(Error::argument(
                        "clamp",
                        "min, max",
                        "at least one of min and max",
                        "neither",
                    ));
                }
                return check_out(l, name, v, meta_dtype);
            }
            (c, vec![c])
        }
    };
    let Some(op) = expr.single_op() else {
        // Eager computes a half op's whole expression in f32 (literals included) and rounds
        // once; so does the kernel. Where conditions stay bool.
        // Operands are first converted to their dtype (an i32 operand of an f16 op rounds to
        // f16, as eager converts it), then held in f32.
        let widen = |d: DType| if d.is_half() { DType::F32 } else { d };
        let ids: Vec<ValueId> = args
            .iter()
            .zip(&operand_dtypes)
            .map(|(&a, &d)| {
                let v = l.coerce(a, d);
                l.coerce(Operand::Value(v), widen(d))
            })
            .collect();
        let v = lower_expr(l, name, expr, &ids, widen(compute))?;
        // A predicate expression (isnan's `x != x`) already gives bool.
        let v = if compute.is_half() && l.dtype_of(v) != DType::Bool {
            l.coerce(Operand::Value(v), compute)
        } else {
            v
        };
        return check_out(l, name, v, meta_dtype);
    };
    if !op_accepts(op, compute) {
        return Err(Error::dtype(
            name,
            format!("{compute} operands are not supported"),
        ));
    }
    if op == Pow
        && let Some(v) = lower_pow_by_constant(l, args[0], args[1], compute)
    {
        return check_out(l, name, v, meta_dtype);
    }
    if matches!(op, Mul | Div)
        && compute.is_half()
        && matches!(args[1], Operand::Scalar(..))
        && l.operand_dtype(args[0]) == compute
    {
        // A half tensor times/divided by a Rust scalar: the scalar stays in f32 instead of being
        // rounded to the half type first (eager's `half_opmath_scalar`, as PyTorch).
        let x = l.coerce(args[0], DType::F32);
        let s = l.coerce(args[1], DType::F32);
        let v = l.push(Inst::Op {
            op,
            args: vec![x, s],
            compute: DType::F32,
            out: DType::F32,
        });
        let v = l.coerce(Operand::Value(v), compute);
        return check_out(l, name, v, meta_dtype);
    }
    let ids: Vec<ValueId> = args
        .iter()
        .zip(&operand_dtypes)
        .map(|(&a, &d)| l.coerce(a, d))
        .collect();
    let out = if op.is_predicate() {
        DType::Bool
    } else {
        compute
    };
    let v = l.push(Inst::Op {
        op,
        args: ids,
        compute,
        out,
    });
    check_out(l, name, v, meta_dtype)
}

/// Emits an op's scalar expression over its coerced operands `ids`, every op computing in
/// `compute` (predicates produce bool; `where` takes a bool condition).
fn lower_expr(
    l: &mut Lowerer,
    name: &str,
    e: &ScalarExpr,
    ids: &[ValueId],
    compute: DType,
) -> Result<ValueId> {
    Ok(match e {
        ScalarExpr::Arg(i) => *ids
            .get(*i)
            .ok_or_else(|| compile_err(format!("{name}: its lowering reads operand {i}")))?,
        ScalarExpr::Lit(v) => l.constant(Lit::Float(*v).convert(compute), compute),
        ScalarExpr::Op(op, args) => {
            if args.len() != op.arity() {
                return Err(compile_err(format!(
                    "{name}: {} in its lowering takes {} operands, got {}",
                    lower_name(op),
                    op.arity(),
                    args.len()
                )));
            }
            if !op_accepts(*op, compute) {
                return Err(Error::dtype(
                    name,
                    format!("{compute} operands are not supported"),
                ));
            }
            let vals = args
                .iter()
                .map(|a| lower_expr(l, name, a, ids, compute))
                .collect::<Result<Vec<_>>>()?;
            let out = if op.is_predicate() {
                DType::Bool
            } else {
                compute
            };
            l.push(Inst::Op {
                op: *op,
                args: vals,
                compute,
                out,
            })
        }
    })
}

/// Which [`PowBy`] replacement (the table eager's `pow` uses too) an exponent of value `y`
/// (already in the compute dtype) selects, if any.
fn pow_by(y: Lit) -> Option<PowBy> {
    match y {
        Lit::Int(v) => PowBy::of_int(v),
        Lit::Float(v) => PowBy::of_float(v),
        Lit::Bool(_) => None,
    }
}

/// Strength reduction of `pow(x, y)` when `y` is a scalar constant with one of the values of
/// [`PowBy`]: the general `pow` costs several times a multiplication chain (and most of a
/// kernel's compile time). Computes in `compute`, the dtype the `pow` would compute in, so
/// f16/bf16 still round once at the store and integers wrap as eager's `int_pow` does. Returns
/// `None` (lower the general `pow`) for any other exponent.
///
/// `y = 0.5` is `where(x == -inf, +inf, maximum(sqrt(x), +0))`: `sqrt` alone differs from `pow`
/// at `-0` (`sqrt(-0) = -0`, `pow(-0, 0.5) = +0`; eager's `maximum(-0, +0)` is `+0`) and at
/// `-inf` (`sqrt` gives NaN, `pow` gives `+inf`); negative numbers give NaN in both, and NaN
/// propagates through `maximum`.
fn lower_pow_by_constant(
    l: &mut Lowerer,
    base: Operand,
    exponent: Operand,
    compute: DType,
) -> Option<ValueId> {
    let y = match exponent {
        Operand::Scalar(lit, _, _) => lit.convert(compute),
        Operand::Value(id) => match l.insts[id] {
            Inst::Const { value, .. } => value.convert(compute),
            _ => return None,
        },
        Operand::Input(_) => return None,
    };
    let by = pow_by(y)?;
    let float = compute.is_float();
    if matches!(by, PowBy::MinusOne | PowBy::Half) && !float {
        return None;
    }
    let mul = |l: &mut Lowerer, a: ValueId, b: ValueId| {
        l.push(Inst::Op {
            op: ScalarOp::Mul,
            args: vec![a, b],
            compute,
            out: compute,
        })
    };
    let v = match by {
        PowBy::Zero => l.constant(Lit::Int(1).convert(compute), compute),
        PowBy::One => l.coerce(base, compute),
        PowBy::Two => {
            let x = l.coerce(base, compute);
            mul(l, x, x)
        }
        PowBy::Three => {
            let x = l.coerce(base, compute);
            let x2 = mul(l, x, x);
            mul(l, x2, x)
        }
        PowBy::Four => {
            let x = l.coerce(base, compute);
            let x2 = mul(l, x, x);
            mul(l, x2, x2)
        }
        PowBy::MinusOne => {
            let x = l.coerce(base, compute);
            let one = l.constant(Lit::Float(1.0), compute);
            l.push(Inst::Op {
                op: ScalarOp::Div,
                args: vec![one, x],
                compute,
                out: compute,
            })
        }
        PowBy::Half => {
            let x = l.coerce(base, compute);
            let op = |l: &mut Lowerer, op: ScalarOp, args: Vec<ValueId>| {
                let out = if op.is_predicate() {
                    DType::Bool
                } else {
                    compute
                };
                l.push(Inst::Op {
                    op,
                    args,
                    compute,
                    out,
                })
            };
            let s = op(l, ScalarOp::Sqrt, vec![x]);
            let zero = l.constant(Lit::Float(0.0), compute);
            let s = op(l, ScalarOp::Maximum, vec![s, zero]);
            let ninf = l.constant(Lit::Float(f64::NEG_INFINITY), compute);
            let is_ninf = op(l, ScalarOp::Eq, vec![x, ninf]);
            let inf = l.constant(Lit::Float(f64::INFINITY), compute);
            op(l, ScalarOp::Where, vec![is_ninf, inf, s])
        }
    };
    Some(v)
}

fn check_out(l: &Lowerer, name: &str, v: ValueId, meta_dtype: DType) -> Result<ValueId> {
    let got = l.dtype_of(v);
    if got != meta_dtype {
        return Err(compile_err(format!(
            "{name}: eager's dtype rules give {got}, but the node's metadata says {meta_dtype}"
        )));
    }
    Ok(v)
}

// ---- 16-bit float conversions (round to nearest even), shared by lowering and launching ------

/// The f16 bit pattern nearest to `x` (ties to even; NaN stays a quiet NaN).
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let a = b & 0x7fff_ffff;
    if a > 0x7f80_0000 {
        return sign | 0x7e00 | ((a >> 13) as u16 & 0x3ff);
    }
    if a >= 0x4780_0000 {
        return sign | 0x7c00;
    }
    if a < 0x3880_0000 {
        // Below the smallest normal f16: a multiple of 2^-24, rounded.
        let q = (f32::from_bits(a) as f64 * 16_777_216.0).round_ties_even() as u16;
        return sign | q;
    }
    let e = (a >> 23) - 112;
    let m = a & 0x7f_ffff;
    let mut h = (e << 10) | (m >> 13);
    let rem = m & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    sign | h as u16
}

/// The f32 value of an f16 bit pattern (exact).
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let e = ((h >> 10) & 0x1f) as u32;
    let m = (h & 0x3ff) as u32;
    let mag = match e {
        0 => m as f32 * (1.0 / 16_777_216.0),
        31 => f32::from_bits(0x7f80_0000 | (m << 13)),
        _ => f32::from_bits(((e + 112) << 23) | (m << 13)),
    };
    f32::from_bits(mag.to_bits() | sign)
}

/// The bf16 bit pattern nearest to `x` (ties to even; NaN stays a quiet NaN).
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 value of a bf16 bit pattern (exact).
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(65519.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(f32::INFINITY), 0x7c00);
        assert!(f16_bits_to_f32(f32_to_f16_bits(f32::NAN)).is_nan());
        // Smallest subnormal, and halfway below it (ties to even: 0).
        assert_eq!(f32_to_f16_bits(2f32.powi(-24)), 1);
        assert_eq!(f32_to_f16_bits(2f32.powi(-25)), 0);
        assert_eq!(f32_to_f16_bits(3.0 * 2f32.powi(-25)), 2);
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even (1).
        assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        for h in 0..=u16::MAX {
            let f = f16_bits_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_f16_bits(f), h, "{h:#x}");
            }
        }
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }
}
