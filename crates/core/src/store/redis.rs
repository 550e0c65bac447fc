//! [`RedisStore`]: the single-flight store shared by replicas, over Redis
//! (or Valkey), so that a repeat on any replica replays the answer and a
//! side effect runs once.
//!
//! The client is the `redis` crate's `ConnectionManager`: one multiplexed
//! connection that pipelines every caller's commands over one socket,
//! reconnects by itself, and runs scripts by `EVALSHA` (sending the body on
//! `NOSCRIPT`). `fred` does as much with a pool and reconnect machinery of
//! its own that this store does not need; the `redis` crate is the one the
//! Redis project keeps. A few managers make the pool, taken in turn. The
//! pool is a [`RedisLink`]'s: every store of a server (the idempotency
//! cache's, each scenario's) goes over the same one, each under a prefix
//! of its own.
//!
//! Each entry is one key, `<prefix>:{<scenario>/<handler>/<RequestId>}`,
//! holding either a claim (`c` and the leader's token: this replica's id and
//! a counter, a fencing token no other lease ever had), the value (`v` and
//! its bytes) or a reference to a value kept once (`r` and the id of its
//! body, `<prefix>:body:{<id>}`: see `redis/bodies.rs`). The `{…}` hash tag
//! keeps the keys a later feature adds beside an entry in its Redis Cluster
//! slot.
//!
//! - `begin`, one round trip and no script: `SET key c<token> NX PX <lease>
//!   GET` claims a free key and answers what the key held before: nothing
//!   (this caller leads), a value (a hit), or another's claim (wait for it).
//!   A caller that may not lead only reads (`GET`). Needs Redis 7.0 or
//!   later (`NX` with `GET`). A reference to a body this replica has not
//!   seen yet costs one more round trip (`GET`), once.
//! - `complete` and `abandon`, one round trip: a script that writes the value
//!   (or deletes the key) only if the key still holds this lease's claim, or
//!   nothing (the claim ran out, or Redis lost it: the answer of a call
//!   that ran is better kept than run again); a lease whose key another
//!   call claimed or answered since changes nothing.
//!   The value goes in whole, or as a reference to its body (written first,
//!   one more round trip, the first time and every few seconds after).
//! - `wait` polls the key (`GET`), 1 ms after the claim was seen and
//!   doubling up to 8 ms, until the value comes, the claim goes or the
//!   deadline passes. A poll costs one round trip of a few microseconds to
//!   Redis; a repeat arriving while its first call runs is rare, and a poll
//!   needs no connection of its own as a subscription would.
//!
//! Each entry may have a journal beside it ([`super::Journal`], in
//! `redis/journal.rs`): a stream under the same hash tag.
//!
//! Every command runs under a timeout: the caller's deadline, at most the
//! store's own. Expiry is Redis's: nothing to purge here. A Redis full under
//! `maxmemory-policy noeviction` refuses writes with `OOM`: a lead of
//! `/commit` or `/apply` is then [`Begin::Full`], a repeat still reads.

use std::{
    sync::{
        Arc, LazyLock, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use redis::{Script, aio::ConnectionManager};
use tokio::time::Instant;

use crate::scenario::Handler;

use super::{Begin, FlightStore, Key, Lease, StoreError, Token, Usage, Waited, Waiter, is_reserved};

mod bodies;
mod journal;
#[cfg(feature = "fuzzing")]
pub use journal::fuzz_stream_reply;
mod link;
mod url;

use bodies::{BODY_EXTRA, Bodies, Keep};

pub use journal::MAX_BLOCKING;
pub use link::RedisLink;
pub use url::StoreUrl;

/// Ends the claim `ARGV[1]` unless the key holds another's claim or a
/// value: with the value `ARGV[2]` (already `v`-prefixed) kept for `ARGV[3]`
/// ms, or, without one, by deleting the key. A key found empty (the claim
/// ran out, or Redis lost it) takes the value all the same: nobody else
/// holds it, and a `/commit` that ran is not run again by its retry. 0 when
/// another holds the key; 1 when it holds this very value already (an end
/// carried out whose reply was lost, sent again).
const END: &str = r"
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  if ARGV[2] and held == ARGV[2] then return 1 end
  return 0
end
if ARGV[2] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) elseif held then redis.call('DEL', KEYS[1]) end
return 1
";

static END_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(END));

/// Keeps the claim `ARGV[1]` for `ARGV[2]` ms more if the key still holds
/// it. `PEXPIRE` takes no memory: a Redis that is full carries it out.
const HOLD: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

static HOLD_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(HOLD));

/// What a key holds: a claim or a value, told apart by the first byte.
const CLAIM: u8 = b'c';
const VALUE: u8 = b'v';
const REFERENCE: u8 = b'r';

/// How an error Redis answered is told ([`unavailable`]).
const REFUSED: &str = "Redis answered ";

/// The longest pause between two polls of a wait.
const MAX_POLL: Duration = Duration::from_millis(8);

/// How a [`RedisStore`] is set up.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Where Redis is.
    pub url: StoreUrl,
    /// Put before every key.
    pub prefix: String,
    /// How long a `/run` or `/continue` value is kept.
    pub ttl: Duration,
    /// How long a `/commit` or `/apply` value is kept.
    pub commit_ttl: Duration,
    /// The longest a command may take.
    pub timeout: Duration,
    /// Connections in the pool.
    pub connections: usize,
}

/// The single-flight store over Redis: one namespace (its key prefix and
/// TTLs) over a [`RedisLink`] it may share with other stores.
#[derive(Debug)]
pub struct RedisStore {
    link: Arc<RedisLink>,
    prefix: String,
    ttl_ms: u64,
    commit_ttl_ms: u64,
    /// Leases of this store out now.
    in_flight: Arc<AtomicUsize>,
    /// Answers kept once.
    bodies: Bodies,
}

/// What an entry holds.
enum Held {
    Nothing,
    Value(Bytes),
    /// Another's claim, `c` and its token.
    Claim(Bytes),
    /// The id of a body.
    Reference(Bytes),
}

/// A lease's or a waiter's handle: the entry's key and the claim it
/// holds (`c` and the token).
#[derive(Debug)]
struct Claim {
    key: String,
    claim: Bytes,
    /// A lease's own; a waiter has none.
    lead: Option<Lead>,
}

#[derive(Debug)]
struct Lead {
    /// Counts the lease in flight until the last clone goes.
    _in_flight: InFlight,
    /// When the claim runs out in Redis at the earliest: at its lease's end,
    /// or later once a journal's append renewed it.
    until: Mutex<Instant>,
    /// A lease on the same key in this replica's memory, held beside the
    /// claim ([`keep_beside`]) until whoever ends the claim takes it.
    beside: Mutex<Option<Lease>>,
}

#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RedisStore {
    /// A store over a link of its own to the Redis at `options.url`.
    pub fn new(options: RedisOptions) -> Result<RedisStore, StoreError> {
        let link = RedisLink::new(&options.url, &options.prefix, options.timeout, options.connections)?;
        Ok(RedisStore::over(Arc::new(link), options.prefix, options.ttl, options.commit_ttl))
    }

    /// A store over `link`, its keys under `prefix`, its values kept for
    /// `ttl` (`/run`, `/continue`) and `commit_ttl` (`/commit`, `/apply`).
    pub fn over(link: Arc<RedisLink>, prefix: String, ttl: Duration, commit_ttl: Duration) -> RedisStore {
        RedisStore {
            bodies: Bodies::new(link.owner(), link.counter()),
            link,
            prefix,
            ttl_ms: millis(ttl),
            commit_ttl_ms: millis(commit_ttl),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The link this store's commands go over.
    pub fn link(&self) -> &Arc<RedisLink> {
        &self.link
    }

    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.link.connection()
    }

    /// Runs `command`, which may run twice ([`RedisLink::idempotent`]).
    async fn query<T: redis::FromRedisValue>(
        &self,
        deadline: Option<Instant>,
        connection: ConnectionManager,
        command: &redis::Cmd,
    ) -> Result<T, StoreError> {
        self.link
            .idempotent(
                deadline,
                connection,
                |mut connection| async move { command.query_async(&mut connection).await },
            )
            .await
    }

    /// Runs `invocation`, which may run twice ([`RedisLink::idempotent`]).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        deadline: Option<Instant>,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        let connection = self.connection()?;
        self.link
            .idempotent(
                deadline,
                connection,
                |mut connection| async move { invocation.invoke_async(&mut connection).await },
            )
            .await
    }

    fn key(&self, key: &Key) -> String {
        format!("{}:{{{key}}}", self.prefix)
    }

    fn body_key(&self, id: &[u8]) -> String {
        format!("{}:body:{{{}}}", self.prefix, String::from_utf8_lossy(id))
    }

    /// How long a value of `handler` is kept, in ms.
    fn ttl_ms(&self, handler: Handler) -> u64 {
        if is_reserved(handler) { self.commit_ttl_ms } else { self.ttl_ms }
    }

    /// What an entry holds, read from its bytes.
    fn held(&self, held: Option<Vec<u8>>) -> Result<Held, StoreError> {
        let Some(held) = held else { return Ok(Held::Nothing) };
        let held = Bytes::from(held);
        Ok(match held.first() {
            Some(&VALUE) => Held::Value(held.slice(1..)),
            Some(&CLAIM) => Held::Claim(held),
            Some(&REFERENCE) => Held::Reference(held.slice(1..)),
            _ => {
                return Err(StoreError::Unavailable(format!(
                    "{} holds something this server did not write",
                    self.prefix
                )));
            }
        })
    }

    /// The value an entry holds by reference to the body `id`.
    async fn resolve(&self, id: Bytes, deadline: Instant) -> Result<Bytes, StoreError> {
        if let Some(body) = self.bodies.known(&id) {
            return Ok(body);
        }
        let mut read = redis::cmd("GET");
        read.arg(self.body_key(&id));
        let body: Option<Vec<u8>> = self.query(Some(deadline), self.connection()?, &read).await?;
        // Bodies outlive the entries that refer to them, unless Redis lost
        // them (a flush).
        let body = Bytes::from(body.ok_or_else(|| StoreError::Lost("an answer's body is gone".into()))?);
        self.bodies.learn(id, body.clone());
        Ok(body)
    }

    /// What a key held, as `begin` tells it: a hit, another's claim to wait
    /// for, or nothing.
    async fn begun(
        &self,
        key: Key,
        redis_key: String,
        held: Option<Vec<u8>>,
        deadline: Instant,
    ) -> Result<Option<Begin>, StoreError> {
        // Past here the key is held: a call that ran, or runs. What cannot
        // be read of it is no reason to run it again.
        Ok(Some(match self.held(held).map_err(StoreError::reading_held)? {
            Held::Nothing => return Ok(None),
            Held::Value(value) => Begin::Hit(value),
            Held::Reference(id) => Begin::Hit(self.resolve(id, deadline).await.map_err(StoreError::reading_held)?),
            Held::Claim(claim) => {
                Begin::Wait(Waiter { key, token: Arc::new(Claim { key: redis_key, claim, lead: None }) })
            }
        }))
    }

    /// What `end` puts in the entry for `value`: `v` and the value, or `r`
    /// and its body's id once Redis holds the body.
    async fn entry_value(&self, value: &Bytes) -> Vec<u8> {
        let (sent, failures) = (Instant::now(), self.link.failures());
        let id = match self.bodies.keep(value, sent, failures) {
            Keep::Whole => None,
            Keep::Refer(id) => Some(id),
            Keep::Write(id) => {
                let ttl = self.ttl_ms.max(self.commit_ttl_ms).saturating_add(millis(BODY_EXTRA));
                let mut write = redis::cmd("SET");
                write.arg(self.body_key(&id)).arg(&value[..]).arg("PX").arg(ttl);
                let written = async { self.query::<()>(None, self.connection()?, &write).await };
                match written.await {
                    Ok(()) => {
                        self.bodies.written(&id, sent, failures);
                        Some(id)
                    }
                    Err(_) => {
                        self.bodies.unwritten(&id);
                        None
                    }
                }
            }
        };
        let (tag, bytes) = match &id {
            Some(id) => (REFERENCE, &id[..]),
            None => (VALUE, &value[..]),
        };
        let mut held = Vec::with_capacity(1 + bytes.len());
        held.push(tag);
        held.extend_from_slice(bytes);
        held
    }

    /// After `OOM`: what a caller that reads only can learn.
    async fn begin_reading(&self, key: Key, deadline: Instant) -> Result<Begin, StoreError> {
        let redis_key = self.key(&key);
        let mut read = redis::cmd("GET");
        read.arg(&redis_key);
        let held: Option<Vec<u8>> = self.query(Some(deadline), self.connection()?, &read).await?;
        match self.begun(key.clone(), redis_key, held, deadline).await? {
            Some(begin) => Ok(begin),
            None if is_reserved(key.handler) => Ok(Begin::Full),
            // Not a store down: this replica's memory takes the call.
            None => Err(StoreError::Full),
        }
    }

    /// Ends `lease` with `value`, or without one: whether it was this
    /// lease's to end (false: another call claimed or answered the key
    /// since its claim ran out, and nothing changed).
    pub async fn end(&self, lease: &Lease, value: Option<Bytes>) -> Result<bool, StoreError> {
        let claim = claim_of(&lease.token)?;
        let mut invocation = END_SCRIPT.key(&claim.key);
        invocation.arg(&claim.claim[..]);
        if let Some(value) = &value {
            invocation.arg(self.entry_value(value).await).arg(self.ttl_ms(lease.key.handler).max(1));
        }
        let ended: i64 = self.invoke(None, &invocation).await?;
        Ok(ended == 1)
    }

    /// Keeps `lease`'s claim until its key's value would have expired (the
    /// TTL of its handler's answers, from now), if the key still holds it:
    /// whether it does. A `/commit` answer that a full Redis refused holds
    /// its entry so, while it is tried again, rather than let a retry run
    /// the side effect again once the lease runs out.
    pub async fn hold(&self, lease: &Lease) -> Result<bool, StoreError> {
        let claim = claim_of(&lease.token)?;
        let mut invocation = HOLD_SCRIPT.key(&claim.key);
        invocation.arg(&claim.claim[..]).arg(self.ttl_ms(lease.key.handler).max(1));
        let held: i64 = self.invoke(None, &invocation).await?;
        Ok(held == 1)
    }

    /// How long a value of `handler` is kept.
    pub fn ttl(&self, handler: Handler) -> Duration {
        Duration::from_millis(self.ttl_ms(handler))
    }

    /// Gives back `claim` of `key`, sent over `connection` but not known to
    /// have been taken (its command ran late, or its connection dropped):
    /// Redis may yet carry it out, and then hold, for the whole lease, a
    /// claim no call will end, every retry of the call waiting for it. The
    /// claim is given back over the same connection, so after it in
    /// Redis's order, whenever Redis answers while the lease lasts.
    fn give_back(&self, connection: ConnectionManager, key: String, claim: Bytes, until: Instant) {
        let link = self.link.clone();
        self.link.background().spawn(async move {
            let mut invocation = END_SCRIPT.key(&key);
            invocation.arg(&claim[..]);
            let invocation = &invocation;
            let sent =
                link.again_if_dropped(connection, |mut c| async move { invocation.invoke_async::<i64>(&mut c).await });
            if let Err(error) = within(until.saturating_duration_since(Instant::now()), sent).await {
                tracing::debug!(%error, "a claim not known to be taken was not given back; it runs out by its lease");
            }
        });
    }
}

/// A claim sent whose reply is not read yet: given back if the call is
/// dropped meanwhile (its caller hung up) or the reply is an error, rather
/// than left in Redis with nobody to end it, every retry of the key
/// waiting on it until its lease runs out.
struct Unsettled<'a> {
    store: &'a RedisStore,
    /// The connection, key, claim and lease's end of a claim sent; `None`
    /// once the reply said what became of it.
    sent: Option<(ConnectionManager, String, Bytes, Instant)>,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        // A call dropped with its runtime has nothing to spawn on: its
        // claim runs out by its lease.
        if let Some((connection, key, claim, until)) = self.sent.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            self.store.give_back(connection, key, claim, until);
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
        let lead = may_lead();
        // Taken before the claim is sent: Redis's own PX runs out later.
        let until = Instant::now() + lease_ttl;
        let redis_key = self.key(&key);
        let claim = self.link.claim();
        let mut command = if lead { redis::cmd("SET") } else { redis::cmd("GET") };
        command.arg(&redis_key);
        if lead {
            command.arg(&claim[..]).arg("NX").arg("PX").arg(millis(lease_ttl).max(1)).arg("GET");
        }
        let connection = self.connection()?;
        let sent = lead.then(|| (connection.clone(), redis_key.clone(), claim.clone(), until));
        let mut unsettled = Unsettled { store: self, sent };
        let held: Option<Vec<u8>> = match self.query::<Option<Vec<u8>>>(Some(deadline), connection, &command).await {
            // A claim sent again after a dropped connection may find the first one taken.
            Ok(held) => {
                unsettled.sent = None;
                held.filter(|held| !lead || held[..] != claim[..])
            }
            Err(StoreError::Full) => {
                unsettled.sent = None;
                return self.begin_reading(key, deadline).await;
            }
            // Not known to be taken: given back as the guard drops.
            Err(error) => return Err(error),
        };
        if let Some(begin) = self.begun(key.clone(), redis_key.clone(), held, deadline).await? {
            return Ok(begin);
        }
        if !lead {
            return Ok(Begin::Refused);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let lead = Some(Lead {
            _in_flight: InFlight(self.in_flight.clone()),
            until: Mutex::new(until),
            beside: Mutex::new(None),
        });
        Ok(Begin::Lead(Lease { key, token: Arc::new(Claim { key: redis_key, claim, lead }) }))
    }

    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        self.end(&lease, Some(value)).await.map(drop)
    }

    async fn abandon(&self, lease: Lease) -> Result<(), StoreError> {
        self.end(&lease, None).await.map(drop)
    }

    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError> {
        let claim = claim_of(&waiter.token)?;
        let mut pause = Duration::from_millis(1);
        // The longest poll that Redis left unanswered, while none was:
        // a wait Redis never answered is a store that did not answer.
        let mut unanswered = Some(Duration::ZERO);
        loop {
            let mut read = redis::cmd("GET");
            read.arg(&claim.key);
            let polled = self.query::<Option<Vec<u8>>>(Some(deadline), self.connection()?, &read).await;
            unanswered = match &polled {
                Err(StoreError::Timeout(bound)) => unanswered.map(|longest| longest.max(*bound)),
                _ => None,
            };
            match polled {
                Ok(held) => match self.held(held)? {
                    Held::Value(value) => return Ok(Waited::Done(value)),
                    Held::Reference(id) => return Ok(Waited::Done(self.resolve(id, deadline).await?)),
                    Held::Claim(held) if held == claim.claim => {}
                    Held::Claim(_) | Held::Nothing => return Ok(Waited::Abandoned),
                },
                // A slow poll is no news: the next one may answer, until the deadline.
                Err(StoreError::Timeout(_)) => {}
                Err(error) => return Err(error),
            }
            let now = Instant::now();
            if now >= deadline {
                return unanswered.map_or(Ok(Waited::TimedOut), |bound| Err(StoreError::Timeout(bound)));
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

/// Runs one command, for `bound` at most.
async fn within<T>(bound: Duration, run: impl Future<Output = redis::RedisResult<T>>) -> Result<T, StoreError> {
    match tokio::time::timeout(bound, run).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(unavailable(&error)),
        Err(_) => Err(StoreError::Timeout(bound)),
    }
}

fn claim_of(token: &Token) -> Result<&Claim, StoreError> {
    token.downcast_ref::<Claim>().ok_or(StoreError::Foreign)
}

/// Whether `token` is a claim of a [`RedisStore`].
pub fn is_claim(token: &Token) -> bool {
    token.is::<Claim>()
}

/// When the lease holding `token` runs out at the earliest, if it is a
/// lease's claim of a [`RedisStore`].
pub fn claim_until(token: &Token) -> Option<Instant> {
    claim_of(token).ok()?.lead.as_ref().map(|lead| *lead.until.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Notes that the claim `claim` holds runs on until `until` at the
/// earliest (a journal's append renewed it).
fn renewed(claim: &Claim, until: Instant) {
    if let Some(lead) = &claim.lead {
        let mut held = lead.until.lock().unwrap_or_else(PoisonError::into_inner);
        *held = (*held).max(until);
    }
}

/// Keeps `local`, a lease on the same key in another store, beside the
/// claim `token` holds, for whoever ends the claim to end it too
/// ([`take_beside`]); `false` if `token` is no lease's claim.
pub fn keep_beside(token: &Token, local: Lease) -> bool {
    let Some(lead) = claim_of(token).ok().and_then(|claim| claim.lead.as_ref()) else { return false };
    *lead.beside.lock().unwrap_or_else(PoisonError::into_inner) = Some(local);
    true
}

/// Takes the lease [`keep_beside`] kept beside the claim `token` holds:
/// the first to end the claim gets it.
pub fn take_beside(token: &Token) -> Option<Lease> {
    claim_of(token).ok()?.lead.as_ref()?.beside.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// A Redis error as this store reports it: `OOM` is [`StoreError::Full`];
/// the rest say what failed, never the URL or its password.
fn unavailable(error: &redis::RedisError) -> StoreError {
    if error.code() == Some("OOM") || error.to_string().contains("OOM command not allowed") {
        return StoreError::Full;
    }
    let what = match (error.code(), error.kind()) {
        // Redis's own words say what is wrong (a database out of range, an
        // ACL); they never hold the URL.
        (Some(code), _) => match error.detail() {
            Some(detail) => format!("{REFUSED}{code}: {}", crate::text::clip(detail, 200)),
            None => format!("{REFUSED}{code}"),
        },
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
