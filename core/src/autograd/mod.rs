//! Reverse-mode automatic differentiation.
//!
//! Every differentiable op call made while grad mode is on and some input requires grad records a
//! [`node::Node`] holding its backward function; [`backward`] and [`grad`] walk those nodes.
//! Derivatives of builtin ops are declared in the op table next to their kernels.

pub mod engine;
pub mod gradcheck;
pub mod mode;
pub mod node;

pub use engine::{backward, grad, queue_callback};
pub use gradcheck::{GradcheckOptions, gradcheck};
pub use mode::{GradModeGuard, enable_grad, is_grad_enabled, no_grad};
pub use node::{BackwardFn, attach_backward};
