//! The `megamind-scenario` binary: see [`megamind_scenario::cli`].

// The idempotency cache keeps answers that another worker thread frees on
// eviction; glibc's malloc serialises those frees on the allocating thread's
// arena lock, jemalloc does not. Measured with the load benchmark: a `/run`
// of the demo costs about 15 % less server CPU.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::io::Write;

fn main() -> std::process::ExitCode {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    megamind_scenario::allocator::tune();
    match megamind_scenario::cli::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Not `eprintln!`, which panics (exit 101) on a closed stderr.
            let _ = writeln!(std::io::stderr(), "megamind-scenario: {}", megamind_scenario::cli::report(&error));
            std::process::ExitCode::FAILURE
        }
    }
}
