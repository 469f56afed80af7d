//! The one persistent thread pool every parallel kernel runs on.
//!
//! `TP_NUM_THREADS` sets its size (default: all cores), read once when the pool starts.
//!
//! With two or more threads, the thread that first needs the pool (in a program, normally its
//! main thread) becomes the pool's worker 0 and only `n - 1` threads are started: a parallel op
//! called from that thread runs its first share inline and the other workers steal the rest,
//! as OpenMP's master thread does. Without this, every parallel op of a step handed its work to
//! the pool and slept until woken (a futex round trip per op), and the pool's idle workers
//! spun on the cores the caller needed between ops. Other threads still work: their calls are
//! handed to the pool as before.

use std::sync::OnceLock;

static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();

/// The shared pool.
pub fn pool() -> &'static rayon::ThreadPool {
    POOL.get_or_init(|| {
        let n = std::env::var("TP_NUM_THREADS")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let builder = || {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(|i| format!("tensorplay-{i}"))
        };
        // A one-thread pool keeps its own worker: were the caller worker 0, calls from any
        // other thread would wait for a worker that never looks for work. A caller already in
        // another rayon pool cannot join ours; it gets a pool of its own threads.
        let joined = (n >= 2)
            .then(|| builder().use_current_thread().build().ok())
            .flatten();
        joined.unwrap_or_else(|| {
            builder()
                .build()
                .expect("failed to start the TensorPlay thread pool")
        })
    })
}

/// Number of threads in the shared pool.
pub fn num_threads() -> usize {
    pool().current_num_threads()
}
