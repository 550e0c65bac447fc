//! The core of a Megamind scenario server: the protocol and its codecs, one
//! dispatch pipeline under the protocol's rules (300 ms budget, idempotency
//! by `RequestId`, overload answers, redacted logs), the transports (HTTP,
//! gRPC), the server, and the SDK a scenario is written against. It knows
//! no scenario: scenarios are registered by the binary that composes them.
//!
//! # Layout
//! - [`proto`]: generated protocol types and the descriptor pool.
//! - [`codec`]: binary, JSON and text format; our text printer; redaction.
//! - [`scenario`]: the scenario SDK: the `Scenario` trait, handlers, errors,
//!   the caller's tickets (`CallMeta`), the registry, what a scenario
//!   module registers (`Setup`), the drain signal (`Shutdown`).
//! - [`dispatch`]: the call pipeline behind every transport (authenticate,
//!   decode, cache lookup, run, encode, log); `Call`, `Reply`, `Refusal`.
//! - [`rules`]: budget, idempotency cache, overload, connection limits,
//!   logging, metrics.
//! - [`store`]: the single-flight store the idempotency cache and scenarios share.
//! - [`background`]: work a call leaves running after its answer, which a
//!   stopping server waits for.
//! - [`app`]: the server's shared state (`App`): dispatcher, limits, the
//!   routes scenarios registered.
//! - [`transport`]: the HTTP fast path, the router for every other HTTP
//!   request, and gRPC; each maps a `Refusal` once.
//! - [`server`]: the accept loop, connections, the lane for long-lived
//!   routes, and graceful drain.
//! - [`config`]: the server's configuration and the scenarios' tables.
//! - [`files`]: files the configuration names, read within a bound.
//! - [`http_client`]: outbound HTTP clients with one TLS setup.
//! - [`text`]: text helpers (a byte bound that never splits a character).
//!
//! Dependencies point one way: `server` → `transport` → `app` → `dispatch`
//! → `scenario`. The workspace's module test checks that no file imports
//! in a circle and that the core names no scenario.
//!
//! A scenario author needs the items re-exported here: implement
//! [`Scenario`] (and [`ScenarioModule`] to bring a configuration table,
//! flags, metrics and routes), then host it with the server binary.

pub mod app;
pub mod background;
pub mod codec;
pub mod config;
pub mod dispatch;
pub mod files;
pub mod http_client;
pub mod proto;
pub mod rules;
pub mod scenario;
pub mod server;
pub mod store;
pub mod text;
pub mod transport;

pub use scenario::{
    Answer, CallContext, CallMeta, Flag, Handler, Scenario, ScenarioError, ScenarioModule, ScenarioResult, Setup,
    SetupError, Shutdown, module::parse_table,
};
