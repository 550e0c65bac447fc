//! [`RedisStore`]: the single-flight store shared by replicas, over Redis
//! (or Valkey), so that a repeat on any replica replays the answer and a
//! side effect runs once.
//!
//! The client is the `redis` crate's `ConnectionManager`: one multiplexed
//! connection that pipelines every caller's commands over one socket,
//! reconnects by itself, and runs scripts by `EVALSHA` (sending the body on
//! `NOSCRIPT`). `fred` does as much with a pool and reconnect machinery of
//! its own that this store does not need; the `redis` crate is the one the
//! Redis project keeps. A few managers make the pool, taken in turn.
//!
//! Each entry has two keys in one hash slot (the `{…}` tag), so that one
//! script reads and writes both on Redis Cluster too:
//! `<prefix>:{<scenario>/<handler>/<RequestId>}:v` holds the value and
//! `…:c` the claim, whose content is the leader's token (this replica's id
//! and a counter: a fencing token no other lease ever had).
//!
//! - `begin`, one round trip: a script reads the value; on a miss, a caller
//!   that may lead claims with `SET … NX PX <lease>`, and one that may not
//!   (or loses the race) reads the claim to wait for.
//! - `complete` and `abandon`, one round trip: a script that writes (or
//!   only deletes the claim) if the claim still holds this lease's token; a
//!   lease that ran out (and was perhaps claimed again) changes nothing.
//! - `wait` polls both keys (`MGET`), 1 ms after the claim was seen and
//!   doubling up to 8 ms, until the value comes, the claim goes or the
//!   deadline passes. A poll costs one round trip of a few microseconds to
//!   Redis; a repeat arriving while its first call runs is rare, and a poll
//!   needs no connection of its own as a subscription would.
//!
//! Every command runs under a timeout: the caller's deadline, at most the
//! store's own. Expiry is Redis's: nothing to purge here. A Redis full under
//! `maxmemory-policy noeviction` refuses writes with `OOM`: a lead of
//! `/commit` or `/apply` is then [`Begin::Full`], a repeat still reads.

use std::{
    hash::BuildHasher,
    sync::{
        Arc, LazyLock, OnceLock,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use bytes::Bytes;
use redis::{Client, Script, Value, aio::ConnectionManager};
use tokio::time::Instant;

use super::{Begin, FlightStore, Key, Lease, StoreError, Token, Usage, Waited, Waiter, is_reserved};

mod url;

pub use url::{StoreUrl, redact_url};

/// Reads the value; on a miss claims the entry for a caller that may lead
/// (`ARGV[1]`, its token, not empty), else reads the claim.
/// `{1, value}`: hit; `{2, token}`: wait for that claim; `{0}`: claimed;
/// `{3}`: neither value nor claim, and the caller may not lead.
const BEGIN: &str = r"
local value = redis.call('GET', KEYS[1])
if value then return {1, value} end
if ARGV[1] ~= '' and redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {0} end
local claim = redis.call('GET', KEYS[2])
if claim then return {2, claim} end
return {3}
";

/// Stores the value (`ARGV[2]`, for `ARGV[3]` ms) and ends the claim, if
/// the claim still holds the token `ARGV[1]`; with no `ARGV[2]`, only ends it.
const END: &str = r"
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
redis.call('DEL', KEYS[2])
return 1
";

static BEGIN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(BEGIN));
static END_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(END));

/// The longest pause between two polls of a wait.
const MAX_POLL: Duration = Duration::from_millis(8);

/// How a [`RedisStore`] is set up.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Where Redis is.
    pub url: StoreUrl,
    /// Put before every key.
    pub prefix: String,
    /// How long a value is kept.
    pub ttl: Duration,
    /// The longest a command may take.
    pub timeout: Duration,
    /// Connections in the pool.
    pub connections: usize,
}

/// The single-flight store over Redis.
#[derive(Debug)]
pub struct RedisStore {
    client: Client,
    /// Made at the first command: a manager needs the runtime.
    pool: OnceLock<Box<[ConnectionManager]>>,
    next: AtomicUsize,
    prefix: String,
    ttl_ms: u64,
    timeout: Duration,
    connections: usize,
    /// This replica's part of every claim token.
    owner: String,
    claims: AtomicU64,
    /// Leases of this replica out now.
    in_flight: Arc<AtomicUsize>,
}

/// A lease's or a waiter's handle: the entry's keys and the claim's token.
#[derive(Debug)]
struct Claim {
    value_key: String,
    claim_key: String,
    token: Bytes,
    /// Held by a lease: counts it in flight until the last clone goes.
    _lead: Option<InFlight>,
}

#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RedisStore {
    /// A store over the Redis at `options.url`. Connects at the first
    /// command, and again by itself whenever a connection is lost.
    pub fn new(options: RedisOptions) -> Result<RedisStore, StoreError> {
        // `rediss://` takes the process's provider.
        crate::http_client::install_tls_provider();
        let client = Client::open(options.url.as_str())
            .map_err(|_| StoreError::Unavailable(format!("{} is not a Redis URL", options.url)))?;
        let seed = std::hash::RandomState::new().hash_one((std::process::id(), SystemTime::now()));
        Ok(RedisStore {
            client,
            pool: OnceLock::new(),
            next: AtomicUsize::new(0),
            prefix: options.prefix,
            ttl_ms: millis(options.ttl),
            timeout: options.timeout,
            connections: options.connections.max(1),
            owner: format!("{seed:016x}"),
            claims: AtomicU64::new(0),
            in_flight: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A connection of the pool, in turn.
    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let pool = self.pool.get_or_init(|| {
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(100));
            (0..self.connections)
                .filter_map(|_| ConnectionManager::new_lazy_with_config(self.client.clone(), config.clone()).ok())
                .collect()
        });
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        // `new_lazy_with_config` fails only on a configuration this store never sets.
        let none = || StoreError::Unavailable("no Redis connection could be set up".into());
        pool.get(at % pool.len().max(1)).cloned().ok_or_else(none)
    }

    /// Runs one command (or script) under the store's timeout, or less
    /// when `deadline` comes first.
    async fn command<T>(
        &self,
        deadline: Option<Instant>,
        run: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let mut bound = self.timeout;
        if let Some(deadline) = deadline {
            bound = bound.min(deadline.saturating_duration_since(Instant::now()));
        }
        match tokio::time::timeout(bound, run).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(unavailable(&error)),
            Err(_) => Err(StoreError::Timeout(bound)),
        }
    }

    fn keys(&self, key: &Key) -> (String, String) {
        let base = format!("{}:{{{key}}}", self.prefix);
        (format!("{base}:v"), format!("{base}:c"))
    }

    fn token(&self) -> String {
        format!("{}:{}", self.owner, self.claims.fetch_add(1, Ordering::Relaxed))
    }

    /// After `OOM`: what a caller that reads only can learn.
    async fn begin_reading(&self, key: Key, deadline: Instant) -> Result<Begin, StoreError> {
        let (value_key, claim_key) = self.keys(&key);
        let mut connection = self.connection()?;
        let (value, claim): (Option<Vec<u8>>, Option<Vec<u8>>) = self
            .command(Some(deadline), redis::cmd("MGET").arg(&value_key).arg(&claim_key).query_async(&mut connection))
            .await?;
        Ok(match (value, claim) {
            (Some(value), _) => Begin::Hit(value.into()),
            (None, Some(token)) => {
                let claim = Claim { value_key, claim_key, token: token.into(), _lead: None };
                Begin::Wait(Waiter { key, token: Arc::new(claim) })
            }
            (None, None) if is_reserved(key.handler) => Begin::Full,
            (None, None) => return Err(StoreError::Unavailable("Redis is full (OOM)".into())),
        })
    }

    async fn end(&self, lease: &Lease, value: Option<Bytes>) -> Result<(), StoreError> {
        let claim = claim_of(&lease.token)?;
        let mut invocation = END_SCRIPT.key(&claim.value_key);
        invocation.key(&claim.claim_key).arg(&claim.token[..]);
        if let Some(value) = &value {
            invocation.arg(&value[..]).arg(self.ttl_ms);
        }
        let mut connection = self.connection()?;
        let _ended: i64 = self.command(None, invocation.invoke_async(&mut connection)).await?;
        Ok(())
    }

    /// Checks that Redis answers.
    pub async fn ping(&self, timeout: Duration) -> Result<(), StoreError> {
        let mut connection = self.connection()?;
        match tokio::time::timeout(timeout, redis::cmd("PING").query_async::<String>(&mut connection)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(unavailable(&error)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }

    /// Redis's `maxmemory-policy`, where `CONFIG GET` is allowed.
    pub async fn memory_policy(&self, timeout: Duration) -> Result<String, StoreError> {
        let mut connection = self.connection()?;
        let mut command = redis::cmd("CONFIG");
        command.arg("GET").arg("maxmemory-policy");
        match tokio::time::timeout(timeout, command.query_async(&mut connection)).await {
            Ok(Ok(pairs)) => {
                let pairs: Vec<String> = pairs;
                pairs.get(1).cloned().ok_or_else(|| StoreError::Unavailable("CONFIG GET answered nothing".into()))
            }
            Ok(Err(error)) => Err(unavailable(&error)),
            Err(_) => Err(StoreError::Timeout(timeout)),
        }
    }
}

#[async_trait]
impl FlightStore for RedisStore {
    async fn begin(
        &self,
        key: Key,
        lease_ttl: Duration,
        deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        // Asked before the one round trip, not after: a hit or a wait then
        // gives the caller's slot back at once.
        let token = if may_lead() { self.token() } else { String::new() };
        let (value_key, claim_key) = self.keys(&key);
        let mut invocation = BEGIN_SCRIPT.key(&value_key);
        invocation.key(&claim_key).arg(&token).arg(millis(lease_ttl).max(1));
        let mut connection = self.connection()?;
        let reply: Value = match self.command(Some(deadline), invocation.invoke_async(&mut connection)).await {
            Ok(reply) => reply,
            Err(StoreError::Full) => return self.begin_reading(key, deadline).await,
            Err(error) => return Err(error),
        };
        let (kind, bytes) = parse_begin(reply)?;
        Ok(match (kind, bytes) {
            (1, Some(value)) => Begin::Hit(value),
            (2, Some(token)) => {
                Begin::Wait(Waiter { key, token: Arc::new(Claim { value_key, claim_key, token, _lead: None }) })
            }
            (0, None) => {
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                let lead = Some(InFlight(self.in_flight.clone()));
                let claim = Claim { value_key, claim_key, token: token.into(), _lead: lead };
                Begin::Lead(Lease { key, token: Arc::new(claim) })
            }
            (3, None) => Begin::Refused,
            _ => return Err(StoreError::Unavailable("Redis answered the claim script with garbage".into())),
        })
    }

    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        self.end(&lease, Some(value)).await
    }

    async fn abandon(&self, lease: Lease) -> Result<(), StoreError> {
        self.end(&lease, None).await
    }

    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError> {
        let claim = claim_of(&waiter.token)?;
        let mut pause = Duration::from_millis(1);
        loop {
            let mut connection = self.connection()?;
            let mut read = redis::cmd("MGET");
            read.arg(&claim.value_key).arg(&claim.claim_key);
            let query = read.query_async(&mut connection);
            let (value, holder): (Option<Vec<u8>>, Option<Vec<u8>>) = match self.command(Some(deadline), query).await {
                Ok(read) => read,
                Err(StoreError::Timeout(_)) if Instant::now() >= deadline => return Ok(Waited::TimedOut),
                Err(error) => return Err(error),
            };
            if let Some(value) = value {
                return Ok(Waited::Done(value.into()));
            }
            if holder.as_deref() != Some(&claim.token[..]) {
                return Ok(Waited::Abandoned);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Waited::TimedOut);
            }
            tokio::time::sleep_until((now + pause).min(deadline)).await;
            pause = (pause * 2).min(MAX_POLL);
        }
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn usage(&self) -> Usage {
        Usage { in_flight: self.in_flight.load(Ordering::Relaxed), ..Usage::default() }
    }
}

fn claim_of(token: &Token) -> Result<&Claim, StoreError> {
    token.downcast_ref::<Claim>().ok_or(StoreError::Foreign)
}

/// Whether `token` is a claim of a [`RedisStore`].
pub fn is_claim(token: &Token) -> bool {
    token.is::<Claim>()
}

/// The begin script's answer: its kind and its bytes, if any.
fn parse_begin(reply: Value) -> Result<(i64, Option<Bytes>), StoreError> {
    let garbage = || StoreError::Unavailable("Redis answered the claim script with garbage".into());
    let Value::Array(items) = reply else { return Err(garbage()) };
    let mut items = items.into_iter();
    let Some(Value::Int(kind)) = items.next() else { return Err(garbage()) };
    let bytes = match items.next() {
        Some(Value::BulkString(bytes)) => Some(Bytes::from(bytes)),
        Some(_) => return Err(garbage()),
        None => None,
    };
    Ok((kind, bytes))
}

/// A Redis error as this store reports it: `OOM` is [`StoreError::Full`];
/// the rest say what failed, never the URL or its password.
fn unavailable(error: &redis::RedisError) -> StoreError {
    if error.code() == Some("OOM") || error.to_string().contains("OOM command not allowed") {
        return StoreError::Full;
    }
    let what = match (error.code(), error.kind()) {
        (Some(code), _) => format!("Redis answered {code}"),
        (None, kind) if error.is_connection_refusal() => format!("connection refused ({kind:?})"),
        (None, kind) if error.is_timeout() => format!("connection timed out ({kind:?})"),
        (None, kind) if error.is_connection_dropped() => format!("connection lost ({kind:?})"),
        (None, kind) => format!("{kind:?}"),
    };
    StoreError::Unavailable(what)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
