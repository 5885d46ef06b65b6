//! The limiter behind a layer, as an object: whatever its algorithm, store and clock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::{Clock, Sleep};
use crate::store::Store;
use crate::{Decision, Error, Key, Quota, RateLimiter};

/// A store's answer still on its way (a remote store), boxed once it has to wait.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>;

/// The answer of a check or a refund: at once (the memory store: nothing boxed), or later.
pub(crate) enum Check {
    /// Decided at once; `None` once taken.
    Ready(Option<Result<Decision, Error>>),
    /// Waiting for the store.
    Waiting(Waiting),
}

impl Future for Check {
    type Output = Result<Decision, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Check::Ready(result) => match result.take() {
                Some(result) => Poll::Ready(result),
                None => unreachable!("Check polled after completion"),
            },
            Check::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

impl Check {
    /// `future`'s answer if it has one at once (a local store), else `future` boxed. A future
    /// polled here with a waker that does nothing is polled again, with the task's waker,
    /// before anyone waits on it.
    #[inline]
    fn of<F>(mut future: F) -> Self
    where
        F: Future<Output = Result<Decision, Error>> + Send + Unpin + 'static,
    {
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut future).poll(&mut cx) {
            Poll::Ready(result) => Check::Ready(Some(result)),
            Poll::Pending => Check::Waiting(Box::pin(future)),
        }
    }
}

/// What a layer asks of its limiter; implemented by every [`RateLimiter`].
pub(crate) trait Limit: Send + Sync + 'static {
    /// Decides a request of `cost` for `key` at `now`, a time read from [`now`](Self::now).
    fn check(&self, key: Key, now: u64, cost: u64) -> Check;

    /// Gives back what the allowed request `admission` of `cost` took ([`RateLimiter::refund`]).
    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> Check;

    /// The limiter's clock, in nanoseconds.
    fn now(&self) -> u64;

    /// Waits `delay` on the limiter's clock.
    fn sleep(&self, delay: Duration) -> Sleep;

    /// The quotas: one, or each tier in order.
    fn quotas(&self) -> &[Quota];

    /// The policy name.
    fn policy(&self) -> &str;

    /// Whether the algorithm can give capacity back (`count_if`).
    fn refunds(&self) -> bool;

    /// For a limit on requests in flight, how many slots each key has; `None` for a rate
    /// limit. An allowed request of such a limit holds its slots until its response ends,
    /// then gives them back with [`release`](Self::release).
    fn in_flight(&self) -> Option<u64> {
        None
    }

    /// Gives back the `cost` slots that the admission `lease` of `key` holds (an in-flight
    /// limit); at once, or on the runtime. Runs in `Drop`: never blocks, never panics.
    fn release(&self, _key: &Key, _cost: u64, _lease: u64) {}

    /// The limiter's `Debug` form.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl<A, St, C> Limit for RateLimiter<A, St, C>
where
    A: Algorithm,
    St: Store<A>,
    C: Clock,
{
    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> Check {
        Check::of(self.check_n_at(key, now, cost))
    }

    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> Check {
        Check::of(RateLimiter::refund(self, key, admission, cost))
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock().now_nanos()
    }

    fn sleep(&self, delay: Duration) -> Sleep {
        self.clock().sleep(delay)
    }

    fn quotas(&self) -> &[Quota] {
        RateLimiter::quotas(self)
    }

    fn policy(&self) -> &str {
        RateLimiter::policy(self)
    }

    fn refunds(&self) -> bool {
        self.algorithm().refunds()
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("policy", &RateLimiter::policy(self))
            .field("quotas", &RateLimiter::quotas(self))
            .field("algorithm", self.algorithm())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for dyn Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(f)
    }
}
