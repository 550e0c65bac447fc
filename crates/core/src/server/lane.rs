//! The stream lane: connections that open with a `GET` of a long-lived
//! route (one a scenario registered with `Setup::route_in_lane`, such as a
//! screen's event stream) are served on a runtime of their own whose
//! threads run at a lower OS priority. A stream is best effort; Megamind's
//! calls have 300 ms. Ten thousand streams then slow down each other, not
//! `/run`, whose connections stay on the main runtime and its threads.
//!
//! A connection is sorted once, by its first bytes (read with `MSG_PEEK`,
//! so that whoever serves it still reads them): it stays in that lane for
//! its life.
//!
//! The lane answers a plain stream request itself ([`head`], [`answer`]):
//! an open stream then holds no HTTP/1.1 buffers between its events, which
//! hyper keeps per connection (8 KiB to read, 8 KiB to write). Any other
//! request on the lane goes to hyper with the bytes read.

pub(super) mod answer;
pub mod head;

use std::{io, num::NonZeroUsize, sync::Arc, time::Duration};

use tokio::{
    net::TcpStream,
    runtime::{Handle, Runtime},
};

/// The longest request line start the lane compares: a longer route's
/// path is compared by its first bytes only.
const MAX_PREFIX: usize = 128;

/// The request line starts that sort a connection into the lane: `GET `
/// and the literal start (up to its first `{`) of each lane route's path.
#[derive(Debug, Clone, Default)]
pub(super) struct Prefixes(Arc<[Box<[u8]>]>);

impl Prefixes {
    /// The prefixes of `paths` (axum syntax: `/events/{id}`).
    pub(super) fn of(paths: &[String]) -> Prefixes {
        let prefixes = paths.iter().map(|path| {
            let literal = path.split('{').next().unwrap_or_default();
            let mut line = format!("GET {literal}").into_bytes();
            line.truncate(MAX_PREFIX);
            line.into_boxed_slice()
        });
        Prefixes(prefixes.collect())
    }

    /// No route is served on the lane.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sorts `head`, the first bytes a connection sent.
    pub(super) fn sort(&self, head: &[u8]) -> Sorted {
        match head {
            [] => Sorted::Gone,
            _ if self.0.iter().any(|prefix| head.starts_with(prefix)) => Sorted::Stream,
            _ => Sorted::Main,
        }
    }

    /// Waits up to `within` for `stream`'s first bytes and sorts them.
    pub(super) async fn sort_connection(&self, stream: &TcpStream, within: Duration) -> Sorted {
        let mut head = [0u8; MAX_PREFIX];
        let longest = self.0.iter().map(|prefix| prefix.len()).max().unwrap_or(1);
        match tokio::time::timeout(within, stream.peek(&mut head[..longest])).await {
            Ok(Ok(n)) => self.sort(&head[..n]),
            Ok(Err(_)) => Sorted::Gone,
            Err(_) => Sorted::Silent,
        }
    }
}

/// Where a connection's first bytes send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sorted {
    /// The main runtime: everything but a stream, including HTTP/2 and a
    /// first segment too short to tell.
    Main,
    /// The stream lane.
    Stream,
    /// Nothing arrived within the header timeout: drop it.
    Silent,
    /// The client closed it, or it failed, before sending anything.
    Gone,
}

/// The lane's runtime. Dropped when the server stops, without waiting for
/// its threads: every connection on it has ended by then.
#[derive(Debug)]
pub(super) struct Lane {
    runtime: Option<Runtime>,
}

impl Lane {
    /// Starts the lane: `threads` threads, `nice` below the process's priority.
    pub(super) fn start(nice: u8, threads: NonZeroUsize) -> io::Result<Lane> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.get())
            .thread_name("stream-lane")
            .enable_all()
            .on_thread_start(move || lower_priority(nice))
            .build()?;
        Ok(Lane { runtime: Some(runtime) })
    }

    /// Its worker threads.
    pub(super) fn threads(&self) -> usize {
        self.handle().metrics().num_workers()
    }

    /// Where the lane's connections are spawned.
    pub(super) fn handle(&self) -> &Handle {
        self.runtime.as_ref().expect("taken only on drop").handle()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // A runtime dropped inside another would block on its threads.
            runtime.shutdown_background();
        }
    }
}

/// Lowers the calling thread's priority by `nice` (to 19 at most).
#[cfg(target_os = "linux")]
fn lower_priority(nice: u8) {
    use rustix::{process, thread};
    let tid = thread::gettid();
    let lowered = process::getpriority_process(Some(tid))
        .and_then(|now| process::setpriority_process(Some(tid), (now + i32::from(nice)).min(19)));
    if let Err(error) = lowered {
        tracing::warn!(%error, "the stream lane's thread keeps its priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority(_nice: u8) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lane_route_s_request_line_sorts_into_the_lane() {
        let lane = Prefixes::of(&["/events/{id}".to_owned(), "/feeds/{name}/live".to_owned()]);
        assert_eq!(lane.sort(b"GET /events/"), Sorted::Stream);
        assert_eq!(lane.sort(b"GET /events/abc HTTP/1.1\r\n"), Sorted::Stream);
        assert_eq!(lane.sort(b"GET /feeds/x/live HTTP/1.1\r\n"), Sorted::Stream);
        for main in [&b"GET /other/"[..], b"POST /events/ HTTP/1.1", b"PRI * HTTP/2.0\r\n", b"GET /eve", b"G"] {
            assert_eq!(lane.sort(main), Sorted::Main, "{}", String::from_utf8_lossy(main));
        }
        assert_eq!(lane.sort(b""), Sorted::Gone, "closed before a byte");
        assert!(Prefixes::of(&[]).is_empty());
        let long = format!("/{}/{{id}}", "x".repeat(300));
        assert_eq!(Prefixes::of(&[long]).0[0].len(), MAX_PREFIX, "compared by its first bytes");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_lanes_threads_run_at_a_lower_priority_and_as_many_as_asked() {
        let lane = Lane::start(7, NonZeroUsize::new(3).unwrap()).unwrap();
        assert_eq!(lane.threads(), 3);
        let own = rustix::process::getpriority_process(None).unwrap();
        let theirs = lane.handle().block_on(async {
            tokio::spawn(async { rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap() })
                .await
                .unwrap()
        });
        assert_eq!(theirs, (own + 7).min(19));
    }
}
