//! `tensorplay-ir`: the pure-data core shared by every TensorPlay crate — dtypes, devices, shapes,
//! tensor metadata, operator schemas, the IR graph and the error type. Nothing here owns tensor data.

pub mod device;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod meta;
pub mod op_class;
pub mod op_id;
pub mod scalar;
pub mod schema;
pub mod shape;
pub mod symint;

pub use device::Device;
pub use dtype::{Category, DType};
pub use error::{CompileKind, Error, Result};
pub use graph::{Graph, GraphBuilder, NodeId, ValueRef};
pub use meta::TensorMeta;
pub use op_class::OpClass;
pub use op_id::OpId;
pub use scalar::{LibmFn, LibmFn2, MathFn, PowBy, ReduceOp, ScalarExpr, ScalarOp};
pub use shape::{Dim, Shape, Strides, SymShape};
pub use symint::SymExpr;
