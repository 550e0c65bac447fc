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
//! (fillers aside), and handler answers past the 300 ms budget (goal 0).

use std::time::Duration;

use megamind_core::scenario::Handler;
use megamind_tools::client::{Client, Turn};

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

/// The mock model and the server pointed at it.
pub struct DialogLoad {
    mock: MockLlm,
    server: Server,
}

/// What one dialog's turn came to.
struct Played {
    answered: bool,
    hops: usize,
    to_answer: Duration,
    late: usize,
    slowest: Duration,
}

impl DialogLoad {
    /// Starts the mock model with [`DIALOGS`] latencies queued, then the server.
    pub async fn start() -> DialogLoad {
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
        let server = ours(&["--llm-base-url", &mock.base_url(), "--llm-stream", "false", "--llm-warmup", "off"]);
        DialogLoad { mock, server }
    }

    /// Plays the dialogs and prints the row.
    pub async fn run(&self) {
        let base = format!("http://{}", self.server.addr);
        // Built ahead: building an HTTP client is work that would otherwise
        // delay the answers of the dialogs already talking.
        let clients: Vec<Client> = (0..DIALOGS)
            .map(|i| {
                let client = Client::http(&base).expect("a client").with_scenario("assistant");
                client.with_request_id_prefix(&format!("dialog-{i}-"))
            })
            .collect();
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
        self.report(&played);
    }

    fn report(&self, played: &[Played]) {
        let n = played.len().max(1) as f64;
        let answered = played.iter().filter(|p| p.answered).count();
        let mut to_answer: Vec<Duration> = played.iter().filter(|p| p.answered).map(|p| p.to_answer).collect();
        to_answer.sort_unstable();
        let at = |q: f64| to_answer.get(((to_answer.len() as f64 - 1.0) * q).round() as usize).copied();
        let ms = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1000.0));
        let hops: usize = played.iter().map(|p| p.hops).sum();
        let max_hops = played.iter().map(|p| p.hops).max().unwrap_or(0);
        let late: usize = played.iter().map(|p| p.late).sum();
        let slowest = played.iter().map(|p| p.slowest).max().unwrap_or_default();
        println!(
            "\nassistant dialogs: {DIALOGS} at once, the model's latency drawn from {}-{} ms, callbacks followed",
            LATENCY_MS.0, LATENCY_MS.1
        );
        println!(
            "  answered without a user repeat: {answered}/{} ({:.1} %); callback hops per answer: mean {:.2}, max \
             {max_hops}",
            played.len(),
            100.0 * answered as f64 / n,
            hops as f64 / n
        );
        println!(
            "  from the utterance to the first word of the answer: p50 {}, p99 {}; handler answers past the {} ms \
             budget: {late}; the slowest handler answer: {:.1} ms",
            ms(at(0.5)),
            ms(at(0.99)),
            BUDGET.as_millis(),
            slowest.as_secs_f64() * 1000.0
        );
        println!(
            "  model calls: {} for {} dialogs; the server counted {} answers past a budget",
            self.mock.calls(),
            played.len(),
            self.server_overruns().map_or("?".into(), |n| n.to_string())
        );
    }

    /// `megamind_budget_overruns_total` summed from the server's `/metrics`:
    /// lateness the server saw itself, apart from what the client adds.
    fn server_overruns(&self) -> Option<u64> {
        let text = self.server.metrics()?;
        let counts = text.lines().filter(|line| line.starts_with("megamind_budget_overruns_total"));
        Some(counts.filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>() as u64)
    }
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
        hops: turn.hops.iter().filter(|hop| hop.handler() == Handler::Run).count().saturating_sub(1),
        to_answer,
        late: turn.hops.iter().filter(|hop| hop.took > BUDGET).count(),
        slowest: turn.hops.iter().map(|hop| hop.took).max().unwrap_or_default(),
    }
}
