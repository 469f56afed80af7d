//! Target-independent kernel specs: a fused [`Region`](crate::region::Region) of a
//! [`Graph`](tensorplay_ir::graph::Graph) lowered to SSA scalar code plus a loop kind.
//!
//! A [`KernelSpec`] is what a code generator compiles: the dtypes of the kernel's inputs and
//! outputs, the rank of the iteration space, a list of scalar instructions ([`Inst`]) evaluated
//! at every point of the iteration space, and the [`LoopKind`] (pointwise, a reduction, or
//! softmax rows). Specs are structural values: two regions that compute the same thing on the same
//! dtypes and ranks lower to equal specs, which hash equally, so together with the
//! [`LoopLayout`] of the operands they key the kernel cache. `Display` prints a stable text form
//! (snapshot tests, `TP_LOGS=clif`) that [`KernelSpec::parse`] reads back.
//!
//! # Dtype rules (eager's, see `tensorplay_core::ops::{binary, unary}`)
//!
//! Each op computes in its *compute dtype*: the promotion of its operand dtypes, where scalar
//! constants (captured Rust scalars, [`Constant::Float`](tensorplay_ir::graph::Constant::Float)/`Int`/`Bool`)
//! only raise the category ([`DType::promote_with_scalar`](tensorplay_ir::DType::promote_with_scalar)). Floating ops on integer or bool
//! inputs compute in f32, division is true division, predicates produce bool. Operands are
//! converted explicitly with [`Inst::Cast`] where their dtype differs from the compute dtype.
//! f16/bf16 values are held in f32 and — unlike eager, which rounds after every op — rounded once,
//! when stored (or when an explicit `to_dtype` asks for a 16-bit float).
//!
//! Lowering reads each op's declared lowering from an [`OpLowerings`](crate::lowering::OpLowerings) table (the op table of
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

mod cursor;
pub(crate) mod inst;
pub(crate) mod kernel;
pub(crate) mod layout;
pub(crate) mod lit;
mod parse;
pub(crate) mod print;
pub(crate) mod rules;
mod validate;

pub use crate::half::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};
pub use crate::lower::{LoweredRegion, lower};
pub use inst::{Inst, ValueId};
pub use kernel::{KernelSpec, LoopKind, MAX_RANK};
pub use layout::{LoopLayout, StrideClass};
pub use lit::Lit;
pub use rules::{largest_finite, reduce_out_dtype};

#[cfg(test)]
mod tests;
