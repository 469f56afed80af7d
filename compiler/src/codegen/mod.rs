pub mod cpu;
/// The global, thread-safe cache of compiled kernels.
pub mod cache;
/// Target-independent kernel specs lowered from fusion regions.
pub mod kernel;
