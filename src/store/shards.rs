//! A sharded hash map from [`Key`] to a state cell, read under a shard's read lock.

use std::hash::BuildHasher;
use std::sync::{PoisonError, RwLock};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::Key;

/// One shard, alone on its cache lines so that threads working on different shards do not slow
/// each other down through the lock word.
#[repr(align(128))]
struct Shard<V> {
    table: RwLock<HashTable<(Key, V)>>,
}

/// Keys are hashed once, with a hasher seeded at random per map: clients choose keys, and must
/// not be able to choose ones that collide. The hash picks the shard from bits the table does
/// not use for its own bucket index or control bytes.
pub(crate) struct Shards<V> {
    shards: Box<[Shard<V>]>,
    hasher: RandomState,
}

impl<V: Default> Shards<V> {
    pub(crate) fn new() -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        let count = (parallelism * 8).next_power_of_two().clamp(16, 1024);
        let shards = (0..count)
            .map(|_| Shard {
                table: RwLock::new(HashTable::new()),
            })
            .collect();
        Self {
            shards,
            hasher: RandomState::default(),
        }
    }

    #[inline]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<HashTable<(Key, V)>> {
        // The count is a power of two; bits 32.. are clear of hashbrown's low bucket bits and
        // its top seven control bits for any table under 2^32 buckets.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[index].table
    }

    /// Runs `f` on the key's cell under the shard's read lock, if the key is present.
    #[inline]
    pub(crate) fn get_with<R>(&self, hash: u64, key: &Key, f: impl FnOnce(&V) -> R) -> Option<R> {
        let table = self
            .shard(hash)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        table.find(hash, |(k, _)| k == key).map(|(_, v)| f(v))
    }

    /// Runs `f` on the key's cell under the shard's write lock, inserting a default cell first
    /// if the key is absent.
    pub(crate) fn get_or_insert_with<R>(&self, hash: u64, key: Key, f: impl FnOnce(&V) -> R) -> R {
        let mut table = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = table.entry(hash, |(k, _)| *k == key, |(k, _)| self.hasher.hash_one(k));
        let entry = entry.or_insert_with(|| (key, V::default()));
        f(&entry.get().1)
    }

    /// How many keys the map holds.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}
