//! The op table: every builtin op declared once — name, schema, class, kernel (with its meta rule)
//! and derivative — in one `static OpDef` per op. The dispatcher, autograd, fake tensors and the
//! compiler all read these declarations; none of them special-cases an op by name.
//!
//! Families live one per file: `unary`, `binary` (with `remainder`), `compare`, `logical`
//! (and/or/not, where, clamp), `activation` (leaky_relu, softplus, elu, hardtanh, hardsigmoid,
//! hardswish, mish, logit), `gelu_backward` (gelu's derivative as one op), `unary_math` (log2, log10, exp2, tan, inverse and hyperbolic trig,
//! trunc, frac), `float_class` (isnan, isinf, isfinite, nan_to_num), `binary_math` (atan2,
//! hypot, copysign, fmod, fmax, fmin, floor_divide, lerp), `bitwise` (and/or/xor/not, shifts),
//! `clamp_tensor` (clamp with tensor bounds); `binary_decl` is the one macro that declares a
//! binary op for `binary`, `binary_math` and `bitwise`;
//! `reduce` (by family: `sum`, `extreme`, `moments`), `softmax`,
//! `linalg` (matmul), `conv` (conv2d and its backward, im2col + gemm), `pool` (max/avg/adaptive-avg 2-D pooling and their backwards), `attention` (fused scaled dot-product attention and its backward), `shape` (views), `join` (cat/stack), `inplace`, `cast`, `index`
//! (gather, scatter, scatter_add, scatter_reduce, flip, nonzero), `scan` (cumsum, cumprod), `sort`.
//! `compose` holds composite
//! methods (index_select, masked_fill, tril, logsumexp, norm…) written over these ops, with no
//! `OpDef` of their own; `indexing` is Python-style `x[...]` (`Tensor::index`, `index_put`, with
//! `Idx`), also a composite.

pub mod activation;
pub mod attention;
pub mod binary;
mod binary_decl;
pub mod binary_math;
pub mod bitwise;
pub mod cast;
pub mod clamp_tensor;
pub mod compare;
pub mod compose;
pub mod conv;
pub mod float_class;
pub mod gelu_backward;
pub mod index;
mod index_rows;
pub mod indexing;
pub mod inplace;
pub mod join;
pub mod linalg;
pub mod logical;
pub mod lowering;
pub mod pool;
pub mod reduce;
pub mod scan;
pub mod shape;
pub mod softmax;
pub mod sort;
pub mod sym_meta;
pub mod table;
mod types;
pub mod unary;
pub mod unary_math;

pub use lowering::{DTypeRule, Lower, Pointwise};
pub use table::all_ops;
pub use types::{
    AutocastPolicy, DerivativeFn, FillFn, GradCtx, Kernel, MetaFn, MutateFn, OpDef, OutSpec, Saved,
    ViewFn, VmapRule,
};
pub use unary::{GeluApproximate, IntoGeluApproximate};
