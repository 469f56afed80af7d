//! The communication engine a process group runs its collectives on: what a collective asks of
//! it ([`Collective`], over host buffers of a [`Wire`] type) and the [`Engine`] trait a back end
//! implements. The MPI engine (`mpi.rs`, feature `mpi`) is the one back end today; NCCL would be
//! a second implementation of the same trait.
//!
//! Buffers are raw addresses of tensor memory that the caller keeps alive (the [`Work`] handle
//! of the collective holds the tensors) until the engine reports the collective complete.

#[cfg(feature = "mpi")]
pub(crate) mod mpi;

use std::sync::Arc;

use tensorplay_runtime::{DType, Result};

use crate::reduce_op::ReduceOp;
use crate::work::WorkState;

/// The element type a buffer travels as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    F32,
    F64,
    I32,
    I64,
    /// `bool` (one byte, reduced as logical or/and).
    Bool,
    /// 16-bit floats moved as their bits (no arithmetic on the wire; reductions stage to f32).
    Bits16,
}

impl Wire {
    /// How `dtype` travels: as itself, or (f16/bf16) as 16-bit words.
    pub(crate) fn of(dtype: DType) -> Wire {
        match dtype {
            DType::F32 => Wire::F32,
            DType::F64 => Wire::F64,
            DType::I32 => Wire::I32,
            DType::I64 => Wire::I64,
            DType::Bool => Wire::Bool,
            DType::F16 | DType::BF16 => Wire::Bits16,
        }
    }
}

/// A contiguous host buffer: its first byte, its length in elements of `wire`.
// Without the `mpi` feature no engine reads buffers or collectives (init_process_group refuses).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Buf {
    pub(crate) ptr: *mut u8,
    pub(crate) count: usize,
    pub(crate) wire: Wire,
}

// SAFETY: a `Buf` is an address the engine thread reads and writes while the caller waits for the
// collective; the tensors owning the memory stay alive in the collective's `Work` until the
// engine has reported it complete, and the caller does not touch them in between (the async
// API's documented contract, the synchronous API's by construction).
unsafe impl Send for Buf {}

/// One collective (or point-to-point transfer) on one group, in group ranks.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
#[derive(Debug)]
pub(crate) enum Collective {
    /// Reduces `buf` over the group, in place on every rank.
    AllReduce { buf: Buf, op: ReduceOp },
    /// Copies `root`'s `buf` into every rank's `buf`.
    Broadcast { buf: Buf, root: usize },
    /// Every rank's `send` into `recv` (`send.count × size` elements), in rank order.
    AllGather { send: Buf, recv: Buf },
    /// Reduces `send` (`recv.count × size` elements) and leaves rank `r` the `r`-th block.
    ReduceScatter { send: Buf, recv: Buf, op: ReduceOp },
    /// Reduces `buf` into `root`'s `buf` (other ranks' buffers are only read).
    Reduce { buf: Buf, root: usize, op: ReduceOp },
    /// Every rank's `send` into `root`'s `recv` (`send.count × size` elements; `None` elsewhere).
    Gather {
        send: Buf,
        recv: Option<Buf>,
        root: usize,
    },
    /// Block `r` of `root`'s `send` (`None` elsewhere) into rank `r`'s `recv`.
    Scatter {
        send: Option<Buf>,
        recv: Buf,
        root: usize,
    },
    /// `buf` to rank `peer`, matched by `tag`.
    Send { buf: Buf, peer: usize, tag: i32 },
    /// From rank `peer` into `buf`, matched by `tag`.
    Recv { buf: Buf, peer: usize, tag: i32 },
    /// Returns when every rank of the group has entered it.
    Barrier,
}

impl Collective {
    /// The name PyTorch gives the operation (used in timeout messages).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Collective::AllReduce { .. } => "all_reduce",
            Collective::Broadcast { .. } => "broadcast",
            Collective::AllGather { .. } => "all_gather",
            Collective::ReduceScatter { .. } => "reduce_scatter",
            Collective::Reduce { .. } => "reduce",
            Collective::Gather { .. } => "gather",
            Collective::Scatter { .. } => "scatter",
            Collective::Send { .. } => "send",
            Collective::Recv { .. } => "recv",
            Collective::Barrier => "barrier",
        }
    }
}

/// A communication back end: runs collectives in the order posted (the same order on every
/// rank, so they match), each completing the [`WorkState`] posted with it.
pub(crate) trait Engine: Send + Sync {
    /// This process's rank in the world.
    fn rank(&self) -> usize;
    /// The number of processes in the world.
    fn world_size(&self) -> usize;
    /// Queues `c` on group `group` (an id from [`Engine::new_group`], `0` is the world).
    fn post(&self, group: usize, c: Collective, done: Arc<WorkState>);
    /// Runs `c` on the calling thread now if nothing posted is still queued or running (the
    /// order stays the posting order); gives it back otherwise.
    fn run_now(&self, group: usize, c: Collective) -> std::result::Result<(), Collective>;
    /// Creates a communicator for `ranks` (world ranks, ascending); every world rank must call it,
    /// members and others alike, in the same order. Returns the group's id.
    fn new_group(&self, ranks: &[usize]) -> Result<usize>;
    /// Ends every process of the job (after a timeout: the others may be stuck in a collective).
    fn abort(&self, code: i32) -> !;
    /// Finishes the queued collectives and shuts the engine down (MPI_Finalize).
    fn shutdown(&self);
}
