//! [`MemoryTable`]: one policy's keys in memory, and how a check runs on them.

use std::fmt;
use std::future::{ready, Ready};
use std::sync::Arc;

use super::registry::Map;
use super::shards::Forget;
use super::{MemoryAlgorithm, MemoryStore, StateCell};
use crate::store::Store;
use crate::{Decision, Error, Key};

/// A [`MemoryStore`]'s table for one policy.
pub struct MemoryTable<A: MemoryAlgorithm> {
    map: Arc<Map<A>>,
    algorithm: A,
}

impl<A: MemoryAlgorithm> Clone for MemoryTable<A> {
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
            algorithm: self.algorithm.clone(),
        }
    }
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

    #[inline]
    pub(crate) fn decide(&self, key: Key, now: u64, cost: u64) -> Decision {
        let seen = self.apply(key, now, cost);
        A::Cell::decide(seen, &self.algorithm, now, cost)
    }

    /// Gives back what `admission` took from `key` and returns the key's standing afterwards.
    pub(crate) fn refund(&self, key: Key, admission: &Decision, now: u64, cost: u64) -> Decision {
        let algorithm = &self.algorithm;
        let hash = self.map.hash(&key);
        let refund = |cell: &A::Cell| cell.refund(algorithm, admission, now, cost);
        // A key the store does not hold has nothing to give back.
        let after = self.map.get_with(hash, &key, refund).unwrap_or_default();
        algorithm.check(&after, now, 0).decision
    }

    /// Applies the request to the key's state. Only this runs under the shard's lock; the
    /// decision is made from what it returns after the lock is gone.
    ///
    /// Kept out of line, returning what the decision needs, so that the caller builds the
    /// [`Decision`] where it uses it. Data that is written to memory in narrow pieces and read
    /// back in wider words (a decision copied to the caller, an `Option` captured by the
    /// transition closure) cannot be forwarded from the stores to the loads, and the loads wait
    /// for the stores to reach the cache.
    #[inline(never)]
    fn apply(&self, key: Key, now: u64, cost: u64) -> <A::Cell as StateCell<A>>::Seen {
        let algorithm = &self.algorithm;
        let apply = |cell: &A::Cell| cell.apply(algorithm, now, cost);
        let hash = self.map.hash(&key);
        match self.map.get_with(hash, &key, apply) {
            Some(seen) => seen,
            None => {
                // A key never seen is fresh. A request that would not change a fresh state (a
                // peek or a denial) must not make the store remember the key.
                let fresh = A::State::default();
                if algorithm.transition(&fresh, now, cost).is_none() {
                    A::Cell::unchanged(&fresh, algorithm, now, cost)
                } else {
                    let forget = Forgetting { algorithm, now };
                    // The map keeps a long key's digest, never its bytes.
                    self.map
                        .get_or_insert_with(hash, key.stored(), &forget, apply)
                }
            }
        }
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

    fn weight(&self, cell: &A::Cell) -> (bool, u64) {
        let standing = cell.peek(self.algorithm, self.now);
        let until_fresh = u64::try_from(standing.reset_after.as_nanos()).unwrap_or(u64::MAX);
        (standing.remaining == 0, until_fresh)
    }
}

impl<A: MemoryAlgorithm> Store<A> for MemoryStore {
    type Table = MemoryTable<A>;
    type Future = Ready<Result<Decision, Error>>;

    /// Never fails: memory holds any policy.
    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> Result<MemoryTable<A>, Error> {
        let make = || Map::<A>::bounded(Some(self.max_keys));
        let map = if shared {
            self.registry.map(policy, algorithm, make)
        } else {
            Arc::new(make())
        };
        Ok(MemoryTable {
            map,
            algorithm: algorithm.clone(),
        })
    }

    #[inline]
    fn check(table: &MemoryTable<A>, key: Key, now: u64, cost: u64) -> Self::Future {
        ready(Ok(table.decide(key, now, cost)))
    }

    fn refund(
        table: &MemoryTable<A>,
        key: Key,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Self::Future {
        ready(Ok(table.refund(key, admission, now, cost)))
    }
}
