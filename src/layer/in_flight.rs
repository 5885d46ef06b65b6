//! A limit on requests in flight per key ([`RateLimitLayer::in_flight`](super::RateLimitLayer::in_flight)):
//! the limiter the layer holds, and the [`Hold`] an admitted request keeps until its response
//! ends.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::limit::{Check, Limit};
use super::recipe::{LayerClock, Recipe};
use crate::clock::{Clock, Sleep};
use crate::store::in_flight::{Acquire, Slots, NO_LEASE};
use crate::store::{MemorySlots, MemoryStore};
use crate::{Decision, Error, Key, Quota};

/// The policy name of an in-flight limit that was not given one.
pub(crate) const DEFAULT_NAME: &str = "in-flight";

/// How long a Redis lease lasts unless told otherwise.
pub(crate) const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The shortest and longest lease a layer accepts.
pub(crate) const MIN_LEASE_TTL: Duration = Duration::from_secs(1);
pub(crate) const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 3600);

/// A limit on requests in flight, as the layer's limiter.
pub(crate) struct InFlight {
    slots: Arc<dyn Slots>,
    limit: u64,
    policy: Box<str>,
    clock: LayerClock,
}

impl InFlight {
    pub(crate) fn new(slots: Arc<dyn Slots>, limit: u64, policy: &str, clock: LayerClock) -> Self {
        Self {
            slots,
            limit,
            policy: policy.into(),
            clock,
        }
    }
}

/// The in-flight limiter of `recipe` over `store` (a [`MemoryStore`] or a `RedisStore`), or an
/// error naming the store that keeps no slots.
pub(crate) fn bind(
    store: &dyn Any,
    recipe: &Recipe,
    clock: &LayerClock,
) -> Result<Arc<dyn Limit>, Error> {
    let limit = recipe.slots;
    let policy = recipe.policy.as_deref().unwrap_or(DEFAULT_NAME);
    let slots: Arc<dyn Slots> = if let Some(memory) = store.downcast_ref::<MemoryStore>() {
        Arc::new(MemorySlots::new(limit, memory.max_keys()))
    } else {
        redis_slots(store, recipe, policy, clock)?
    };
    Ok(Arc::new(InFlight::new(slots, limit, policy, clock.clone())))
}

/// The slots of a `RedisStore`, or an error naming the store that keeps none.
fn redis_slots(
    store: &dyn Any,
    recipe: &Recipe,
    policy: &str,
    clock: &LayerClock,
) -> Result<Arc<dyn Slots>, Error> {
    #[cfg(feature = "redis")]
    if let Some(redis) = store.downcast_ref::<crate::store::RedisStore>() {
        let clock: Arc<dyn Clock> = Arc::new(clock.clone());
        return Ok(Arc::new(redis.slots(
            policy,
            recipe.slots,
            recipe.lease_ttl,
            clock,
        )?));
    }
    let _ = (store, recipe, policy, clock);
    Err(Error::misconfigured(
        "RateLimitLayer::in_flight: this store keeps no in-flight slots; use a MemoryStore or a \
         RedisStore",
    ))
}

impl Limit for InFlight {
    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> Check {
        if cost > self.limit {
            // Never let through, whatever is in flight: answered without asking the store, as
            // a request too large for the limit (reported as if every slot were free, which a
            // busy denial never is).
            let never = Decision::deny(self.limit, self.limit, Duration::ZERO, None);
            return Check::Ready(Some(Ok(never)));
        }
        match self.slots.acquire(key, now, cost) {
            Acquire::Ready(result) => Check::Ready(Some(result)),
            Acquire::Waiting(future) => Check::Waiting(future),
        }
    }

    fn refund(&self, _key: Key, _admission: &Decision, _cost: u64) -> Check {
        // `count_if` is refused on an in-flight layer when it is built.
        Check::Ready(Some(Err(Error::misconfigured(
            "an in-flight limit gives its slots back when responses end, not by refunds",
        ))))
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

    fn in_flight(&self) -> Option<u64> {
        Some(self.limit)
    }

    #[inline]
    fn release(&self, key: &Key, cost: u64, lease: u64) {
        self.slots.release(key, cost, lease);
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
    limiter: Arc<dyn Limit>,
    key: Key,
    cost: u64,
    lease: u64,
}

impl Hold {
    /// The hold of the request of `key` and `cost` that `admission` let through, if it took a
    /// slot (not one only a dry run let through, nor a peek).
    pub(crate) fn of(
        limiter: &Arc<dyn Limit>,
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
