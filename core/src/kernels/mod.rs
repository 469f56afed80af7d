//! Eager CPU loop machinery shared by the op kernels: the strided loop driver, typed maps, and
//! `raw`, the audited pointer-level element access the maps go through.

pub(crate) mod iter;
pub(crate) mod map;
pub(crate) mod raw;
pub(crate) mod reduce;
