//! The shape of a `register_vmap` rule (defined beside the vmap layer, in `tensorplay-core`).

pub use tensorplay_core::vmap::custom_rule::{VmapInfo, VmapRule};
