//! Per-handler time budgets: when a call must be answered by.

use std::time::Duration;

use tokio::time::Instant;

use crate::scenario::Handler;

/// The time each handler has, and how much of it is kept for encoding and
/// writing the answer so that the answer leaves the server in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// `/run`.
    pub run: Duration,
    /// `/continue`.
    pub r#continue: Duration,
    /// `/commit`.
    pub commit: Duration,
    /// `/apply`.
    pub apply: Duration,
    /// Kept back from each budget for encoding and writing.
    pub reserve: Duration,
}

impl Default for Budgets {
    fn default() -> Budgets {
        let megamind = Duration::from_millis(300);
        Budgets {
            run: megamind,
            r#continue: megamind,
            commit: megamind,
            apply: megamind,
            reserve: Duration::from_millis(10),
        }
    }
}

impl Budgets {
    /// The whole budget of `handler`.
    pub fn of(&self, handler: Handler) -> Duration {
        match handler {
            Handler::Run => self.run,
            Handler::Continue => self.r#continue,
            Handler::Commit => self.commit,
            Handler::Apply => self.apply,
        }
    }

    /// When the scenario's answer is due for a call that arrived at `started`.
    pub fn deadline(&self, handler: Handler, started: Instant) -> Instant {
        started + self.of(handler).saturating_sub(self.reserve)
    }

    /// As [`Budgets::deadline`], or sooner when the client waits `client`
    /// at most (gRPC's `grpc-timeout`), less the reserve too.
    pub fn deadline_within(&self, handler: Handler, started: Instant, client: Option<Duration>) -> Instant {
        let due = self.deadline(handler, started);
        client.map_or(due, |client| due.min(started + client.saturating_sub(self.reserve)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_keeps_the_reserve() {
        let budgets = Budgets { commit: Duration::from_millis(500), ..Budgets::default() };
        let now = Instant::now();
        assert_eq!(budgets.deadline(Handler::Run, now) - now, Duration::from_millis(290));
        assert_eq!(budgets.deadline(Handler::Commit, now) - now, Duration::from_millis(490));
        let tiny = Budgets { run: Duration::from_millis(5), ..Budgets::default() };
        assert_eq!(tiny.deadline(Handler::Run, now), now);
    }
}
