//! Serving one connection: HTTP/1.1 or HTTP/2 (told apart by hyper-util's
//! `auto`), under a watchdog that enforces the header, idle and send
//! timeouts, and told to close as the server drains.
//!
//! Every connection task holds a receiver of the server's [`Stage`]; the
//! server knows all of them ended when the last receiver is dropped.

use std::{
    net::SocketAddr,
    num::NonZeroUsize,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use hyper::service::service_fn;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use prometheus::IntGauge;
use tokio::{
    net::TcpStream,
    runtime::Handle,
    sync::{Notify, OwnedSemaphorePermit, watch},
};
use tonic::codegen::Service;

use super::{
    Routing,
    activity::{Activity, Expiry, Timeouts, Watched, due},
    lane::{
        Lane, Prefixes, Sorted, answer,
        head::{self, Head},
    },
    route,
};
use crate::rules::{connections::ConnectionLimits, metrics::ConnectionMetrics};

/// Bytes an HTTP/2 stream may buffer of an answer its client does not read.
/// Our answers are small; hyper's default (400 KiB) lets a client that opens
/// streams and never reads them hold that much per stream.
const H2_SEND_BUFFER: usize = 16 * 1024;

/// The least an HTTP/2 header list may hold, whatever the HTTP/1.1 buffer:
/// HTTP/2's own usual bound (hyper's, and what gRPC clients expect), which
/// counts 32 bytes a header besides its name and value.
const MIN_H2_HEADER_LIST: usize = 16 * 1024;

/// Where the server is in its life; connections act on each change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Serving.
    Serving,
    /// Shutting down but still serving: HTTP/2 clients get a GOAWAY,
    /// HTTP/1.1 answers say `Connection: close`.
    Draining,
    /// Not accepting: every connection closes once its requests are answered.
    Closing,
    /// The drain timed out: connections still open are dropped.
    Cut,
}

/// How connections are served, and the handle that ends them.
pub(super) struct Connections {
    setup: Arc<Setup>,
    stage: watch::Sender<Stage>,
    /// Where stream connections go, when they have a lane of their own,
    /// and the request lines that send them there.
    lane: Option<(Lane, Prefixes)>,
}

/// What serving a connection takes, shared by all of them.
struct Setup {
    builder: auto::Builder<TokioExecutor>,
    /// A connection told to close when idle has the send timeout to do so.
    timeouts: Timeouts,
    metrics: ConnectionMetrics,
    /// Requests open on every connection, from their head until their answer is all handed over.
    open: Arc<AtomicUsize>,
    max_open: usize,
    /// The longest request head the stream lane reads before handing it to hyper.
    head_limit: usize,
    /// Idle connections wanted closed, for connections waiting at
    /// `max_connections`.
    reclaim: Reclaim,
}

/// How long a connection must have been idle to give way: one that has
/// just answered is the likeliest to get its next request now, which
/// would meet the connection closing.
const RECLAIM_IDLE_MS: u64 = 1_000;

/// Idle connections to close so that connections waiting for a slot get
/// one: else a server at `max_connections` whose connections sit idle
/// between requests (a client's pool, or someone holding slots) keeps
/// every newcomer waiting up to the idle timeout.
#[derive(Default)]
struct Reclaim {
    /// How many more idle connections are to close.
    wanted: AtomicUsize,
    /// Wakes the connections to look.
    look: Notify,
}

impl Reclaim {
    /// Takes one of the closings wanted, if any is left.
    fn take(&self) -> bool {
        self.wanted.fetch_update(Ordering::AcqRel, Ordering::Acquire, |wanted| wanted.checked_sub(1)).is_ok()
    }
}

/// An accepted connection, before it is served.
struct Accepted {
    stream: TcpStream,
    /// When it was accepted: its first request head is due a header
    /// timeout after, however long sorting it took.
    opened: std::time::Instant,
    peer: SocketAddr,
    routing: Arc<Routing>,
    slot: Slot,
    stage: watch::Receiver<Stage>,
    setup: Arc<Setup>,
}

/// A connection's place under `max_connections`, counted open while held.
struct Slot {
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Slot {
    fn new(permit: OwnedSemaphorePermit, open: &IntGauge) -> Slot {
        open.inc();
        Slot { _permit: permit, open: open.clone() }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Setup {
    /// The server closed the connection from `peer`, for `reason` (the metric label).
    fn closed(&self, peer: SocketAddr, reason: &str) {
        tracing::debug!(%peer, reason, "connection closed");
        self.metrics.closed.with_label_values(&[reason]).inc();
    }
}

impl Connections {
    /// Connections under `limits`; those opening with a `GET` of one of
    /// `lane_paths` go to the lane, when `limits` give it one.
    pub(super) fn new(
        limits: &ConnectionLimits,
        lane_paths: &[String],
        metrics: ConnectionMetrics,
    ) -> std::io::Result<Connections> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // A request's head is bounded by the configuration whichever
        // protocol carries it: an HTTP/2 header list as long as an HTTP/1.1
        // head may be, and no shorter than HTTP/2 clients expect.
        let max_head = u32::try_from(limits.http1_read_buffer.max(MIN_H2_HEADER_LIST)).unwrap_or(u32::MAX);
        builder
            .http2()
            .max_concurrent_streams(limits.h2_max_concurrent_streams)
            .max_send_buf_size(H2_SEND_BUFFER)
            .max_header_list_size(max_head);
        builder.http1().max_buf_size(limits.http1_read_buffer);
        let setup = Setup {
            builder,
            timeouts: Timeouts::new(limits.header_timeout, limits.idle_timeout, limits.send_timeout),
            metrics,
            open: Arc::default(),
            max_open: limits.max_open_requests,
            head_limit: limits.http1_read_buffer,
            reclaim: Reclaim::default(),
        };
        // The lane runs as many threads as the runtime serving calls, however
        // that was sized (`worker_threads`, one per CPU, TOKIO_WORKER_THREADS):
        // one count, resolved once.
        let main_threads = Handle::current().metrics().num_workers();
        let lane_threads = NonZeroUsize::new(main_threads).unwrap_or(NonZeroUsize::MIN);
        let lane = match (limits.stream_lane_nice, Prefixes::of(lane_paths)) {
            (Some(nice), prefixes) if !prefixes.is_empty() => Some((Lane::start(nice, lane_threads)?, prefixes)),
            _ => None,
        };
        let workers = [("main", main_threads), ("stream", lane.as_ref().map_or(0, |(lane, _)| lane.threads()))];
        for (name, threads) in workers {
            setup.metrics.threads.with_label_values(&[name]).set(i64::try_from(threads).unwrap_or(i64::MAX));
        }
        Ok(Connections { setup: Arc::new(setup), stage: watch::Sender::new(Stage::Serving), lane })
    }

    /// Has up to `count` idle connections closed (each between requests,
    /// told to close as at the idle timeout): connections wait for a slot.
    pub(super) fn reclaim_idle(&self, count: usize) {
        self.setup.reclaim.wanted.store(count, Ordering::Release);
        self.setup.reclaim.look.notify_waiters();
    }

    /// Moves every connection, open or to come, to `stage`.
    pub(super) fn enter(&self, stage: Stage) {
        self.stage.send_replace(stage);
    }

    /// Resolves once every connection task has ended.
    pub(super) async fn closed(&self) {
        self.stage.closed().await;
    }

    /// Serves `stream` on a task of its own, holding `slot` while it is
    /// open: on the stream lane when it opens with a stream request.
    pub(super) fn serve(&self, stream: TcpStream, peer: SocketAddr, routing: Arc<Routing>, slot: OwnedSemaphorePermit) {
        // Small protobuf answers must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        let lane = self.lane.as_ref().filter(|_| !routing.grpc_only);
        let lane = lane.map(|(lane, prefixes)| (lane.handle().clone(), prefixes.clone()));
        let slot = Slot::new(slot, &self.setup.metrics.open);
        let (opened, stage, setup) = (std::time::Instant::now(), self.stage.subscribe(), self.setup.clone());
        let accepted = Accepted { stream, opened, peer, routing, slot, stage, setup };
        let Some(lane) = lane else {
            tokio::spawn(accepted.serve("main", Bytes::new()));
            return;
        };
        tokio::spawn(accepted.sort_into(lane));
    }
}

impl Accepted {
    /// Serves the connection on the main runtime or on `lane`, as its first
    /// bytes say; a connection that sends none within the header timeout, or
    /// is still silent as the server closes, is dropped.
    async fn sort_into(mut self, (lane, prefixes): (Handle, Prefixes)) {
        let within = Duration::from_millis(self.setup.timeouts.header);
        let closing = self.stage.wait_for(|stage| matches!(stage, Stage::Closing | Stage::Cut));
        let sorted = tokio::select! {
            sorted = prefixes.sort_connection(&self.stream, within) => sorted,
            _ = closing => return,
        };
        match sorted {
            Sorted::Main => self.serve("main", Bytes::new()).await,
            Sorted::Stream => self.move_to(&lane),
            Sorted::Silent => self.setup.closed(self.peer, Expiry::Header.as_str()),
            Sorted::Gone => {}
        }
    }

    /// Serves the connection on `lane`, registered with the lane's own I/O driver.
    fn move_to(self, lane: &Handle) {
        let Accepted { stream, opened, peer, routing, slot, stage, setup } = self;
        let lost =
            move |error: std::io::Error| tracing::debug!(%peer, %error, "connection lost moving to the stream lane");
        match stream.into_std() {
            Ok(stream) => {
                lane.spawn(async move {
                    match TcpStream::from_std(stream) {
                        Ok(stream) => {
                            Accepted { stream, opened, peer, routing, slot, stage, setup }.serve_stream().await
                        }
                        Err(error) => lost(error),
                    }
                });
            }
            Err(error) => lost(error),
        }
    }

    /// Serves a stream lane's connection: its first request answered in the
    /// lane and the connection closed when it is a plain `GET`
    /// ([`head::Head::Lean`]), everything else by hyper.
    async fn serve_stream(self) {
        let Accepted { stream, opened, peer, routing, slot, mut stage, setup } = self;
        // A lean stream is no request the server-wide bound on open ones
        // counts (that bound holds HTTP/2 clients that read no answer to
        // a stream a connection): streams are long by design, bounded by
        // their own cap, and counted there they would leave every HTTP/2
        // client one stream a connection once as many screens follow.
        let activity = Activity::new(Arc::default(), opened);
        let mut io = Watched::new(stream, activity.clone());
        let (timeouts, metrics) = (setup.timeouts, &setup.metrics);
        let closing = |stage: &Stage| matches!(stage, Stage::Closing | Stage::Cut);
        let read = tokio::select! {
            read = head::read_head(&mut io, setup.head_limit) => read,
            expiry = watchdog(&activity, timeouts, None) => return setup.closed(peer, expiry.as_str()),
            _ = stage.wait_for(closing) => return,
        };
        let request = match read {
            Ok(Some(Head::Lean(request))) => request,
            Ok(Some(Head::Other(read))) => {
                let stream = io.into_inner();
                let accepted = Accepted { stream, opened, peer, routing, slot, stage, setup };
                // Boxed: a lean stream's task is not sized for hyper's connection.
                return Box::pin(accepted.serve("stream", read)).await;
            }
            Ok(None) => return,
            Err(error) => return tracing::debug!(%peer, %error, "connection lost reading a head"),
        };
        metrics.served.with_label_values(&["stream"]).inc();
        let _slot = slot;
        let mut stream = io.into_inner();
        let (mut reader, writer) = stream.split();
        let mut writer = Watched::new(writer, activity.clone());
        let in_flight = activity.begin();
        let answering = async {
            let Ok(response) = routing.router.clone().call(request.map(|()| axum::body::Body::empty())).await;
            answer::write_answer(&mut writer, response.map(|body| in_flight.answer(body))).await
        };
        let ended = tokio::select! {
            // Noticed now, not at the next event's write: its call's memory is let go.
            () = head::gone(&mut reader) => None,
            written = answering => match written {
                Ok(()) => None,
                Err(error) => {
                    tracing::debug!(%peer, %error, "stream connection ended with an error");
                    None
                }
            },
            // After the answer, the idle timeout bounds its last bytes' sending.
            expiry = watchdog(&activity, timeouts, None) => Some(expiry.as_str()),
            _ = stage.wait_for(|stage| *stage == Stage::Cut) => Some("drain_timeout"),
        };
        if let Some(reason) = ended {
            setup.closed(peer, reason);
        }
    }

    /// Serves the connection until it ends, on `lane` (for the metrics);
    /// `read`: bytes already read from it, which hyper reads first.
    async fn serve(self, lane: &'static str, read: Bytes) {
        let Accepted { stream, opened, peer, routing, slot, mut stage, setup } = self;
        let activity = Activity::new(setup.open.clone(), opened);
        let requests = activity.clone();
        let (max_open, refused) = (setup.max_open, setup.metrics.refused_streams.clone());
        let service = service_fn(move |request| {
            // An HTTP/2 client that reads no answer keeps each stream open
            // until the send timeout, and may open more on other connections:
            // past the server-wide bound, only its first stream on a
            // connection is served. HTTP/1.1 has one request open per
            // connection, which `max_connections` bounds.
            let crowded = requests.is_h2() && requests.crowded(max_open);
            let in_flight = (!crowded).then(|| requests.begin());
            if in_flight.is_none() {
                refused.inc();
            }
            let routing = routing.clone();
            // Boxed: hyper keeps an HTTP/2 stream's task, sized for its
            // future's largest state, until the answer is sent; a stalled
            // answer then holds a pointer, not room for a whole call.
            Box::pin(async move {
                let Some(in_flight) = in_flight else {
                    // The client may retry it: nothing was done.
                    return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
                };
                let Ok(response) = route(routing, request).await;
                Ok(response.map(|body| in_flight.answer(body)))
            })
        });
        let io = TokioIo::new(Watched::after(read, stream, activity.clone()));
        let connection = setup.builder.serve_connection(io, service).into_owned();
        let (timeouts, metrics) = (setup.timeouts, &setup.metrics);
        metrics.served.with_label_values(&[lane]).inc();
        let _slot = slot;
        tokio::pin!(connection);
        // When the connection was told to close, if it was (ms since it opened).
        let mut closing = None;
        let ended = loop {
            let now = *stage.borrow_and_update();
            let told = match now {
                Stage::Serving => false,
                Stage::Draining => activity.is_h2(),
                Stage::Closing => true,
                Stage::Cut => break Some("drain_timeout"),
            };
            if told && closing.is_none() {
                closing = Some(activity.now());
                connection.as_mut().graceful_shutdown();
            }
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                    break None;
                }
                expiry = watchdog(&activity, timeouts, closing) => match expiry {
                    Expiry::Idle => {
                        metrics.closed.with_label_values(&[expiry.as_str()]).inc();
                        closing = Some(activity.now());
                        connection.as_mut().graceful_shutdown();
                    }
                    Expiry::Gone => break None,
                    _ => break Some(expiry.as_str()),
                },
                changed = stage.changed() => if changed.is_err() {
                    break None;
                },
                () = setup.reclaim.look.notified(), if closing.is_none() => {
                    let now = activity.snapshot();
                    // HTTP/2's frames between streams (a ping, a window
                    // update) are no head on its way.
                    let idle = now.in_flight == 0 && now.sending == 0 && (now.head_since.is_none() || now.h2);
                    let idle_for = activity.now().saturating_sub(now.idle_since);
                    if idle && idle_for >= RECLAIM_IDLE_MS && setup.reclaim.take() {
                        metrics.closed.with_label_values(&["reclaimed"]).inc();
                        closing = Some(activity.now());
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        };
        if let Some(reason) = ended {
            setup.closed(peer, reason);
        }
    }
}

/// Resolves with the first timeout the connection overruns.
async fn watchdog(activity: &Activity, timeouts: Timeouts, closing: Option<u64>) -> Expiry {
    loop {
        match due(&activity.snapshot(), activity.now(), &timeouts, closing) {
            Ok(at) => tokio::time::sleep_until(activity.instant(at).into()).await,
            Err(expiry) => return expiry,
        }
    }
}
