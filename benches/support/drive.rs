//! The load benchmark's clients: HTTP/1.1 keep-alive connections or gRPC
//! channels driving one path, each request timed into a histogram, answers
//! optionally sorted into kinds by a classifier the run names.

#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

use super::{bodies, env_or};

/// The next run's number: part of every fresh RequestId, so that no
/// run repeats an id an earlier one sent (the server would replay its answer
/// from the idempotency cache instead of doing the work). Run 0 is left to
/// [`replayed_ids`].
static RUNS: AtomicU32 = AtomicU32::new(1);

/// The first field of the RequestIds of the next run's `worker`: the run in
/// the upper half, the worker in the lower.
fn id_prefix(run: u32, worker: usize) -> u32 {
    (run & 0xffff) << 16 | (worker as u32 & 0xffff)
}

/// How hard and how long each run drives.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub secs: u64,
    pub conns: usize,
    pub rate: u64,
    pub requests: u64,
    pub rounds: usize,
    /// Sent as `X-Ya-Service-Ticket` with every request, when set.
    pub ticket: Option<&'static str>,
}

/// Sorts one OK answer body into a kind (`handover`, `declined`, ...).
pub type Classify = fn(&[u8]) -> &'static str;

/// What one run measured.
pub struct Outcome {
    pub name: String,
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    /// OK answers by kind, when the run had a classifier.
    pub kinds: BTreeMap<&'static str, u64>,
    /// CPU time (user + system) the server process spent during the run.
    pub server_cpu: Option<Duration>,
}

impl Outcome {
    /// A run that began at `started` and has just ended.
    pub fn new(
        name: &str,
        started: Instant,
        latency: Histogram<u64>,
        errors: u64,
        kinds: BTreeMap<&'static str, u64>,
    ) -> Outcome {
        let requests = latency.len();
        Outcome {
            name: name.to_owned(),
            requests,
            errors,
            elapsed: started.elapsed(),
            latency,
            kinds,
            server_cpu: None,
        }
    }

    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    /// The server's CPU time per answered request, in microseconds.
    pub fn cpu_per_request_us(&self) -> Option<f64> {
        let cpu = self.server_cpu?;
        (self.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / self.requests as f64)
    }
}

/// Drives gRPC `Run` of `addr` with `settings.conns` calls in flight over a
/// few HTTP/2 connections (as ghz does), a fresh RequestId per call.
pub async fn drive_grpc(name: &str, addr: SocketAddr, settings: &Settings) -> Outcome {
    use megamind_core::proto::{
        megamind_scenario::v1::scenario_client::ScenarioClient, n_alice::n_scenarios::TScenarioRunRequest,
    };
    let template: TScenarioRunRequest = megamind_core::codec::decode(
        bodies::fixture_text("poi_run_request").as_bytes(),
        megamind_core::codec::Format::Text,
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
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(settings.secs);
    let sent = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..settings.conns {
        let prefix = id_prefix(run, worker);
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
                    base.request_id = format!("{prefix:08x}-0000-0000-0000-{n:012x}");
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
    Outcome::new(name, started, latency, errors, BTreeMap::new())
}

/// Drives `path` of `addr` with `conns` keep-alive connections; `body(worker, n)` makes each request body.
pub async fn drive(
    name: &str,
    addr: SocketAddr,
    path: &'static str,
    settings: &Settings,
    body: impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> + Send + Sync + 'static,
) -> Outcome {
    drive_classified(name, addr, path, settings, body, None).await
}

/// [`drive`], sorting the OK answers into kinds with `classify`.
pub async fn drive_classified(
    name: &str,
    addr: SocketAddr,
    path: &'static str,
    settings: &Settings,
    body: impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> + Send + Sync + 'static,
    classify: Option<Classify>,
) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(settings.secs);
    let sent = Arc::new(AtomicU64::new(0));
    let body = Arc::new(body);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..settings.conns {
        let (sent, body) = (sent.clone(), body.clone());
        let (limit, ticket) = (settings.requests, settings.ticket);
        let interval =
            (settings.rate > 0).then(|| Duration::from_secs_f64(settings.conns as f64 / settings.rate as f64));
        tasks.push(tokio::spawn(async move {
            let mut make = body(worker as u32);
            let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut errors = 0u64;
            let mut kinds = BTreeMap::<&'static str, u64>::new();
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
                let mut request =
                    Request::post(path).header("host", "bench").header("content-type", "application/protobuf");
                if let Some(ticket) = ticket {
                    request = request.header("x-ya-service-ticket", ticket);
                }
                let request = request.body(Full::new(make(n))).expect("request");
                let ok = match sender.send_request(request).await {
                    Ok(response) => {
                        let status = response.status();
                        match response.into_body().collect().await.map(|b| b.to_bytes()) {
                            Ok(body) if status == StatusCode::OK && !body.is_empty() => {
                                if let Some(classify) = classify {
                                    *kinds.entry(classify(&body)).or_default() += 1;
                                }
                                true
                            }
                            _ => false,
                        }
                    }
                    Err(_) => false,
                };
                if !ok {
                    errors += 1;
                }
                latency.saturating_record(scheduled.elapsed().as_micros() as u64);
            }
            (latency, errors, kinds)
        }));
    }
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut errors = 0;
    let mut kinds = BTreeMap::new();
    for task in tasks {
        let (histogram, task_errors, task_kinds) = task.await.expect("worker");
        latency.add(histogram).expect("same bounds");
        errors += task_errors;
        for (kind, n) in task_kinds {
            *kinds.entry(kind).or_default() += n;
        }
    }
    Outcome::new(name, started, latency, errors, kinds)
}

/// Bodies of fixture `name` with a RequestId never sent before in this process.
pub fn fresh_ids(name: &'static str, type_name: &'static str) -> impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> {
    fresh_bodies(bodies::Stamped::new(name, type_name))
}

/// `stamped` with a RequestId never sent before in this process.
pub fn fresh_bodies(stamped: bodies::Stamped) -> impl Fn(u32) -> Box<dyn FnMut(u64) -> Bytes + Send> {
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    move |worker| {
        let mut stamped = stamped.clone();
        let prefix = id_prefix(run, worker as usize);
        Box::new(move |n| Bytes::copy_from_slice(stamped.with_id(prefix, n)))
    }
}

pub fn replayed_ids(
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
