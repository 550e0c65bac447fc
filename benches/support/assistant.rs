//! The assistant's row of the load benchmark: the scenario's own overhead
//! while the model is slow.
//!
//! A mock OpenAI-compatible model in this process (`tests/it/mock_llm.rs`)
//! answers every call after [`MODEL_LATENCY`], far past the `/run` wait, so
//! each `/run` starts a model call, waits [`RUN_WAIT_MS`] and hands over;
//! its latency minus that wait is what the scenario itself costs. A server
//! process of its own points `--llm-base-url` at the mock.
//!
//! At 64 connections about 64 / 0.15 s × 2 s ≈ 850 calls are in flight, past
//! the assistant's default cap of 256, where `/run` declines at once and the
//! run would measure declines. So the cap is raised to [`MAX_IN_FLIGHT`];
//! the answers are still sorted into kinds and printed, to show it held.

#![allow(dead_code)]

use std::time::Duration;

use megamind_core::proto::n_alice::n_scenarios::{TScenarioRunResponse, t_scenario_run_response::Response};
use prost::Message;

use super::{
    Server, bodies,
    drive::{self, Outcome, Settings},
    mock_llm::{MockLlm, Reply},
    ours,
};

/// How long the mock model takes to answer.
pub const MODEL_LATENCY: Duration = Duration::from_secs(2);
/// `--llm-run-wait-ms`: how long `/run` waits for the model (the default).
pub const RUN_WAIT_MS: u64 = 150;
/// `--llm-max-in-flight` for the run.
pub const MAX_IN_FLIGHT: usize = 100_000;
/// The assistant's own default `max_in_flight`.
const DEFAULT_MAX_IN_FLIGHT: usize = 256;
/// What the user says.
const UTTERANCE: &str = "расскажи анекдот";

/// The mock model and the server pointed at it.
pub struct AssistantLoad {
    mock: MockLlm,
    server: Server,
    /// Model calls the runs so far started (one per `/run` not declined).
    calls_started: u64,
}

impl AssistantLoad {
    /// Starts the mock model, then our server with the assistant pointed at it.
    pub async fn start() -> AssistantLoad {
        let answer = "Встречаются два программиста, а поговорить не о чем: у обоих всё работает.";
        let mock = MockLlm::start(Reply::content_after(MODEL_LATENCY, answer)).await;
        let server = ours(&[
            "--llm-base-url",
            &mock.base_url(),
            // The mock answers plain JSON.
            "--llm-stream",
            "false",
            "--llm-run-wait-ms",
            &RUN_WAIT_MS.to_string(),
            "--llm-max-in-flight",
            &MAX_IN_FLIGHT.to_string(),
        ]);
        AssistantLoad { mock, server, calls_started: 0 }
    }

    /// The name of the run's row.
    pub fn row() -> String {
        format!("http /assistant/run, wait {RUN_WAIT_MS} ms")
    }

    /// Drives `POST /assistant/run` with fresh RequestIds at `settings.conns`
    /// connections, then waits for the model calls it started to end.
    ///
    /// Always closed loop and bounded by time: each `/run` takes the wait, so
    /// a request count or a rate meant for the other rows would not fit.
    pub async fn run(&mut self, name: &str, settings: &Settings) -> Outcome {
        let settings = Settings { rate: 0, requests: 0, ..*settings };
        let body = bodies::Stamped::from_text(&run_request_text(), "TScenarioRunRequest");
        let outcome = drive::drive_classified(
            name,
            self.server.addr,
            "/assistant/run",
            &settings,
            drive::fresh_bodies(body),
            Some(classify),
        )
        .await;
        let started = |kind| outcome.kinds.get(kind).copied().unwrap_or(0);
        self.calls_started += started("handover") + started("answered");
        self.drain().await;
        outcome
    }

    /// Waits for the calls still running, so that their ends do not land in
    /// the next run (of any row).
    async fn drain(&self) {
        let served = self.mock.wait_for_served(self.calls_started as usize);
        if tokio::time::timeout(MODEL_LATENCY + Duration::from_secs(10), served).await.is_err() {
            println!(
                "assistant: the model calls did not all end ({} started, {} reached the mock)",
                self.calls_started,
                self.mock.calls()
            );
        }
    }

    /// The lines under the table: the setup, the answers by kind, the
    /// overhead over the wait, and the server's peak RSS.
    pub fn report(&self, outcome: &Outcome) {
        let over = |q: f64| outcome.latency.value_at_quantile(q) as f64 / 1000.0 - RUN_WAIT_MS as f64;
        println!(
            "\nassistant: the mock model answers after {} ms; --llm-run-wait-ms {RUN_WAIT_MS}; \
             --llm-max-in-flight {MAX_IN_FLIGHT} (raised from {DEFAULT_MAX_IN_FLIGHT} so that /run is not declined)",
            MODEL_LATENCY.as_millis()
        );
        let kinds: Vec<String> = outcome.kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
        println!("assistant /run answers in the reported round: {}", kinds.join(", "));
        if outcome.kinds.keys().any(|kind| *kind != "handover") || outcome.errors > 0 {
            println!("assistant: not every /run handed over, so the overhead below mixes in other answers");
        }
        println!(
            "assistant /run overhead over the {RUN_WAIT_MS} ms wait: p50 {:+.2} ms, p90 {:+.2} ms, p99 {:+.2} ms, \
             p99.9 {:+.2} ms",
            over(0.5),
            over(0.9),
            over(0.99),
            over(0.999)
        );
        match self.server.peak_rss_mib() {
            Some(rss) => println!("the assistant server's peak RSS: {rss:.1} MiB"),
            None => println!("the assistant server's peak RSS: unknown (no /proc)"),
        }
    }
}

/// The first turn of a dialog on a phone (the POI fixture's request) with
/// the user's words replaced by [`UTTERANCE`].
fn run_request_text() -> String {
    let text = bodies::fixture_text("poi_run_request");
    let raw = format!("RawUtterance: \"{}\"", capitalized(UTTERANCE));
    let replaced = text
        .replace("RawUtterance: \"Кафе пушкин\"", &raw)
        .replace("Utterance: \"кафе пушкин\"", &format!("Utterance: \"{UTTERANCE}\""));
    assert!(replaced.contains(UTTERANCE) && replaced.contains(&raw), "the fixture's words changed");
    replaced
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// `handover` (ContinueArguments), `declined` (IsIrrelevant, past the cap),
/// `answered` (a ResponseBody), `error` (the protocol Error) or `other`.
fn classify(body: &[u8]) -> &'static str {
    let Ok(answer) = TScenarioRunResponse::decode(body) else { return "undecodable" };
    if answer.features.as_ref().is_some_and(|f| f.is_irrelevant) {
        return "declined";
    }
    match answer.response {
        Some(Response::ContinueArguments(_)) => "handover",
        Some(Response::ResponseBody(_)) => "answered",
        Some(Response::Error(_)) => "error",
        _ => "other",
    }
}
