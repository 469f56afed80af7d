//! Reductions over one or more dims (with `keepdim`), built on the reduction driver in
//! `kernels::reduce`. Integer and bool sums and products accumulate in i64 (PyTorch); float sums,
//! products and variances accumulate in f64 so long reductions stay accurate.
//!
//! By family: `sum` (sum, mean, prod), `extreme` (max/min, max_dim/min_dim, amax/amin,
//! argmax/argmin), `moments` (var, std); `args` holds the argument and shape helpers they share.

mod args;
mod extreme;
mod moments;
mod sum;

pub use extreme::{AMAX, AMIN, ARGMAX, ARGMIN, MAX, MAX_DIM, MIN, MIN_DIM};
pub use moments::{STD, VAR};
pub use sum::{MEAN, PROD, SUM};

use super::OpDef;

/// Every reduction op of this family.
pub static OPS: &[&OpDef] = &[
    &SUM, &MEAN, &MAX, &MIN, &MAX_DIM, &MIN_DIM, &AMAX, &AMIN, &ARGMAX, &ARGMIN, &PROD, &VAR, &STD,
];
