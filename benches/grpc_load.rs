//! ghz's load test without ghz: every config in `deploy/ghz/` — its call,
//! metadata and `data` template — driven over gRPC with the same knobs
//! (total, concurrency, connections, rps, timeout), reported with ghz's
//! summary: count, total, slowest, fastest, average, requests/sec, the
//! response time histogram, the latency distribution and the status codes.
//!
//! `cargo bench --bench grpc_load` starts the release binary on a free port
//! (default configuration) and runs each config in turn. Knobs (environment,
//! each overriding every config's own value): `GHZ_TOTAL`,
//! `GHZ_CONCURRENCY`, `GHZ_CONNECTIONS`, `GHZ_RPS` (calls per second over
//! all workers; 0 or unset: as fast as answers come), `GHZ_CONFIGS` (only
//! the files whose name contains it, e.g. `reflection` or `commit`),
//! `GHZ_HOST` (a server already running, e.g. `127.0.0.1:8080`, instead of
//! starting one).
//!
//! The schema comes from the server's own descriptors, as ghz gets it by
//! reflection (`*.reflection.json`) or from `proto/` (`*.proto.json`): both
//! sets send the same bytes. Each `{{newUUID}}` of a template becomes a fresh
//! UUID per call, as in ghz.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use ghz_config::{GhzConfig, Knobs};
use ghz_report::Report;
use hdrhistogram::Histogram;
use megamind_core::transport::grpc::BytesCodec;
use process::{Server, env_or};
use tonic::transport::Channel;

// Their tests run in the test binary (tests/it); a bench without a harness
// compiles them under `cargo test --benches` but drops the `#[test]`s.
#[path = "support/ghz_config.rs"]
#[cfg_attr(test, allow(dead_code, unused_imports))]
mod ghz_config;
#[path = "support/ghz_report.rs"]
#[cfg_attr(test, allow(dead_code, unused_imports))]
mod ghz_report;
#[path = "support/process.rs"]
#[allow(dead_code)]
mod process;

/// One worker's tally.
struct Tally {
    latency: Histogram<u64>,
    codes: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
}

/// Drives `config` against `addr` as ghz would and reports what came back.
async fn drive(config: &GhzConfig, addr: SocketAddr) -> Report {
    let mut channels = Vec::new();
    for _ in 0..config.connections.max(1) {
        let endpoint = Channel::from_shared(format!("http://{addr}")).expect("an endpoint").tcp_nodelay(true);
        channels.push(endpoint.connect().await.unwrap_or_else(|e| panic!("connecting to {addr}: {e}")));
    }
    let config = Arc::new(config.clone());
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..config.concurrency.max(1) {
        let (config, next) = (config.clone(), next.clone());
        let mut grpc = tonic::client::Grpc::new(channels[worker % channels.len()].clone());
        let mut body = config.body.clone();
        workers.push(tokio::spawn(async move {
            let mut tally = Tally {
                latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram"),
                codes: BTreeMap::new(),
                errors: BTreeMap::new(),
            };
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= config.total {
                    break;
                }
                if config.rps > 0 {
                    // Open loop: call n is due n/rps seconds after the start.
                    let due = started + Duration::from_secs_f64(n as f64 / config.rps as f64);
                    tokio::time::sleep_until(due.into()).await;
                }
                let mut request = tonic::Request::new(body.fresh());
                request.set_timeout(config.timeout);
                for (key, value) in &config.metadata {
                    request.metadata_mut().insert(key.clone(), value.clone());
                }
                let begun = Instant::now();
                let answer = async {
                    grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                    // The body goes as it is: encoded once, its UUIDs stamped per call.
                    grpc.unary(request, config.path.clone(), BytesCodec).await
                };
                let status = match tokio::time::timeout(config.timeout, answer).await {
                    Ok(Ok(_)) => None,
                    Ok(Err(status)) => Some(status),
                    Err(_) => Some(tonic::Status::deadline_exceeded("the call's timeout passed")),
                };
                tally.latency.saturating_record(begun.elapsed().as_micros() as u64);
                let code = status.as_ref().map_or(tonic::Code::Ok, tonic::Status::code);
                *tally.codes.entry(ghz_report::code_name(code)).or_default() += 1;
                if let Some(status) = status {
                    *tally.errors.entry(format!("{:?}: {}", status.code(), status.message())).or_default() += 1;
                }
            }
            tally
        }));
    }
    let mut report = Report::new(&config.name);
    for worker in workers {
        let tally = worker.await.expect("a worker");
        report.add(&tally.latency, tally.codes, tally.errors);
    }
    report.total = started.elapsed();
    report
}

fn main() {
    // `cargo test --benches` runs benches with `--test`: nothing to measure then.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let knobs = Knobs {
        total: env_or("GHZ_TOTAL", 0),
        concurrency: env_or("GHZ_CONCURRENCY", 0),
        connections: env_or("GHZ_CONNECTIONS", 0),
        rps: std::env::var("GHZ_RPS").ok().and_then(|v| v.parse().ok()),
    };
    let only = std::env::var("GHZ_CONFIGS").unwrap_or_default();
    let configs = GhzConfig::all(&only, &knobs);
    assert!(!configs.is_empty(), "no config in deploy/ghz matches GHZ_CONFIGS={only:?}");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let (server, addr) = match std::env::var("GHZ_HOST") {
            Ok(host) => (None, host.parse().unwrap_or_else(|e| panic!("GHZ_HOST={host}: {e}"))),
            Err(_) => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_megamind-scenario"));
                command.args(["serve", "--addr", "127.0.0.1:0", "--log-level", "info"]);
                let server = Server::start(command);
                let addr = server.addr;
                (Some(server), addr)
            }
        };
        for config in &configs {
            println!("\n{} ({}), {addr}: {}", config.file, config.call, config.knobs_line());
            drive(config, addr).await.print();
        }
        drop(server);
    });
}
