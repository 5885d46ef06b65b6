use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::shards::Shards;
use super::Store;
use crate::algorithm::Algorithm;
use crate::{Decision, Error, Key};

/// Each policy's table, by policy name and state type.
type Tables = HashMap<(Box<str>, TypeId), Arc<dyn Any + Send + Sync>>;

/// Per-key state in process memory: the default store.
///
/// A sharded concurrent map keyed with a randomly seeded hasher, so clients cannot choose keys
/// that collide. A state that is one `u64` (GCRA's) is updated by compare-and-swap under a
/// shard's read lock: concurrent requests for one key never block each other and never lose an
/// update. An allowed or denied request for a key already present allocates nothing.
///
/// Clones share the same state. Each named policy ([`Quota::named`](crate::Quota::named)) gets
/// one table, shared by every limiter with that name; an unnamed quota's limiter gets a table
/// of its own.
#[derive(Clone, Default)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("MemoryStore")
            .field("policies", &tables.len())
            .finish()
    }
}

/// How a state is held in memory and updated atomically.
///
/// `u64` states live in an [`AtomicU64`] and are updated by compare-and-swap.
pub trait MemoryState: Clone + Default + Send + Sync + 'static {
    /// The memory cell holding one key's state.
    type Cell: Default + Send + Sync + 'static;

    /// Reads the state.
    fn load(cell: &Self::Cell) -> Self;

    /// Applies `f` to the state atomically and returns the state `f` was applied to. `f`
    /// returns the next state (`None`: unchanged) and may be called more than once when
    /// another thread got there first.
    fn update(cell: &Self::Cell, f: impl FnMut(&Self) -> Option<Self>) -> Self;
}

impl MemoryState for u64 {
    type Cell = AtomicU64;

    #[inline]
    fn load(cell: &AtomicU64) -> u64 {
        cell.load(Ordering::Acquire)
    }

    #[inline]
    fn update(cell: &AtomicU64, mut f: impl FnMut(&u64) -> Option<u64>) -> u64 {
        let mut current = cell.load(Ordering::Acquire);
        loop {
            let Some(next) = f(&current) else {
                return current;
            };
            match cell.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return current,
                Err(actual) => current = actual,
            }
        }
    }
}

type Map<A> = Shards<<<A as Algorithm>::State as MemoryState>::Cell>;

/// A [`MemoryStore`]'s table for one policy.
pub struct MemoryTable<A: Algorithm>
where
    A::State: MemoryState,
{
    map: Arc<Map<A>>,
    algorithm: A,
}

impl<A: Algorithm> Clone for MemoryTable<A>
where
    A::State: MemoryState,
{
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
            algorithm: self.algorithm.clone(),
        }
    }
}

impl<A: Algorithm> fmt::Debug for MemoryTable<A>
where
    A::State: MemoryState,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTable")
            .field("keys", &self.map.len())
            .finish()
    }
}

impl<A: Algorithm> MemoryTable<A>
where
    A::State: MemoryState,
{
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
        // The transition is a pure function of the state it saw, so the state it wrote is
        // computed again here rather than carried out of the lock.
        let next = self.algorithm.transition(&seen, now, cost);
        self.algorithm.decide(&seen, next.as_ref(), now, cost)
    }

    /// Gives capacity back to `key` and returns its standing afterwards.
    pub(crate) fn refund(&self, key: Key, now: u64, cost: u64) -> Decision {
        let algorithm = &self.algorithm;
        let hash = self.map.hash(&key);
        let refund = |cell: &<A::State as MemoryState>::Cell| {
            A::State::update(cell, |state| algorithm.refund(state, now, cost))
        };
        // A key the store does not hold has nothing to give back.
        let seen = self.map.get_with(hash, &key, refund).unwrap_or_default();
        let after = algorithm.refund(&seen, now, cost).unwrap_or(seen);
        algorithm.check(&after, now, 0).decision
    }

    /// Applies the request to the key's state and returns the state it was applied to. Only
    /// this runs under the shard's lock; the decision is a pure function of that state and is
    /// computed after the lock is gone.
    ///
    /// Kept out of line, returning one state, so that the caller builds the [`Decision`] where
    /// it uses it. Data that is written to memory in narrow pieces and read back in wider
    /// words (a decision copied to the caller, an `Option` captured by the transition closure)
    /// cannot be forwarded from the stores to the loads, and the loads wait for the stores to
    /// reach the cache.
    #[inline(never)]
    fn apply(&self, key: Key, now: u64, cost: u64) -> A::State {
        let algorithm = &self.algorithm;
        let transition = |cell: &<A::State as MemoryState>::Cell| {
            A::State::update(cell, |state| algorithm.transition(state, now, cost))
        };
        let hash = self.map.hash(&key);
        match self.map.get_with(hash, &key, transition) {
            Some(seen) => seen,
            None => {
                // A key never seen is fresh. A request that would not change a fresh state (a
                // peek or a denial) must not make the store remember the key.
                let fresh = A::State::default();
                if algorithm.transition(&fresh, now, cost).is_none() {
                    fresh
                } else {
                    self.map.get_or_insert_with(hash, key, transition)
                }
            }
        }
    }
}

impl<A: Algorithm> Store<A> for MemoryStore
where
    A::State: MemoryState,
{
    type Table = MemoryTable<A>;
    type Future = Ready<Result<Decision, Error>>;

    fn table(&self, policy: &str, shared: bool, algorithm: &A) -> MemoryTable<A> {
        let algorithm = algorithm.clone();
        if !shared {
            return MemoryTable {
                map: Arc::new(Map::<A>::new()),
                algorithm,
            };
        }
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = tables
            .entry((policy.into(), TypeId::of::<Map<A>>()))
            .or_insert_with(|| Arc::new(Map::<A>::new()));
        let map = match Arc::clone(slot).downcast::<Map<A>>() {
            Ok(map) => map,
            // The slot's type is part of its key, so it always matches.
            Err(_) => unreachable!("memory store table type mismatch"),
        };
        MemoryTable { map, algorithm }
    }

    #[inline]
    fn check(table: &MemoryTable<A>, key: Key, now: u64, cost: u64) -> Self::Future {
        ready(Ok(table.decide(key, now, cost)))
    }

    fn refund(table: &MemoryTable<A>, key: Key, now: u64, cost: u64) -> Self::Future {
        ready(Ok(table.refund(key, now, cost)))
    }
}
