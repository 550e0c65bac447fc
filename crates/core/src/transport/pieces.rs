//! Request bodies bounded in pieces and collected without holding them.
//!
//! Each chunk of an HTTP/1.1 chunked body and each HTTP/2 DATA frame costs
//! the server about a microsecond to take in, so a body of a few megabytes
//! in one-byte chunks cost half a second of CPU (ten times the same bytes in
//! one piece) before its budget ran out. Past [`MAX_PIECES`], the body is
//! refused.
//!
//! A piece is a slice of the connection's read buffer, and while it is held
//! the connection reads into a new buffer: a body sent a byte per TCP
//! segment, its pieces kept until the end, held kilobytes per byte (74 MiB
//! for 200 KB). [`collect`] copies each piece into one buffer as it comes.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body;

/// Pieces a request body may come in: 64 bytes each at the least for a
/// body at the default 4 MiB limit, where a client writes kilobytes.
pub const MAX_PIECES: usize = 65_536;

/// The most a body's buffer takes before its bytes come: what a body says
/// is still to come (its `Content-Length`) is a claim, and a client that
/// declares the limit and stalls after two bytes must not have the server
/// set the limit aside, on each of its connections. A larger body grows
/// the buffer as it comes.
const MAX_RESERVED: usize = 64 << 10;

/// The buffer to begin for a body of `len` bytes so far that says `rest`
/// more are coming, under `limit`.
fn reserved(len: usize, rest: u64, limit: usize) -> usize {
    let rest = usize::try_from(rest).unwrap_or(usize::MAX).min(MAX_RESERVED);
    len.saturating_add(rest).min(limit)
}

/// A body that came in more than [`MAX_PIECES`] pieces.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the body came in more than {MAX_PIECES} pieces (chunks or frames); send it in larger ones")]
pub struct TooManyPieces;

/// Counts one more piece of a body into `pieces`: past [`MAX_PIECES`], refused.
pub(crate) fn count(pieces: &mut usize) -> Result<(), TooManyPieces> {
    *pieces += 1;
    if *pieces > MAX_PIECES { Err(TooManyPieces) } else { Ok(()) }
}

/// Why a body was not collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Uncollected {
    /// More than the limit's bytes.
    TooLarge,
    /// The body failed, or came in too many pieces: why.
    Unreadable(String),
}

/// `body` whole: at most `limit` bytes, in at most [`MAX_PIECES`] pieces.
/// A body of one piece is that piece, not copied; the pieces of any other
/// are copied into one buffer as they come and let go.
pub(crate) async fn collect<B>(mut body: B, limit: usize) -> Result<Bytes, Uncollected>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut first, mut joined): (Option<Bytes>, Option<BytesMut>) = (None, None);
    let (mut pieces, mut len) = (0, 0_usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| Uncollected::Unreadable(error.into().to_string()))?;
        // Trailers carry nothing a call reads.
        let Ok(data) = frame.into_data() else { continue };
        count(&mut pieces).map_err(|too_many| Uncollected::Unreadable(too_many.to_string()))?;
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(Uncollected::TooLarge);
        }
        match (joined.as_mut(), first.take()) {
            (Some(buffer), _) => buffer.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(earlier)) => {
                // What the body says is still to come, within bounds.
                let mut buffer = BytesMut::with_capacity(reserved(len, body.size_hint().lower(), limit));
                buffer.extend_from_slice(&earlier);
                buffer.extend_from_slice(&data);
                joined = Some(buffer);
            }
        }
    }
    Ok(joined.map(BytesMut::freeze).or(first).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    use super::*;

    type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>;

    fn body(pieces: Vec<Bytes>) -> StreamBody<Frames> {
        let frames: Vec<_> = pieces.into_iter().map(|piece| Ok(Frame::data(piece))).collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn ones(n: usize) -> StreamBody<Frames> {
        body((0..n).map(|_| Bytes::from_static(b"x")).collect())
    }

    #[test]
    fn a_declared_length_sets_aside_no_more_than_its_bound_before_the_bytes_come() {
        let limit = 4 << 20;
        assert_eq!(reserved(2, 1000, limit), 1002, "a small body's whole length");
        assert_eq!(reserved(2, (4 << 20) - 2, limit), 2 + MAX_RESERVED, "a large one's bound");
        assert_eq!(reserved(2, u64::MAX, limit), 2 + MAX_RESERVED);
        assert_eq!(reserved(2, 1000, 100), 100, "never past the limit");
    }

    #[tokio::test]
    async fn a_body_in_too_many_pieces_is_refused() {
        let whole = collect(ones(MAX_PIECES), usize::MAX).await.expect("at the bound");
        assert_eq!(whole.len(), MAX_PIECES);
        let error = collect(ones(MAX_PIECES + 1), usize::MAX).await.expect_err("one past the bound");
        assert_eq!(error, Uncollected::Unreadable(TooManyPieces.to_string()));
    }

    #[tokio::test]
    async fn a_body_is_bounded_in_bytes_and_its_pieces_are_not_held() {
        assert_eq!(collect(ones(10), 10).await, Ok(Bytes::from_static(b"xxxxxxxxxx")));
        assert_eq!(collect(ones(11), 10).await, Err(Uncollected::TooLarge));
        // One piece is handed on as it came.
        let piece = Bytes::from(vec![7_u8; 1000]);
        let whole = collect(body(vec![piece.clone()]), 1000).await.expect("one piece");
        assert_eq!(whole.as_ptr(), piece.as_ptr());
        // Pieces sliced out of one buffer, as hyper reads them: once
        // collected, none of them is held, so the buffer is ours alone again.
        let mut read = BytesMut::from(&b"abcdef"[..]);
        let pieces = vec![read.split_to(2).freeze(), read.split_to(2).freeze(), read.split_to(2).freeze()];
        let whole = collect(body(pieces), 100).await.expect("three pieces");
        assert_eq!(&whole[..], b"abcdef");
        assert!(read.try_reclaim(6), "a piece of the read buffer is still held");
        assert_eq!(collect(body(Vec::new()), 0).await, Ok(Bytes::new()));
    }
}
