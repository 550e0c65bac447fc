//! Prometheus metrics of the server: every name in one place, labels bounded
//! to scenario, handler, transport and outcome (never a RequestId or a path).
//!
//! Each [`ServerMetrics`] owns its own registry, so several servers in one process
//! (tests, benches) never mix their numbers; scenarios register their own
//! collectors into [`ServerMetrics::registry`]. On Linux the registry also
//! holds the standard `process_*` metrics (CPU seconds, resident memory,
//! file descriptors, threads), which dashboards and alerts expect by name.

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    PullingGauge, Registry, TextEncoder,
};

use super::{idempotency::IdempotencyCache, overload::Admission};
use crate::{scenario::Handler, store::Usage};

/// Latency buckets in seconds: resolve 0.5 ms to the 300 ms budget and a little past it.
const LATENCY_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 1.0];

/// Every outcome of a handler call: `ok`, a repeat's, a protocol `Error`
/// type ([`crate::scenario::ScenarioError::error_type`], the server's own,
/// or a scenario's own `Error` answer of one of these types; `error` for
/// any other type it gives) or a refusal
/// ([`crate::dispatch::Refusal::error_type`]).
pub const OUTCOMES: [&str; 16] = [
    "error",
    "ok",
    "replay",
    "replay_timeout",
    "bad_request",
    "timeout",
    "internal",
    "unsupported",
    "upstream",
    "overloaded",
    "unavailable",
    "forbidden",
    "body_too_large",
    "body_too_slow",
    "body_unreadable",
    "unsupported_media_type",
];
/// The transports a call comes by ([`crate::dispatch::Transport::as_str`]).
const TRANSPORTS: [&str; 2] = ["http", "grpc"];
/// Why the server closes a connection.
const CLOSE_REASONS: [&str; 5] = ["header_timeout", "idle_timeout", "send_timeout", "drain_timeout", "reclaimed"];
/// The lanes a connection is served in.
const LANES: [&str; 2] = ["main", "stream"];

/// A gauge read from the cache's usage at scrape time: name, help, reader.
type PulledGauge = (&'static str, &'static str, fn(&Usage) -> usize);

/// The server's metrics and the registry `/metrics` renders.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    budget_overruns: IntCounterVec,
}

/// One scenario's call series ([`ServerMetrics::series`]), by handler,
/// transport and outcome in [`Handler::ALL`], `TRANSPORTS` and [`OUTCOMES`]
/// order.
#[derive(Debug, Clone)]
pub struct ScenarioSeries {
    requests: Vec<IntCounter>,
    latency: Vec<Histogram>,
    overruns: [IntCounter; Handler::ALL.len()],
}

impl ScenarioSeries {
    /// Records one call as [`ServerMetrics::observe`] does, or, with no
    /// `budget`, as [`ServerMetrics::observe_refused`] does; `false` (and
    /// nothing recorded) for a transport or outcome not listed.
    pub fn observe(
        &self,
        handler: Handler,
        transport: &str,
        outcome: &str,
        latency: Duration,
        budget: Option<Duration>,
    ) -> bool {
        let (Some(t), Some(o)) =
            (TRANSPORTS.iter().position(|t| *t == transport), OUTCOMES.iter().position(|o| *o == outcome))
        else {
            return false;
        };
        let at = handler as usize * TRANSPORTS.len() + t;
        self.requests[at * OUTCOMES.len() + o].inc();
        self.latency[at].observe(latency.as_secs_f64());
        if budget.is_some_and(|budget| overran(outcome, latency, budget)) {
            self.overruns[handler as usize].inc();
        }
        true
    }
}

/// Whether a call overran its budget: it answered `timeout`, or its answer
/// was ready only after the budget, whatever it says.
fn overran(outcome: &str, latency: Duration, budget: Duration) -> bool {
    outcome == "timeout" || latency > budget
}

/// `megamind_log_lines_dropped_total`: log lines dropped because the
/// output could not keep up, read from the log's writers when gathered. The
/// line that says so goes to that same stalled output; this one reaches
/// monitoring.
struct LogLinesDropped {
    counter: IntCounter,
    /// Held while the counter catches up: two scrapes at once would both
    /// add the same difference.
    catching_up: std::sync::Mutex<()>,
}

impl LogLinesDropped {
    fn new() -> LogLinesDropped {
        let help = "Log lines (access summaries included) dropped because the log output could not keep up.";
        let counter = IntCounter::new("megamind_log_lines_dropped_total", help).expect("valid metric");
        LogLinesDropped { counter, catching_up: std::sync::Mutex::default() }
    }
}

impl prometheus::core::Collector for LogLinesDropped {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.counter.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let _held = self.catching_up.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let dropped = super::logging::batch::dropped_in_all();
        self.counter.inc_by(dropped.saturating_sub(self.counter.get()));
        self.counter.collect()
    }
}

impl Default for ServerMetrics {
    fn default() -> ServerMetrics {
        ServerMetrics::new()
    }
}

impl ServerMetrics {
    /// Fresh metrics in a fresh registry.
    pub fn new() -> ServerMetrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "megamind_requests_total",
                "Scenario handler calls by outcome (ok, replay, replay_timeout, or the Error type).",
            ),
            &["scenario", "handler", "transport", "outcome"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("megamind_request_duration_seconds", "Time from arrival to answer of handler calls.")
                .buckets(LATENCY_BUCKETS.to_vec()),
            &["scenario", "handler", "transport"],
        )
        .expect("valid metric");
        let budget_overruns = IntCounterVec::new(
            Opts::new(
                "megamind_budget_overruns_total",
                "Calls answered `timeout` because the scenario overran its budget, or answered after their budget.",
            ),
            &["scenario", "handler"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(budget_overruns.clone()),
        ] {
            registry.register(collector).expect("metric names are unique");
        }
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("metric names are unique");
        registry.register(Box::new(LogLinesDropped::new())).expect("metric names are unique");
        ServerMetrics { registry, requests, latency, budget_overruns }
    }

    /// Lists every series of `scenarios` at 0 (each handler, transport and
    /// outcome), so that an alert on any of them reads 0 from the start,
    /// not "no data" until its first event.
    pub fn start_at_zero<'a>(&self, scenarios: impl IntoIterator<Item = &'a str>) {
        for scenario in scenarios {
            self.series(scenario);
        }
    }

    /// Every call series of `scenario`, listed at 0 if new, resolved once so
    /// that recording a call hashes no labels.
    pub fn series(&self, scenario: &str) -> ScenarioSeries {
        let handlers = Handler::ALL.map(Handler::as_str);
        let mut requests = Vec::with_capacity(handlers.len() * TRANSPORTS.len() * OUTCOMES.len());
        let mut latency = Vec::with_capacity(handlers.len() * TRANSPORTS.len());
        for handler in handlers {
            for transport in TRANSPORTS {
                latency.push(self.latency.with_label_values(&[scenario, handler, transport]));
                for outcome in OUTCOMES {
                    requests.push(self.requests.with_label_values(&[scenario, handler, transport, outcome]));
                }
            }
        }
        let overruns = handlers.map(|handler| self.budget_overruns.with_label_values(&[scenario, handler]));
        ScenarioSeries { requests, latency, overruns }
    }

    /// The registry: scenarios add their own collectors here.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Records one answered call. A call overran its budget when the
    /// scenario did (it was answered `timeout`) or when its answer, whatever
    /// it is, was ready only after the budget: both reach Megamind late or
    /// empty, and one alert should see both.
    pub fn observe(
        &self,
        scenario: &str,
        handler: &str,
        transport: &str,
        outcome: &str,
        latency: Duration,
        budget: Duration,
    ) {
        self.requests.with_label_values(&[scenario, handler, transport, outcome]).inc();
        self.latency.with_label_values(&[scenario, handler, transport]).observe(latency.as_secs_f64());
        if overran(outcome, latency, budget) {
            self.budget_overruns.with_label_values(&[scenario, handler]).inc();
        }
    }

    /// Records one call refused before it reached its scenario (see
    /// [`Dispatcher::refused_early`](crate::dispatch::Dispatcher::refused_early)):
    /// counted and timed as calls are, but no budget overrun, as no
    /// scenario ran.
    pub fn observe_refused(&self, scenario: &str, handler: &str, transport: &str, outcome: &str, latency: Duration) {
        self.requests.with_label_values(&[scenario, handler, transport, outcome]).inc();
        self.latency.with_label_values(&[scenario, handler, transport]).observe(latency.as_secs_f64());
    }

    /// Exposes the cache's counters and its size.
    pub fn watch_cache(&self, cache: &IdempotencyCache) {
        let counters = cache.counters();
        for counter in [&counters.hits, &counters.misses, &counters.waits] {
            self.register(Box::new(counter.clone()));
        }
        for counter in [&counters.evictions, &counters.refusals] {
            self.register(Box::new(counter.clone()));
        }
        let pulled: [PulledGauge; 5] = [
            ("megamind_idempotency_entries", "Answers held by the idempotency cache.", |u| u.entries),
            ("megamind_idempotency_bytes", "Bytes held by the idempotency cache.", |u| u.bytes),
            (
                "megamind_idempotency_commit_entries",
                "/commit and /apply answers held (part of megamind_idempotency_entries).",
                |u| u.reserved_entries,
            ),
            (
                "megamind_idempotency_commit_bytes",
                "Bytes of /commit and /apply answers held (part of megamind_idempotency_bytes).",
                |u| u.reserved_bytes,
            ),
            ("megamind_idempotency_in_flight", "First calls running whose repeats would wait.", |u| u.in_flight),
        ];
        for (name, help, read) in pulled {
            let cache = cache.clone();
            let gauge =
                PullingGauge::new(name, help, Box::new(move || read(&cache.usage()) as f64)).expect("valid metric");
            self.register(Box::new(gauge));
        }
    }

    /// Exposes the number of calls in flight.
    pub fn watch_admission(&self, admission: &Admission) {
        let admission = admission.clone();
        let gauge = PullingGauge::new(
            "megamind_requests_in_flight",
            "Handler calls being answered now.",
            Box::new(move || admission.in_flight() as f64),
        )
        .expect("valid metric");
        self.register(Box::new(gauge));
    }

    fn register(&self, collector: Box<dyn prometheus::core::Collector>) {
        if let Err(error) = self.registry.register(collector) {
            tracing::warn!(%error, "metric not registered");
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::with_capacity(8 * 1024);
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(%error, "cannot render metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The server's connections: how many are open, how often the accept loop
/// had to wait for a free slot or failed, and why the server closed any.
#[derive(Debug, Clone)]
pub struct ConnectionMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Times a new connection had to wait because `max_connections` were open.
    pub waited: IntCounter,
    /// Accepts that failed (out of file descriptors and the like).
    pub accept_errors: IntCounter,
    /// Connections the server closed, by reason (`header_timeout`,
    /// `idle_timeout`, `send_timeout`, `drain_timeout`).
    pub closed: IntCounterVec,
    /// HTTP/2 streams refused because their connection had a request open
    /// while the server had `max_open_requests` open.
    pub refused_streams: IntCounter,
    /// Connections served, by lane (`main`, `stream`).
    pub served: IntCounterVec,
    /// Worker threads serving connections, by lane (`main`, `stream`; 0
    /// without a stream lane).
    pub threads: IntGaugeVec,
}

impl ConnectionMetrics {
    /// The connection metrics, registered in `registry`.
    pub fn register(registry: &Registry) -> ConnectionMetrics {
        let metrics = ConnectionMetrics {
            open: IntGauge::new("megamind_connections_open", "Client connections open now.").expect("valid metric"),
            waited: IntCounter::new(
                "megamind_connections_waited_total",
                "Times a new connection waited in the listen backlog because max_connections were open.",
            )
            .expect("valid metric"),
            accept_errors: IntCounter::new(
                "megamind_accept_errors_total",
                "Accepts that failed (e.g. out of file descriptors); the accept loop backs off.",
            )
            .expect("valid metric"),
            closed: IntCounterVec::new(
                Opts::new("megamind_connections_closed_total", "Connections the server closed, by reason."),
                &["reason"],
            )
            .expect("valid metric"),
            refused_streams: IntCounter::new(
                "megamind_h2_streams_refused_total",
                "HTTP/2 streams refused (REFUSED_STREAM) on busy connections while max_open_requests were open.",
            )
            .expect("valid metric"),
            served: IntCounterVec::new(
                Opts::new(
                    "megamind_connections_served_total",
                    "Connections served, by lane: main, or stream (opened with a GET of a long-lived route).",
                ),
                &["lane"],
            )
            .expect("valid metric"),
            threads: IntGaugeVec::new(
                Opts::new("megamind_worker_threads", "Worker threads serving connections, by lane: main, or stream."),
                &["lane"],
            )
            .expect("valid metric"),
        };
        for reason in CLOSE_REASONS {
            metrics.closed.with_label_values(&[reason]);
        }
        for lane in LANES {
            metrics.served.with_label_values(&[lane]);
        }
        for collector in [
            Box::new(metrics.open.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.waited.clone()),
            Box::new(metrics.accept_errors.clone()),
            Box::new(metrics.closed.clone()),
            Box::new(metrics.refused_streams.clone()),
            Box::new(metrics.served.clone()),
            Box::new(metrics.threads.clone()),
        ] {
            if let Err(error) = registry.register(collector) {
                tracing::warn!(%error, "metric not registered");
            }
        }
        metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_a_call_can_end_with_is_listed() {
        use crate::{
            dispatch::{Outcome, Refusal},
            scenario::ScenarioError,
        };
        let refusals = [
            Refusal::Overloaded,
            Refusal::Forbidden(String::new()),
            Refusal::BodyTooLarge { limit: 1 },
            Refusal::BodyTooSlow { handler: Handler::Run, limit: Duration::ZERO },
            Refusal::BodyUnreadable(String::new()),
            Refusal::UnsupportedMediaType(String::new()),
        ];
        let errors = [
            ScenarioError::BadRequest(String::new()),
            ScenarioError::Unsupported(Handler::Run),
            ScenarioError::Upstream(String::new()),
            ScenarioError::Internal(String::new()),
        ];
        let ends = [Outcome::Ok, Outcome::Replay, Outcome::ReplayTimeout].map(Outcome::as_str);
        let server_own = ["timeout", "unavailable"];
        for outcome in refusals.iter().map(Refusal::error_type).chain(errors.iter().map(ScenarioError::error_type)) {
            assert!(OUTCOMES.contains(&outcome), "{outcome}");
        }
        for outcome in ends.into_iter().chain(server_own) {
            assert!(OUTCOMES.contains(&outcome), "{outcome}");
        }
    }

    #[test]
    fn log_lines_dropped_reach_the_metrics() {
        use std::io::Write;

        use super::super::logging::batch::{BatchWriter, Stuck};
        let metrics = ServerMetrics::new();
        let read = |text: &str| {
            text.lines().find_map(|l| l.strip_prefix("megamind_log_lines_dropped_total ")?.parse::<u64>().ok())
        };
        let before = read(&metrics.render()).expect("listed from the start");
        let (mut writer, guard) = BatchWriter::new(Stuck);
        // A line longer than a shard's whole buffer is dropped at once.
        writer.write_all(&vec![b'x'; 2 << 20]).unwrap();
        drop(guard);
        let after = read(&metrics.render()).unwrap();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn known_series_are_listed_at_zero_from_the_start() {
        let metrics = ServerMetrics::new();
        metrics.start_at_zero(["demo"]);
        let text = metrics.render();
        assert!(text.contains(r#"megamind_budget_overruns_total{handler="apply",scenario="demo"} 0"#), "{text}");
        let requests = text.lines().filter(|l| l.starts_with("megamind_requests_total{")).count();
        assert_eq!(requests, 4 * 2 * OUTCOMES.len(), "{text}");
        assert!(text.lines().filter(|l| l.starts_with("megamind_requests_total{")).all(|l| l.ends_with(" 0")));
    }

    #[test]
    fn observations_render_with_bounded_labels() {
        let metrics = ServerMetrics::new();
        let budget = Duration::from_millis(300);
        metrics.observe("demo", "run", "http", "ok", Duration::from_micros(700), budget);
        metrics.observe("demo", "commit", "grpc", "timeout", Duration::from_millis(280), budget);
        let text = metrics.render();
        assert!(
            text.contains(r#"megamind_requests_total{handler="run",outcome="ok",scenario="demo",transport="http"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"megamind_budget_overruns_total{handler="commit",scenario="demo"} 1"#), "{text}");
        assert!(
            text.contains(r#"megamind_request_duration_seconds_bucket{handler="run",scenario="demo",transport="http",le="0.001"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"megamind_request_duration_seconds_bucket{handler="run",scenario="demo",transport="http",le="0.0005"} 0"#),
            "{text}"
        );
    }

    #[test]
    fn a_scenarios_resolved_series_record_what_its_labels_do() {
        let budget = Duration::from_millis(300);
        let calls = [
            (Handler::Run, "http", "ok", Duration::from_micros(700), Some(budget)),
            (Handler::Commit, "grpc", "timeout", Duration::from_millis(280), Some(budget)),
            (Handler::Continue, "http", "replay", Duration::from_millis(301), Some(budget)),
            (Handler::Apply, "grpc", "forbidden", Duration::from_millis(2), None),
        ];
        let by_labels = ServerMetrics::new();
        by_labels.start_at_zero(["demo"]);
        let resolved = ServerMetrics::new();
        let series = resolved.series("demo");
        for (handler, transport, outcome, latency, budget) in calls {
            match budget {
                Some(budget) => by_labels.observe("demo", handler.as_str(), transport, outcome, latency, budget),
                None => by_labels.observe_refused("demo", handler.as_str(), transport, outcome, latency),
            }
            assert!(series.observe(handler, transport, outcome, latency, budget));
        }
        let ours = |text: String| text.lines().filter(|l| l.starts_with("megamind_")).collect::<Vec<_>>().join("\n");
        assert_eq!(ours(resolved.render()), ours(by_labels.render()));
        assert!(resolved.render().contains(
            r#"megamind_requests_total{handler="commit",outcome="timeout",scenario="demo",transport="grpc"} 1"#
        ));
        assert!(!series.observe(Handler::Run, "http", "no_such_outcome", Duration::ZERO, None), "not listed");
        assert!(!series.observe(Handler::Run, "carrier_pigeon", "ok", Duration::ZERO, None), "not listed");
    }

    #[test]
    fn an_answer_ready_after_its_budget_counts_as_an_overrun_whatever_its_outcome() {
        let metrics = ServerMetrics::new();
        metrics.start_at_zero(["demo"]);
        let budget = Duration::from_millis(300);
        metrics.observe("demo", "run", "http", "ok", Duration::from_millis(299), budget);
        metrics.observe("demo", "continue", "http", "ok", Duration::from_millis(301), budget);
        metrics.observe("demo", "apply", "grpc", "replay", Duration::from_millis(450), budget);
        let text = metrics.render();
        assert!(text.contains(r#"megamind_budget_overruns_total{handler="run",scenario="demo"} 0"#), "{text}");
        assert!(text.contains(r#"megamind_budget_overruns_total{handler="continue",scenario="demo"} 1"#), "{text}");
        assert!(text.contains(r#"megamind_budget_overruns_total{handler="apply",scenario="demo"} 1"#), "{text}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_metrics_render_beside_the_server_metrics() {
        let text = ServerMetrics::new().render();
        let value = |name: &str| {
            text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).unwrap_or(0.0)
        };
        assert!(value("process_resident_memory_bytes") > 1e6, "{text}");
        assert!(value("process_cpu_seconds_total") >= 0.0 && text.contains("process_cpu_seconds_total "), "{text}");
        assert!(value("process_open_fds") >= 3.0, "{text}");
    }
}
