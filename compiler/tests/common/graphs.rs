//! Helpers of the epilogue tests: capture a function into a `CompiledGraph` and compare results
//! (included with `#[path]` by the test files that use it).

use tensorplay_compiler::capture::{CaptureOptions, capture};
use tensorplay_compiler::executor::CompiledGraph;
use tensorplay_ir::{Device, Result, TensorMeta};
use tensorplay_runtime::Tensor;

/// Largest |a - b| relative to max(1, |b|) over all elements.
pub fn max_rel_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (x, y) = (a.to_vec_f64()?, b.to_vec_f64()?);
    assert_eq!(x.len(), y.len());
    Ok(x.iter()
        .zip(&y)
        .map(|(p, q)| (p - q).abs() / q.abs().max(1.0))
        .fold(0.0, f64::max))
}

/// `f` captured for `inputs`' shapes and dtypes on the CPU and compiled.
pub fn graph_of(
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    inputs: &[Tensor],
) -> Result<CompiledGraph> {
    let metas: Vec<TensorMeta> = inputs
        .iter()
        .map(|t| TensorMeta::new(t.shape(), t.dtype(), Device::Cpu))
        .collect();
    CompiledGraph::new(&capture(f, &metas, CaptureOptions::default())?)
}
