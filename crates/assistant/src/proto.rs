//! The assistant's own protobuf messages (`proto/megamind_scenario/assistant.proto`:
//! its dialog state, handover arguments and stored call outcomes), generated
//! by `build.rs`, fenced off with relaxed lints. Their descriptors are in the
//! core's pool, so text format and JSON read them inside `Any` fields.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/_includes.rs"));
