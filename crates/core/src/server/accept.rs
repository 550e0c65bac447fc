//! The accept loop: one slot per open connection (`max_connections`, kept
//! below the process's file-descriptor limit); with none free the loop waits
//! and the kernel's listen backlog holds newcomers, so open connections keep
//! working, while idle ones (between requests) are closed a few at a time
//! to make room. A failed accept backs off instead of spinning.

use std::{future::Future, sync::Arc, task::Poll, time::Duration};

use tokio::{net::TcpListener, sync::Semaphore};

use super::{Routing, connections::Connections};
use crate::rules::metrics::ConnectionMetrics;

/// Idle connections closed at once for connections waiting for a slot,
/// again every [`RECLAIM_EVERY`] while they wait.
const RECLAIM_AT_ONCE: usize = 16;
const RECLAIM_EVERY: Duration = Duration::from_millis(100);

/// The first back-off after a failed accept; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A listener and what its connections route to.
pub(super) struct Bound {
    pub(super) listener: TcpListener,
    pub(super) routing: Arc<Routing>,
}

/// Listeners and the slots their connections take.
pub(super) struct Acceptor {
    pub(super) bound: Vec<Bound>,
    pub(super) slots: Arc<Semaphore>,
    pub(super) metrics: ConnectionMetrics,
}

impl Acceptor {
    /// Accepts connections on every listener and hands them to `connections` until `until` resolves.
    pub(super) async fn run_until(&self, until: impl Future<Output = ()>, connections: &Connections) {
        tokio::pin!(until);
        // Each round starts at the next listener, so a flood on one cannot starve another.
        let mut first = 0;
        let mut backoff = MIN_BACKOFF;
        loop {
            let slot = match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    self.metrics.waited.inc();
                    let acquired = self.slots.clone().acquire_owned();
                    tokio::pin!(acquired);
                    // Idle connections give way, a few at a time.
                    loop {
                        connections.reclaim_idle(RECLAIM_AT_ONCE);
                        tokio::select! {
                            () = &mut until => return,
                            slot = &mut acquired => break slot.expect("the slots are never closed"),
                            () = tokio::time::sleep(RECLAIM_EVERY) => {}
                        }
                    }
                }
            };
            first = (first + 1) % self.bound.len();
            let bound = &self.bound;
            let accept_any = std::future::poll_fn(|cx| {
                for at in (first..bound.len()).chain(0..first) {
                    if let Poll::Ready(accepted) = bound[at].listener.poll_accept(cx) {
                        return Poll::Ready((accepted, &bound[at].routing));
                    }
                }
                Poll::Pending
            });
            tokio::select! {
                () = &mut until => return,
                (accepted, routing) = accept_any => match accepted {
                    Ok((stream, peer)) => {
                        backoff = MIN_BACKOFF;
                        connections.serve(stream, peer, routing.clone(), slot);
                    }
                    Err(error) => {
                        // Out of file descriptors and the like: wait for some to
                        // be given back, serving the open connections meanwhile.
                        self.metrics.accept_errors.inc();
                        tracing::warn!(%error, backoff_ms = backoff.as_millis() as u64, "accept failed; backing off");
                        tokio::select! {
                            () = &mut until => return,
                            () = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                },
            }
        }
    }
}

/// `configured`, lowered to leave file descriptors for everything else the
/// process opens (model connections, files) when the limit on them is lower.
pub(super) fn connection_cap(configured: usize) -> usize {
    match open_files_limit() {
        Some(limit) => {
            let room = limit.saturating_sub((limit / 8).max(64)).max(1);
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            if room < configured {
                tracing::warn!(
                    max_connections = configured,
                    open_files_limit = limit,
                    using = room,
                    "max_connections lowered to fit the open-files limit (ulimit -n)"
                );
            }
            configured.min(room)
        }
        None => configured,
    }
}

#[cfg(unix)]
fn open_files_limit() -> Option<u64> {
    rlimit::getrlimit(rlimit::Resource::NOFILE).ok().map(|(soft, _)| soft)
}

#[cfg(not(unix))]
fn open_files_limit() -> Option<u64> {
    None
}

/// Raises the soft open-files limit to the hard one, as the server may hold
/// `max_connections` sockets; returns the limit now in force.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rlimit::increase_nofile_limit(u64::MAX).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}
