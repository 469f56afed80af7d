//! `tensorplay-nn`: models as trees of modules (PyTorch's `torch.nn.Module`), the common layers,
//! state dicts and safetensors checkpoints. Use it through the facade, `tensorplay::nn`, which
//! also holds the functional ops (`tensorplay::nn::linear`, or `tensorplay::nn::functional::*`).
//!
//! - [`Module`]: parameters and buffers by dotted name (`blocks.0.attn.in_proj_weight`),
//!   children, `train()`/`eval()`, `to_device`/`to_dtype`, `zero_grad`, `parameters()` for the
//!   optimizers, `state_dict()`/`load_state_dict()`, safetensors save/load; [`Forward`] for
//!   single-input layers; [`functional_call`] runs a module on given parameters (how a
//!   compiled function takes them as inputs).
//! - Layers: [`Linear`], [`Embedding`], [`LayerNorm`], [`RMSNorm`],
//!   [`Dropout`], [`ReLU`], [`GELU`], [`SiLU`], [`Tanh`], [`Sigmoid`], [`Sequential`] and
//!   [`MultiheadAttention`], with PyTorch's parameter names, shapes, initialisations and
//!   defaults.
//! - [`StateDict`], [`save_safetensors`]/[`load_safetensors`] (files PyTorch's
//!   `safetensors.torch` reads and writes), and the optimizer state in safetensors
//!   ([`save_optimizer_safetensors`]/[`load_optimizer_safetensors`]).
//!
//! # `#[derive(Module)]`
//!
//! A struct whose fields are modules and tensors derives [`Module`]. Each field, by its type:
//!
//! - `Tensor`, `Option<Tensor>` (absent when `None`), `Vec<Tensor>` (named `field.0`, …): a
//!   parameter, or a buffer with `#[buffer]`;
//! - a field named `training` of type `bool`: the module's mode (without one, the mode
//!   combines the children's, see [`combine_modes`]; a module with no mode anywhere, such as
//!   `Linear`, reports `None` from [`Module::mode`] and `true` from `is_training`);
//! - `bool`, the integer and float types, `String`, `char`, and `Option`/`Vec`/arrays/tuples
//!   of them: plain settings, ignored;
//! - a field marked `#[skip]`: ignored, whatever its type;
//! - anything else must implement [`Module`] (a layer, a derived struct, `Vec<M>` — names
//!   `field.0.…` as PyTorch's `ModuleList` — `Option<M>`, `Box<dyn Layer>`); a type that does
//!   not is a compile error at that field naming the missing `Module` impl.
//!
//! Names follow the fields in declaration order, as PyTorch's follow registration order. Tuple
//! structs name fields `0`, `1`, …; enums and unions are a compile error. The generated code
//! names `::tensorplay::nn`; code that depends on `tensorplay-nn` directly (this crate's own
//! tests) says so with `#[module(crate = tensorplay_nn)]`.
//!
//! ```
//! use tensorplay_nn::{Forward, Linear, Module, LayerNorm};
//! use tensorplay_runtime::{DType, Result, Tensor};
//!
//! #[derive(Module)]
//! #[module(crate = tensorplay_nn)]
//! struct Block {
//!     norm: LayerNorm,
//!     fc: Linear,
//! }
//!
//! #[derive(Module)]
//! #[module(crate = tensorplay_nn)]
//! struct Model {
//!     blocks: Vec<Block>,
//!     head: Linear,
//!     #[buffer]
//!     scale: Tensor,
//!     depth: usize,
//! }
//!
//! impl Model {
//!     fn forward(&self, x: &Tensor) -> Result<Tensor> {
//!         let mut h = x.clone();
//!         for b in &self.blocks {
//!             h = h.add(&b.fc.forward(&b.norm.forward(&h)?)?.relu()?)?;
//!         }
//!         self.head.forward(&h)?.mul(&self.scale)
//!     }
//! }
//!
//! let block = || -> Result<Block> { Ok(Block { norm: LayerNorm::new(&[4])?, fc: Linear::new(4, 4, true)? }) };
//! let model = Model {
//!     blocks: vec![block()?, block()?],
//!     head: Linear::new(4, 1, false)?,
//!     scale: Tensor::ones(&[1], DType::F32),
//!     depth: 2,
//! };
//! let keys: Vec<String> = model.state_dict().keys().map(String::from).collect();
//! assert_eq!(keys[..4], ["blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc.weight", "blocks.0.fc.bias"]);
//! assert_eq!(keys[8..], ["head.weight", "scale"]);
//! assert_eq!(model.named_buffers()[0].0, "scale");
//! assert_eq!(model.forward(&Tensor::ones(&[3, 4], DType::F32))?.shape(), &[3, 1]);
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

mod checkpoint;
pub mod init;
mod layers;
mod module;
mod state;

pub use checkpoint::{
    load_optimizer_safetensors, load_safetensors, save_optimizer_safetensors, save_safetensors,
};
pub use layers::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm1d, BatchNorm2d, BatchNormOptions, Conv1d, Conv2d,
    ConvOptions, ConvTranspose2d, ConvTransposeOptions, Dropout, Embedding, Flatten, GELU,
    GroupNorm, LayerNorm, Linear, MaxPool2d, MultiheadAttention, RMSNorm, ReLU, Sequential, SiLU,
    Sigmoid, Tanh,
};
pub use layers::{
    CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
    ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
    ReplicationPad3d, Upsample, ZeroPad1d, ZeroPad2d, ZeroPad3d,
};
pub use module::{
    Forward, Layer, Module, TensorKind, Visit, VisitMut, combine_modes, functional_call,
    functional_call_with_buffers, join_name,
};
pub use state::{LoadReport, StateDict};
/// `#[derive(Module)]` (see the crate docs for the field rules).
pub use tensorplay_macros::Module;

/// What `#[derive(Module)]`'s generated code names; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use tensorplay_runtime::{Error, Result, Tensor};
}
