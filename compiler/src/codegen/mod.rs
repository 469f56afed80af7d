pub mod cache;
pub mod cpu;
pub mod kernel;
