//! Compile-fail tests (`trybuild`): what the compiler refuses in the library API — a typed
//! handle called with a wrong argument type or count, a kernel with a parameter type that has no
//! schema type, and `#[custom_op]` on a `&mut` parameter. Each case under `tests/compile_fail/`
//! has its expected compiler output beside it (`.stderr`; regenerate with `TRYBUILD=overwrite`
//! and review the diff). The forms that must compile (closures, fn items, boxed and opaque
//! `impl Fn` kernels, generic `F`) are ordinary tests in `runtime/tests/library_issue31.rs`.
//!
//! trybuild type-checks the cases (`cargo check`, no code generation) in `target/tests/trybuild`,
//! once for all of them; a cold run checks the workspace's dependencies there first.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
