//! The assistant's dialog row of the load benchmark: answers past the window
//! reach the user without a repeat (the callback contract, docs/callbacks.md).
//!
//! A mock model in this process answers each call after a latency drawn from
//! 0.3-3 s (seeded, so runs are alike); a server process of its own points
//! `--llm-base-url` at it. [`DIALOGS`] dialogs at once each say one thing
//! with the crate's protocol client, which plays `/run` → `/continue` and
//! follows the `CallbackDirective`s as a client does. Printed: the share of
//! dialogs answered without a user repeat (goal 100 %), callback hops per
//! answer, the time from the utterance to the first spoken word of the answer
//! (fillers aside), handler answers past the 300 ms budget (goal 0), and
//! the latency of every hop (each `/run`, `/continue` and callback `/run`).
//!
//! [`DialogLoad::over_replicas`] plays the same dialogs over three server
//! processes sharing one Redis, each hop of a dialog sent to the next
//! replica round-robin (dialog `i` starting on replica `i % 3`), and adds
//! the model calls per answer (goal exactly 1) and the calls the replicas
//! counted as run twice (`megamind_assistant_calls_duplicated_total`).

use std::time::Duration;

use megamind_core::{proto::n_alice::n_scenarios::TScenarioApplyRequest, scenario::Handler};
use megamind_tools::client::{Client, Request, Turn};

use super::{
    Server,
    mock_llm::{MockLlm, Reply},
    ours,
};

/// Dialogs played at once.
pub const DIALOGS: usize = 200;
/// The model's latency is drawn from this range, in ms.
const LATENCY_MS: (u64, u64) = (300, 3000);
/// Each handler's budget.
const BUDGET: Duration = Duration::from_millis(300);
const ANSWER: &str = "Сейчас ровно полдень.";

/// The mock model and the servers pointed at it: one, or replicas.
pub struct DialogLoad {
    mock: MockLlm,
    servers: Vec<Server>,
}

/// Hop latency of a row, for the rows printed beside it.
#[derive(Debug, Clone, Copy)]
pub struct HopLatency {
    pub p50: Duration,
    pub p99: Duration,
}

/// What one dialog's turn came to.
struct Played {
    answered: bool,
    callbacks: usize,
    to_answer: Duration,
    /// Each hop's time.
    took: Vec<Duration>,
}

impl Played {
    /// Handler answers past the budget.
    fn late(&self) -> usize {
        self.took.iter().filter(|took| **took > BUDGET).count()
    }
}

impl DialogLoad {
    /// Starts the mock model with [`DIALOGS`] latencies queued, then one server.
    pub async fn start() -> DialogLoad {
        let mock = seeded_mock().await;
        let servers = vec![ours(&server_args(&mock))];
        DialogLoad { mock, servers }
    }

    /// As [`DialogLoad::start`], with [`REPLICAS`] servers sharing the Redis at `store_url`.
    pub async fn over_replicas(store_url: &str) -> DialogLoad {
        let mock = seeded_mock().await;
        let mut args = server_args(&mock);
        args.extend(["--store-url".into(), store_url.into(), "--store-timeout-ms".into(), STORE_TIMEOUT_MS.into()]);
        DialogLoad { mock, servers: (0..REPLICAS).map(|_| ours(&args)).collect() }
    }

    /// Plays the dialogs, prints the row (with `single`, the one-server
    /// row's hop latency, beside it) and gives its hop latency.
    pub async fn run(&self, single: Option<HopLatency>) -> HopLatency {
        let bases: Vec<String> = self.servers.iter().map(|server| format!("http://{}", server.addr)).collect();
        let bases: Vec<&str> = bases.iter().map(String::as_str).collect();
        // Built ahead: building an HTTP client is work that would otherwise
        // delay the answers of the dialogs already talking.
        let clients: Vec<Client> = (0..DIALOGS)
            .map(|i| {
                let client = Client::http_round_robin(&bases, i).expect("a client").with_scenario("assistant");
                client.with_request_id_prefix(&format!("dialog-{i}-"))
            })
            .collect();
        // Each client opens its connection to every server first, as
        // Megamind's balancer keeps connections open: otherwise each hop to
        // a replica not called yet opens one, all dialogs at the same moment.
        // A `/continue` without arguments is answered `bad_request` at once;
        // one per server brings the round-robin back to the dialog's first.
        let warm = clients.iter().map(|client| async move {
            for _ in &self.servers {
                let _ = client.call(Request::Continue(TScenarioApplyRequest::default())).await;
            }
        });
        futures_util::future::join_all(warm).await;
        let dialogs = clients.into_iter().enumerate().map(|(i, mut client)| async move {
            match client.say("который час?").await {
                Ok(turn) => Some(played(&turn)),
                Err(error) => {
                    println!("dialog {i}: {error}");
                    None
                }
            }
        });
        let played: Vec<Played> = futures_util::future::join_all(dialogs).await.into_iter().flatten().collect();
        self.report(&played, single)
    }

    fn report(&self, played: &[Played], single: Option<HopLatency>) -> HopLatency {
        let n = played.len().max(1) as f64;
        let answered = played.iter().filter(|p| p.answered).count();
        let to_answer = sorted(played.iter().filter(|p| p.answered).map(|p| p.to_answer));
        let hop_took = sorted(played.iter().flat_map(|p| p.took.iter().copied()));
        let hops = HopLatency { p50: at(&hop_took, 0.5), p99: at(&hop_took, 0.99) };
        let callbacks: usize = played.iter().map(|p| p.callbacks).sum();
        let max_callbacks = played.iter().map(|p| p.callbacks).max().unwrap_or(0);
        let late: usize = played.iter().map(|p| p.late()).sum();
        let slowest = hop_took.last().copied().unwrap_or_default();
        let over = match self.servers.len() {
            1 => "one server".to_owned(),
            n => format!("{n} replicas sharing one Redis, each hop to the next replica"),
        };
        println!(
            "\nassistant dialogs over {over}: {DIALOGS} at once, the model's latency drawn from {}-{} ms, callbacks \
             followed",
            LATENCY_MS.0, LATENCY_MS.1
        );
        println!(
            "  answered without a user repeat: {answered}/{} ({:.1} %); callback hops per answer: mean {:.2}, max \
             {max_callbacks}",
            played.len(),
            100.0 * answered as f64 / n,
            callbacks as f64 / n
        );
        println!(
            "  from the utterance to the first word of the answer: p50 {}, p99 {}; handler answers past the {} ms \
             budget: {late}; the slowest handler answer: {}",
            ms(at(&to_answer, 0.5)),
            ms(at(&to_answer, 0.99)),
            BUDGET.as_millis(),
            ms(slowest)
        );
        let beside =
            single.map_or(String::new(), |single| format!(" (one server in this run: p99 {})", ms(single.p99)));
        println!("  hop latency over {} hops: p50 {}, p99 {}{beside}", hop_took.len(), ms(hops.p50), ms(hops.p99));
        println!(
            "  model calls: {} for {} dialogs ({:.2} per answer); the servers counted {} answers past 300 ms, {} \
             past a budget, {} model calls run twice",
            self.mock.calls(),
            played.len(),
            self.mock.calls() as f64 / answered.max(1) as f64,
            self.late_by_servers(),
            self.counted("megamind_budget_overruns_total"),
            self.counted("megamind_assistant_calls_duplicated_total"),
        );
        hops
    }

    /// Counter `name` summed over its series on every server's `/metrics`,
    /// `?` when a server did not answer: what the servers saw themselves,
    /// apart from what the client adds.
    fn counted(&self, name: &str) -> String {
        let mut total = 0.0;
        for server in &self.servers {
            let Some(text) = server.metrics() else { return "?".into() };
            let series =
                text.lines().filter(|line| line.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])));
            total += series.filter_map(value).sum::<f64>();
        }
        format!("{total:.0}")
    }
}

impl DialogLoad {
    /// The assistant's handler answers each server saw itself take past
    /// 300 ms from their arrival (its `megamind_request_duration_seconds`),
    /// `?` when a server did not answer.
    fn late_by_servers(&self) -> String {
        let mut late = 0.0;
        for server in &self.servers {
            let Some(text) = server.metrics() else { return "?".into() };
            let series = |prefix: &str, label: &str| -> f64 {
                let lines = text.lines().filter(|line| line.starts_with(prefix) && line.contains(label));
                lines.filter(|line| line.contains("scenario=\"assistant\"")).filter_map(value).sum()
            };
            late += series("megamind_request_duration_seconds_count", "")
                - series("megamind_request_duration_seconds_bucket", "le=\"0.3\"");
        }
        format!("{late:.0}")
    }
}

fn value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

/// Replicas of the replicated row.
pub const REPLICAS: usize = 3;
/// `--store-timeout-ms` of the replicas: the default 20 ms is a bound for a
/// Redis on a host of its own; here the client, three servers and Redis
/// share two busy cores, and a command waiting for a core past 20 ms would
/// mark the store down (then calls run on several replicas).
pub const STORE_TIMEOUT_MS: &str = "100";

/// The mock model with [`DIALOGS`] seeded latencies queued.
async fn seeded_mock() -> MockLlm {
    let mock = MockLlm::start(Reply::content(ANSWER)).await;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..DIALOGS {
        // xorshift64: no dependency for a seeded draw.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = LATENCY_MS.0 + seed % (LATENCY_MS.1 - LATENCY_MS.0);
        mock.push(Reply::content_after(Duration::from_millis(delay), ANSWER));
    }
    mock
}

fn server_args(mock: &MockLlm) -> Vec<String> {
    let args = ["--llm-base-url", &mock.base_url(), "--llm-stream", "false", "--llm-warmup", "off"];
    args.map(str::to_owned).to_vec()
}

fn sorted(durations: impl Iterator<Item = Duration>) -> Vec<Duration> {
    let mut sorted: Vec<Duration> = durations.collect();
    sorted.sort_unstable();
    sorted
}

/// The `q` quantile of `sorted` (zero when empty).
fn at(sorted: &[Duration], q: f64) -> Duration {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The turn's numbers: answered when its last answer is the model's (not the
/// apology, not a hold left unanswered); the time to the answer is the sum of
/// the handlers' times up to the first answer that is not a hold, which is
/// the time a client following callbacks at once waits.
fn played(turn: &Turn) -> Played {
    let intent = |hop: &megamind_tools::client::Hop| {
        hop.response.body().and_then(|body| body.analytics_info.as_ref()).map(|info| info.intent.clone())
    };
    let final_intent = turn.body().analytics_info.as_ref().map_or(String::new(), |info| info.intent.clone());
    let answered = final_intent != "assistant.apology" && final_intent != "assistant.hold";
    let mut to_answer = Duration::ZERO;
    for hop in &turn.hops {
        to_answer += hop.took;
        if intent(hop).is_some_and(|intent| intent != "assistant.hold") {
            break;
        }
    }
    Played {
        answered,
        callbacks: turn.hops.iter().filter(|hop| hop.handler() == Handler::Run).count().saturating_sub(1),
        to_answer,
        took: turn.hops.iter().map(|hop| hop.took).collect(),
    }
}
