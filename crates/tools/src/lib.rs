//! Tools around a running scenario server, built into the server's binary
//! as subcommands and used by the tests.
//!
//! # Layout
//! - [`client`]: a protocol client that plays a scenario as Megamind does
//!   (run, then continue, commit or apply; `State` carried; callbacks followed).
//! - [`dialog`]: the `dialog` command: the client from the terminal, from
//!   YAML scripts with expectations, or replaying a server's debug log.
//! - [`convert`]: the `convert` command (binary, JSON and text format).
//! - [`validate_jsonseq`]: the `validate-jsonseq` command.
//! - [`stdout`]: where the commands print; a closed standard output ends
//!   them quietly.
//! - [`bounded`]: reading a whole file or stream under a bound.

// A closed standard output would make `println!` panic: print with `outln!`.
#![cfg_attr(not(test), warn(clippy::print_stdout))]

pub mod bounded;
pub mod client;
pub mod convert;
pub mod dialog;
pub mod stdout;
pub mod validate_jsonseq;
pub mod whole;
