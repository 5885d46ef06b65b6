//! The limiter an [`InFlightLayer`](crate::layer::InFlightLayer) holds, and the [`Hold`] an
//! admitted request keeps until its response ends.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::object::{DecisionFuture, Limiter};
use crate::clock::{Clock, Sleep};
use crate::store::in_flight::{Slots, NO_LEASE};
use crate::store::Update;
use crate::{Decision, Error, Key, Quota};

/// The policy name of an in-flight limit that was not given one.
pub(crate) const DEFAULT_NAME: &str = "in-flight";

/// How long a Redis lease lasts unless told otherwise.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The shortest and longest lease a layer accepts.
pub(crate) const MIN_LEASE_TTL: Duration = Duration::from_secs(1);
pub(crate) const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A limit on requests in flight, as the layer's limiter.
#[derive(Clone)]
pub(crate) struct InFlight {
    slots: Arc<dyn Slots>,
    limit: u64,
    policy: Box<str>,
    clock: Arc<dyn Clock>,
}

impl InFlight {
    pub(crate) fn new(
        slots: Arc<dyn Slots>,
        limit: u64,
        policy: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            slots,
            limit,
            policy: policy.into(),
            clock,
        }
    }
}

impl Limiter for InFlight {
    fn inner(&self) -> &dyn Limiter {
        unreachable!("an in-flight limit wraps no limiter")
    }

    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> DecisionFuture {
        if cost > self.limit {
            // Never let through, whatever is in flight: answered without asking the store, as
            // a request too large for the limit (reported as if every slot were free, which a
            // busy denial never is).
            let never = Decision::deny(self.limit, self.limit, Duration::ZERO, None);
            return DecisionFuture::Ready(Some(Ok(never)));
        }
        self.slots.acquire(key, now, cost)
    }

    fn refund(&self, _key: Key, _admission: &Decision, _cost: u64) -> DecisionFuture {
        // An in-flight layer has no `count_if`.
        DecisionFuture::Ready(Some(Err(Error::misconfigured(
            "an in-flight limit gives its slots back when responses end, not by refunds",
        ))))
    }

    fn charge(&self, _key: Key, _cost: u64) -> DecisionFuture {
        // An in-flight layer does not settle.
        DecisionFuture::Ready(Some(Err(Error::misconfigured(
            "an in-flight limit holds slots, not costs to settle",
        ))))
    }

    /// The slots of `key` free now, taking none.
    fn peek(&self, key: Key) -> DecisionFuture {
        self.slots.acquire(key, self.now(), 0)
    }

    // A layer's handle also holds blocks of an in-flight limit itself (in this process); a
    // shared store (Redis) keeps them for every server. The slots have no usage to forget: a
    // reset lifts the block alone.
    fn reset(&self, key: Key) -> Update {
        self.slots.lift(key)
    }

    fn block(&self, key: Key, duration: Duration) -> Update {
        self.slots.block(key, duration)
    }

    #[inline]
    fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn sleep(&self, delay: Duration) -> Sleep {
        self.clock.sleep(delay)
    }

    fn quotas(&self) -> &[Quota] {
        &[]
    }

    fn policy(&self) -> &str {
        &self.policy
    }

    fn refunds(&self) -> bool {
        false
    }

    fn settles(&self) -> bool {
        false
    }

    fn expect_refunds(&self) {}

    fn decide_exactly(&self) {}

    fn in_flight(&self) -> Option<u64> {
        Some(self.limit)
    }

    #[inline]
    fn release(&self, key: &Key, cost: u64, lease: u64) {
        self.slots.release(key, cost, lease);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn inherit(&self, _previous: &dyn Limiter) -> Result<Arc<dyn Limiter>, Error> {
        Err(Error::misconfigured(
            "Handle::set_quotas: an in-flight limit has slots, not quotas; its number of slots \
             is set where the layer is built (InFlightLayer::new)",
        ))
    }

    fn settled(&self) -> Arc<dyn Limiter> {
        Arc::new(self.clone())
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("policy", &self.policy)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// The slots an admitted request holds, given back exactly once: when the response body ends,
/// or when whatever holds this is dropped (the body, the response, or the request's future
/// when the client goes away, a timeout drops it, or the handler panics).
pub(crate) struct Hold {
    limiter: Arc<dyn Limiter>,
    key: Key,
    cost: u64,
    lease: u64,
}

impl Hold {
    /// The hold of the request of `key` and `cost` that `admission` let through, if it took a
    /// slot (not one only a dry run let through, nor a peek).
    pub(crate) fn of(
        limiter: &Arc<dyn Limiter>,
        key: Key,
        cost: u64,
        admission: &Decision,
    ) -> Option<Self> {
        (admission.allowed && cost > 0).then(|| Self {
            limiter: limiter.clone(),
            key,
            cost,
            lease: admission.receipt(),
        })
    }

    /// The policy name of the limit whose slots these are.
    pub(crate) fn policy(&self) -> &str {
        self.limiter.policy()
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.limiter.release(&self.key, self.cost, self.lease);
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("cost", &self.cost)
            .field("leased", &(self.lease != NO_LEASE))
            .finish_non_exhaustive()
    }
}
