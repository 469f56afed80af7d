//! Process groups: `init_process_group` from the launcher's environment, the world and its
//! sub-groups (`new_group`), ranks and sizes, `barrier`, `destroy_process_group`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tensorplay_runtime::{Error, Result, Tensor};

use crate::engine::{Collective, Engine};
use crate::work::{Finish, OnTimeout, Work, WorkState};

/// The communication back end of a process group (PyTorch's `backend=` string).
///
/// ```
/// use tensorplay_distributed::Backend;
/// assert_eq!("mpi".parse::<Backend>()?, Backend::Mpi);
/// let err = "nccl".parse::<Backend>().unwrap_err().to_string();
/// assert!(err.contains("mpi"), "{err}");
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// MPI (OpenMPI or MPICH, launched by `mpirun`): CPU tensors in place, other devices
    /// staged through host memory.
    Mpi,
}

impl FromStr for Backend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Backend> {
        match s.to_ascii_lowercase().as_str() {
            "mpi" => Ok(Backend::Mpi),
            _ => Err(Error::argument(
                "init_process_group",
                "backend",
                "\"mpi\" (the back end this build has)",
                format!("{s:?}"),
            )),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("mpi")
    }
}

/// The initialised world: its engine, timeout and groups.
struct World {
    engine: Arc<dyn Engine>,
    backend: Backend,
    timeout: Duration,
    /// Each group's members (world ranks, ascending), by id.
    groups: Mutex<Vec<Vec<usize>>>,
}

static WORLD: RwLock<Option<Arc<World>>> = RwLock::new(None);

/// A set of ranks collectives run among (PyTorch's `ProcessGroup`): the world, or one made by
/// [`new_group`]. Cheap to clone.
#[derive(Clone)]
pub struct ProcessGroup {
    id: usize,
    /// World ranks of the members, ascending.
    ranks: Vec<usize>,
    world: Arc<World>,
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("id", &self.id)
            .field("ranks", &self.ranks)
            .finish()
    }
}

impl ProcessGroup {
    /// The group's id (0 is the world); collectives captured by the compiler name it.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The members' world ranks, ascending.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// This process's rank within the group (`None` when it is not a member).
    pub fn rank(&self) -> Option<usize> {
        self.group_rank(self.world.engine.rank())
    }

    /// The group rank of world rank `world_rank` (`None` when not a member).
    pub fn group_rank(&self, world_rank: usize) -> Option<usize> {
        self.ranks.binary_search(&world_rank).ok()
    }

    /// The group rank of the world rank `arg` (a `src`/`dst` argument of `op`), or an error.
    pub(crate) fn member(&self, op: &str, arg: &str, world_rank: usize) -> Result<usize> {
        self.group_rank(world_rank).ok_or_else(|| {
            Error::argument(
                op,
                arg,
                format!("a rank of the group {:?}", self.ranks),
                world_rank.to_string(),
            )
        })
    }

    /// Posts `c` on this group's engine; the returned handle keeps `keep` alive and runs
    /// `finish` after completion.
    pub(crate) fn post(
        &self,
        c: Collective,
        keep: Vec<Tensor>,
        finish: Option<Finish>,
    ) -> Result<Work> {
        if !self.world.is_current() {
            return Err(Error::unsupported(
                c.name(),
                "the process group was destroyed (destroy_process_group)",
            ));
        }
        let rank = self.world.engine.rank();
        let what = format!(
            "{} on rank {rank} (group {} of ranks {:?})",
            c.name(),
            self.id,
            self.ranks
        );
        let engine = self.world.engine.clone();
        let on_timeout: OnTimeout = Arc::new(move |msg: &str| {
            eprintln!("tensorplay.distributed: {msg}");
            engine.abort(1)
        });
        let state = Arc::new(WorkState::default());
        let c = if crate::work::caller_waits() {
            let _watch = crate::work::watch(self.world.timeout, &what, on_timeout.clone());
            match self.world.engine.run_now(self.id, c) {
                Ok(()) => {
                    state.complete();
                    None
                }
                Err(c) => Some(c),
            }
        } else {
            Some(c)
        };
        if let Some(c) = c {
            self.world.engine.post(self.id, c, state.clone());
        }
        Ok(Work::new(
            state,
            keep,
            finish,
            what,
            self.world.timeout,
            on_timeout,
        ))
    }
}

impl World {
    fn is_current(self: &Arc<World>) -> bool {
        WORLD.read().as_ref().is_some_and(|w| Arc::ptr_eq(w, self))
    }
}

fn current(op: &str) -> Result<Arc<World>> {
    WORLD.read().clone().ok_or_else(|| {
        Error::unsupported(
            op,
            "the default process group is not initialised; call init_process_group first",
        )
    })
}

/// The collective timeout: `TP_DIST_TIMEOUT` seconds, default 300.
fn timeout_from_env() -> Result<Duration> {
    match std::env::var("TP_DIST_TIMEOUT") {
        Err(_) => Ok(Duration::from_secs(300)),
        Ok(s) => match s.trim().parse::<f64>() {
            Ok(secs) if secs > 0.0 && secs.is_finite() => Ok(Duration::from_secs_f64(secs)),
            _ => Err(Error::argument(
                "init_process_group",
                "TP_DIST_TIMEOUT",
                "a positive number of seconds",
                format!("{s:?}"),
            )),
        },
    }
}

#[cfg(feature = "mpi")]
fn start_engine(backend: Backend) -> Result<Arc<dyn Engine>> {
    match backend {
        Backend::Mpi => Ok(Arc::new(crate::engine::mpi::MpiEngine::start()?)),
    }
}

#[cfg(not(feature = "mpi"))]
fn start_engine(backend: Backend) -> Result<Arc<dyn Engine>> {
    Err(Error::unsupported(
        "init_process_group",
        format!(
            "this build has no {backend} engine: build with the `distributed` feature of \
             tensorplay (or `mpi` of tensorplay-distributed), which needs an MPI installation \
             (OpenMPI: apt-get install libopenmpi-dev openmpi-bin)"
        ),
    ))
}

/// Joins the job this process was launched in (`mpirun -np N prog`: rank and size come from the
/// launcher; a process started on its own is a world of one) and makes the world the default
/// group. Collectives time out after `TP_DIST_TIMEOUT` seconds (default 300).
///
/// Errors when already initialised, when the build has no engine for `backend`, or (MPI) when
/// MPI cannot be initialised again in this process (after [`destroy_process_group`]).
pub fn init_process_group(backend: Backend) -> Result<()> {
    let mut slot = WORLD.write();
    if slot.is_some() {
        return Err(Error::unsupported(
            "init_process_group",
            "the default process group is already initialised",
        ));
    }
    let timeout = timeout_from_env()?;
    let engine = start_engine(backend)?;
    let world = Arc::new(World {
        engine,
        backend,
        timeout,
        groups: Mutex::new(Vec::new()),
    });
    let ranks = (0..world.engine.world_size()).collect();
    world.groups.lock().push(ranks);
    *slot = Some(world);
    Ok(())
}

/// True once [`init_process_group`] has run (and [`destroy_process_group`] has not).
pub fn is_initialized() -> bool {
    WORLD.read().is_some()
}

/// The back end of the default group.
pub fn get_backend() -> Result<Backend> {
    Ok(current("get_backend")?.backend)
}

/// This process's rank in the world.
pub fn rank() -> Result<usize> {
    Ok(current("rank")?.engine.rank())
}

/// The number of processes in the world.
pub fn world_size() -> Result<usize> {
    Ok(current("world_size")?.engine.world_size())
}

/// The world group.
pub fn world() -> Result<ProcessGroup> {
    by_id("world", 0)
}

/// The group `group`, or the world when `None`.
pub(crate) fn resolve(op: &str, group: Option<&ProcessGroup>) -> Result<ProcessGroup> {
    match group {
        Some(g) => Ok(g.clone()),
        None => by_id(op, 0),
    }
}

/// The group with id `id` (how compiled graphs and registered ops name groups).
pub(crate) fn by_id(op: &str, id: i64) -> Result<ProcessGroup> {
    let world = current(op)?;
    let groups = world.groups.lock();
    usize::try_from(id)
        .ok()
        .and_then(|i| {
            Some(ProcessGroup {
                id: i,
                ranks: groups.get(i)?.clone(),
                world: world.clone(),
            })
        })
        .ok_or_else(|| {
            Error::argument(
                op,
                "group",
                format!("a group id below {}", groups.len()),
                id.to_string(),
            )
        })
}

/// Makes a group of the world ranks `ranks` (PyTorch's `new_group`). Every process of the world
/// must call it, members or not, with the same ranks and in the same order relative to other
/// `new_group` calls; collectives on a group a process is not a member of do nothing there.
pub fn new_group(ranks: &[usize]) -> Result<ProcessGroup> {
    let world = current("new_group")?;
    let size = world.engine.world_size();
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != ranks.len() || sorted.is_empty() || sorted.iter().any(|&r| r >= size) {
        return Err(Error::argument(
            "new_group",
            "ranks",
            format!("distinct ranks below the world size {size}, at least one"),
            format!("{ranks:?}"),
        ));
    }
    // Held across the engine call: ids must follow the order the engine made the groups in.
    let mut groups = world.groups.lock();
    let id = world.engine.new_group(&sorted)?;
    debug_assert_eq!(groups.len(), id, "group ids follow creation order");
    groups.push(sorted.clone());
    Ok(ProcessGroup {
        id,
        ranks: sorted,
        world: world.clone(),
    })
}

/// Blocks until every member of `group` (the world when `None`) has called it.
pub fn barrier(group: Option<&ProcessGroup>) -> Result<()> {
    let g = resolve("barrier", group)?;
    if g.rank().is_none() {
        return Ok(());
    }
    crate::work::blocking(|| g.post(Collective::Barrier, Vec::new(), None))
}

/// Finishes queued collectives and leaves the job (MPI: `MPI_Finalize`). Groups made before are
/// unusable afterwards; MPI cannot be initialised again in the same process.
pub fn destroy_process_group() -> Result<()> {
    let world = WORLD.write().take().ok_or_else(|| {
        Error::unsupported(
            "destroy_process_group",
            "the default process group is not initialised",
        )
    })?;
    world.engine.shutdown();
    Ok(())
}
