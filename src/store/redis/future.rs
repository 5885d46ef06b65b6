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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ErrorKind;

    #[test]
    fn a_future_polled_again_after_its_answer_is_a_store_error_not_a_panic() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let decision = Decision::allow(1, 0, Duration::ZERO);
        let mut future = RedisFuture::ready(Ok(decision));
        assert!(matches!(
            Pin::new(&mut future).poll(&mut cx),
            Poll::Ready(Ok(_))
        ));
        let Poll::Ready(Err(error)) = Pin::new(&mut future).poll(&mut cx) else {
            panic!("a second poll answers an error");
        };
        assert_eq!(error.kind(), ErrorKind::Other);
        assert!(
            error.to_string().contains("polled after it completed"),
            "{error}"
        );
    }
}
