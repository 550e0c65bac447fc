//! What identifies one entry: the scenario's name, the handler and the
//! `RequestId` (or another id the scenario chooses), short ones kept inline.

use std::{
    fmt,
    hash::{Hash, Hasher},
};

use crate::scenario::Handler;

/// What identifies one entry. The scenario is named, not numbered: a name is
/// the same in every replica and across deploys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The scenario's registered name.
    pub scenario: ScenarioName,
    /// The handler called.
    pub handler: Handler,
    /// `BaseRequest.RequestId`, or the id the scenario keys its own work by.
    pub request_id: RequestId,
}

impl Key {
    /// A key for one call.
    pub fn new(scenario: &str, handler: Handler, request_id: &str) -> Key {
        Key { scenario: ScenarioName(Inline::new(scenario)), handler, request_id: RequestId(Inline::new(request_id)) }
    }

    /// What keeping `value` under this key costs in memory: the value plus
    /// the key and the bookkeeping around them.
    pub fn cost(&self, value: &[u8]) -> usize {
        value.len() + self.request_id.0.as_bytes().len() + ENTRY_BYTES
    }
}

/// What one entry of the memory store takes besides its value and
/// `RequestId`: its slot with its key, the map's bucket, the eviction
/// queue's record, the tables' room to grow and its place on the shelf of
/// shared values. Counted by allocator (`tests/entry_cost.rs`, which fails
/// if entries ever take more): about 470 to 570 bytes on a 64-bit build, the
/// most just after the tables doubled; rounded up.
const ENTRY_BYTES: usize = 640;

/// `scenario/handler/request_id`: a shared store's key (a scenario name has
/// no `/`; the id may, and comes last).
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.scenario.as_str(), self.handler, self.request_id.as_str())
    }
}

/// A registered scenario name as a key part.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ScenarioName(Inline);

/// A `RequestId` as a key part.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Inline);

impl ScenarioName {
    /// The name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl RequestId {
    /// `id` as a key part.
    pub fn new(id: &str) -> RequestId {
        RequestId(Inline::new(id))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for ScenarioName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_str().fmt(f)
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_str().fmt(f)
    }
}

/// Strings up to this many bytes are kept inside the key (a UUID has 36).
const INLINE: usize = 46;

/// A string, inline when short: a key then costs no allocation, and hashing
/// or comparing an old entry's key on eviction reads no other memory.
#[derive(Clone, PartialEq, Eq)]
enum Inline {
    /// Up to [`INLINE`] bytes, zero-padded.
    Short { len: u8, bytes: [u8; INLINE] },
    /// Longer ones.
    Long(Box<str>),
}

impl Inline {
    fn new(text: &str) -> Inline {
        if text.len() > INLINE {
            return Inline::Long(text.into());
        }
        let mut bytes = [0; INLINE];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Inline::Short { len: text.len() as u8, bytes }
    }

    /// The text's bytes, read without checking them again as `as_str` does.
    fn as_bytes(&self) -> &[u8] {
        match self {
            Inline::Short { len, bytes } => &bytes[..usize::from(*len)],
            Inline::Long(text) => text.as_bytes(),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Only `new` fills the bytes: a whole `str`, so always UTF-8.
            Inline::Short { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Inline::Long(text) => text,
        }
    }
}

/// Hashes the text alone, not its padding, which would cost every call as
/// much again. Agrees with `Eq`: a string of up to [`INLINE`] bytes is
/// always `Short`, so equal texts are equal `Inline`s.
impl Hash for Inline {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(self.as_bytes());
        // As `str` does, so that the parts of a key cannot run into each other.
        state.write_u8(0xff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_parts_short_or_long() {
        let long = "x".repeat(INLINE + 1);
        for id in ["", "r-1", &"y".repeat(INLINE), &long] {
            let key = Key::new("assistant", Handler::Commit, id);
            assert_eq!(key.request_id.as_str(), id);
            assert_eq!(key.scenario.as_str(), "assistant");
            assert_eq!(key.to_string(), format!("assistant/commit/{id}"));
        }
        assert_ne!(Key::new("a", Handler::Run, "r"), Key::new("b", Handler::Run, "r"), "scenarios part keys");
        assert_ne!(Key::new("a", Handler::Run, "r"), Key::new("a", Handler::Commit, "r"), "so do handlers");
    }

    #[test]
    fn keys_hash_by_their_text() {
        let state = std::hash::RandomState::new();
        let hash_in = |key: &Key| std::hash::BuildHasher::hash_one(&state, key);
        let long = "z".repeat(INLINE + 1);
        for id in ["r-1", long.as_str()] {
            assert_eq!(hash_in(&Key::new("demo", Handler::Run, id)), hash_in(&Key::new("demo", Handler::Run, id)));
        }
        assert_ne!(
            hash_in(&Key::new("ab", Handler::Run, "c")),
            hash_in(&Key::new("a", Handler::Run, "bc")),
            "the parts do not run into each other"
        );
    }
}
