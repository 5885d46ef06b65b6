//! What a store keeps for a limit on requests in flight: slots per key, taken when a request
//! is let through and given back when its response ends ([`InFlightLayer`](crate::InFlightLayer)).
//!
//! The memory store keeps a counter per key (`memory/slots.rs`); the Redis store keeps leases
//! with an expiry (`redis/slots.rs`), so that a server that dies gives its slots back.

use std::future::ready;
use std::sync::Arc;
use std::time::Duration;

use super::{DecisionFuture, Update};
use crate::clock::Clock;
use crate::{Error, Key};

/// A store that keeps the slots of limits on requests in flight, what
/// [`InFlightLayer::store`](crate::InFlightLayer::store) takes: [`MemoryStore`](super::MemoryStore)
/// and `RedisStore`. Sealed: a store that keeps no slots does not compile there.
#[allow(private_bounds)]
pub trait SlotStore: sealed::KeepsSlots + Send + Sync + 'static {}

pub(crate) mod sealed {
    use super::*;

    /// How a [`SlotStore`] makes its slots.
    pub(crate) trait KeepsSlots {
        /// The slots of the policy `policy`, `limit` per key, a lease lasting `lease_ttl`
        /// (Redis), on `clock`; or why the store cannot keep them.
        fn slots(
            &self,
            policy: &str,
            limit: u64,
            lease_ttl: Duration,
            clock: Arc<dyn Clock>,
        ) -> Result<Arc<dyn Slots>, Error>;

        /// This store answering as `on_failure` says when it fails; `None` for a store that
        /// never fails (memory).
        #[cfg(feature = "redis")]
        fn failing(&self, on_failure: &super::super::OnFailure) -> Option<Arc<dyn SlotStore>> {
            let _ = on_failure;
            None
        }
    }
}

/// The lease of an admission that holds nothing to give back (a request of cost 0, or one let
/// through while the store was away with [`OnFailure::Open`](crate::store::OnFailure::Open)).
pub(crate) const NO_LEASE: u64 = 0;

/// The lease of an admission the Redis store's local fallback took: given back there.
#[cfg(feature = "redis")]
pub(crate) const LOCAL_LEASE: u64 = u64::MAX;

/// One in-flight policy in a store: how many slots each key holds.
pub(crate) trait Slots: Send + Sync + 'static {
    /// Takes `cost` slots of `key` if that many are free. The decision reports the limit and
    /// the slots free afterwards; an admission's [`receipt`](crate::Decision::receipt) is the lease
    /// that [`release`](Self::release) gives back. `now` is the limiter's clock, read only by a
    /// store told to use it (Redis `with_caller_clock`).
    fn acquire(&self, key: Key, now: u64, cost: u64) -> DecisionFuture;

    /// Gives back the `cost` slots that `lease` of `key` holds: at once, or (a remote store)
    /// on the runtime without waiting. Never blocks and never panics: it runs in `Drop`.
    fn release(&self, key: &Key, cost: u64, lease: u64);

    /// Denies `key` every slot for `duration` from now, on every server that shares the
    /// store. By default nothing: a store of one process leaves blocks to the layer, which
    /// holds a live layer's blocks itself.
    fn block(&self, key: Key, duration: Duration) -> Update {
        let _ = (key, duration);
        Box::pin(ready(Ok(())))
    }

    /// Lifts `key`'s block ([`block`](Self::block)). By default nothing.
    fn lift(&self, key: Key) -> Update {
        let _ = key;
        Box::pin(ready(Ok(())))
    }
}
