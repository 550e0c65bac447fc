//! A log writer that batches: lines are appended to buffers in memory, and a
//! background thread writes them out every few milliseconds.
//!
//! A channel writer (tracing-appender's) wakes its thread for every line;
//! under load those wake-ups cost more than the requests they log. Here a
//! request pays one short mutex-guarded copy and never a syscall or a wake-up.
//! Each thread appends to a buffer of its own shard, so worker threads do not
//! contend for one lock; lines of one thread stay in order, lines of different
//! threads interleave per flush. If the output stalls, the buffers stop
//! growing at their cap and lines are dropped and counted rather than
//! blocking handlers.

use std::{
    io::{self, Write},
    mem,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use tracing_subscriber::fmt::MakeWriter;

/// How often the buffers are written out.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// Buffers, one per shard of threads.
const SHARDS: usize = 8;
/// Bytes buffered at most per shard between flushes.
const CAP: usize = (8 << 20) / SHARDS;

#[derive(Debug, Default)]
struct Shared {
    buffers: [Buffer; SHARDS],
    stop: Mutex<bool>,
    wake: Condvar,
    /// Dropped since the last report in the output.
    unreported: AtomicU64,
    /// Dropped in all.
    dropped: AtomicU64,
}

/// One shard's buffer, alone on its cache lines: two worker threads
/// appending to neighbouring shards would otherwise bounce one line between
/// their cores on every line logged.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Buffer(
    // A std mutex: held for one memcpy, never across an await.
    Mutex<Vec<u8>>,
);

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Lines dropped by every writer of the process: what the metric
/// `megamind_log_lines_dropped_total` reads.
static DROPPED_IN_ALL: AtomicU64 = AtomicU64::new(0);

/// Log lines dropped so far in this process, because the output could not
/// keep up.
pub fn dropped_in_all() -> u64 {
    DROPPED_IN_ALL.load(Ordering::Relaxed)
}

thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
}

/// The writer handed to the subscriber; cheap to clone.
#[derive(Debug, Clone)]
pub struct BatchWriter {
    shared: Arc<Shared>,
}

/// Stops the flushing thread and writes what is left when dropped.
#[derive(Debug)]
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl BatchWriter {
    /// A writer flushing into `out` from a thread of its own.
    pub fn new<W: Write + Send + 'static>(mut out: W) -> (BatchWriter, FlushGuard) {
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("log-flush".into())
                .spawn(move || {
                    let mut spare = Vec::new();
                    loop {
                        let stop = {
                            let stop = shared.stop.lock().unwrap_or_else(|p| p.into_inner());
                            let (stop, _) =
                                shared.wake.wait_timeout(stop, FLUSH_EVERY).unwrap_or_else(|p| p.into_inner());
                            *stop
                        };
                        flush(&shared, &mut spare, &mut out);
                        if stop {
                            return;
                        }
                    }
                })
                .expect("spawn the log flushing thread")
        };
        (BatchWriter { shared: shared.clone() }, FlushGuard { shared, thread: Some(thread) })
    }

    /// Appends one line that `write` writes straight into this thread's
    /// buffer, with no copy through a line buffer of its own.
    pub fn append(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let mut buffer = self.shard();
        let start = buffer.len();
        write(&mut buffer);
        if buffer.len() > CAP {
            buffer.truncate(start);
            drop(buffer);
            self.count_dropped();
        }
    }

    fn shard(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        let shard = SHARD.with(|shard| *shard);
        self.shared.buffers[shard].0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count_dropped(&self) {
        self.shared.unreported.fetch_add(1, Ordering::Relaxed);
        self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        DROPPED_IN_ALL.fetch_add(1, Ordering::Relaxed);
    }

    /// Lines dropped because the output could not keep up.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn flush(shared: &Shared, spare: &mut Vec<u8>, out: &mut impl Write) {
    for Buffer(buffer) in &shared.buffers {
        {
            let mut buffer = buffer.lock().unwrap_or_else(|p| p.into_inner());
            mem::swap(&mut *buffer, spare);
        }
        if !spare.is_empty() {
            // Nowhere to report a failing log output: the lines are lost either way.
            let _ = out.write_all(spare);
            spare.clear();
        }
    }
    let _ = out.flush();
    let dropped = shared.unreported.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        let _ = writeln!(out, "log output too slow: {dropped} lines dropped").and_then(|()| out.flush());
    }
}

impl Write for BatchWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut buffer = self.shard();
        if buffer.len() + line.len() > CAP {
            drop(buffer);
            self.count_dropped();
        } else {
            buffer.extend_from_slice(line);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchWriter {
    type Writer = BatchWriter;

    fn make_writer(&'a self) -> BatchWriter {
        self.clone()
    }
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A log output that takes nothing: every line waits, and past the cap is dropped.
#[cfg(test)]
pub(crate) struct Stuck;

#[cfg(test)]
impl Write for Stuck {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::other("stuck"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_shards_share_a_cache_line() {
        let shared = Shared::default();
        let at = |shard: usize| std::ptr::from_ref(&shared.buffers[shard]) as usize;
        assert!((1..SHARDS).all(|shard| at(shard) - at(shard - 1) >= 128 && at(shard) % 128 == 0));
    }

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_reaches_the_output_by_the_time_the_guard_drops() {
        let sink = Sink::default();
        let (writer, guard) = BatchWriter::new(sink.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        writer.write_all(format!("thread {t} line {i}\n").as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 4000);
        assert!(text.lines().all(|l| l.starts_with("thread ")), "lines are never interleaved");
        assert_eq!(writer.dropped(), 0);
    }

    #[test]
    fn a_full_buffer_drops_and_counts_instead_of_blocking() {
        let (mut writer, guard) = BatchWriter::new(Stuck);
        // Over the cap even into an empty buffer: dropped whatever the flusher does.
        writer.write_all(&vec![b'x'; CAP + 1]).unwrap();
        writer.write_all(b"short line\n").unwrap();
        assert_eq!(writer.dropped(), 1);
        assert!(dropped_in_all() >= 1, "counted for the metric too");
        drop(guard);
    }
}
