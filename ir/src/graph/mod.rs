//! The IR graph (being written).
