//! The Redis store's [`Journal`]: a stream beside each entry's key, in its
//! hash-tagged slot (`<key>:journal`), entry `0-N` holding entry N.
//!
//! - `append`, one round trip: a script that checks the entry still holds
//!   the lease's claim, skips the entries the claim's holder appended
//!   already (kept beside, `<key>:journal:count`: an append that timed out
//!   may have been carried out, and its entries come again with the next),
//!   numbers on from the stream's last id, `XADD`s each entry (`d` and its
//!   bytes; `e` and nothing for the end) with an exact `MAXLEN`, `PEXPIRE`s
//!   the stream, and the claim too when the append renews the lease.
//! - `read`: a script answers the entries after the one given (`XRANGE`),
//!   whether there is a journal at all (the stream, or a claim on the
//!   entry, whose leader has not appended yet) and whether anything holds
//!   its entry (a journal whose holder died is not waited on). With nothing new, an
//!   `XREAD BLOCK` bounded by the reader's deadline waits for the next, on
//!   a connection of its own: a blocked command holds up every command
//!   queued behind it on its connection, so blocking reads never share the
//!   pool's. Idle ones are kept for the next read, a few at most; past
//!   [`MAX_BLOCKING`] reads blocked at once, a reader polls instead.

use std::{
    sync::{Arc, LazyLock, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use bytes::Bytes;
use redis::{Script, Value, aio::MultiplexedConnection};
use tokio::{sync::Semaphore, time::Instant};

use super::{RedisStore, claim_of, millis, unavailable};
use crate::store::{
    Key, Lease, StoreError,
    journal::{Appending, Entries, Journal, READ_BATCH},
};

/// `KEYS`: the entry, its stream, its holder's count. `ARGV`: the claim,
/// the length cap, the TTL in ms, `1` to end, the lease in ms (0: not
/// renewed), the entries the holder had appended before, then the entries.
/// The count (`<claim> <n>`) says how many entries the claim's holder has
/// appended: those of a batch sent again that are already there are not
/// appended twice.
const APPEND: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local held = 0
local count = redis.call('GET', KEYS[3])
if count and string.sub(count, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  held = tonumber(string.sub(count, #ARGV[1] + 2))
end
local from = tonumber(ARGV[6])
if from > held then return -1 end
local first = 7 + held - from
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local seq = 0
if top[1] then
  seq = tonumber(string.sub(top[1][1], 3))
  if top[1][2][1] == 'e' then
    if ARGV[4] == '1' and first > #ARGV then return seq end
    return -1
  end
end
for i = first, #ARGV do
  seq = seq + 1
  redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '0-' .. seq, 'd', ARGV[i])
end
if ARGV[4] == '1' then
  seq = seq + 1
  redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '0-' .. seq, 'e', '')
end
if first <= #ARGV then
  redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. (from + #ARGV - 6), 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
if ARGV[5] ~= '0' then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return seq
";

/// `KEYS`: the entry, its stream. `ARGV`: the exclusive start, the count.
/// Answers whether there is a journal, the entries, and what holds the
/// entry (`c` a claim, `v` a value, `r` a value kept once, empty: nothing).
const READ: &str = r"
local entries = redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])
local holder = redis.call('GETRANGE', KEYS[1], 0, 0)
if #entries > 0 or redis.call('EXISTS', KEYS[2]) == 1 or holder == 'c' then return {1, entries, holder} end
return {0, entries, holder}
";

static APPEND_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(APPEND));
static READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(READ));

/// How late Redis may end a block: its timers run 10 times a second.
const REDIS_CLOCK: Duration = Duration::from_millis(100);

/// Idle blocking connections kept at most.
const MAX_IDLE_BLOCKING: usize = 8;
/// Reads blocked at once at most, each on a connection of its own: a bound
/// on the connections a replica opens to Redis, however many calls it follows.
pub const MAX_BLOCKING: usize = 64;
/// How long a reader past [`MAX_BLOCKING`] waits before it reads again.
const BUSY_POLL: Duration = Duration::from_millis(20);

/// The connections blocking reads use, one per read at a time.
#[derive(Debug)]
pub(super) struct Blocking {
    idle: Mutex<Vec<MultiplexedConnection>>,
    slots: Arc<Semaphore>,
}

impl Default for Blocking {
    fn default() -> Blocking {
        Blocking { idle: Mutex::default(), slots: Arc::new(Semaphore::new(MAX_BLOCKING)) }
    }
}

impl Blocking {
    fn take(&self) -> Option<MultiplexedConnection> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn give_back(&self, connection: MultiplexedConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE_BLOCKING {
            idle.push(connection);
        }
    }
}

impl RedisStore {
    fn journal_key(entry: &str) -> String {
        format!("{entry}:journal")
    }

    /// Where the count of entries the holder of `entry`'s claim appended is kept.
    fn count_key(entry: &str) -> String {
        format!("{entry}:journal:count")
    }

    /// A connection for one blocking read: an idle one, or a new one made
    /// by `deadline` (`None` past it: no news, and no sign of a sick store).
    async fn blocking_connection(&self, deadline: Instant) -> Result<Option<MultiplexedConnection>, StoreError> {
        if let Some(connection) = self.link.blocking.take() {
            return Ok(Some(connection));
        }
        let config = redis::AsyncConnectionConfig::new()
            // The read's own bound applies, not a response timeout.
            .set_response_timeout(None);
        let connect = self.link.client().get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(connection)) => Ok(Some(connection)),
            Ok(Err(error)) => Err(unavailable(&error)),
            Err(_) => Ok(None),
        }
    }

    /// Waits for entries after `after` with `XREAD BLOCK`, until `deadline`.
    async fn block(&self, stream: &str, after: u64, deadline: Instant) -> Result<Vec<Value>, StoreError> {
        if deadline.saturating_duration_since(Instant::now()).as_millis() == 0 {
            return Ok(Vec::new());
        }
        // Redis ends a block on its own clock, `hz` times a second (10 by
        // default), so up to 100 ms late: a block that should end sooner
        // would outlive its deadline, be cut and counted as a slow store.
        // Such a short wait is a sleep on ours; the next read sees what came.
        if deadline.saturating_duration_since(Instant::now()) <= REDIS_CLOCK {
            tokio::time::sleep_until(deadline).await;
            return Ok(Vec::new());
        }
        let Ok(_slot) = self.link.blocking.slots.clone().try_acquire_owned() else {
            // No news yet: the caller reads again (one round trip) after a pause.
            tokio::time::sleep_until((Instant::now() + BUSY_POLL).min(deadline)).await;
            return Ok(Vec::new());
        };
        let Some(mut connection) = self.blocking_connection(deadline).await? else { return Ok(Vec::new()) };
        // Measured once the connection is there: making one takes a while.
        let block = deadline.saturating_duration_since(Instant::now()).saturating_sub(REDIS_CLOCK);
        if block.as_millis() == 0 {
            self.link.blocking.give_back(connection);
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("XREAD");
        command.arg("COUNT").arg(READ_BATCH).arg("BLOCK").arg(millis(block)).arg("STREAMS").arg(stream);
        command.arg(format!("0-{after}"));
        // Cut at the reader's deadline, not a store's timeout past it: the
        // block is no longer than that to Redis's clock, so a block that
        // outlives it is no news, nor a sign of a slow store (the script
        // before it, bounded alike, counts one). A connection cut while its
        // command may still be blocked is dropped.
        let Ok(read) = tokio::time::timeout_at(deadline, command.query_async::<Value>(&mut connection)).await else {
            return Ok(Vec::new());
        };
        let read = read.map_err(|error| unavailable(&error))?;
        self.link.blocking.give_back(connection);
        Ok(stream_entries(read))
    }
}

#[async_trait]
impl Journal for RedisStore {
    async fn append(&self, lease: &Lease, appending: Appending<'_>) -> Result<bool, StoreError> {
        let claim = claim_of(&lease.token)?;
        let mut invocation = APPEND_SCRIPT.key(&claim.key);
        invocation.key(Self::journal_key(&claim.key)).key(Self::count_key(&claim.key));
        invocation.arg(&claim.claim[..]).arg(appending.max_len.max(1)).arg(millis(appending.ttl).max(1));
        invocation.arg(if appending.end { "1" } else { "0" });
        invocation.arg(appending.lease.map_or(0, |lease| millis(lease).max(1))).arg(appending.from);
        for entry in appending.entries {
            invocation.arg(&entry[..]);
        }
        // Safe to send twice: the second finds the entries there.
        let sent = Instant::now();
        let last: i64 = self.invoke(None, &invocation).await?;
        // Renewed from when it was sent at the latest: whoever ends the
        // claim tries for as long as it holds.
        if let (true, Some(lease)) = (last >= 0, appending.lease) {
            super::renewed(claim, sent + lease);
        }
        Ok(last >= 0)
    }

    async fn read(&self, key: &Key, after: u64, deadline: Instant) -> Result<Option<Entries>, StoreError> {
        let entry = self.key(key);
        let stream = Self::journal_key(&entry);
        let mut invocation = READ_SCRIPT.key(&entry);
        invocation.key(&stream).arg(format!("(0-{after}")).arg(READ_BATCH);
        let (exists, read, holder): (i64, Vec<Value>, Vec<u8>) = self.invoke(Some(deadline), &invocation).await?;
        if exists == 0 {
            return Ok(None);
        }
        let abandoned = holder.is_empty();
        if !read.is_empty() || abandoned {
            let mut read = entries(read, after)?;
            read.abandoned = abandoned && !read.ended;
            return Ok(Some(read));
        }
        entries(self.block(&stream, after, deadline).await?, after).map(Some)
    }
}

/// The entries of the one stream an `XREAD` answered (RESP2 or RESP3).
fn stream_entries(read: Value) -> Vec<Value> {
    let streams = match read {
        Value::Array(streams) => streams.into_iter().filter_map(|stream| match stream {
            Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
            _ => None,
        }),
        Value::Map(pairs) => return pairs.into_iter().map(|(_, v)| v).find_map(array).unwrap_or_default(),
        _ => return Vec::new(),
    };
    streams.into_iter().find_map(array).unwrap_or_default()
}

fn array(value: Value) -> Option<Vec<Value>> {
    match value {
        Value::Array(values) => Some(values),
        _ => None,
    }
}

/// Stream entries (`[id, [field, value]]`) as journal entries after `after`.
/// Their numbers follow `after` (past a gap the length cap made) one by
/// one, as the journal's writer numbers them: a reader goes on after the
/// last, so any other numbering is something this server did not write.
fn entries(read: Vec<Value>, after: u64) -> Result<Entries, StoreError> {
    let garbage = || StoreError::Unavailable("a journal holds something this server did not write".into());
    let mut out = Entries { first: after.saturating_add(1), ..Entries::default() };
    let mut last = after;
    for (index, entry) in read.into_iter().enumerate() {
        let mut parts = array(entry).ok_or_else(garbage)?.into_iter();
        let (Some(Value::BulkString(id)), Some(fields)) = (parts.next(), parts.next()) else { return Err(garbage()) };
        let number = std::str::from_utf8(&id)
            .ok()
            .and_then(|id| id.strip_prefix("0-"))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(garbage)?;
        let follows = if index == 0 { number > after } else { Some(number) == last.checked_add(1) };
        if !follows {
            return Err(garbage());
        }
        last = number;
        if index == 0 {
            out.first = number;
        }
        let mut fields = array(fields).ok_or_else(garbage)?.into_iter();
        match (fields.next(), fields.next()) {
            (Some(Value::BulkString(field)), _) if field == b"e" => {
                out.ended = true;
                break;
            }
            (Some(Value::BulkString(field)), Some(Value::BulkString(value))) if field == b"d" => {
                out.entries.push(Bytes::from(value));
            }
            _ => return Err(garbage()),
        }
    }
    if out.entries.is_empty() && !out.ended {
        out.first = after.saturating_add(1);
    }
    Ok(out)
}

/// The journal entries after entry `after` that an `XREAD` reply's bytes
/// (RESP2 or RESP3) hold, read as a journal's reader reads them; `None`
/// for bytes that are no reply: for the fuzz target `stream_reply`, built
/// with the `fuzzing` feature.
#[cfg(any(test, feature = "fuzzing"))]
pub fn fuzz_stream_reply(reply: &[u8], after: u64) -> Option<Result<Entries, StoreError>> {
    let read = redis::parse_redis_value(reply).ok()?;
    Some(entries(stream_entries(read), after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, field: &str, value: &str) -> Value {
        let fields = Value::Array(vec![Value::BulkString(field.into()), Value::BulkString(value.into())]);
        Value::Array(vec![Value::BulkString(id.into()), fields])
    }

    #[test]
    fn numbers_at_the_integers_limit_neither_wrap_nor_panic() {
        let read = entries(vec![entry(&format!("0-{}", u64::MAX), "d", "x")], u64::MAX - 1).unwrap();
        assert_eq!((read.first, read.entries.len()), (u64::MAX, 1));
        assert_eq!(read.last(u64::MAX - 1), u64::MAX);
        let none = entries(Vec::new(), u64::MAX).unwrap();
        assert_eq!((none.first, none.last(u64::MAX)), (u64::MAX, u64::MAX));
        assert!(entries(vec![entry("1-2", "d", "x")], 0).is_err(), "not an id this server writes");
    }

    #[test]
    fn entries_numbered_otherwise_than_their_writer_numbers_them_are_refused() {
        let read = entries(vec![entry("0-7", "d", "a"), entry("0-8", "d", "b")], 3).unwrap();
        assert_eq!((read.first, read.last(3)), (7, 8), "past a gap the length cap made");
        for (ids, after) in [(["0-3", "0-4"], 3), (["0-2", "0-5"], 1), (["0-5", "0-5"], 1), (["0-6", "0-5"], 1)] {
            let read = entries(ids.iter().map(|id| entry(id, "d", "x")).collect(), after);
            assert!(read.is_err(), "{ids:?} after {after}");
        }
    }

    #[test]
    fn an_xread_reply_s_bytes_read_as_its_entries_in_either_protocol() {
        let resp2 = b"*1\r\n*2\r\n$1\r\nj\r\n*2\r\n*2\r\n$3\r\n0-4\r\n*2\r\n$1\r\nd\r\n$2\r\nhi\r\n\
                      *2\r\n$3\r\n0-5\r\n*2\r\n$1\r\ne\r\n$0\r\n\r\n";
        let resp3 = b"%1\r\n$1\r\nj\r\n*1\r\n*2\r\n$3\r\n0-4\r\n*2\r\n$1\r\nd\r\n$2\r\nhi\r\n";
        for (reply, ended) in [(&resp2[..], true), (&resp3[..], false)] {
            let read = fuzz_stream_reply(reply, 3).expect("a reply").expect("entries");
            assert_eq!((read.first, &read.entries[..], read.ended), (4, &[Bytes::from_static(b"hi")][..], ended));
        }
        assert!(fuzz_stream_reply(b"*1\r\n", 0).is_none(), "cut short");
        assert!(fuzz_stream_reply(b"$2\r\nhi\r\n", 0).expect("a reply").is_ok_and(|read| read.entries.is_empty()));
    }
}
