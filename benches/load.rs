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
//! round of each is reported, so a noisy neighbour skews both alike.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

#[path = "support/baseline.rs"]
mod baseline;
#[path = "support/bodies.rs"]
mod bodies;

/// Which process this is: the client (default) or a baseline server.
const ROLE: &str = "MEGAMIND_BENCH_ROLE";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Settings {
    secs: u64,
    conns: usize,
    rate: u64,
    requests: u64,
    rounds: usize,
}

/// What one run measured.
struct Outcome {
    name: String,
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Outcome {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
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

fn ours() -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_megamind-scenario"));
    command.args(["serve", "--addr", "127.0.0.1:0", "--log-level", "info"]);
    Server::start(command)
}

fn baseline(role: &str) -> Server {
    let mut command = Command::new(std::env::current_exe().expect("own path"));
    command.env(ROLE, role);
    Server::start(command)
}

/// Drives gRPC `Run` of `addr` with `settings.conns` calls in flight over a
/// few HTTP/2 connections (as ghz does), a fresh RequestId per call.
async fn drive_grpc(name: &str, addr: SocketAddr, settings: &Settings) -> Outcome {
    use megamind_scenario::proto::{
        megamind_scenario::v1::scenario_client::ScenarioClient, n_alice::n_scenarios::TScenarioRunRequest,
    };
    let template: TScenarioRunRequest = megamind_scenario::codec::decode(
        bodies::fixture_text("poi_run_request").as_bytes(),
        megamind_scenario::codec::Format::Text,
    )
    .expect("fixture parses");
    let channels: usize = env_or("LOAD_GRPC_CHANNELS", 4);
    let mut clients = Vec::new();
    for _ in 0..channels.max(1) {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect");
        clients.push(ScenarioClient::new(channel));
    }
    let deadline = Instant::now() + Duration::from_secs(settings.secs);
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..settings.conns {
        let mut client = clients[worker % clients.len()].clone();
        let mut request = template.clone();
        let (sent, limit) = (sent.clone(), settings.requests);
        tasks.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut errors = 0u64;
            let mut n = 0u64;
            loop {
                if (limit == 0 && Instant::now() >= deadline)
                    || (limit > 0 && sent.fetch_add(1, Ordering::Relaxed) >= limit)
                {
                    break;
                }
                n += 1;
                if let Some(base) = request.base_request.as_mut() {
                    base.request_id = format!("{worker:08x}-0000-0000-0000-{n:012x}");
                }
                let begun = Instant::now();
                let mut call = tonic::Request::new(request.clone());
                call.metadata_mut().insert("x-scenario", "demo".parse().expect("ascii"));
                match client.run(call).await {
                    Ok(response) if response.get_ref().response.is_some() => {}
                    _ => errors += 1,
                }
                latency.saturating_record(begun.elapsed().as_micros() as u64);
            }
            (latency, errors)
        }));
    }
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut errors = 0;
    for task in tasks {
        let (histogram, task_errors) = task.await.expect("worker");
        latency.add(histogram).expect("same bounds");
        errors += task_errors;
    }
    Outcome { name: name.to_owned(), requests: latency.len(), errors, elapsed: started.elapsed(), latency }
}

/// Drives `path` of `addr` with `conns` keep-alive connections; `body(worker, n)` makes each request body.
async fn drive(
    name: &str,
    addr: SocketAddr,
    path: &'static str,
    settings: &Settings,
    body: impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> + Send + Sync + 'static,
) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(settings.secs);
    let sent = Arc::new(AtomicU64::new(0));
    let body = Arc::new(body);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..settings.conns {
        let (sent, body) = (sent.clone(), body.clone());
        let limit = settings.requests;
        let interval =
            (settings.rate > 0).then(|| Duration::from_secs_f64(settings.conns as f64 / settings.rate as f64));
        tasks.push(tokio::spawn(async move {
            let mut make = body(worker as u32);
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut errors = 0u64;
            let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).expect("nodelay");
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
            tokio::spawn(connection);
            let mut next = Instant::now();
            let mut n = 0u64;
            loop {
                if Instant::now() >= deadline && limit == 0 {
                    break;
                }
                if limit > 0 && sent.fetch_add(1, Ordering::Relaxed) >= limit {
                    break;
                }
                n += 1;
                // Open loop: latency counts from the scheduled start, so a stall is not hidden.
                let scheduled = match interval {
                    Some(interval) => {
                        next += interval;
                        tokio::time::sleep_until(next.into()).await;
                        next
                    }
                    None => Instant::now(),
                };
                let request = Request::post(path)
                    .header("host", "bench")
                    .header("content-type", "application/protobuf")
                    .body(Full::new(make(n)))
                    .expect("request");
                let ok = match sender.send_request(request).await {
                    Ok(response) => {
                        let status = response.status();
                        let body = response.into_body().collect().await.map(|b| b.to_bytes());
                        status == StatusCode::OK && body.is_ok_and(|b| !b.is_empty())
                    }
                    Err(_) => false,
                };
                if !ok {
                    errors += 1;
                }
                latency.saturating_record(scheduled.elapsed().as_micros() as u64);
            }
            (latency, errors)
        }));
    }
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut errors = 0;
    for task in tasks {
        let (histogram, task_errors) = task.await.expect("worker");
        latency.add(histogram).expect("same bounds");
        errors += task_errors;
    }
    Outcome { name: name.to_owned(), requests: latency.len(), errors, elapsed: started.elapsed(), latency }
}

fn fresh_ids(name: &'static str, type_name: &'static str) -> impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> {
    let stamped = bodies::Stamped::new(name, type_name);
    move |worker| {
        let mut stamped = stamped.clone();
        Box::new(move |n| Bytes::copy_from_slice(stamped.with_id(worker, n)))
    }
}

fn replayed_ids(
    name: &'static str,
    type_name: &'static str,
    distinct: u64,
) -> impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> {
    let stamped = bodies::Stamped::new(name, type_name);
    move |_| {
        let mut stamped = stamped.clone();
        Box::new(move |n| Bytes::copy_from_slice(stamped.with_id(0, n % distinct)))
    }
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
        let server = ours();
        let warm = Settings { secs: 1, requests: 0, rate: 0, rounds: 1, ..settings };
        drive("warm-up", base.addr, "/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        drive("warm-up", server.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;

        drive_grpc("warm-up", base_grpc.addr, &warm).await;
        drive_grpc("warm-up", server.addr, &warm).await;
        let mut rounds: [Vec<Outcome>; 5] = Default::default();
        for _ in 0..settings.rounds {
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            rounds[0].push(drive("baseline http /run (bare hyper)", base.addr, "/run", &settings, run).await);
            let run = fresh_ids("poi_run_request", "TScenarioRunRequest");
            rounds[1].push(drive("http /demo/run, fresh RequestIds", server.addr, "/demo/run", &settings, run).await);
            let replay = replayed_ids("video_commit_request", "TScenarioApplyRequest", 100);
            rounds[2].push(drive("http /demo/commit, replays", server.addr, "/demo/commit", &settings, replay).await);
            rounds[3].push(drive_grpc("baseline grpc Run (bare tonic)", base_grpc.addr, &settings).await);
            rounds[4].push(drive_grpc("grpc Run demo, fresh RequestIds", server.addr, &settings).await);
        }
        let [baseline, run, replay, baseline_grpc, run_grpc] = rounds.map(median);
        let grpc_base = Some(baseline_grpc.rps());
        let base_rps = Some(baseline.rps());
        print(&[(baseline, None), (run, base_rps), (replay, base_rps), (baseline_grpc, None), (run_grpc, grpc_base)]);
        match server.peak_rss_mib() {
            Some(rss) => println!("\nour server's peak RSS: {rss:.1} MiB"),
            None => println!("\nour server's peak RSS: unknown (no /proc)"),
        }
    });
}
