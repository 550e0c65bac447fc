//! What identifies one cached answer: the scenario, the handler and the
//! `RequestId`, kept inline when short.

use bytes::Bytes;

use crate::scenario::Handler;

/// What identifies one answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    /// The scenario's [`Registered::id`](crate::scenario::registry::Registered::id).
    pub scenario: u32,
    /// The handler called.
    pub handler: Handler,
    /// `BaseRequest.RequestId`.
    pub request_id: RequestId,
}

impl Key {
    /// A key for one call.
    pub fn new(scenario: u32, handler: Handler, request_id: &str) -> Key {
        Key { scenario, handler, request_id: RequestId::new(request_id) }
    }

    pub(super) fn cost(&self, body: &Bytes) -> usize {
        // The body plus the key and the bookkeeping around them.
        body.len() + self.request_id.as_str().len() + 160
    }
}

/// RequestIds up to this many bytes are kept inside the key (a UUID has 36).
pub(super) const INLINE_ID: usize = 46;

/// A RequestId, inline when short: a key then costs no allocation, and
/// hashing or comparing an old entry's key on eviction reads no other memory.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// Up to [`INLINE_ID`] bytes, zero-padded.
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    /// Longer ones.
    Heap(Box<str>),
}

impl RequestId {
    /// `id` as a key part.
    pub fn new(id: &str) -> RequestId {
        if id.len() > INLINE_ID {
            return RequestId(Repr::Heap(id.into()));
        }
        let mut bytes = [0; INLINE_ID];
        bytes[..id.len()].copy_from_slice(id.as_bytes());
        RequestId(Repr::Inline { len: id.len() as u8, bytes })
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only `new` fills the bytes: a whole `str`, so always UTF-8.
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Repr::Heap(id) => id,
        }
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}
