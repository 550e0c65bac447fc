//! Request bodies bounded in pieces: each chunk of an HTTP/1.1 chunked body
//! and each HTTP/2 DATA frame costs the server about a microsecond to take
//! in, so a body of a few megabytes in one-byte chunks cost half a second
//! of CPU (ten times the same bytes in one piece) before its budget ran
//! out. Past [`MAX_PIECES`], the body is refused.

use std::{
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// Pieces a request body may come in: 64 bytes each at the least for a
/// body at the default 4 MiB limit, where a client writes kilobytes.
pub const MAX_PIECES: usize = 65_536;

/// A body that came in more than [`MAX_PIECES`] pieces.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the body came in more than {MAX_PIECES} pieces (chunks or frames); send it in larger ones")]
pub struct TooManyPieces;

/// `body`, failing with [`TooManyPieces`] past [`MAX_PIECES`] data frames.
#[derive(Debug)]
pub(crate) struct Pieces<B> {
    body: B,
    pieces: usize,
}

impl<B> Pieces<B> {
    pub(crate) fn new(body: B) -> Pieces<B> {
        Pieces { body, pieces: 0 }
    }
}

/// Counts one more piece of a body into `pieces`: past [`MAX_PIECES`], refused.
pub(crate) fn count(pieces: &mut usize) -> Result<(), TooManyPieces> {
    *pieces += 1;
    if *pieces > MAX_PIECES { Err(TooManyPieces) } else { Ok(()) }
}

impl<B> Body for Pieces<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if matches!(frame, Some(Ok(_)))
            && let Err(too_many) = count(&mut self.pieces)
        {
            return Poll::Ready(Some(Err(Box::new(too_many))));
        }
        Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>;

    fn pieces(n: usize) -> Pieces<StreamBody<Frames>> {
        let frames: Vec<_> = (0..n).map(|_| Ok(Frame::data(Bytes::from_static(b"x")))).collect();
        Pieces::new(StreamBody::new(futures_util::stream::iter(frames)))
    }

    #[tokio::test]
    async fn a_body_in_too_many_pieces_is_refused() {
        let whole = pieces(MAX_PIECES).collect().await.expect("at the bound").to_bytes();
        assert_eq!(whole.len(), MAX_PIECES);
        let error = pieces(MAX_PIECES + 1).collect().await.expect_err("one past the bound");
        assert!(error.is::<TooManyPieces>(), "{error}");
    }
}
