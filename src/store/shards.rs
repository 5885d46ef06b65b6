//! A sharded hash map from [`Key`] to a state cell, read under a shard's read lock.

use std::hash::{BuildHasher, Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{PoisonError, RwLock};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::Key;

/// One shard, alone on its cache lines so that threads working on different shards do not slow
/// each other down through the lock word.
#[repr(align(128))]
struct Shard<V> {
    tables: RwLock<Tables<V>>,
}

/// A shard's keys, by kind. IP and integer keys live in tables of plain words: their entries
/// are smaller than a [`Key`]'s (a 10 000-key map fits in a quarter less cache) and finding
/// one compares integers instead of matching on the key's kind first.
struct Tables<V> {
    v4: HashTable<(u32, V)>,
    v6: HashTable<([u64; 2], V)>,
    ints: HashTable<(u64, V)>,
    other: HashTable<(Key, V)>,
}

impl<V> Tables<V> {
    fn new() -> Self {
        Self {
            v4: HashTable::new(),
            v6: HashTable::new(),
            ints: HashTable::new(),
            other: HashTable::new(),
        }
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.len() + self.ints.len() + self.other.len()
    }
}

/// A key as its table holds it.
enum Probe<'k> {
    V4(u32),
    V6([u64; 2]),
    Int(u64),
    Other(&'k Key),
}

impl<'k> Probe<'k> {
    #[inline]
    fn of(key: &'k Key) -> Self {
        if let Some(n) = key.as_u64() {
            return Self::Int(n);
        }
        match key.as_ip() {
            Some(IpAddr::V4(ip)) => Self::V4(u32::from_ne_bytes(ip.octets())),
            Some(IpAddr::V6(ip)) => {
                let octets = ip.octets();
                let (hi, lo) = octets.split_at(8);
                Self::V6([word(hi), word(lo)])
            }
            None => Self::Other(key),
        }
    }
}

/// Eight bytes as a native-endian word.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(bytes);
    u64::from_ne_bytes(w)
}

/// The key a [`Probe::V6`] was made from.
fn v6_key(w: [u64; 2]) -> Key {
    let mut octets = [0; 16];
    octets[..8].copy_from_slice(&w[0].to_ne_bytes());
    octets[8..].copy_from_slice(&w[1].to_ne_bytes());
    Key::from(Ipv6Addr::from(octets))
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
                tables: RwLock::new(Tables::new()),
            })
            .collect();
        Self {
            shards,
            hasher: RandomState::default(),
        }
    }

    /// `hash_one` by hand: `hash_one` itself is not inlined into the lookup, and the call
    /// costs a tenth of a check's instructions.
    #[inline]
    #[allow(clippy::manual_hash_one)]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        key.hash(&mut hasher);
        hasher.finish()
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Tables<V>> {
        // The count is a power of two; bits 32.. are clear of hashbrown's low bucket bits and
        // its top seven control bits for any table under 2^32 buckets.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        &self.shards[index].tables
    }

    /// Runs `f` on the key's cell under the shard's read lock, if the key is present. `hash`
    /// is [`hash`](Self::hash)`(key)`.
    #[inline]
    pub(crate) fn get_with<R>(&self, hash: u64, key: &Key, f: impl FnOnce(&V) -> R) -> Option<R> {
        let probe = Probe::of(key);
        let tables = self
            .shard(hash)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let cell = match probe {
            Probe::V4(w) => tables.v4.find(hash, |e| e.0 == w).map(|e| &e.1),
            Probe::V6(w) => tables.v6.find(hash, |e| e.0 == w).map(|e| &e.1),
            Probe::Int(n) => tables.ints.find(hash, |e| e.0 == n).map(|e| &e.1),
            Probe::Other(key) => tables.other.find(hash, |e| e.0 == *key).map(|e| &e.1),
        };
        cell.map(f)
    }

    /// Runs `f` on the key's cell under the shard's write lock, inserting a default cell first
    /// if the key is absent. `hash` is [`hash`](Self::hash)`(&key)`.
    pub(crate) fn get_or_insert_with<R>(&self, hash: u64, key: Key, f: impl FnOnce(&V) -> R) -> R {
        let mut tables = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let tables = &mut *tables;
        // Growing a table rehashes its entries: as keys again, so that they hash as they did
        // when they went in.
        let cell = match Probe::of(&key) {
            Probe::V4(w) => {
                let rehash =
                    |e: &(u32, V)| self.hash(&Key::from(Ipv4Addr::from(e.0.to_ne_bytes())));
                let entry = tables.v4.entry(hash, |e| e.0 == w, rehash);
                &entry.or_insert_with(|| (w, V::default())).into_mut().1
            }
            Probe::V6(w) => {
                let rehash = |e: &([u64; 2], V)| self.hash(&v6_key(e.0));
                let entry = tables.v6.entry(hash, |e| e.0 == w, rehash);
                &entry.or_insert_with(|| (w, V::default())).into_mut().1
            }
            Probe::Int(n) => {
                let rehash = |e: &(u64, V)| self.hash(&Key::from(e.0));
                let entry = tables.ints.entry(hash, |e| e.0 == n, rehash);
                &entry.or_insert_with(|| (n, V::default())).into_mut().1
            }
            Probe::Other(_) => {
                let rehash = |e: &(Key, V)| self.hash(&e.0);
                let entry = tables.other.entry(hash, |e| e.0 == key, rehash);
                &entry
                    .or_insert_with(|| (key.clone(), V::default()))
                    .into_mut()
                    .1
            }
        };
        f(cell)
    }

    /// How many keys the map holds.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.tables
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn keys(i: u64) -> [Key; 5] {
        let word = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        [
            Key::from(Ipv4Addr::from(word as u32)),
            Key::from(Ipv6Addr::from(u128::from(word) << 64 | u128::from(i))),
            Key::from(word),
            Key::from(format!("user-{i}").as_str()),
            Key::from(format!("a-key-long-enough-to-be-shared-{i}").as_str()),
        ]
    }

    #[test]
    fn every_kind_survives_growth_and_stays_apart() {
        let map = Shards::<AtomicU64>::new();
        let n = 5_000;
        for i in 0..n {
            for (kind, key) in keys(i).into_iter().enumerate() {
                let hash = map.hash(&key);
                let value = i * 8 + kind as u64;
                map.get_or_insert_with(hash, key, |cell| cell.store(value, Ordering::Relaxed));
            }
        }
        assert_eq!(map.len(), 5 * n as usize);
        for i in 0..n {
            for (kind, key) in keys(i).into_iter().enumerate() {
                let hash = map.hash(&key);
                let found = map.get_with(hash, &key, |cell| cell.load(Ordering::Relaxed));
                assert_eq!(found, Some(i * 8 + kind as u64), "{key:?}");
                // Inserting again finds the same cell.
                let again = map.get_or_insert_with(hash, key, |c| c.load(Ordering::Relaxed));
                assert_eq!(again, i * 8 + kind as u64);
            }
        }
        assert_eq!(map.len(), 5 * n as usize);
        // The same bits as another kind are another key.
        let ip = Key::from(Ipv4Addr::new(0, 0, 0, 7));
        let int = Key::from(u64::from(u32::from_ne_bytes([0, 0, 0, 7])));
        let v6 = Key::from(Ipv6Addr::from(7u128));
        for key in [ip, int, v6, Key::from("x")] {
            assert_eq!(map.get_with(map.hash(&key), &key, |_| ()), None, "{key:?}");
        }
    }
}
