//! [`RedisFuture`]: a check on the Redis store, ready at once or one round trip away.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Decision, Error};

/// The future of a check on the [`RedisStore`](super::RedisStore): ready at once when the
/// answer is local (a remembered denial), otherwise one round trip.
#[doc(hidden)]
pub struct RedisFuture(FutureState);

type Boxed = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>;

enum FutureState {
    Ready(Option<Result<Decision, Error>>),
    Pending(Boxed),
}

impl RedisFuture {
    #[inline]
    pub(crate) fn ready(result: Result<Decision, Error>) -> Self {
        Self(FutureState::Ready(Some(result)))
    }

    pub(crate) fn pending(future: Boxed) -> Self {
        Self(FutureState::Pending(future))
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
        match &mut self.0 {
            FutureState::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => Poll::Ready(Err(Error::store("RedisFuture polled after it completed"))),
            },
            FutureState::Pending(future) => future.as_mut().poll(cx),
        }
    }
}
