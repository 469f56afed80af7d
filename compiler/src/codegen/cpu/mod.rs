mod args;
mod compile;
mod emit;
mod launch;
mod loops;
pub mod math;

pub use args::{KernelArgs, KernelFn};
pub use compile::{CompiledKernel, compile, live_kernels};
pub use launch::{LaunchPlan, MIN_CHUNK, plan};
