//! The limiter behind a layer, as an object: whatever its algorithm, store and clock.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::typed::RateLimiter;
use crate::algorithm::Algorithm;
use crate::clock::{Clock, Sleep};
pub(crate) use crate::store::{BoxedDecision, DecisionFuture};
use crate::store::{Store, Update};
use crate::{Decision, Error, Key, Quota};

/// What a layer asks of its limiter; implemented by every [`RateLimiter`], and by what wraps a
/// limiter (the handle's blocks, the fleet's gate): a wrapper gives its [`inner`](Self::inner)
/// limiter and overrides what it changes, every other operation being the inner limiter's. A
/// limiter that wraps none overrides every operation.
pub(crate) trait Limiter: Send + Sync + 'static {
    /// The limiter wrapped; never called on one that wraps none.
    fn inner(&self) -> &dyn Limiter;

    /// Decides a request of `cost` for `key` at `now`, a time read from [`now`](Self::now).
    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> DecisionFuture {
        self.inner().check(key, now, cost)
    }

    /// Gives back what the allowed request `admission` of `cost` took ([`RateLimiter::refund`]).
    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> DecisionFuture {
        self.inner().refund(key, admission, cost)
    }

    /// Charges `key` `cost` more, whatever it has left ([`RateLimiter::settle`] above the
    /// reservation).
    fn charge(&self, key: Key, cost: u64) -> DecisionFuture {
        self.inner().charge(key, cost)
    }

    /// `key`'s standing, consuming nothing ([`RateLimiter::peek`]), for a handle on a live
    /// layer.
    fn peek(&self, key: Key) -> DecisionFuture {
        self.inner().peek(key)
    }

    /// Makes `key` fresh again and lifts its block ([`RateLimiter::reset`]).
    fn reset(&self, key: Key) -> Update {
        self.inner().reset(key)
    }

    /// Denies `key` for `duration` from now ([`RateLimiter::block`]).
    fn block(&self, key: Key, duration: Duration) -> Update {
        self.inner().block(key, duration)
    }

    /// The limiter's clock, in nanoseconds.
    #[inline]
    fn now(&self) -> u64 {
        self.inner().now()
    }

    /// Waits `delay` on the limiter's clock.
    fn sleep(&self, delay: Duration) -> Sleep {
        self.inner().sleep(delay)
    }

    /// The quotas: one, or each tier in order.
    fn quotas(&self) -> &[Quota] {
        self.inner().quotas()
    }

    /// The policy name.
    fn policy(&self) -> &str {
        self.inner().policy()
    }

    /// Whether the algorithm can give capacity back (`count_if`).
    fn refunds(&self) -> bool {
        self.inner().refunds()
    }

    /// Whether the algorithm can settle costs after the response (`settle`).
    fn settles(&self) -> bool {
        self.inner().settles()
    }

    /// Tells the store that admissions will be refunded (`count_if`; [`Store::expect_refunds`]).
    fn expect_refunds(&self) {
        self.inner().expect_refunds();
    }

    /// Asks the store to decide every request itself ([`Store::decide_exactly`]).
    fn decide_exactly(&self) {
        self.inner().decide_exactly();
    }

    /// For a limit on requests in flight, how many slots each key has; `None` for a rate
    /// limit. An allowed request of such a limit holds its slots until its response ends,
    /// then gives them back with [`release`](Self::release).
    fn in_flight(&self) -> Option<u64> {
        self.inner().in_flight()
    }

    /// Gives back the `cost` slots that the admission `lease` of `key` holds (an in-flight
    /// limit); at once, or on the runtime. Runs in `Drop`: never blocks, never panics.
    fn release(&self, key: &Key, cost: u64, lease: u64) {
        self.inner().release(key, cost, lease);
    }

    /// The limiter's `Debug` form.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner().describe(f)
    }

    /// The limiter, for [`inherit`](Self::inherit) to find its type. New quotas are put in
    /// force under a wrapper (this, `inherit` and `settled` are the innermost limiter's): a
    /// live layer's services put the wrappers around the limiter they are handed.
    fn as_any(&self) -> &dyn Any {
        self.inner().as_any()
    }

    /// This limiter (new quotas for the same algorithm, store and clock) taking over from
    /// `previous`: each key keeps what it used there ([`Store::succeed`]).
    ///
    /// # Errors
    ///
    /// When `previous` is not a limiter of the same type (one quota against tiers), or the
    /// store cannot carry usage over.
    fn inherit(&self, previous: &dyn Limiter) -> Result<Arc<dyn Limiter>, Error> {
        self.inner().inherit(previous)
    }

    /// This limiter once it has carried over every key of the limiter it took over from
    /// ([`Store::settle`]).
    fn settled(&self) -> Arc<dyn Limiter> {
        self.inner().settled()
    }
}

impl<A, St, C> Limiter for RateLimiter<A, St, C>
where
    A: Algorithm,
    St: Store<A>,
    C: Clock + Clone,
{
    fn inner(&self) -> &dyn Limiter {
        unreachable!("a RateLimiter wraps no limiter")
    }

    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> DecisionFuture {
        DecisionFuture::of(self.check_n_at(key, now, cost))
    }

    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> DecisionFuture {
        DecisionFuture::of(RateLimiter::refund(self, key, admission, cost))
    }

    fn charge(&self, key: Key, cost: u64) -> DecisionFuture {
        DecisionFuture::of(RateLimiter::charge(self, key, cost))
    }

    fn peek(&self, key: Key) -> DecisionFuture {
        DecisionFuture::of(RateLimiter::peek(self, key))
    }

    fn reset(&self, key: Key) -> Update {
        RateLimiter::reset(self, key)
    }

    fn block(&self, key: Key, duration: Duration) -> Update {
        RateLimiter::block(self, key, duration)
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now_nanos()
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

    fn settles(&self) -> bool {
        self.algorithm().settles()
    }

    fn expect_refunds(&self) {
        St::expect_refunds(self.table());
    }

    fn decide_exactly(&self) {
        St::decide_exactly(self.table());
    }

    fn in_flight(&self) -> Option<u64> {
        None
    }

    fn release(&self, _key: &Key, _cost: u64, _lease: u64) {}

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn inherit(&self, previous: &dyn Limiter) -> Result<Arc<dyn Limiter>, Error> {
        let Some(previous) = previous.as_any().downcast_ref::<Self>() else {
            return Err(Error::misconfigured(
                "the new quotas are decided differently from the old ones (one quota against \
                 tiers): give as many quotas as the limit was built with, or build the layer \
                 with a list of quotas (tiers) to change how many there are",
            ));
        };
        let table = self.store().succeed(
            RateLimiter::policy(self),
            previous.table(),
            self.algorithm(),
            self.now_nanos(),
        )?;
        Ok(Arc::new(self.with_table(table)))
    }

    fn settled(&self) -> Arc<dyn Limiter> {
        let table = self.store().settle(self.table(), self.now_nanos());
        Arc::new(self.with_table(table))
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Debug for dyn Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.describe(f)
    }
}
