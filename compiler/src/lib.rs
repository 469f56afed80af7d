pub mod codegen;
pub mod passes;
