//! Eager CPU loop machinery shared by the op kernels: the strided loop driver and typed maps.

pub(crate) mod iter;
pub(crate) mod map;
pub(crate) mod reduce;
