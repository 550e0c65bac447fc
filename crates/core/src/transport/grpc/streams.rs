//! The public streaming calls, bounded: health's `Watch` and reflection's
//! `ServerReflectionInfo` need no ticket and have no deadline of their own,
//! so a client could open them by the thousand and hold its connections
//! and the server's request slots forever. At most [`MAX_OPEN`] are open at
//! once (past that, `RESOURCE_EXHAUSTED`), and each ends with `UNAVAILABLE`
//! after a lifetime (the idle timeout) or as the server closes, so that a
//! watch never holds a drain to its timeout. A gRPC client calls again.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderMap, Response};
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tonic::{Status, body::Body};

/// Public streams open at once, server-wide.
pub const MAX_OPEN: usize = 64;

/// The paths of the public streaming methods.
const PATHS: [&str; 3] = [
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The public streams of one server.
#[derive(Debug, Clone)]
pub(super) struct PublicStreams {
    slots: Arc<Semaphore>,
    lifetime: Duration,
    closing: CancellationToken,
}

impl PublicStreams {
    /// Streams that last `lifetime` at most.
    pub(super) fn new(lifetime: Duration) -> PublicStreams {
        PublicStreams { slots: Arc::new(Semaphore::new(MAX_OPEN)), lifetime, closing: CancellationToken::new() }
    }

    /// Whether `path` is a public streaming method.
    pub(super) fn is_public_stream(path: &str) -> bool {
        PATHS.contains(&path)
    }

    /// Whether any public stream is open.
    pub(super) fn any_open(&self) -> bool {
        self.slots.available_permits() < MAX_OPEN
    }

    /// Whether the server is closing its streams.
    pub(super) fn closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// A slot for one more stream, if one is free.
    pub(super) fn admit(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// The answer to a stream refused a slot.
    pub(super) fn refused() -> Response<Body> {
        let message = format!("{MAX_OPEN} health watches and reflection streams are open already; retry later");
        Status::resource_exhausted(message).into_http()
    }

    /// `response`, ending by the lifetime or as the server closes, holding `slot` until it ends.
    pub(super) fn bound(&self, response: Response<Body>, slot: OwnedSemaphorePermit) -> Response<Body> {
        let (lifetime, closing) = (self.lifetime, self.closing.clone().cancelled_owned());
        let end = Box::pin(async move {
            tokio::select! {
                () = tokio::time::sleep(lifetime) => "the stream reached its lifetime; call again",
                () = closing => "the server is shutting down",
            }
        });
        response.map(|inner| Body::new(Bounded { inner, end, ended: false, _slot: slot }))
    }

    /// Ends every public stream: the server is closing.
    pub(super) fn close(&self) {
        self.closing.cancel();
    }
}

/// A stream's body that ends with `UNAVAILABLE` once `end` resolves.
struct Bounded {
    inner: Body,
    end: Pin<Box<dyn Future<Output = &'static str> + Send>>,
    ended: bool,
    _slot: OwnedSemaphorePermit,
}

impl hyper::body::Body for Bounded {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            self.ended = frame.is_none();
            return Poll::Ready(frame);
        }
        let Poll::Ready(why) = self.end.as_mut().poll(cx) else { return Poll::Pending };
        self.ended = true;
        let mut trailers = HeaderMap::new();
        // A fixed ASCII message: it always makes headers.
        let _ = Status::unavailable(why).add_header(&mut trailers);
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
