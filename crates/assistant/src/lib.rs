//! The assistant scenario: a voice assistant backed by a chat model (any
//! OpenAI-compatible server, or the embedded offline backend) that answers
//! in words, opens and closes apps on the client, runs multi-step skills,
//! and serves its answers to screens over the `/llm` API.
//!
//! # Layout
//! - [`module`]: the scenario module `serve` builds: its `[assistant]`
//!   table, flags, metrics and routes; [`config`] that table.
//! - [`assistant`]: the timing shell: starts a model call once, waits within
//!   the budget, hands over, holds with a callback past the window.
//! - [`backend`]: the model backend trait and its events; the
//!   OpenAI-compatible and offline backends, retries, breaker, warm-up.
//! - [`dialog`]: the dialog policy trait and the chat: prompt, answer,
//!   reply, speech, turn, state.
//! - [`skills`]: multi-step `SKILL.md` skills: catalog, markers, output,
//!   command rules, prompts, and their dialog policy.
//! - [`calls`]: the table of model calls in flight and their records.
//! - [`llm`]: the `/llm` routes, their schema and the JSONSeq stream.
//! - [`jsonseq`] and [`parts`]: the formats the `/llm` API speaks: JSONSeq
//!   v1 events, and JSON answers served whole or in parts.
//! - [`proto`]: the assistant's own protobuf messages.
//! - [`error`], [`metrics`] and `background` (work started where the
//!   scenario is built): shared by the wings.
//!
//! Dependencies point one way: the shell and the module use the wings;
//! wings use each other one way (`llm` → `calls` → `backend`, `skills` →
//! `dialog` → `backend`) and the crate's root modules, never the shell.

pub mod assistant;
pub mod backend;
mod background;
pub mod calls;
pub mod config;
pub mod dialog;
pub mod error;
pub mod jsonseq;
pub mod llm;
pub mod metrics;
pub mod module;
pub mod parts;
pub mod proto;
pub mod skills;

pub use assistant::Assistant;
pub use config::AssistantConfig;
pub use error::AssistantError;
pub use module::AssistantModule;
