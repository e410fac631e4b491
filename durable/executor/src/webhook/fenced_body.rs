//! A request body that refuses to be sent once its attempt's fence has closed (see
//! [`crate::fence`] for why the check lives here).
//!
//! hyper's HTTP/1 connection buffers a request's head and polls its body before it flushes
//! either: a body that fails at its first poll makes the connection drop the buffered head
//! unsent and close. The connection is polled on its own task, so this check runs after any
//! wait for a pooled or new connection, in the poll that writes the request.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::fence::Fence;

/// The body's refusal: the attempt's fence closed before its request went out.
#[derive(Debug, thiserror::Error)]
#[error("the attempt's lease ran out before its request went out; nothing was sent")]
pub struct FenceClosed;

/// One whole body, sent only through an open fence.
#[derive(Debug)]
pub struct FencedBody {
    data: Option<Bytes>,
    fence: Fence,
}

impl FencedBody {
    pub fn new(data: Bytes, fence: Fence) -> Self {
        Self {
            data: Some(data),
            fence,
        }
    }
}

impl Body for FencedBody {
    type Data = Bytes;
    type Error = FenceClosed;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, FenceClosed>>> {
        if !self.fence.is_open() {
            self.data = None;
            return Poll::Ready(Some(Err(FenceClosed)));
        }
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }

    // Never "at its end" before its first poll, even when empty: hyper sends a body it believes
    // empty without polling it, and so without the check.
    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

/// Whether `error` (a client error, with its causes) is a [`FenceClosed`].
pub fn is_fence_closed(error: &(dyn std::error::Error + 'static)) -> bool {
    causes(error).any(|cause| cause.is::<FenceClosed>())
}

/// `error` and what caused it, outermost first.
pub fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |error| error.source())
}
