//! [`SharedStore`]: the store replicas share ([`RedisStore`]), with this
//! replica's memory behind it for when Redis is out of reach.
//!
//! A store that is slow or down must never make an answer late nor run a
//! side effect twice. So every Redis command is bounded by the caller's
//! deadline and the store's timeout; three failures in a row mark the store
//! down (when they are only timeouts, once they have lasted a second: a
//! replica short of CPU sees its commands time out too), after which calls
//! stop asking it until a background probe (a write), or a write still
//! sent to it (a claim's append), finds it back (a log line at each
//! change, not one per call). While it is down:
//!
//! - `/run` and `/continue` lead, wait and replay in this replica's memory
//!   (a repeat on the same replica still replays);
//! - `/commit` and `/apply` are refused with [`StoreError::Unavailable`]:
//!   run without a claim the other replicas can see, a retry on another
//!   replica would run the side effect again. [`CommitFallback::Local`]
//!   opts into running them on the local store anyway; their answers are
//!   then kept in this replica's memory beside Redis while it serves too,
//!   so that a retry here replays (or waits for) a call led in Redis.
//!
//! A journal ([`Journal`]) follows its entry: appended where its lease was
//! taken (Redis, or this replica's memory after a fallback), read from
//! Redis while it serves and from this replica's memory otherwise; but a
//! reader past a journal's start whom Redis fails is told so, not handed
//! on to a journal of the same key in memory, another call's, and so is a
//! reader of a journal that Redis could not be asked for and that memory
//! lacks. A journal in memory that was copied to Redis lives here no
//! longer than its copy there, so that every replica finds it gone at
//! once. A lease taken in memory, or a claim that Redis no longer holds,
//! may be offered to Redis once it is back ([`FlightStore::share`]): its
//! holder then leads there (again), or learns that another replica holds
//! the key.
//!
//! An answer is stored in the background: it goes to the caller at once,
//! and a repeat that comes before it is stored waits for it as for any
//! lease in flight. An answer that Redis did not take (slow, or down for a
//! while) is tried again until it is stored or its lease runs out; a
//! `/commit` or `/apply` answer that Redis refused for want of memory holds
//! its claim, and is tried again, for as long as it would have been kept.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::time::Instant;

use super::{
    Begin, FlightStore, Key, Lease, MemoryStore, StoreError, Usage, Waited, Waiter, is_reserved,
    journal::{Appending, Entries, Journal},
    metrics::{Op, Outcome, StoreMetrics},
    redis::{RedisLink, RedisStore, claim_until, is_claim, keep_beside, take_beside},
};
use crate::background::Background;

/// Failures in a row after which the store is taken for down.
const FAILURES_TO_DOWN: u32 = 3;
/// How long commands must have kept timing out, none answered between,
/// before a store that only answers late is taken for down: a process
/// starved of CPU sees its commands time out too, and a store taken for
/// down makes the assistant's replicas run model calls twice.
const SLOW_TO_DOWN: Duration = Duration::from_secs(1);
/// How often a store taken for down is probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// How often a store that is up is checked for this replica's mark
/// ([`RedisLink::check_mark`]): a flush is noted within about this, however
/// seldom a journal is found lacking, before a hop speaks from a stream of
/// a run that gave way; four commands a second.
const MARK_EVERY: Duration = Duration::from_millis(250);
/// Ticks of the watch ([`MARK_EVERY`]) between probes of a store taken for down.
const PROBE_TICKS: u32 = 2;
const _: () = assert!(MARK_EVERY.as_millis() * PROBE_TICKS as u128 == PROBE_EVERY.as_millis());
/// The first pause before a `/commit` or `/apply` answer that was not
/// stored is tried again; it doubles up to [`MAX_END_PAUSE`].
const FIRST_END_PAUSE: Duration = Duration::from_millis(10);
const MAX_END_PAUSE: Duration = Duration::from_millis(250);

/// What `/commit` and `/apply` do while the shared store is unavailable
/// (`[store] commit_fallback`: `"refuse"` or `"local"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitFallback {
    /// Answer `unavailable`: nothing runs without a claim every replica sees.
    #[default]
    Refuse,
    /// Run on this replica's memory: a retry on another replica may then
    /// run the side effect again. A retry on this one replays, Redis up or
    /// not: answers are kept in memory beside Redis.
    Local,
}

/// What one server knows of its Redis's health, shared by every store over
/// it: one count of failures, one `down` state, one log line when Redis goes
/// and one when it is back, one watch, one check of its settings.
#[derive(Debug)]
pub struct StoreHealth {
    link: Arc<RedisLink>,
    metrics: StoreMetrics,
    /// What the idempotency cache's `/commit` and `/apply` do while Redis
    /// is down, for the log line.
    commit_fallback: CommitFallback,
    failures: AtomicU32,
    /// When the failures in a row began, in ms since `born`.
    failing_since: AtomicU64,
    born: Instant,
    down: AtomicBool,
    /// Set by the first store started: one watch per server.
    watched: AtomicBool,
}

impl StoreHealth {
    /// The health of the Redis behind `link`, counted in `metrics`.
    pub fn new(link: Arc<RedisLink>, metrics: StoreMetrics, commit_fallback: CommitFallback) -> Arc<StoreHealth> {
        Arc::new(StoreHealth {
            link,
            metrics,
            commit_fallback,
            failures: AtomicU32::new(0),
            failing_since: AtomicU64::new(0),
            born: Instant::now(),
            down: AtomicBool::new(false),
            watched: AtomicBool::new(false),
        })
    }

    /// The work the stores over this link left running after answers
    /// (entries being ended), which a stopping server waits for.
    pub fn background(&self) -> &Background {
        self.link.background()
    }

    /// The link whose Redis this is.
    pub fn link(&self) -> &Arc<RedisLink> {
        &self.link
    }

    /// Whether the shared store is taken for down now.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// Runs one command of the shared store, recording how it went.
    async fn run<T>(&self, op: Op, command: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = command.await;
        // An answer held but unread is told by what kept it unread.
        let told = result.as_ref().map_err(StoreError::root);
        let outcome = match told {
            Ok(_) | Err(StoreError::Full) => Outcome::Ok,
            Err(StoreError::Timeout(_)) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        };
        self.metrics.observe(op, outcome, started.elapsed());
        match told {
            // A write Redis carried out: it is back, whatever the probe
            // has yet to find (a replica's own appends find it first).
            Ok(_) if op.is_write() && self.is_down() && !self.link.is_unfit() => self.back(),
            // Redis answered: a value it lost is no sign of a store down.
            Ok(_) | Err(StoreError::Full | StoreError::Lost(_)) => self.succeeded(),
            // A call whose deadline had passed gave the store no time at
            // all: no sign of a slow store.
            Err(StoreError::Timeout(bound)) if *bound < Duration::from_millis(1) => {}
            Err(error) => self.failed(error),
        }
        result
    }

    fn succeeded(&self) {
        self.failures.store(0, Ordering::Relaxed);
    }

    /// Counts a failure: three in a row take the store for down, at once
    /// when it refused or dropped the connection, after [`SLOW_TO_DOWN`] of
    /// failures when it only answered late.
    fn failed(&self, error: &StoreError) {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.link.troubled();
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures == 1 {
            self.failing_since.store(now, Ordering::Relaxed);
        }
        let failing_for = Duration::from_millis(now.saturating_sub(self.failing_since.load(Ordering::Relaxed)));
        let convinced = !matches!(error.root(), StoreError::Timeout(_)) || failing_for >= SLOW_TO_DOWN;
        if failures >= FAILURES_TO_DOWN && convinced {
            self.went_down(error);
        }
    }

    /// Takes the store for down, unless it is already.
    fn went_down(&self, error: &StoreError) {
        if !self.down.swap(true, Ordering::AcqRel) {
            self.metrics.set_up(false);
            tracing::warn!(
                store = %self.link.address(), %error,
                "the shared store is unavailable: /run and /continue use this replica's memory, /commit and /apply {}",
                match self.commit_fallback {
                    CommitFallback::Refuse => "answer `unavailable`",
                    CommitFallback::Local => "run on this replica's memory",
                }
            );
        }
    }

    fn back(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.down.swap(false, Ordering::AcqRel) {
            self.link.troubled();
            self.metrics.set_up(true);
            tracing::info!(store = %self.link.address(), "the shared store is back: replicas share answers again");
        }
    }

    /// Starts the watch, unless a store over the same Redis did.
    fn start(self: &Arc<StoreHealth>) {
        if !self.watched.swap(true, Ordering::AcqRel) {
            tokio::spawn(StoreHealth::watch(Arc::downgrade(self)));
        }
    }

    /// Probes the store (a write: see [`RedisLink::probe`]) at start and
    /// while it is down, and checks its settings once it first answers;
    /// ends with the last store.
    async fn watch(health: Weak<StoreHealth>) {
        let (mut first, mut settings_checked) = (true, false);
        let mut ticks = 0u32;
        let mut tick = tokio::time::interval(MARK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(health) = health.upgrade() else { return };
            if settings_checked && !health.is_down() {
                let _ = health.run(Op::Ping, health.link.check_mark(Instant::now() + PROBE_TIMEOUT)).await;
                ticks = 0;
                continue;
            }
            let due = ticks.is_multiple_of(PROBE_TICKS);
            ticks = ticks.wrapping_add(1);
            if !due {
                continue;
            }
            match health.run(Op::Ping, health.link.probe(PROBE_TIMEOUT)).await {
                Ok(()) => health.back(),
                // A first probe that fails marks the store down at once.
                Err(error) if first => health.went_down(&error),
                Err(_) => {}
            }
            first = false;
            if !settings_checked && !health.is_down() {
                settings_checked = true;
                check_settings(&health.link).await;
            }
        }
    }
}

/// The shared store and this replica's fallback.
#[derive(Debug)]
pub struct SharedStore(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    shared: RedisStore,
    local: MemoryStore,
    commit_fallback: CommitFallback,
    health: Arc<StoreHealth>,
    /// Set once a call ran on `local`: from then on, `local` is asked first.
    fell_back: AtomicBool,
    /// Leases in `local` held beside a claim in Redis (see `mirrors`),
    /// which count in flight once.
    mirrored: AtomicUsize,
}

impl SharedStore {
    /// `shared`, falling back to `local`, its Redis's health in `health`
    /// (shared with the other stores over the same link).
    pub fn new(
        shared: RedisStore,
        local: MemoryStore,
        commit_fallback: CommitFallback,
        health: Arc<StoreHealth>,
    ) -> SharedStore {
        SharedStore(Arc::new(Inner {
            shared,
            local,
            commit_fallback,
            health,
            fell_back: AtomicBool::new(false),
            mirrored: AtomicUsize::new(0),
        }))
    }

    /// Whether the shared store is taken for down now.
    pub fn is_down(&self) -> bool {
        self.0.health.is_down()
    }

    /// The work left running after answers (entries being ended).
    pub fn background(&self) -> &Background {
        self.0.health.background()
    }

    /// Takes a lease on `claim`'s key in this replica's memory too, kept
    /// beside the claim and ended with it; or, when a call on this replica
    /// led the key in memory meanwhile (Redis failing it), gives the claim
    /// back and follows that call.
    fn mirror(&self, claim: Lease, lease_ttl: Duration) -> Begin {
        match self.0.local.begin_now(claim.key.clone(), lease_ttl, &mut || true) {
            Begin::Lead(local) => {
                self.0.mirrored.fetch_add(1, Ordering::Relaxed);
                keep_beside(&claim.token, local);
            }
            here @ (Begin::Hit(_) | Begin::Wait(_)) => {
                self.end(claim, None);
                return here;
            }
            // The memory's reserve is full: the claim alone answers for the
            // key, as without the fallback.
            Begin::Full | Begin::Refused => {}
        }
        Begin::Lead(claim)
    }

    /// Ends a lease in the background (see the module's doc).
    fn end(&self, lease: Lease, value: Option<Bytes>) {
        if let Some(local) = take_beside(&lease.token) {
            self.0.mirrored.fetch_sub(1, Ordering::Relaxed);
            // Ends at once: the memory store cannot fail.
            let _ = match &value {
                Some(value) => self.0.local.complete_now(local, value.clone()),
                None => self.0.local.abandon_now(local),
            };
        }
        let store = self.0.clone();
        self.0.health.background().spawn(async move {
            let op = if value.is_some() { Op::Complete } else { Op::Abandon };
            // An answer not stored leaves its claim until the lease runs
            // out: every retry meanwhile waits for it (and is answered
            // `timeout`), and a `/commit` retried after that runs the side
            // effect again. It is tried again once Redis answers: while the
            // lease lasts, and one that keeps a side effect for as long as
            // it would have been kept, since a key found empty (its claim
            // ran out in an outage longer than the lease) takes it all the
            // same, and a retry after the outage replays it.
            let keeps_a_side_effect = value.is_some() && is_reserved(lease.key.handler);
            let claim_ends_at = claim_until(&lease.token);
            let kept_for = store.shared.ttl(lease.key.handler);
            let mut retry_until = match claim_ends_at {
                Some(until) if keeps_a_side_effect => Some(until.max(Instant::now() + kept_for)),
                until => until,
            };
            let (mut pause, mut retrying, mut held) = (FIRST_END_PAUSE, false, false);
            loop {
                // Tried again only once the store is back, not meanwhile.
                let ended = if retrying && store.is_down() {
                    Err(StoreError::Unavailable("the shared store is taken for down".into()))
                } else {
                    store.run(op, store.shared.end(&lease, value.clone())).await
                };
                let error = match ended {
                    Ok(true) => return,
                    Ok(false) if value.is_some() && is_reserved(lease.key.handler) => {
                        return tracing::warn!(
                            key = %lease.key,
                            "a /{} answer was not stored: its claim ran out while it ran, and another call \
                             claimed the key since (it may run the side effect again)",
                            lease.key.handler
                        );
                    }
                    Ok(false) => return,
                    Err(error) => error,
                };
                let again = Instant::now() + pause;
                // A Redis that answers but is full keeps refusing the answer
                // until memory is freed (answers expiring, an operator): the
                // claim is then held while the answer is tried, so that a
                // retry waits for it rather than find the key empty.
                let lease_ends = claim_ends_at.is_some_and(|until| again >= until);
                if lease_ends && !held && matches!(error, StoreError::Full) && keeps_a_side_effect {
                    held = matches!(store.shared.hold(&lease).await, Ok(true));
                    if held {
                        tracing::debug!(key = %lease.key, "Redis is full: an answer it refused holds its claim while it is tried again");
                        retry_until = Some(Instant::now() + kept_for);
                    }
                }
                if retry_until.is_none_or(|until| again >= until) {
                    tracing::debug!(%error, "an entry of the shared store was not ended; its claim runs out by its TTL");
                    return;
                }
                tokio::time::sleep_until(again).await;
                pause = (pause * 2).min(MAX_END_PAUSE);
                retrying = true;
            }
        });
    }
}

impl Inner {
    fn is_down(&self) -> bool {
        self.health.is_down()
    }

    /// Whether calls of `key` keep their answers in this replica's memory
    /// beside Redis: `/commit` and `/apply` with [`CommitFallback::Local`],
    /// so that a retry on this replica that Redis then fails replays (or
    /// waits for) the call rather than run it again in memory.
    fn mirrors(&self, key: &Key) -> bool {
        self.commit_fallback == CommitFallback::Local && is_reserved(key.handler)
    }

    async fn run<T>(&self, op: Op, command: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        self.health.run(op, command).await
    }

    /// Whether a call of `handler` may run on this replica's memory, the
    /// shared store having failed it for `cause` (none when taken for down).
    fn may_fall_back(&self, key: &Key, cause: Option<&StoreError>) -> Result<(), StoreError> {
        if is_reserved(key.handler) && self.commit_fallback == CommitFallback::Refuse {
            let cause = match cause {
                Some(StoreError::Unavailable(why)) => format!(" ({why})"),
                Some(error) => format!(" ({error})"),
                None => String::new(),
            };
            return Err(StoreError::Unavailable(format!(
                "the shared store is out of reach{cause}, and /{} runs only with a claim every replica sees",
                key.handler
            )));
        }
        self.health.metrics.fell_back(key.handler);
        self.fell_back.store(true, Ordering::Relaxed);
        Ok(())
    }
}

#[async_trait]
impl FlightStore for SharedStore {
    async fn begin(
        &self,
        key: Key,
        lease_ttl: Duration,
        deadline: Instant,
        may_lead: &mut (dyn FnMut() -> bool + Send),
    ) -> Result<Begin, StoreError> {
        let store = &self.0;
        let mirrored = store.mirrors(&key);
        // A key this replica led in its memory while Redis failed it is
        // answered there (its answer, or its lease still running), Redis
        // back or not: Redis never heard of it, and a retry on this replica
        // must not run it again. So is a mirrored key (see `mirrors`).
        if mirrored || store.fell_back.load(Ordering::Relaxed) {
            let here = store.local.begin_now(key.clone(), lease_ttl, &mut || false);
            if let Begin::Hit(_) | Begin::Wait(_) = here {
                return Ok(here);
            }
        }
        let mut cause = None;
        if !store.is_down() {
            match store.run(Op::Begin, store.shared.begin(key.clone(), lease_ttl, deadline, may_lead)).await {
                Ok(Begin::Lead(lease)) if mirrored => return Ok(self.mirror(lease, lease_ttl)),
                Ok(begin) => return Ok(begin),
                Err(StoreError::Full) if is_reserved(key.handler) => return Ok(Begin::Full),
                // Its first call ran: never again, whatever the fallback.
                Err(error @ (StoreError::Lost(_) | StoreError::Unreadable(_))) if is_reserved(key.handler) => {
                    return Err(error);
                }
                Err(error) => cause = Some(error),
            }
        }
        store.may_fall_back(&key, cause.as_ref())?;
        store.local.begin(key, lease_ttl, deadline, may_lead).await
    }

    async fn complete(&self, lease: Lease, value: Bytes) -> Result<(), StoreError> {
        if !is_claim(&lease.token) {
            return self.0.local.complete(lease, value).await;
        }
        self.end(lease, Some(value));
        Ok(())
    }

    async fn abandon(&self, lease: Lease) -> Result<(), StoreError> {
        if !is_claim(&lease.token) {
            return self.0.local.abandon(lease).await;
        }
        self.end(lease, None);
        Ok(())
    }

    async fn wait(&self, waiter: &Waiter, deadline: Instant) -> Result<Waited, StoreError> {
        if !is_claim(&waiter.token) {
            return self.0.local.wait(waiter, deadline).await;
        }
        // Redis's wait fails with a timeout at its deadline when no poll
        // was answered: counted against the store's health (answers late
        // for long enough take it for down), and to the caller the wait
        // timed out. A timeout before the deadline (an answer's body out
        // of reach) stays an error, which a `/run` begins again after.
        match self.0.run(Op::Wait, self.0.shared.wait(waiter, deadline)).await {
            Err(StoreError::Timeout(_)) if Instant::now() >= deadline => Ok(Waited::TimedOut),
            waited => waited,
        }
    }

    async fn purge_expired(&self) -> Result<(), StoreError> {
        self.0.local.purge_expired().await
    }

    fn usage(&self) -> Usage {
        let (local, shared) = (self.0.local.usage(), self.0.shared.usage());
        let in_flight = local.in_flight.saturating_sub(self.0.mirrored.load(Ordering::Relaxed)) + shared.in_flight;
        Usage { in_flight, ..local }
    }

    fn start(&self) {
        self.0.health.start();
    }

    async fn share(&self, lease: &Lease, lease_ttl: Duration, deadline: Instant) -> Result<Option<Begin>, StoreError> {
        let store = &self.0;
        if store.is_down() {
            return Ok(None);
        }
        // Its holder counts its own work against its limits already.
        let mut may_lead = || true;
        let begun = store.shared.begin(lease.key.clone(), lease_ttl, deadline, &mut may_lead);
        store.run(Op::Begin, begun).await.map(Some)
    }

    fn out_of_reach(&self) -> bool {
        self.0.is_down()
    }
}

#[async_trait]
impl Journal for SharedStore {
    async fn append(&self, lease: &Lease, appending: Appending<'_>) -> Result<bool, StoreError> {
        if !is_claim(&lease.token) {
            return self.0.local.append(lease, appending).await;
        }
        let (store, sent) = (&self.0, Instant::now());
        let appended = store.run(Op::Append, store.shared.append(lease, appending)).await;
        if let Ok(true) = appended {
            // Redis set the copy's TTL after `sent`: gone here no later than there.
            store.local.copied(&lease.key, sent + appending.ttl);
        }
        appended
    }

    async fn read(&self, key: &Key, after: u64, deadline: Instant) -> Result<Option<Entries>, StoreError> {
        let store = &self.0;
        // Why Redis could not say whether it holds the journal.
        let failed = if store.is_down() {
            Some(StoreError::Unavailable("the shared store is taken for down".into()))
        } else {
            match store.run(Op::Read, store.shared.read(key, after, deadline)).await {
                Ok(Some(entries)) => return Ok(Some(entries)),
                // A journal begun while Redis was down is in this replica's memory.
                Ok(None) => None,
                Err(error) => Some(error),
            }
        };
        // A reader past the start may have been following the journal in
        // Redis; a journal of the same key in this replica's memory (a call
        // begun here while Redis was away) is another call's, whose entries
        // must not go on where the first one's left off.
        let failed = match failed {
            Some(error) if after > 0 => return Err(error),
            failed => failed,
        };
        match (store.local.read(key, after, deadline).await?, failed) {
            (Some(entries), _) => Ok(Some(entries)),
            // Not "no journal": one that Redis could not be asked for may well be there.
            (None, Some(error)) => Err(error),
            (None, None) => {
                // Redis may lack it because it lost it (flushed, with every
                // connection still open): then noted as a trouble, which its
                // readers wait out for the writer to write it anew.
                self.recheck(deadline).await;
                Ok(None)
            }
        }
    }

    fn troubled_since(&self) -> Option<Instant> {
        self.0.health.link.troubled_since()
    }

    async fn recheck(&self, deadline: Instant) {
        let store = &self.0;
        if !store.is_down() {
            let link = &store.health.link;
            let _ = store.run(Op::Ping, link.check_mark(link.call_deadline(deadline))).await;
        }
    }

    async fn loss_found(&self) {
        self.0.health.link.loss_found().await;
    }
}

/// Says what Redis promises the answers and claims it holds, and warns
/// where that is short of what a `/commit` needs: its answer kept for the
/// TTL, which only `maxmemory-policy noeviction` promises (under a
/// `maxmemory` that refuses writes before the process is killed), and its
/// claim kept across a crash, which only an append-only file does.
async fn check_settings(link: &RedisLink) {
    let address = link.address();
    let names = ["maxmemory-policy", "maxmemory", "appendonly", "appendfsync"];
    let settings = match link.settings(names, PROBE_TIMEOUT).await {
        Ok(settings) => settings,
        Err(error) => {
            return tracing::warn!(
                store = address, %error,
                "Redis's settings could not be read (CONFIG may be disabled): make sure it runs with \
                 maxmemory-policy noeviction and appendonly yes"
            );
        }
    };
    let [Some(policy), Some(maxmemory), Some(appendonly), Some(appendfsync)] = settings else {
        return tracing::warn!(store = address, "Redis did not tell its maxmemory-policy and appendonly settings");
    };
    if maxmemory == "0" {
        tracing::warn!(
            store = address,
            "Redis has no maxmemory: it grows until the memory it is given runs out (a container is then killed), \
             never refusing a write; set maxmemory below its memory limit"
        );
    }
    if policy != "noeviction" {
        tracing::warn!(
            store = address,
            policy,
            "Redis may evict answers under memory pressure (maxmemory-policy {policy}): a /commit retried after its \
             answer was evicted runs again; run Redis with maxmemory-policy noeviction"
        );
    }
    if appendonly != "yes" {
        tracing::warn!(
            store = address,
            "Redis keeps no append-only file: if it crashes or restarts it forgets every claim and answer, and a \
             /commit retried across that runs again; run Redis with appendonly yes (appendfsync always)"
        );
    }
    let appendfsync = if appendonly == "yes" { appendfsync.as_str() } else { "-" };
    tracing::info!(store = address, policy, maxmemory, appendonly, appendfsync, "Redis's settings checked");
}
