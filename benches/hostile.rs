//! Hostile-client benchmark: the real server binary (default configuration)
//! under two attacks, loopback only, bounded in time.
//!
//! 1. Slowloris: `HOSTILE_SLOW` connections (default 6000) each send half a
//!    request head and trickle a byte a second; when the server cuts one off
//!    (header timeout) it reconnects, so that many are held all along. Meanwhile
//!    a normal client drives `/demo/run` on 4 keep-alive connections: its
//!    latency percentiles (target p99 ≤ 10 ms) and the server's peak RSS
//!    (target ≤ 128 MB) are printed.
//! 2. HTTP/2 zero window: `HOSTILE_H2_CONNS` connections (default 400) set a
//!    zero flow-control window and open as many `/demo/run` streams as the
//!    server allows (200 asked), never reading an answer. Printed: RSS under
//!    attack minus idle RSS (target ≤ 64 MB) and RSS once the attacker left.
//!
//! `cargo bench --bench hostile`; `HOSTILE_SECS` (default 15) per attack.
//! This process and the server raise their soft open-files limit to the hard
//! one (`setrlimit`), which must allow twice `HOSTILE_SLOW` plus some: check
//! `ulimit -Hn`.

use std::{
    net::SocketAddr,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use drive::{Settings, drive, fresh_ids};
use process::{Server, env_or};
use tokio::{io::AsyncWriteExt, net::TcpStream};

#[path = "support/bodies.rs"]
mod bodies;
#[path = "support/drive.rs"]
mod drive;
#[path = "support/process.rs"]
mod process;

impl Server {
    fn start_default() -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_megamind-scenario"));
        command.args(["serve", "--addr", "127.0.0.1:0", "--log-level", "info"]);
        Server::start(command)
    }

    /// Resident set size in MiB, from /proc.
    fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS").unwrap_or(f64::NAN)
    }

    /// The highest RSS seen until `stop` is set, sampled every 100 ms.
    async fn peak_rss_until(&self, stop: &AtomicBool) -> f64 {
        let mut peak: f64 = 0.0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(self.rss_mib());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak.max(self.rss_mib())
    }

    /// Waits (at most `bound`) for the server to report no open connections.
    async fn settle(&self, bound: Duration) {
        let started = Instant::now();
        while started.elapsed() < bound {
            if self.open_connections().await == Some(1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `megamind_connections_open`, counting the connection that asks.
    async fn open_connections(&self) -> Option<u64> {
        self.metric("megamind_connections_open").await
    }

    /// The value of an unlabelled metric.
    async fn metric(&self, name: &str) -> Option<u64> {
        let text = self.get("/metrics").await?;
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
    }

    async fn get(&self, path: &str) -> Option<String> {
        use tokio::io::AsyncReadExt;
        let mut stream = TcpStream::connect(self.addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await.ok()?.ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    }
}

/// Holds `count` slowloris connections until `stop` is set: half a head, a
/// byte a second, a new connection whenever the server closes one.
fn slowloris(addr: SocketAddr, count: usize, stop: Arc<AtomicBool>, held: Arc<AtomicUsize>) {
    for at in 0..count {
        let (stop, held) = (stop.clone(), held.clone());
        tokio::spawn(async move {
            // Spread the connects over the first second.
            tokio::time::sleep(Duration::from_micros(at as u64 * 1_000_000 / count as u64)).await;
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut stream) = TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if stream.write_all(b"POST /demo/run HTTP/1.1\r\nhost: bench\r\nx-slow: ").await.is_err() {
                    continue;
                }
                held.fetch_add(1, Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if stream.write_all(b"a").await.is_err() {
                        break;
                    }
                }
                held.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
}

/// One zero-window HTTP/2 connection opening up to `streams` `/demo/run`
/// streams and reading none of their answers, until `stop` is set.
async fn zero_window(addr: SocketAddr, streams: usize, worker: u32, stop: Arc<AtomicBool>, opened: Arc<AtomicUsize>) {
    let Ok(tcp) = TcpStream::connect(addr).await else { return };
    let Ok((client, connection)) = h2::client::Builder::new().initial_window_size(0).handshake(tcp).await else {
        return;
    };
    let connection = tokio::spawn(connection);
    let mut bodies = fresh_ids("poi_run_request", "TScenarioRunRequest")(worker);
    let mut held = Vec::new();
    for n in 0..streams as u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // Past the server's stream limit `ready` waits: the attacker holds what it got.
        let ready = tokio::time::timeout(Duration::from_millis(500), client.clone().ready()).await;
        let Ok(Ok(mut client)) = ready else { break };
        let request = http::Request::post("/demo/run").header("content-type", "application/protobuf").body(()).unwrap();
        let Ok((response, mut body)) = client.send_request(request, false) else { break };
        let _ = body.send_data(bodies(n), true);
        held.push(tokio::spawn(response));
        opened.fetch_add(1, Ordering::Relaxed);
    }
    while !stop.load(Ordering::Relaxed) && !connection.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Answers are dropped unread with the connection: the attacker leaves.
    drop(held);
    connection.abort();
}

fn main() {
    // `cargo test --benches` runs benches with `--test`: nothing to measure then.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
    let secs: u64 = env_or("HOSTILE_SECS", 15);
    let slow: usize = env_or("HOSTILE_SLOW", 6000);
    let h2_conns: usize = env_or("HOSTILE_H2_CONNS", 400);
    println!("hostile: {secs} s per attack; open-files limit {limit}");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let server = Server::start_default();
        let warm = Settings { secs: 1, conns: 4, rate: 0, requests: 0, rounds: 1, ticket: None };
        drive("warm-up", server.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;
        let idle_rss = server.rss_mib();
        let quiet =
            drive("quiet", server.addr, "/demo/run", &warm, fresh_ids("poi_run_request", "TScenarioRunRequest")).await;

        // 1. Slowloris.
        let (stop, held) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        slowloris(server.addr, slow, stop.clone(), held.clone());
        let ramp = Instant::now();
        while held.load(Ordering::Relaxed) < slow * 95 / 100 && ramp.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let measuring = Arc::new(AtomicBool::new(false));
        let normal = Settings { secs, ..warm };
        let peak = server.peak_rss_until(&measuring);
        let load = async {
            let outcome =
                drive("normal", server.addr, "/demo/run", &normal, fresh_ids("poi_run_request", "TScenarioRunRequest"))
                    .await;
            measuring.store(true, Ordering::Relaxed);
            outcome
        };
        let (under_slowloris, slow_peak) = tokio::join!(load, peak);
        let slow_held = held.load(Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        server.settle(Duration::from_secs(20)).await;
        // As after the second attack: what the slow connections freed must be
        // gone, or the next baseline would count it.
        tokio::time::sleep(Duration::from_secs(2)).await;

        // 2. HTTP/2 zero window.
        let before_h2 = server.rss_mib();
        let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let attackers: Vec<_> = (0..h2_conns)
            .map(|worker| {
                tokio::spawn(zero_window(server.addr, 200, 0x8000 + worker as u32, stop.clone(), opened.clone()))
            })
            .collect();
        let measuring = Arc::new(AtomicBool::new(false));
        let (_, h2_peak) = tokio::join!(
            async {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                measuring.store(true, Ordering::Relaxed);
            },
            server.peak_rss_until(&measuring)
        );
        let streams = opened.load(Ordering::Relaxed);
        let refused = server.metric("megamind_h2_streams_refused_total").await.unwrap_or(0);
        stop.store(true, Ordering::Relaxed);
        for attacker in attackers {
            let _ = attacker.await;
        }
        server.settle(Duration::from_secs(20)).await;
        // Freed memory goes back to the system as the allocator purges it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after_h2 = server.rss_mib();

        let ms = |o: &drive::Outcome, q: f64| o.latency.value_at_quantile(q) as f64 / 1000.0;
        println!("\n{:<44} {:>10} {:>9} {:>9} {:>9} {:>8}", "run", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "errors");
        for (name, o) in [("normal client, quiet server", &quiet), ("normal client, slowloris held", &under_slowloris)]
        {
            println!(
                "{name:<44} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>8}",
                o.rps(),
                ms(o, 0.5),
                ms(o, 0.99),
                ms(o, 0.999),
                o.errors
            );
        }
        println!("\n{:<60} {:>10} {:>8}", "server RSS", "MiB", "target");
        println!("{:<60} {:>10.1} {:>8}", "idle", idle_rss, "");
        println!("{:<60} {:>10.1} {:>8}", format!("peak, {slow_held} slowloris connections held"), slow_peak, "≤ 128");
        println!("{:<60} {:>10.1} {:>8}", "before the HTTP/2 attack", before_h2, "");
        println!(
            "{:<60} {:>10.1} {:>8}",
            format!("HTTP/2 zero window, peak minus before ({h2_conns} conns, {streams} streams asked)"),
            h2_peak - before_h2,
            "≤ 64"
        );
        println!("{:<60} {:>10.1} {:>8}", "after the attacker left, minus before", after_h2 - before_h2, "≈ 0");
        println!("{:<60} {:>10.1} {:>8}", "after the attacker left, minus idle", after_h2 - idle_rss, "");
        println!("\nHTTP/2 streams the server refused (max_open_requests): {refused}");
    });
}
