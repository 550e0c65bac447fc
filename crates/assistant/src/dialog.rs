//! The dialog: what a turn asks of the model and what its answer means.
//!
//! - [`policy`]: the dialog policy trait (which turns call the model, the
//!   messages, what the answer means) and the chat policy.
//! - [`prompt`]: the messages the model is sent.
//! - [`answer`]: the model's answer read as speech and at most one app command.
//! - [`callback`]: the callback contract: holding an answer past the window.
//! - [`reply`]: the protocol answers built from it.
//! - [`speech`]: what may be spoken of a text.
//! - [`turn`]: what the user brought to a turn.
//! - [`state`]: the dialog state carried between turns and handlers.

pub mod answer;
pub(crate) mod callback;
pub mod config;
pub(crate) mod policy;
pub mod prompt;
pub mod reply;
pub(crate) mod speech;
pub(crate) mod state;
pub(crate) mod turn;

#[cfg(feature = "fuzzing")]
pub use state::fuzz_read as fuzz_read_state;
