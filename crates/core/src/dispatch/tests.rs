//! Tests of the pipeline: authentication before the cache, refusals, tickets reaching the scenario,
//! panics and work cut off, and what a repeat of them gets.

use std::sync::Arc;

use prost::Message;
use tokio::time::Instant;

use super::*;
use crate::{
    proto::n_alice::n_scenarios::{
        TScenarioApplyRequest, TScenarioBaseRequest, TScenarioCommitResponse, TScenarioFeatures, TScenarioRunRequest,
        TScenarioRunResponse, t_scenario_commit_response, t_scenario_run_response,
    },
    rules::idempotency::Limits,
    scenario::{Scenario, ScenarioResult, meta::CallMeta},
};

/// Answers every `/run` with its user ticket as `Version`.
pub(super) struct Echo;

#[async_trait::async_trait]
impl Scenario for Echo {
    async fn run(&self, _: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        Ok(TScenarioRunResponse { version: ctx.meta.user_ticket.unwrap_or_default(), ..Default::default() }.into())
    }
}

/// Lets in only callers with a user ticket.
#[derive(Debug)]
struct TicketRequired;

impl Authenticator for TicketRequired {
    fn authenticate(&self, meta: &CallMeta) -> Check {
        Check::Done(match meta.user_ticket {
            Some(_) => Ok(Admitted::default()),
            None => Err(Refusal::Forbidden("a user ticket is needed".into())),
        })
    }
}

fn dispatcher(max_in_flight: usize) -> Dispatcher {
    let mut registry = Registry::new();
    registry.register("echo", Arc::new(Echo)).unwrap();
    let cache = IdempotencyCache::new(Limits::default());
    let admission = Admission::new(max_in_flight, 0);
    Dispatcher::new(registry, Some("echo"), DispatchLimits::default(), cache, admission, ServerMetrics::new())
}

/// A dispatcher of `scenario` alone, under `name`, with `limits`.
fn dispatcher_of(name: &str, scenario: Arc<dyn Scenario>, limits: DispatchLimits) -> Dispatcher {
    let mut registry = Registry::new();
    registry.register(name, scenario).unwrap();
    let (cache, admission) = (IdempotencyCache::new(Limits::default()), Admission::new(8, 0));
    Dispatcher::new(registry, None, limits, cache, admission, ServerMetrics::new())
}

pub(super) fn run_call(request_id: &str, user_ticket: Option<&str>) -> Call {
    let base_request = Some(TScenarioBaseRequest { request_id: request_id.into(), ..Default::default() });
    Call {
        handler: Handler::Run,
        body: TScenarioRunRequest { base_request, ..Default::default() }.encode_to_vec().into(),
        format: Format::Binary,
        started: Instant::now(),
        client_timeout: None,
        meta: CallMeta { user_ticket: user_ticket.map(str::to_owned), ..CallMeta::default() },
        transport: Transport::Http,
        admitted: None,
    }
}

pub(super) fn version(reply: Reply) -> String {
    let Reply::Answer(body) = reply else { panic!("an answer: {reply:?}") };
    TScenarioRunResponse::decode(body).unwrap().version
}

#[tokio::test]
async fn the_scenario_gets_the_callers_tickets() {
    let dispatcher = dispatcher(8);
    let echo = dispatcher.scenario(None).unwrap();
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("3:user:u"))).await), "3:user:u");
}

#[tokio::test]
async fn a_refused_caller_gets_no_cached_answer() {
    let dispatcher = dispatcher(8).with_authenticator(Arc::new(TicketRequired));
    let echo = dispatcher.scenario(None).unwrap();
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("3:user:u"))).await), "3:user:u");
    // The answer of `r1` is cached now; a caller without a ticket is still refused.
    let refused = dispatcher.dispatch(echo, run_call("r1", None)).await;
    assert_eq!(refused, Reply::Refused(Refusal::Forbidden("a user ticket is needed".into())));
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("another"))).await), "3:user:u");
}

#[tokio::test]
async fn run_is_refused_at_the_limit_but_a_repeat_replays() {
    let dispatcher = dispatcher(8);
    let echo = dispatcher.scenario(None).unwrap();
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", Some("first"))).await), "first");
    let _held: Vec<_> = std::iter::from_fn(|| dispatcher.admission.try_admit(Handler::Run)).collect();
    assert_eq!(dispatcher.dispatch(echo, run_call("r2", None)).await, Reply::Refused(Refusal::Overloaded));
    assert_eq!(version(dispatcher.dispatch(echo, run_call("r1", None)).await), "first");
}

/// A check that never ends, counting how often the dispatcher gave up on it.
#[derive(Debug, Default)]
struct NeverDecides {
    cut_short: std::sync::atomic::AtomicUsize,
}

impl Authenticator for NeverDecides {
    fn authenticate(&self, _: &CallMeta) -> Check {
        Check::Pending(futures_util::future::pending().boxed())
    }

    fn cut_short(&self) {
        self.cut_short.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn a_check_cut_short_by_the_deadline_is_refused_and_the_authenticator_told() {
    let never = Arc::new(NeverDecides::default());
    let dispatcher = dispatcher(8).with_authenticator(never.clone());
    let echo = dispatcher.scenario(None).unwrap();
    let refused = dispatcher.dispatch(echo, run_call("r1", None)).await;
    let why = "the caller's tickets could not be checked in time".to_owned();
    assert_eq!(refused, Reply::Refused(Refusal::Forbidden(why)));
    assert_eq!(never.cut_short.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_run_error_has_its_features_as_every_run_answer_does() {
    let dispatcher = dispatcher(8);
    let echo = dispatcher.scenario(None).unwrap();
    let mut call = run_call("r1", None);
    call.body = bytes::Bytes::from_static(b"\xff\xff not protobuf");
    let Reply::Answer(body) = dispatcher.dispatch(echo, call).await else { panic!("an answer") };
    let answer = TScenarioRunResponse::decode(body).unwrap();
    assert!(matches!(answer.response, Some(t_scenario_run_response::Response::Error(_))), "{answer:?}");
    assert_eq!(answer.features, Some(TScenarioFeatures::default()));
}

/// Panics quoting its request's words, as a `serde_json` error unwrapped would.
struct QuotingPanic;

#[async_trait::async_trait]
impl Scenario for QuotingPanic {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let words = "мой адрес улица Пушкина ".repeat(200);
        panic!("invalid type: string {words:?}, expected a number");
    }
}

#[tokio::test]
async fn a_scenario_s_panic_is_answered_without_the_words_it_quotes() {
    let dispatcher = dispatcher_of("quoting", Arc::new(QuotingPanic), DispatchLimits::default());
    let scenario = dispatcher.scenario(Some("quoting")).unwrap();
    let Reply::Answer(body) = dispatcher.dispatch(scenario, run_call("r-1", None)).await else { panic!("refused") };
    let Some(t_scenario_run_response::Response::Error(error)) = TScenarioRunResponse::decode(body).unwrap().response
    else {
        panic!("no error")
    };
    assert_eq!(error.r#type, "internal");
    assert!(error.message.starts_with("the scenario panicked: invalid type: string"), "{}", error.message);
    assert!(!error.message.contains("Пушкина") && error.message.len() < 400, "{}", error.message);
}

/// Counts its calls; `/run` and `/commit` panic, or `/commit` hangs when
/// told to, as a side effect cut off midway would.
#[derive(Default)]
struct Faulty {
    runs: std::sync::atomic::AtomicUsize,
    commits: std::sync::atomic::AtomicUsize,
    hang: bool,
    /// A hung `/commit` panics as it is dropped.
    drop_panics: bool,
}

/// Panics as it is dropped: a scenario's state with a bug in its `Drop`.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        panic!("a bug in a drop");
    }
}

#[async_trait::async_trait]
impl Scenario for Faulty {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        panic!("a bug in /run");
    }

    async fn commit(&self, _: TScenarioApplyRequest, _: CallContext) -> ScenarioResult<TScenarioCommitResponse> {
        self.commits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.hang {
            // Not `then_some`: its argument is made, and dropped, either way.
            let _state = if self.drop_panics { Some(PanicsOnDrop) } else { None };
            std::future::pending::<()>().await;
        }
        panic!("a bug halfway through the payment");
    }
}

fn faulty_dispatcher(scenario: Arc<Faulty>, detach_limit: std::time::Duration) -> Dispatcher {
    dispatcher_of("faulty", scenario, DispatchLimits { detach_limit, ..DispatchLimits::default() })
}

pub(super) fn commit_call(request_id: &str) -> Call {
    let base_request = Some(TScenarioBaseRequest { request_id: request_id.into(), ..Default::default() });
    let body = TScenarioApplyRequest { base_request, ..Default::default() }.encode_to_vec().into();
    Call { handler: Handler::Commit, body, ..run_call(request_id, None) }
}

/// The error a `/commit` answered with: its type and message.
pub(super) fn commit_error(reply: &Reply) -> (String, String) {
    let Reply::Answer(body) = reply else { panic!("an answer: {reply:?}") };
    let answer = TScenarioCommitResponse::decode(body.clone()).unwrap();
    let Some(t_scenario_commit_response::Response::Error(error)) = answer.response else { panic!("{answer:?}") };
    (error.r#type, error.message)
}

#[tokio::test]
async fn a_side_effect_that_panicked_is_not_run_again_by_a_repeat_a_run_is() {
    let scenario = Arc::new(Faulty::default());
    let dispatcher = faulty_dispatcher(scenario.clone(), std::time::Duration::from_secs(30));
    let faulty = dispatcher.scenario(Some("faulty")).unwrap();
    let first = dispatcher.dispatch(faulty, commit_call("pay-1")).await;
    assert_eq!(commit_error(&first).0, "internal");
    let repeat = dispatcher.dispatch(faulty, commit_call("pay-1")).await;
    assert_eq!(format!("{repeat:?}"), format!("{first:?}"), "the same answer, replayed");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 1, "the payment ran once");
    // `/run` has no side effect: a repeat runs it again, and may succeed.
    for _ in 0..2 {
        dispatcher.dispatch(faulty, run_call("ask-1", None)).await;
    }
    assert_eq!(scenario.runs.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_side_effect_running_as_the_server_stops_is_ended_as_one_not_to_run_again() {
    let scenario = Arc::new(Faulty { hang: true, ..Faulty::default() });
    let dispatcher = faulty_dispatcher(scenario.clone(), std::time::Duration::from_secs(30));
    let faulty = dispatcher.scenario(Some("faulty")).unwrap();
    let call = Call { client_timeout: Some(std::time::Duration::from_millis(100)), ..commit_call("pay-stop") };
    assert_eq!(commit_error(&dispatcher.dispatch(faulty, call).await).0, "timeout");
    // The server stops, its drain leaving the work 200 ms (its detach limit is 30 s).
    let left = dispatcher.cache().background().settle(std::time::Duration::from_millis(200)).await;
    assert_eq!(left, 0, "the work was stopped and its entry ended in time");
    let (kind, message) = commit_error(&dispatcher.dispatch(faulty, commit_call("pay-stop")).await);
    assert_eq!(kind, "timeout");
    assert!(message.contains("may have run in part, and is not run again"), "{message}");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 1, "the payment was entered once");
}

#[tokio::test]
async fn a_side_effect_whose_budget_was_spent_on_its_body_is_answered_timeout_and_not_run() {
    let scenario = Arc::new(Faulty::default());
    let dispatcher = faulty_dispatcher(scenario.clone(), std::time::Duration::from_secs(30));
    let faulty = dispatcher.scenario(Some("faulty")).unwrap();
    // No client deadline (HTTP): the body came as the budget ran out.
    let late = Call { started: Instant::now() - std::time::Duration::from_millis(400), ..commit_call("pay-late") };
    let (kind, message) = commit_error(&dispatcher.dispatch(faulty, late).await);
    assert_eq!(kind, "timeout");
    assert!(message.contains("the 300 ms budget of /commit left no time to run the call"), "{message}");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 0, "the payment never ran");
}

/// A `/commit` of `scenario` (which hangs) with a client's deadline of 100
/// ms, answered `timeout` while the work goes on 100 ms more, then a repeat
/// that waits for the work, stopped before the repeat's budget ends: the
/// repeat's error, type and message.
async fn stopped_at_the_detach_limit(scenario: Arc<Faulty>, id: &str) -> (Dispatcher, (String, String)) {
    let dispatcher = faulty_dispatcher(scenario, std::time::Duration::from_millis(100));
    let faulty = dispatcher.scenario(Some("faulty")).unwrap();
    let call = Call { client_timeout: Some(std::time::Duration::from_millis(100)), ..commit_call(id) };
    assert_eq!(commit_error(&dispatcher.dispatch(faulty, call).await).0, "timeout");
    let repeat = dispatcher.dispatch(faulty, commit_call(id)).await;
    (dispatcher, commit_error(&repeat))
}

#[tokio::test]
async fn a_side_effect_stopped_at_the_detach_limit_is_not_run_again_by_a_repeat() {
    let scenario = Arc::new(Faulty { hang: true, ..Faulty::default() });
    let (dispatcher, (kind, message)) = stopped_at_the_detach_limit(scenario.clone(), "pay-2").await;
    assert_eq!(kind, "timeout");
    assert!(message.contains("may have run in part, and is not run again"), "{message}");
    let faulty = dispatcher.scenario(Some("faulty")).unwrap();
    let again = dispatcher.dispatch(faulty, commit_call("pay-2")).await;
    assert_eq!(commit_error(&again), (kind, message), "kept for every repeat");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 1, "the payment began once");
}

/// Stopped at the detach limit, work whose state panics as it drops still
/// ends its lease: it once left the lease held, and a repeat after it ran
/// out ran the payment again.
#[tokio::test]
async fn a_side_effect_whose_drop_panics_at_the_detach_limit_is_not_run_again() {
    let scenario = Arc::new(Faulty { hang: true, drop_panics: true, ..Faulty::default() });
    let (_, (kind, message)) = stopped_at_the_detach_limit(scenario.clone(), "pay-3").await;
    assert_eq!(kind, "timeout");
    assert!(message.contains("may have run in part, and is not run again"), "{message}");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 1, "the payment began once");
}

/// A `/commit` that waits to be let go, as a payment waits on its service.
#[derive(Default)]
pub(super) struct Gated {
    commits: std::sync::atomic::AtomicUsize,
    pub(super) started: tokio::sync::Notify,
    pub(super) gate: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Scenario for Gated {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        Ok(TScenarioRunResponse::default().into())
    }

    async fn commit(&self, _: TScenarioApplyRequest, _: CallContext) -> ScenarioResult<TScenarioCommitResponse> {
        self.commits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.started.notify_one();
        self.gate.notified().await;
        Ok(TScenarioCommitResponse { version: "paid".into(), ..Default::default() }.into())
    }
}

#[tokio::test]
async fn a_side_effect_whose_caller_hangs_up_runs_to_its_end_and_a_repeat_gets_its_answer() {
    let scenario = Arc::new(Gated::default());
    let dispatcher = dispatcher_of("gated", scenario.clone(), DispatchLimits::default());
    let gated = dispatcher.scenario(Some("gated")).unwrap();
    // The client hangs up while the payment is under way: its call is dropped.
    tokio::select! {
        _ = dispatcher.dispatch(gated, commit_call("pay-3")) => panic!("the payment was let go by no one"),
        () = scenario.started.notified() => {}
    }
    // Let go after the call is gone: the payment still ends, and its answer is kept.
    scenario.gate.notify_one();
    let Reply::Answer(body) = dispatcher.dispatch(gated, commit_call("pay-3")).await else { panic!("refused") };
    assert_eq!(TScenarioCommitResponse::decode(body).unwrap().version, "paid");
    assert_eq!(scenario.commits.load(std::sync::atomic::Ordering::SeqCst), 1, "the payment ran once");
}

/// Answers every `/run` with the protocol `Error` whose type is its
/// RequestId: a scenario's own error answer, not a `ScenarioError`.
struct ErrorAnswers;

#[async_trait::async_trait]
impl Scenario for ErrorAnswers {
    async fn run(&self, request: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        let kind = request.base_request.unwrap_or_default().request_id;
        let error = crate::proto::n_alice::n_scenarios::TError { r#type: kind, message: "its own".into() };
        Ok(TScenarioRunResponse {
            response: Some(t_scenario_run_response::Response::Error(error)),
            ..Default::default()
        }
        .into())
    }
}

#[tokio::test]
async fn a_scenario_s_own_error_answer_counts_as_that_error_and_its_own_types_as_error() {
    let dispatcher = dispatcher_of("errs", Arc::new(ErrorAnswers), DispatchLimits::default());
    let errs = dispatcher.scenario(Some("errs")).unwrap();
    for kind in ["upstream", "payment_declined", "ok", "replay"] {
        dispatcher.dispatch(errs, run_call(kind, None)).await;
    }
    let text = dispatcher.metrics().render();
    let count = |outcome: &str| {
        let series = format!(
            r#"megamind_requests_total{{handler="run",outcome="{outcome}",scenario="errs",transport="http"}} "#
        );
        text.lines()
            .find_map(|line| line.strip_prefix(&series))
            .unwrap_or_else(|| panic!("{series}\n{text}"))
            .to_owned()
    };
    assert_eq!(count("upstream"), "1");
    assert_eq!(count("error"), "3", "types of its own, and the server's own outcomes, count as error");
    assert_eq!(count("ok"), "0");
}
