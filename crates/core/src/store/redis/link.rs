//! [`RedisLink`]: one server's way to its Redis, shared by every store over
//! it (the idempotency cache's and each scenario's own), so that a server
//! keeps one pool of connections, one set of blocking readers and one claim
//! counter, however many stores it has.

use std::{
    hash::BuildHasher,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use redis::{Client, aio::ConnectionManager};
use tokio::time::Instant;

use super::{REFUSED, StoreUrl, journal::Blocking, within};
use crate::{background::Background, store::StoreError};

/// How long the key a probe writes is kept: it is also this replica's
/// mark in Redis ([`RedisLink::check_mark`]), renewed several times a
/// second while Redis serves.
const MARK_TTL_MS: u64 = 300_000;

/// How a probe that found Redis refusing a command the stores need says so.
const UNFIT: &str = "Redis refused a command the store needs";

/// The connections to one Redis.
#[derive(Debug)]
pub struct RedisLink {
    client: Client,
    /// Where Redis is, for log lines and errors (no password).
    address: String,
    /// Made at the first command: a manager needs the runtime.
    pool: OnceLock<Box<[ConnectionManager]>>,
    next: AtomicUsize,
    /// The longest a command may take.
    timeout: Duration,
    connections: usize,
    /// This replica's part of every claim token.
    owner: String,
    /// Numbers claims and bodies: no two of any store over this link
    /// ever share one.
    counter: Arc<AtomicU64>,
    /// Commands that failed (not counting those that only ran late), and
    /// losses found ([`RedisLink::check_mark`]): a Redis that restarted
    /// empty fails the first command on each connection.
    failures: AtomicU64,
    /// When a command last failed or found its connection dropped, or the
    /// store was last found back after it was taken for down: in ms since
    /// `born`, plus one (0: never).
    troubled_at: AtomicU64,
    born: Instant,
    /// Connections for the journals' blocking reads.
    pub(super) blocking: Blocking,
    /// The key a probe writes: under the stores' prefix, where an ACL that
    /// lets the stores write lets the probe write too.
    probe_key: String,
    /// Set once the probe's key was written: from then on, a Redis that
    /// lacks it has lost what it was given.
    marked: AtomicBool,
    /// Told when the mark is found gone.
    lost: tokio::sync::Notify,
    /// Set by a probe that found Redis refusing a command the stores need.
    unfit: AtomicBool,
    /// Work the stores over this link left running after answers (entries
    /// being ended, claims given back), which a stopping server waits for.
    background: Background,
}

impl RedisLink {
    /// A link to the Redis at `url`, commands bounded by `timeout`, over a
    /// pool of `connections`, its probe's key under `prefix`. Connects at
    /// the first command, and again by itself whenever a connection is lost.
    pub fn new(url: &StoreUrl, prefix: &str, timeout: Duration, connections: usize) -> Result<RedisLink, StoreError> {
        // `rediss://` takes the process's provider.
        crate::http_client::install_tls_provider();
        let client =
            Client::open(url.as_str()).map_err(|_| StoreError::Unavailable(format!("{url} is not a Redis URL")))?;
        let seed = std::hash::RandomState::new().hash_one((std::process::id(), SystemTime::now()));
        let owner = format!("{seed:016x}");
        Ok(RedisLink {
            probe_key: format!("{prefix}:probe:{{{owner}}}"),
            marked: AtomicBool::new(false),
            lost: tokio::sync::Notify::new(),
            unfit: AtomicBool::new(false),
            client,
            address: url.to_string(),
            pool: OnceLock::new(),
            next: AtomicUsize::new(0),
            timeout,
            connections: connections.max(1),
            owner,
            counter: Arc::default(),
            failures: AtomicU64::new(0),
            troubled_at: AtomicU64::new(0),
            born: Instant::now(),
            blocking: Blocking::default(),
            background: Background::new(),
        })
    }

    /// Where Redis is, without its password.
    pub fn address(&self) -> &str {
        &self.address
    }

    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    /// This replica's id, part of every claim token.
    pub(super) fn owner(&self) -> &str {
        &self.owner
    }

    /// The counter numbering this link's claims, for other ids as unique.
    pub(super) fn counter(&self) -> Arc<AtomicU64> {
        self.counter.clone()
    }

    /// A connection of the pool, in turn.
    pub(super) fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let pool = self.pool.get_or_init(|| {
            // No response timeout of the client's own: every command runs
            // under this link's (`command`), and a second timer per command
            // costs CPU on every call for nothing.
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(None)
                // One attempt: a Redis that refuses it is taken for down by
                // the store's health, which probes it on its own.
                .set_number_of_retries(0)
                .set_max_delay(Duration::from_millis(100));
            (0..self.connections)
                .filter_map(|_| ConnectionManager::new_lazy_with_config(self.client.clone(), config.clone()).ok())
                .collect()
        });
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        // `new_lazy_with_config` fails only on a configuration this link never sets.
        let none = || StoreError::Unavailable("no Redis connection could be set up".into());
        pool.get(at % pool.len().max(1)).cloned().ok_or_else(none)
    }

    /// Runs one command (or script) under the link's timeout, or less
    /// when `deadline` comes first.
    pub(super) async fn command<T>(
        &self,
        deadline: Option<Instant>,
        run: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        self.counted(within(self.bound(deadline), run).await)
    }

    /// How long a command may take: the link's timeout, or less when
    /// `deadline` comes first.
    fn bound(&self, deadline: Option<Instant>) -> Duration {
        deadline.map_or(self.timeout, |deadline| self.timeout.min(deadline.saturating_duration_since(Instant::now())))
    }

    /// The deadline of a command sent on a call's behalf by `deadline`:
    /// sooner, when the link's timeout ends first.
    pub(crate) fn call_deadline(&self, deadline: Instant) -> Instant {
        deadline.min(Instant::now() + self.timeout)
    }

    /// Runs an idempotent command (or script) of the watch ([`RedisLink::probe`],
    /// [`RedisLink::check_mark`]) by `deadline` alone: the watch keeps no
    /// call waiting, and a Redis slower for a moment than a call may wait
    /// (a cold connection, a first script sent whole) is not down for that.
    async fn watched<T, F, Fut>(&self, deadline: Instant, run: F) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let bound = deadline.saturating_duration_since(Instant::now());
        self.counted(within(bound, self.again_if_dropped(self.connection()?, run)).await)
    }

    /// Runs an idempotent command (or script) as [`RedisLink::command`]
    /// does, sent again once when its connection turns out dropped (a Redis
    /// restarted: each connection of the pool finds out at its next
    /// command, and reconnects). `run` sends it over the connection it is
    /// given (`connection`, both times); the first send may have been
    /// carried out.
    pub(super) async fn idempotent<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        connection: ConnectionManager,
        run: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.command(deadline, self.again_if_dropped(connection, run)).await
    }

    /// Runs `run` over `connection`, and once more when the connection
    /// turns out dropped (the manager has reconnected by then), counting
    /// the dropped one as a failure: a Redis that restarted empty lost the
    /// bodies kept once.
    pub(super) async fn again_if_dropped<T, F, Fut>(
        &self,
        connection: ConnectionManager,
        mut run: F,
    ) -> redis::RedisResult<T>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        match run(connection.clone()).await {
            Err(error) if error.is_connection_dropped() => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                self.troubled();
                run(connection).await
            }
            done => done,
        }
    }

    /// Counts `result` in [`RedisLink::failures`] when a command failed.
    fn counted<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Unavailable(_)) = &result {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.troubled();
        }
        result
    }

    /// Notes a trouble now: Redis failed a command, dropped a connection
    /// (it may have restarted empty), or was found back.
    pub(crate) fn troubled(&self) {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.troubled_at.fetch_max(now.saturating_add(1), Ordering::Relaxed);
    }

    /// When Redis was last troubled ([`RedisLink::troubled`]), if ever: a
    /// journal it says it lacks soon after may be one it lost.
    pub fn troubled_since(&self) -> Option<Instant> {
        let at = self.troubled_at.load(Ordering::Relaxed).checked_sub(1)?;
        Some(self.born + Duration::from_millis(at))
    }

    /// How many commands failed so far (not counting those that only ran
    /// late or found Redis full).
    pub(super) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// A fresh claim: `c`, this replica's id, a counter: a fencing token no
    /// other lease of any store over this Redis ever had.
    pub(super) fn claim(&self) -> Bytes {
        Bytes::from(format!("c{}:{}", self.owner, self.counter.fetch_add(1, Ordering::Relaxed)))
    }

    /// Checks that Redis takes writes: a Redis that answers `PING` but
    /// refuses writes (a read-only replica after a failover) serves no
    /// claim. A Redis that is full answers: it is up, and each call finds
    /// out what it may still do. Then that it runs the commands the stores
    /// send ([`RedisLink::check_commands`]).
    pub async fn probe(&self, timeout: Duration) -> Result<(), StoreError> {
        let deadline = Instant::now() + timeout;
        match self.mark(timeout).await {
            Ok(()) | Err(StoreError::Full) => {}
            Err(error) => return Err(error),
        }
        // Full, Redis refuses the writes before it looks at them: nothing is
        // learnt of the commands, and nothing held against it.
        let checked = match self.check_commands(deadline).await {
            Err(StoreError::Full) => Ok(()),
            checked => checked,
        };
        let unfit = matches!(&checked, Err(StoreError::Unavailable(why)) if why.starts_with(UNFIT));
        self.unfit.store(unfit, Ordering::Release);
        checked
    }

    /// Checks that Redis runs a claim's `SET … NX GET` (Redis 7.0 or later)
    /// and the scripts (an ACL may forbid them), over the probe's key,
    /// changing nothing: a Redis that answers a write but refuses these
    /// would be found back by every probe and lost at the next call.
    async fn check_commands(&self, deadline: Instant) -> Result<(), StoreError> {
        let mut claim = redis::cmd("SET");
        claim.arg(&self.probe_key).arg(&self.owner).arg("NX").arg("PX").arg(MARK_TTL_MS).arg("GET");
        let claim = &claim;
        let mut end = super::END_SCRIPT.key(&self.probe_key);
        // No claim the key holds: the script changes nothing.
        end.arg("c");
        let end = &end;
        let checked = self
            .watched(deadline, |mut c| async move {
                claim.query_async::<Option<Vec<u8>>>(&mut c).await?;
                end.invoke_async::<i64>(&mut c).await
            })
            .await;
        checked.map(drop).map_err(unfit)
    }

    /// Whether the last probe found Redis refusing a command the stores
    /// need: a write it carries out then says nothing of its being back.
    pub(crate) fn is_unfit(&self) -> bool {
        self.unfit.load(Ordering::Acquire)
    }

    /// Writes the probe's key, this replica's mark, within `bound`, noting
    /// a loss ([`RedisLink::lost_what_it_held`]) when the mark written
    /// before is gone: so does a probe after an outage in which Redis only
    /// answered late, as well as the checks while it serves.
    async fn mark(&self, bound: Duration) -> Result<(), StoreError> {
        // Read before the write is sent: a mark written after it is no
        // mark that Redis lost.
        let marked = self.marked.load(Ordering::Acquire);
        let mut write = redis::cmd("SET");
        write.arg(&self.probe_key).arg(&self.owner).arg("PX").arg(MARK_TTL_MS).arg("GET");
        let write = &write;
        let sent = self.again_if_dropped(self.connection()?, |mut c| async move {
            write.query_async::<Option<Vec<u8>>>(&mut c).await
        });
        // Redis 6 refuses `SET … GET` as it refuses a claim.
        let held = self.counted(within(bound, sent).await).map_err(unfit)?;
        // Never written before (no probe answered yet): nothing was lost.
        if held.is_none() && marked {
            self.lost_what_it_held();
        }
        self.marked.store(true, Ordering::Release);
        Ok(())
    }

    /// Notes that Redis lost what it held: bodies written before count no
    /// more, and a journal it says it lacks may be one it lost.
    fn lost_what_it_held(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.troubled();
        self.lost.notify_waiters();
    }

    /// Checks that Redis still holds this replica's mark (the probe's
    /// key), renewing it. A mark gone means Redis lost what it held: it was
    /// flushed, restarted empty on a connection not yet found dropped, or
    /// failed over to a replica that lacked it. A trouble and a failure are
    /// then noted: a journal Redis says it lacks may be one it lost, which
    /// its writer writes anew, and bodies this replica wrote are written
    /// again before entries refer to them. The mark is written again, so
    /// that a loss is noted once. All by `deadline`: on a call's behalf,
    /// its [`RedisLink::call_deadline`].
    pub(crate) async fn check_mark(&self, deadline: Instant) -> Result<(), StoreError> {
        let mut renew = redis::cmd("PEXPIRE");
        renew.arg(&self.probe_key).arg(MARK_TTL_MS);
        let renew = &renew;
        let held: i64 = self.watched(deadline, |mut c| async move { renew.query_async(&mut c).await }).await?;
        if held == 1 {
            return Ok(());
        }
        // Written again, which finds it gone (unless a probe or check
        // wrote it since) and notes the loss.
        self.mark(deadline.saturating_duration_since(Instant::now())).await
    }

    /// Resolves when this replica next finds its mark gone
    /// ([`RedisLink::check_mark`]).
    pub(crate) async fn loss_found(&self) {
        self.lost.notified().await;
    }

    /// The work the stores over this link left running after answers.
    pub fn background(&self) -> &Background {
        &self.background
    }

    /// Redis's settings `names`, where `CONFIG GET` is allowed: each
    /// name's value, `None` for a setting this Redis does not have.
    pub async fn settings<const N: usize>(
        &self,
        names: [&str; N],
        timeout: Duration,
    ) -> Result<[Option<String>; N], StoreError> {
        let mut connection = self.connection()?;
        let mut command = redis::cmd("CONFIG");
        command.arg("GET").arg(&names[..]);
        let pairs: Vec<String> = within(timeout, command.query_async(&mut connection)).await?;
        let value = |name: &str| pairs.chunks_exact(2).find(|pair| pair[0] == name).map(|pair| pair[1].clone());
        Ok(names.map(value))
    }
}

/// A refusal of a command the stores need, as a probe says it: what Redis
/// it takes. Other errors (a connection lost on the way) are left as they are.
fn unfit(error: StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(why) if why.starts_with(REFUSED) => StoreError::Unavailable(format!(
            "{UNFIT} ({why}); it needs Redis 7.0 or later (or Valkey), \
             and an ACL that allows SET, GET, DEL, PEXPIRE, the stream commands and EVALSHA"
        )),
        other => other,
    }
}
