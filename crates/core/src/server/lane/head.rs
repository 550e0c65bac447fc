//! Reading a stream connection's request head without hyper: a `GET` over
//! HTTP/1.1 with no body is answered in the lane ([`Head::Lean`]); anything
//! else (another version, a body, an upgrade, a head too long or malformed)
//! goes to hyper with the bytes already read ([`Head::Other`]), so that it is
//! answered exactly as on the main runtime. [`decide`] is the whole
//! decision, on the bytes read so far; its fuzz target is `stream_head`.

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Request, Uri, Version, header};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Headers a lean head may carry; hyper takes one with more.
const MAX_HEADERS: usize = 32;

/// A head's first read: a stream request's head is a few hundred bytes.
const FIRST_READ: usize = 1024;

/// What a connection's first request head turned out to be.
#[derive(Debug)]
pub enum Head {
    /// A request the lane answers itself, then closes the connection.
    Lean(Request<()>),
    /// Everything else, with the bytes read so far: hyper serves it.
    Other(Bytes),
}

/// A head the lane leaves to hyper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotLean;

/// Reads `io` up to the end of its first request head, at most `limit`
/// bytes. `None`: the client closed the connection before sending a byte.
pub async fn read_head(io: &mut (impl AsyncRead + Unpin), limit: usize) -> std::io::Result<Option<Head>> {
    let mut read = BytesMut::with_capacity(FIRST_READ.min(limit));
    loop {
        read.reserve(FIRST_READ.min(limit.saturating_sub(read.len())).max(1));
        if io.read_buf(&mut read).await? == 0 {
            // A head cut short: hyper answers it as it would any other.
            return Ok((!read.is_empty()).then(|| Head::Other(read.freeze())));
        }
        match decide(&read, limit) {
            None => {}
            Some(Ok(request)) => return Ok(Some(Head::Lean(request))),
            Some(Err(NotLean)) => return Ok(Some(Head::Other(read.freeze()))),
        }
    }
}

/// What the first bytes a connection sent, `read`, decide: a lean request,
/// a head for hyper (not lean, or no end within `limit` bytes), or `None`
/// while more bytes may still decide. Once decided, more bytes do not
/// change it.
pub fn decide(read: &[u8], limit: usize) -> Option<Result<Request<()>, NotLean>> {
    match parse(&read[..read.len().min(limit)]) {
        Ok(None) if read.len() < limit => None,
        Ok(None) => Some(Err(NotLean)),
        decided => decided.transpose(),
    }
}

/// Resolves when the client closes `io` (or it fails), while its answer is
/// being sent. Bytes it sends meanwhile (a pipelined request, which a
/// `Connection: close` answer leaves unanswered) are read and dropped, up
/// to [`MAX_IGNORED`]: past that, the watch ends, and the send and drain
/// timeouts alone bound the answer.
pub async fn gone(io: &mut (impl AsyncRead + Unpin)) {
    let mut buffer = [0u8; 1024];
    let mut ignored = 0;
    loop {
        match io.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => ignored += read,
        }
        if ignored > MAX_IGNORED {
            std::future::pending::<()>().await;
        }
    }
}

/// The bytes a stream's client may send after its request and still be
/// watched for closing: a few pipelined requests.
pub const MAX_IGNORED: usize = 64 << 10;

/// The lean request `bytes` make, `None` while its head is incomplete.
fn parse(bytes: &[u8]) -> Result<Option<Request<()>>, NotLean> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    match head.parse(bytes) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => lean(&head).map(Some).ok_or(NotLean),
        Err(_) => Err(NotLean),
    }
}

/// The request `head` makes, when the lane answers it alone.
fn lean(head: &httparse::Request<'_, '_>) -> Option<Request<()>> {
    if head.method != Some("GET") || head.version != Some(1) {
        return None;
    }
    let mut request = Request::new(());
    *request.method_mut() = Method::GET;
    *request.version_mut() = Version::HTTP_11;
    *request.uri_mut() = Uri::try_from(head.path?).ok()?;
    let headers = request.headers_mut();
    for field in head.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).ok()?;
        let value = HeaderValue::from_bytes(field.value).ok()?;
        let carried = match name {
            // A body, a protocol switch, an interim answer or gRPC: hyper's.
            header::TRANSFER_ENCODING | header::UPGRADE | header::EXPECT | header::CONTENT_TYPE => false,
            header::CONTENT_LENGTH => value == "0",
            _ => true,
        };
        if !carried {
            return None;
        }
        headers.append(name, value);
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lean_request(bytes: &[u8]) -> Request<()> {
        match parse(bytes) {
            Ok(Some(request)) => request,
            other => panic!("{other:?} for {}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn a_plain_get_is_answered_in_the_lane() {
        let request = lean_request(
            b"GET /events/r-1?after=3 HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 7\r\nAccept: text/event-stream\r\n\r\n",
        );
        assert_eq!(request.uri().path(), "/events/r-1");
        assert_eq!(request.uri().query(), Some("after=3"));
        assert_eq!(request.headers()["last-event-id"], "7");
        assert_eq!(request.headers().len(), 3);
        lean_request(b"GET /events/r HTTP/1.1\r\ncontent-length: 0\r\n\r\n");
    }

    #[test]
    fn anything_unusual_goes_to_hyper() {
        for other in [
            &b"GET /events/r HTTP/1.0\r\n\r\n"[..],
            b"GET /events/r HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello",
            b"GET /events/r HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            b"GET /events/r HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
            b"GET /events/r HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            b"GET /events/r HTTP/1.1\r\ncontent-type: application/grpc\r\n\r\n",
            b"GET /events/\x01 HTTP/1.1\r\n\r\n",
            b"GET /events/r HTTP/1.1\r\nbad header\r\n\r\n",
            b"GET /events/r HTTP/1.1\r\nx: \xff\x01\r\n\r\n",
        ] {
            assert!(parse(other).is_err(), "{}", String::from_utf8_lossy(other));
        }
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: y\r\n")).collect();
        let crowded = format!("GET /events/r HTTP/1.1\r\n{many}\r\n");
        assert!(parse(crowded.as_bytes()).is_err(), "more headers than the lane takes");
    }

    #[test]
    fn a_decision_waits_for_the_heads_end_within_the_limit() {
        let head = b"GET /events/r HTTP/1.1\r\nhost: x\r\n\r\n";
        for end in 0..head.len() {
            assert!(decide(&head[..end], 1024).is_none(), "decided at {end}");
        }
        assert!(matches!(decide(head, 1024), Some(Ok(_))));
        assert!(matches!(decide(head, head.len()), Some(Ok(_))), "a head of exactly the limit");
        assert_eq!(decide(&head[..20], 20).map(Result::err), Some(Some(NotLean)), "no end within the limit");
        let mut longer = head.to_vec();
        longer.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        assert!(matches!(decide(&longer, head.len()), Some(Ok(_))), "bytes after the head change nothing");
    }

    #[tokio::test]
    async fn a_head_is_read_across_segments_and_bounded() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for part in [&b"GET /eve"[..], b"nts/r HTTP/1.1\r\nhost", b": x\r\n\r\n"] {
                client.write_all(part).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let head = read_head(&mut server, 8 * 1024).await.unwrap();
        assert!(matches!(head, Some(Head::Lean(ref r)) if r.uri().path() == "/events/r"), "{head:?}");
        drop(writer.await.unwrap());

        let long = format!("GET /events/r HTTP/1.1\r\nx: {}\r\n\r\n", "y".repeat(300));
        let mut io = long.as_bytes();
        match read_head(&mut io, 100).await.unwrap() {
            Some(Head::Other(read)) => assert!(read.len() >= 100 && long.as_bytes().starts_with(&read)),
            other => panic!("{other:?}"),
        }
        let whole: &[u8] = b"GET /events/r HTTP/1.1\r\nho";
        let mut cut = whole;
        assert!(matches!(read_head(&mut cut, 1024).await.unwrap(), Some(Head::Other(ref b)) if b[..] == *whole));
        let mut empty: &[u8] = b"";
        assert!(read_head(&mut empty, 1024).await.unwrap().is_none());
    }
}
