//! Decoding bodies that may take long aside: even within the values limits
//! ([`crate::codec::depth`]), a body of thousands of tiny values (a JSON
//! list of numbers in `Experiments`) takes tens of milliseconds to parse,
//! and parsed on a worker thread it would hold every call queued behind
//! it. Small bodies, nearly every call, are decoded where they arrive: a
//! thread hop would cost them more than decoding.
//!
//! Larger ones go to the blocking pool, at most one per CPU at a time (a
//! flood of them takes that many threads, never the workers), and the call
//! answers `timeout` at its deadline whether or not the decode has ended.

use std::sync::Arc;

use bytes::Bytes;
use tokio::{sync::Semaphore, time::Instant};

use super::{BadRequest, Request, decode_request};
use crate::{
    codec::{Format, depth},
    scenario::Handler,
};

/// Largest binary body decoded where it arrives: at worst (tiny repeated
/// messages) a few milliseconds.
const INLINE_BINARY_BYTES: usize = 64 * 1024;
/// Largest JSON or text body decoded where it arrives: those formats cost
/// several times binary's per byte.
const INLINE_TEXT_BYTES: usize = 8 * 1024;
/// Most values, counted once per level of nesting, of a JSON or text body
/// decoded where it arrives: a few milliseconds at worst. Values deep down
/// cost once per level above them, so a short body can cost more than
/// its bytes say.
const INLINE_TEXT_LEVELS: usize = 4 * 1024;

/// The bodies being decoded aside, bounded.
#[derive(Debug)]
pub(super) struct Decoding {
    slots: Arc<Semaphore>,
}

/// Why a body decoded aside has no request.
pub(super) enum Aside {
    /// The deadline came first (the decode goes on, holding its slot).
    TimedOut,
    /// The decoding thread failed.
    Failed(String),
}

impl Decoding {
    pub(super) fn new() -> Decoding {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Decoding { slots: Arc::new(Semaphore::new(cpus)) }
    }

    /// Whether `body` is decoded where it arrives. A body whose scan
    /// refuses it is: the decoder's own scan refuses it at once.
    pub(super) fn inline(body: &[u8], format: Format) -> bool {
        let small =
            |size: Result<depth::Size, depth::Shape>| size.map_or(true, |size| size.levels <= INLINE_TEXT_LEVELS);
        match format {
            Format::Binary => body.len() <= INLINE_BINARY_BYTES,
            Format::Json => body.len() <= INLINE_TEXT_BYTES && small(depth::check_json(body)),
            Format::Text => body.len() <= INLINE_TEXT_BYTES && small(depth::check_text(body)),
        }
    }

    /// Decodes `body` on the blocking pool once a slot is free, by `deadline`.
    pub(super) async fn decode(
        &self,
        handler: Handler,
        body: &Bytes,
        format: Format,
        deadline: Instant,
    ) -> Result<Result<Request, BadRequest>, Aside> {
        let slot = tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await;
        let Ok(Ok(slot)) = slot else { return Err(Aside::TimedOut) };
        let body = body.clone();
        let decoding = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            decode_request(handler, &body, format)
        });
        match tokio::time::timeout_at(deadline, decoding).await {
            Ok(Ok(decoded)) => Ok(decoded),
            Ok(Err(error)) => Err(Aside::Failed(error.to_string())),
            Err(_) => Err(Aside::TimedOut),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_bodies_are_decoded_aside_when_their_values_sit_deep() {
        let flat = format!("{{\"k\":[{}]}}", vec!["0"; 1_000].join(","));
        assert!(Decoding::inline(flat.as_bytes(), Format::Json), "a thousand values near the top");
        // Fewer values, forty levels down: some 8,000 counted once per level.
        let deep = format!("{}{}{}", "[".repeat(40), vec!["0"; 200].join(","), "]".repeat(40));
        assert!(deep.len() < INLINE_TEXT_BYTES);
        assert!(!Decoding::inline(deep.as_bytes(), Format::Json));
        let deep_text = format!("{}{}{}", "a{".repeat(40), "f: 1 ".repeat(200), "}".repeat(40));
        assert!(!Decoding::inline(deep_text.as_bytes(), Format::Text));
        assert!(Decoding::inline(b"BaseRequest { RequestId: \"r\" }", Format::Text));
        // Refused by the decoder's own scan at once: no thread hop for it.
        assert!(Decoding::inline("[".repeat(500).as_bytes(), Format::Json));
        assert!(!Decoding::inline(&vec![0; INLINE_TEXT_BYTES + 1], Format::Json));
        assert!(Decoding::inline(&vec![0; INLINE_TEXT_BYTES + 1], Format::Binary));
    }

    #[tokio::test]
    async fn a_body_past_the_slots_waits_for_one_and_answers_timeout_at_its_deadline() {
        let decoding = Decoding::new();
        let body = Bytes::from_static(b"{}");
        let soon = || Instant::now() + std::time::Duration::from_millis(50);
        // One slot a CPU; every slot taken, as by as many slow bodies: the next is not decoded.
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(decoding.slots.available_permits(), cpus);
        let slots = u32::try_from(cpus).unwrap();
        let held = decoding.slots.clone().acquire_many_owned(slots).await.unwrap();
        let waited = decoding.decode(Handler::Run, &body, Format::Json, soon()).await;
        assert!(matches!(waited, Err(Aside::TimedOut)), "decoded past the bound");
        // A slot given back: decoded (with time to spare on a busy machine).
        drop(held);
        let later = Instant::now() + std::time::Duration::from_secs(10);
        let decoded = decoding.decode(Handler::Run, &body, Format::Json, later).await;
        assert!(decoded.is_ok(), "not decoded with a slot free");
    }
}
