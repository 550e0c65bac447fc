//! A Megamind scenario server: hosts scenarios behind the dialog
//! orchestrator over HTTP (binary protobuf, JSON, text format) and gRPC,
//! under the protocol's rules (300 ms budget, idempotency by `RequestId`,
//! overload answers, redacted logs).
//!
//! # Layout
//! - [`proto`]: generated protocol types and the descriptor pool.
//! - [`codec`]: binary, JSON and text format; our text printer; redaction.
//! - [`scenario`]: the `Scenario` trait, handlers, errors, the caller's
//!   tickets (`CallMeta`), the registry, what a scenario module registers.
//! - [`scenarios`]: the built-in scenarios, one module each (`demo`, ...).
//! - [`dispatch`]: the call pipeline behind every transport (authenticate,
//!   decode, cache lookup, run, encode, log); `Call`, `Reply`, `Refusal`.
//! - [`rules`]: budget, idempotency cache, overload, connection limits,
//!   logging, metrics.
//! - [`store`]: the single-flight store the idempotency cache and scenarios share.
//! - [`app`]: the server's shared state (`App`): dispatcher, limits, the
//!   routes scenarios registered, the drain signal (`Shutdown`).
//! - [`transport`]: the HTTP fast path, the router for every other HTTP
//!   request, and gRPC; each maps a `Refusal` once.
//! - [`server`]: the accept loop, connections, and graceful drain.
//! - [`config`] and [`cli`]: configuration and the command line; `cli` is
//!   the composition root, the one place that names the scenarios it hosts.
//! - [`upstream`]: outbound HTTP clients.
//! - [`text`]: text helpers (a byte bound that never splits a character).
//! - [`parts`]: JSON answers served whole or in parts from one snapshot
//!   (`?part=N`), for the `/llm/...` routes; the client that reassembles them.
//! - [`skills`]: multi-step `SKILL.md` skills: the catalog, the model's step
//!   markers, output cleaning, the command policy, the format's prompts.
//! - [`client`]: a protocol client that plays a scenario as Megamind does;
//!   [`dialog`], the command that plays it from the terminal, scripts or logs.
//!
//! Dependencies point one way: `server` → `transport` → `app` → `dispatch`
//! → `scenario`. `tests/it/modules.rs` checks that top-level modules form
//! no cycle and that core modules name no scenario.

pub mod app;
pub mod cli;
pub mod client;
pub mod codec;
pub mod config;
pub mod dialog;
pub mod dispatch;
pub mod jsonseq;
pub mod parts;
pub mod proto;
pub mod rules;
pub mod scenario;
pub mod scenarios;
pub mod server;
pub mod skills;
pub mod store;
pub mod text;
pub mod transport;
pub mod upstream;
