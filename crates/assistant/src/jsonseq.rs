//! JSONSeq v1 (the contract: docs/jsonseq.md): the event stream a screen
//! client renders an answer from — `serp_summary`, `thinking_start`,
//! `phase_start` / `phase_delta`, `thinking_end`, `final_delta`,
//! `serp_queries`, `final_end`, among the system events `status`,
//! `heartbeat`, `error`, `completed` — and its validator, and the mapping of
//! a model's output onto it:
//! - [`transcript`] reads an SSE transcript into events;
//! - [`validate()`] reports every violation of the contract's order
//!   (docs/jsonseq.md#order) and field rules (docs/jsonseq.md#fields) with
//!   the event's index and the rule;
//! - [`mapper`] turns the model's answer (ThinkingML, plain text or JSON
//!   Lines) and reasoning, streamed in pieces, into events that break no
//!   rule (docs/jsonseq.md#mapping-the-models-output);
//! - [`reading`] reads a model's answer once for the voice and the
//!   answers, through the mapper: its words apart from its thought.

pub mod mapper;
pub mod reading;
pub mod transcript;
pub mod validate;

pub use crate::jsonseq::{
    mapper::{Format, Mapper, SeqEvent, clean_queries},
    reading::{Reading, read},
    transcript::{Event, Transcript, parse_transcript, read_transcript},
    validate::{Violation, validate},
};
