mod args;
mod compile;
mod emit;
mod launch;
mod loops;
pub mod math;
mod staging;
mod tiers;
mod wide_asm;

pub use args::{KernelArgs, KernelFn, ScalarArgs};
pub use compile::{
    CodegenOptions, CompiledKernel, compile, compile_tiered, compile_with, live_kernels,
};
pub(crate) use launch::PlanKey;
pub(crate) use launch::plan_on;
pub use launch::{LaunchPlan, MIN_CHUNK, plan};
