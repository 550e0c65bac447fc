//! A log writer that batches: lines are appended to a shared buffer, and a
//! background thread writes the buffer out every few milliseconds.
//!
//! A channel writer (tracing-appender's) wakes its thread for every line;
//! under load those wake-ups cost more than the requests they log. Here a
//! request pays one short mutex-guarded copy and never a syscall or a wake-up.
//! If the output stalls, the buffer stops growing at its cap and lines are
//! dropped and counted rather than blocking handlers.

use std::{
    io::{self, Write},
    mem,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use tracing_subscriber::fmt::MakeWriter;

/// How often the buffer is written out.
const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// Bytes buffered at most between flushes.
const CAP: usize = 8 << 20;

#[derive(Debug, Default)]
struct Shared {
    // A std mutex: held for one memcpy, never across an await.
    buffer: Mutex<Vec<u8>>,
    stop: Mutex<bool>,
    wake: Condvar,
    dropped: AtomicU64,
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

    /// Lines dropped because the output could not keep up.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn flush(shared: &Shared, spare: &mut Vec<u8>, out: &mut impl Write) {
    {
        let mut buffer = shared.buffer.lock().unwrap_or_else(|p| p.into_inner());
        mem::swap(&mut *buffer, spare);
    }
    if !spare.is_empty() {
        // Nowhere to report a failing log output: the lines are lost either way.
        let _ = out.write_all(spare).and_then(|()| out.flush());
        spare.clear();
    }
    let dropped = shared.dropped.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        let _ = writeln!(out, "log output too slow: {dropped} lines dropped").and_then(|()| out.flush());
    }
}

impl Write for BatchWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut buffer = self.shared.buffer.lock().unwrap_or_else(|p| p.into_inner());
        if buffer.len() + line.len() > CAP {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

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
        struct Stuck;
        impl Write for Stuck {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("stuck"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (mut writer, guard) = BatchWriter::new(Stuck);
        let line = vec![b'x'; 1 << 20];
        // Faster than any flush interval: the cap is reached within one batch.
        for _ in 0..20 {
            writer.write_all(&line).unwrap();
        }
        assert!(writer.dropped() > 0 || writer.shared.buffer.lock().unwrap().len() <= CAP);
        drop(guard);
    }
}
