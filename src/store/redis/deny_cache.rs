//! Denials remembered locally for up to a second, so a client that keeps knocking costs one
//! round trip to Redis a second rather than one per request.
//!
//! The cache is sharded by the key's hash (the memory store's keyed hasher: keys are chosen by
//! clients), so checks of different keys rarely wait on one lock. Each shard keeps its denials
//! in a dense array with an index beside it: finding, adding, forgetting and evicting a denial
//! are each O(1). A full shard evicts with a clock hand: of the next few denials under the hand,
//! one that has ended, else the one that ends first.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;

use crate::store::KeyHasher;
use crate::{Decision, Key};

/// How many denials a shard holds at least before the cache uses more shards.
const PER_SHARD: usize = 64;

/// The most shards a cache has.
const MAX_SHARDS: usize = 64;

/// How many denials under the clock hand a full shard looks at to pick one to evict.
const PROBE: usize = 4;

/// A denial and the limiter's time (ns) when it was decided.
struct Denial {
    key: Key,
    hash: u64,
    decided: u64,
    until: u64,
    decision: Decision,
}

/// One shard: its denials, densely, and where each key's denial is.
struct Shard {
    denials: Vec<Denial>,
    /// Index into `denials`, found by the key's hash.
    index: HashTable<usize>,
    capacity: usize,
    /// Where the clock hand points in `denials`.
    hand: usize,
}

impl Shard {
    /// Forgets every denial ended at `now`.
    fn forget_ended(&mut self, now: u64) {
        let mut at = 0;
        while at < self.denials.len() {
            if self.denials[at].until <= now {
                self.remove_at(at);
            } else {
                at += 1;
            }
        }
    }

    fn new(capacity: usize) -> Self {
        Self {
            denials: Vec::new(),
            index: HashTable::new(),
            capacity,
            hand: 0,
        }
    }

    fn find(&self, hash: u64, key: &Key) -> Option<usize> {
        let denials = &self.denials;
        self.index.find(hash, |&i| denials[i].key == *key).copied()
    }

    /// Forgets the denial at `at`; the last one moves into its place.
    fn remove_at(&mut self, at: usize) {
        let hash = self.denials[at].hash;
        if let Ok(entry) = self.index.find_entry(hash, |&i| i == at) {
            entry.remove();
        }
        let last = self.denials.len() - 1;
        self.denials.swap_remove(at);
        if at != last {
            let moved = self.denials[at].hash;
            if let Some(slot) = self.index.find_mut(moved, |&i| i == last) {
                *slot = at;
            }
        }
        if self.hand >= self.denials.len() {
            self.hand = 0;
        }
    }

    /// The denial to evict from a full shard: of the next [`PROBE`] under the hand, the first
    /// that has ended at `now`, else the one that ends first. Moves the hand past it.
    fn victim(&mut self, now: u64) -> usize {
        let len = self.denials.len();
        let mut best = self.hand % len;
        for step in 0..PROBE.min(len) {
            let at = (self.hand + step) % len;
            let until = self.denials[at].until;
            if until <= now {
                best = at;
                break;
            }
            if until < self.denials[best].until {
                best = at;
            }
        }
        self.hand = (best + 1) % len;
        best
    }

    fn insert(&mut self, denial: Denial, now: u64) {
        if let Some(at) = self.find(denial.hash, &denial.key) {
            self.denials[at] = denial;
            return;
        }
        if self.denials.len() >= self.capacity {
            let at = self.victim(now);
            self.remove_at(at);
        }
        let at = self.denials.len();
        let hash = denial.hash;
        self.denials.push(denial);
        let denials = &self.denials;
        self.index.insert_unique(hash, at, |&i| denials[i].hash);
    }
}

/// At most `capacity` denials of cost 1, each until its `retry_after` and for at most
/// [`DENY_CACHE_HOLD`](super::RedisStore::DENY_CACHE_HOLD).
///
/// Serving them from here is correct on every server: a denial says the key may not pass
/// before `retry_after`, and no other server's requests can make that time come sooner (they
/// only ever push it further out). Only a refund or a reset gives capacity back early: through
/// this store, either forgets the key's denial here; through another server, it reaches this
/// one when the denial here ends, within the hold. A charge only pushes the time further out:
/// through this store it forgets the denial too, so that the next check is told the debt's
/// wait. Evicting a denial early only costs a round trip: Redis answers for it again.
pub(crate) struct DenyCache {
    shards: Box<[Mutex<Shard>]>,
    /// Keyed: the keys are the clients'.
    hasher: KeyHasher,
    /// The latest end of any denial put here: from then on every denial here has ended, and
    /// a lookup hashes nothing (a store with no recent denial, or one answered by its
    /// failure policy while Redis is down, pays one load).
    last_until: AtomicU64,
    /// Whether denials were put here since the ended ones were last forgotten all at once.
    holding: AtomicBool,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        // A power of two of shards, each holding at least PER_SHARD (or everything, when
        // small); the capacity is split so that the shards add up to it exactly.
        let wanted = (capacity / PER_SHARD).clamp(1, MAX_SHARDS);
        let count = if capacity == 0 {
            0
        } else {
            1 << wanted.ilog2()
        };
        let shards = (0..count)
            .map(|i| {
                let share = capacity / count + usize::from(i < capacity % count);
                Mutex::new(Shard::new(share))
            })
            .collect();
        Self {
            shards,
            hasher: KeyHasher::new(),
            last_until: AtomicU64::new(0),
            holding: AtomicBool::new(false),
        }
    }

    /// The shard of a key's hash: the hash's high bits (the tables use the low ones).
    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        let at = ((hash >> 32) as usize) & (self.shards.len() - 1);
        self.shards[at]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The denial of `key` that still holds at `now`, aged to `now`.
    pub(crate) fn get(&self, key: &Key, now: u64) -> Option<Decision> {
        if self.shards.is_empty() {
            return None;
        }
        if now >= self.last_until.load(Ordering::Relaxed) {
            // Every denial here has ended: forgotten once, then no lookup until the next (read
            // first: a lookup that finds nothing to forget writes nothing shared).
            if self.holding.load(Ordering::Relaxed) && self.holding.swap(false, Ordering::Relaxed) {
                for shard in &self.shards {
                    let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                    shard.forget_ended(now);
                }
            }
            return None;
        }
        let hash = self.hasher.hash(key);
        let mut shard = self.shard(hash);
        let at = shard.find(hash, key)?;
        let denial = &shard.denials[at];
        if denial.until <= now {
            shard.remove_at(at);
            return None;
        }
        Some(aged(&denial.decision, now.saturating_sub(denial.decided)))
    }

    /// Remembers a denial decided at `now`, when it says how long it holds. A full shard makes
    /// room by evicting another denial.
    pub(crate) fn insert(&self, key: Key, now: u64, decision: &Decision) {
        let Some(retry_after) = decision.retry_after else {
            return;
        };
        if self.shards.is_empty() || decision.allowed {
            return;
        }
        // Remembered briefly, so that a reset elsewhere soon reaches this server.
        let retry_after = retry_after.min(super::RedisStore::DENY_CACHE_HOLD);
        let wait = crate::clock::saturating_nanos(retry_after);
        let until = now.saturating_add(wait);
        if until <= now {
            return;
        }
        self.last_until.fetch_max(until, Ordering::Relaxed);
        self.holding.store(true, Ordering::Relaxed);
        let hash = self.hasher.hash(&key);
        let denial = Denial {
            // Without a long key's bytes: the cache holds digests, as the stores do.
            key: key.stored(),
            hash,
            decided: now,
            until,
            decision: decision.clone(),
        };
        self.shard(hash).insert(denial, now);
    }

    /// Forgets the denial of `key` (its capacity was given back).
    pub(crate) fn remove(&self, key: &Key) {
        if self.shards.is_empty() {
            return;
        }
        let hash = self.hasher.hash(key);
        let mut shard = self.shard(hash);
        if let Some(at) = shard.find(hash, key) {
            shard.remove_at(at);
        }
    }

    /// How many denials the cache holds (ended ones included until they are looked up or
    /// evicted).
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .denials
                    .len()
            })
            .sum()
    }

    /// How many denials the cache holds at most.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).capacity)
            .sum()
    }
}

/// `decision` as it stands `elapsed` ns later: every wait is that much shorter.
fn aged(decision: &Decision, elapsed: u64) -> Decision {
    let elapsed = Duration::from_nanos(elapsed);
    let age = |d: &Decision| {
        let mut d = d.clone();
        d.reset_after = d.reset_after.saturating_sub(elapsed);
        d.retry_after = d.retry_after.map(|r| r.saturating_sub(elapsed));
        d
    };
    let tiers = decision.tiers();
    if tiers.len() > 1 || !std::ptr::eq(&tiers[0], decision) {
        let tiers: Vec<Decision> = tiers.iter().map(age).collect();
        age(decision).with_tiers(tiers)
    } else {
        age(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn denied(retry_ms: u64) -> Decision {
        Decision::deny(
            5,
            0,
            Duration::from_millis(retry_ms + 100),
            Some(Duration::from_millis(retry_ms)),
        )
    }

    #[test]
    fn a_denial_holds_until_its_retry_after_and_ages() {
        let cache = DenyCache::new(10);
        let ms = 1_000_000;
        cache.insert(Key::from("a"), 1000 * ms, &denied(300));
        let d = cache.get(&Key::from("a"), 1100 * ms).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        assert_eq!(d.reset_after, Duration::from_millis(300));
        assert!(cache.get(&Key::from("a"), 1300 * ms).is_none());
        assert_eq!(cache.len(), 0, "an ended denial is forgotten");
        assert!(cache.get(&Key::from("b"), 1000 * ms).is_none());
    }

    #[test]
    fn once_every_denial_has_ended_lookups_find_nothing_and_the_ended_are_forgotten() {
        let cache = DenyCache::new(64);
        let ms = 1_000_000;
        cache.insert(Key::from("a"), 0, &denied(300));
        cache.insert(Key::from("b"), 0, &denied(100));
        // Before the last end, each denial holds until its own.
        assert!(cache.get(&Key::from("b"), 99 * ms).is_some());
        assert!(cache.get(&Key::from("b"), 100 * ms).is_none());
        assert!(cache.get(&Key::from("a"), 299 * ms).is_some());
        assert_eq!(cache.len(), 1);
        // At the last end, any lookup forgets them all.
        assert!(cache.get(&Key::from("c"), 300 * ms).is_none());
        assert_eq!(cache.len(), 0);
        // A later denial holds again.
        cache.insert(Key::from("a"), 400 * ms, &denied(50));
        assert!(cache.get(&Key::from("a"), 420 * ms).is_some());
        assert!(cache.get(&Key::from("a"), 450 * ms).is_none());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn never_and_allowed_decisions_are_not_kept() {
        let cache = DenyCache::new(10);
        cache.insert(
            Key::from("never"),
            0,
            &Decision::deny(5, 0, Duration::ZERO, None),
        );
        cache.insert(
            Key::from("ok"),
            0,
            &Decision::allow(5, 4, Duration::from_secs(1)),
        );
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn a_full_cache_evicts_ended_denials_first_then_the_soonest_to_end() {
        let cache = DenyCache::new(2);
        let ms = 1_000_000;
        cache.insert(Key::from(1u64), 0, &denied(10));
        cache.insert(Key::from(2u64), 0, &denied(500));
        // Full, nothing has ended: the denial that ends first makes room.
        cache.insert(Key::from(3u64), 5 * ms, &denied(900));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&Key::from(1u64), 5 * ms).is_none());
        assert!(cache.get(&Key::from(2u64), 5 * ms).is_some());
        assert!(cache.get(&Key::from(3u64), 5 * ms).is_some());
        // 2 ends at 500 ms: past it, it is the one evicted, whatever the hand.
        cache.insert(Key::from(4u64), 600 * ms, &denied(10));
        assert!(cache.get(&Key::from(3u64), 600 * ms).is_some());
        assert!(cache.get(&Key::from(4u64), 600 * ms).is_some());
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn many_shards_hold_exactly_the_capacity() {
        let cache = DenyCache::new(1000);
        assert!(cache.shards.len() > 1, "a large cache is sharded");
        assert_eq!(cache.capacity(), 1000);
        for n in 0..10_000u64 {
            cache.insert(Key::from(n), 0, &denied(1000));
            assert!(
                cache.get(&Key::from(n), 0).is_some(),
                "the newest denial is kept"
            );
        }
        assert_eq!(cache.len(), 1000, "every shard is full, none over");
        let kept = (0..10_000u64)
            .filter(|&n| cache.get(&Key::from(n), 1).is_some())
            .count();
        assert_eq!(kept, 1000);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { key: u8, retry_ms: u64 },
        Get { key: u8 },
        Remove { key: u8 },
        Advance { ms: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8u8, 1..500u64).prop_map(|(key, retry_ms)| Op::Insert { key, retry_ms }),
            (0..8u8).prop_map(|key| Op::Get { key }),
            (0..8u8).prop_map(|key| Op::Remove { key }),
            (0..300u64).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    proptest! {
        /// Against a model that forgets nothing: the cache answers a denial only while the
        /// model's holds, with the model's wait, never more than its capacity; with room for
        /// every key it answers exactly as the model.
        #[test]
        fn never_answers_a_denial_that_has_ended_or_was_refunded(
            capacity in 1usize..12,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let ms = 1_000_000u64;
            let cache = DenyCache::new(capacity);
            let mut model: HashMap<u8, (u64, u64)> = HashMap::new();
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Insert { key, retry_ms } => {
                        cache.insert(Key::from(u64::from(key)), now, &denied(retry_ms));
                        model.insert(key, (now, now + retry_ms * ms));
                    }
                    Op::Remove { key } => {
                        cache.remove(&Key::from(u64::from(key)));
                        model.remove(&key);
                    }
                    Op::Advance { ms: by } => now += by * ms,
                    Op::Get { key } => {
                        let got = cache.get(&Key::from(u64::from(key)), now);
                        let holds = model.get(&key).filter(|&&(_, until)| until > now);
                        match (&got, holds) {
                            (Some(d), Some(&(_, until))) => {
                                prop_assert!(!d.allowed);
                                prop_assert_eq!(d.retry_after, Some(Duration::from_nanos(until - now)));
                            }
                            (Some(d), None) => prop_assert!(false, "answered {:?} for an ended denial", d),
                            (None, Some(_)) => prop_assert!(capacity < 8, "forgot a denial with room to spare"),
                            (None, None) => {}
                        }
                    }
                }
                prop_assert!(cache.len() <= capacity);
            }
        }
    }

    #[test]
    fn tiered_denials_age_every_tier() {
        let cache = DenyCache::new(2);
        let ms = 1_000_000;
        let d = denied(300).with_tiers(vec![denied(300), denied(100)]);
        cache.insert(Key::from("t"), 0, &d);
        let got = cache.get(&Key::from("t"), 50 * ms).unwrap();
        assert_eq!(got.tiers()[1].retry_after, Some(Duration::from_millis(50)));
        assert_eq!(got.retry_after, Some(Duration::from_millis(250)));
    }

    #[test]
    fn a_zero_capacity_cache_keeps_nothing() {
        let cache = DenyCache::new(0);
        cache.insert(Key::from("a"), 0, &denied(300));
        assert!(cache.get(&Key::from("a"), 0).is_none());
    }
}
