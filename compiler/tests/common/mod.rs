//! Helpers shared by the integration tests (each test file that needs them
//! declares `mod common;`).

pub mod math;
