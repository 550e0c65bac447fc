//! The `megamind-scenario` binary: see [`megamind_scenario::cli`].

// The idempotency cache keeps answers that another worker thread frees on
// eviction; glibc's malloc serialises those frees on the allocating thread's
// arena lock, jemalloc does not. Measured with the load benchmark: a `/run`
// of the demo costs about 15 % less server CPU.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long jemalloc keeps freed pages before giving them back to the
/// system, in ms (its default is 10 s).
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
const DECAY_MS: isize = 1_000;

/// Makes jemalloc give freed memory back within about a second, also while
/// the server is idle: its default purges only as threads allocate, so the
/// memory a burst of connections held stayed resident after they left.
/// Background threads purge on a timer. `_RJEM_MALLOC_CONF` (jemalloc's own
/// settings, e.g. `background_thread:false,dirty_decay_ms:10000`) overrides this.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
fn tune_allocator() {
    use tikv_jemalloc_ctl::{Access, AsName, arenas, background_thread};
    if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
        return;
    }
    // Arenas created from now on (one per worker thread, lazily) take the defaults...
    let _ = b"arenas.dirty_decay_ms\0".name().write(DECAY_MS);
    let _ = b"arenas.muzzy_decay_ms\0".name().write(0isize);
    // ...and those already in use are told one by one (uncreated ones refuse: ignored).
    for arena in 0..arenas::narenas::read().unwrap_or(0) {
        let _ = format!("arena.{arena}.dirty_decay_ms\0").as_bytes().name().write(DECAY_MS);
        let _ = format!("arena.{arena}.muzzy_decay_ms\0").as_bytes().name().write(0isize);
    }
    let _ = background_thread::write(true);
}

fn main() -> std::process::ExitCode {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    tune_allocator();
    match megamind_scenario::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("megamind-scenario: {}", megamind_scenario::cli::report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}
