//! The one implementation behind every transport: decode, deduplicate, admit,
//! run the scenario inside its budget, encode, log.
//!
//! Transports hand over a [`Call`] (raw body, format, arrival time) and get a
//! [`Reply`] holding the binary answer; they only frame it. Every answer is a
//! well-formed response of the handler's type: failures inside a routed call
//! become the protocol `Error`, never a transport error, except `/run` under
//! overload, which the transport refuses (HTTP 429, gRPC `RESOURCE_EXHAUSTED`).
//! Admission comes after the idempotency cache: a repeat is replayed, or
//! waits for its first call, even at the concurrency limit.

use std::{any::Any, panic::AssertUnwindSafe, sync::Arc, time::Duration};

use bytes::Bytes;
use futures_util::FutureExt;
use prost_reflect::MessageDescriptor;
use tokio::time::Instant;

mod wire;

pub use wire::{error_body, response_descriptor};

use self::wire::encode;
use crate::{
    codec::{self, Format},
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioBaseRequest, TScenarioRunRequest},
    rules::{
        budget::Budgets,
        idempotency::{IdempotencyCache, Leading},
        logging,
        metrics::ServerMetrics,
        overload::{Admission, Permit},
    },
    scenario::{CallContext, Handler, Registry, Scenario, ScenarioError, registry::Registered},
    store::{Begin, Key, Lease, StoreError, Waited},
};

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
    /// `X-Ya-User-Ticket`, when present.
    pub user_ticket: Option<String>,
    /// The transport.
    pub transport: Transport,
}

/// What the transport sends back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The binary response message of the handler's type.
    Answer(Bytes),
    /// `/run` refused under overload.
    Overloaded,
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
    /// A protocol `Error` (its `Type`), or `overloaded` for a refused `/run`.
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

/// Server-side limits the dispatcher applies.
#[derive(Debug, Clone)]
pub struct DispatchLimits {
    /// Per-handler budgets.
    pub budgets: Budgets,
    /// How long work that overran its budget may go on in the background
    /// before it is dropped (its answer then is not cached).
    pub detach_limit: Duration,
}

impl Default for DispatchLimits {
    fn default() -> DispatchLimits {
        DispatchLimits { budgets: Budgets::default(), detach_limit: Duration::from_secs(30) }
    }
}

/// Runs calls against the registered scenarios under the server's rules.
#[derive(Debug)]
pub struct Dispatcher {
    registry: Registry,
    default_scenario: Option<Arc<str>>,
    limits: DispatchLimits,
    cache: IdempotencyCache,
    admission: Admission,
    metrics: ServerMetrics,
}

impl Dispatcher {
    /// A dispatcher over `registry`; `default_scenario` serves `/run` and the
    /// other un-prefixed paths.
    pub fn new(
        registry: Registry,
        default_scenario: Option<&str>,
        limits: DispatchLimits,
        cache: IdempotencyCache,
        admission: Admission,
        metrics: ServerMetrics,
    ) -> Dispatcher {
        // Decoded now, not inside the first call's budget: requests' `Any`
        // payloads are measured against it.
        std::sync::LazyLock::force(&crate::proto::DESCRIPTOR_POOL);
        let default_scenario = default_scenario.and_then(|name| registry.get(name)).map(|r| r.name.clone());
        metrics.watch_cache(&cache);
        metrics.watch_admission(&admission);
        Dispatcher { registry, default_scenario, limits, cache, admission, metrics }
    }

    /// The metrics calls are recorded in.
    pub fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// The scenario named `name`, or the default one for `None`.
    pub fn scenario(&self, name: Option<&str>) -> Option<&Registered> {
        self.registry.get(name.or(self.default_scenario.as_deref())?)
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The idempotency cache.
    pub fn cache(&self) -> &IdempotencyCache {
        &self.cache
    }

    /// Answers one call of `scenario` and logs its summary line.
    pub async fn dispatch(&self, scenario: &Registered, call: Call) -> Reply {
        let mut request_id = String::new();
        let (reply, outcome) = self.handle(scenario, &call, &mut request_id).await;
        if let (Reply::Answer(body), true) = (&reply, logging::bodies_enabled()) {
            log_body("answer", response_descriptor(call.handler), body);
        }
        let latency = call.started.elapsed();
        let (transport, handler, outcome) = (call.transport.as_str(), call.handler.as_str(), outcome.as_str());
        self.metrics.observe(&scenario.name, handler, transport, outcome, latency);
        logging::summary(transport, &scenario.name, handler, &request_id, outcome, latency);
        reply
    }

    async fn handle(&self, registered: &Registered, call: &Call, request_id: &mut String) -> (Reply, Outcome) {
        let handler = call.handler;
        let scenario = &registered.scenario;
        let failure = |kind: &'static str, message: String| {
            (Reply::Answer(error_body(handler, scenario.version(), kind, message)), Outcome::Error(kind))
        };
        let request = match Request::decode(handler, &call.body, call.format) {
            Ok(request) => request,
            Err(error) => return failure("bad_request", error.to_string()),
        };
        *request_id = request.request_id().to_owned();
        if request_id.is_empty() {
            return failure("bad_request", "BaseRequest.RequestId is missing or empty".into());
        }
        if logging::bodies_enabled() {
            request.log();
        }
        let budgets = &self.limits.budgets;
        let budget = budgets.of(handler);
        let client_timeout = call.client_timeout.filter(|client| *client < budget);
        let deadline = match client_timeout {
            Some(client) => call.started + client.saturating_sub(budgets.reserve),
            None => budgets.deadline(handler, call.started),
        };
        let limit = || match client_timeout {
            Some(client) => format!("the client's deadline of {} ms (grpc-timeout)", client.as_millis()),
            None => format!("the {} ms budget of /{handler}", budget.as_millis()),
        };
        // The cache before admission: a repeat replays, or waits for the first
        // call, whatever the load; only a call that leads runs the scenario and
        // needs a slot. Waiters take none: they hold no scenario work, only
        // their connection, and end by their deadline.
        let mut permit = None;
        let mut may_lead = || {
            permit = self.admission.try_admit(handler);
            permit.is_some()
        };
        let leading = match self.lead_or_replay(registered, handler, request_id, deadline, &limit, &mut may_lead).await
        {
            Ok(leading) => leading,
            Err(answered) => return answered,
        };
        let ctx = CallContext { request_id: request_id.clone(), deadline, user_ticket: call.user_ticket.clone() };
        let mut work = Box::pin(run_scenario(scenario.clone(), handler, request, ctx));
        // Most scenarios answer on the first poll: no timer for them.
        if let Some(finished) = (&mut work).now_or_never() {
            return finished.end(leading).await;
        }
        tokio::select! {
            biased;
            finished = &mut work => finished.end(leading).await,
            () = tokio::time::sleep_until(deadline) => {
                let lease = leading.into_lease();
                detach(work, self.cache.clone(), lease, permit, deadline + self.limits.detach_limit);
                failure("timeout", format!("the scenario did not answer within {}", limit()))
            }
        }
    }

    /// The idempotency cache's say on a call: `Ok` with the lease when the
    /// call leads, else the answer (a replay, the end of a wait for the
    /// first call, or a refusal).
    async fn lead_or_replay(
        &self,
        registered: &Registered,
        handler: Handler,
        request_id: &str,
        deadline: Instant,
        limit: impl Fn() -> String,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Leading<'_>, (Reply, Outcome)> {
        let failure = |kind: &'static str, message: String| {
            Err((
                Reply::Answer(error_body(handler, registered.scenario.version(), kind, message)),
                Outcome::Error(kind),
            ))
        };
        let unavailable = |error: StoreError| failure("unavailable", format!("the idempotency cache failed: {error}"));
        // Work past its budget may go on until the detach limit: its lease lasts as long.
        let lease_ttl = self.limits.budgets.of(handler) + self.limits.detach_limit;
        let key = Key::new(&registered.name, handler, request_id);
        let waiter = match self.cache.begin(key, lease_ttl, may_lead).await {
            Ok(Begin::Lead(lease)) => return Ok(self.cache.leading(lease)),
            Ok(Begin::Hit(body)) => return Err((Reply::Answer(body), Outcome::Replay)),
            Ok(Begin::Wait(waiter)) => waiter,
            Ok(Begin::Refused) => {
                return match handler {
                    Handler::Run => Err((Reply::Overloaded, Outcome::Error("overloaded"))),
                    _ => failure("overloaded", "the server is at its concurrency limit".into()),
                };
            }
            Ok(Begin::Full) => {
                return failure(
                    "overloaded",
                    format!(
                        "the idempotency cache's reserve for /commit and /apply answers is full; /{handler} refused"
                    ),
                );
            }
            Err(error) => return unavailable(error),
        };
        match self.cache.wait(&waiter, deadline).await {
            Ok(Waited::Done(body)) => Err((Reply::Answer(body), Outcome::Replay)),
            Ok(Waited::Abandoned) => {
                failure("internal", "the first call with this RequestId failed without an answer".into())
            }
            Ok(Waited::TimedOut) => {
                let message = format!("the first call with this RequestId did not answer within {}", limit());
                failure("timeout", message).map_err(|(reply, _)| (reply, Outcome::ReplayTimeout))
            }
            Err(error) => unavailable(error),
        }
    }
}

/// Lets work that overran its budget finish in the background, holding its
/// admission slot, so that its answer still completes the idempotency entry.
/// At `until` the work is dropped and its lease abandoned.
fn detach(
    work: impl Future<Output = Finished> + Send + 'static,
    cache: IdempotencyCache,
    lease: Lease,
    permit: Option<Permit>,
    until: Instant,
) {
    tokio::spawn(async move {
        let _permit = permit;
        let answer = tokio::time::timeout_at(until, work).await.ok().and_then(Finished::into_kept);
        if let Err(error) = cache.end(lease, answer).await {
            tracing::warn!(%error, "the lease of work past its budget was not ended; it runs out by its TTL");
        }
    });
}

/// A decoded request of either type.
enum Request {
    Run(TScenarioRunRequest),
    Apply(TScenarioApplyRequest),
}

/// Longest `BaseRequest.RequestId` accepted, in bytes: it keys the cache and
/// is written into every log line.
pub const MAX_REQUEST_ID: usize = 256;

/// Why a request body was refused before any scenario saw it.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error(transparent)]
    Codec(#[from] codec::CodecError),
    #[error("BaseRequest.RequestId is {0} bytes long, over the limit of {MAX_REQUEST_ID}")]
    RequestIdTooLong(usize),
    #[error("{0} is nested deeper than the limit of {max} levels", max = codec::depth::MAX_DEPTH)]
    TooDeep(&'static str),
}

impl Request {
    fn decode(handler: Handler, body: &[u8], format: Format) -> Result<Request, BadRequest> {
        let request = match handler {
            Handler::Run => Request::Run(codec::decode(body, format)?),
            _ => Request::Apply(codec::decode(body, format)?),
        };
        let length = request.request_id().len();
        if length > MAX_REQUEST_ID {
            return Err(BadRequest::RequestIdTooLong(length));
        }
        // JSON and text were measured whole as they were parsed; binary `Any`
        // payloads are still bytes, which a printer or a scenario may expand.
        if format == Format::Binary {
            request.check_any_depth()?;
        }
        Ok(request)
    }

    fn request_id(&self) -> &str {
        self.base().map_or("", |b| b.request_id.as_str())
    }

    fn base(&self) -> Option<&TScenarioBaseRequest> {
        match self {
            Request::Run(r) => r.base_request.as_ref(),
            Request::Apply(r) => r.base_request.as_ref(),
        }
    }

    /// Measures the `Any` fields of a request: `BaseRequest.State` sits at
    /// level 3 (request, `BaseRequest`, `State`), `Arguments` at level 2.
    fn check_any_depth(&self) -> Result<(), BadRequest> {
        use codec::depth::check_any;
        if let Some(state) = self.base().and_then(|b| b.state.as_ref()) {
            check_any(state, 3).map_err(|_| BadRequest::TooDeep("BaseRequest.State"))?;
        }
        if let Request::Apply(TScenarioApplyRequest { arguments: Some(arguments), .. }) = self {
            check_any(arguments, 2).map_err(|_| BadRequest::TooDeep("Arguments"))?;
        }
        Ok(())
    }

    fn log(&self) {
        let text = match self {
            Request::Run(r) => codec::redact::redacted_text(r),
            Request::Apply(r) => codec::redact::redacted_text(r),
        };
        log_text("request", text);
    }
}

/// What a scenario's work ended with.
struct Finished {
    body: Bytes,
    outcome: Outcome,
    /// Whether repeats may replay the answer: not after a panic, so that a
    /// retry runs again.
    keep: bool,
}

impl Finished {
    /// The answer to keep for repeats, if any.
    fn into_kept(self) -> Option<Bytes> {
        self.keep.then_some(self.body)
    }

    /// Ends the lease with this answer and gives it back to the caller. An
    /// answer the cache could not keep is still the caller's.
    fn end(self, leading: Leading<'_>) -> impl Future<Output = (Reply, Outcome)> + Send + '_ {
        // The lease goes to the store's future now, so that no future of ours holds it.
        let ending = leading.end(self.keep.then(|| self.body.clone()));
        async move {
            if let Err(error) = ending.await {
                tracing::warn!(%error, "an answer was not kept for repeats");
            }
            (Reply::Answer(self.body), self.outcome)
        }
    }
}

/// Runs the scenario and encodes its answer. A panic becomes an `internal`
/// error that is not kept.
async fn run_scenario(scenario: Arc<dyn Scenario>, handler: Handler, request: Request, ctx: CallContext) -> Finished {
    let result = AssertUnwindSafe(call_handler(&*scenario, handler, request, ctx)).catch_unwind().await;
    let (body, outcome) = match result {
        Ok(Ok(body)) => (body, Outcome::Ok),
        Ok(Err(error)) => {
            let kind = error.error_type();
            (error_body(handler, scenario.version(), kind, error.to_string()), Outcome::Error(kind))
        }
        Err(panic) => {
            let message = format!("the scenario panicked: {}", panic_message(&*panic));
            tracing::error!(handler = handler.as_str(), "{message}");
            let body = error_body(handler, scenario.version(), "internal", message);
            return Finished { body, outcome: Outcome::Error("internal"), keep: false };
        }
    };
    Finished { body, outcome, keep: true }
}

async fn call_handler(
    scenario: &dyn Scenario,
    handler: Handler,
    request: Request,
    ctx: CallContext,
) -> Result<Bytes, ScenarioError> {
    let body = match (handler, request) {
        (Handler::Run, Request::Run(request)) => encode(scenario, scenario.run(request, ctx).await?),
        (Handler::Continue, Request::Apply(request)) => encode(scenario, scenario.r#continue(request, ctx).await?),
        (Handler::Commit, Request::Apply(request)) => encode(scenario, scenario.commit(request, ctx).await?),
        (Handler::Apply, Request::Apply(request)) => encode(scenario, scenario.apply(request, ctx).await?),
        (handler, _) => return Err(ScenarioError::Internal(format!("request type does not match /{handler}"))),
    };
    Ok(body.into())
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

fn log_body(what: &str, desc: MessageDescriptor, binary: &Bytes) {
    let text =
        codec::decode_dynamic(desc, binary, Format::Binary).map_err(|e| e.to_string()).and_then(|mut message| {
            codec::redact::redact(&mut message).map_err(|e| e.to_string())?;
            codec::text::print(&message).map_err(|e| e.to_string())
        });
    log_text(what, text);
}

/// Writes a body's text to the debug log (the log line caps its length).
fn log_text(what: &str, text: Result<String, impl std::fmt::Display>) {
    match text {
        Ok(text) => tracing::debug!(target: logging::ACCESS_TARGET, "{what}\n{text}"),
        Err(error) => tracing::debug!(target: logging::ACCESS_TARGET, "{what} not printable: {error}"),
    }
}
