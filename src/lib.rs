//! A Megamind scenario server: hosts scenarios behind the dialog
//! orchestrator over HTTP (binary protobuf, JSON, text format) and gRPC,
//! under the protocol's rules (300 ms budget, idempotency by `RequestId`,
//! overload answers, redacted logs).
//!
//! # Layout
//! - [`proto`]: generated protocol types and the descriptor pool.
//! - [`codec`]: binary, JSON and text format; our text printer; redaction.
//! - [`scenario`]: the `Scenario` trait, handlers, errors, the registry.
//! - [`scenarios`]: the built-in scenarios, one module each (`demo`, ...).
//! - [`dispatch`]: the one implementation behind every transport.
//! - [`rules`]: budget, idempotency cache, overload, logging, metrics.
//! - [`store`]: the single-flight store the idempotency cache and scenarios share.
//! - [`app`]: the server's shared state (`App`), built from the configuration.
//! - [`transport`]: HTTP and gRPC adapters onto the dispatcher.
//! - [`server`]: the accept loop, health, readiness and graceful drain.
//! - [`config`] and [`cli`]: configuration and the command line.
//! - [`upstream`]: outbound HTTP clients.

pub mod app;
pub mod cli;
pub mod codec;
pub mod config;
pub mod dispatch;
pub mod proto;
pub mod rules;
pub mod scenario;
pub mod scenarios;
pub mod server;
pub mod store;
pub mod transport;
pub mod upstream;
