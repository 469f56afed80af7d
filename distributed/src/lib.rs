//! `tensorplay-distributed`: training beyond one process (PyTorch's `torch.distributed`), on
//! MPI. Use it through the facade as `tensorplay::distributed` (feature `distributed`).
//!
//! - Process groups: [`init_process_group`] joins the job `mpirun` launched, [`rank`],
//!   [`world_size`], [`barrier`], [`new_group`], [`destroy_process_group`].
//! - Collectives with PyTorch's names and semantics ([`all_reduce`], [`broadcast`],
//!   [`all_gather`], [`all_gather_into_tensor`], [`reduce_scatter`], [`reduce_scatter_tensor`],
//!   [`reduce`], [`gather`], [`scatter`], [`send`], [`recv`]), each with an `_async` twin returning
//!   a [`Work`] handle. Every dtype; non-contiguous and device tensors are staged through host
//!   copies; f16/bf16 reductions sum in f32.
//! - [`functional`]: collectives that return new tensors and are differentiable.
//! - [`DistributedDataParallel`]: gradients averaged in buckets during `backward()`, overlapping
//!   communication with the rest of the pass; [`DistributedSampler`].
//! - Under `tensorplay::compile` the in-place `all_reduce`/`broadcast` and the functional
//!   collectives are captured as opaque nodes (`tp_dist::*`): fusion barriers with the fused
//!   regions on both sides.
//!
//! Collectives run on one communication thread in the order they are called, which must be the
//! same on every rank (as in PyTorch). One that does not complete within `TP_DIST_TIMEOUT`
//! seconds (default 300) ends the job with a message naming the rank and the collective,
//! instead of hanging.
//!
//! ```no_run
//! use tensorplay_distributed::{self as dist, Backend, ReduceOp};
//! use tensorplay_runtime::Tensor;
//! // mpirun -np 2 ./prog
//! dist::init_process_group(Backend::Mpi)?;
//! let t = Tensor::from_vec(vec![dist::rank()? as f32 + 1.0; 3], &[3])?;
//! dist::all_reduce(&t, ReduceOp::Sum, None)?; // [3, 3, 3] on both ranks
//! dist::destroy_process_group()?;
//! # Ok::<(), tensorplay_runtime::Error>(())
//! ```

mod collectives;
mod ddp;
mod engine;
mod group;
mod ops;
mod reduce_op;
mod sampler;
mod stage;
mod work;

pub use collectives::{
    all_gather, all_gather_async, all_gather_into_tensor, all_gather_into_tensor_async, all_reduce,
    all_reduce_async, broadcast, broadcast_async, gather, gather_async, irecv, isend, recv, reduce,
    reduce_async, reduce_scatter, reduce_scatter_async, reduce_scatter_tensor,
    reduce_scatter_tensor_async, scatter, scatter_async, send,
};
pub use ddp::{DEFAULT_BUCKET_CAP_BYTES, DistributedDataParallel, NoSyncGuard};
pub use group::{
    Backend, ProcessGroup, barrier, destroy_process_group, get_backend, init_process_group,
    is_initialized, new_group, rank, world, world_size,
};
pub use ops::functional;
pub use reduce_op::ReduceOp;
pub use sampler::DistributedSampler;
pub use work::Work;
