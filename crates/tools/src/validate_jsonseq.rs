//! `validate-jsonseq`: checks a JSONSeq v1 SSE transcript (a file, standard
//! input or a URL) against the contract and prints every violation.

use std::{io::Read, time::Duration};

use megamind_assistant::jsonseq::{parse_transcript, transcript, validate};

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
            eprintln!("validate-jsonseq: {}: {message}", shown_source(&args.source));
            return 2;
        }
    };
    let (events, more) = parse_transcript(&text);
    if more {
        eprintln!("validate-jsonseq: only the first {} events were read", transcript::MAX_EVENTS);
    }
    let violations = validate(&events);
    for violation in &violations {
        crate::outln!("{violation}");
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

/// `source` as messages show it: a URL without its password; a file's
/// path as given (an `@` in a file name is nobody's password).
fn shown_source(source: &str) -> String {
    if is_url(source) { crate::client::shown_address(source) } else { source.to_owned() }
}

fn read(args: &ValidateArgs) -> Result<String, String> {
    let mut bytes = Vec::new();
    if is_url(&args.source) {
        bytes = fetch(&args.source, Duration::from_secs(args.timeout_secs))?;
    } else if args.source == "-" {
        std::io::stdin().lock().take(MAX_TRANSCRIPT_BYTES).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    } else {
        let file = std::fs::File::open(&args.source).map_err(|e| e.to_string())?;
        file.take(MAX_TRANSCRIPT_BYTES).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
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
                    return Err(format!("the stream is larger than {MAX_TRANSCRIPT_BYTES} bytes"));
                }
            }
            Ok(body)
        };
        tokio::time::timeout(timeout, read).await.map_err(|_| format!("the stream did not end in {timeout:?}"))?
    })
}
