//! The JSONSeq stream rows of the load benchmark (`GET /llm/stream/...`).
//!
//! A mock model in this process streams each answer at [`TOKENS_PER_SEC`],
//! one SSE chunk per token, every token stamped with the microsecond it was
//! written (`t<micros> `) on a clock this process shares with the
//! subscribers. A server process of its own points `--llm-base-url` at it.
//! Each model call is started by one `/assistant/run` and followed by
//! [`SUBSCRIBERS_PER_CALL`] subscribers over plain HTTP/1.1 sockets; a
//! subscriber reads every `final_delta` and notes how long after its write
//! the token arrived: an upper bound of the server's own time from an
//! upstream chunk's arrival to its event being written (two loopback hops
//! included).
//!
//! Two rows: latency with [`LATENCY_STREAMS`] streams (a quiet server), and
//! memory with `LOAD_STREAMS` (10,000) streams at once: the server's RSS
//! before and at the peak, per stream, and the p99 of `/demo/run` driven
//! beside the streams against the same server before they open.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

use super::{
    Server,
    drive::{Outcome, Settings, drive, fresh_ids},
    env_or, ours,
};

/// Each answer's pace.
pub const TOKENS_PER_SEC: u64 = 50;
/// The key the server signs stream addresses with, so that subscribers can sign their own.
pub const SIGNING_KEY: &str = "the load benchmark's stream address signing key";

/// Tokens of each answer: 8 s of streaming.
const TOKENS: u64 = 400;
/// Subscribers of each model call.
const SUBSCRIBERS_PER_CALL: usize = 10;
/// Streams of the latency row.
pub const LATENCY_STREAMS: usize = 100;

/// Microseconds since the bench started, the mock's and the subscribers' clock.
fn now_us(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

/// A mock OpenAI-compatible model: every request answered with a stream of
/// [`TOKENS`] stamped tokens at [`TOKENS_PER_SEC`], then `[DONE]`.
pub async fn mock_model(epoch: Instant) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the mock");
    let addr = listener.local_addr().expect("mock address");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(answer(socket, epoch));
        }
    });
    addr
}

async fn answer(mut socket: TcpStream, epoch: Instant) {
    let _ = socket.set_nodelay(true);
    if read_request(&mut socket).await.is_none() {
        return;
    }
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let start = tokio::time::Instant::now();
    let gap = Duration::from_micros(1_000_000 / TOKENS_PER_SEC);
    for k in 0..TOKENS {
        tokio::time::sleep_until(start + gap * k as u32).await;
        let chunk =
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{} \"}}}}]}}\n\n", now_us(epoch));
        if socket.write_all(chunk.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = socket.write_all(b"data: [DONE]\n\n").await;
}

/// Reads one request (its head and its `content-length` body).
async fn read_request(socket: &mut TcpStream) -> Option<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = socket.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(());
        }
    }
}

/// One `/assistant/run` starting call `id` (the answer hands over at once).
async fn start_call(server: SocketAddr, id: &str) -> bool {
    let text = format!(
        "BaseRequest {{ RequestId: \"{id}\" ServerTimeMs: 1764210832530 }} Input {{ Text {{ Utterance: \"расскажи\" }} }}"
    );
    let request = format!(
        "POST /assistant/run HTTP/1.1\r\nhost: bench\r\ncontent-type: text/protobuf\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let Ok(mut socket) = TcpStream::connect(server).await else { return false };
    if socket.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.is_ok() && answer.starts_with(b"HTTP/1.1 200")
}

/// What the subscribers saw.
pub struct Seen {
    latency: Mutex<Histogram<u64>>,
    tokens: AtomicU64,
    ended: AtomicU64,
    failed: AtomicU64,
}

/// One subscriber: reads the stream of call `id` to its end, noting each token's delay.
async fn subscribe(server: SocketAddr, id: String, epoch: Instant, seen: Arc<Seen>) {
    let Ok(mut socket) = TcpStream::connect(server).await else {
        seen.failed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // Signed as `ShowStreamDirective` hands it out, with the key the server was given.
    let signature = megamind_core::rules::auth::AddressKey::from_secret(SIGNING_KEY).sign_for(&id, 3_600);
    let request = format!("GET /llm/stream/{id}?{signature} HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n");
    if socket.write_all(request.as_bytes()).await.is_err() {
        seen.failed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut local = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let (mut tokens, mut tail, mut ended) = (0, Vec::new(), false);
    let mut chunk = vec![0u8; 16 * 1024];
    while let Ok(n) = socket.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let now = now_us(epoch);
        tail.extend_from_slice(&chunk[..n]);
        // Stamps are whole once their event's line is: scan up to the last newline.
        let Some(cut) = tail.iter().rposition(|&b| b == b'\n') else { continue };
        for stamp in stamps(&tail[..cut]) {
            tokens += 1;
            let _ = local.record(now.saturating_sub(stamp).max(1));
        }
        ended |= tail[..cut].windows(16).any(|w| w == b"event: completed");
        tail.drain(..=cut);
    }
    seen.tokens.fetch_add(tokens, Ordering::Relaxed);
    if ended {
        seen.ended.fetch_add(1, Ordering::Relaxed);
    } else {
        seen.failed.fetch_add(1, Ordering::Relaxed);
    }
    let _ = seen.latency.lock().expect("histogram").add(&local);
}

/// The `t<micros>` stamps in `bytes`: a `t` right before digits appears in
/// no event name, id or key of the stream, only in the stamped text (which
/// the mapper may cut before or after a space, never inside a stamp).
fn stamps(bytes: &[u8]) -> Vec<u64> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = bytes[at..].iter().position(|&b| b == b't') {
        let digits = at + offset + 1;
        let end = bytes[digits..].iter().position(|b| !b.is_ascii_digit()).map_or(bytes.len(), |p| digits + p);
        if end > digits
            && let Some(stamp) = std::str::from_utf8(&bytes[digits..end]).ok().and_then(|s| s.parse().ok())
        {
            found.push(stamp);
        }
        at = end.max(digits);
    }
    found
}

/// Plays `streams` streams over `streams / SUBSCRIBERS_PER_CALL` model
/// calls, each started on `starter`, its subscribers spread over `readers`.
pub async fn play(starter: SocketAddr, readers: &[SocketAddr], streams: usize, tag: &str, epoch: Instant) -> Arc<Seen> {
    let seen = Arc::new(Seen {
        latency: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")),
        tokens: AtomicU64::new(0),
        ended: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    let calls = streams.div_ceil(SUBSCRIBERS_PER_CALL);
    let mut tasks = Vec::with_capacity(streams);
    for call in 0..calls {
        let id = format!("{tag}-{call}");
        if !start_call(starter, &id).await {
            seen.failed.fetch_add(SUBSCRIBERS_PER_CALL as u64, Ordering::Relaxed);
            continue;
        }
        for k in 0..SUBSCRIBERS_PER_CALL.min(streams - call * SUBSCRIBERS_PER_CALL) {
            let reader = readers[k % readers.len()];
            tasks.push(tokio::spawn(subscribe(reader, id.clone(), epoch, seen.clone())));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    seen
}

/// A streaming server's arguments: its model at `model`, `cap` calls,
/// streams and connections allowed.
pub fn server_args(model: SocketAddr, cap: usize) -> Vec<String> {
    let (url, cap) = (format!("http://{model}/v1"), cap.to_string());
    let args = [
        "--llm-base-url",
        &url,
        "--llm-warmup",
        "off",
        "--llm-run-wait-ms",
        "0",
        "--llm-max-in-flight",
        &cap,
        "--llm-max-streams",
        &cap,
        "--llm-signing-key",
        SIGNING_KEY,
        "--max-connections",
        &cap,
        "--max-open-requests",
        &cap,
    ];
    args.map(str::to_owned).to_vec()
}

/// Token lateness of a row, for the rows printed beside it.
#[derive(Debug, Clone, Copy)]
pub struct Lateness {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

impl Seen {
    pub fn lateness(&self) -> Lateness {
        let latency = self.latency.lock().expect("histogram");
        let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
        Lateness { p50_ms: ms(0.5), p99_ms: ms(0.99), p999_ms: ms(0.999) }
    }
}

/// The stream rows: starts the mock model and a server pointed at it, plays
/// both rows, prints them and gives the latency row's lateness.
pub async fn run(settings: &Settings) -> Lateness {
    let streams = env_or("LOAD_STREAMS", 10_000usize);
    // Each subscriber and each model call is a socket of this process and of
    // the server's: the limit is raised for both (the server inherits it).
    let wanted = (streams + streams / SUBSCRIBERS_PER_CALL + 1024) as u64;
    // Raising the hard limit takes root; otherwise up to the hard limit.
    let raised = rlimit::setrlimit(rlimit::Resource::NOFILE, wanted, wanted).is_ok()
        || rlimit::increase_nofile_limit(wanted).is_ok_and(|got| got >= wanted);
    if !raised {
        println!("\nstreams: the open-file limit is below {wanted}; fewer streams may open");
    }
    let epoch = Instant::now();
    let model = mock_model(epoch).await;
    let args = server_args(model, streams * 2);
    let server = ours(&args);
    // `/demo/run` is driven from a thread and runtime of its own, so that
    // its latency is the server's and not a wait behind this runtime's
    // thousands of subscriber tasks.
    let demo = |name: &str| {
        let settings = Settings { conns: 8, rate: 0, requests: 0, rounds: 1, ..*settings };
        let (name, addr) = (name.to_owned(), server.addr);
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            let ids = fresh_ids("poi_run_request", "TScenarioRunRequest");
            let _ = tx.send(runtime.block_on(drive(&name, addr, "/demo/run", &settings, ids)));
        });
        async move { rx.await.expect("the /demo/run driver") }
    };
    println!(
        "\nJSONSeq streams: answers of {TOKENS} tokens at {TOKENS_PER_SEC} tokens/s, {SUBSCRIBERS_PER_CALL} subscribers per model call"
    );
    let quiet = play(server.addr, &[server.addr], LATENCY_STREAMS, "latency", epoch).await;
    report(&format!("{LATENCY_STREAMS} streams"), &quiet);
    let delays_quiet = delays(&server);
    report_delays(&delays_quiet, &[]);

    let alone = demo("/demo/run alone (8 conns)").await;
    let rss_before = server.status_mib("VmRSS");
    let (cpu_before, started) = (server.cpu_time(), Instant::now());
    let addr = server.addr;
    let flood = tokio::spawn(async move { play(addr, &[addr], streams, "flood", epoch).await });
    // Beside the streams once they all stream: the first tokens are 2 s in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let beside = demo("/demo/run beside the streams").await;
    let rss_open = server.status_mib("VmRSS");
    let seen = flood.await.expect("the streams");
    let (cpu, wall) = (server.cpu_time(), started.elapsed());
    // The answers grow to their end: the peak comes after the sample above.
    let rss_high = server.status_mib("VmHWM");
    report(&format!("{streams} streams"), &seen);
    report_delays(&delays(&server), &delays_quiet);
    if let (Some(before), Some(after)) = (cpu_before, cpu) {
        println!(
            "  the server's CPU meanwhile: {:.0} % of one core over {:.1} s ({:.1} µs per token delivered)",
            100.0 * (after - before).as_secs_f64() / wall.as_secs_f64(),
            wall.as_secs_f64(),
            (after - before).as_secs_f64() * 1e6 / seen.tokens.load(Ordering::Relaxed).max(1) as f64
        );
    }
    for outcome in [&alone, &beside] {
        print_demo(outcome);
    }
    if let (Some(before), Some(open), Some(high)) = (rss_before, rss_open, rss_high) {
        println!(
            "  server RSS: {before:.1} MiB before, {open:.1} MiB with {streams} streams open ({:.1} KiB per stream), \
             {high:.1} MiB at its peak ({:.1} KiB per stream)",
            (open - before) * 1024.0 / streams as f64,
            (high - before) * 1024.0 / streams as f64
        );
    }
    drop(server);
    quiet.lateness()
}

pub fn report(name: &str, seen: &Seen) {
    let latency = seen.latency.lock().expect("histogram");
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "  {name}: {} ended, {} failed, {} tokens; token written by the model → read from the stream: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        seen.ended.load(Ordering::Relaxed),
        seen.failed.load(Ordering::Relaxed),
        seen.tokens.load(Ordering::Relaxed),
        ms(0.5),
        ms(0.99),
        ms(0.999),
        latency.max() as f64 / 1000.0
    );
}

/// The server's own `megamind_assistant_stream_delay_seconds` buckets
/// (upper bound in seconds, cumulative count), from its `/metrics`.
fn delays(server: &Server) -> Vec<(f64, u64)> {
    let text = server.metrics().unwrap_or_default();
    text.lines()
        .filter_map(|line| line.strip_prefix("megamind_assistant_stream_delay_seconds_bucket{le=\""))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// The server's arrival-to-write delay of the events since `before`: the
/// share written within 1 ms and the bucket holding the p99.
fn report_delays(now: &[(f64, u64)], before: &[(f64, u64)]) {
    let counts: Vec<(f64, u64)> =
        now.iter().map(|&(le, n)| (le, n - before.iter().find(|(b, _)| *b == le).map_or(0, |(_, m)| *m))).collect();
    let Some(&(_, total)) = counts.last().filter(|(_, total)| *total > 0) else {
        return println!("  the server's delay: no live events counted");
    };
    let within_ms = counts.iter().find(|(le, _)| *le >= 0.001).map_or(0, |(_, n)| *n);
    let p99 = counts.iter().find(|(_, n)| *n as f64 >= 0.99 * total as f64).map_or(f64::INFINITY, |(le, _)| *le);
    println!(
        "  the server's own delay, upstream event arrived → its stream events written, {total} live events: {:.2} % within 1 ms, p99 ≤ {} ms",
        100.0 * within_ms as f64 / total as f64,
        p99 * 1000.0
    );
}

fn print_demo(outcome: &Outcome) {
    let ms = |q: f64| outcome.latency.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "  {}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, errors {}",
        outcome.name,
        outcome.rps(),
        ms(0.5),
        ms(0.99),
        outcome.errors
    );
}
