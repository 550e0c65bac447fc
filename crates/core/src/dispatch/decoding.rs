//! Decoding bodies that may take long aside: even within the values limit
//! ([`crate::codec::depth::MAX_VALUES`]), a body of tens of thousands of
//! tiny values (a JSON list of numbers in `Experiments`) takes a good part
//! of a budget to parse, and parsed on a worker thread it would hold every
//! call queued behind it and answer past its budget. Small bodies, nearly every call, are decoded where they
//! arrive: a thread hop would cost them more than decoding.
//!
//! Larger ones go to the blocking pool, at most one per CPU at a time (a
//! flood of them takes that many threads, never the workers), and the call
//! answers `timeout` at its deadline whether or not the decode has ended.

use std::sync::Arc;

use bytes::Bytes;
use tokio::{sync::Semaphore, time::Instant};

use super::{BadRequest, Request, decode_request};
use crate::{codec::Format, scenario::Handler};

/// Largest binary body decoded where it arrives: at worst (tiny repeated
/// messages) a few milliseconds.
const INLINE_BINARY_BYTES: usize = 64 * 1024;
/// Largest JSON or text body decoded where it arrives: those formats cost
/// several times binary's per byte.
const INLINE_TEXT_BYTES: usize = 8 * 1024;

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

    /// Whether `body` is decoded where it arrives.
    pub(super) fn inline(body: &[u8], format: Format) -> bool {
        let limit = if format == Format::Binary { INLINE_BINARY_BYTES } else { INLINE_TEXT_BYTES };
        body.len() <= limit
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
