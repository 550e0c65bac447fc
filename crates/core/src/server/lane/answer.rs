//! Writing one answer over HTTP/1.1 without hyper: its head, then its body
//! (chunked unless its length is known), then the connection closes. Each
//! body frame goes out in one vectored write as it comes, nothing buffered
//! beside it: an open stream holds no write buffer between its events.

use std::io::{self, Write as _};

use bytes::{Buf, Bytes};
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body: 1xx, 204, 304.
    None,
    Length(u64),
    Chunked,
}

/// Writes `response` to `io` and shuts its sending side. An error of the
/// body cuts the answer short, without its last chunk, so that the client
/// sees it incomplete.
pub(crate) async fn write_answer<B>(io: &mut (impl AsyncWrite + Unpin), response: Response<B>) -> io::Result<()>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (parts, mut body) = response.into_parts();
    let status = parts.status;
    let framing = if status.is_informational() || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) {
        Framing::None
    } else {
        body.size_hint().exact().map_or(Framing::Chunked, Framing::Length)
    };
    io.write_all(&head(status, &parts.headers, framing)).await?;
    while framing != Framing::None
        && let Some(frame) = body.frame().await
    {
        let Ok(data) = frame.map_err(|error| io::Error::other(error.into()))?.into_data() else {
            continue; // Trailers: HTTP/1.1 chunked ones are not sent.
        };
        if data.is_empty() {
            continue;
        }
        if framing == Framing::Chunked {
            let mut size = [0u8; 18];
            let written = {
                let mut cursor = &mut size[..];
                write!(cursor, "{:x}\r\n", data.len())?;
                18 - cursor.len()
            };
            io.write_all_buf(&mut (&size[..written]).chain(data).chain(&b"\r\n"[..])).await?;
        } else {
            io.write_all_buf(&mut { data }).await?;
        }
    }
    if framing == Framing::Chunked {
        io.write_all(b"0\r\n\r\n").await?;
    }
    io.shutdown().await
}

/// The answer's head: its status line and headers, framed by `framing`,
/// with `Date` and `Connection: close`.
fn head(status: StatusCode, headers: &http::HeaderMap, framing: Framing) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    let reason = status.canonical_reason().unwrap_or("");
    head.extend_from_slice(format!("HTTP/1.1 {} {reason}\r\n", status.as_str()).as_bytes());
    for (name, value) in headers {
        if matches!(*name, header::CONNECTION | header::TRANSFER_ENCODING | header::CONTENT_LENGTH | header::DATE) {
            continue;
        }
        for part in [name.as_str().as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            head.extend_from_slice(part);
        }
    }
    match framing {
        Framing::None => {}
        Framing::Length(length) => head.extend_from_slice(format!("content-length: {length}\r\n").as_bytes()),
        Framing::Chunked => head.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    head.extend_from_slice(format!("date: {date}\r\nconnection: close\r\n\r\n").as_bytes());
    head
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use futures_util::stream;
    use http_body_util::{Full, StreamBody};
    use hyper::body::Frame;
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn written<B>(response: Response<B>) -> String
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        let writing = async {
            let result = write_answer(&mut ours, response).await;
            drop(ours);
            result
        };
        let mut text = String::new();
        let (written, read) = tokio::join!(writing, theirs.read_to_string(&mut text));
        written.unwrap();
        read.unwrap();
        text
    }

    fn without_date(text: &str) -> String {
        text.lines().filter(|line| !line.starts_with("date: ")).collect::<Vec<_>>().join("\n")
    }

    #[tokio::test]
    async fn a_streamed_body_is_chunked_and_the_connection_closes() {
        let frames = ["event: a\ndata: {}\n\n", "", "event: б\n\n"]
            .map(|text| Ok::<_, Infallible>(Frame::data(Bytes::from(text))));
        let mut response = Response::new(StreamBody::new(stream::iter(frames)));
        response.headers_mut().insert(header::CONTENT_TYPE, "text/event-stream".parse().unwrap());
        response.headers_mut().insert(header::CONNECTION, "keep-alive".parse().unwrap());
        let text = written(response).await;
        assert!(text.contains("\r\ndate: ") && text.ends_with("\n\r\n0\r\n\r\n"), "{text:?}");
        assert_eq!(
            without_date(&text),
            "HTTP/1.1 200 OK\ncontent-type: text/event-stream\ntransfer-encoding: chunked\nconnection: close\n\n\
             13\nevent: a\ndata: {}\n\n\nb\nevent: б\n\n\n0\n"
        );
    }

    #[tokio::test]
    async fn a_whole_body_says_its_length() {
        let mut response = Response::new(Full::new(Bytes::from_static(b"{\"error\":{}}")));
        *response.status_mut() = StatusCode::NOT_FOUND;
        let text = written(response).await;
        assert_eq!(
            without_date(&text),
            "HTTP/1.1 404 Not Found\ncontent-length: 12\nconnection: close\n\n{\"error\":{}}"
        );
    }

    #[tokio::test]
    async fn a_failing_body_leaves_the_answer_unfinished() {
        let frames: [Result<Frame<Bytes>, io::Error>; 2] =
            [Ok(Frame::data(Bytes::from_static(b"event: a\n\n"))), Err(io::Error::other("the call broke"))];
        let (mut ours, mut theirs) = tokio::io::duplex(1024);
        let error = write_answer(&mut ours, Response::new(StreamBody::new(stream::iter(frames)))).await.unwrap_err();
        assert_eq!(error.to_string(), "the call broke");
        drop(ours);
        let mut text = String::new();
        theirs.read_to_string(&mut text).await.unwrap();
        assert!(text.ends_with("a\r\nevent: a\n\n\r\n"), "no last chunk: {text:?}");
    }
}
