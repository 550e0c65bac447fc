//! One entry of a model call's journal in a small binary form: a kind
//! byte, then (but for the start and the cut) the µs into the call it came
//! at as a little-endian u32, then its payload: the text of a piece, the
//! reason of a finish or a failure, two u64 of usage. The first entry of a
//! run is its start on the runner's wall clock, so that a mirror's timings
//! say what the runner's do.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::backend::ModelEvent;

/// What the runner's record sends: an entry, and whether it is the last.
pub(crate) type Tap = mpsc::UnboundedSender<(Bytes, bool)>;

/// One entry of a call's journal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// The call started, at this many µs past the Unix epoch.
    Started { unix_us: u64 },
    /// The backend reported `event`, `at` into the call.
    Event { event: ModelEvent, at: Duration },
    /// The record stopped keeping text at its bound.
    Cut,
    /// The call answered, `at` into it.
    Completed { at: Duration },
    /// The call failed for `reason`, `at` into it.
    Failed { reason: String, at: Duration },
}

impl Entry {
    /// The start of a call beginning now.
    pub(crate) fn started_now() -> Bytes {
        Entry::Started { unix_us: unix_micros() }.encode()
    }

    pub(crate) fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(16);
        self.encode_into(&mut buf);
        buf.freeze()
    }

    /// Appends the entry's bytes to `buf`.
    pub(crate) fn encode_into(&self, buf: &mut impl BufMut) {
        fn at(buf: &mut impl BufMut, kind: u8, at: &Duration) {
            buf.put_u8(kind);
            buf.put_u32_le(u32::try_from(at.as_micros()).unwrap_or(u32::MAX));
        }
        match self {
            Entry::Started { unix_us } => {
                buf.put_u8(b'S');
                buf.put_u64_le(*unix_us);
            }
            Entry::Event { event, at: when } => match event {
                ModelEvent::TextDelta(text) => {
                    at(buf, b'T', when);
                    buf.put_slice(text.as_bytes());
                }
                ModelEvent::ReasoningDelta(text) => {
                    at(buf, b'R', when);
                    buf.put_slice(text.as_bytes());
                }
                ModelEvent::Finish { reason } => {
                    at(buf, b'F', when);
                    buf.put_slice(reason.as_bytes());
                }
                ModelEvent::Usage { prompt_tokens, completion_tokens } => {
                    at(buf, b'U', when);
                    buf.put_u64_le(*prompt_tokens);
                    buf.put_u64_le(*completion_tokens);
                }
            },
            Entry::Cut => buf.put_u8(b'C'),
            Entry::Completed { at: when } => at(buf, b'E', when),
            Entry::Failed { reason, at: when } => {
                at(buf, b'X', when);
                buf.put_slice(reason.as_bytes());
            }
        }
    }

    /// The entry `bytes` hold; `None` for bytes this version did not write.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Entry> {
        let (&kind, rest) = bytes.split_first()?;
        match kind {
            b'S' => Some(Entry::Started { unix_us: u64::from_le_bytes(rest.try_into().ok()?) }),
            b'C' => Some(Entry::Cut),
            _ => {
                let (at, payload) = rest.split_at_checked(4)?;
                let at = Duration::from_micros(u64::from(u32::from_le_bytes(at.try_into().ok()?)));
                let text = || std::str::from_utf8(payload).ok().map(str::to_owned);
                let event = |event| Some(Entry::Event { event, at });
                match kind {
                    b'T' => event(ModelEvent::TextDelta(text()?)),
                    b'R' => event(ModelEvent::ReasoningDelta(text()?)),
                    b'F' => event(ModelEvent::Finish { reason: text()? }),
                    b'U' => {
                        let (prompt, completion) = payload.split_at_checked(8)?;
                        event(ModelEvent::Usage {
                            prompt_tokens: u64::from_le_bytes(prompt.try_into().ok()?),
                            completion_tokens: u64::from_le_bytes(completion.try_into().ok()?),
                        })
                    }
                    b'E' => Some(Entry::Completed { at }),
                    b'X' => Some(Entry::Failed { reason: text()?, at }),
                    _ => None,
                }
            }
        }
    }
}

/// When the event (or the end) an entry's `bytes` hold came, without
/// reading the rest: `None` for a start, a cut or bytes this version did not
/// write.
pub(crate) fn at_of(bytes: &[u8]) -> Option<Duration> {
    match bytes.split_first()? {
        (b'T' | b'R' | b'F' | b'U' | b'E' | b'X', rest) => {
            let at = rest.first_chunk::<4>()?;
            Some(Duration::from_micros(u64::from(u32::from_le_bytes(*at))))
        }
        _ => None,
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The µs since the Unix epoch now, on this replica's clock.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_reads_back_as_written() {
        let at = Duration::from_micros(1_234_567);
        let entries = [
            Entry::Started { unix_us: 1_700_000_000_000_000 },
            Entry::Event { event: ModelEvent::TextDelta("Сейчас ".into()), at },
            Entry::Event { event: ModelEvent::ReasoningDelta("думаю".into()), at },
            Entry::Event { event: ModelEvent::Finish { reason: "stop".into() }, at },
            Entry::Event { event: ModelEvent::Usage { prompt_tokens: 12, completion_tokens: u64::MAX }, at },
            Entry::Cut,
            Entry::Completed { at },
            Entry::Failed { reason: "HTTP 503".into(), at },
        ];
        for entry in entries {
            assert_eq!(Entry::decode(&entry.encode()), Some(entry.clone()), "{entry:?}");
        }
        assert_eq!(Entry::Event { event: ModelEvent::TextDelta("ab".into()), at }.encode().len(), 7, "compact");
    }

    #[test]
    fn bytes_it_did_not_write_read_as_nothing() {
        for bytes in [&b""[..], b"S123", b"T\x01", b"Q\0\0\0\0", b"T\0\0\0\0\xff", b"U\0\0\0\0\x01"] {
            assert_eq!(Entry::decode(bytes), None, "{bytes:?}");
        }
    }
}
