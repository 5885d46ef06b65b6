//! The task that renews the leases this server holds, every third of their TTL, so a request
//! may last longer than the TTL.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use super::{Inner, Keys};
use crate::Key;

impl Inner {
    /// Starts the task that renews this server's leases, if it does not run yet and a runtime
    /// does. It stops once the policy is dropped.
    pub(super) fn renew_from(self: &Arc<Self>) {
        if self.renewing.load(Ordering::Relaxed) || self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.renewing.store(false, Ordering::Release);
            return;
        };
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        let weak: Weak<Inner> = Arc::downgrade(self);
        let clock = self.clock.clone();
        // Ends with the task (the policy dropped, or its runtime shut down): the next lease
        // taken starts another.
        let running = Running(weak.clone());
        runtime.spawn(async move {
            let _running = running;
            loop {
                clock.sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                inner.renew_all().await;
            }
        });
    }

    /// The cost of `lease` if it is still held (not given back since the renewal began).
    fn cost_of(&self, lease: u64) -> Option<u64> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(&lease).map(|l| l.cost)
    }

    /// Renews every lease held now, each by its own call, together.
    async fn renew_all(self: &Arc<Self>) {
        let leases: Vec<(u64, Key, Keys)> = {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.iter()
                .map(|(&lease, l)| (lease, l.key.clone(), l.keys.clone()))
                .collect()
        };
        let mut calls = tokio::task::JoinSet::new();
        for (lease, key, keys) in leases {
            let inner = self.clone();
            calls.spawn(async move {
                let Some(cost) = inner.cost_of(lease) else {
                    return;
                };
                let member = inner.member(lease, cost);
                // A failed renewal is tried again at the next round; the lease lasts a TTL.
                let _ = inner.run(&keys, "n", &member, cost, &key).await;
            });
        }
        while calls.join_next().await.is_some() {}
    }
}

/// Marks the renewing task as running while it lives.
struct Running(Weak<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.renewing.store(false, Ordering::Release);
        }
    }
}
