pub mod cache;
pub mod cpu;
pub mod cuda;
pub mod hook;
pub mod kernel;
