//! `Work`: the handle of a collective in flight (PyTorch's `Work` from `async_op=True`), and the
//! timeout that turns a hang into an error naming the rank and the collective.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tensorplay_runtime::{Result, Tensor};

thread_local! {
    /// Set while a synchronous collective posts its work (see [`blocking`]).
    static CALLER_WAITS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True when the collective being posted is waited for at once (the engine may run it on the
/// caller's thread).
pub(crate) fn caller_waits() -> bool {
    CALLER_WAITS.with(std::cell::Cell::get)
}

/// Runs an `_async` collective and waits for it: the synchronous form. The engine may run the
/// collective on this thread (no hand-off) when nothing else is queued.
pub(crate) fn blocking(post: impl FnOnce() -> Result<Work>) -> Result<()> {
    let previous = CALLER_WAITS.with(|c| c.replace(true));
    let work = post();
    CALLER_WAITS.with(|c| c.set(previous));
    work?.wait()
}

/// Completion of one posted collective, shared by the engine (which completes it) and the
/// [`Work`] handle (which waits for it).
#[derive(Default)]
pub(crate) struct WorkState {
    done: Mutex<bool>,
    cv: Condvar,
}

impl WorkState {
    /// Marks the collective complete and wakes its waiter.
    pub(crate) fn complete(&self) {
        *self.done.lock() = true;
        self.cv.notify_all();
    }

    /// Waits until complete or `deadline`; true when complete.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut done = self.done.lock();
        while !*done {
            if self.cv.wait_until(&mut done, deadline).timed_out() {
                return *done;
            }
        }
        true
    }

    fn is_done(&self) -> bool {
        *self.done.lock()
    }
}

/// What runs on the caller's side once the engine is done: copying staged results back into the
/// caller's tensors, dividing for `Avg`.
pub(crate) type Finish = Box<dyn FnOnce() -> Result<()> + Send>;

/// What a timeout does: prints its message and ends the job (the engine's abort; should it
/// return, the process exits).
pub(crate) type OnTimeout = Arc<dyn Fn(&str) + Send + Sync>;

/// A collective in flight. [`Work::wait`] blocks until it completes and its results are in the
/// tensors passed to it; until then those tensors must not be read or written. Dropping a `Work`
/// waits too (the engine may still be writing into the tensors' memory).
///
/// A collective that does not complete within the group's timeout (`TP_DIST_TIMEOUT` seconds,
/// default 300) ends every process of the job with a message naming this rank and the
/// collective: another rank failed or never called it, and waiting longer would hang.
#[must_use = "a collective's results are only in place after wait()"]
pub struct Work {
    state: Arc<WorkState>,
    /// The tensors whose memory the engine reads or writes.
    _keep: Vec<Tensor>,
    finish: Option<Finish>,
    what: String,
    timeout: Duration,
    on_timeout: OnTimeout,
}

impl Work {
    pub(crate) fn new(
        state: Arc<WorkState>,
        keep: Vec<Tensor>,
        finish: Option<Finish>,
        what: String,
        timeout: Duration,
        on_timeout: OnTimeout,
    ) -> Work {
        Work {
            state,
            _keep: keep,
            finish,
            what,
            timeout,
            on_timeout,
        }
    }

    /// A handle that is already complete (a collective this rank takes no part in).
    pub(crate) fn ready(what: String) -> Work {
        let state = Arc::new(WorkState::default());
        state.complete();
        let on_timeout: OnTimeout = Arc::new(|_: &str| {});
        Work::new(state, Vec::new(), None, what, Duration::MAX, on_timeout)
    }

    /// Blocks until the collective has completed and its results are in the output tensors.
    pub fn wait(mut self) -> Result<()> {
        self.wait_inner()
    }

    /// True once the engine has finished the collective (`wait()` still writes staged results
    /// back).
    pub fn is_completed(&self) -> bool {
        self.state.is_done()
    }

    fn wait_inner(&mut self) -> Result<()> {
        let deadline = Instant::now().checked_add(self.timeout);
        let done = match deadline {
            Some(d) => self.state.wait_until(d),
            None => self
                .state
                .wait_until(Instant::now() + Duration::from_secs(u32::MAX.into())),
        };
        if !done {
            let msg = timeout_text(&self.what, self.timeout);
            (self.on_timeout)(&msg);
            std::process::exit(1);
        }
        match self.finish.take() {
            Some(f) => f(),
            None => Ok(()),
        }
    }
}

/// The message of a collective `what` that did not complete within `timeout`.
pub(crate) fn timeout_text(what: &str, timeout: Duration) -> String {
    format!(
        "{what} did not complete within {} s (TP_DIST_TIMEOUT): another rank failed or never \
         called it; ending the job instead of hanging",
        timeout.as_secs_f64()
    )
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.finish.is_some() || !self.state.is_done() {
            // Results of a dropped handle still land; an error has nowhere to go.
            let _ = self.wait_inner();
        }
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("what", &self.what)
            .field("completed", &self.is_completed())
            .finish()
    }
}

/// Deadlines of collectives running on a caller's thread (which cannot wait with a timeout: it
/// is inside the blocking MPI call), watched by one thread that ends the job at a deadline.
struct Watch {
    entries: Mutex<Vec<(u64, Instant, String, OnTimeout)>>,
    cv: Condvar,
}

static WATCH: Watch = Watch {
    entries: Mutex::new(Vec::new()),
    cv: Condvar::new(),
};

/// While alive, the watchdog ends the job if it is still alive at its deadline.
pub(crate) struct WatchGuard(u64);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        WATCH.entries.lock().retain(|e| e.0 != self.0);
    }
}

/// Starts watching a collective that runs on this thread: at `timeout` from now, `on_timeout`
/// runs with a message naming `what`.
pub(crate) fn watch(timeout: Duration, what: &str, on_timeout: OnTimeout) -> WatchGuard {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        // If the thread cannot start, collectives still run; only their timeout is lost.
        let _ = std::thread::Builder::new()
            .name("tp-dist-watchdog".into())
            .spawn(watchdog);
    });
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(u32::MAX.into()));
    WATCH
        .entries
        .lock()
        .push((id, deadline, timeout_text(what, timeout), on_timeout));
    WATCH.cv.notify_all();
    WatchGuard(id)
}

fn watchdog() {
    let mut entries = WATCH.entries.lock();
    loop {
        let now = Instant::now();
        if let Some(e) = entries.iter().find(|e| e.1 <= now) {
            let (msg, on_timeout) = (e.2.clone(), e.3.clone());
            drop(entries);
            on_timeout(&msg);
            std::process::exit(1);
        }
        match entries.iter().map(|e| e.1).min() {
            Some(next) => {
                WATCH.cv.wait_until(&mut entries, next);
            }
            None => WATCH.cv.wait(&mut entries),
        }
    }
}
