//! Load benchmark: our server (the real binary, default config, logging on)
//! against a bare baseline in the same run, over HTTP/1.1 keep-alive.
//!
//! Each server runs in a process of its own; this process is the client. Each
//! `/run` carries a fresh RequestId, so the run measures work, not replays;
//! the replay run repeats RequestIds on `/commit`. Prints req/s, latency
//! percentiles, errors, the ratio to the baseline (of the median rounds, and
//! round by round: the median and range of each round's ratio to the
//! baseline's round beside it), and the server's peak RSS.
//!
//! `cargo bench --bench load`; knobs (environment): `LOAD_SECS` per run
//! (default 5), `LOAD_CONNS` (64), `LOAD_RATE` total req/s for an open-loop
//! run measured from each request's scheduled start, without coordinated
//! omission (default 0: closed loop), `LOAD_REQUESTS` to stop each run after
//! that many requests instead (e.g. 1000000 for the RSS check), `LOAD_ROUNDS`
//! (default 3): baseline and ours alternate round by round and the median
//! round of each is reported, so a noisy neighbour skews both alike;
//! `LOAD_SERVER_BIN` to measure another build of the server binary,
//! `LOAD_GRPC=0` to skip the gRPC rows. Each row also prints the CPU time
//! the measured server spent per request (user + system, from /proc).
//!
//! The fresh `/demo/run` row is driven again against the same server with
//! an answer cache that fits in a core's L2 (`LOAD_SMALL_CACHE=0` skips
//! it): the difference is what keeping an entry for every fresh answer
//! costs (the demo's answers are the same bytes, kept once), which moves
//! with the machine's caches more than any other figure here.
//!
//! The assistant's row (`support/assistant.rs`; `LOAD_ASSISTANT=0` skips it)
//! drives `/assistant/run` of a second server whose model, a mock in this
//! process, takes 2 s: its latency minus the `/run` wait is the scenario's
//! own overhead. It is always closed loop and bounded by time.
//!
//! The dialog row (`support/dialogs.rs`; `LOAD_DIALOGS=0` skips it) plays
//! 200 dialogs at once against a mock model whose latency is drawn from
//! 0.3-3 s, callbacks followed: the share answered without a user repeat,
//! hops per answer, the time to the answer's first word, late handler
//! answers, hop latency, model calls per answer.
//!
//! The shared-store rows (`support/shared_store.rs`; `LOAD_REDIS=0` skips
//! them, as does a machine without `redis-server`) drive a second server
//! whose idempotency store is a local `redis-server`: fresh `/demo/run`s and
//! `/demo/commit` replays, with Redis round trips per call and the ratio to
//! the memory store's rows of the same rounds. Redis runs without
//! persistence, or with `LOAD_REDIS_APPENDFSYNC=always` (or `everysec`) with
//! an append-only file synced so (the replica rows' Redis too).
//!
//! The TVM rows (`support/tvm.rs`; `LOAD_TVM=0` skips them) drive two
//! more servers with one service ticket, one checking it through a tvmtool
//! stand-in in this process and one not, and print the ratio.
//!
//! The stream rows (`support/streams.rs`; `LOAD_STREAMS`, 10000 by default,
//! 0 skips them) follow model calls streamed at 50 tokens/s on the JSONSeq
//! stream: the delay from a token's write by the model to its event's read
//! by a subscriber, and with `LOAD_STREAMS` streams open, the server's RSS
//! per stream and `/demo/run`'s latency beside them.
//!
//! The replica rows (`support/replicas.rs`; `LOAD_REPLICAS=0` skips them, as
//! does a machine without `redis-server`) play the dialog row and the
//! 100-stream row again over 3 server processes sharing one local
//! `redis-server`: each hop of a dialog on the next replica, each stream's
//! model call started on one replica and read on the others. Printed beside
//! the one-server rows of the same run: the share answered without a repeat,
//! model calls per answer, late answers, hop latency, token lateness.

use std::{process::Command, time::Duration};

use assistant::AssistantLoad;
use drive::{Outcome, Settings, drive, drive_grpc, fresh_ids, replayed_ids};
use process::{Server, env_or};
use shared_store::SharedStoreLoad;
use tvm::TvmLoad;

#[path = "support/assistant.rs"]
mod assistant;
#[path = "support/baseline.rs"]
mod baseline;
#[path = "support/bodies.rs"]
mod bodies;
#[path = "support/dialogs.rs"]
mod dialogs;
#[path = "support/drive.rs"]
mod drive;
#[path = "../tests/it/mock_llm.rs"]
mod mock_llm;
#[path = "support/process.rs"]
mod process;
#[path = "../tests/support/redis_server.rs"]
#[allow(dead_code)]
mod redis_server;
#[path = "support/replicas.rs"]
mod replicas;
#[path = "support/shared_store.rs"]
mod shared_store;
#[path = "support/streams.rs"]
mod streams;
#[path = "support/tvm.rs"]
mod tvm;
#[path = "../tests/support/tvmtool.rs"]
#[allow(dead_code)]
mod tvmtool;

/// Which process this is: the client (default) or a baseline server.
const ROLE: &str = "MEGAMIND_BENCH_ROLE";

/// The answer cache of the row that keeps its answers in a core's L2 (2 MiB
/// or more on the machines measured).
const SMALL_CACHE_BYTES: &str = "262144";
const SMALL_CACHE_ROW: &str = "http /demo/run, fresh, cache in L2";

/// What keeping an entry for every fresh answer costs: the fresh row
/// against the same server whose cache fits in a core's L2, in server CPU
/// per request.
fn report_footprint(full: &Outcome, small: &Outcome) {
    if let (Some(full_us), Some(small_us)) = (full.cpu_per_request_us(), small.cpu_per_request_us()) {
        println!(
            "\nthe answer cache's footprint: fresh /demo/run at {full_us:.1} µs of server CPU per request with the \
             default 16 MiB cache, {small_us:.1} µs with {SMALL_CACHE_BYTES} bytes ({:+.1} µs)",
            full_us - small_us
        );
    }
}

impl Server {
    /// CPU time (user + system, all threads) the process has used, from /proc.
    fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second()))
    }

    /// Runs `load` against this server, noting the CPU time the server spent on it.
    async fn measure(&self, load: impl Future<Output = Outcome>) -> Outcome {
        let before = self.cpu_time();
        let mut outcome = load.await;
        outcome.server_cpu = before.zip(self.cpu_time()).map(|(before, after)| after.saturating_sub(before));
        outcome
    }

    /// Peak resident set size in MiB, from /proc.
    fn peak_rss_mib(&self) -> Option<f64> {
        self.status_mib("VmHWM")
    }
}

/// `/proc/*/stat` counts CPU time in clock ticks: 100 per second on Linux
/// unless `getconf CLK_TCK` says otherwise.
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Our binary's `serve` with `extra` flags; `LOAD_SERVER_BIN` runs another
/// build of it (one with frame pointers, for a profiler).
fn ours<S: AsRef<std::ffi::OsStr>>(extra: &[S]) -> Server {
    ours_with_env(extra, &[])
}

/// [`ours`] with the environment variables `env` besides.
fn ours_with_env<S: AsRef<std::ffi::OsStr>>(extra: &[S], env: &[(&str, &str)]) -> Server {
    let binary =
        std::env::var("LOAD_SERVER_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_megamind-scenario").to_owned());
    let mut command = Command::new(binary);
    command.args(["serve", "--addr", "127.0.0.1:0", "--log-level", "info"]).args(extra).envs(env.iter().copied());
    Server::start(command)
}

fn baseline(role: &str) -> Server {
    let mut command = Command::new(std::env::current_exe().expect("own path"));
    command.env(ROLE, role);
    Server::start(command)
}

/// `LOAD_REDIS_APPENDFSYNC`: how the Redis of the shared-store and replica
/// rows syncs its append-only file (`always`, `everysec`, `no`); unset, it
/// keeps none.
fn appendfsync() -> Option<&'static str> {
    let sync = std::env::var("LOAD_REDIS_APPENDFSYNC").ok()?;
    let known = ["always", "everysec", "no"].into_iter().find(|known| *known == sync);
    Some(known.unwrap_or_else(|| panic!("LOAD_REDIS_APPENDFSYNC={sync}: always, everysec or no")))
}

/// The round with the median throughput.
fn median(mut rounds: Vec<Outcome>) -> Outcome {
    rounds.sort_by(|a, b| a.rps().total_cmp(&b.rps()));
    let middle = rounds.len() / 2;
    rounds.swap_remove(middle)
}

/// A run against its baseline: the baseline's median req/s, and the run's
/// req/s over the baseline's of the same round, round by round (each pair
/// ran minutes apart at most, so a neighbour that came or went between
/// rounds moves both).
struct Compared {
    base_rps: f64,
    per_round: Vec<f64>,
}

impl Compared {
    /// The ratios of `run`'s rounds to `base`'s, round by round, sorted.
    fn per_round(base: &[Outcome], run: &[Outcome]) -> Vec<f64> {
        let mut per_round: Vec<f64> = base.iter().zip(run).map(|(b, r)| r.rps() / b.rps()).collect();
        per_round.sort_by(f64::total_cmp);
        per_round
    }

    /// The median round's ratio and the range, in percent: `76 (72–79)`.
    fn spread(&self) -> String {
        match &self.per_round[..] {
            [] => "-".to_owned(),
            [only] => format!("{:.0}", 100.0 * only),
            all => {
                let pct = |r: &f64| 100.0 * r;
                let (low, mid, high) = (pct(&all[0]), pct(&all[all.len() / 2]), pct(&all[all.len() - 1]));
                format!("{mid:.0} ({low:.0}–{high:.0})")
            }
        }
    }
}

fn print(outcomes: &[(Outcome, Option<Compared>)]) {
    println!(
        "\n{:<34} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>14} {:>12}",
        "run", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "errors", "vs base", "% per round", "server µs/req"
    );
    for (o, compared) in outcomes {
        print_row(o, compared.as_ref());
    }
}

/// The medians of a baseline's rounds and of the runs compared with it, each
/// compared with the baseline (nothing for the baseline itself); nothing for
/// runs that were skipped.
fn against<const N: usize>(base: Vec<Outcome>, runs: [Vec<Outcome>; N]) -> Vec<(Outcome, Option<Compared>)> {
    if base.is_empty() {
        return Vec::new();
    }
    let runs: Vec<_> =
        runs.into_iter().filter(|r| !r.is_empty()).map(|r| (Compared::per_round(&base, &r), r)).collect();
    let base = median(base);
    let base_rps = base.rps();
    let mut rows = vec![(base, None)];
    rows.extend(runs.into_iter().map(|(per_round, r)| (median(r), Some(Compared { base_rps, per_round }))));
    rows
}

fn print_row(o: &Outcome, compared: Option<&Compared>) {
    let ms = |q: f64| o.latency.value_at_quantile(q) as f64 / 1000.0;
    let ratio = compared.map_or("-".to_owned(), |c| format!("{:.0} %", 100.0 * o.rps() / c.base_rps));
    let per_round = compared.map_or("-".to_owned(), Compared::spread);
    let cpu = o.cpu_per_request_us().map_or("-".to_owned(), |us| format!("{us:.1}"));
    println!(
        "{:<34} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>9} {:>14} {:>12}",
        o.name,
        o.rps(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(0.999),
        o.errors,
        ratio,
        per_round,
        cpu
    );
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
        ticket: None,
    };
    let mode = if settings.rate > 0 { format!("open loop at {} req/s", settings.rate) } else { "closed loop".into() };
    println!(
        "load: {} connections, {mode}, {} s per run, median of {} alternating rounds",
        settings.conns, settings.secs, settings.rounds
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let base = baseline("baseline-http");
        let grpc = env_or("LOAD_GRPC", 1) != 0;
        let base_grpc = grpc.then(|| baseline("baseline-grpc"));
        let server = ours::<&str>(&[]);
        // The same server with an answer cache that fits in a core's L2: the
        // fresh row's cost without the footprint of the answers it keeps,
        // which moves with the machine's caches and its other tenants.
        let small_cache = (env_or("LOAD_SMALL_CACHE", 1) != 0)
            .then(|| ours_with_env::<&str>(&[], &[("MEGAMIND_CACHE_MAX_BYTES", SMALL_CACHE_BYTES)]));
        let mut shared = if env_or("LOAD_REDIS", 1) != 0 { SharedStoreLoad::start(appendfsync()) } else { None };
        let mut tvm = if env_or("LOAD_TVM", 1) != 0 { Some(TvmLoad::start().await) } else { None };
        let mut assistant = match env_or("LOAD_ASSISTANT", 1) {
            0 => None,
            _ => Some(AssistantLoad::start().await),
        };
        let warm = Settings { secs: 1, requests: 0, rate: 0, rounds: 1, ..settings };
        drive("warm-up", base.addr, "/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        drive("warm-up", server.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        if let Some(small) = &small_cache {
            drive("warm-up", small.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        }
        if let Some(base_grpc) = &base_grpc {
            drive_grpc("warm-up", base_grpc.addr, &warm).await;
            drive_grpc("warm-up", server.addr, &warm).await;
        }
        if let Some(assistant) = assistant.as_mut() {
            assistant.run("warm-up", &warm).await;
        }
        if let Some(shared) = &shared {
            shared.warm_up(&warm).await;
        }
        if let Some(tvm) = &tvm {
            tvm.warm_up(&warm).await;
        }
        let mut rounds: [Vec<Outcome>; 10] = Default::default();
        let mut assistant_rounds = Vec::new();
        for _ in 0..settings.rounds {
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            let name = "baseline http /run (bare hyper)";
            rounds[0].push(base.measure(drive(name, base.addr, "/run", &settings, run)).await);
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            let name = "http /demo/run, fresh RequestIds";
            rounds[1].push(server.measure(drive(name, server.addr, "/demo/run", &settings, run)).await);
            let replay = replayed_ids("video_commit_request", "TScenarioApplyRequest", 100);
            let name = "http /demo/commit, replays";
            rounds[2].push(server.measure(drive(name, server.addr, "/demo/commit", &settings, replay)).await);
            if let Some(small) = &small_cache {
                let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
                rounds[9].push(small.measure(drive(SMALL_CACHE_ROW, small.addr, "/demo/run", &settings, run)).await);
            }
            if let Some(shared) = shared.as_mut() {
                let [fresh, replays] = shared.round(&settings).await;
                rounds[5].push(fresh);
                rounds[6].push(replays);
            }
            if let Some(tvm) = tvm.as_mut() {
                let [off, on] = tvm.round(&settings).await;
                rounds[7].push(off);
                rounds[8].push(on);
            }
            if let Some(base_grpc) = &base_grpc {
                let name = "baseline grpc Run (bare tonic)";
                rounds[3].push(base_grpc.measure(drive_grpc(name, base_grpc.addr, &settings)).await);
                let name = "grpc Run demo, fresh RequestIds";
                rounds[4].push(server.measure(drive_grpc(name, server.addr, &settings)).await);
            }
            if let Some(assistant) = assistant.as_mut() {
                assistant_rounds.push(assistant.run(&AssistantLoad::row(), &settings).await);
            }
        }
        let [http_base, run, replay, grpc_base, run_grpc, shared_run, shared_replay, tvm_off, tvm_on, small_run] =
            rounds;
        let mut rows = against(http_base, [run, replay, small_run, shared_run, shared_replay, tvm_off, tvm_on]);
        rows.extend(against(grpc_base, [run_grpc]));
        let assistant_row = (!assistant_rounds.is_empty()).then(|| median(assistant_rounds));
        print(&rows);
        if let Some(outcome) = &assistant_row {
            print_row(outcome, None);
        }
        let row = |name: &str| rows.iter().map(|(o, _)| o).find(|o| o.name == name);
        if let Some(shared) = &shared {
            let memory = [row("http /demo/run, fresh RequestIds"), row("http /demo/commit, replays")];
            let redis = [row(shared_store::FRESH), row(shared_store::REPLAYS)];
            if let ([Some(m0), Some(m1)], [Some(r0), Some(r1)]) = (memory, redis) {
                shared.report([r0, r1], [m0, m1]);
            }
        }
        if let (Some(full), Some(small)) = (row("http /demo/run, fresh RequestIds"), row(SMALL_CACHE_ROW)) {
            report_footprint(full, small);
        }
        if let Some(tvm) = &tvm
            && let (Some(off), Some(on)) = (row(tvm::OFF), row(tvm::ON))
        {
            tvm.report(off, on);
        }
        match server.peak_rss_mib() {
            Some(rss) => println!("\nour server's peak RSS: {rss:.1} MiB"),
            None => println!("\nour server's peak RSS: unknown (no /proc)"),
        }
        if let (Some(assistant), Some(outcome)) = (&assistant, &assistant_row) {
            assistant.report(outcome);
        }
        let mut single = replicas::Single { dialogs: None, streams: None };
        if env_or("LOAD_DIALOGS", 1) != 0 {
            single.dialogs = Some(dialogs::DialogLoad::start().await.run(None).await);
        }
        if env_or("LOAD_STREAMS", 10_000) != 0 {
            single.streams = Some(streams::run(&settings).await);
        }
        if env_or("LOAD_REPLICAS", 1) != 0 {
            replicas::run(single, appendfsync()).await;
        }
    });
}
