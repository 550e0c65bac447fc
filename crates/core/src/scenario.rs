//! The scenario trait, the four handlers, and the errors a scenario reports.
//!
//! A scenario implements [`Scenario::run`] and, when its answers need them,
//! `continue`, `commit` and `apply`. The server around it enforces the budget,
//! idempotency, overload and logging, so a scenario holds only its own logic.

pub mod meta;
pub mod module;
pub mod registry;
mod shutdown;

use std::{fmt, sync::Arc};

use async_trait::async_trait;
pub use meta::CallMeta;
pub use module::{BuildError, Flag, ScenarioModule, Setup, SetupError};
pub use registry::Registry;
pub use shutdown::Shutdown;
// tokio's clock, as every timer of the server uses: tests can pause and move it.
use tokio::time::Instant;

use crate::proto::n_alice::n_scenarios::{
    TScenarioApplyRequest, TScenarioApplyResponse, TScenarioCommitResponse, TScenarioContinueResponse,
    TScenarioRunRequest, TScenarioRunResponse,
};

/// The scenario handlers Megamind calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Handler {
    /// `/run`: ranking; answers `TScenarioRunResponse`.
    Run,
    /// `/continue`: the slow part of a pure answer; answers `TScenarioContinueResponse`.
    Continue,
    /// `/commit`: the side effect after an answer; answers `TScenarioCommitResponse`.
    Commit,
    /// `/apply`: the side effect and then the answer; answers `TScenarioApplyResponse`.
    Apply,
}

impl Handler {
    /// All handlers, in protocol order.
    pub const ALL: [Handler; 4] = [Handler::Run, Handler::Continue, Handler::Commit, Handler::Apply];

    /// The path segment and label: `run`, `continue`, `commit`, `apply`.
    pub fn as_str(self) -> &'static str {
        match self {
            Handler::Run => "run",
            Handler::Continue => "continue",
            Handler::Commit => "commit",
            Handler::Apply => "apply",
        }
    }

    /// Parses a path segment.
    pub fn from_name(name: &str) -> Option<Handler> {
        Handler::ALL.into_iter().find(|h| h.as_str() == name)
    }

    /// Whether the handler carries out a side effect (`/commit`, `/apply`),
    /// which must never run twice for one `RequestId`.
    pub fn has_side_effect(self) -> bool {
        matches!(self, Handler::Commit | Handler::Apply)
    }
}

impl fmt::Display for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a scenario knows about the call besides the request message.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// `BaseRequest.RequestId`, never empty.
    pub request_id: String,
    /// When the server answers `timeout` if the scenario has not answered.
    pub deadline: Instant,
    /// The caller's tickets, as it sent them.
    pub meta: CallMeta,
}

/// A failure a scenario reports; the server answers it as the protocol
/// `Error` of the handler's response type, `Type` from [`ScenarioError::error_type`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScenarioError {
    /// The request does not make sense for this scenario.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The scenario does not implement this handler.
    #[error("this scenario does not implement /{0}")]
    Unsupported(Handler),
    /// A service the scenario depends on failed.
    #[error("upstream failure: {0}")]
    Upstream(String),
    /// The scenario's own bug.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ScenarioError {
    /// The stable machine word of `Error.Type` and of metric labels.
    pub fn error_type(&self) -> &'static str {
        match self {
            ScenarioError::BadRequest(_) => "bad_request",
            ScenarioError::Unsupported(_) => "unsupported",
            ScenarioError::Upstream(_) => "upstream",
            ScenarioError::Internal(_) => "internal",
        }
    }
}

/// What a handler of a scenario returns.
pub type ScenarioResult<T> = Result<Answer<T>, ScenarioError>;

/// A handler's answer: a message built for this call, or a canned one shared
/// between calls so that answering it copies nothing. `Ok(message.into())`
/// makes either.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer<T> {
    /// Built for this call.
    Owned(T),
    /// Shared between calls.
    Shared(Arc<T>),
}

impl<T> From<T> for Answer<T> {
    fn from(message: T) -> Answer<T> {
        Answer::Owned(message)
    }
}

impl<T> From<Arc<T>> for Answer<T> {
    fn from(message: Arc<T>) -> Answer<T> {
        Answer::Shared(message)
    }
}

impl<T: Clone> Answer<T> {
    /// The message, copied only if it is shared.
    pub fn into_owned(self) -> T {
        match self {
            Answer::Owned(message) => message,
            Answer::Shared(message) => Arc::unwrap_or_clone(message),
        }
    }
}

impl<T> std::ops::Deref for Answer<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Answer::Owned(message) => message,
            Answer::Shared(message) => message,
        }
    }
}

/// A scenario: `run` is required, the other handlers answer `unsupported`
/// unless the scenario overrides them.
///
/// The server may stop waiting for a handler at the budget and let its future
/// finish in the background, so handlers must not assume the caller is still there.
#[async_trait]
pub trait Scenario: Send + Sync + 'static {
    /// Written into every response's `Version` that the scenario left
    /// empty. The default is this framework's version, not the scenario's:
    /// a scenario of its own says its own (`env!("CARGO_PKG_VERSION")` in
    /// its crate).
    fn version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }

    /// `/run`: rank the request and answer it, or hand over to another handler.
    async fn run(&self, request: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse>;

    /// `/continue`: finish a pure answer after winning the ranking.
    async fn r#continue(
        &self,
        _request: TScenarioApplyRequest,
        _ctx: CallContext,
    ) -> ScenarioResult<TScenarioContinueResponse> {
        Err(ScenarioError::Unsupported(Handler::Continue))
    }

    /// `/commit`: perform the side effect of an answer already given.
    async fn commit(
        &self,
        _request: TScenarioApplyRequest,
        _ctx: CallContext,
    ) -> ScenarioResult<TScenarioCommitResponse> {
        Err(ScenarioError::Unsupported(Handler::Commit))
    }

    /// `/apply`: perform the side effect, then answer.
    async fn apply(
        &self,
        _request: TScenarioApplyRequest,
        _ctx: CallContext,
    ) -> ScenarioResult<TScenarioApplyResponse> {
        Err(ScenarioError::Unsupported(Handler::Apply))
    }
}
