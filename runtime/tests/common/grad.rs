//! Gradient checks shared by the op test files.

use tensorplay_runtime::autograd::{GradcheckOptions, gradcheck};
use tensorplay_runtime::{Result, Tensor};

/// Gradchecks `f` at `inputs`, each made a leaf that requires grad (panics on a mismatch).
pub fn check_grad(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.clone().requires_grad_(true).unwrap())
        .collect();
    gradcheck(f, &inputs, GradcheckOptions::default()).unwrap();
}
