//! Metrics of the ticket checks: how every call's check ended, how long
//! tvmtool takes, and whether it answers.

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// How a call's check ended, as the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthResult {
    /// Let in.
    Ok,
    /// No service ticket.
    Missing,
    /// tvmtool refused the service ticket.
    Invalid,
    /// A good ticket from a source not allowed.
    ForbiddenSource,
    /// No verdict: tvmtool down or slow (refused: checks fail closed).
    Unavailable,
    /// No user ticket where one is required.
    UserMissing,
    /// tvmtool refused the user ticket.
    UserInvalid,
    /// No verdict: too many tickets were being checked already, and no turn
    /// came within the check's timeout (refused). Apart from `unavailable`:
    /// tvmtool may be well, and the calls many made-up tickets.
    Busy,
}

const RESULTS: [AuthResult; 8] = [
    AuthResult::Ok,
    AuthResult::Missing,
    AuthResult::Invalid,
    AuthResult::ForbiddenSource,
    AuthResult::Unavailable,
    AuthResult::UserMissing,
    AuthResult::UserInvalid,
    AuthResult::Busy,
];

impl AuthResult {
    /// The label.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthResult::Ok => "ok",
            AuthResult::Missing => "missing",
            AuthResult::Invalid => "invalid",
            AuthResult::ForbiddenSource => "forbidden_source",
            AuthResult::Unavailable => "unavailable",
            AuthResult::UserMissing => "user_missing",
            AuthResult::UserInvalid => "user_invalid",
            AuthResult::Busy => "busy",
        }
    }
}

/// The tvmtool requests timed, as the `op` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TvmtoolOp {
    /// `/tvm/checksrv`.
    CheckService,
    /// `/tvm/checkusr`.
    CheckUser,
    /// `/tvm/ping`.
    Ping,
}

const OPS: [(TvmtoolOp, &str); 3] =
    [(TvmtoolOp::CheckService, "checksrv"), (TvmtoolOp::CheckUser, "checkusr"), (TvmtoolOp::Ping, "ping")];

/// tvmtool next door answers in about a millisecond; the check's timeout is
/// tens of them.
const BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25];

/// The metrics, every series resolved once and present at 0 from the start.
#[derive(Debug, Clone)]
pub struct AuthMetrics {
    results: [IntCounter; 8],
    latency: [Histogram; 3],
    up: Option<IntGauge>,
}

impl AuthMetrics {
    /// `megamind_auth_total` and `megamind_auth_tvmtool_seconds` in
    /// `registry`, and `megamind_auth_tvmtool_up` when tvmtool is used.
    pub fn register(registry: &Registry, with_tvmtool: bool) -> AuthMetrics {
        let results = IntCounterVec::new(
            Opts::new("megamind_auth_total", "Scenario calls by the result of their ticket check."),
            &["result"],
        )
        .expect("valid metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("megamind_auth_tvmtool_seconds", "Time tvmtool takes to answer, by request.")
                .buckets(BUCKETS.to_vec()),
            &["op"],
        )
        .expect("valid metric");
        // Registered once per registry: a second server in one process
        // (tests) records into series of its own that are not rendered.
        let _ = registry.register(Box::new(results.clone()));
        let _ = registry.register(Box::new(latency.clone()));
        // Served whatever the mode: a replica that lets every caller in
        // (no tvmtool address) is seen to, not only told once in its log.
        let checked = IntGauge::new(
            "megamind_auth_checked",
            "1 when scenario calls need a TVM ticket (a tvmtool address is set), 0 when every caller is let in.",
        )
        .expect("valid metric");
        checked.set(i64::from(with_tvmtool));
        let _ = registry.register(Box::new(checked));
        let up = with_tvmtool.then(|| {
            let up = IntGauge::new(
                "megamind_auth_tvmtool_up",
                "1 while tickets can be checked (tvmtool answers and accepts this server's token and dst), else 0.",
            )
            .expect("valid metric");
            let _ = registry.register(Box::new(up.clone()));
            up
        });
        AuthMetrics {
            results: RESULTS.map(|result| results.with_label_values(&[result.as_str()])),
            latency: OPS.map(|(_, op)| latency.with_label_values(&[op])),
            up,
        }
    }

    /// Counts one call's check.
    pub fn count(&self, result: AuthResult) {
        // RESULTS lists the variants in their order.
        self.results[result as usize].inc();
    }

    /// Records how long one tvmtool request took.
    pub fn timed(&self, op: TvmtoolOp, took: Duration) {
        // OPS lists the variants in their order.
        self.latency[op as usize].observe(took.as_secs_f64());
    }

    /// Whether tickets can be checked.
    pub fn set_up(&self, up: bool) {
        if let Some(gauge) = &self.up {
            gauge.set(i64::from(up));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_list_the_variants_in_their_order() {
        assert!(RESULTS.iter().enumerate().all(|(i, result)| *result as usize == i));
        assert!(OPS.iter().enumerate().all(|(i, (op, _))| *op as usize == i));
    }

    #[test]
    fn every_result_is_present_at_zero_and_counted_under_its_label() {
        let registry = Registry::new();
        let metrics = AuthMetrics::register(&registry, true);
        metrics.count(AuthResult::ForbiddenSource);
        metrics.set_up(true);
        let families = registry.gather();
        let total = families.iter().find(|f| f.name() == "megamind_auth_total").expect("registered");
        assert_eq!(total.get_metric().len(), RESULTS.len());
        let forbidden =
            total.get_metric().iter().find(|m| m.get_label()[0].value() == "forbidden_source").expect("labelled");
        assert_eq!(forbidden.get_counter().get_value(), 1.0);
        assert!(families.iter().any(|f| f.name() == "megamind_auth_tvmtool_up"));
        let without = Registry::new();
        AuthMetrics::register(&without, false);
        assert!(!without.gather().iter().any(|f| f.name() == "megamind_auth_tvmtool_up"));
        let checked = |registry: &Registry| {
            let families = registry.gather();
            let family = families.iter().find(|f| f.name() == "megamind_auth_checked").expect("served in both modes");
            family.get_metric()[0].get_gauge().get_value()
        };
        assert_eq!((checked(&registry), checked(&without)), (1.0, 0.0));
    }
}
