//! The MPI engine: one thread owns MPI (initialised with `MPI_THREAD_MULTIPLE`, so a timeout may
//! call `MPI_Abort` from the waiting thread) and runs the posted collectives in order, each as the
//! blocking MPI call of the same name on the group's communicator. Running them on their own
//! thread is what makes the async API and DDP's overlap work: the caller goes on computing while
//! a bucket's all-reduce runs.
//!
//! A collective the caller waits for at once runs on the caller's thread instead when nothing is
//! queued or running (`run_now`): the hand-off to the engine thread and back costs two thread
//! wake-ups (~10–20 µs), more than a small all-reduce itself. The communicator table's lock is
//! the turn: whoever runs a collective holds it, so collectives never overlap and keep their
//! posting order.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use mpi::ffi;
use mpi::raw::AsRaw;
use std::sync::atomic::{AtomicUsize, Ordering};

use mpi::topology::{Communicator, Group, SimpleCommunicator};
use parking_lot::Mutex;
use tensorplay_runtime::{Error, Result};

use super::{Buf, Collective, Engine, Wire};
use crate::reduce_op::ReduceOp;
use crate::work::WorkState;

unsafe extern "C" {
    /// `MPI_IN_PLACE` of the MPI headers the crate was built against (`mpi_consts.c`).
    fn tp_mpi_in_place() -> *mut c_void;
}

enum Msg {
    Run(usize, Collective, Arc<WorkState>),
    NewGroup(Vec<usize>, mpsc::Sender<usize>),
    Shutdown,
}

/// A communicator's handle and this process's rank in it.
#[derive(Clone, Copy)]
struct Comm {
    raw: ffi::MPI_Comm,
    rank: usize,
}

// SAFETY: an `MPI_Comm` is a handle MPI lets any thread use under MPI_THREAD_MULTIPLE; the
// communicator it names lives until the engine thread frees it at shutdown, after the last use.
unsafe impl Send for Comm {}

/// Each group's communicator (`None` where this rank is not a member), by group id. Its lock is
/// the turn to call MPI for a collective.
type Comms = Arc<Mutex<Vec<Option<Comm>>>>;

/// The MPI engine: a handle to the thread that owns MPI.
pub(crate) struct MpiEngine {
    tx: Mutex<mpsc::Sender<Msg>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    comms: Comms,
    /// Collectives posted to the engine thread and not finished yet.
    pending: Arc<AtomicUsize>,
    rank: usize,
    size: usize,
}

impl MpiEngine {
    /// Starts the engine thread and initialises MPI on it (from `mpirun`'s environment; a
    /// process started without `mpirun` is a world of one).
    pub(crate) fn start() -> Result<MpiEngine> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(usize, usize)>>();
        let comms: Comms = Arc::default();
        let pending = Arc::new(AtomicUsize::new(0));
        let (c, p) = (comms.clone(), pending.clone());
        let thread = std::thread::Builder::new()
            .name("tp-dist-mpi".into())
            .spawn(move || engine_thread(rx, ready_tx, c, p))
            .map_err(|e| {
                Error::unsupported("init_process_group", format!("cannot start a thread: {e}"))
            })?;
        let (rank, size) = ready_rx.recv().map_err(|_| {
            Error::unsupported("init_process_group", "the MPI engine thread ended at start")
        })??;
        Ok(MpiEngine {
            tx: Mutex::new(tx),
            thread: Mutex::new(Some(thread)),
            comms,
            pending,
            rank,
            size,
        })
    }

    fn send(&self, m: Msg) {
        // The thread only ends after `Shutdown`, which `shutdown` sends last.
        let _ = self.tx.lock().send(m);
    }
}

impl Engine for MpiEngine {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn post(&self, group: usize, c: Collective, done: Arc<WorkState>) {
        self.pending.fetch_add(1, Ordering::SeqCst);
        self.send(Msg::Run(group, c, done));
    }

    fn run_now(&self, group: usize, c: Collective) -> std::result::Result<(), Collective> {
        if self.pending.load(Ordering::SeqCst) != 0 {
            return Err(c);
        }
        let comms = self.comms.lock();
        // Checked again under the turn: a job posted meanwhile must run first.
        if self.pending.load(Ordering::SeqCst) != 0 {
            return Err(c);
        }
        let comm = comms[group].expect("collectives only run on groups this rank is in");
        run(comm, c);
        Ok(())
    }

    fn new_group(&self, ranks: &[usize]) -> Result<usize> {
        let (tx, rx) = mpsc::channel();
        self.send(Msg::NewGroup(ranks.to_vec(), tx));
        rx.recv().map_err(|_| {
            Error::unsupported(
                "new_group",
                "the MPI engine has shut down (destroy_process_group)",
            )
        })
    }

    fn abort(&self, code: i32) -> ! {
        // SAFETY: MPI was initialised with MPI_THREAD_MULTIPLE (checked at start), so any thread
        // may call MPI_Abort; it does not return.
        unsafe {
            ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code);
        }
        std::process::exit(code)
    }

    fn shutdown(&self) {
        self.send(Msg::Shutdown);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// The engine thread: initialises MPI, then runs messages until `Shutdown` (dropping the
/// universe finalises MPI).
fn engine_thread(
    rx: mpsc::Receiver<Msg>,
    ready: mpsc::Sender<Result<(usize, usize)>>,
    comms: Comms,
    pending: Arc<AtomicUsize>,
) {
    let Some((universe, threading)) = mpi::initialize_with_threading(mpi::Threading::Multiple)
    else {
        let _ = ready.send(Err(Error::unsupported(
            "init_process_group",
            "MPI was already initialised in this process (and cannot be again after \
             destroy_process_group)",
        )));
        return;
    };
    if threading != mpi::Threading::Multiple {
        let _ = ready.send(Err(Error::unsupported(
            "init_process_group",
            format!(
                "the MPI library provides thread level {threading:?}; tensorplay needs \
                 MPI_THREAD_MULTIPLE (OpenMPI 4+ and MPICH provide it)"
            ),
        )));
        return;
    }
    let world = universe.world();
    let comm_of = |c: &SimpleCommunicator| Comm {
        raw: c.as_raw(),
        rank: c.rank() as usize,
    };
    // The communicators themselves stay here (freed at shutdown); `comms` shares their handles.
    let mut groups: Vec<Option<SimpleCommunicator>> = vec![Some(world.duplicate())];
    comms.lock().push(groups[0].as_ref().map(comm_of));
    let _ = ready.send(Ok((world.rank() as usize, world.size() as usize)));
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Run(group, c, done) => {
                {
                    let comms = comms.lock();
                    let comm =
                        comms[group].expect("collectives only run on groups this rank is in");
                    run(comm, c);
                }
                pending.fetch_sub(1, Ordering::SeqCst);
                done.complete();
            }
            Msg::NewGroup(ranks, reply) => {
                let ranks: Vec<i32> = ranks.iter().map(|&r| r as i32).collect();
                let sub = world.group().include(&ranks);
                let mut comms = comms.lock();
                let comm = world.split_by_subgroup_collective(&sub);
                comms.push(comm.as_ref().map(comm_of));
                groups.push(comm);
                let _ = reply.send(groups.len() - 1);
            }
            Msg::Shutdown => break,
        }
    }
    comms.lock().clear();
    drop(groups);
    drop(universe);
}

fn datatype(w: Wire) -> ffi::MPI_Datatype {
    // SAFETY: reading the predefined datatype handles mpi-sys exports (constants set by MPI's
    // headers; valid after MPI_Init).
    unsafe {
        match w {
            Wire::F32 => ffi::RSMPI_FLOAT,
            Wire::F64 => ffi::RSMPI_DOUBLE,
            Wire::I32 => ffi::RSMPI_INT32_T,
            Wire::I64 => ffi::RSMPI_INT64_T,
            Wire::Bool => ffi::RSMPI_C_BOOL,
            Wire::Bits16 => ffi::RSMPI_UINT16_T,
        }
    }
}

fn reduction(op: ReduceOp, w: Wire) -> ffi::MPI_Op {
    // SAFETY: reading the predefined reduction handles mpi-sys exports.
    unsafe {
        match (op, w) {
            (ReduceOp::Sum | ReduceOp::Max, Wire::Bool) => ffi::RSMPI_LOR,
            (ReduceOp::Product | ReduceOp::Min, Wire::Bool) => ffi::RSMPI_LAND,
            // Avg is a sum here; the caller divides.
            (ReduceOp::Sum | ReduceOp::Avg, _) => ffi::RSMPI_SUM,
            (ReduceOp::Max, _) => ffi::RSMPI_MAX,
            (ReduceOp::Min, _) => ffi::RSMPI_MIN,
            (ReduceOp::Product, _) => ffi::RSMPI_PROD,
        }
    }
}

/// Counts fit `c_int`: the collectives layer refuses larger buffers before posting.
fn n(b: &Buf) -> c_int {
    b.count as c_int
}

fn p(b: &Buf) -> *mut c_void {
    b.ptr.cast()
}

/// Runs one collective as its blocking MPI call. MPI's default error handler
/// (`MPI_ERRORS_ARE_FATAL`) ends the job on an error, with MPI's message.
fn run(comm: Comm, c: Collective) {
    let cm = comm.raw;
    // SAFETY: every buffer is valid for its count of its wire type (the collectives layer made
    // them from live contiguous tensors it keeps alive until completion), the counts agree
    // with the operation's contract (checked there: recv = send × size where gathered), and
    // roots and peers are ranks of this communicator (checked against the group).
    unsafe {
        let in_place = tp_mpi_in_place();
        match c {
            Collective::AllReduce { buf, op } => {
                let (dt, o) = (datatype(buf.wire), reduction(op, buf.wire));
                ffi::MPI_Allreduce(in_place, p(&buf), n(&buf), dt, o, cm);
            }
            Collective::Broadcast { buf, root } => {
                ffi::MPI_Bcast(p(&buf), n(&buf), datatype(buf.wire), root as c_int, cm);
            }
            Collective::AllGather { send, recv } => {
                let dt = datatype(send.wire);
                ffi::MPI_Allgather(p(&send), n(&send), dt, p(&recv), n(&send), dt, cm);
            }
            Collective::ReduceScatter { send, recv, op } => {
                let (dt, o) = (datatype(send.wire), reduction(op, send.wire));
                ffi::MPI_Reduce_scatter_block(p(&send), p(&recv), n(&recv), dt, o, cm);
            }
            Collective::Reduce { buf, root, op } => {
                let (dt, o) = (datatype(buf.wire), reduction(op, buf.wire));
                let send = if comm.rank == root { in_place } else { p(&buf) };
                ffi::MPI_Reduce(send, p(&buf), n(&buf), dt, o, root as c_int, cm);
            }
            Collective::Gather { send, recv, root } => {
                let dt = datatype(send.wire);
                let r = recv.map_or(std::ptr::null_mut(), |b| p(&b));
                ffi::MPI_Gather(p(&send), n(&send), dt, r, n(&send), dt, root as c_int, cm);
            }
            Collective::Scatter { send, recv, root } => {
                let dt = datatype(recv.wire);
                let s = send.map_or(std::ptr::null_mut(), |b| p(&b));
                ffi::MPI_Scatter(s, n(&recv), dt, p(&recv), n(&recv), dt, root as c_int, cm);
            }
            Collective::Send { buf, peer, tag } => {
                ffi::MPI_Send(p(&buf), n(&buf), datatype(buf.wire), peer as c_int, tag, cm);
            }
            Collective::Recv { buf, peer, tag } => {
                let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
                let dt = datatype(buf.wire);
                ffi::MPI_Recv(
                    p(&buf),
                    n(&buf),
                    dt,
                    peer as c_int,
                    tag,
                    cm,
                    status.as_mut_ptr(),
                );
            }
            Collective::Barrier => {
                ffi::MPI_Barrier(cm);
            }
        }
    }
}
