//! The drain signal for long-lived responses. A [`Shutdown`] fires when the
//! server starts draining; a response that streams for as long as its client
//! listens selects on it and ends, so the client gets a complete body while
//! the server still serves, instead of a connection cut when the drain
//! times out.
//!
//! Route handlers take it as an extractor (`async fn f(shutdown: Shutdown)`):
//! the server's router puts its own into every request it routes.

use std::convert::Infallible;

use axum::{
    BoxError,
    body::{Body, Bytes},
    extract::FromRequestParts,
};
use futures_util::{Stream, StreamExt};
use http::request::Parts;
use tokio_util::sync::CancellationToken;

/// Fires once, when the server starts draining; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Whether the server has started draining.
    pub fn is_shutdown(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once the server starts draining (at once if it has).
    pub async fn recv(&self) {
        self.token.cancelled().await;
    }

    /// `stream`, ending when the server starts draining (an item being
    /// produced then is dropped).
    pub fn until_shutdown<S: Stream>(&self, stream: S) -> impl Stream<Item = S::Item> + use<S> {
        stream.take_until(self.token.clone().cancelled_owned())
    }

    /// A streaming response body of `stream`'s chunks that ends, complete,
    /// when the server starts draining.
    pub fn body<S, T, E>(&self, stream: S) -> Body
    where
        S: Stream<Item = Result<T, E>> + Send + 'static,
        T: Into<Bytes> + 'static,
        E: Into<BoxError> + 'static,
    {
        Body::from_stream(self.until_shutdown(stream))
    }

    /// Fires the signal: the server does when it starts draining; a
    /// scenario's own tests do to see its streams end.
    pub fn fire(&self) {
        self.token.cancel();
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Shutdown {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Shutdown, Infallible> {
        // Outside the server (a handler called directly) nothing drains.
        Ok(parts.extensions.get::<Shutdown>().cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use futures_util::stream;

    use super::*;

    #[tokio::test]
    async fn a_stream_ends_when_the_signal_fires() {
        let shutdown = Shutdown::new();
        let mut ticks = Box::pin(shutdown.until_shutdown(stream::iter(0..)));
        assert_eq!(ticks.next().await, Some(0));
        assert!(!shutdown.is_shutdown());
        shutdown.clone().fire();
        assert!(shutdown.is_shutdown());
        shutdown.recv().await;
        assert_eq!(ticks.next().await, None);
    }
}
