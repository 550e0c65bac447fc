//! `[auth]`: who may call the scenarios. Unset `tvmtool_url`, everyone (the
//! server says so at start); set, every scenario call needs a TVM service
//! ticket that the local tvmtool daemon accepts, from an allowed source.

use std::{fmt, time::Duration};

use serde::{Deserialize, Serialize};

use crate::text::redact_url;

/// How long a refused ticket's verdict is reused at most.
const REFUSAL_TTL: Duration = Duration::from_secs(5);

/// Megamind's TVM ids: testing, then production.
pub const MEGAMIND_TVM_IDS: [u32; 2] = [2_000_860, 2_000_464];

/// `[auth]`.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// tvmtool's address (`http://localhost:18080`). Empty: no check at all
    /// (the command line takes `DEPLOY_TVM_TOOL_URL` when it is set).
    pub tvmtool_url: String,
    /// tvmtool's local token, sent as `Authorization` (the command line
    /// reads `TVMTOOL_LOCAL_AUTHTOKEN`, else `QLOUD_TVM_TOKEN`). A secret.
    pub tvmtool_token: String,
    /// This service as tvmtool knows it (an alias or a TVM id), sent as
    /// `dst=`; empty: tvmtool's only configured client.
    pub tvm_dst: String,
    /// The TVM ids allowed to call (Megamind's by default).
    pub tvm_allowed_src: Vec<u32>,
    /// `off`: user tickets are not read; `optional`: checked when sent;
    /// `required`: a call without one is refused.
    pub user_ticket: UserTicketPolicy,
    /// The longest one tvmtool check may take, in ms, inside the call's budget.
    pub check_timeout_ms: u64,
    /// How long a verdict on a ticket is reused, in seconds: far below a
    /// ticket's life of hours, so that a revoked source stops soon.
    pub verdict_ttl_secs: u64,
    /// Verdicts kept at most (each keyed by a hash of its ticket), good
    /// ones and refusals each.
    pub verdict_max_entries: usize,
    /// tvmtool checks in flight at most: a call whose ticket finds no turn
    /// within `check_timeout_ms` is refused (`busy`), so that a flood of
    /// made-up tickets costs tvmtool a bounded load.
    pub max_checks_in_flight: usize,
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            tvmtool_url: String::new(),
            tvmtool_token: String::new(),
            tvm_dst: String::new(),
            tvm_allowed_src: MEGAMIND_TVM_IDS.to_vec(),
            user_ticket: UserTicketPolicy::Off,
            // tvmtool answers from memory next door in about a millisecond:
            // 50 ms leaves most of a 300 ms budget to the scenario.
            check_timeout_ms: 50,
            verdict_ttl_secs: 60,
            verdict_max_entries: 4_096,
            // tvmtool answers in about a millisecond: 32 at once is tens of
            // thousands of checks a second, far more than verdicts leave.
            max_checks_in_flight: 32,
        }
    }
}

/// What is done with `X-Ya-User-Ticket`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UserTicketPolicy {
    /// Not read.
    Off,
    /// Checked when sent; a call without one goes on.
    Optional,
    /// A call without one is refused.
    Required,
}

/// The token never shows, not even in a debug print of the config.
impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = if self.tvmtool_token.is_empty() { "" } else { super::HIDDEN };
        f.debug_struct("AuthConfig")
            .field("tvmtool_url", &redact_url(&self.tvmtool_url))
            .field("tvmtool_token", &token)
            .field("tvm_dst", &self.tvm_dst)
            .field("tvm_allowed_src", &self.tvm_allowed_src)
            .field("user_ticket", &self.user_ticket)
            .field("check_timeout_ms", &self.check_timeout_ms)
            .field("verdict_ttl_secs", &self.verdict_ttl_secs)
            .field("verdict_max_entries", &self.verdict_max_entries)
            .field("max_checks_in_flight", &self.max_checks_in_flight)
            .finish()
    }
}

impl AuthConfig {
    /// The longest one check may take.
    pub fn check_timeout(&self) -> Duration {
        Duration::from_millis(self.check_timeout_ms)
    }

    /// How long a verdict is reused.
    pub fn verdict_ttl(&self) -> Duration {
        Duration::from_secs(self.verdict_ttl_secs)
    }

    /// How long a refusal is reused: a few seconds, so that the same
    /// made-up ticket repeated costs tvmtool a check every few seconds, and
    /// a ticket refused while tvmtool was still fetching its keys is soon
    /// asked about again.
    pub fn refusal_ttl(&self) -> Duration {
        REFUSAL_TTL.min(self.verdict_ttl())
    }

    /// The problems of these keys beside the handlers' budgets, the
    /// shortest of which is `shortest_ms` once the reserve is taken: a
    /// check that may outlast the time a call has is cut short by the
    /// call's deadline instead of its own timeout.
    pub fn budget_problems(&self, shortest_ms: u64) -> Option<String> {
        let on = !self.tvmtool_url.trim().is_empty();
        (on && self.check_timeout_ms >= shortest_ms).then(|| {
            format!(
                "auth.check_timeout_ms = {}: must be below the shortest handler budget less budget.reserve_ms \
                 ({shortest_ms} ms), or no call could wait for its check",
                self.check_timeout_ms
            )
        })
    }

    /// The problems of this table, one line each.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let url = self.tvmtool_url.trim();
        if !url.is_empty() && reqwest::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) {
            let url = redact_url(url);
            problems.push(format!("auth.tvmtool_url = {url:?}: must be an http:// or https:// address"));
        }
        if self.tvm_allowed_src.is_empty() {
            problems.push("auth.tvm_allowed_src is empty: no caller could ever get in".into());
        }
        if !(1..=1_000).contains(&self.check_timeout_ms) {
            problems.push(format!("auth.check_timeout_ms = {}: must be 1..=1000", self.check_timeout_ms));
        }
        if !(1..=3_600).contains(&self.verdict_ttl_secs) {
            problems.push(format!("auth.verdict_ttl_secs = {}: must be 1..=3600", self.verdict_ttl_secs));
        }
        if self.verdict_max_entries == 0 {
            problems.push("auth.verdict_max_entries must be above 0".into());
        }
        if self.max_checks_in_flight == 0 {
            problems.push("auth.max_checks_in_flight must be above 0".into());
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_shows_in_a_debug_print() {
        let config = AuthConfig { tvmtool_token: "s3cr3t".into(), ..AuthConfig::default() };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t") && shown.contains("<hidden>"), "{shown}");
    }

    #[test]
    fn a_password_in_tvmtool_s_address_never_shows() {
        let config = AuthConfig { tvmtool_url: "htpp://tvm:pa55word@localhost:18080".into(), ..AuthConfig::default() };
        let problems = config.problems();
        assert!(problems[0].starts_with("auth.tvmtool_url = \"htpp://tvm:<hidden>@localhost"), "{problems:?}");
        let tvmtool =
            crate::rules::auth::tvmtool::Tvmtool::new("http://tvm:pa55word@localhost:1", "t".into(), "d".into());
        for shown in [format!("{config:?}"), format!("{:?}", tvmtool.unwrap()), problems.join("\n")] {
            assert!(!shown.contains("pa55word") && shown.contains("<hidden>"), "{shown}");
        }
    }

    #[test]
    fn every_problem_is_named() {
        let config = AuthConfig {
            tvmtool_url: "localhost:1".into(),
            tvm_allowed_src: vec![],
            check_timeout_ms: 0,
            verdict_ttl_secs: 0,
            verdict_max_entries: 0,
            max_checks_in_flight: 0,
            ..AuthConfig::default()
        };
        let problems = config.problems();
        assert_eq!(problems.len(), 6, "{problems:?}");
        assert!(AuthConfig::default().problems().is_empty());
    }

    #[test]
    fn a_check_timeout_not_below_the_shortest_budget_is_a_problem_only_with_tvmtool() {
        let off = AuthConfig { check_timeout_ms: 300, ..AuthConfig::default() };
        assert_eq!(off.budget_problems(290), None, "no check without tvmtool");
        let on = AuthConfig { tvmtool_url: "http://localhost:18080".into(), ..off };
        let problem = on.budget_problems(290).expect("a problem");
        assert!(problem.starts_with("auth.check_timeout_ms = 300: must be below"), "{problem}");
        assert_eq!(AuthConfig { check_timeout_ms: 289, ..on }.budget_problems(290), None);
    }

    #[test]
    fn a_refusal_is_kept_a_few_seconds_never_longer_than_a_good_verdict() {
        assert_eq!(AuthConfig::default().refusal_ttl(), REFUSAL_TTL);
        let short = AuthConfig { verdict_ttl_secs: 1, ..AuthConfig::default() };
        assert_eq!(short.refusal_ttl(), Duration::from_secs(1));
    }
}
