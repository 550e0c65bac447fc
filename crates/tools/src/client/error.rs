//! Why a call or a turn of the [`Client`](super::Client) failed: the server
//! could not be reached or answered with a status, its answer did not decode,
//! or it answered the protocol `Error` or something the flow cannot follow.

use std::time::Duration;

use megamind_core::scenario::Handler;

/// A failed call or turn. Every variant but [`ClientError::Setting`] and
/// [`ClientError::TooManyCallbacks`] names the handler that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A setting of the client cannot be used: an address that is not a
    /// URL, a scenario name or ticket that cannot be a header value.
    #[error("invalid {name}: {reason}")]
    Setting {
        /// Which setting.
        name: &'static str,
        /// Why it cannot be used.
        reason: String,
    },
    /// The HTTP request failed below HTTP: connect, reset, unreadable body.
    #[error("/{handler}: the server cannot be reached: {source}")]
    Unreachable {
        /// The handler called.
        handler: Handler,
        /// What reqwest reported.
        source: reqwest::Error,
    },
    /// An HTTP status other than 200 (404 unknown scenario, 429 overload, ...).
    #[error("/{handler}: HTTP {status}: {body}")]
    Status {
        /// The handler called.
        handler: Handler,
        /// The status the server answered.
        status: http::StatusCode,
        /// The body the server sent with it, as text, its first
        /// [`MAX_ERROR_BODY_BYTES`](super::MAX_ERROR_BODY_BYTES) at most.
        body: String,
    },
    /// A gRPC status other than OK (`NOT_FOUND`, `RESOURCE_EXHAUSTED`,
    /// `UNAVAILABLE` when the server cannot be reached, ...).
    #[error("{handler}: gRPC {code:?}: {message}")]
    Grpc {
        /// The handler called.
        handler: Handler,
        /// The status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// An answer longer than [`MAX_ANSWER_BYTES`](super::MAX_ANSWER_BYTES):
    /// no protocol message comes near it, so the rest is not read.
    #[error("/{handler}: the answer is longer than {limit} bytes; the rest was not read")]
    TooLarge {
        /// The handler called.
        handler: Handler,
        /// The most bytes an answer may have.
        limit: usize,
    },
    /// No answer within the client's own timeout per call.
    #[error("/{handler}: no answer within {after:?}")]
    Timeout {
        /// The handler called.
        handler: Handler,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The answer is not the handler's response message.
    #[error("/{handler}: the answer does not decode: {source}")]
    Decode {
        /// The handler called.
        handler: Handler,
        /// What the decoder reported: a malformed message, or one holding
        /// more values than a request may (each costs far more decoded
        /// than its bytes, and 64 MiB of them would take gigabytes).
        source: megamind_core::codec::CodecError,
    },
    /// The server answered the protocol `Error` (`Type` and `Message`).
    #[error("/{handler} answered the protocol Error {kind:?}: {message}")]
    Protocol {
        /// The handler that answered it.
        handler: Handler,
        /// `Error.Type`: `bad_request`, `timeout`, `internal`, ...
        kind: String,
        /// `Error.Message`.
        message: String,
    },
    /// The answer is valid protobuf but not one the flow can follow, such as
    /// a `/run` answer with none of its `Response` fields set.
    #[error("/{handler} answered {what}")]
    Unexpected {
        /// The handler that answered it.
        handler: Handler,
        /// What the answer held instead.
        what: &'static str,
    },
    /// A command result was to be sent, but the last answer asked to run no
    /// command (`RunCommandDirective`).
    #[error("the last answer asked to run no command")]
    NoCommand,
    /// The answers kept asking for one more callback.
    #[error("still asked for a callback after {max} callbacks in one turn; giving up")]
    TooManyCallbacks {
        /// The client's `max_callbacks`.
        max: usize,
    },
}
