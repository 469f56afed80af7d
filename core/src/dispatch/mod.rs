//! The dispatcher: every op call, builtin or custom, enters here as one [`OpHandle`] and passes
//! one ordered list of layers, each behind the [`Layer`] trait:
//!
//! ```text
//!   call / call_op ──► autocast ─► vmap ─► autograd ─► backend
//!                         (cast)      (batch   (record     capture hook if installed
//!                                      rule)    backward)  (proxy: records the call),
//!                                                          else the selected kernel
//! ```
//!
//! A layer either passes the call down ([`Next`]), possibly with changed arguments (autocast's
//! casts), or handles it and re-dispatches other calls from the top (vmap's batching rules). No
//! layer asks whether an op is builtin or custom: it asks the handle for a fact (`op.rs`) or hands
//! the call on through it (`route.rs`); those two files are the only places that match on the kind. The state the layers consult (autocast region, vmap
//! levels, grad mode, capture hook) is thread-local. Because capture is the bottom, a captured
//! graph holds the casts, batched (physical) ops and per-example calls of the layers above.
//! `TP_LOGS=dispatch` prints every layer each call enters; [`trace_layers`] records them.

mod autocast;
mod autograd;
mod backend;
mod capture;
mod custom;
mod op;
mod route;
mod slot;
mod stack;
mod trace;
mod vmap;

pub use custom::{CustomAutograd, CustomOperator};
pub use op::{OpHandle, common_device};
pub use slot::Slot;
pub use stack::{Layer, Next, backend, call, call_op, call1, layer_names};
pub use trace::{LayerEvent, log_enabled, trace_layers};
