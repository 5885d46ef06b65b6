use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::shards::{Forget, Shards};
use super::Store;
use crate::algorithm::{
    Algorithm, FixedWindowState, HybridState, SlidingLogState, SlidingWindowState, TieredState,
    TokenBucketState,
};
use crate::{Decision, Error, Key};

/// Each named policy's table, by its name, its algorithm's type and that algorithm's options
/// (its `Debug` form: the quota's figures, sub-windows, shaping).
type Tables = HashMap<(Box<str>, TypeId, Box<str>), Arc<dyn Any + Send + Sync>>;

/// Per-key state in process memory: the default store.
///
/// A sharded concurrent map keyed with a randomly seeded hasher, so clients cannot choose keys
/// that collide. A state that is one `u64` (GCRA's) is updated by compare-and-swap under a
/// shard's read lock: concurrent requests for one key never block each other and never lose an
/// update. An allowed or denied request for a key already present allocates nothing.
///
/// Clones share the same state. Each named policy ([`Quota::named`](crate::Quota::named)) gets
/// one table, shared by every limiter with that name, algorithm and quota (and options such as
/// sub-windows); the same name with another algorithm or quota gets a table of its own, so
/// that no limiter ever reads or resets another's state. An unnamed quota's limiter gets a
/// table of its own.
#[derive(Clone)]
pub struct MemoryStore {
    tables: Arc<Mutex<Tables>>,
    max_keys: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            tables: Arc::default(),
            max_keys: Self::DEFAULT_MAX_KEYS,
        }
    }
}

impl MemoryStore {
    /// How many keys each policy's table holds at most unless told otherwise
    /// ([`with_max_keys`](Self::with_max_keys)): some 26 MB for GCRA and the leaky bucket at
    /// their fullest (about 53 bytes per key), up to some 100 MB for a sliding window with 8
    /// sub-windows or a sliding log of a few entries per key (BENCHMARKS.md, "Bytes per key").
    /// Clients that invent keys (a new API key or header value per request) can never make the
    /// store grow past it.
    pub const DEFAULT_MAX_KEYS: usize = 500_000;

    /// An empty store, each policy's table bounded to [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS)
    /// keys. Keys whose state is back to fresh are removed as new keys come in (a shard sweeps
    /// its fresh keys out each time it has doubled since its last sweep), so the store holds at
    /// most about twice the keys that are not fresh, and never more than the bound: see
    /// [`with_max_keys`](Self::with_max_keys) for what happens at the bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store in which each policy's table holds at most `max_keys` keys (the default
    /// is [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS); `usize::MAX` takes the bound away, for a
    /// key space that clients cannot grow, such as peer IPv4 addresses behind a firewall).
    ///
    /// A new key that finds its shard full first sweeps out the fresh keys; when none are
    /// fresh, the shard forgets the eighth of its keys that forgetting costs least: keys that
    /// are not being limited before keys that are, and among those the closest to fresh.
    /// A client that is being limited therefore stays limited while any other key can go, and
    /// a flood of new keys (each with capacity left) evicts only its own kind. Forgetting a key
    /// gives it a fresh start, so the bound should be well above the number of clients active
    /// in one period.
    ///
    /// The bound is divided evenly among the table's shards (the keys' hashes spread them
    /// evenly), so a table may fill a little before `max_keys` in all.
    ///
    /// ```
    /// use tollgate::store::MemoryStore;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// let store = MemoryStore::new().with_max_keys(100_000);
    /// let limiter = RateLimiter::gcra(Quota::per_minute(60)).with_store(store);
    /// # let _ = limiter;
    /// ```
    #[must_use]
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The bound on each policy's table ([`with_max_keys`](Self::with_max_keys)).
    pub fn max_keys(&self) -> usize {
        self.max_keys
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
/// `u64` states (GCRA's, the leaky bucket's) live in an [`AtomicU64`] and are updated by
/// compare-and-swap: requests for one key never block each other. Every other state is a
/// [`LockedState`], held under a small lock of its own per key.
///
/// A check runs in two steps so that as little as possible happens while a key's state is held:
/// [`apply`](Self::apply) updates the state and returns what the decision needs
/// ([`Seen`](Self::Seen)), and [`decide`](Self::decide) builds the [`Decision`] from it afterwards.
pub trait MemoryState: Clone + Default + Send + Sync + 'static {
    /// The memory cell holding one key's state.
    type Cell: Default + Send + Sync + 'static;

    /// What [`apply`](Self::apply) hands to [`decide`](Self::decide).
    type Seen;

    /// Applies a request of `cost` at `now` to the state in `cell`, atomically.
    fn apply<A: Algorithm<State = Self>>(
        cell: &Self::Cell,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Self::Seen;

    /// What `apply` would have returned for a request that leaves `state` as it is (the store
    /// does not keep a key that such a request finds fresh).
    fn unchanged<A: Algorithm<State = Self>>(
        state: &Self,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Self::Seen;

    /// The decision for the request that `apply` saw as `seen`.
    fn decide<A: Algorithm<State = Self>>(
        seen: Self::Seen,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Decision;

    /// Gives back what `admission` took ([`Algorithm::refund`]) atomically and returns the
    /// state afterwards.
    fn refund<A: Algorithm<State = Self>>(
        cell: &Self::Cell,
        algorithm: &A,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Self;

    /// Whether the state in `cell` is back to fresh at `now`, so the key may be forgotten.
    fn is_fresh<A: Algorithm<State = Self>>(cell: &Self::Cell, algorithm: &A, now: u64) -> bool;

    /// The key's standing at `now`: the decision for a request of cost 0.
    fn peek<A: Algorithm<State = Self>>(cell: &Self::Cell, algorithm: &A, now: u64) -> Decision;
}

/// Applies `f` to the state in `cell` by compare-and-swap and returns the state `f` was
/// applied to. `f` returns the next state (`None`: unchanged) and may run more than once when
/// another thread got there first.
#[inline]
fn update(cell: &AtomicU64, mut f: impl FnMut(u64) -> Option<u64>) -> u64 {
    let mut current = cell.load(Ordering::Acquire);
    loop {
        let Some(next) = f(current) else {
            return current;
        };
        match cell.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return current,
            Err(actual) => current = actual,
        }
    }
}

impl MemoryState for u64 {
    type Cell = AtomicU64;
    /// The state the request was applied to: the decision is a pure function of it.
    type Seen = u64;

    #[inline]
    fn apply<A: Algorithm<State = u64>>(
        cell: &AtomicU64,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> u64 {
        update(cell, |state| algorithm.transition(&state, now, cost))
    }

    #[inline]
    fn unchanged<A: Algorithm<State = u64>>(state: &u64, _: &A, _: u64, _: u64) -> u64 {
        *state
    }

    #[inline]
    fn decide<A: Algorithm<State = u64>>(
        seen: u64,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Decision {
        // The transition is a pure function of the state it saw, so the state it wrote is
        // computed again here rather than carried out of the compare-and-swap loop.
        let next = algorithm.transition(&seen, now, cost);
        algorithm.decide(&seen, next.as_ref(), now, cost)
    }

    fn refund<A: Algorithm<State = u64>>(
        cell: &AtomicU64,
        algorithm: &A,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> u64 {
        let seen = update(cell, |state| algorithm.refund(&state, admission, now, cost));
        algorithm
            .refund(&seen, admission, now, cost)
            .unwrap_or(seen)
    }

    fn is_fresh<A: Algorithm<State = u64>>(cell: &AtomicU64, algorithm: &A, now: u64) -> bool {
        algorithm.is_fresh(&cell.load(Ordering::Acquire), now)
    }

    fn peek<A: Algorithm<State = u64>>(cell: &AtomicU64, algorithm: &A, now: u64) -> Decision {
        algorithm
            .check(&cell.load(Ordering::Acquire), now, 0)
            .decision
    }
}

/// A state held in memory under a lock of its own per key: any state that is not one `u64`.
///
/// Implement it (it has no methods) for the state of an algorithm of your own to keep that
/// state in a [`MemoryStore`]. The lock is held only while the algorithm runs
/// ([`Algorithm::check_mut`]); requests for other keys never wait for it.
pub trait LockedState: Clone + Default + Send + Sync + 'static {}

impl<S: Clone + Default + Send + Sync + 'static> LockedState for TieredState<S> {}
impl LockedState for TokenBucketState {}
impl LockedState for HybridState {}
impl LockedState for FixedWindowState {}
impl LockedState for SlidingWindowState {}
impl LockedState for SlidingLogState {}

fn lock<S>(cell: &Mutex<S>) -> std::sync::MutexGuard<'_, S> {
    // An algorithm that panicked mid-update left a state it had been given whole: keep it.
    cell.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: LockedState> MemoryState for S {
    type Cell = Mutex<S>;
    /// The decision itself, made while the state was held.
    type Seen = Decision;

    #[inline]
    fn apply<A: Algorithm<State = S>>(
        cell: &Mutex<S>,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Decision {
        algorithm.check_mut(&mut lock(cell), now, cost)
    }

    fn unchanged<A: Algorithm<State = S>>(
        state: &S,
        algorithm: &A,
        now: u64,
        cost: u64,
    ) -> Decision {
        algorithm.check(state, now, cost).decision
    }

    #[inline]
    fn decide<A: Algorithm<State = S>>(seen: Decision, _: &A, _: u64, _: u64) -> Decision {
        seen
    }

    fn refund<A: Algorithm<State = S>>(
        cell: &Mutex<S>,
        algorithm: &A,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> S {
        let mut state = lock(cell);
        if let Some(next) = algorithm.refund(&state, admission, now, cost) {
            *state = next;
        }
        state.clone()
    }

    fn is_fresh<A: Algorithm<State = S>>(cell: &Mutex<S>, algorithm: &A, now: u64) -> bool {
        algorithm.is_fresh(&lock(cell), now)
    }

    fn peek<A: Algorithm<State = S>>(cell: &Mutex<S>, algorithm: &A, now: u64) -> Decision {
        algorithm.check(&lock(cell), now, 0).decision
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
        A::State::decide(seen, &self.algorithm, now, cost)
    }

    /// Gives back what `admission` took from `key` and returns the key's standing afterwards.
    pub(crate) fn refund(&self, key: Key, admission: &Decision, now: u64, cost: u64) -> Decision {
        let algorithm = &self.algorithm;
        let hash = self.map.hash(&key);
        let refund = |cell: &<A::State as MemoryState>::Cell| {
            A::State::refund(cell, algorithm, admission, now, cost)
        };
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
    fn apply(&self, key: Key, now: u64, cost: u64) -> <A::State as MemoryState>::Seen {
        let algorithm = &self.algorithm;
        let apply =
            |cell: &<A::State as MemoryState>::Cell| A::State::apply(cell, algorithm, now, cost);
        let hash = self.map.hash(&key);
        match self.map.get_with(hash, &key, apply) {
            Some(seen) => seen,
            None => {
                // A key never seen is fresh. A request that would not change a fresh state (a
                // peek or a denial) must not make the store remember the key.
                let fresh = A::State::default();
                if algorithm.transition(&fresh, now, cost).is_none() {
                    A::State::unchanged(&fresh, algorithm, now, cost)
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

impl<A: Algorithm> Forget<<A::State as MemoryState>::Cell> for Forgetting<'_, A>
where
    A::State: MemoryState,
{
    fn is_fresh(&self, cell: &<A::State as MemoryState>::Cell) -> bool {
        A::State::is_fresh(cell, self.algorithm, self.now)
    }

    fn weight(&self, cell: &<A::State as MemoryState>::Cell) -> (bool, u64) {
        let standing = A::State::peek(cell, self.algorithm, self.now);
        let until_fresh = u64::try_from(standing.reset_after.as_nanos()).unwrap_or(u64::MAX);
        (standing.remaining == 0, until_fresh)
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
                map: Arc::new(Map::<A>::bounded(Some(self.max_keys))),
                algorithm,
            };
        }
        // One name used with another algorithm, quota or option gets a table of its own: a
        // per-hour limit named "login" and a per-second one of the same name must never read
        // or reset each other's state.
        let identity = (
            policy.into(),
            TypeId::of::<A>(),
            format!("{algorithm:?}").into_boxed_str(),
        );
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = tables
            .entry(identity)
            .or_insert_with(|| Arc::new(Map::<A>::bounded(Some(self.max_keys))));
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
