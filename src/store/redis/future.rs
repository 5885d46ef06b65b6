//! [`RedisFuture`]: a check on the Redis store, ready at once or one round trip away.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::store::{BoxedDecision, DecisionFuture};
use crate::{Decision, Error};

/// The future of a check on the [`RedisStore`](super::RedisStore): ready at once when the
/// answer is local (a remembered denial), otherwise one round trip.
#[doc(hidden)]
pub struct RedisFuture(DecisionFuture);

impl RedisFuture {
    #[inline]
    pub(crate) fn ready(result: Result<Decision, Error>) -> Self {
        Self(DecisionFuture::Ready(Some(result)))
    }

    pub(crate) fn pending(future: BoxedDecision) -> Self {
        Self(DecisionFuture::Waiting(future))
    }
}

impl std::fmt::Debug for RedisFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisFuture").finish_non_exhaustive()
    }
}

impl Future for RedisFuture {
    type Output = Result<Decision, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let DecisionFuture::Ready(None) = self.0 {
            return Poll::Ready(Err(Error::store("RedisFuture polled after it completed")));
        }
        Pin::new(&mut self.0).poll(cx)
    }
}
