//! The `megamind-scenario` server: the core (`megamind-core`) hosting the
//! built-in scenarios — `demo` and the assistant (`megamind-assistant`) —
//! with the tools (`megamind-tools`) as subcommands of one binary.
//!
//! # Layout
//! - [`cli`]: the command line, the composition root: `serve` (its
//!   configuration layered from defaults, file, environment, flags and
//!   `--set`), `convert`, `dialog`, `validate-jsonseq`.
//! - `allocator`: jemalloc's settings, with the `jemalloc` feature.
//! - [`scenarios`]: the scenarios `serve` hosts, one module each, and the
//!   one list of them.

// A closed standard output would make `println!` panic: print through `megamind_tools::stdout`.
#![cfg_attr(not(test), warn(clippy::print_stdout))]

#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
pub mod allocator;
pub mod cli;
pub mod scenarios;
