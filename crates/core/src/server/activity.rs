//! What one connection is doing, for its watchdog: requests in flight,
//! answers being sent, when the last request ended and when bytes last moved.
//! [`Watched`] wraps the socket, [`InFlight`] follows a request from its head
//! to the end of its answer ([`Tracked`] body), and [`due`] says what the
//! connection's timeouts make of it.
//!
//! Times are milliseconds since the connection opened, in atomics: the
//! socket and the requests update them, the watchdog task reads them.

use std::{
    collections::HashMap,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface, by which an HTTP/2 connection is told apart.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The timeouts the watchdog enforces, in ms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) header: u64,
    pub(crate) idle: u64,
    pub(crate) send: u64,
}

impl Timeouts {
    pub(crate) fn new(header: Duration, idle: Duration, send: Duration) -> Timeouts {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1);
        Timeouts { header: ms(header), idle: ms(idle), send: ms(send) }
    }
}

/// Which timeout closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A request head took too long to arrive.
    Header,
    /// No request for the idle timeout.
    Idle,
    /// Answers waited for the client to read them, with no byte written.
    Send,
    /// Told to close (a GOAWAY sent), the connection stayed idle for the
    /// send timeout without its client closing it: HTTP/2 waits for the
    /// answer to its shutdown ping for ever. Closed without a reason of
    /// its own, since the one it was told to close for is counted.
    Gone,
}

impl Expiry {
    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Expiry::Header => "header_timeout",
            Expiry::Idle => "idle_timeout",
            Expiry::Send => "send_timeout",
            Expiry::Gone => "gone",
        }
    }
}

/// One connection's activity.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    /// Requests from their head to the end of their answer.
    in_flight: AtomicUsize,
    /// Answers given whose body is not yet all handed over.
    sending: AtomicUsize,
    /// When the last request ended (or the connection opened).
    idle_since: AtomicU64,
    /// One more than when the first byte arrived with no request in flight; 0: none.
    head_since: AtomicU64,
    /// When an answer was last given or a byte last written while one was pending.
    progress: AtomicU64,
    /// HTTP/2's answers with bytes for the client, each with when it last
    /// handed a frame over. A connection's writes are no progress of theirs:
    /// pings and other streams' bytes are written while one stream's
    /// client keeps its window shut, so each answer keeps its own clock.
    stalls: Mutex<HashMap<u64, u64>>,
    /// The number of the next request, naming it in `stalls`.
    next_request: AtomicU64,
    h2: AtomicBool,
    /// Requests open on every connection of the server.
    open: Arc<AtomicUsize>,
}

/// The watchdog's view of an [`Activity`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Snapshot {
    pub(crate) in_flight: usize,
    pub(crate) sending: usize,
    pub(crate) idle_since: u64,
    pub(crate) head_since: Option<u64>,
    pub(crate) progress: u64,
    pub(crate) h2: bool,
}

impl Activity {
    /// A new connection's; `open` counts the requests of all of the server's.
    /// A connection accepted at `opened`.
    pub(crate) fn new(open: Arc<AtomicUsize>, opened: Instant) -> Arc<Activity> {
        Arc::new(Activity {
            opened,
            in_flight: AtomicUsize::new(0),
            sending: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            // A new connection owes its first request head within the header timeout.
            head_since: AtomicU64::new(1),
            progress: AtomicU64::new(0),
            stalls: Mutex::default(),
            next_request: AtomicU64::new(0),
            h2: AtomicBool::new(false),
            open,
        })
    }

    /// Milliseconds since the connection opened.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When `at` (ms since the connection opened) falls.
    pub(crate) fn instant(&self, at: u64) -> Instant {
        self.opened + Duration::from_millis(at)
    }

    /// Whether the connection speaks HTTP/2.
    pub(crate) fn is_h2(&self) -> bool {
        self.h2.load(SeqCst)
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        // `in_flight` first: a request that ends stores `idle_since` before
        // it lowers the count, so a count of 0 comes with a fresh `idle_since`.
        let in_flight = self.in_flight.load(SeqCst);
        let h2 = self.h2.load(SeqCst);
        let progress = self.progress.load(SeqCst);
        let oldest = || self.stalls().values().min().copied();
        Snapshot {
            in_flight,
            sending: self.sending.load(SeqCst),
            idle_since: self.idle_since.load(SeqCst),
            head_since: self.head_since.load(SeqCst).checked_sub(1),
            progress: if h2 { oldest().unwrap_or(progress) } else { progress },
            h2,
        }
    }

    fn stalls(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        // Held for one map operation, never across an await.
        self.stalls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this connection has a request open while the server has
    /// `bound` or more open in all.
    pub(crate) fn crowded(&self, bound: usize) -> bool {
        self.in_flight.load(SeqCst) > 0 && self.open.load(SeqCst) >= bound
    }

    /// A request's head has arrived.
    pub(crate) fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, SeqCst);
        self.open.fetch_add(1, SeqCst);
        self.head_since.store(0, SeqCst);
        let id = self.next_request.fetch_add(1, SeqCst);
        InFlight { activity: self.clone(), answering: false, id }
    }

    /// Bytes arrived; `h2`: what they decided of the protocol, if they did.
    fn read(&self, h2: Option<bool>) {
        if let Some(h2) = h2 {
            self.h2.store(h2, SeqCst);
        }
        if self.in_flight.load(SeqCst) == 0 && self.head_since.load(SeqCst) == 0 {
            self.head_since.store(self.now() + 1, SeqCst);
        }
    }

    fn wrote(&self) {
        if self.sending.load(SeqCst) > 0 {
            self.progress.store(self.now(), SeqCst);
        }
    }
}

/// When the connection's next timeout falls due (ms since it opened), or the
/// one that has. `closing`: when the connection was told to close when idle
/// (ms since it opened): the idle timeout no longer applies, and once idle
/// it has the send timeout to be gone.
pub(crate) fn due(s: &Snapshot, now: u64, limits: &Timeouts, closing: Option<u64>) -> Result<u64, Expiry> {
    // Whatever the state, look again after the shortest timeout: a state
    // change may bring a deadline closer than the one computed now.
    let recheck = now.saturating_add(limits.header.min(limits.idle).min(limits.send));
    let (at, expiry) = if s.sending > 0 {
        (s.progress.saturating_add(limits.send), Expiry::Send)
    } else if s.in_flight > 0 {
        // A call runs: its own deadline bounds it.
        return Ok(recheck);
    } else if let (Some(head), false) = (s.head_since, s.h2) {
        // HTTP/2 reads pings and settings between requests: only HTTP/1
        // bytes start a request head.
        (head.saturating_add(limits.header), Expiry::Header)
    } else if let Some(told) = closing {
        (s.idle_since.max(told).saturating_add(limits.send), Expiry::Gone)
    } else {
        (s.idle_since.saturating_add(limits.idle), Expiry::Idle)
    };
    if now >= at { Err(expiry) } else { Ok(at.min(recheck)) }
}

/// A request from its head to the end of its answer.
#[derive(Debug)]
pub(crate) struct InFlight {
    activity: Arc<Activity>,
    /// Counted in `sending`: its answer has bytes for the client.
    answering: bool,
    /// Its name in the connection's `stalls`.
    id: u64,
}

impl InFlight {
    /// The answer is given: follow its body until it is all handed over.
    pub(crate) fn answer<B>(mut self, body: B) -> Tracked<B> {
        self.sending(true);
        Tracked { body, in_flight: Some(self), rest: Bytes::new() }
    }

    /// Whether the answer has bytes for the client, or waits for its body's
    /// next frame: a stream with nothing to say keeps no send clock running.
    fn sending(&mut self, sending: bool) {
        if sending == self.answering {
            return;
        }
        self.answering = sending;
        let activity = &self.activity;
        if sending {
            activity.progress.store(activity.now(), SeqCst);
            activity.sending.fetch_add(1, SeqCst);
            self.handed();
        } else {
            activity.sending.fetch_sub(1, SeqCst);
            self.unstalled();
        }
    }

    /// The answer handed a frame over.
    fn handed_frame(&mut self) {
        if self.answering { self.handed() } else { self.sending(true) }
    }

    /// Over HTTP/2, the answer's own clock starts again.
    fn handed(&self) {
        let activity = &self.activity;
        if self.answering && activity.is_h2() {
            activity.stalls().insert(self.id, activity.now());
        }
    }

    fn unstalled(&self) {
        if self.activity.is_h2() {
            self.activity.stalls().remove(&self.id);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.activity;
        if self.answering {
            activity.sending.fetch_sub(1, SeqCst);
            self.unstalled();
        }
        activity.idle_since.store(activity.now(), SeqCst);
        activity.in_flight.fetch_sub(1, SeqCst);
        activity.open.fetch_sub(1, SeqCst);
    }
}

/// The most of an answer handed to the connection at once. A whole answer
/// handed over in one frame would leave the request ended while the
/// connection still holds all of it for a client that reads nothing: the
/// send timeout would not run, and the connection would keep those bytes
/// until its idle timeout. In frames of this size, hyper asks for the next
/// one only once the one before is written (HTTP/1.1) or the client's
/// window has room (HTTP/2), so the send timeout runs while the client
/// leaves the rest unread.
const MAX_FRAME: usize = 64 * 1024;

/// An answer body that ends its request's [`InFlight`] when it is done or
/// dropped, in frames of [`MAX_FRAME`] bytes at most. While it waits for its
/// next frame, its answer does not count as sending: hyper (or the stream
/// lane) asks for a frame once the ones before are buffered or written, so
/// the send timeout runs only while the client has yet to take bytes.
#[derive(Debug)]
pub(crate) struct Tracked<B> {
    body: B,
    in_flight: Option<InFlight>,
    /// What is left of a frame longer than [`MAX_FRAME`].
    rest: Bytes,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Tracked<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if !self.rest.is_empty() {
            let n = self.rest.len().min(MAX_FRAME);
            let data = self.rest.split_to(n);
            if let Some(in_flight) = self.in_flight.as_mut() {
                in_flight.handed_frame();
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let mut frame = Pin::new(&mut self.body).poll_frame(cx);
        match (&mut frame, self.in_flight.as_mut()) {
            (Poll::Ready(None | Some(Err(_))), _) => self.in_flight = None,
            (Poll::Pending, Some(in_flight)) => in_flight.sending(false),
            (Poll::Ready(Some(Ok(frame))), in_flight) => {
                if let Some(in_flight) = in_flight {
                    in_flight.handed_frame();
                }
                if let Some(data) = frame.data_mut().filter(|data| data.len() > MAX_FRAME) {
                    self.rest = data.split_off(MAX_FRAME);
                }
            }
            (_, None) => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let (body, rest) = (self.body.size_hint(), u64::try_from(self.rest.len()).unwrap_or(u64::MAX));
        let mut hint = SizeHint::new();
        hint.set_lower(body.lower().saturating_add(rest));
        if let Some(upper) = body.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// A socket that reports reads and writes to its connection's [`Activity`].
#[derive(Debug)]
pub(crate) struct Watched<IO> {
    io: IO,
    activity: Arc<Activity>,
    /// Bytes of the HTTP/2 preface read so far, while they are all there is:
    /// `None` once the connection has shown which protocol it speaks.
    preface: Option<usize>,
    /// Bytes read from `io` before, read again first (the stream lane
    /// hands hyper a head it read and did not answer).
    read: Bytes,
}

impl<IO> Watched<IO> {
    pub(crate) fn new(io: IO, activity: Arc<Activity>) -> Watched<IO> {
        Watched::after(Bytes::new(), io, activity)
    }

    /// `io`, whose reads return `read` first.
    pub(crate) fn after(read: Bytes, io: IO, activity: Arc<Activity>) -> Watched<IO> {
        Watched { io, activity, preface: Some(0), read }
    }

    /// What `bytes`, read next, decide of the protocol: HTTP/2 once the
    /// whole preface has come (however many reads it took), HTTP/1 at the
    /// first byte that differs from it; nothing while a prefix of it is all
    /// there is. A lone `P` must not pass for HTTP/2, which the header
    /// timeout spares.
    fn sniff(&mut self, bytes: &[u8]) -> Option<bool> {
        let matched = self.preface?;
        let want = &H2_PREFACE[matched..];
        let n = bytes.len().min(want.len());
        let decided = if bytes[..n] != want[..n] {
            Some(false)
        } else if n == want.len() {
            Some(true)
        } else {
            self.preface = Some(matched + n);
            return None;
        };
        self.preface = None;
        decided
    }

    /// The socket, no longer watched.
    pub(crate) fn into_inner(self) -> IO {
        self.io
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = if self.read.is_empty() {
            Pin::new(&mut self.io).poll_read(cx, buf)
        } else {
            let n = self.read.len().min(buf.remaining());
            buf.put_slice(&self.read.split_to(n));
            Poll::Ready(Ok(()))
        };
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let h2 = self.sniff(&buf.filled()[before..]);
            self.activity.read(h2);
        }
        polled
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Timeouts = Timeouts { header: 100, idle: 1_000, send: 300 };

    #[test]
    fn a_new_connection_owes_a_request_head_within_the_header_timeout() {
        let fresh = Snapshot { head_since: Some(0), ..Snapshot::default() };
        assert_eq!(due(&fresh, 50, &LIMITS, None), Ok(100));
        assert_eq!(due(&fresh, 100, &LIMITS, None), Err(Expiry::Header));
        let h2 = Snapshot { h2: true, ..fresh };
        assert_eq!(due(&h2, 100, &LIMITS, None), Ok(200), "HTTP/2 goes by the idle timeout");
        assert_eq!(due(&h2, 1_000, &LIMITS, None), Err(Expiry::Idle));
    }

    #[test]
    fn an_idle_connection_closes_after_the_idle_timeout_unless_told_already() {
        let idle = Snapshot { idle_since: 500, ..Snapshot::default() };
        assert_eq!(due(&idle, 1_499, &LIMITS, None), Ok(1_500));
        assert_eq!(due(&idle, 1_500, &LIMITS, None), Err(Expiry::Idle));
        // Told at 1,400: gone by the send timeout after it.
        assert_eq!(due(&idle, 1_500, &LIMITS, Some(1_400)), Ok(1_600));
        assert_eq!(due(&idle, 1_700, &LIMITS, Some(1_400)), Err(Expiry::Gone));
        // Told while busy, idle since 2,000: the send timeout from then.
        let later = Snapshot { idle_since: 2_000, ..idle };
        assert_eq!(due(&later, 2_299, &LIMITS, Some(1_400)), Ok(2_300));
        assert_eq!(due(&later, 2_300, &LIMITS, Some(1_400)), Err(Expiry::Gone));
        let started = Snapshot { head_since: Some(1_400), ..idle };
        assert_eq!(due(&started, 1_500, &LIMITS, None), Err(Expiry::Header), "bytes of a head started the clock");
    }

    #[test]
    fn pending_answers_must_make_progress_and_running_calls_are_left_alone() {
        let stalled = Snapshot { in_flight: 3, sending: 2, progress: 1_000, ..Snapshot::default() };
        assert_eq!(due(&stalled, 1_200, &LIMITS, None), Ok(1_300));
        assert_eq!(due(&stalled, 1_300, &LIMITS, Some(0)), Err(Expiry::Send), "even while closing");
        let running_told = Snapshot { in_flight: 1, ..Snapshot::default() };
        assert_eq!(due(&running_told, 60_000, &LIMITS, Some(0)), Ok(60_100), "a call runs on while closing");
        let running = Snapshot { in_flight: 1, idle_since: 0, head_since: Some(0), ..Snapshot::default() };
        assert_eq!(due(&running, 60_000, &LIMITS, None), Ok(60_100));
    }

    #[test]
    fn requests_and_answers_move_the_clocks() {
        let activity = Activity::new(Arc::default(), Instant::now());
        activity.read(Some(true));
        assert!(activity.is_h2());
        let request = activity.begin();
        assert_eq!((activity.snapshot().in_flight, activity.snapshot().head_since), (1, None));
        let body = request.answer(http_body_util::Empty::<bytes::Bytes>::new());
        assert_eq!(activity.snapshot().sending, 1);
        drop(body);
        let after = activity.snapshot();
        assert_eq!((after.in_flight, after.sending), (0, 0));
        activity.read(None);
        assert!(activity.snapshot().head_since.is_some(), "bytes with no request in flight start a head");
        let plain = Activity::new(Arc::default(), Instant::now());
        plain.read(Some(false));
        assert!(!plain.is_h2());
    }

    /// Reads `reads` one after another through a [`Watched`] socket: whether
    /// its connection is taken for HTTP/2 after each.
    async fn h2_after(reads: &[&[u8]]) -> Vec<bool> {
        use tokio::io::AsyncReadExt;
        let activity = Activity::new(Arc::default(), Instant::now());
        let (mut client, server) = tokio::io::duplex(64);
        let mut watched = Watched::new(server, activity.clone());
        let mut seen = Vec::new();
        for read in reads {
            tokio::io::AsyncWriteExt::write_all(&mut client, read).await.unwrap();
            let mut buf = vec![0; read.len()];
            watched.read_exact(&mut buf).await.unwrap();
            seen.push(activity.is_h2());
        }
        seen
    }

    #[tokio::test]
    async fn only_the_whole_preface_makes_a_connection_http2() {
        assert_eq!(h2_after(&[b"P"]).await, [false], "a lone P is no preface");
        assert_eq!(h2_after(&[b"P", b"OST / HTTP/1.1\r\n"]).await, [false, false]);
        assert_eq!(h2_after(&[b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]).await, [true]);
        assert_eq!(h2_after(&[b"PRI * HT", b"TP/2.0\r\n\r\nSM", b"\r\n\r\n"]).await, [false, false, true]);
        assert_eq!(h2_after(&[b"PRI * HT", b"TP/1.1\r\n"]).await, [false, false]);
        // Decided, later bytes change nothing.
        assert_eq!(h2_after(&[b"GET / HTTP/1.1\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]).await, [false, false]);
    }

    #[test]
    fn a_body_waiting_for_its_next_frame_is_not_sending() {
        use http_body_util::StreamBody;

        let activity = Activity::new(Arc::default(), Instant::now());
        let (frames, mut rx) = tokio::sync::mpsc::unbounded_channel::<Result<Frame<bytes::Bytes>, io::Error>>();
        let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let mut body = activity.begin().answer(StreamBody::new(stream));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(activity.snapshot().sending, 1, "its head is for the client");
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_pending());
        assert_eq!((activity.snapshot().sending, activity.snapshot().in_flight), (0, 1), "a silent stream");
        frames.send(Ok(Frame::data(bytes::Bytes::from_static(b"event")))).unwrap();
        assert!(matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(Some(Ok(_)))));
        assert_eq!(activity.snapshot().sending, 1, "an event for the client");
        drop(frames);
        assert!(matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(None)));
        assert_eq!((activity.snapshot().sending, activity.snapshot().in_flight), (0, 0));
    }

    #[tokio::test]
    async fn a_long_answer_is_handed_over_a_frame_at_a_time() {
        use http_body_util::{BodyExt, Full};

        let activity = Activity::new(Arc::default(), Instant::now());
        let answer = Bytes::from((0..200 * 1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        let mut body = activity.begin().answer(Full::new(answer.clone()));
        assert_eq!(body.size_hint().exact(), Some(200 * 1024));
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            assert!(!body.is_end_stream() || frames.len() == 3, "ended early");
            frames.push(frame.unwrap().into_data().unwrap());
            let left = 200 * 1024 - frames.iter().map(Bytes::len).sum::<usize>();
            assert_eq!(body.size_hint().exact(), Some(left as u64), "the hint counts what is held back");
        }
        assert_eq!(frames.iter().map(Bytes::len).collect::<Vec<_>>(), [MAX_FRAME, MAX_FRAME, MAX_FRAME, 8 * 1024]);
        assert_eq!(frames.concat(), answer);
        assert_eq!(activity.snapshot().in_flight, 0);
    }

    #[tokio::test]
    async fn bytes_read_before_are_read_again_first() {
        use tokio::io::AsyncReadExt;

        let activity = Activity::new(Arc::default(), Instant::now());
        let mut io = Watched::after(Bytes::from_static(b"GET /ev"), &b"ents/r"[..], activity.clone());
        let mut first = [0u8; 4];
        io.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"GET ");
        let mut rest = String::new();
        io.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "/events/r");
        assert!(!activity.is_h2());
    }
}
