pub mod cpu;
pub mod cache;
pub mod kernel;
