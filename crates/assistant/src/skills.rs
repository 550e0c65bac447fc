//! Multi-step skills (the skills format: docs/skills.md): `SKILL.md` files
//! run by the model one step per turn: the catalog, the model's step
//! markers, command output cleaning, the command rules and the format's
//! prompts, with no I/O beyond reading the skills folder; and [`dialog`],
//! the dialog policy that runs them on Megamind's turns.
//!
//! # Layout
//! - [`catalog`]: `SKILL.md` parsing and the folder loader (`Catalog::load`),
//!   lookups by name, by closest name and by trigger phrase.
//! - [`markers`]: the model's answer as a [`markers::Step`] (docs/skills.md#markers).
//! - [`output`]: a command's output cleaned and capped for the model
//!   (docs/skills.md#command-output).
//! - [`rules`]: the command rules, whatever the model says: deny rules,
//!   then a read-only list and the skill's `allowed-tools` for what runs by
//!   itself; everything else asks.
//! - [`dialog`]: the skills dialog policy, around the chat; [`config`] its
//!   section of `[assistant]`.
//! - [`prompt`]: the format's system prompt and user messages, byte for byte
//!   (docs/skills.md#prompts).
//!
//! Invariant: no function here panics on any input, and every result is
//! bounded (file sizes, skill count, output bytes, command length).

pub mod catalog;
pub mod config;
pub mod dialog;
pub mod markers;
pub mod output;
pub mod prompt;
pub mod rules;

/// The most steps a skill session runs: the 100 of `[Step N of 100]`.
pub const MAX_STEPS: u32 = 100;
