//! Scenarios that misbehave on purpose, for the server's rules to handle.

#![allow(dead_code)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use megamind_core::{
    proto::n_alice::n_scenarios::{
        TCommitSuccess, TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest, TScenarioRunResponse,
        t_scenario_commit_response,
    },
    scenario::{CallContext, Scenario, ScenarioError, ScenarioResult},
};
use tokio::sync::{Notify, Semaphore};

/// Counts its calls; `/run` answers an empty response, `/commit` Success.
/// Each call first waits for a permit of `gate` when one is set, so tests
/// can hold calls in flight and release them when they choose.
#[derive(Default)]
pub struct Counting {
    pub runs: AtomicUsize,
    pub commits: AtomicUsize,
    pub gate: Option<Arc<Semaphore>>,
    pub entered: Arc<Notify>,
}

impl Counting {
    pub fn gated(gate: Arc<Semaphore>) -> Counting {
        Counting { gate: Some(gate), ..Counting::default() }
    }

    async fn pass_gate(&self) {
        self.entered.notify_waiters();
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("gate open").forget();
        }
    }
}

#[async_trait]
impl Scenario for Counting {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.pass_gate().await;
        Ok(TScenarioRunResponse { version: "counting".into(), ..Default::default() }.into())
    }

    async fn commit(&self, _: TScenarioApplyRequest, _: CallContext) -> ScenarioResult<TScenarioCommitResponse> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.pass_gate().await;
        Ok(TScenarioCommitResponse {
            response: Some(t_scenario_commit_response::Response::Success(TCommitSuccess {})),
            version: "counting".into(),
        }
        .into())
    }
}

/// Sleeps `delay` in every handler, then answers; tells `done` when finished.
pub struct Sleepy {
    pub delay: Duration,
    pub done: Arc<Notify>,
    pub commits: AtomicUsize,
}

impl Sleepy {
    pub fn new(delay: Duration) -> Sleepy {
        Sleepy { delay, done: Arc::new(Notify::new()), commits: AtomicUsize::new(0) }
    }
}

#[async_trait]
impl Scenario for Sleepy {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        tokio::time::sleep(self.delay).await;
        Ok(TScenarioRunResponse::default().into())
    }

    async fn commit(&self, _: TScenarioApplyRequest, _: CallContext) -> ScenarioResult<TScenarioCommitResponse> {
        tokio::time::sleep(self.delay).await;
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.done.notify_one();
        Ok(TScenarioCommitResponse {
            response: Some(t_scenario_commit_response::Response::Success(TCommitSuccess {})),
            version: "sleepy".into(),
        }
        .into())
    }
}

/// Panics in `/run`; fails `/commit` with an upstream error.
pub struct Panicking;

#[async_trait]
impl Scenario for Panicking {
    async fn run(&self, _: TScenarioRunRequest, _: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        panic!("scenario bug on purpose");
    }

    async fn commit(&self, _: TScenarioApplyRequest, _: CallContext) -> ScenarioResult<TScenarioCommitResponse> {
        Err(ScenarioError::Upstream("payment service said 503".into()))
    }
}

/// Answers `/run` with the user ticket it was given as `Version`.
pub struct TicketEcho;

#[async_trait]
impl Scenario for TicketEcho {
    async fn run(&self, _: TScenarioRunRequest, ctx: CallContext) -> ScenarioResult<TScenarioRunResponse> {
        Ok(TScenarioRunResponse {
            version: ctx.meta.user_ticket.unwrap_or_else(|| "no ticket".into()),
            ..Default::default()
        }
        .into())
    }
}
