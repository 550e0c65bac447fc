//! jemalloc's settings for the server binary, which allocates with it
//! (`src/main.rs`): freed memory given back within about a second, and no
//! more background threads doing so than the server has worker threads.
//!
//! `_RJEM_MALLOC_CONF` (jemalloc's own settings, e.g.
//! `background_thread:false,dirty_decay_ms:10000`) overrides all of this.

use std::sync::atomic::{AtomicBool, Ordering};

use tikv_jemalloc_ctl::{Access, AsName, arenas, background_thread, max_background_threads};

/// How long jemalloc keeps freed pages before giving them back to the
/// system, in ms (its default is 10 s).
const DECAY_MS: isize = 1_000;

/// Set once [`tune`] has run: only then is jemalloc the allocator this
/// module speaks for (a program embedding the server may allocate with
/// another, and then jemalloc is left alone).
static TUNED: AtomicBool = AtomicBool::new(false);

/// Whether jemalloc's own settings were given in its environment variable.
fn configured_by_environment() -> bool {
    std::env::var_os("_RJEM_MALLOC_CONF").is_some()
}

/// Makes jemalloc give freed memory back within about a second, also while
/// the server is idle: its default purges only as threads allocate, so the
/// memory a burst of connections held stayed resident after they left.
/// Background threads purge on a timer. Call it first thing in `main` of a
/// binary whose global allocator is jemalloc.
pub fn tune() {
    if configured_by_environment() {
        return;
    }
    // Arenas created from now on (one per thread that allocates, lazily) take the defaults...
    let _ = b"arenas.dirty_decay_ms\0".name().write(DECAY_MS);
    let _ = b"arenas.muzzy_decay_ms\0".name().write(0isize);
    // ...and those already in use are told one by one (uncreated ones refuse: ignored).
    for arena in 0..arenas::narenas::read().unwrap_or(0) {
        let _ = format!("arena.{arena}.dirty_decay_ms\0").as_bytes().name().write(DECAY_MS);
        let _ = format!("arena.{arena}.muzzy_decay_ms\0").as_bytes().name().write(0isize);
    }
    let _ = background_thread::write(true);
    TUNED.store(true, Ordering::Release);
}

/// Runs at most `workers` background threads (at least one): jemalloc
/// starts four whatever the CPUs, which a replica limited to one core
/// would pay for in threads that purge beside its one worker.
pub fn fit_background_threads(workers: usize) {
    if !TUNED.load(Ordering::Acquire) {
        return;
    }
    let _ = max_background_threads::write(workers.max(1));
}
