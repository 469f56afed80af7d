//! The op table: every builtin op declared once — name, schema, class, kernel (with its meta rule)
//! and derivative — in one `static OpDef` per op. The dispatcher, autograd, fake tensors and the
//! compiler all read these declarations; none of them special-cases an op by name.
//!
//! Families live one per file: `unary`, `binary` (with `remainder`), `compare`, `logical`
//! (and/or/not, where, clamp), `activation` (leaky_relu, softplus, elu, hardtanh, hardsigmoid,
//! hardswish, mish, logit), `unary_math` (log2, log10, exp2, tan, inverse and hyperbolic trig,
//! trunc, frac), `float_class` (isnan, isinf, isfinite, nan_to_num), `binary_math` (atan2,
//! hypot, copysign, fmod, fmax, fmin, floor_divide, lerp), `bitwise` (and/or/xor/not, shifts),
//! `clamp_tensor` (clamp with tensor bounds),
//! `reduce`, `softmax`,
//! `linalg` (matmul), `shape` (views), `join` (cat/stack), `inplace`, `cast`, `index`
//! (gather, scatter, scatter_add, scatter_reduce, flip, nonzero), `scan` (cumsum, cumprod), `sort`.
//! `compose` holds composite
//! methods (index_select, masked_fill, tril, logsumexp, norm…) written over these ops, with no
//! `OpDef` of their own; `indexing` is Python-style `x[...]` (`Tensor::index`, `index_put`, with
//! `Idx`), also a composite.

pub mod activation;
pub mod binary;
pub mod binary_math;
pub mod bitwise;
pub mod cast;
pub mod clamp_tensor;
pub mod compare;
pub mod compose;
pub mod float_class;
pub mod index;
pub mod indexing;
pub mod inplace;
pub mod join;
pub mod linalg;
pub mod logical;
pub mod lowering;
pub mod reduce;
pub mod scan;
pub mod shape;
pub mod softmax;
pub mod sort;
pub mod sym_meta;
pub mod unary;
pub mod unary_math;

use tensorplay_ir::{DType, OpClass, Result, Shape};

pub use lowering::{DTypeRule, Lower, Pointwise};
pub use unary::{GeluApproximate, IntoGeluApproximate};

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

/// Every builtin op, for registration and for tests that sweep the table.
pub fn all_ops() -> Vec<&'static OpDef> {
    let mut v: Vec<&'static OpDef> = Vec::new();
    v.extend_from_slice(unary::OPS);
    v.extend_from_slice(binary::OPS);
    v.extend_from_slice(compare::OPS);
    v.extend_from_slice(reduce::OPS);
    v.extend_from_slice(shape::OPS);
    v.extend_from_slice(inplace::OPS);
    v.extend_from_slice(cast::OPS);
    v.extend_from_slice(logical::OPS);
    v.extend_from_slice(softmax::OPS);
    v.extend_from_slice(linalg::OPS);
    v.extend_from_slice(join::OPS);
    v.extend_from_slice(activation::OPS);
    v.extend_from_slice(unary_math::OPS);
    v.extend_from_slice(float_class::OPS);
    v.extend_from_slice(binary_math::OPS);
    v.extend_from_slice(bitwise::OPS);
    v.extend_from_slice(clamp_tensor::OPS);
    v.extend_from_slice(index::OPS);
    v.extend_from_slice(scan::OPS);
    v.extend_from_slice(sort::OPS);
    v
}

/// Calls any registered operator by qualified name (`"tp::add"`, `"mylib::weighted_sum"`), with
/// positional arguments bound to its schema.
///
/// ```
/// use tensorplay_runtime::{ops, Tensor, DType};
/// let x = Tensor::ones(&[2], DType::F32);
/// let y = ops::call("tp::add", &[x.clone().into(), x.into()])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![2.0, 2.0]);
/// assert!(ops::call("tp::nope", &[]).is_err());
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn call(qualname: &str, args: &[crate::value::Value]) -> Result<Vec<Tensor>> {
    call_kw(qualname, args, &[])
}

/// [`call`] with keyword arguments (`&[("max", 0.5.into())]`), bound to the schema like
/// positional ones — the same form `CustomOpDef::call_kw` takes.
///
/// ```
/// use tensorplay_runtime::{ops, Tensor, DType};
/// let x = Tensor::ones(&[2], DType::F32);
/// let y = ops::call_kw("tp::clamp", &[x.clone().into()], &[("max", 0.5.into())])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![0.5, 0.5]);
/// let err = ops::call_kw("tp::clamp", &[x.into()], &[("nope", 1.0.into())]).unwrap_err().to_string();
/// assert!(err.contains("nope"), "{err}");
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn call_kw(
    qualname: &str,
    args: &[crate::value::Value],
    kwargs: &[(&str, crate::value::Value)],
) -> Result<Vec<Tensor>> {
    let op = crate::library::registry().get(qualname)?;
    crate::dispatch::call_operator(&op, args, &crate::library::call_args::kwargs_owned(kwargs))
}
