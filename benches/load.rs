//! Load benchmark: our server (the real binary, default config, logging on)
//! against a bare baseline in the same run, over HTTP/1.1 keep-alive.
//!
//! Each server runs in a process of its own; this process is the client. Each
//! `/run` carries a fresh RequestId, so the run measures work, not replays;
//! the replay run repeats RequestIds on `/commit`. Prints req/s, latency
//! percentiles, errors, the ratio to the baseline, and the server's peak RSS.
//!
//! `cargo bench --bench load`; knobs (environment): `LOAD_SECS` per run
//! (default 5), `LOAD_CONNS` (64), `LOAD_RATE` total req/s for an open-loop
//! run measured from each request's scheduled start, without coordinated
//! omission (default 0: closed loop), `LOAD_REQUESTS` to stop each run after
//! that many requests instead (e.g. 1000000 for the RSS check), `LOAD_ROUNDS`
//! (default 3): baseline and ours alternate round by round and the median
//! round of each is reported, so a noisy neighbour skews both alike;
//! `LOAD_SERVER_BIN` to measure another build of the server binary.
//!
//! The assistant's row (`support/assistant.rs`; `LOAD_ASSISTANT=0` skips it)
//! drives `/assistant/run` of a second server whose model, a mock in this
//! process, takes 2 s: its latency minus the `/run` wait is the scenario's
//! own overhead. It is always closed loop and bounded by time.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
};

use assistant::AssistantLoad;
use drive::{Outcome, Settings, drive, drive_grpc, fresh_ids, replayed_ids};

#[path = "support/assistant.rs"]
mod assistant;
#[path = "support/baseline.rs"]
mod baseline;
#[path = "support/bodies.rs"]
mod bodies;
#[path = "support/drive.rs"]
mod drive;
#[path = "../tests/it/mock_llm.rs"]
mod mock_llm;

/// Which process this is: the client (default) or a baseline server.
const ROLE: &str = "MEGAMIND_BENCH_ROLE";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `command` and reads its address from the first stdout line
    /// that contains `addr=`; the rest of its output is drained (logging on).
    fn start(mut command: Command) -> Server {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("server starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = lines.by_ref().map_while(Result::ok).find(|l| l.contains("addr=")).expect("address line");
        let addr = line
            .split("addr=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .expect("addr")
            .parse()
            .expect("socket address");
        std::thread::spawn(move || lines.for_each(drop));
        Server { child, addr }
    }

    /// Peak resident set size in MiB, from /proc.
    fn peak_rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: f64 = status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }
}

/// Our binary's `serve` with `extra` flags; `LOAD_SERVER_BIN` runs another
/// build of it (one with frame pointers, for a profiler).
fn ours(extra: &[&str]) -> Server {
    let binary =
        std::env::var("LOAD_SERVER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_megamind-scenario").to_owned());
    let mut command = Command::new(binary);
    command.args(["serve", "--addr", "127.0.0.1:0", "--log-level", "info"]).args(extra);
    Server::start(command)
}

fn baseline(role: &str) -> Server {
    let mut command = Command::new(std::env::current_exe().expect("own path"));
    command.env(ROLE, role);
    Server::start(command)
}

/// The round with the median throughput.
fn median(mut rounds: Vec<Outcome>) -> Outcome {
    rounds.sort_by(|a, b| a.rps().total_cmp(&b.rps()));
    let middle = rounds.len() / 2;
    rounds.swap_remove(middle)
}

fn print(outcomes: &[(Outcome, Option<f64>)]) {
    println!(
        "\n{:<34} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}",
        "run", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors", "vs base"
    );
    for (o, base) in outcomes {
        let ms = |q: f64| o.latency.value_at_quantile(q) as f64 / 1000.0;
        let ratio = base.map_or("-".to_owned(), |b| format!("{:.0} %", 100.0 * o.rps() / b));
        println!(
            "{:<34} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>9}",
            o.name,
            o.rps(),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ms(0.999),
            o.errors,
            ratio
        );
    }
}

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("baseline-http") => return baseline::serve_http(),
        Ok("baseline-grpc") => return baseline::serve_grpc(),
        Ok(other) => panic!("unknown {ROLE} {other:?}"),
        Err(_) => {}
    }
    // `cargo test --benches` runs benches with `--test`: nothing to measure then.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let settings = Settings {
        secs: env_or("LOAD_SECS", 5),
        conns: env_or("LOAD_CONNS", 64),
        rate: env_or("LOAD_RATE", 0),
        requests: env_or("LOAD_REQUESTS", 0),
        rounds: env_or("LOAD_ROUNDS", 3).max(1),
    };
    let mode = if settings.rate > 0 { format!("open loop at {} req/s", settings.rate) } else { "closed loop".into() };
    println!(
        "load: {} connections, {mode}, {} s per run, median of {} alternating rounds",
        settings.conns, settings.secs, settings.rounds
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let base = baseline("baseline-http");
        let base_grpc = baseline("baseline-grpc");
        let server = ours(&[]);
        let mut assistant = match env_or("LOAD_ASSISTANT", 1) {
            0 => None,
            _ => Some(AssistantLoad::start().await),
        };
        let warm = Settings { secs: 1, requests: 0, rate: 0, rounds: 1, ..settings };
        drive("warm-up", base.addr, "/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        drive("warm-up", server.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;

        drive_grpc("warm-up", base_grpc.addr, &warm).await;
        drive_grpc("warm-up", server.addr, &warm).await;
        if let Some(assistant) = assistant.as_mut() {
            assistant.run("warm-up", &warm).await;
        }
        let mut rounds: [Vec<Outcome>; 5] = Default::default();
        let mut assistant_rounds = Vec::new();
        for _ in 0..settings.rounds {
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            rounds[0].push(drive("baseline http /run (bare hyper)", base.addr, "/run", &settings, run).await);
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            rounds[1].push(drive("http /demo/run, fresh RequestIds", server.addr, "/demo/run", &settings, run).await);
            let replay = replayed_ids("video_commit_request", "TScenarioApplyRequest", 100);
            rounds[2].push(drive("http /demo/commit, replays", server.addr, "/demo/commit", &settings, replay).await);
            rounds[3].push(drive_grpc("baseline grpc Run (bare tonic)", base_grpc.addr, &settings).await);
            rounds[4].push(drive_grpc("grpc Run demo, fresh RequestIds", server.addr, &settings).await);
            if let Some(assistant) = assistant.as_mut() {
                assistant_rounds.push(assistant.run(&AssistantLoad::row(), &settings).await);
            }
        }
        let [baseline, run, replay, baseline_grpc, run_grpc] = rounds.map(median);
        let grpc_base = Some(baseline_grpc.rps());
        let base_rps = Some(baseline.rps());
        let mut rows =
            vec![(baseline, None), (run, base_rps), (replay, base_rps), (baseline_grpc, None), (run_grpc, grpc_base)];
        if !assistant_rounds.is_empty() {
            rows.push((median(assistant_rounds), None));
        }
        print(&rows);
        match server.peak_rss_mib() {
            Some(rss) => println!("\nour server's peak RSS: {rss:.1} MiB"),
            None => println!("\nour server's peak RSS: unknown (no /proc)"),
        }
        if let (Some(assistant), Some((outcome, _))) = (&assistant, rows.get(5)) {
            assistant.report(outcome);
        }
    });
}
