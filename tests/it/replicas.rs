//! Three server processes sharing one `redis-server`, as replicas behind a
//! balancer: a retry on any replica replays, a side effect runs once, and
//! a Redis that dies or comes back changes no answer's deadline.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use megamind_core::{
    codec::Format,
    proto::n_alice::n_scenarios::{TScenarioApplyRequest, TScenarioCommitResponse, TScenarioRunRequest},
};
use prost::Message;

use crate::{
    helpers::{binary, decode_answer, fixture, serving_addr_in},
    metrics::sample,
    redis_server::RedisServer,
};

/// The lease of a claim: the 300 ms budget and this detach limit.
const DETACH_LIMIT_MS: u64 = 1_000;
const BUDGET: Duration = Duration::from_millis(300);

/// One server process.
pub(crate) struct Replica {
    child: Child,
    pub(crate) base: String,
    /// Its log lines about the shared store and Redis.
    store_lines: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    fn start(store_url: &str) -> Replica {
        Replica::start_with(store_url, &[])
    }

    /// A replica over the Redis at `store_url`, with `args` besides.
    pub(crate) fn start_with(store_url: &str, args: &[&str]) -> Replica {
        let mut child = binary()
            .args(["serve", "--addr", "127.0.0.1:0", "--store-url", store_url])
            .args(args)
            .args(["--detach-limit-ms", &DETACH_LIMIT_MS.to_string()])
            // Well above a round trip even on a machine busy building tests,
            // well inside the budget.
            .args(["--store-timeout-ms", "100"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let addr = serving_addr_in(lines.by_ref().map_while(Result::ok));
        let store_lines = Arc::new(Mutex::new(Vec::new()));
        let collected = store_lines.clone();
        std::thread::spawn(move || {
            for line in
                lines.map_while(Result::ok).filter(|line| line.contains("shared store") || line.contains("Redis"))
            {
                collected.lock().unwrap().push(line);
            }
        });
        Replica { child, base: format!("http://{addr}"), store_lines }
    }

    /// How many of its log lines about the store contain `text`, once
    /// there are `expected` of them or 2 s have passed (the log is written
    /// out in batches).
    async fn store_lines_with(&self, text: &str, expected: usize) -> usize {
        let count = || self.store_lines.lock().unwrap().iter().filter(|line| line.contains(text)).count();
        let until = Instant::now() + Duration::from_secs(2);
        while count() < expected && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        count()
    }

    /// Kills it (SIGKILL), as a lost node or the OOM killer would.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three replicas over one Redis, and a client for them.
struct Cluster {
    replicas: Vec<Replica>,
    http: reqwest::Client,
}

impl Cluster {
    fn start(redis: &RedisServer) -> Cluster {
        let replicas = (0..3).map(|_| Replica::start(&redis.url())).collect();
        Cluster { replicas, http: megamind_core::http_client::client_builder().build().expect("a client") }
    }

    /// Posts a binary body to `path` on replica `at`: status, body, time taken.
    async fn post(&self, at: usize, path: &str, body: Vec<u8>) -> (u16, bytes::Bytes, Duration) {
        let started = Instant::now();
        let response = self
            .http
            .post(format!("{}{path}", self.replicas[at % 3].base))
            .header("content-type", "application/protobuf")
            .body(body)
            .send()
            .await
            .expect("the replica answers");
        let status = response.status().as_u16();
        let body = response.bytes().await.expect("a body");
        (status, body, started.elapsed())
    }

    async fn metrics(&self, at: usize) -> String {
        let url = format!("{}/metrics", self.replicas[at].base);
        self.http.get(url).send().await.expect("metrics").text().await.expect("text")
    }

    /// Payment pushes sent by every replica together.
    async fn pushes(&self) -> f64 {
        let mut total = 0.0;
        for at in 0..self.replicas.len() {
            total += sample(&self.metrics(at).await, "megamind_demo_payment_pushes_total ").unwrap_or(0.0);
        }
        total
    }

    /// Waits until every replica says the store serves, for at most `limit`.
    async fn wait_until_shared(&self, limit: Duration) -> Option<Duration> {
        let started = Instant::now();
        while started.elapsed() < limit {
            let mut up = 0;
            for at in 0..self.replicas.len() {
                up += usize::from(sample(&self.metrics(at).await, "megamind_store_up ") == Some(1.0));
            }
            if up == self.replicas.len() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }
}

fn commit_request(request_id: &str) -> Vec<u8> {
    let mut request = fixture::<TScenarioApplyRequest>("video_commit_request");
    request.base_request.as_mut().expect("a BaseRequest").request_id = request_id.into();
    request.encode_to_vec()
}

fn run_request(request_id: &str) -> Vec<u8> {
    let mut request = fixture::<TScenarioRunRequest>("poi_run_request");
    request.base_request.as_mut().expect("a BaseRequest").request_id = request_id.into();
    request.encode_to_vec()
}

/// The `Error.Type` of a commit answer, if it is one.
fn commit_error(body: &[u8]) -> Option<String> {
    use megamind_core::proto::n_alice::n_scenarios::t_scenario_commit_response::Response;
    match decode_answer::<TScenarioCommitResponse>(body, Format::Binary).response {
        Some(Response::Error(error)) => Some(error.r#type),
        _ => None,
    }
}

#[tokio::test]
async fn a_commit_retried_on_every_replica_or_sent_thirty_times_at_once_runs_once() {
    let Some(redis) = RedisServer::start("replicas share one store") else { return };
    let cluster = Arc::new(Cluster::start(&redis));

    let mut answers = Vec::new();
    for at in 0..3 {
        let (status, body, _) = cluster.post(at, "/demo/commit", commit_request("commit-retried")).await;
        assert_eq!(status, 200);
        answers.push(body);
    }
    assert!(answers.iter().all(|a| a == &answers[0]), "the same bytes from every replica");
    assert_eq!(commit_error(&answers[0]), None, "a successful commit");
    assert_eq!(cluster.pushes().await, 1.0, "the side effect ran once");

    let copies: Vec<_> = (0..30)
        .map(|at| {
            let cluster = cluster.clone();
            tokio::spawn(async move { cluster.post(at, "/demo/commit", commit_request("commit-at-once")).await })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        let (status, body, _) = copy.await.unwrap();
        assert_eq!(status, 200);
        answers.push(body);
    }
    assert!(answers.iter().all(|a| a == &answers[0]), "the same bytes for all 30");
    assert_eq!(commit_error(&answers[0]), None);
    assert_eq!(cluster.pushes().await, 2.0, "30 copies over 3 replicas ran the side effect once");

    let (_, first, _) = cluster.post(0, "/demo/run", run_request("run-repeated")).await;
    let (_, repeat, _) = cluster.post(1, "/demo/run", run_request("run-repeated")).await;
    assert_eq!(first, repeat, "a /run repeat on another replica replays");
    let replays = r#"megamind_requests_total{handler="run",outcome="replay",scenario="demo",transport="http"} "#;
    assert_eq!(sample(&cluster.metrics(1).await, replays), Some(1.0));
}

/// The demo answers every fresh `/run` with the same card: Redis keeps it
/// once, its entries referring to one body, and every replica replays each
/// entry whole.
#[tokio::test]
async fn an_answer_kept_once_replays_whole_on_every_replica() {
    let Some(redis) = RedisServer::start("answers kept once") else { return };
    let cluster = Cluster::start(&redis);
    let ids: Vec<String> = (0..5).map(|n| format!("kept-once-{n}")).collect();
    let mut answers = Vec::new();
    for id in &ids {
        let (status, body, _) = cluster.post(0, "/demo/run", run_request(id)).await;
        assert_eq!(status, 200);
        answers.push(body);
    }
    assert!(answers.iter().all(|answer| answer == &answers[0]), "the demo's one card");
    assert!(answers[0].len() > 1000, "a card big enough to keep once: {} bytes", answers[0].len());
    for at in [1, 2] {
        for (id, answer) in ids.iter().zip(&answers) {
            let (status, repeat, _) = cluster.post(at, "/demo/run", run_request(id)).await;
            assert_eq!((status, &repeat), (200, answer), "{id} on replica {at}");
        }
        let replays = r#"megamind_requests_total{handler="run",outcome="replay",scenario="demo",transport="http"} "#;
        assert_eq!(sample(&cluster.metrics(at).await, replays), Some(5.0), "replica {at} replayed every one");
    }
    let bodies: Vec<String> = redis.query(redis::cmd("KEYS").arg("megamind:body:*"));
    assert_eq!(bodies.len(), 1, "one body: {bodies:?}");
    let body: Vec<u8> = redis.query(redis::cmd("GET").arg(&bodies[0]));
    assert_eq!(body, answers[0], "the body is the card");
    let last: Vec<u8> = redis.query(redis::cmd("GET").arg(format!("megamind:{{demo/run/{}}}", ids[4])));
    assert_eq!(last[0], b'r', "a later entry refers to the body");
    assert!(last.len() < 64, "in some tens of bytes: {}", last.len());
}

#[tokio::test]
async fn with_redis_killed_every_replica_answers_in_budget_and_sharing_resumes_by_itself() {
    let Some(mut redis) = RedisServer::start("replicas without Redis") else { return };
    let mut cluster = Cluster::start(&redis);
    assert!(cluster.wait_until_shared(Duration::from_secs(5)).await.is_some());
    redis.kill();

    for round in 0..4 {
        for at in 0..3 {
            let (status, _, took) = cluster.post(at, "/demo/run", run_request(&format!("run-{round}-{at}"))).await;
            assert_eq!(status, 200);
            assert!(took < BUDGET, "/run on replica {at} took {took:?}");
            let (status, body, took) =
                cluster.post(at, "/demo/commit", commit_request(&format!("commit-{round}-{at}"))).await;
            assert_eq!(status, 200);
            assert!(took < BUDGET, "/commit on replica {at} took {took:?}");
            assert_eq!(commit_error(&body).as_deref(), Some("unavailable"), "never run without a shared claim");
        }
    }
    assert_eq!(cluster.pushes().await, 0.0);
    for at in 0..3 {
        let url = format!("{}/readyz", cluster.replicas[at].base);
        let ready = cluster.http.get(url).send().await.expect("readyz").status();
        assert_eq!(ready, 200, "replica {at} stays ready: the fallback serves");
    }
    for (at, replica) in cluster.replicas.iter_mut().enumerate() {
        assert!(replica.is_alive(), "replica {at} lives on");
        assert_eq!(replica.store_lines_with("unavailable", 1).await, 1, "one line for the outage, not one per call");
    }

    redis.restart();
    let took = cluster.wait_until_shared(Duration::from_secs(15)).await;
    assert!(took.is_some(), "every replica found Redis back within 15 s");
    for replica in &cluster.replicas {
        assert_eq!(replica.store_lines_with("is back", 1).await, 1);
    }
    for at in 0..3 {
        let (_, body, _) = cluster.post(at, "/demo/commit", commit_request("after-restart")).await;
        assert_eq!(commit_error(&body), None);
    }
    assert_eq!(cluster.pushes().await, 1.0, "shared again: one push for three tries");
}

/// A replica reads Redis's settings once it answers: it warns where Redis
/// may evict an answer, grows without a bound, would forget a claim in a
/// crash, or will not say, and serves on in every case.
#[tokio::test]
async fn a_replica_warns_when_redis_may_evict_or_forget_what_a_commit_needs() {
    let checked = "Redis's settings checked";
    let (evicts, forgets, unread) = ("maxmemory-policy allkeys-lru", "no append-only file", "could not be read");
    let unbounded = "no maxmemory";

    let Some(durable) = RedisServer::start_durable("Redis's settings: as the deploy runs it") else { return };
    let _: () = durable.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("256mb"));
    let replica = Replica::start(&durable.url());
    assert_eq!(replica.store_lines_with(checked, 1).await, 1, "{:?}", replica.store_lines.lock().unwrap());
    for warning in [evicts, forgets, unread, unbounded, "WARN"] {
        assert_eq!(replica.store_lines_with(warning, 0).await, 0, "{warning}");
    }

    let Some(careless) = RedisServer::start("Redis's settings: evicting, no file") else { return };
    let _: () = careless.query(redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru"));
    let replica = Replica::start(&careless.url());
    assert_eq!(replica.store_lines_with(checked, 1).await, 1);
    assert_eq!(replica.store_lines_with(evicts, 1).await, 1);
    assert_eq!(replica.store_lines_with(forgets, 1).await, 1);
    assert_eq!(replica.store_lines_with(unbounded, 1).await, 1);

    let Some(locked) = RedisServer::start("Redis's settings: CONFIG refused") else { return };
    let _: () = locked.query(redis::cmd("ACL").arg("SETUSER").arg("default").arg("-config"));
    let replica = Replica::start(&locked.url());
    assert_eq!(replica.store_lines_with(unread, 1).await, 1);
    let http = megamind_core::http_client::client_builder().build().expect("a client");
    let answer = http.post(format!("{}/demo/commit", replica.base)).body(commit_request("config-refused")).send();
    let answer = answer.await.expect("the replica answers").bytes().await.expect("a body");
    assert_eq!(commit_error(&answer), None, "a /commit runs over it all the same");
}

/// With Redis writing every change to its append-only file before it
/// answers (as `deploy/k8s/redis.yaml` runs it), a crash forgets neither an
/// answer nor a claim in flight: a `/commit` retried after Redis is back
/// replays, and one whose claim was taken before the crash waits for it.
#[tokio::test]
async fn with_an_append_only_file_a_redis_crash_forgets_no_commit() {
    let Some(mut redis) = RedisServer::start_durable("a durable Redis crashes") else { return };
    let cluster = Cluster::start(&redis);
    assert!(cluster.wait_until_shared(Duration::from_secs(5)).await.is_some());

    let (_, answered, _) = cluster.post(0, "/demo/commit", commit_request("before-the-crash")).await;
    assert_eq!(commit_error(&answered), None);
    // The answer is stored just after it is sent: wait until Redis holds it.
    let key = "megamind:{demo/commit/before-the-crash}";
    let stored = Instant::now();
    while !redis.query::<Option<Vec<u8>>>(redis::cmd("GET").arg(key)).is_some_and(|held| held.starts_with(b"v")) {
        assert!(stored.elapsed() < Duration::from_secs(5), "the answer reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lease = BUDGET + Duration::from_millis(DETACH_LIMIT_MS);
    let claim = "megamind:{demo/commit/claimed-before-the-crash}";
    let _: () =
        redis.query(redis::cmd("SET").arg(claim).arg("cother-replica:0").arg("PX").arg(lease.as_millis() as u64));

    redis.restart();
    for at in 1..3 {
        // A replica that has not yet seen its connection go answers the
        // first call after the crash `unavailable`, and runs nothing.
        let retried = Instant::now();
        let replayed = loop {
            let (_, body, _) = cluster.post(at, "/demo/commit", commit_request("before-the-crash")).await;
            if commit_error(&body).as_deref() != Some("unavailable") {
                break body;
            }
            assert!(retried.elapsed() < Duration::from_secs(15), "replica {at} found Redis back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(replayed, answered, "replica {at} answers as before the crash");
        let replays = r#"megamind_requests_total{handler="commit",outcome="replay",scenario="demo",transport="http"} "#;
        assert_eq!(sample(&cluster.metrics(at).await, replays), Some(1.0), "replica {at} replayed it");
    }
    let (_, body, _) = cluster.post(1, "/demo/commit", commit_request("claimed-before-the-crash")).await;
    assert_eq!(commit_error(&body).as_deref(), Some("timeout"), "the claim taken before the crash is still waited for");
    assert_eq!(cluster.pushes().await, 1.0, "the side effect ran once, before the crash");
}

/// A replica killed between its claim and its answer leaves the claim
/// behind, in Redis, with its lease: that state is written here as such a
/// replica would have left it (the demo's `/commit` answers too fast to kill
/// a replica in between).
#[tokio::test]
async fn a_commit_claimed_by_a_dead_replica_waits_then_runs_once_its_lease_is_gone() {
    let Some(redis) = RedisServer::start("a dead replica's claim") else { return };
    let cluster = Cluster::start(&redis);
    let lease = BUDGET + Duration::from_millis(DETACH_LIMIT_MS);
    let claim = "megamind:{demo/commit/orphaned}";
    let _: () =
        redis.query(redis::cmd("SET").arg(claim).arg("cdead-replica:0").arg("PX").arg(lease.as_millis() as u64));
    let claimed = Instant::now();

    let (_, body, took) = cluster.post(1, "/demo/commit", commit_request("orphaned")).await;
    assert_eq!(commit_error(&body).as_deref(), Some("timeout"), "the retry waited for the claim in flight");
    // The server answers at its deadline; the client adds its own scheduling on a busy machine.
    assert!(took < BUDGET + Duration::from_millis(60), "and answered within its budget: {took:?}");
    assert_eq!(cluster.pushes().await, 0.0);

    let ran = loop {
        let (_, body, _) = cluster.post(2, "/demo/commit", commit_request("orphaned")).await;
        match commit_error(&body) {
            None => break claimed.elapsed(),
            Some(kind) => assert_eq!(kind, "timeout"),
        }
        assert!(claimed.elapsed() < lease + BUDGET * 4, "the claim outlived its lease");
    };
    assert!(ran >= lease, "not before the lease ended ({ran:?})");
    let (_, again, _) = cluster.post(0, "/demo/commit", commit_request("orphaned")).await;
    assert_eq!(commit_error(&again), None);
    assert_eq!(cluster.pushes().await, 1.0, "run once, then replayed");
}
