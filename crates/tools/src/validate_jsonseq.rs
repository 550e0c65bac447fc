//! `validate-jsonseq`: checks a JSONSeq v1 SSE transcript (a file, standard
//! input or a URL) against the contract and prints every violation.

use std::time::Duration;

use megamind_assistant::jsonseq::{Transcript, Violation, read_transcript, transcript, validate};

use crate::bounded::read_at_most;

/// Largest transcript read, in bytes.
pub const MAX_TRANSCRIPT_BYTES: u64 = 64 << 20;

/// `validate-jsonseq`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    /// The SSE transcript: a file, `-` for standard input, or an http(s) URL to read the stream from.
    #[arg(default_value = "-")]
    pub source: String,
    /// How long a URL's stream may take to end, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

/// Runs `validate-jsonseq`: prints each violation; returns the exit code (0
/// valid, 1 violations, 2 the transcript could not be read).
pub fn main(args: &ValidateArgs) -> u8 {
    let text = match read(args) {
        Ok(text) => text,
        Err(message) => {
            complain(&args.source, &message);
            return 2;
        }
    };
    let Transcript { events, more, unterminated } = read_transcript(&text);
    if more {
        // Judged on its start, it could be called valid: refused, as a transcript over its bytes is.
        complain(&args.source, &format!("more than {} events, the most read", transcript::MAX_EVENTS));
        return 2;
    }
    let mut violations = validate(&events);
    if unterminated {
        let message = "the transcript ends inside an event, with no blank line after it: a client drops that event";
        violations.push(Violation {
            index: events.len(),
            event: "<end>".into(),
            rule: "unterminated",
            message: message.into(),
        });
    }
    // What the transcript holds (an event's name, its data) is shown with
    // its control characters escaped: it may be anyone's stream.
    for violation in &violations {
        crate::outln!("{}", crate::stdout::shown(&violation.to_string()));
    }
    if violations.is_empty() {
        crate::outln!("valid: {} events", events.len());
        0
    } else {
        crate::outln!("{} violations in {} events", violations.len(), events.len());
        1
    }
}

fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

/// Says on stderr what went wrong with `source`, with no secret: a URL
/// without its password, and no signature of a signed stream address
/// (`sig=`), whether in the source or in the HTTP client's message.
fn complain(source: &str, message: &str) {
    let line = format!("validate-jsonseq: {}: {message}", shown_source(source));
    crate::stdout::errln(&megamind_core::text::hide_signatures(&line).unwrap_or(line));
}

/// `source` as messages show it: a URL without its password; a file's
/// path as given (an `@` in a file name is nobody's password).
fn shown_source(source: &str) -> String {
    if is_url(source) { crate::client::shown_address(source) } else { source.to_owned() }
}

fn read(args: &ValidateArgs) -> Result<String, String> {
    let bytes = if is_url(&args.source) {
        fetch(&args.source, Duration::from_secs(args.timeout_secs))?
    } else if args.source == "-" {
        read_bounded(std::io::stdin().lock())?
    } else {
        read_bounded(std::fs::File::open(&args.source).map_err(|e| e.to_string())?)?
    };
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
}

/// All of `source`, refused past [`MAX_TRANSCRIPT_BYTES`]: a longer one's
/// end (and its violations) would go unseen.
fn read_bounded(source: impl std::io::Read) -> Result<Vec<u8>, String> {
    read_at_most(source, MAX_TRANSCRIPT_BYTES).map_err(|e| e.to_string())?.ok_or_else(too_large)
}

fn too_large() -> String {
    format!("the transcript is larger than {MAX_TRANSCRIPT_BYTES} bytes")
}

/// The whole stream at `url`, until it ends or `timeout` passes.
fn fetch(url: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let client = megamind_core::http_client::client_builder().build().map_err(|e| e.to_string())?;
        let read = async {
            let mut response = client.get(url).send().await.map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
                body.extend_from_slice(&chunk);
                if body.len() as u64 > MAX_TRANSCRIPT_BYTES {
                    return Err(too_large());
                }
            }
            Ok(body)
        };
        tokio::time::timeout(timeout, read).await.map_err(|_| format!("the stream did not end in {timeout:?}"))?
    })
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        net::TcpListener,
        sync::mpsc,
        thread::{self, JoinHandle},
    };

    use super::*;

    // The bound docs/jsonseq.md states, written out rather than read from
    // the constant: a constant raised by mistake fails here.
    const DOCUMENTED_BYTES: usize = 64 << 20;

    /// A URL whose server answers `connections` GETs, each at once and on a
    /// thread of its own: 200, then `body` newlines, then, when `hang`, no
    /// end until the client goes; else the end of the body (it has no length).
    fn serve(connections: usize, body: usize, hang: bool) -> (String, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/llm/stream/r-1", listener.local_addr().unwrap());
        let server = thread::spawn(move || {
            let answer = move |mut stream: std::net::TcpStream| {
                let _ = stream.read(&mut [0; 4096]);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                let _ = stream.write_all(head.as_bytes());
                let chunk = [b'\n'; 64 << 10];
                let mut left = body;
                while left > 0 {
                    let n = left.min(chunk.len());
                    // An error is the client gone: the bound stopped it.
                    if stream.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
                if hang {
                    // Returns when the client closes the connection.
                    let _ = stream.read(&mut [0; 1]);
                }
            };
            let handlers: Vec<_> = (0..connections)
                .map(|_| listener.accept().unwrap().0)
                .map(|stream| thread::spawn(move || answer(stream)))
                .collect();
            handlers.into_iter().for_each(|handler| handler.join().unwrap());
        });
        (url, server)
    }

    #[test]
    fn a_url_s_stream_past_the_bound_is_refused() {
        // A body that ends one chunk past the bound, not an endless one: a
        // bound raised by mistake then fails the test instead of filling memory.
        let (url, server) = serve(1, DOCUMENTED_BYTES + (64 << 10), false);
        // Its length, not the text, should the stream be read whole.
        let read = read(&ValidateArgs { source: url, timeout_secs: 60 }).map(|text| text.len());
        let error = read.expect_err("a stream past 64 MiB is refused");
        assert_eq!(error, "the transcript is larger than 67108864 bytes", "the documented bound, in bytes");
        server.join().unwrap();
    }

    #[test]
    fn a_transcript_of_more_events_than_are_read_is_refused_not_judged_on_its_start() {
        let path = std::env::temp_dir().join(format!("validate-jsonseq-events-{}.sse", std::process::id()));
        let events = "event: bogus\ndata: {}\n\n".repeat(transcript::MAX_EVENTS + 1);
        std::fs::write(&path, events).unwrap();
        let code = main(&ValidateArgs { source: path.display().to_string(), timeout_secs: 60 });
        let _ = std::fs::remove_file(&path);
        assert_eq!(code, 2, "not judged, as its last events went unread");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_past_the_bound_is_refused_not_cut() {
        // A device that never ends: read up to the bound and refused, where
        // it was once cut at 64 MiB and judged on that.
        let args = ValidateArgs { source: "/dev/zero".into(), timeout_secs: 60 };
        let read = read(&args).map(|text| text.len());
        assert_eq!(read, Err(format!("the transcript is larger than {DOCUMENTED_BYTES} bytes")));
        assert_eq!(main(&args), 2, "the exit code of a transcript that could not be read");
    }

    #[test]
    fn a_url_s_stream_that_never_ends_is_refused_at_its_timeout_with_exit_2() {
        let (url, server) = serve(2, 1 << 10, true);
        let args = ValidateArgs { source: url, timeout_secs: 1 };
        // The message and the exit code, read at the same time: one second.
        let (read_done, read_outcome) = mpsc::channel();
        let (main_done, main_outcome) = mpsc::channel();
        let by_read = args.clone();
        thread::spawn(move || read_done.send(read(&by_read)));
        thread::spawn(move || main_done.send(main(&args)));
        // A bound on the test, not a wait: a read without its timeout would
        // hold the test for ever.
        let bound = Duration::from_secs(10);
        let read = read_outcome.recv_timeout(bound).expect("the 1 s timeout ends the read");
        assert_eq!(read, Err("the stream did not end in 1s".to_owned()), "the timeout, in the message");
        let code = main_outcome.recv_timeout(bound).expect("the 1 s timeout ends the command");
        assert_eq!(code, 2, "the exit code of a transcript that could not be read");
        server.join().unwrap();
    }
}
