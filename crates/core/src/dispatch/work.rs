//! The run step's work: the scenario's handler called, its answer encoded,
//! a panic caught; and work past its budget finishing in the background.

use std::{panic::AssertUnwindSafe, sync::Arc};

use bytes::Bytes;
use futures_util::FutureExt;
use tokio::{sync::oneshot, time::Instant};

use super::{
    Outcome, Reply,
    request::Request,
    wire::{encode, error_body},
};
use crate::{
    rules::{
        idempotency::{IdempotencyCache, Leading},
        logging,
        overload::Permit,
    },
    scenario::{CallContext, Handler, Scenario, ScenarioError},
    store::Lease,
};

/// Lets work finish in a task of its own, holding its admission slot, so
/// that its answer completes the idempotency entry whoever waits for it:
/// work that overran its budget, and a side effect, which its caller
/// hanging up must not cut midway. At `until` the work is dropped: its
/// lease is abandoned, for a repeat to run it again, or ended with
/// `unfinished` when one must not (a side effect that may have run in
/// part); so is it when the server stopping can wait no longer. Once the
/// entry is ended, what the work ended with goes to `done`, if anyone
/// still waits there.
pub(super) fn detach(
    work: impl Future<Output = Finished> + Send + 'static,
    cache: IdempotencyCache,
    lease: Lease,
    permit: Option<Permit>,
    (until, unfinished): (Instant, Option<Bytes>),
    done: Option<oneshot::Sender<Finished>>,
) {
    let stopping = cache.background().stopping();
    cache.background().clone().spawn(async move {
        let _permit = permit;
        // The work is dropped at `until` (or as the server stops) inside
        // this block, so that a panic as it drops (a scenario's own `Drop`;
        // its handler's panics are caught in `run_scenario`) is caught too:
        // the lease is ended all the same, never left for a repeat to run a
        // side effect again.
        let bounded = async move {
            tokio::select! {
                finished = tokio::time::timeout_at(until, work) => finished.ok(),
                () = stopping => None,
            }
        };
        let (answer, finished) = match AssertUnwindSafe(bounded).catch_unwind().await {
            Ok(Some(finished)) => (finished.keep.then(|| finished.body.clone()), Some(finished)),
            Ok(None) | Err(_) => (unfinished, None),
        };
        if let Err(error) = cache.end(lease, answer).await {
            tracing::warn!(%error, "the lease of work in a task of its own was not ended; it runs out by its TTL");
        }
        if let (Some(done), Some(finished)) = (done, finished) {
            let _ = done.send(finished);
        }
    });
}

/// What a scenario's work ended with.
pub(super) struct Finished {
    body: Bytes,
    outcome: Outcome,
    /// Whether repeats may replay the answer: not after a panic of a
    /// handler without side effects, so that a retry runs again.
    keep: bool,
}

impl Finished {
    /// The call's reply, once its entry is ended elsewhere.
    pub(super) fn into_reply(self) -> (Reply, Outcome) {
        (Reply::Answer(self.body), self.outcome)
    }

    /// Ends the lease with this answer and gives it back to the caller. An
    /// answer the cache could not keep is still the caller's.
    pub(super) fn end(self, leading: Leading<'_>) -> impl Future<Output = (Reply, Outcome)> + Send + '_ {
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
/// error, kept for repeats only where the handler has a side effect: that
/// may have run in part, and a repeat must not run it again.
pub(super) async fn run_scenario(
    scenario: Arc<dyn Scenario>,
    handler: Handler,
    request: Request,
    ctx: CallContext,
) -> Finished {
    let result = AssertUnwindSafe(call_handler(&*scenario, handler, request, ctx)).catch_unwind().await;
    let (body, outcome) = match result {
        // A scenario's own `Error` answer counts as that error.
        Ok(Ok((body, error))) => (body, error.map_or(Outcome::Ok, Outcome::Error)),
        Ok(Err(error)) => {
            let kind = error.error_type();
            (error_body(handler, scenario.version(), kind, error.to_string()), Outcome::Error(kind))
        }
        Err(panic) => {
            // A panic's message may quote what the scenario choked on (a
            // client's string, a slice of the utterance): shortened as a
            // body's problems are, and logged as a field, which the log
            // line escapes and caps.
            let panicked = crate::codec::quote::sanitize(logging::panics::message(&*panic));
            // A scenario that panics on every request writes a line a second.
            static PANICKED: logging::Throttle = logging::Throttle::new();
            if let Some(left_out) = PANICKED.due() {
                tracing::error!(handler = handler.as_str(), panic = %panicked, left_out, "the scenario panicked");
            }
            let message = format!("the scenario panicked: {panicked}");
            let body = error_body(handler, scenario.version(), "internal", message);
            return Finished { body, outcome: Outcome::Error("internal"), keep: handler.has_side_effect() };
        }
    };
    Finished { body, outcome, keep: true }
}

async fn call_handler(
    scenario: &dyn Scenario,
    handler: Handler,
    request: Request,
    ctx: CallContext,
) -> Result<(Bytes, Option<&'static str>), ScenarioError> {
    let (body, error) = match (handler, request) {
        (Handler::Run, Request::Run(request)) => encode(scenario, scenario.run(*request, ctx).await?),
        (Handler::Continue, Request::Apply(request)) => encode(scenario, scenario.r#continue(*request, ctx).await?),
        (Handler::Commit, Request::Apply(request)) => encode(scenario, scenario.commit(*request, ctx).await?),
        (Handler::Apply, Request::Apply(request)) => encode(scenario, scenario.apply(*request, ctx).await?),
        (handler, _) => return Err(ScenarioError::Internal(format!("request type does not match /{handler}"))),
    };
    Ok((body.into(), error))
}
