//! The one implementation behind every transport: a pipeline of small
//! named steps, each a function of [`Dispatcher`]:
//!
//! 1. **authenticate** ([`Authenticator`]), before anything else is done for
//!    the call: a cached answer is never given to a caller who could not
//!    have asked for it;
//! 2. **decode** the body into the handler's request type and its `RequestId`;
//! 3. **cache lookup** by `RequestId`: a repeat replays the first call's
//!    answer, or waits for it. Admission (the concurrency limit) is asked
//!    only by a call that would lead, so repeats replay or wait at any load.
//!    This is deliberate: a repeat runs no scenario work, only holds its
//!    connection until its deadline, and refusing it under load would fail a
//!    retry whose first call is being answered;
//! 4. **run** the scenario inside the call's deadline (work that overruns it
//!    may finish in the background, to complete the cache entry);
//! 5. **encode** the scenario's answer as the handler's binary response,
//!    inside the run's work: work finishing in the background still
//!    completes the cache entry with the bytes a repeat is given;
//! 6. **log** the summary line and record the metrics.
//!
//! Transports hand over a [`Call`] and get a [`Reply`]: the binary answer,
//! which they only frame, or a [`Refusal`], which each maps once to its own
//! terms. Every answer is a well-formed response of the handler's type:
//! failures inside a routed call become the protocol `Error`, never a
//! transport error. The dispatcher refuses only `/run` under overload (the
//! other handlers answer the `Error` `overloaded`) and what the
//! authenticator refuses.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use bytes::Bytes;
use futures_util::FutureExt;
use prost_reflect::MessageDescriptor;
use tokio::{sync::oneshot, time::Instant};

mod authenticator;
pub mod call;
mod decoding;
mod request;
mod wire;
mod work;

pub use authenticator::{AcceptAll, Admitted, Authenticator, Check, Gate};
pub use call::{Call, CallMeta, Outcome, Refusal, Reply, Transport};
pub use request::MAX_REQUEST_ID;
#[cfg(feature = "fuzzing")]
pub use request::fuzz_decode;
pub use wire::{error_body, response_descriptor};

use self::{
    decoding::{Aside, Decoding},
    request::{BadRequest, Request, log_text},
    work::{detach, run_scenario},
};
use crate::{
    codec::{self, Format},
    rules::{
        budget::Budgets,
        idempotency::{IdempotencyCache, Leading},
        logging,
        metrics::{ScenarioSeries, ServerMetrics},
        overload::{Admission, Permit},
    },
    scenario::{CallContext, Handler, Registry, registry::Registered},
    store::{Begin, Key, StoreError, Waited},
};

/// How long a lease outlasts the work it covers (the budget, then the
/// detach limit): the time its answer has to be stored, a shared store's
/// round trips included, before a retry may take the key and run it again.
pub const LEASE_MARGIN: Duration = Duration::from_secs(1);

/// Server-side limits the dispatcher applies.
#[derive(Debug, Clone)]
pub struct DispatchLimits {
    /// Per-handler budgets.
    pub budgets: Budgets,
    /// How long work that overran its budget may go on in the background
    /// before it is dropped (its answer then is not cached, but for a side
    /// effect's: repeats are told it may have run in part).
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
    /// Each registered scenario's call series, resolved once.
    series: BTreeMap<Arc<str>, ScenarioSeries>,
    authenticator: Arc<dyn Authenticator>,
    decoding: Decoding,
}

impl Dispatcher {
    /// A dispatcher over `registry` that lets every caller in ([`AcceptAll`]);
    /// `default_scenario` serves `/run` and the other un-prefixed paths.
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
        let authenticator = Arc::new(AcceptAll);
        let decoding = Decoding::new();
        let series = registry.names().map(|name| (Arc::from(name), metrics.series(name))).collect();
        Dispatcher { registry, default_scenario, limits, cache, admission, metrics, series, authenticator, decoding }
    }

    /// The same dispatcher, asking `authenticator` about every call.
    pub fn with_authenticator(self, authenticator: Arc<dyn Authenticator>) -> Dispatcher {
        Dispatcher { authenticator, ..self }
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
    pub async fn dispatch(&self, scenario: &Registered, mut call: Call) -> Reply {
        let mut request_id = String::new();
        let (reply, outcome) = self.handle(scenario, &mut call, &mut request_id).await;
        self.log(scenario, &call, &request_id, &reply, outcome);
        reply
    }

    /// The steps up to the reply; `request_id` is filled in once decoded.
    async fn handle(&self, registered: &Registered, call: &mut Call, request_id: &mut String) -> (Reply, Outcome) {
        let deadline = Deadline::new(&self.limits.budgets, call);
        let admitted = match call.admitted.take() {
            Some(admitted) => Ok(admitted),
            None => self.admit(&call.meta, deadline.at).await,
        };
        match admitted {
            Ok(admitted) => call.meta.default_uid = admitted.default_uid,
            Err(refusal) => {
                let outcome = Outcome::Error(refusal.error_type());
                return (Reply::Refused(refusal), outcome);
            }
        }
        let request = match self.decode(registered, call, request_id, &deadline).await {
            Ok(request) => request,
            Err(failed) => return failed,
        };
        // The deadline may be gone already (a `grpc-timeout` shorter than
        // the reserve, or the budget spent on the body or its decoding):
        // nothing may run for it, least of all a side effect.
        if Instant::now() >= deadline.at {
            let message = format!("{} left no time to run the call", deadline.limit());
            return failure(registered, call.handler, "timeout", message);
        }
        let lead = match self.lookup(registered, call.handler, request_id, &deadline).await {
            Ok(lead) => lead,
            Err(answered) => return answered,
        };
        // Moved, not cloned: the call needs its tickets no more.
        let meta = std::mem::take(&mut call.meta);
        let ctx = CallContext { request_id: request_id.clone(), deadline: deadline.at, meta };
        self.run(registered, call.handler, request, ctx, lead, &deadline).await
    }

    /// Step 1: whether the caller with `meta` may make a call at all. A
    /// check that must wait (for tvmtool) waits no longer than `deadline`.
    /// Transports ask it from the request's head, before reading its body
    /// ([`Call::admitted`]): a caller let in nowhere costs no body's memory.
    pub async fn admit(&self, meta: &CallMeta, deadline: Instant) -> Result<Admitted, Refusal> {
        match self.authenticator.authenticate(meta) {
            Check::Done(verdict) => verdict,
            Check::Pending(check) => match tokio::time::timeout_at(deadline, check).await {
                Ok(verdict) => verdict,
                Err(_) => {
                    self.authenticator.cut_short();
                    Err(Refusal::Forbidden("the caller's tickets could not be checked in time".into()))
                }
            },
        }
    }

    /// The authenticator every call is asked about.
    pub fn authenticator(&self) -> &Arc<dyn Authenticator> {
        &self.authenticator
    }

    /// Step 2: the request, its `RequestId` copied into `request_id`. A
    /// body that may take long to decode is decoded aside ([`Decoding`]),
    /// within the deadline.
    async fn decode(
        &self,
        registered: &Registered,
        call: &Call,
        request_id: &mut String,
        deadline: &Deadline,
    ) -> Result<Request, (Reply, Outcome)> {
        let (handler, body, format) = (call.handler, &call.body, call.format);
        let decoded = if Decoding::inline(body, format) {
            decode_request(handler, body, format)
        } else {
            match self.decoding.decode(handler, body, format, deadline.at).await {
                Ok(decoded) => decoded,
                Err(Aside::TimedOut) => {
                    let message =
                        format!("the request body ({} bytes) was not decoded within {}", body.len(), deadline.limit());
                    return Err(failure(registered, handler, "timeout", message));
                }
                Err(Aside::Failed(why)) => {
                    return Err(failure(
                        registered,
                        handler,
                        "internal",
                        format!("decoding the request failed: {why}"),
                    ));
                }
            }
        };
        let request = decoded.map_err(|error| failure(registered, handler, "bad_request", error.to_string()))?;
        request.request_id().clone_into(request_id);
        Ok(request)
    }

    /// Step 3: the call's entry in the idempotency cache. A repeat is
    /// answered here (replayed, or after waiting for its first call); a call
    /// that would lead asks admission for a slot, and leads with it.
    async fn lookup(
        &self,
        registered: &Registered,
        handler: Handler,
        request_id: &str,
        deadline: &Deadline,
    ) -> Result<Lead<'_>, (Reply, Outcome)> {
        // Waiters take no slot: they hold no scenario work, only their
        // connection, and end by their deadline. A store may ask more than
        // once (a shared store, then the memory behind it): a caller holds
        // one slot at most.
        let mut permit = None;
        let fail = |kind, message| failure(registered, handler, kind, message);
        let unavailable = |error: StoreError| fail("unavailable", format!("the idempotency cache failed: {error}"));
        let abandoned = || fail("internal", "the first call with this RequestId failed without an answer".into());
        // Work past its budget may go on until the detach limit: its lease
        // lasts as long, and then long enough to store what it answered.
        let lease_ttl = self.limits.budgets.of(handler) + self.limits.detach_limit + LEASE_MARGIN;
        let key = Key::new(&registered.name, handler, request_id);
        // A first call that ends without an answer (cancelled, or its
        // replica gone with its lease) leaves its waiters free to lead in
        // its place, once: a retry waiting for it should not fail for it.
        for takeover in [false, true] {
            let mut may_lead = || {
                permit = None;
                permit = self.admission.try_admit(handler);
                permit.is_some()
            };
            let begun = self.cache.begin(key.clone(), lease_ttl, deadline.at, &mut may_lead).await;
            let waiter = match begun {
                Ok(Begin::Lead(lease)) => return Ok(Lead { leading: self.cache.leading(lease), permit }),
                Ok(Begin::Hit(body)) => return Err((Reply::Answer(body), Outcome::Replay)),
                Ok(Begin::Wait(waiter)) => {
                    permit = None;
                    waiter
                }
                Ok(Begin::Refused) => {
                    return Err(match handler {
                        Handler::Run => (Reply::Refused(Refusal::Overloaded), Outcome::Error("overloaded")),
                        _ => fail("overloaded", "the server is at its concurrency limit".into()),
                    });
                }
                Ok(Begin::Full) => {
                    let message = format!(
                        "the idempotency cache's reserve for /commit and /apply answers is full; /{handler} refused"
                    );
                    return Err(fail("overloaded", message));
                }
                Err(error) => return Err(unavailable(error)),
            };
            return Err(match self.cache.wait(&waiter, deadline.at).await {
                Ok(Waited::Done(body)) => (Reply::Answer(body), Outcome::Replay),
                Ok(Waited::Abandoned) if !takeover && Instant::now() < deadline.at => continue,
                // Gone just as this call's time ran out: no time to run it
                // here, which a retry has.
                Ok(Waited::Abandoned) if Instant::now() >= deadline.at => {
                    let message = format!(
                        "the first call with this RequestId ended without an answer as the {} deadline ran out; \
                         retry it",
                        deadline.limit()
                    );
                    (fail("timeout", message).0, Outcome::ReplayTimeout)
                }
                Ok(Waited::Abandoned) => abandoned(),
                Ok(Waited::TimedOut) => {
                    let limit = deadline.limit();
                    let message = format!("the first call with this RequestId did not answer within {limit}");
                    (fail("timeout", message).0, Outcome::ReplayTimeout)
                }
                // A shared store lost while waiting: a call without side
                // effects begins again, on this replica's memory if need be.
                Err(_) if !takeover && !handler.has_side_effect() && Instant::now() < deadline.at => continue,
                Err(error) => unavailable(error),
            });
        }
        Err(abandoned())
    }

    /// Steps 4 and 5: runs the scenario and encodes its answer, within the
    /// deadline; past it, the work goes on in the background holding its
    /// slot and the call answers `timeout`. A side effect runs in a task of
    /// its own from the start: a caller that hangs up or cancels must not
    /// cut it midway, leaving a repeat to run it again.
    async fn run(
        &self,
        registered: &Registered,
        handler: Handler,
        request: Request,
        ctx: CallContext,
        Lead { leading, permit }: Lead<'_>,
        deadline: &Deadline,
    ) -> (Reply, Outcome) {
        let mut work = Box::pin(run_scenario(registered.scenario.clone(), handler, request, ctx));
        let late = || {
            let message = format!("the scenario did not answer within {}", deadline.limit());
            failure(registered, handler, "timeout", message)
        };
        if handler.has_side_effect() {
            let (done, finished) = oneshot::channel();
            let unfinished = self.unfinished(registered, handler, deadline);
            detach(work, self.cache.clone(), leading.into_lease(), permit, unfinished, Some(done));
            return match tokio::time::timeout_at(deadline.at, finished).await {
                Ok(Ok(finished)) => finished.into_reply(),
                _ => late(),
            };
        }
        // Most scenarios answer on the first poll: no timer for them.
        if let Some(finished) = (&mut work).now_or_never() {
            return finished.end(leading).await;
        }
        tokio::select! {
            biased;
            finished = &mut work => finished.end(leading).await,
            () = tokio::time::sleep_until(deadline.at) => {
                let unfinished = self.unfinished(registered, handler, deadline);
                detach(work, self.cache.clone(), leading.into_lease(), permit, unfinished, None);
                late()
            }
        }
    }

    /// When work past its deadline is dropped (the detach limit later), and
    /// what its repeats are then told: for a side effect, which may have
    /// run in part, that it is not run again; nothing for the rest, whose
    /// repeats run them again.
    fn unfinished(&self, registered: &Registered, handler: Handler, deadline: &Deadline) -> (Instant, Option<Bytes>) {
        let until = deadline.at + self.limits.detach_limit;
        let told = handler.has_side_effect().then(|| {
            let (limit, later) = (deadline.limit(), self.limits.detach_limit.as_millis());
            let message = format!(
                "the scenario did not answer within {limit} and was stopped {later} ms later; \
                 its side effect may have run in part, and is not run again for this RequestId"
            );
            error_body(handler, registered.scenario.version(), "timeout", message)
        });
        (until, told)
    }

    /// Records a call its transport refused before handing it over (a body
    /// too large, too slow or unreadable, or in no format the server reads)
    /// as a dispatched call is recorded: its metrics and its summary line,
    /// with no `RequestId`, none having been read. The scenario never ran,
    /// so no budget was overrun.
    pub fn refused_early(
        &self,
        scenario: &Registered,
        handler: Handler,
        transport: Transport,
        started: Instant,
        refusal: &Refusal,
    ) {
        let latency = started.elapsed();
        let (transport, outcome) = (transport.as_str(), refusal.error_type());
        self.observe(scenario, handler, transport, outcome, latency, None);
        logging::summary(transport, &scenario.name, handler.as_str(), "", outcome, latency);
    }

    /// Step 6: the summary line, the metrics, and at `debug` the answer.
    fn log(&self, scenario: &Registered, call: &Call, request_id: &str, reply: &Reply, outcome: Outcome) {
        if let (Reply::Answer(body), true) = (reply, logging::bodies_enabled()) {
            // Named by its call: calls running at once write their answers
            // and summaries in any order (`dialog --replay` pairs them).
            let what = format!("answer{}", logging::field("request_id", request_id));
            log_body(&what, response_descriptor(call.handler), body);
        }
        let latency = call.started.elapsed();
        let (transport, outcome) = (call.transport.as_str(), outcome.as_str());
        let budget = self.limits.budgets.of(call.handler);
        self.observe(scenario, call.handler, transport, outcome, latency, Some(budget));
        logging::summary(transport, &scenario.name, call.handler.as_str(), request_id, outcome, latency);
    }

    /// Records a call in the metrics: through its scenario's resolved series,
    /// or by its labels for a scenario or outcome they do not list.
    fn observe(
        &self,
        scenario: &Registered,
        handler: Handler,
        transport: &str,
        outcome: &str,
        latency: Duration,
        budget: Option<Duration>,
    ) {
        let series = self.series.get(&scenario.name);
        if series.is_some_and(|series| series.observe(handler, transport, outcome, latency, budget)) {
            return;
        }
        let (name, handler) = (&scenario.name, handler.as_str());
        match budget {
            Some(budget) => self.metrics.observe(name, handler, transport, outcome, latency, budget),
            None => self.metrics.observe_refused(name, handler, transport, outcome, latency),
        }
    }
}

/// Decodes a request and, at `debug`, logs it.
fn decode_request(handler: Handler, body: &[u8], format: Format) -> Result<Request, BadRequest> {
    let request = Request::decode(handler, body, format)?;
    if logging::bodies_enabled() {
        request.log(body, format);
    }
    Ok(request)
}

/// The protocol `Error` answer of `kind`.
fn failure(registered: &Registered, handler: Handler, kind: &'static str, message: String) -> (Reply, Outcome) {
    (Reply::Answer(error_body(handler, registered.scenario.version(), kind, message)), Outcome::Error(kind))
}

/// What a call that leads holds: its cache entry, to end with its answer
/// (abandoned if the call is dropped first), and its admission slot.
struct Lead<'a> {
    leading: Leading<'a>,
    permit: Option<Permit>,
}

/// When a call must be answered: the handler's budget, or the client's
/// shorter deadline.
struct Deadline {
    at: Instant,
    handler: Handler,
    budget: Duration,
    /// The client's timeout, when shorter than the budget.
    client: Option<Duration>,
}

impl Deadline {
    fn new(budgets: &Budgets, call: &Call) -> Deadline {
        let (handler, budget) = (call.handler, budgets.of(call.handler));
        let client = call.client_timeout.filter(|client| *client < budget);
        let at = budgets.deadline_within(handler, call.started, client);
        Deadline { at, handler, budget, client }
    }

    /// What the deadline is, for messages.
    fn limit(&self) -> String {
        match self.client {
            Some(client) => format!("the client's deadline of {} ms (grpc-timeout)", client.as_millis()),
            None => format!("the {} ms budget of /{}", self.budget.as_millis(), self.handler),
        }
    }
}

/// Logs a binary body as redacted text, unless it holds more than text
/// format prints in good time.
fn log_body(what: &str, desc: MessageDescriptor, binary: &Bytes) {
    let text = codec::decode_to_print(desc, binary).map_err(|e| e.to_string()).and_then(|mut message| {
        codec::redact::redact(&mut message).map_err(|e| e.to_string())?;
        codec::text::print(&message).map_err(|e| e.to_string())
    });
    log_text(what, text);
}

#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod tests;
