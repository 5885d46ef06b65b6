//! A sharded hash map from [`Key`] to a state cell, read under a shard's read lock.
//!
//! The crate keeps its own map rather than a general concurrent map (`DashMap`, `moka`)
//! because two measurements say so (BENCHMARKS.md):
//!
//! - **Bytes per key.** IP and integer keys live in tables of plain words beside the cell, so a
//!   GCRA key costs some 52 bytes where governor's `DashMap<IpAddr, _>` costs 69 ("Bytes per
//!   key"), and finding one compares integers.
//! - **Eviction.** A shard sweeps out the keys fresh since its previous sweep as it grows, and
//!   when full forgets the eighth of its keys that forgetting gives least back (not being
//!   limited first, then the most left, then the closest to fresh), judged by the algorithm
//!   through [`Forget`]. A general map knows neither
//!   what "fresh" means nor which key is cheap to lose, and a cache's eviction (recency or
//!   frequency) would let a flood of new keys push out the clients being limited; the longest
//!   single check while a shard forgets is measured in "Longest single `check` while the store
//!   forgets keys".

use std::cmp::Ordering;
use std::sync::{PoisonError, RwLock};

use hashbrown::HashTable;

use super::hasher::KeyHasher;
use super::probe::{Probe, Word};
use crate::Key;

/// One shard, alone on its cache lines so that threads working on different shards do not slow
/// each other down through the lock word.
#[repr(align(128))]
struct Shard<V> {
    tables: RwLock<Tables<V>>,
}

/// What the map asks of its owner to forget keys: the time, whether a cell is fresh at a
/// given time, and how limited it is.
pub(crate) trait Forget<V> {
    /// The time of the request that makes room, in the clock's nanoseconds.
    fn now(&self) -> u64;

    /// Whether the cell is fresh at `at`: forgetting it then changes no decision. For a time
    /// before the cell's last change this says whether the cell was already fresh then and has
    /// not changed since (every algorithm reads a time earlier than its state's as no time
    /// elapsed), so a cell fresh at the previous sweep and now has been left alone in between.
    fn is_fresh(&self, cell: &V, at: u64) -> bool;

    /// How much forgetting the cell would give its key back ([`Weight`]). Lower goes first.
    fn weight(&self, cell: &V) -> Weight;
}

/// What forgetting a key gives it back, in the order keys go: `(limited, used, until_fresh)`.
/// `limited`: no request of cost 1 would pass now. `used`: how much of its capacity it has
/// used, counted as `u64::MAX − remaining` (the requests of cost 1 that would pass now), so
/// the key with the most left goes first. `until_fresh`: nanoseconds until it is fresh, which
/// breaks ties. A key that used more is never forgotten while one that used less is held: a
/// flood of keys that each used little makes room among its own kind.
pub(crate) type Weight = (bool, u64, u64);

/// The fewest keys a bounded shard holds: the bound of a small table is shared among fewer
/// shards rather than cut into shards too small to choose among.
const MIN_PER_SHARD: usize = 16;

/// The fewest keys a shard holds before it looks for fresh ones to remove.
const SWEEP_FLOOR: usize = 64;

/// A shard's keys, by kind. IP and integer keys live in tables of plain words: their entries
/// are smaller than a [`Key`]'s (a 10 000-key map fits in a quarter less cache) and finding
/// one compares integers instead of matching on the key's kind first.
struct Tables<V> {
    v4: HashTable<(u32, V)>,
    v6: HashTable<([u64; 2], V)>,
    ints: HashTable<(u64, V)>,
    other: HashTable<(Key, V)>,
    /// When the shard grows to this many keys, a new key first sweeps out the keys that have
    /// been fresh since the previous sweep.
    sweep_at: usize,
    /// The time of the previous sweep (0 before the first).
    swept_at: u64,
}

impl<V> Tables<V> {
    fn new() -> Self {
        Self {
            v4: HashTable::new(),
            v6: HashTable::new(),
            ints: HashTable::new(),
            other: HashTable::new(),
            sweep_at: SWEEP_FLOOR,
            swept_at: 0,
        }
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.len() + self.ints.len() + self.other.len()
    }

    /// Keeps the cells `keep` picks, in every table.
    fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.v4.retain(|e| keep(&e.1));
        self.v6.retain(|e| keep(&e.1));
        self.ints.retain(|e| keep(&e.1));
        self.other.retain(|e| keep(&e.1));
    }

    fn cells(&self) -> impl Iterator<Item = &V> {
        let v4 = self.v4.iter().map(|e| &e.1);
        let v6 = self.v6.iter().map(|e| &e.1);
        let ints = self.ints.iter().map(|e| &e.1);
        v4.chain(v6)
            .chain(ints)
            .chain(self.other.iter().map(|e| &e.1))
    }

    /// Each key and its cell.
    fn entries(&self) -> impl Iterator<Item = (Key, &V)> {
        fn each<W: Word, V>(table: &HashTable<(W, V)>) -> impl Iterator<Item = (Key, &V)> {
            table.iter().map(|e| (e.0.key(), &e.1))
        }
        each(&self.v4)
            .chain(each(&self.v6))
            .chain(each(&self.ints))
            .chain(each(&self.other))
    }

    #[inline]
    fn find(&self, hash: u64, key: &Key) -> Option<&V> {
        match Probe::of(key) {
            Probe::V4(w) => self.v4.find(hash, |e| e.0 == w).map(|e| &e.1),
            Probe::V6(w) => self.v6.find(hash, |e| e.0 == w).map(|e| &e.1),
            Probe::Int(n) => self.ints.find(hash, |e| e.0 == n).map(|e| &e.1),
            Probe::Other(key) => self.other.find(hash, |e| e.0 == *key).map(|e| &e.1),
        }
    }

    /// Makes room for one more key. Once the shard has grown by as many keys as it held that
    /// were not fresh at the previous sweep, it removes the keys that have been fresh since then:
    /// a client that comes back within a period or two of going fresh keeps its entry rather
    /// than being removed and inserted again at each visit. At `limit`, every fresh key goes,
    /// and when the shard is still full, the least limited eighth of it.
    fn make_room(&mut self, limit: usize, forget: &impl Forget<V>) {
        let now = forget.now();
        let len = self.len();
        if len >= limit {
            self.retain(|cell| !forget.is_fresh(cell, now));
            self.swept(self.len(), now);
        } else if len >= self.sweep_at {
            let before = self.swept_at;
            let mut not_fresh = 0;
            self.retain(|cell| {
                if !forget.is_fresh(cell, now) {
                    not_fresh += 1;
                    true
                } else {
                    !forget.is_fresh(cell, before)
                }
            });
            self.swept(not_fresh, now);
        }
        let len = self.len();
        if len < limit {
            return;
        }
        // Full of keys that are not fresh: evict the ones forgetting gives least back. Keys that
        // are being limited go last, so a client under a limit keeps it while any other key can
        // go, and of the others those with the most left go first.
        let weights = self.cells().map(|c| forget.weight(c)).collect();
        let mut keep = all_but_lightest(weights, (limit / 8).clamp(1, len));
        self.retain(|cell| keep(forget.weight(cell)));
        self.swept(self.len(), now);
    }

    /// Notes a sweep at `now` that left `not_fresh` keys that are not fresh: the next sweeps
    /// once as many keys again have come in. The keys kept while fresh go at the next sweep
    /// unless they are used before it, so the shard holds at most some three times the keys
    /// used within a period (twice those not fresh, and the ones gone fresh since the sweep).
    fn swept(&mut self, not_fresh: usize, now: u64) {
        self.sweep_at = self.len() + not_fresh.max(SWEEP_FLOOR);
        self.swept_at = self.swept_at.max(now);
    }
}

/// How many shards hold `max_keys` keys: a power of two, at most `most` (a power of two), with
/// at least [`MIN_PER_SHARD`] keys each, or one shard for them all.
pub(super) fn shard_count(max_keys: usize, most: usize) -> usize {
    1 << (max_keys / MIN_PER_SHARD).clamp(1, most).ilog2()
}

/// A test that keeps all but `target` of the entries weighing `weights`: the lightest, and of
/// those at the threshold the first met. Called once per entry, in the order of `weights`.
pub(super) fn all_but_lightest<W: Ord + Copy>(
    mut weights: Vec<W>,
    target: usize,
) -> impl FnMut(W) -> bool {
    let (_, &mut threshold, _) = weights.select_nth_unstable(target - 1);
    let mut at_threshold = target - weights.iter().filter(|&&w| w < threshold).count();
    move |w| match w.cmp(&threshold) {
        Ordering::Less => false,
        Ordering::Equal if at_threshold > 0 => {
            at_threshold -= 1;
            false
        }
        _ => true,
    }
}

/// `table`'s cell for `word`, inserted (a default cell) when absent. Growing the table
/// rehashes its entries: as keys again, so that they hash as they did when they went in.
fn insert<'t, W: Word, V: Default>(
    table: &'t mut HashTable<(W, V)>,
    hasher: &KeyHasher,
    hash: u64,
    word: W,
) -> &'t V {
    let entry = table.entry(hash, |e| e.0 == word, |e| hasher.hash(&e.0.key()));
    &entry.or_insert_with(|| (word, V::default())).into_mut().1
}

/// Removes `word`'s entry from `table`, if any.
fn remove<W: Word, V>(table: &mut HashTable<(W, V)>, hash: u64, word: &W) {
    if let Ok(entry) = table.find_entry(hash, |e| e.0 == *word) {
        entry.remove();
    }
}

/// Keys are hashed once per check, with keys drawn at random per map, by a hash made for input
/// an attacker chooses: clients choose keys (byte strings freely, IPv6 `/64` groups by the
/// billions within their own allocation), and must not be able to choose keys that collide,
/// which would turn every lookup in a shard into a scan. The hash picks the shard from bits the
/// table does not use for its own bucket index or control bytes. See [`KeyHasher`].
pub(crate) struct Shards<V> {
    shards: Box<[Shard<V>]>,
    hasher: KeyHasher,
    /// The most keys one shard holds: the map's bound divided among its shards.
    per_shard: usize,
}

impl<V: Default> Shards<V> {
    /// A map without a bound on its keys.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::bounded(None)
    }

    /// A map that holds at most `max_keys` keys, or any number.
    ///
    /// Shards are many, so that removing keys never holds one shard's lock for long: with
    /// 1 000 000 keys, a shard holds some 4 000, and growing, sweeping or evicting one takes a
    /// fraction of a millisecond.
    pub(crate) fn bounded(max_keys: Option<usize>) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        let mut count = (parallelism * 16).next_power_of_two().clamp(256, 1024);
        let per_shard = match max_keys {
            None => usize::MAX,
            Some(max) => {
                // Never more than `max` in all: a shard chooses which key to forget among its
                // own, so a shard of one key would forget a limited client for any newcomer.
                let max = max.max(1);
                count = shard_count(max, count);
                max / count
            }
        };
        let shards = (0..count)
            .map(|_| Shard {
                tables: RwLock::new(Tables::new()),
            })
            .collect();
        Self {
            shards,
            hasher: KeyHasher::new(),
            per_shard,
        }
    }

    #[inline]
    pub(crate) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash(key)
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
        let tables = self
            .shard(hash)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        tables.find(hash, key).map(f)
    }

    #[cfg(test)]
    fn get_or_insert_with<R>(
        &self,
        hash: u64,
        key: Key,
        forget: &impl Forget<V>,
        f: impl FnOnce(&V) -> R,
    ) -> R {
        self.get_or_insert_from(hash, key, forget, |_| {}, f)
    }

    /// Runs `f` on the key's cell under the shard's write lock, inserting a default cell first
    /// if the key is absent, and running `init` on it then (under the same write lock, so no
    /// other call sees the cell before `init` has run). `hash` is [`hash`](Self::hash)`(&key)`.
    /// Before a key goes in, the shard makes room ([`Forget`]): as it grows it sweeps out the
    /// keys that have been fresh since its previous sweep, and evicts the least limited keys
    /// when it is at its bound.
    pub(crate) fn get_or_insert_from<R>(
        &self,
        hash: u64,
        key: Key,
        forget: &impl Forget<V>,
        init: impl FnOnce(&V),
        f: impl FnOnce(&V) -> R,
    ) -> R {
        let mut tables = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let tables = &mut *tables;
        // Another thread may have put the key in since the caller looked.
        if let Some(cell) = tables.find(hash, &key) {
            return f(cell);
        }
        if tables.len() >= tables.sweep_at.min(self.per_shard) {
            tables.make_room(self.per_shard, forget);
        }
        let hasher = &self.hasher;
        let cell = match Probe::of(&key) {
            Probe::V4(w) => insert(&mut tables.v4, hasher, hash, w),
            Probe::V6(w) => insert(&mut tables.v6, hasher, hash, w),
            Probe::Int(n) => insert(&mut tables.ints, hasher, hash, n),
            Probe::Other(_) => insert(&mut tables.other, hasher, hash, key),
        };
        init(cell);
        f(cell)
    }

    /// Each key and what `f` reads of its cell, one shard at a time (read under the shard's
    /// read lock, handed to `each` after it is released).
    pub(crate) fn for_each<T>(&self, f: impl Fn(&V) -> T, mut each: impl FnMut(Key, T)) {
        for shard in &*self.shards {
            let entries: Vec<(Key, T)> = {
                let tables = shard.tables.read().unwrap_or_else(PoisonError::into_inner);
                tables.entries().map(|(key, cell)| (key, f(cell))).collect()
            };
            for (key, value) in entries {
                each(key, value);
            }
        }
    }

    /// Forgets `key`, if the map holds it. `hash` is [`hash`](Self::hash)`(key)`.
    pub(crate) fn remove(&self, hash: u64, key: &Key) {
        let mut tables = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let tables = &mut *tables;
        match Probe::of(key) {
            Probe::V4(w) => remove(&mut tables.v4, hash, &w),
            Probe::V6(w) => remove(&mut tables.v6, hash, &w),
            Probe::Int(n) => remove(&mut tables.ints, hash, &n),
            Probe::Other(key) => remove(&mut tables.other, hash, key),
        }
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
    use std::net::{Ipv4Addr, Ipv6Addr};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Keeps every key.
    struct Never;

    impl Forget<AtomicU64> for Never {
        fn now(&self) -> u64 {
            0
        }

        fn is_fresh(&self, _: &AtomicU64, _: u64) -> bool {
            false
        }

        fn weight(&self, _: &AtomicU64) -> Weight {
            (false, 0, 0)
        }
    }

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
                map.get_or_insert_with(hash, key, &Never, |cell| {
                    cell.store(value, Ordering::Relaxed)
                });
            }
        }
        assert_eq!(map.len(), 5 * n as usize);
        for i in 0..n {
            for (kind, key) in keys(i).into_iter().enumerate() {
                let hash = map.hash(&key);
                let found = map.get_with(hash, &key, |cell| cell.load(Ordering::Relaxed));
                assert_eq!(found, Some(i * 8 + kind as u64), "{key:?}");
                // Inserting again finds the same cell.
                let again =
                    map.get_or_insert_with(hash, key, &Never, |c| c.load(Ordering::Relaxed));
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

    /// Cells that hold the time of their key's last visit plus one (0: just inserted), fresh
    /// `PERIOD` after the visit.
    struct Visits {
        now: u64,
    }

    const PERIOD: u64 = 1_000;

    impl Forget<AtomicU64> for Visits {
        fn now(&self) -> u64 {
            self.now
        }

        fn is_fresh(&self, cell: &AtomicU64, at: u64) -> bool {
            let visited = cell.load(Ordering::Relaxed).saturating_sub(1);
            // A time before the visit reads as the visit's own, as the algorithms do.
            at.max(visited) >= visited + PERIOD
        }

        fn weight(&self, cell: &AtomicU64) -> Weight {
            (false, 0, cell.load(Ordering::Relaxed))
        }
    }

    /// Visits `key` at `now`; whether the map had forgotten it (the cell was new).
    fn visit(map: &Shards<AtomicU64>, key: Key, now: u64) -> bool {
        let hash = map.hash(&key);
        let forget = Visits { now };
        map.get_or_insert_with(hash, key, &forget, |cell| {
            cell.swap(now + 1, Ordering::Relaxed) == 0
        })
    }

    #[test]
    fn clients_back_within_two_periods_are_never_forgotten_and_the_rest_are() {
        let map = Shards::<AtomicU64>::bounded(Some(1 << 30));
        let regulars: Vec<Key> = (0..20_000u64).map(Key::from).collect();
        // Each round lasts 1.5 periods: every regular comes back once, fresh for half a period
        // by then, while as many passers-by come once each and never again, so that the shards
        // keep growing and sweeping.
        let steps = 100;
        let mut passer = 1u64 << 40;
        let mut now = 0;
        let mut forgotten = 0;
        for round in 0..20 {
            for step in 0..steps {
                now += PERIOD * 3 / 2 / steps;
                for key in regulars.iter().skip(step as usize).step_by(steps as usize) {
                    let new = visit(&map, key.clone(), now);
                    if round > 0 && new {
                        forgotten += 1;
                    }
                }
                for _ in 0..regulars.len() as u64 / steps {
                    passer += 1;
                    assert!(visit(&map, Key::from(passer), now));
                }
            }
        }
        assert_eq!(forgotten, 0, "regular clients removed and inserted again");
        // The passers-by do not pile up: about the keys of a few periods are held.
        let per_round = regulars.len();
        let len = map.len();
        assert!(len < regulars.len() + 4 * per_round, "{len} keys held");
    }
}
