//! [`MemoryTable`]: one policy's keys in memory, and how a check runs on them.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::blocks::{blocked_until, Blocks};
use super::registry::Map;
use super::shards::{Forget, Weight};
use super::{MemoryAlgorithm, StateCell};
use crate::clock::saturating_nanos;
use crate::{Decision, Key};

mod store;
mod succession;

/// A [`MemoryStore`]'s table for one policy.
#[doc(hidden)]
#[derive(Clone)]
pub struct MemoryTable<A: MemoryAlgorithm> {
    map: Arc<Map<A>>,
    blocks: Arc<Blocks>,
    algorithm: A,
    /// The table this one takes over from while its quotas change: a key this table does not
    /// hold carries over what it used there ([`Algorithm::carried`](crate::algorithm::Algorithm::carried)).
    previous: Option<Arc<MemoryTable<A>>>,
}

impl<A: MemoryAlgorithm> fmt::Debug for MemoryTable<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTable")
            .field("keys", &self.map.len())
            .finish()
    }
}

impl<A: MemoryAlgorithm> MemoryTable<A> {
    /// How many keys the table holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the table holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many keys are blocked (blocks that have ended included, until they make room for
    /// others). At most the store's [`max_keys`](MemoryStore::max_keys).
    pub fn blocked_keys(&self) -> usize {
        self.blocks.len()
    }

    /// While no block is live the test for blocks costs one load and a branch (and some 20
    /// instructions a check in all: BENCHMARKS.md, "Blocks on the hot path").
    #[inline]
    pub(crate) fn decide(&self, key: Key, now: u64, cost: u64) -> Decision {
        if self.blocks.any(now) {
            let hash = self.map.hash(&key);
            return self.decide_among_blocks(key, hash, now, cost);
        }
        let seen = self.apply(key, now, cost);
        A::Cell::decide(seen, &self.algorithm, now, cost)
    }

    /// [`decide`](Self::decide) at the time `now` reads, read once the key's cell is found
    /// (under the shard's read lock) rather than before the lookup, so that reading the clock
    /// overlaps finding the key: a check waits for its lock and compare-and-swap, which wait
    /// for every instruction before them, the clock's reading included (BENCHMARKS.md, "The
    /// clock read after the lookup"). Decides exactly as `decide` at that time: blocks are
    /// looked at before the state is touched. `now` is called once, never under a write lock.
    #[inline]
    pub(crate) fn decide_reading(&self, key: Key, now: &impl Fn() -> u64, cost: u64) -> Decision {
        let at = Cell::new(0);
        match self.apply_reading(&key, now, &at, cost) {
            Some(seen) => A::Cell::decide(seen, &self.algorithm, at.get(), cost),
            None => {
                let hash = self.map.hash(&key);
                self.decide_among_blocks(key, hash, at.get(), cost)
            }
        }
    }

    /// [`apply`](Self::apply) for [`decide_reading`](Self::decide_reading): what the request
    /// saw, or `None` when some block may hold at the time read, which it leaves in `at`.
    /// Returns in registers: a larger answer (the time, or the key back) would go through
    /// memory.
    #[inline(never)]
    fn apply_reading(
        &self,
        key: &Key,
        now: &impl Fn() -> u64,
        at: &Cell<u64>,
        cost: u64,
    ) -> Option<<A::Cell as StateCell<A>>::Seen> {
        let algorithm = &self.algorithm;
        let blocks = &self.blocks;
        let read = || {
            let t = now();
            at.set(t);
            (!blocks.any(t)).then_some(t)
        };
        let hash = self.map.hash(key);
        let apply = |cell: &A::Cell| read().map(|t| cell.apply(algorithm, t, cost));
        match self.map.get_with(hash, key, apply) {
            Some(seen) => seen,
            None => {
                let t = read()?;
                Some(self.apply_missing(key.clone(), hash, t, cost))
            }
        }
    }

    /// [`decide`](Self::decide) while some key of the table is blocked: out of the way of the
    /// checks made while none is.
    #[cold]
    #[inline(never)]
    fn decide_among_blocks(&self, key: Key, hash: u64, now: u64, cost: u64) -> Decision {
        if let Some(until) = self.blocks.until(&key, now) {
            return blocked_until(self.standing(&key, now), now, until);
        }
        let seen = self.apply_hashed(key, hash, now, cost);
        A::Cell::decide(seen, &self.algorithm, now, cost)
    }

    /// The key's standing at `now`, consuming nothing and remembering no new key.
    pub(crate) fn peek(&self, key: &Key, now: u64) -> Decision {
        self.blocks.hold(key, now, self.standing(key, now))
    }

    /// The key's standing at `now` by its state alone (a fresh state for a key not held).
    fn standing(&self, key: &Key, now: u64) -> Decision {
        let algorithm = &self.algorithm;
        let hash = self.map.hash(key);
        let peek = |cell: &A::Cell| cell.peek(algorithm, now);
        match self.map.get_with(hash, key, peek) {
            Some(standing) => standing,
            None => algorithm.check(&A::State::default(), now, 0).decision,
        }
    }

    /// Gives back what `admission` took from `key` and returns the key's standing afterwards.
    /// A key the store does not hold has nothing to give back.
    pub(crate) fn refund(&self, key: Key, admission: &Decision, now: u64, cost: u64) -> Decision {
        self.modify(key, now, false, |s| {
            self.algorithm.refund(s, admission, now, cost)
        })
    }

    /// Charges `key` `cost` more, whatever it has left (a debt), and returns the key's
    /// standing afterwards.
    pub(crate) fn charge(&self, key: Key, now: u64, cost: u64) -> Decision {
        self.modify(key, now, cost > 0, |s| self.algorithm.charge(s, now, cost))
    }

    /// Applies `f` to `key`'s state ([`StateCell::modify`]) and returns the key's standing
    /// afterwards: blocked, or by that state. A key the store does not hold reads as fresh, or
    /// with `insert` is put in first (from what it carried over, while the table takes over
    /// from other quotas).
    fn modify(
        &self,
        key: Key,
        now: u64,
        insert: bool,
        f: impl Fn(&A::State) -> Option<A::State>,
    ) -> Decision {
        let hash = self.map.hash(&key);
        let modify = |cell: &A::Cell| cell.modify(&f);
        let after = match self.map.get_with(hash, &key, modify) {
            Some(after) => after,
            None if insert => {
                let carried = self.carried(&key, now);
                self.insert(key.clone(), hash, carried, now, modify)
            }
            None => A::State::default(),
        };
        let standing = self.algorithm.check(&after, now, 0).decision;
        self.blocks.hold(&key, now, standing)
    }

    /// Forgets `key`'s state and lifts its block: the key is fresh again.
    pub(crate) fn reset(&self, key: &Key, now: u64) {
        let hash = self.map.hash(key);
        if self.previous.is_some() {
            // The key must not carry over what it used in the table this one takes over
            // from: it stays, fresh.
            let fresh = |cell: &A::Cell| cell.set_state(A::State::default());
            self.insert(key.clone(), hash, None, now, fresh);
        } else {
            self.map.remove(hash, key);
        }
        self.blocks.lift(key);
    }

    /// Blocks `key` from `now` for `duration` (until the end of the clock when that reaches
    /// past it), or keeps a block that ends later.
    pub(crate) fn block(&self, key: &Key, now: u64, duration: Duration) {
        let until = now.saturating_add(saturating_nanos(duration));
        self.blocks.block(key, now, until);
    }

    /// Applies the request to the key's state. Only this runs under the shard's lock (and,
    /// from [`decide_reading`](Self::decide_reading), the clock's reading); the decision is
    /// made from what it returns after the lock is gone.
    ///
    /// Kept out of line, returning what the decision needs, so that the caller builds the
    /// [`Decision`] where it uses it. Data that is written to memory in narrow pieces and read
    /// back in wider words (a decision copied to the caller, an `Option` captured by the
    /// transition closure) cannot be forwarded from the stores to the loads, and the loads wait
    /// for the stores to reach the cache.
    #[inline(never)]
    fn apply(&self, key: Key, now: u64, cost: u64) -> <A::Cell as StateCell<A>>::Seen {
        let hash = self.map.hash(&key);
        self.apply_hashed(key, hash, now, cost)
    }

    /// [`apply`](Self::apply) to a key whose hash is `hash`.
    #[inline]
    fn apply_hashed(
        &self,
        key: Key,
        hash: u64,
        now: u64,
        cost: u64,
    ) -> <A::Cell as StateCell<A>>::Seen {
        let algorithm = &self.algorithm;
        let apply = |cell: &A::Cell| cell.apply(algorithm, now, cost);
        match self.map.get_with(hash, &key, apply) {
            Some(seen) => seen,
            None => self.apply_missing(key, hash, now, cost),
        }
    }

    /// [`apply`](Self::apply) to a key the table was found not to hold (another thread may
    /// have put it in since). While the table takes over from one of other quotas, the key
    /// starts from what it used there ([`carried`](Self::carried)); otherwise it is fresh, and
    /// a request that would not change a fresh state (a peek or a denial) must not make the
    /// store remember the key.
    fn apply_missing(
        &self,
        key: Key,
        hash: u64,
        now: u64,
        cost: u64,
    ) -> <A::Cell as StateCell<A>>::Seen {
        let algorithm = &self.algorithm;
        let carried = self.carried(&key, now);
        let fresh = A::State::default();
        if carried.is_none() && algorithm.transition(&fresh, now, cost).is_none() {
            // A fresh cell of the request's own, which the store does not keep.
            return A::Cell::default().apply(algorithm, now, cost);
        }
        let apply = |cell: &A::Cell| cell.apply(algorithm, now, cost);
        self.insert(key, hash, carried, now, apply)
    }

    /// Runs `f` on `key`'s cell, put in (from `carried`, or fresh) unless another thread did.
    fn insert<R>(
        &self,
        key: Key,
        hash: u64,
        carried: Option<A::State>,
        now: u64,
        f: impl FnOnce(&A::Cell) -> R,
    ) -> R {
        let init = |cell: &A::Cell| {
            if let Some(carried) = carried {
                cell.set_state(carried);
            }
        };
        let forget = Forgetting {
            algorithm: &self.algorithm,
            now,
        };
        // The map keeps a long key's digest, never its bytes.
        self.map
            .get_or_insert_from(hash, key.stored(), &forget, init, f)
    }
}

/// What a table forgets, judged by its algorithm at the time of the request that makes room.
struct Forgetting<'a, A> {
    algorithm: &'a A,
    now: u64,
}

impl<A: MemoryAlgorithm> Forget<A::Cell> for Forgetting<'_, A> {
    fn now(&self) -> u64 {
        self.now
    }

    fn is_fresh(&self, cell: &A::Cell, at: u64) -> bool {
        cell.is_fresh(self.algorithm, at)
    }

    fn weight(&self, cell: &A::Cell) -> Weight {
        let standing = cell.peek(self.algorithm, self.now);
        let until_fresh = saturating_nanos(standing.reset_after);
        (
            standing.remaining == 0,
            u64::MAX - standing.remaining,
            until_fresh,
        )
    }
}
