//! `TP_LOGS`: which compiler stages print what they did to stderr (`tensorplay-kernel`'s `log`,
//! re-exported).

pub use tensorplay_kernel::log::*;
