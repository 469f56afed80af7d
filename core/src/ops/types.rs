//! The op types: what one builtin op declares ([`OpDef`]: schema, class, kernel, derivative,
//! lowering, autocast policy, vmap rule) and the function types its kernel and derivative have.
//! The declarations themselves live in the family files beside this one.

use tensorplay_ir::{DType, OpClass, Result, Shape};

use super::lowering;
use crate::tensor::Tensor;
use crate::value::Args;

/// Shape and dtype of one fresh output, computed by a meta rule.
#[derive(Debug, Clone, PartialEq)]
pub struct OutSpec {
    pub shape: Shape,
    pub dtype: DType,
}

impl OutSpec {
    /// An output spec from a shape slice and dtype.
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        OutSpec {
            shape: shape.into(),
            dtype,
        }
    }
}

/// The meta rule of an op that allocates fresh outputs: validates arguments and returns output
/// shapes and dtypes. It never reads data, so it is also the op's fake kernel.
pub type MetaFn = fn(Args) -> Result<Vec<OutSpec>>;
/// Fills freshly allocated outputs (on real data).
pub type FillFn = fn(Args, &[Tensor]) -> Result<()>;
/// Builds aliasing outputs (views) from metadata only.
pub type ViewFn = fn(Args) -> Result<Vec<Tensor>>;
/// Validates (meta) or performs (fill) a write into argument 0.
pub type MutateFn = fn(Args) -> Result<()>;
/// Computes input gradients from output gradients; one entry per tensor input (flattened).
pub type DerivativeFn = fn(&GradCtx) -> Result<Vec<Option<Tensor>>>;

/// How an op produces its results.
pub enum Kernel {
    /// Fresh outputs: `meta` shapes them (and is the fake kernel), `fill` computes them.
    Compute { meta: MetaFn, fill: FillFn },
    /// Outputs alias argument 0's storage; no data is touched, so fake inputs need nothing else.
    View(ViewFn),
    /// Writes into argument 0 and returns it: `check` validates (also on fake inputs), `fill`
    /// writes.
    Mutate { check: MutateFn, fill: MutateFn },
}

/// Which tensors a derivative reads, so autograd can detect in-place modification of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    Nothing,
    Inputs,
    Outputs,
    All,
    /// Inputs and outputs, the outputs read as data only (the derivative never differentiates
    /// through them): under `create_graph` the forward is not recomputed to make them
    /// differentiable, so outputs holding a random draw (`_fused_attention`'s dropout seed)
    /// keep the one the forward made.
    AllAsData,
}

/// What autocast does with an op's floating inputs (PyTorch's policy, reduced to our op set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastPolicy {
    /// Runs in its input dtypes (mixed inputs promote as usual).
    Keep,
    /// Floating inputs other than f64 are cast to the region's dtype (matmul).
    LowPrecision,
    /// f16/bf16 inputs are cast to f32 (accumulations, range-sensitive math).
    F32,
}

/// How `vmap` batches an op: by default a rule derived from the op's class, kernel kind and
/// schema (elementwise, in-place, reductions over a `dim` argument, else per example); ops whose
/// arguments are shapes or dims with a special meaning name their rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmapRule {
    /// Derived from class, kernel kind and schema.
    Derived,
    /// `view(self, size)`.
    View,
    /// `permute(self, dims)`.
    Permute,
    /// `expand(self, size)`.
    Expand,
    /// `slice(self, dim, ...)`.
    Slice,
    /// `slice_backward(grad, sizes, dim, ...)`.
    SliceBackward,
    /// `matmul(self, other)`.
    Matmul,
    /// `cat(tensors, dim)`.
    Cat,
    /// `stack(tensors, dim)`.
    Stack,
    /// `diagonal(self, offset, dim1, dim2)`.
    Diagonal,
    /// A reduction whose absent `dim` means the flattened tensor (argmax, argmin).
    ReduceFlattened,
}

/// One builtin op: everything the dispatcher, autograd, autocast, vmap and the compiler need to
/// know about it, declared once. Adding an op means adding one of these (and its method); the
/// sweep test in `tests/op_table.rs` checks every entry is complete.
pub struct OpDef {
    /// Unqualified name, registered as `tp::<name>`.
    pub name: &'static str,
    /// PyTorch-style schema (without namespace).
    pub schema: &'static str,
    pub class: OpClass,
    pub kernel: Kernel,
    /// `None` for ops that are not differentiable (comparisons, argmax, integer-only ops).
    pub derivative: Option<DerivativeFn>,
    pub saved: Saved,
    /// How the compiler computes it (scalar expression + dtype rule, reduction, softmax).
    pub lower: lowering::Lower,
    /// What autocast does with its floating inputs.
    pub autocast: AutocastPolicy,
    /// How vmap batches it.
    pub vmap: VmapRule,
}

/// What a derivative sees: the call's arguments, its (detached) outputs and the output gradients.
pub struct GradCtx<'a> {
    pub args: Args<'a>,
    pub outputs: &'a [Tensor],
    pub grads: &'a [Option<Tensor>],
}

impl GradCtx<'_> {
    /// Gradient of output `i`, or zeros shaped like it when nothing reached it.
    pub fn grad(&self, i: usize) -> Result<Tensor> {
        match self.grads.get(i).and_then(|g| g.clone()) {
            Some(g) => Ok(g),
            None => Ok(Tensor::zeros_like(&self.outputs[i])),
        }
    }
}
