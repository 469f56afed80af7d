//! `tensorplay-compiler`: capture closures into IR graphs, partition them into fused regions
//! between barriers, generate native code for the regions (Cranelift on CPU) and run the result.

pub mod aot;
mod arena;
pub mod capture;
pub mod codegen;
pub mod compile;
mod epilogue;
pub mod executor;
mod grad_plan;
pub mod opcheck;
pub mod optim;
pub mod passes;

pub use compile::{CompiledFn, compile, compile_with, tp_compile};
pub use executor::CompiledGraph;
