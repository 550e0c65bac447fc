//! A TVM ticket the tools send: a secret, so a debug print of anything
//! that holds one (a client, `dialog`'s arguments) shows `<hidden>`.

use std::{convert::Infallible, fmt, str::FromStr};

use megamind_core::config::HIDDEN;

/// A service or user ticket, as given.
#[derive(Clone, PartialEq, Eq)]
pub struct Ticket(String);

impl Ticket {
    /// `text` as a ticket.
    pub fn new(text: impl Into<String>) -> Ticket {
        Ticket(text.into())
    }

    /// The ticket itself, for the header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HIDDEN)
    }
}

impl FromStr for Ticket {
    type Err = Infallible;

    fn from_str(text: &str) -> Result<Ticket, Infallible> {
        Ok(Ticket::new(text))
    }
}
