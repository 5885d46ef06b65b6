//! [`RedisSlots`] as [`Slots`]: acquiring a lease, giving it back (also when the acquire is
//! dropped before Redis answered), blocking a key, the failure policy's answer when Redis
//! fails, and the task that renews the leases this server holds every third of their TTL, so
//! a request may last longer than the TTL.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{Inner, Keys, Lease, RedisSlots};
use crate::store::in_flight::{Slots, LOCAL_LEASE, NO_LEASE};
use crate::store::redis::connection::{lock, spawn, OnDrop};
use crate::store::redis::errors::{self, bounded};
use crate::store::redis::fallback::Fallback;
use crate::store::DecisionFuture;
use crate::store::Update;
use crate::{Decision, Error, Key};

/// The longest block the script keeps, in ms: 2^53, where its numbers stop being exact (some
/// 285 000 years).
const MAX_BLOCK_MS: u64 = 1 << 53;

impl Slots for RedisSlots {
    /// Writes the block beside the key's leases, with a TTL to its end; every acquire reads
    /// it in the same script call, so it holds on every server.
    fn block(&self, key: Key, duration: Duration) -> Update {
        let inner = self.0.clone();
        Box::pin(async move { inner.update(key, "b", duration).await })
    }

    /// Deletes the key's block in Redis.
    fn lift(&self, key: Key) -> Update {
        let inner = self.0.clone();
        Box::pin(async move { inner.update(key, "x", Duration::ZERO).await })
    }

    fn acquire(&self, key: Key, _now: u64, cost: u64) -> DecisionFuture {
        let inner = self.0.clone();
        let lease = inner.leases.fetch_add(1, Ordering::Relaxed) + 1;
        DecisionFuture::Waiting(Box::pin(async move {
            let (keys, member) = (inner.keys(&key), inner.member(lease, cost));
            // Until Redis answers, the script may have taken the lease: given back if the
            // acquire fails or is dropped (the request went away). Cost 0 takes none.
            let pending = (cost > 0).then(|| {
                let held = Lease {
                    key: key.clone(),
                    keys: keys.clone(),
                    cost,
                };
                let (inner, member) = (inner.clone(), member.clone());
                OnDrop::new(move || inner.give_back(held, member))
            });
            let (taken, held, blocked) = match inner.run(&keys, "a", &member, cost, &key).await {
                Ok(reply) => reply,
                Err(error) => return inner.failed(error, key, cost),
            };
            pending.into_iter().for_each(OnDrop::defuse);
            let (limit, remaining) = (inner.limit, inner.limit.saturating_sub(held));
            if !blocked.is_zero() {
                let denied = Decision::deny(limit, remaining, Duration::ZERO, None);
                return Ok(denied.blocked_for(blocked));
            }
            if !taken {
                return Ok(Decision::deny(limit, remaining, Duration::ZERO, None));
            }
            if cost > 0 {
                lock(&inner.held).insert(lease, Lease { key, keys, cost });
                inner.renew_from();
            }
            Ok(Decision::allow(limit, remaining, Duration::ZERO).with_receipt(lease))
        }))
    }

    fn release(&self, key: &Key, cost: u64, lease: u64) {
        let inner = &self.0;
        match lease {
            NO_LEASE => {}
            LOCAL_LEASE => {
                if let Fallback::Local(local) = &inner.fallback {
                    local.give_back(key, cost);
                }
            }
            lease => {
                let held = lock(&inner.held).remove(&lease);
                if let Some(held) = held {
                    let member = inner.member(lease, held.cost);
                    inner.give_back(held, member);
                }
            }
        }
    }
}

impl Inner {
    /// One script call on `keys`, bounded by the timeout, and what it found told to the
    /// store's health: whether the lease was taken, given back or renewed, the slots the
    /// key's leases hold afterwards, and what is left of the key's block (zero: not blocked).
    async fn run(
        &self,
        keys: &Keys,
        op: &str,
        member: &str,
        cost: u64,
        key: &Key,
    ) -> Result<(bool, u64, Duration), Error> {
        let mut invocation = self.script.prepare_invoke();
        for k in keys {
            invocation.key(k);
        }
        // The time the script decides at, in ms: the caller's, or `''` for Redis `TIME`.
        let now = match self.store.caller_clock {
            true => (self.clock.now_nanos() / 1_000_000).to_string(),
            false => String::new(),
        };
        let args = (op, member, cost, self.limit, self.ttl_ms, now);
        let connection = &mut self.store.connection.clone();
        let call = invocation
            .arg(args)
            .invoke_async::<(i64, i64, i64)>(connection);
        let call = bounded(self.store.timeout, call, |e| errors::deciding(&e, key));
        let (done, held, blocked) = self.store.observed(self.store.health.of(key), call).await?;
        let (Ok(held), Ok(blocked)) = (u64::try_from(held), u64::try_from(blocked)) else {
            return Err(Error::protocol(format!(
                "unexpected reply from the in-flight script: {held}, {blocked}"
            )));
        };
        Ok((done == 1, held, Duration::from_millis(blocked)))
    }

    /// Gives `lease` (the member `member`) back on the runtime, if one runs; else its expiry
    /// does.
    fn give_back(self: &Arc<Self>, Lease { key, keys, cost }: Lease, member: String) {
        let inner = Arc::clone(self);
        spawn(async move {
            if let Err(_error) = inner.run(&keys, "r", &member, cost, &key).await {
                #[cfg(feature = "tracing")]
                tracing::debug!(policy = &**inner.failures.policy(), error = %_error, "in-flight lease not given back; it expires");
            }
        });
    }

    /// Blocks `key` for `duration` from now (`'b'`), or lifts its block (`'x'`), in Redis; an
    /// error is counted and logged as an acquire's would be, and handed back.
    async fn update(&self, key: Key, op: &str, duration: Duration) -> Result<(), Error> {
        // Whole ms, rounded up: a block never ends before it was asked to.
        let ms = duration.as_nanos().div_ceil(1_000_000);
        let ms = u64::try_from(ms).unwrap_or(u64::MAX).min(MAX_BLOCK_MS);
        let result = self.run(&self.keys(&key), op, "", ms, &key).await;
        if let Err(error) = &result {
            self.failures.note(self.clock.now_nanos(), || error);
        }
        result.map(drop)
    }

    /// What the failure policy answers for an acquire that Redis failed with `error`; counted,
    /// and logged at most every ten seconds.
    fn failed(&self, error: Error, key: Key, cost: u64) -> Result<Decision, Error> {
        // Redis out of memory records no lease: a request let through here (open, or on a
        // local slot of this server's own) would go past the limit, so it is refused whatever
        // the policy, and counted as `closed`.
        if error.kind() == crate::ErrorKind::Full {
            self.failures.note_full(self.clock.now_nanos(), &error);
            return Err(error);
        }
        self.failures.note(self.clock.now_nanos(), || &error);
        match &self.fallback {
            Fallback::Closed => Err(error),
            Fallback::Open => {
                Ok(Decision::allow(self.limit, self.limit, Duration::ZERO).with_receipt(NO_LEASE))
            }
            Fallback::Local(local) => {
                let decision = local.take(key, cost)?;
                Ok(match decision.allowed {
                    true => decision.with_receipt(LOCAL_LEASE),
                    false => decision,
                })
            }
        }
    }

    /// Starts the task that renews this server's leases, if it does not run yet and a runtime
    /// does. It stops once the policy is dropped.
    fn renew_from(self: &Arc<Self>) {
        // Held by the task, however it ends (the policy dropped, its runtime shut down, or
        // none runs): the next lease taken starts another.
        let Ok(running) = Arc::clone(&self.renewing).try_lock_owned() else {
            return;
        };
        let every = Duration::from_millis((self.ttl_ms / 3).max(1));
        let (weak, clock) = (Arc::downgrade(self), self.clock.clone());
        spawn(async move {
            let _running = running;
            loop {
                clock.sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                inner.renew_all().await;
            }
        });
    }

    /// Renews every lease held now, each by its own call, together.
    async fn renew_all(self: &Arc<Self>) {
        let leases: Vec<(u64, Key, Keys)> = lock(&self.held)
            .iter()
            .map(|(&lease, l)| (lease, l.key.clone(), l.keys.clone()))
            .collect();
        let mut calls = tokio::task::JoinSet::new();
        for (lease, key, keys) in leases {
            let inner = self.clone();
            calls.spawn(async move {
                // Unless given back since the renewal began.
                let Some(cost) = lock(&inner.held).get(&lease).map(|l| l.cost) else {
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
