//! [`MemorySlots`]: how many slots each key holds, for a limit on requests in flight.
//!
//! A sharded table of `(key, slots held)` under one mutex per shard. A key is in the table only
//! while it holds a slot: the release that brings it to zero removes it, so the table holds at
//! most as many keys as there are requests in flight, and never more than its bound.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::hasher::KeyHasher;
use super::shards::shard_count;
use crate::clock::Clock;
use crate::store::in_flight::sealed::KeepsSlots;
use crate::store::in_flight::{SlotStore, Slots, NO_LEASE};
use crate::store::DecisionFuture;
use crate::store::MemoryStore;
use crate::{Decision, Error, Key};

/// How many shards a table has at most: a power of two, the shard picked by the hash's top
/// bits. A small bound has fewer, of at least 16 keys each ([`shard_count`]): a shard of one
/// key would refuse a new client while any other client of its shard is in flight.
const SHARDS: usize = 64;

/// One shard, alone on its cache lines.
#[repr(align(128))]
struct Shard {
    table: Mutex<HashTable<(Key, u64)>>,
}

/// The slots of one in-flight policy in memory.
pub(crate) struct MemorySlots {
    hasher: KeyHasher,
    shards: Box<[Shard]>,
    /// The slots each key has.
    limit: u64,
    /// The most keys one shard holds.
    per_shard: usize,
}

impl SlotStore for MemoryStore {}

impl KeepsSlots for MemoryStore {
    /// Counters of this layer's own, for at most [`max_keys`](MemoryStore::max_keys) keys
    /// holding slots at once; no leases.
    fn slots(
        &self,
        _: &str,
        limit: u64,
        _: Duration,
        _: Arc<dyn Clock>,
    ) -> Result<Arc<dyn Slots>, Error> {
        Ok(Arc::new(MemorySlots::new(limit, self.max_keys())))
    }
}

impl MemorySlots {
    /// A table of `limit` slots per key, holding at most about `max_keys` keys at once.
    pub(crate) fn new(limit: u64, max_keys: usize) -> Self {
        let count = shard_count(max_keys, SHARDS);
        let shards = (0..count)
            .map(|_| Shard {
                table: Mutex::new(HashTable::new()),
            })
            .collect();
        Self {
            hasher: KeyHasher::new(),
            shards,
            limit,
            per_shard: max_keys.div_ceil(count).max(1),
        }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, HashTable<(Key, u64)>> {
        // The top bits: the table inside the shard uses the low ones.
        let bits = self.shards.len().trailing_zeros();
        let index = hash.checked_shr(64 - bits).unwrap_or(0) as usize;
        self.shards[index]
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `cost` slots of `key` if that many are free.
    ///
    /// # Errors
    ///
    /// When `key` holds no slot and its shard is full: that many other keys have requests in
    /// flight (see [`MemoryStore::with_max_keys`](super::MemoryStore::with_max_keys)).
    pub(crate) fn take(&self, key: Key, cost: u64) -> Result<Decision, Error> {
        let limit = self.limit;
        let allow = |held: u64| Decision::allow(limit, limit - held, Duration::ZERO);
        let deny = |held: u64| Decision::deny(limit, limit - held, Duration::ZERO, None);
        let hash = self.hasher.hash(&key);
        let mut table = self.shard(hash);
        let full = table.len() >= self.per_shard;
        let rehash = |e: &(Key, u64)| self.hasher.hash(&e.0);
        match table.entry(hash, |e| e.0 == key, rehash) {
            Entry::Occupied(mut entry) => {
                let held = &mut entry.get_mut().1;
                if cost <= limit - *held {
                    *held += cost;
                    Ok(allow(*held))
                } else {
                    Ok(deny(*held))
                }
            }
            // Nothing to hold: a peek, or a request that can never pass.
            Entry::Vacant(_) if cost == 0 => Ok(allow(0)),
            Entry::Vacant(_) if cost > limit => Ok(deny(0)),
            Entry::Vacant(_) if full => Err(Error::store(format!(
                "the in-flight table is full: about {} keys have requests in flight at once; \
                 raise MemoryStore::with_max_keys if that many clients are expected",
                self.per_shard * self.shards.len()
            ))),
            Entry::Vacant(entry) => {
                entry.insert((key.stored(), cost));
                Ok(allow(cost))
            }
        }
    }

    /// Gives back `cost` slots of `key`; a key left with none is forgotten.
    pub(crate) fn give_back(&self, key: &Key, cost: u64) {
        let hash = self.hasher.hash(key);
        let mut table = self.shard(hash);
        if let Ok(mut entry) = table.find_entry(hash, |e| e.0 == *key) {
            let held = &mut entry.get_mut().1;
            *held = held.saturating_sub(cost);
            if *held == 0 {
                entry.remove();
                // A flood of keys gone by leaves its room behind: given back once mostly empty.
                let (len, capacity) = (table.len(), table.capacity());
                if capacity > 64 && len < capacity / 8 {
                    table.shrink_to(len * 2, |e| self.hasher.hash(&e.0));
                }
            }
        }
    }

    /// How many keys hold a slot now.
    #[cfg(test)]
    fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.lock().map_or(0, |t| t.len()))
            .sum()
    }
}

impl Slots for MemorySlots {
    fn acquire(&self, key: Key, _now: u64, cost: u64) -> DecisionFuture {
        DecisionFuture::Ready(Some(self.take(key, cost)))
    }

    fn release(&self, key: &Key, cost: u64, lease: u64) {
        debug_assert!(cost > 0 || lease == NO_LEASE);
        self.give_back(key, cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_and_given_back_and_keys_at_zero_forgotten() {
        let slots = MemorySlots::new(2, 1000);
        let a = Key::from("a");
        assert_eq!(slots.take(a.clone(), 1).unwrap().remaining, 1);
        assert_eq!(slots.take(a.clone(), 1).unwrap().remaining, 0);
        let denied = slots.take(a.clone(), 1).unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.retry_after, None);
        // Another key has its own slots.
        assert!(slots.take(Key::from("b"), 2).unwrap().allowed);
        slots.give_back(&a, 1);
        assert!(slots.take(a.clone(), 1).unwrap().allowed);
        slots.give_back(&a, 1);
        slots.give_back(&a, 1);
        slots.give_back(&Key::from("b"), 2);
        assert_eq!(slots.keys(), 0);
    }

    #[test]
    fn a_cost_takes_that_many_slots_and_a_cost_above_the_limit_never_passes() {
        let slots = MemorySlots::new(4, 1000);
        let k = Key::from(7u64);
        assert_eq!(slots.take(k.clone(), 3).unwrap().remaining, 1);
        assert!(!slots.take(k.clone(), 2).unwrap().allowed);
        // A peek takes nothing.
        let peek = slots.take(k.clone(), 0).unwrap();
        assert!(peek.allowed);
        assert_eq!(peek.remaining, 1);
        assert!(!slots.take(Key::from(8u64), 5).unwrap().allowed);
        assert_eq!(slots.keys(), 1);
    }

    #[test]
    fn a_flood_of_keys_stops_at_the_bound_and_its_room_is_given_back() {
        let slots = MemorySlots::new(1, 640);
        let mut taken = Vec::new();
        let mut refused = 0;
        for i in 0..10_000u64 {
            match slots.take(Key::from(i), 1) {
                Ok(d) => {
                    assert!(d.allowed);
                    taken.push(i);
                }
                Err(e) => {
                    refused += 1;
                    assert!(e.to_string().contains("with_max_keys"), "{e}");
                }
            }
        }
        assert!(slots.keys() <= 640, "{}", slots.keys());
        assert!(refused >= 10_000 - 640);
        for i in taken {
            slots.give_back(&Key::from(i), 1);
        }
        assert_eq!(slots.keys(), 0);
        let capacity: usize = slots
            .shards
            .iter()
            .map(|s| s.table.lock().unwrap().capacity())
            .sum();
        assert!(capacity <= 64 * SHARDS, "{capacity}");
    }
}
