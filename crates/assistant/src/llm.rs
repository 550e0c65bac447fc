//! The `/llm` API for screen clients, beside the voice answer: a model
//! call's answer as a live JSONSeq stream or whole, the skills catalog, and
//! the API's own description.
//!
//! - [`kept`]: ended calls' whole answers, rendered once.
//! - [`render`]: renders of a whole record, run off the worker threads.
//! - [`routes`]: the routes the assistant registers.
//! - [`schema`]: what `GET /llm/schema` answers.
//! - [`stream`]: a model call's record as JSONSeq events.

pub mod config;
mod kept;
mod render;
pub(crate) mod routes;
pub(crate) mod schema;
pub mod stream;
