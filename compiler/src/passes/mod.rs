//! The compiler's graph passes, each a pure function of its input:
//!
//! 0. [`join_slices::join_slices`] (`&mut Graph`) writes a sum of `slice_backward`s that tiles
//!    a dim (the gradient of a `chunk`ed projection) as one `cat`, and
//!    [`transpose_products::transpose_products`] writes the transpose of a 2-D product (a
//!    linear layer's weight gradient) as the product of the transposed operands, so the product
//!    itself lays the result out in row order;
//! 1. [`dce::dce`] (`Graph -> Graph`) drops computations nothing needs, keeping side effects;
//! 2. [`fusion::partition`] (`Graph -> FusionPlan`) groups elementwise ops into maximal convex
//!    regions (with reduction and softmax regions taking their elementwise producers as a
//!    prologue) and orders them with the barriers that split them;
//! 3. [`buffer_plan::plan`] (`Graph, FusionPlan -> BufferPlan`) gives every intermediate an arena
//!    slot, sharing slots between values whose lifetimes do not overlap.
//!
//! [`fusion::FusionPlan::explain`] and [`fusion::FusionPlan::to_dot`] show what fusion decided
//! and why; `TP_LOGS=fusion` prints the plan whenever [`fusion::partition`] runs.
//!
//! ```
//! use tensorplay_compiler::passes::{buffer_plan, dce, fusion};
//! use tensorplay_ir::graph::GraphBuilder;
//! use tensorplay_ir::{DType, Device, OpClass, TensorMeta};
//! let m = TensorMeta::new(&[1024], DType::F32, Device::Cpu);
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", m.clone());
//! let e = b.op("tp::exp", OpClass::Elementwise, vec![x.into()], vec![m.clone()])?;
//! let y = b.op("tp::mul", OpClass::Elementwise, vec![e[0].into(), x.into()], vec![m.clone()])?;
//! let _unused = b.op("tp::neg", OpClass::Elementwise, vec![x.into()], vec![m])?;
//! b.output(&y)?;
//! let g = dce::dce(&b.finish()?)?;
//! let plan = fusion::partition(&g)?;
//! assert_eq!(plan.regions.len(), 1); // exp and mul fused, neg removed
//! let buffers = buffer_plan::plan(&g, &plan)?;
//! assert_eq!(buffers.num_slots(), 0); // the only value that leaves the region is the output
//! # Ok::<(), tensorplay_ir::Error>(())
//! ```

pub mod buffer_plan;
pub mod dce;
mod explain;
pub mod fusion;
pub mod join_slices;
pub mod logging;
mod names;
pub mod region;
pub mod transpose_products;

pub use buffer_plan::BufferPlan;
pub use fusion::{FusionPlan, NodeStep, NodeStepKind, Step};
pub use region::{Region, RegionKind};
