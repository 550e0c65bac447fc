//! A mock OpenAI-compatible model server: real HTTP/1.1 on port 0, each
//! reply scripted by the test (latency, status, body, SSE chunks, a hang, a
//! connection reset, bytes that are not HTTP), every request counted and kept.
//!
//! Self-contained (tokio, serde_json and std only) so that benchmarks can
//! include it with `#[path]`. Written on raw sockets rather than a server
//! library because the failures it plays (resets, garbage, half-written
//! streams) are what a server library would not let it do.

#![allow(dead_code)]

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// What the mock answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `status` with a JSON body, after `delay`.
    Json { delay: Duration, status: u16, body: String },
    /// `200` with `text/event-stream`; each piece of bytes written after its
    /// delay, as it is (pieces may cut events and characters anywhere).
    Sse { chunks: Vec<(Duration, Vec<u8>)> },
    /// Reads the request and never answers.
    Hang,
    /// Resets the connection (RST) after `delay`, without answering.
    Reset { delay: Duration },
    /// Writes `bytes`, which are not HTTP, and closes.
    Garbage { delay: Duration, bytes: Vec<u8> },
}

impl Reply {
    /// A chat completion whose answer is `text`, at once.
    pub fn content(text: &str) -> Reply {
        Reply::content_after(Duration::ZERO, text)
    }

    /// A chat completion whose answer is `text`, after `delay`.
    pub fn content_after(delay: Duration, text: &str) -> Reply {
        let body = serde_json::json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "model": "mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        });
        Reply::Json { delay, status: 200, body: body.to_string() }
    }

    /// An error status with an OpenAI-style error body.
    pub fn status(status: u16) -> Reply {
        let body = serde_json::json!({"error": {"message": format!("mock status {status}"), "type": "mock"}});
        Reply::Json { delay: Duration::ZERO, status, body: body.to_string() }
    }

    /// A stream of `pieces` as `choices[0].delta.content` events, one write
    /// each, `gap` apart, then `[DONE]`.
    pub fn stream(pieces: &[&str], gap: Duration) -> Reply {
        let mut chunks =
            vec![(gap, sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})))];
        for piece in pieces {
            chunks.push((gap, sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"content": piece}}]}))));
        }
        chunks.push((Duration::ZERO, b"data: [DONE]\n\n".to_vec()));
        Reply::Sse { chunks }
    }

    /// As [`Reply::stream`], `per_write` events a write and no gap: a
    /// model that answers faster than any reader.
    pub fn stream_batched(pieces: &[&str], per_write: usize) -> Reply {
        let Reply::Sse { chunks } = Reply::stream(pieces, Duration::ZERO) else { unreachable!("a stream") };
        Reply::Sse { chunks: chunks.chunks(per_write).map(one_write).collect() }
    }

    /// A stream of `burst` in one write, then of `then`, a piece every
    /// `gap`, then `finish_reason` `length`: a model that says much at
    /// once, goes on slowly and stops at its limit.
    pub fn burst_then(burst: &[&str], then: &[&str], gap: Duration) -> Reply {
        let pieces: Vec<&str> = burst.iter().chain(then).copied().collect();
        let Reply::Sse { mut chunks } = Reply::stream(&pieces, gap) else { unreachable!("a stream") };
        let finish = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]});
        chunks.insert(chunks.len() - 1, (gap, sse_event(&finish)));
        // The role's event and the burst's.
        let (first, rest) = chunks.split_at(1 + burst.len());
        Reply::Sse { chunks: std::iter::once(one_write(first)).chain(rest.iter().cloned()).collect() }
    }

    /// A chat completion with `reasoning_content`, `finish_reason` and
    /// `usage` (`prompt_tokens` 11, `completion_tokens` 5), at once.
    pub fn content_reasoned(reasoning: &str, text: &str, finish_reason: &str) -> Reply {
        let body = serde_json::json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "model": "mock",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "reasoning_content": reasoning},
                "finish_reason": finish_reason,
            }],
            "usage": usage(),
        });
        Reply::Json { delay: Duration::ZERO, status: 200, body: body.to_string() }
    }

    /// A stream as reasoning models send it, one write per event `gap`
    /// apart: `reasoning` pieces as `delta.reasoning_content`, then `pieces`
    /// as `delta.content`, then `finish_reason`, then a last chunk with
    /// `usage` and no choices (as with `stream_options.include_usage`), then
    /// `[DONE]`.
    pub fn stream_reasoned(reasoning: &[&str], pieces: &[&str], finish_reason: &str, gap: Duration) -> Reply {
        let mut chunks =
            vec![(gap, sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})))];
        for piece in reasoning {
            let delta = serde_json::json!({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]});
            chunks.push((gap, sse_event(&delta)));
        }
        for piece in pieces {
            chunks.push((gap, sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"content": piece}}]}))));
        }
        let finish = serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]});
        chunks.push((gap, sse_event(&finish)));
        chunks.push((gap, sse_event(&serde_json::json!({"choices": [], "usage": usage()}))));
        chunks.push((Duration::ZERO, b"data: [DONE]\n\n".to_vec()));
        Reply::Sse { chunks }
    }

    /// Headers of a whole JSON answer, then part of its body, then the
    /// connection closes: a server that died mid-answer.
    pub fn dropped_mid_answer() -> Reply {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n";
        Reply::Garbage { delay: Duration::ZERO, bytes: format!("{head}{{\"choices\": [{{\"index\"").into_bytes() }
    }

    /// A stream without a length (it ends when the connection closes) that
    /// delivers `text` as one token and closes: to a reader, a clean end,
    /// with neither a `finish_reason` nor `[DONE]`.
    pub fn closed_mid_stream(text: &str) -> Reply {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let event = sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
        Reply::Garbage { delay: Duration::ZERO, bytes: [head.as_bytes(), &event].concat() }
    }

    /// A stream that delivers `text` as one token, then the connection closes
    /// before the stream ends.
    pub fn dropped_mid_stream(text: &str) -> Reply {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let event = sse_event(&serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}}]}));
        let frame = [format!("{:x}\r\n", event.len()).as_bytes(), &event, b"\r\n"].concat();
        Reply::Garbage { delay: Duration::ZERO, bytes: [head.as_bytes(), &frame].concat() }
    }

    /// A stream that delivers `text` as one token with its `finish_reason`,
    /// then the connection closes before the stream ends (no `[DONE]`, no
    /// last chunk of its body).
    pub fn dropped_after_finish(text: &str) -> Reply {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        let choice = serde_json::json!({"index": 0, "delta": {"content": text}, "finish_reason": "stop"});
        let event = sse_event(&serde_json::json!({"choices": [choice]}));
        let frame = [format!("{:x}\r\n", event.len()).as_bytes(), &event, b"\r\n"].concat();
        Reply::Garbage { delay: Duration::ZERO, bytes: [head.as_bytes(), &frame].concat() }
    }

    /// A stream of `text` whose bytes are written in writes of `size` bytes,
    /// cutting events, lines and characters wherever they fall.
    pub fn stream_cut(text: &str, size: usize, gap: Duration) -> Reply {
        let Reply::Sse { chunks } = Reply::stream(&[text], Duration::ZERO) else { unreachable!() };
        let bytes: Vec<u8> = chunks.into_iter().flat_map(|(_, b)| b).collect();
        Reply::Sse { chunks: bytes.chunks(size.max(1)).map(|c| (gap, c.to_vec())).collect() }
    }
}

impl Reply {
    /// The reply with `{session_id}` replaced by the session id the request's
    /// system prompt tells (`session_<digits>.<digits>`), as a model that
    /// follows its prompt would answer.
    fn for_session(self, request: &serde_json::Value) -> Reply {
        let Some(id) = session_id(request) else { return self };
        // Bytewise: a chunk may end inside a character.
        let fill = |bytes: Vec<u8>| {
            let mut filled = Vec::with_capacity(bytes.len());
            let mut rest = &bytes[..];
            while let Some(at) = rest.windows(12).position(|w| w == b"{session_id}") {
                filled.extend_from_slice(&rest[..at]);
                filled.extend_from_slice(id.as_bytes());
                rest = &rest[at + 12..];
            }
            filled.extend_from_slice(rest);
            filled
        };
        match self {
            Reply::Json { delay, status, body } => {
                let body = String::from_utf8(fill(body.into_bytes())).unwrap_or_default();
                Reply::Json { delay, status, body }
            }
            Reply::Sse { chunks } => Reply::Sse { chunks: chunks.into_iter().map(|(gap, b)| (gap, fill(b))).collect() },
            other => other,
        }
    }
}

/// The first `session_<digits>.<digits>` of the request's system message.
fn session_id(request: &serde_json::Value) -> Option<String> {
    let system = request["messages"][0]["content"].as_str()?;
    system.match_indices("session_").find_map(|(at, _)| {
        let rest = &system[at + "session_".len()..];
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let id = rest[..end].trim_end_matches('.');
        (id.contains('.') && id.len() > 2).then(|| format!("session_{id}"))
    })
}

/// The `usage` the mock reports.
fn usage() -> serde_json::Value {
    serde_json::json!({"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16})
}

/// `chunks` sent in one write, at once.
fn one_write(chunks: &[(Duration, Vec<u8>)]) -> (Duration, Vec<u8>) {
    (Duration::ZERO, chunks.iter().flat_map(|(_, bytes)| bytes.iter().copied()).collect())
}

/// One SSE event of `data`.
pub fn sse_event(data: &serde_json::Value) -> Vec<u8> {
    format!("data: {data}\n\n").into_bytes()
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request line's path.
    pub path: String,
    /// The `authorization` header, if any.
    pub authorization: Option<String>,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: serde_json::Value,
}

#[derive(Debug)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Reply>,
    received: Mutex<Vec<Received>>,
    calls: watch::Sender<usize>,
    served: watch::Sender<usize>,
}

/// The running mock; stops when dropped.
#[derive(Debug)]
pub struct MockLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockLlm {
    /// Starts a mock answering `default` unless a pushed reply comes first.
    pub async fn start(default: Reply) -> MockLlm {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            default: Mutex::new(default),
            received: Mutex::new(Vec::new()),
            calls: watch::channel(0).0,
            served: watch::channel(0).0,
        });
        let accept = shared.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                connections.spawn(serve(stream, accept.clone()));
            }
        });
        MockLlm { addr, shared, task }
    }

    /// The base URL to configure: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answers the next request with `reply` (after earlier pushed ones).
    pub fn push(&self, reply: Reply) {
        self.shared.script.lock().unwrap().push_back(reply);
    }

    /// Answers with `reply` once the pushed replies are used up.
    pub fn set_default(&self, reply: Reply) {
        *self.shared.default.lock().unwrap() = reply;
    }

    /// Requests received so far.
    pub fn calls(&self) -> usize {
        *self.shared.calls.borrow()
    }

    /// Replies written completely so far.
    pub fn served(&self) -> usize {
        *self.shared.served.borrow()
    }

    /// The requests received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits until `n` requests have arrived.
    pub async fn wait_for_calls(&self, n: usize) {
        let mut rx = self.shared.calls.subscribe();
        rx.wait_for(|c| *c >= n).await.expect("mock running");
    }

    /// Waits until `n` replies have been written completely.
    pub async fn wait_for_served(&self, n: usize) {
        let mut rx = self.shared.served.subscribe();
        rx.wait_for(|c| *c >= n).await.expect("mock running");
    }
}

/// Serves one connection: requests in turn while the replies keep it alive.
async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut buffer = Vec::new();
    loop {
        let Some(received) = read_request(&mut stream, &mut buffer).await else { return };
        let reply = {
            let next = shared.script.lock().unwrap().pop_front();
            next.unwrap_or_else(|| shared.default.lock().unwrap().clone())
        };
        let reply = reply.for_session(&received.body);
        shared.received.lock().unwrap().push(received);
        shared.calls.send_modify(|c| *c += 1);
        let keep_alive = match reply {
            Reply::Json { delay, status, body } => {
                tokio::time::sleep(delay).await;
                let head = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    reason(status),
                    body.len()
                );
                write(&mut stream, &[head.as_bytes(), body.as_bytes()].concat()).await
            }
            Reply::Sse { chunks } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let mut ok = write(&mut stream, head.as_bytes()).await;
                for (delay, bytes) in chunks {
                    tokio::time::sleep(delay).await;
                    let frame = [format!("{:x}\r\n", bytes.len()).as_bytes(), &bytes, b"\r\n"].concat();
                    ok = ok && write(&mut stream, &frame).await;
                }
                ok && write(&mut stream, b"0\r\n\r\n").await
            }
            Reply::Hang => {
                // Hold the connection until the client gives up on it.
                let mut sink = [0u8; 1024];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            Reply::Reset { delay } => {
                tokio::time::sleep(delay).await;
                let _ = stream.set_zero_linger();
                drop(stream);
                return;
            }
            Reply::Garbage { delay, bytes } => {
                tokio::time::sleep(delay).await;
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
                return;
            }
        };
        shared.served.send_modify(|c| *c += 1);
        if !keep_alive {
            return;
        }
    }
}

async fn write(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
}

/// Reads one request (head and `content-length` body); `None` at EOF.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Received> {
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if buffer.len() > 1 << 20 || !read_more(stream, buffer).await {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buffer.len() < head_end + length {
        if !read_more(stream, buffer).await {
            return None;
        }
    }
    let body = serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(serde_json::Value::Null);
    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    let authorization = header("authorization");
    buffer.drain(..head_end + length);
    Some(Received { path, authorization, body })
}

async fn read_more(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
