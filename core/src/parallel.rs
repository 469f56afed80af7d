//! The one persistent thread pool every parallel kernel runs on.
//!
//! `TP_NUM_THREADS` sets its size (default: all cores), read once when the pool starts.

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
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("tensorplay-{i}"))
            .build()
            .expect("failed to start the TensorPlay thread pool")
    })
}

/// Number of threads in the shared pool.
pub fn num_threads() -> usize {
    pool().current_num_threads()
}
