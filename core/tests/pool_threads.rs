//! The shared pool's threads (`tensorplay_core::parallel`): with two or more threads the thread
//! that starts the pool is its worker 0 and runs its parallel loops' first share inline; calls
//! from other threads are still served, also after the starting thread has exited.
//!
//! One test in its own binary: the pool is process-wide and starts once, so the test must be
//! the first (and only) thing in the process to touch it.

use rayon::prelude::*;
use tensorplay_core::parallel;

fn sum_in_pool() -> u64 {
    parallel::pool().install(|| (0..200_000u64).into_par_iter().map(|i| i * 3).sum())
}

#[test]
fn the_starting_thread_is_worker_zero_and_other_threads_are_still_served() {
    // SAFETY: nothing else in this process runs yet (one test per binary), so no thread reads
    // the environment concurrently.
    unsafe { std::env::set_var("TP_NUM_THREADS", "2") };
    let want: u64 = (0..200_000u64).map(|i| i * 3).sum();
    std::thread::spawn(move || {
        assert_eq!(parallel::num_threads(), 2);
        // The starter is worker 0: `install` runs inline on it, no hand-off.
        assert_eq!(
            parallel::pool().install(rayon::current_thread_index),
            Some(0)
        );
        assert_eq!(rayon::current_thread_index(), Some(0));
        assert_eq!(sum_in_pool(), want);
    })
    .join()
    .expect("the starting thread's parallel loop runs");
    // The starter has exited; this thread is not in the pool, so its calls are handed to the
    // other worker and must complete there.
    assert_eq!(rayon::current_thread_index(), None);
    assert_eq!(
        parallel::pool().install(rayon::current_thread_index),
        Some(1)
    );
    for _ in 0..50 {
        assert_eq!(sum_in_pool(), want);
    }
    // Several outside threads at once.
    let handles: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || (0..20).all(|_| sum_in_pool() == want)))
        .collect();
    for h in handles {
        assert!(h.join().expect("an outside thread's call completes"));
    }
}
