//! A live layer's limiters under the blocks of its [`Handle`](super::Handle): a key blocked
//! through the handle is denied by the layer's limiter and every plan's, those made after the
//! block included, whatever fills the stores' own blocks.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::limit::{Check, Limit};
use crate::clock::Sleep;
use crate::store::Blocks;
use crate::store::Update;
use crate::{Decision, Error, Key, Quota};

/// `limiter` (the layer's or a plan's) denying the keys `held` blocks.
pub(crate) fn held(limiter: Arc<dyn Limit>, held: Arc<Blocks>) -> Arc<dyn Limit> {
    Arc::new(Held { limiter, held })
}

struct Held {
    limiter: Arc<dyn Limit>,
    held: Arc<Blocks>,
}

impl Held {
    /// What is left at `now` of `key`'s block by the handle, if it is blocked. One load while
    /// the handle holds no live block.
    #[inline]
    fn left(&self, key: &Key, now: u64) -> Option<Duration> {
        if !self.held.any(now) {
            return None;
        }
        let until = self.held.until(key, now)?;
        Some(Duration::from_nanos(until - now))
    }

    /// The denial of `key`, blocked for `left` more: its standing, denied until then (or
    /// until the end of a longer block in the plan's store).
    fn denied(&self, key: Key, left: Duration) -> Check {
        let block = move |standing: Result<Decision, Error>| {
            standing.map(|d| {
                let left = match (d.is_blocked(), d.retry_after) {
                    (true, Some(more)) => more.max(left),
                    _ => left,
                };
                d.blocked_for(left)
            })
        };
        match self.limiter.peek(key) {
            Check::Ready(Some(standing)) => Check::Ready(Some(block(standing))),
            Check::Ready(None) => Check::Ready(None),
            Check::Waiting(peeking) => {
                Check::Waiting(Box::pin(async move { block(peeking.await) }))
            }
        }
    }
}

impl Limit for Held {
    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> Check {
        match self.left(&key, now) {
            Some(left) => self.denied(key, left),
            None => self.limiter.check(key, now, cost),
        }
    }

    fn refund(&self, key: Key, admission: &Decision, cost: u64) -> Check {
        self.limiter.refund(key, admission, cost)
    }

    fn peek(&self, key: Key) -> Check {
        match self.left(&key, self.limiter.now()) {
            Some(left) => self.denied(key, left),
            None => self.limiter.peek(key),
        }
    }

    fn reset(&self, key: Key) -> Update {
        self.limiter.reset(key)
    }

    fn block(&self, key: Key, duration: Duration) -> Update {
        self.limiter.block(key, duration)
    }

    #[inline]
    fn now(&self) -> u64 {
        self.limiter.now()
    }

    fn sleep(&self, delay: Duration) -> Sleep {
        self.limiter.sleep(delay)
    }

    fn quotas(&self) -> &[Quota] {
        self.limiter.quotas()
    }

    fn policy(&self) -> &str {
        self.limiter.policy()
    }

    fn refunds(&self) -> bool {
        self.limiter.refunds()
    }

    fn expect_refunds(&self) {
        self.limiter.expect_refunds();
    }

    fn decide_exactly(&self) {
        self.limiter.decide_exactly();
    }

    fn in_flight(&self) -> Option<u64> {
        self.limiter.in_flight()
    }

    fn release(&self, key: &Key, cost: u64, lease: u64) {
        self.limiter.release(key, cost, lease);
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.limiter.describe(f)
    }

    // New quotas are put in force under this wrapper: a live layer's services put it around
    // the limiter they are handed, and a plan's limiter is never handed new quotas.
    fn as_any(&self) -> &dyn Any {
        self.limiter.as_any()
    }

    fn inherit(&self, previous: &dyn Limit) -> Result<Arc<dyn Limit>, Error> {
        self.limiter.inherit(previous)
    }

    fn settled(&self) -> Arc<dyn Limit> {
        self.limiter.settled()
    }
}
