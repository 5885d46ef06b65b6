//! [`MemoryStore`]: per-key state in process memory, the default store.
//!
//! One idea per module:
//!
//! - `algorithms`: what the store needs of an algorithm (the cell that holds a key's state,
//!   and the fast path that updates it), one line per algorithm of the crate.
//! - `cell`: the two cells, `AtomicCell` (a `u64` by compare-and-swap) and `LockedCell`
//!   (any state under a lock per key).
//! - `shards`: the sharded map from keys to cells, and how it forgets keys; `probe` (a key as
//!   its tables hold it) and `hasher` (the keyed hash of a key) serve it.
//! - `table`: `MemoryTable`, one policy's map and how a check runs on it.
//! - `blocks`: the keys blocked until a time, beside a table, bounded as it is.
//! - `registry`: the tables of named policies, shared by every limiter that names them.
//! - `slots`: the slots each key holds, for a limit on requests in flight.

mod algorithms;
mod blocks;
mod cell;
mod hasher;
mod probe;
mod registry;
mod shards;
mod slots;
mod table;

pub(crate) use self::algorithms::Held;
pub use self::algorithms::MemoryAlgorithm;
pub(crate) use self::blocks::Blocks;
pub(crate) use self::cell::{AtomicCell, LockedCell, StateCell};
#[cfg(feature = "redis")]
pub(crate) use self::hasher::KeyHasher;
#[cfg(feature = "redis")]
pub(crate) use self::slots::MemorySlots;
pub use self::table::MemoryTable;

use std::fmt;
use std::sync::Arc;

use self::registry::Registry;

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
    registry: Arc<Registry>,
    max_keys: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            registry: Arc::default(),
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
    /// keys. Keys whose state is back to fresh are removed as new keys come in, once they have
    /// been fresh since the previous sweep: a shard sweeps each time it has grown by as many
    /// keys as it held that were not fresh, so at a steady rate of new keys its sweeps are as
    /// far apart as a key takes to go fresh, and a client that comes back within a period or
    /// two keeps its entry instead of being removed and inserted again at each visit. The store
    /// holds at most about three times the keys that are not fresh, and never more than the
    /// bound: see [`with_max_keys`](Self::with_max_keys) for what happens at the bound.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store in which each policy's table holds at most `max_keys` keys (the default
    /// is [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS); `usize::MAX` takes the bound away, for a
    /// key space that clients cannot grow, such as peer IPv4 addresses behind a firewall).
    ///
    /// A new key that finds its shard full first sweeps out the fresh keys; when none are
    /// fresh, the shard forgets the eighth of its keys that forgetting gives least back: keys
    /// that are not being limited before keys that are, among those the keys with the most
    /// left first, and among equals the closest to fresh. A client that is being limited
    /// therefore stays limited while any other key can go, and a flood of new keys that each
    /// used less than a client did evicts only its own kind: the client never gets more than
    /// it had left. (Keys that each used as much as it did compete with it on equal terms.) Forgetting a key
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
    ///
    /// # Panics
    ///
    /// When `max_keys` is 0: a store that keeps no key would limit no one.
    #[must_use]
    #[track_caller]
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        assert!(
            max_keys > 0,
            "MemoryStore::with_max_keys(0): each policy must keep at least one key; leave it \
             unset for the default ({})",
            Self::DEFAULT_MAX_KEYS
        );
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
        f.debug_struct("MemoryStore")
            .field("policies", &self.registry.len())
            .finish()
    }
}
