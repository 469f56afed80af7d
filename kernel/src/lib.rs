//! `tensorplay-kernel`: kernels as every code generator sees them, before any target.
//!
//! A fused [`region::Region`] of an IR graph lowers to a [`spec::KernelSpec`] — SSA scalar code
//! over the region's inputs plus a loop kind — reading each op's declared lowering
//! ([`lowering::Lower`]) from the op table it is handed ([`lowering::OpLowerings`]). The CPU
//! code generator (Cranelift, in `tensorplay-compiler`) and the CUDA one (`tensorplay-cuda`)
//! both compile specs and launch them over a [`plan::LaunchPlan`]; [`args::ScalarArgs`] are the
//! scalar kernel arguments both pass.
//! [`log`] is `TP_LOGS`, the stages' switch for printing what they did.

pub mod args;
pub mod classify;
mod half;
pub mod log;
mod lower;
pub mod lowering;
pub mod plan;
pub mod region;
pub mod spec;
