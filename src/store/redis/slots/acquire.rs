//! [`RedisSlots`] as [`Slots`]: acquiring a lease, giving it back (also when the acquire is
//! dropped before Redis answered), and blocking a key.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{Fallback, Inner, Keys, Lease, RedisSlots};
use crate::store::in_flight::{Acquire, Slots, LOCAL_LEASE, NO_LEASE};
use crate::store::Update;
use crate::Key;

/// Gives the lease back if the acquire is dropped before Redis answered (the request went
/// away): the script may have taken it.
struct Pending {
    inner: Arc<Inner>,
    key: Key,
    keys: Option<Keys>,
    member: String,
    cost: u64,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(keys) = self.keys.take() {
            let lease = Lease {
                key: self.key.clone(),
                keys,
                cost: self.cost,
            };
            give_back(&self.inner, lease, std::mem::take(&mut self.member));
        }
    }
}

/// Gives `lease` (the member `member`) back on the runtime, if one runs; else its expiry does.
fn give_back(inner: &Arc<Inner>, lease: Lease, member: String) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let inner = inner.clone();
        runtime.spawn(async move {
            let Lease { key, keys, cost } = lease;
            if let Err(_error) = inner.run(&keys, "r", &member, cost, &key).await {
                #[cfg(feature = "tracing")]
                tracing::debug!(policy = &*inner.policy, error = %_error, "in-flight lease not given back; it expires");
            }
        });
    }
}

impl Slots for RedisSlots {
    /// Writes the block beside the key's leases, with a TTL to its end; every acquire reads
    /// it in the same script call, so it holds on every server.
    fn block(&self, key: Key, duration: Duration) -> Update {
        let inner = self.inner.clone();
        Box::pin(async move { inner.update(key, "b", duration).await })
    }

    /// Deletes the key's block in Redis.
    fn lift(&self, key: Key) -> Update {
        let inner = self.inner.clone();
        Box::pin(async move { inner.update(key, "x", Duration::ZERO).await })
    }

    fn acquire(&self, key: Key, _now: u64, cost: u64) -> Acquire {
        let inner = self.inner.clone();
        let lease = inner.leases.fetch_add(1, Ordering::Relaxed) + 1;
        let future = async move {
            let keys = inner.keys(&key);
            let mut pending = Pending {
                key: key.clone(),
                // A request of cost 0 takes no lease: nothing to give back.
                keys: (cost > 0).then(|| keys.clone()),
                member: inner.member(lease, cost),
                inner: inner.clone(),
                cost,
            };
            let result = inner.run(&keys, "a", &pending.member, cost, &key).await;
            match result {
                Ok(reply) => {
                    // Answered: nothing for `pending` to give back when it is dropped.
                    let keys = pending.keys.take();
                    if let (true, Some(keys)) = (reply.done && reply.blocked.is_zero(), keys) {
                        inner
                            .held
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(
                                lease,
                                Lease {
                                    key: key.clone(),
                                    keys,
                                    cost,
                                },
                            );
                        inner.renew_from();
                    }
                    Ok(inner.decision(&reply, lease))
                }
                // The script may have taken the lease before the answer was lost: `pending`
                // gives it back when dropped here.
                Err(error) => inner.failed(error, key, cost),
            }
        };
        Acquire::Waiting(Box::pin(future))
    }

    fn release(&self, key: &Key, cost: u64, lease: u64) {
        let inner = &self.inner;
        match lease {
            NO_LEASE => {}
            LOCAL_LEASE => {
                if let Fallback::Local(local) = &inner.fallback {
                    local.give_back(key, cost);
                }
            }
            lease => {
                let held = inner
                    .held
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&lease);
                if let Some(held) = held {
                    let member = inner.member(lease, held.cost);
                    give_back(inner, held, member);
                }
            }
        }
    }
}
