//! Helpers shared by the executor's unit tests.

use tensorplay_ir::Result;
use tensorplay_runtime::Tensor;

pub(super) fn f(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![xs[0].mul(&xs[1])?.add_scalar(1.0)?.relu()?])
}

pub(super) fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}
