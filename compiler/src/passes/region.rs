//! Fusion regions: the unit the fusion pass produces and the code generators consume
//! (`tensorplay-kernel`'s `region`, re-exported).

pub use tensorplay_kernel::region::*;
