//! # TensorPlay
//!
//! Tensors with PyTorch's custom-operator ergonomics and a JIT compiler that costs microseconds.
//!
//! - [`Tensor`]: eager CPU tensors with views, broadcasting, type promotion and autograd.
//! - [`library`]: register custom operators once — kernels per device, fake kernels, autograd,
//!   autocast and vmap rules, triton-style grid kernels — and use them everywhere.
//! - [`compiler`]: capture, fuse and compile graphs to native SIMD code.
//!
//! ```
//! use tensorplay::{Tensor, DType};
//! let x = Tensor::randn_seeded(&[4, 3], DType::F32, 0)?.requires_grad_(true)?;
//! let y = x.exp()?.sum_all()?;
//! y.backward()?;
//! assert_eq!(x.grad().unwrap().shape(), &[4, 3]);
//!
//! // Transforms are at the top level too: a per-row function mapped over the batch.
//! let row_norms = tensorplay::vmap(|r: &[Tensor]| Ok(vec![r[0].mul(&r[0])?.sum_all()?]), vec![Some(0)], vec![0]);
//! assert_eq!(row_norms(&[Tensor::ones(&[4, 3], DType::F32)])?[0].to_vec::<f32>()?, vec![3.0; 4]);
//! # Ok::<(), tensorplay::Error>(())
//! ```

/// `vmap(f, in_dims, out_dims)`: vectorizing map (the module `tensorplay::vmap` holds its types).
pub use tensorplay_runtime::vmap::vmap;
pub use tensorplay_runtime::{
    Args, CompileKind, DType, Device, Element, Error, Idx, Result, Scalar, SymInt, Tensor, Value,
    autocast, autograd, dispatch, manual_seed, ops, parallel, vmap,
};

/// Neural networks: modules and layers (`tensorplay-nn`: [`nn::Module`], `#[derive(Module)]`,
/// [`nn::Linear`], [`nn::Sequential`], state dicts and safetensors checkpoints) and the
/// functional ops (`tensorplay_runtime::nn`: [`nn::linear`], [`nn::cross_entropy`], ...), both
/// here as in PyTorch's `torch.nn`; [`nn::functional`] holds the functional ops alone
/// (`torch.nn.functional`). See the modules guide (`docs/guide/modules.md`).
///
/// ```
/// use tensorplay::nn::{self, Forward, Module};
/// use tensorplay::{DType, Tensor};
///
/// #[derive(Module)]
/// struct Mlp {
///     fc1: nn::Linear,
///     fc2: nn::Linear,
/// }
///
/// let mlp = Mlp { fc1: nn::Linear::new(4, 8, true)?, fc2: nn::Linear::new(8, 2, true)? };
/// let x = Tensor::ones(&[3, 4], DType::F32);
/// let h = mlp.fc1.forward(&x)?.relu()?;
/// let y = mlp.fc2.forward(&h)?;
/// // The same through the functional op.
/// let y2 = nn::functional::linear(&h, &mlp.fc2.weight, mlp.fc2.bias.as_ref())?;
/// assert!(y.equal(&y2)? && y.shape() == &[3, 2]);
/// assert_eq!(mlp.state_dict().keys().next(), Some("fc1.weight"));
/// # Ok::<(), tensorplay::Error>(())
/// ```
pub mod nn {
    pub use tensorplay_nn::*;
    pub use tensorplay_runtime::nn::*;

    /// The functional ops alone (PyTorch's `torch.nn.functional`).
    pub mod functional {
        pub use tensorplay_runtime::nn::*;
    }
}

/// CUDA devices and tensors (`tensorplay_runtime::cuda`, whose docs say what runs where).
///
/// Eager built-in ops on CUDA tensors run kernels the CUDA back end generates from the op table
/// (`tensorplay_core::backend`); nothing has to be set up first.
///
/// ```
/// use tensorplay::{cuda, DType, Device, Tensor};
/// cuda::use_emulated_devices(1)?; // host-emulated devices: runs without a GPU
/// let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3])?.to_device(Device::Cuda(0))?;
/// # if !tensorplay::compiler::codegen::cuda::emulate::compiler_available() { return Ok(()); }
/// let y = x.relu()?.mul_scalar(2.0)?; // generated CUDA kernels
/// assert_eq!(y.device(), Device::Cuda(0));
/// assert_eq!(y.to_vec::<f32>()?, vec![2.0, 0.0, 6.0]);
/// # Ok::<(), tensorplay::Error>(())
/// ```
pub mod cuda {
    pub use tensorplay_runtime::cuda::*;

    /// Does nothing: eager CUDA ops need no set-up (the CUDA back end generates their kernels
    /// itself). Kept so programs written when it installed the compiler's kernels still build.
    pub fn init() {}
}

/// Training beyond one process on MPI (the `tensorplay-distributed` crate; feature
/// `distributed`): process groups, collectives, `DistributedDataParallel`. See
/// `docs/guide/distributed.md`.
#[cfg(feature = "distributed")]
#[doc(inline)]
pub use tensorplay_distributed as distributed;

/// The IR: dtypes, shapes, schemas and graphs (the `tensorplay-ir` crate).
///
/// ```
/// use tensorplay::ir::schema::Schema;
/// let s = Schema::parse("mylib::scale(Tensor x, float w=2.0) -> Tensor")?;
/// assert_eq!(s.params.len(), 2);
/// # Ok::<(), tensorplay::Error>(())
/// ```
#[doc(inline)]
pub use tensorplay_ir as ir;

/// The compiler (the `tensorplay-compiler` crate): [`compile`](fn@compiler::compile) turns a closure
/// over tensors into a [`CompiledFn`](compiler::CompiledFn) (captured and compiled on its first
/// call, once per rank, dtypes and broadcast pattern; shapes are dynamic), and
/// [`tp_compile`](compiler::tp_compile) compiles an IR graph directly into a
/// [`CompiledGraph`](compiler::CompiledGraph). Custom ops are single nodes in the graph (opaque
/// barriers unless their kernels are builtin ops); see the compiler guide
/// (`docs/guide/compiler.md`).
///
/// ```
/// use tensorplay::compiler::compile;
/// use tensorplay::{DType, Tensor};
/// let f = compile(|xs: &[Tensor]| Ok(vec![xs[0].mul(&xs[1])?.relu()?]));
/// let a = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3])?;
/// let y = f.call(&[a.clone(), a.clone()])?; // first call: capture, compile, run
/// assert_eq!(y[0].to_vec::<f32>()?, vec![1.0, 4.0, 9.0]);
/// f.call(&[Tensor::ones(&[8], DType::F32), Tensor::ones(&[8], DType::F32)])?;
/// assert_eq!(f.num_compiled(), 1); // another size reuses the compiled graph
/// # Ok::<(), tensorplay::Error>(())
/// ```
pub mod compiler {
    #[doc(inline)]
    pub use tensorplay_compiler::{CompiledFn, CompiledGraph, compile, compile_with, tp_compile};
    #[doc(inline)]
    pub use tensorplay_compiler::{aot, capture, codegen, executor, opcheck, optim, passes};
}

/// Optimizers, LR schedulers and gradient clipping with PyTorch's formulas, fused (the
/// compiler's `optim` module; also reachable as `tensorplay::compiler::optim`).
///
/// ```
/// use tensorplay::optim::{Optimizer, Sgd};
/// use tensorplay::{DType, Tensor};
/// let w = Tensor::ones(&[2], DType::F32).requires_grad_(true)?;
/// w.mul(&w)?.sum_all()?.backward()?; // gradient 2w = [2, 2]
/// let mut opt = Sgd::new(vec![w.clone()], 0.25, 0.0)?; // lr 0.25, no momentum
/// opt.step()?;
/// assert_eq!(w.to_vec::<f32>()?, vec![0.5, 0.5]);
/// # Ok::<(), tensorplay::Error>(())
/// ```
#[doc(inline)]
pub use tensorplay_compiler::optim;

/// Define custom operators once; use them in eager mode, under autograd, autocast, vmap and the
/// compiler. See the crate-level docs of `tensorplay_runtime::library`.
pub mod library {
    pub use tensorplay_compiler::opcheck::{OpcheckOptions, opcheck};
    pub use tensorplay_runtime::library::*;

    /// Turns a free function into a custom operator: `#[custom_op("ns::name")]`, with optional
    /// `mutates_args = ["out"]` (or `"unknown"`: every tensor parameter) and
    /// `device_types = ["cpu"]` (every device when omitted).
    ///
    /// The function stays as written (a plain kernel you can call directly). Next to it the macro
    /// generates a module of the same name:
    /// - `op() -> Result<CustomOpDef>` defines the operator on first use (once per process; the
    ///   schema is inferred from the parameter names and types, with `#[default(..)]` values) —
    ///   register fake kernels, autograd formulas or more device kernels on it;
    /// - `call(..)` takes the function's parameters and calls the operator through the
    ///   dispatcher, so autograd, autocast, vmap, fake tensors and capture all apply.
    ///
    /// Parameter types: `Tensor`/`&Tensor`, `Option<Tensor>`/`Option<&Tensor>`,
    /// `Vec<Tensor>`/`&[Tensor]`, `i64`, `Option<i64>`, `f64`, `Option<f64>`, `bool`,
    /// `String`/`&str`, `Vec<i64>`/`&[i64]`, `Vec<f64>`/`&[f64]`, `Vec<bool>`/`&[bool]`, `DType`,
    /// `Device`; the return type is `Result<T>` with `T` one of `Tensor`, `()`, `Vec<Tensor>`,
    /// `(Tensor, Tensor)`, `(Tensor, Tensor, Tensor)`. Anything else (also `&mut T` and references
    /// with an explicit lifetime) is a compile error naming the parameter. `#[default(..)]` on a
    /// parameter takes a literal, a negated number, `None` (for `Option` parameters),
    /// `f64::INFINITY`/`NEG_INFINITY`/`NAN` or a list literal, and is checked against the type.
    /// Use the macro on functions at module level (the module reaches the function through
    /// `super::`), not inside a function body.
    ///
    /// ```
    /// use tensorplay::library::custom_op;
    /// use tensorplay::{DType, Result, Tensor};
    ///
    /// #[custom_op("docs_macro::weighted_sum")]
    /// fn weighted_sum(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    ///     x.mul(weight)?.sum_all()
    /// }
    ///
    /// #[custom_op("docs_macro::scale_", mutates_args = ["out"], device_types = ["cpu"])]
    /// fn scale_(out: &Tensor, #[default(2.0)] factor: f64) -> Result<()> {
    ///     out.mul_scalar_(factor)?;
    ///     Ok(())
    /// }
    ///
    /// fn main() -> Result<()> {
    ///     let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?.requires_grad_(true)?;
    ///     let w = Tensor::from_vec(vec![0.5f32, 0.5, 2.0], &[3])?;
    ///     // Through the dispatcher: autograd flows through the ops the body used.
    ///     let y = weighted_sum::call(&x, &w)?;
    ///     y.backward()?;
    ///     assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.5, 0.5, 2.0]);
    ///     // The plain function is still there.
    ///     assert_eq!(weighted_sum(&x, &w)?.item::<f32>()?, 7.5);
    ///     assert_eq!(
    ///         weighted_sum::op()?.schema().to_string(),
    ///         "docs_macro::weighted_sum(Tensor x, Tensor weight) -> Tensor"
    ///     );
    ///
    ///     assert_eq!(
    ///         scale_::op()?.schema().to_string(),
    ///         "docs_macro::scale_(Tensor(a!) out, float factor=2.0) -> ()"
    ///     );
    ///     let buf = Tensor::ones(&[2], DType::F32);
    ///     scale_::call(&buf, 3.0)?;
    ///     assert_eq!(buf.to_vec::<f32>()?, vec![3.0, 3.0]);
    ///     Ok(())
    /// }
    /// ```
    pub use tensorplay_macros::custom_op;
}

/// The README's code blocks, compiled and run as doc tests so the README cannot drift.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The training guide's code blocks, compiled and run as doc tests.
#[doc = include_str!("../docs/guide/training.md")]
#[cfg(doctest)]
pub struct TrainingGuideDoctests;

/// The modules guide's code blocks, compiled and run as doc tests.
#[doc = include_str!("../docs/guide/modules.md")]
#[cfg(doctest)]
pub struct ModulesGuideDoctests;
