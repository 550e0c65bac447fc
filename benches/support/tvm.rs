//! The load benchmark's TVM row: a server checking every call's service
//! ticket through a tvmtool stand-in in this process, driven with one
//! ticket beside the same server with TVM off (the ticket sent to both):
//! a kept verdict costs two hashes and a lookup, so the two should be
//! within a few percent.

use crate::{
    drive::{Outcome, Settings, drive, fresh_ids},
    ours, ours_with_env,
    process::Server,
    tvmtool::{DST, TOKEN, Tickets, Tvmtool},
};

/// The ticket every call carries.
pub const TICKET: &str = "3:serv:the-load-benchmark-ticket";
/// The rows' names.
pub const OFF: &str = "http /demo/run, fresh, TVM off";
pub const ON: &str = "http /demo/run, fresh, TVM on";

/// The servers with TVM off and on, and the stand-in the second asks.
pub struct TvmLoad {
    tvmtool: Tvmtool,
    off: Server,
    on: Server,
    rounds: usize,
}

impl TvmLoad {
    pub async fn start() -> TvmLoad {
        let mut tickets = Tickets::default();
        tickets.services.insert(TICKET.into(), megamind_core::config::MEGAMIND_TVM_IDS[0]);
        let tvmtool = Tvmtool::start(tickets).await;
        let url = tvmtool.url();
        // The token by the environment, as deployments give it: never in
        // the process's arguments.
        let on = ours_with_env(&["--tvmtool-url", &url, "--tvm-dst", DST], &[("TVMTOOL_LOCAL_AUTHTOKEN", TOKEN)]);
        TvmLoad { tvmtool, off: ours::<&str>(&[]), on, rounds: 0 }
    }

    pub async fn warm_up(&self, settings: &Settings) {
        let settings = Settings { ticket: Some(TICKET), ..*settings };
        for server in [&self.off, &self.on] {
            drive("warm-up", server.addr, "/demo/run", &settings, fresh_ids("poi_run_request", "TScenarioRunRequest"))
                .await;
        }
    }

    /// One round of both rows, `[off, on]`. They take turns going first:
    /// the server measured second shares the machine with the first one's
    /// background work (purging the answers it just cached).
    pub async fn round(&mut self, settings: &Settings) -> [Outcome; 2] {
        let settings = Settings { ticket: Some(TICKET), ..*settings };
        self.rounds += 1;
        let mut order = [(OFF, &self.off), (ON, &self.on)];
        if self.rounds.is_multiple_of(2) {
            order.reverse();
        }
        let mut rows = Vec::with_capacity(2);
        for (name, server) in order {
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            rows.push(server.measure(drive(name, server.addr, "/demo/run", &settings, run)).await);
        }
        if self.rounds.is_multiple_of(2) {
            rows.reverse();
        }
        [rows.remove(0), rows.remove(0)]
    }

    /// How TVM on compares with off, and what it cost tvmtool.
    pub fn report(&self, off: &Outcome, on: &Outcome) {
        println!(
            "\nTVM (a tvmtool stand-in in this process, one ticket): {:.1} % of TVM off's req/s, p99 {:.2} ms (off {:.2} ms), {} tvmtool checks for {} calls",
            100.0 * on.rps() / off.rps(),
            on.latency.value_at_quantile(0.99) as f64 / 1000.0,
            off.latency.value_at_quantile(0.99) as f64 / 1000.0,
            self.tvmtool.service_checks(),
            on.requests,
        );
    }
}
