//! A live layer's limiters under the blocks of its [`Handle`](crate::layer::Handle): a key blocked
//! through the handle is denied by the layer's limiter and every plan's, those made after the
//! block included, whatever fills the stores' own blocks.

use std::sync::Arc;
use std::time::Duration;

use super::ban::{Bans, Judge};
use super::object::{DecisionFuture, Limiter};
use crate::store::{Blocks, Update};
use crate::{Decision, Error, Key};

/// `limiter` (the layer's or a plan's) with `bans` around it, if any, and the handle's blocks
/// (`held`) around that: a key the operator blocked is denied before its request is judged, so
/// it is never counted towards a ban, and blocks only the operator makes can never be crowded
/// out by bans.
pub(crate) fn guarded(
    bans: &Option<Bans>,
    held: &Arc<Blocks>,
    limiter: Arc<dyn Limiter>,
) -> Arc<dyn Limiter> {
    let ban = bans
        .as_ref()
        .map(|(ban, counter, dry_run)| ban.judge(&limiter, counter.clone(), *dry_run));
    let held = held.clone();
    Arc::new(Held { limiter, held, ban })
}

/// A limiter under the handle's blocks and the layer's bans.
struct Held {
    limiter: Arc<dyn Limiter>,
    held: Arc<Blocks>,
    ban: Option<Arc<Judge>>,
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
    /// until the end of a longer block in the plan's store, or of the key's debt).
    fn denied(&self, key: Key, left: Duration) -> DecisionFuture {
        let block = move |standing: Result<Decision, Error>| {
            standing.map(|d| {
                // Denied at a peek: blocked in the store too, or in debt. Either may last longer.
                let left = match (d.allowed, d.retry_after) {
                    (false, Some(more)) => more.max(left),
                    _ => left,
                };
                d.blocked_for(left)
            })
        };
        match self.limiter.peek(key) {
            DecisionFuture::Ready(Some(standing)) => DecisionFuture::Ready(Some(block(standing))),
            DecisionFuture::Ready(None) => DecisionFuture::Ready(None),
            DecisionFuture::Waiting(peeking) => {
                DecisionFuture::Waiting(Box::pin(async move { block(peeking.await) }))
            }
        }
    }
}

impl Limiter for Held {
    fn inner(&self) -> &dyn Limiter {
        &*self.limiter
    }

    #[inline]
    fn check(&self, key: Key, now: u64, cost: u64) -> DecisionFuture {
        match self.left(&key, now) {
            Some(left) => self.denied(key, left),
            None => match &self.ban {
                Some(judge) => judge.check(key, now, cost),
                None => self.limiter.check(key, now, cost),
            },
        }
    }

    fn peek(&self, key: Key) -> DecisionFuture {
        match self.left(&key, self.limiter.now()) {
            Some(left) => self.denied(key, left),
            None => self.limiter.peek(key),
        }
    }

    fn reset(&self, key: Key) -> Update {
        match &self.ban {
            Some(judge) => judge.reset(key),
            None => self.limiter.reset(key),
        }
    }
}
