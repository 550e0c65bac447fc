//! The call types: what a transport hands the dispatcher ([`Call`] with its
//! [`CallMeta`]), what it gets back ([`Reply`]), and why a call may be
//! refused ([`Refusal`]), which each transport maps once to its own answer.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::Admitted;
pub use crate::scenario::meta::{CallMeta, SERVICE_TICKET, USER_TICKET};
use crate::{codec::Format, scenario::Handler};

/// Which transport a call came by, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP/1.1 or h2c with binary, JSON or text bodies.
    Http,
    /// gRPC.
    Grpc,
}

impl Transport {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Grpc => "grpc",
        }
    }
}

/// One handler call as a transport received it.
#[derive(Debug)]
pub struct Call {
    /// The handler.
    pub handler: Handler,
    /// The request body as received.
    pub body: Bytes,
    /// The body's format.
    pub format: Format,
    /// When the request arrived: the budget counts from here.
    pub started: Instant,
    /// How long the client said it waits (gRPC `grpc-timeout`), when it did:
    /// a call is answered within the shorter of this and the handler's budget.
    pub client_timeout: Option<Duration>,
    /// The caller's tickets ([`CallMeta::from_headers`]).
    pub meta: CallMeta,
    /// The transport.
    pub transport: Transport,
    /// What the caller was let in as, when the transport asked the
    /// authenticator before reading the body ([`super::Dispatcher::admit`]);
    /// otherwise the dispatcher asks it first.
    pub admitted: Option<Admitted>,
}

/// What the transport sends back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The binary response message of the handler's type.
    Answer(Bytes),
    /// No answer: the transport says why in its own terms.
    Refused(Refusal),
}

/// Why a call gets no protocol answer. The dispatcher refuses `/run` under
/// overload and whatever the [`super::Authenticator`] refuses; transports
/// refuse what never reaches it. Failures the protocol can carry are not
/// refusals: they are the protocol `Error` in an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `/run` at the concurrency limit, so that Megamind asks elsewhere in
    /// time. The other handlers answer the protocol `Error` `overloaded`.
    Overloaded,
    /// The caller may not make this call (no ticket, a ticket refused, a
    /// source not allowed, or tickets that cannot be checked now); why, in
    /// words that quote no ticket.
    Forbidden(String),
    /// No scenario by this name (gRPC's `x-scenario`; an HTTP path naming
    /// none is not a route, answered by the router).
    UnknownScenario {
        /// The name asked for.
        name: String,
        /// The registered names, for the message.
        known: String,
    },
    /// The body is over the server's limit.
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body did not arrive within the call's time.
    BodyTooSlow {
        /// The handler called.
        handler: Handler,
        /// The time the body had.
        limit: Duration,
    },
    /// The body could not be read; why.
    BodyUnreadable(String),
    /// A `Content-Type` naming no format the server reads; its value.
    UnsupportedMediaType(String),
}

/// The most of a client's own words (a path, a name, a header's value) a
/// refusal quotes back, in bytes: enough to recognise them, not the 16 KiB
/// a header may hold.
pub const MAX_ECHO: usize = 128;

impl Refusal {
    /// The stable word for logs and metric labels.
    pub fn error_type(&self) -> &'static str {
        match self {
            Refusal::Overloaded => "overloaded",
            Refusal::Forbidden(_) => "forbidden",
            Refusal::UnknownScenario { .. } => "unknown_scenario",
            Refusal::BodyTooLarge { .. } => "body_too_large",
            Refusal::BodyTooSlow { .. } => "body_too_slow",
            Refusal::BodyUnreadable(_) => "body_unreadable",
            Refusal::UnsupportedMediaType(_) => "unsupported_media_type",
        }
    }
}

/// How a call ended, for the log line and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The scenario answered.
    Ok,
    /// A repeat answered with the first call's answer.
    Replay,
    /// A repeat that waited for the first call past its deadline: answered
    /// `timeout`, but no budget of its own was overrun.
    ReplayTimeout,
    /// A protocol `Error` (its `Type`), or a refusal ([`Refusal::error_type`]).
    Error(&'static str),
}

impl Outcome {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Replay => "replay",
            Outcome::ReplayTimeout => "replay_timeout",
            Outcome::Error(kind) => kind,
        }
    }
}
