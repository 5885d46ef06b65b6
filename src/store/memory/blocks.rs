//! Blocked keys: keys denied until a time whatever their state
//! ([`RateLimiter::block`](crate::RateLimiter::block)), bounded like the table beside them.
//!
//! Checks read one atomic word first, the latest end of any block held: while no block is
//! live (the common case) a check pays that load and nothing else. Writes (blocks and resets)
//! are rare and take one lock in turn; lookups take a shard's read lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Duration;

use hashbrown::HashTable;

use super::hasher::KeyHasher;
use super::shards::{all_but_lightest, shard_count};
use crate::{Decision, Key};

/// How many shards the lookups spread over (fewer for a small bound).
const SHARDS: usize = 16;

/// One shard's blocked keys, each with the end of its block.
type Shard = RwLock<HashTable<(Key, u64)>>;

/// The blocked keys of one policy, each with the end of its block (ns on the limiter's clock).
pub(crate) struct Blocks {
    /// The latest end of any block held, 0 when none is held: a check at or past it has no
    /// block to look for.
    horizon: AtomicU64,
    shards: Box<[Shard]>,
    /// The most blocks one shard holds.
    per_shard: usize,
    /// Keyed: clients choose the keys they are blocked by (bans of many keys included).
    hasher: KeyHasher,
    /// Taken by every write; holds how many blocks are held (ended ones included).
    writing: Mutex<usize>,
    /// How many times a key was lifted (reset) here: a refund of an admission made before a
    /// reset must not give away what a later admission took.
    lifts: AtomicU64,
}

/// `standing` (a key's, consuming nothing) as the denial of a key blocked from `now` until
/// `until`: denied until the block ends, or, for a key in debt, until the debt is paid back
/// if that is later (a client told to retry when the block ends would be denied again).
pub(crate) fn blocked_until(standing: Decision, now: u64, until: u64) -> Decision {
    let left = Duration::from_nanos(until - now);
    let left = match standing.retry_after {
        Some(debt) if !standing.allowed => left.max(debt),
        _ => left,
    };
    standing.blocked_for(left)
}

impl Blocks {
    /// `standing` (a key's, consuming nothing: a peek, or after a refund or a charge) as `key`'s answer at
    /// `now`: as it is, or denied while the key is blocked ([`blocked_until`]).
    pub(crate) fn hold(&self, key: &Key, now: u64, standing: Decision) -> Decision {
        match self.until(key, now) {
            Some(until) => blocked_until(standing, now, until),
            None => standing,
        }
    }

    /// Room for at most `max_keys` blocks (at least one).
    pub(crate) fn new(max_keys: usize) -> Self {
        let max = max_keys.max(1);
        // At least 16 blocks a shard: a full shard forgets the block that ends soonest, so a
        // shard of a few would forget a long block for any newcomer.
        let count = shard_count(max, SHARDS);
        Self {
            horizon: AtomicU64::new(0),
            shards: (0..count).map(|_| RwLock::new(HashTable::new())).collect(),
            per_shard: max / count,
            hasher: KeyHasher::new(),
            writing: Mutex::new(0),
            lifts: AtomicU64::new(0),
        }
    }

    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[(hash >> 32) as usize % self.shards.len()]
    }

    /// Whether any block may hold at `now`: one load, and the only work a check does while no
    /// block is live.
    #[inline]
    pub(crate) fn any(&self, now: u64) -> bool {
        now < self.horizon.load(Ordering::Acquire)
    }

    /// The end of `key`'s block when it is blocked at `now`.
    pub(crate) fn until(&self, key: &Key, now: u64) -> Option<u64> {
        if !self.any(now) {
            return None;
        }
        let hash = self.hasher.hash(key);
        let shard = self
            .shard(hash)
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let &(_, until) = shard.find(hash, |e| e.0 == *key)?;
        (until > now).then_some(until)
    }

    /// Blocks `key` until `until`, or keeps its block when that ends later. A block that ends
    /// by `now` changes nothing. A full shard first drops the blocks that have ended, then the
    /// eighth of its blocks that end first.
    pub(crate) fn block(&self, key: &Key, now: u64, until: u64) {
        if until <= now {
            return;
        }
        let mut held = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let hash = self.hasher.hash(key);
        let mut shard = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = shard.find_mut(hash, |e| e.0 == *key) {
            entry.1 = entry.1.max(until);
        } else {
            if shard.len() >= self.per_shard {
                let before = shard.len();
                make_room(&mut shard, self.per_shard, now);
                *held -= before - shard.len();
            }
            let hasher = &self.hasher;
            // The table keeps a long key's digest, never its bytes.
            shard.insert_unique(hash, (key.clone().stored(), until), |e| hasher.hash(&e.0));
            *held += 1;
        }
        self.horizon.fetch_max(until, Ordering::AcqRel);
    }

    /// How many times a key was lifted here ([`lift`](Self::lift)).
    pub(crate) fn lifts(&self) -> u64 {
        self.lifts.load(Ordering::Acquire)
    }

    /// Lifts `key`'s block, if any (a reset, for a layer's own blocks).
    pub(crate) fn lift(&self, key: &Key) {
        self.lifts.fetch_add(1, Ordering::AcqRel);
        let mut held = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let hash = self.hasher.hash(key);
        let mut shard = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Ok(entry) = shard.find_entry(hash, |e| e.0 == *key) {
            entry.remove();
            *held -= 1;
        }
        if *held == 0 {
            // No block left: checks skip the lookup again.
            self.horizon.store(0, Ordering::Release);
        }
    }

    /// How many blocks are held (ended ones included until they make room).
    pub(crate) fn len(&self) -> usize {
        *self.writing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Drops the blocks that have ended by `now`, then, while the shard is still at `limit`, the
/// eighth of its blocks that end first.
fn make_room(shard: &mut HashTable<(Key, u64)>, limit: usize, now: u64) {
    shard.retain(|e| e.1 > now);
    let len = shard.len();
    if len < limit {
        return;
    }
    let ends = shard.iter().map(|e| e.1).collect();
    let mut keep = all_but_lightest(ends, (limit / 8).clamp(1, len));
    shard.retain(|e| keep(e.1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_holds_until_its_end_and_a_shorter_one_never_shortens_it() {
        let blocks = Blocks::new(100);
        let k = Key::from("k");
        assert_eq!(blocks.until(&k, 0), None);
        blocks.block(&k, 0, 100);
        blocks.block(&k, 10, 50);
        assert_eq!(blocks.until(&k, 10), Some(100));
        assert_eq!(blocks.until(&k, 99), Some(100));
        assert_eq!(blocks.until(&k, 100), None);
        blocks.block(&k, 100, 300);
        assert_eq!(blocks.until(&k, 200), Some(300));
        assert_eq!(blocks.until(&Key::from("other"), 200), None);
        blocks.lift(&k);
        assert_eq!(blocks.until(&k, 200), None);
        assert_eq!(blocks.horizon.load(Ordering::Relaxed), 0, "no block left");
    }

    #[test]
    fn a_block_that_ends_by_now_changes_nothing() {
        let blocks = Blocks::new(100);
        let k = Key::from(7u64);
        blocks.block(&k, 50, 50);
        blocks.block(&k, 50, 10);
        assert_eq!(blocks.len(), 0);
        assert_eq!(blocks.until(&k, 0), None);
    }

    #[test]
    fn many_blocks_never_outgrow_the_bound_and_ended_ones_go_first() {
        let max = 1_000;
        let blocks = Blocks::new(max);
        // Short blocks, then long ones: the short ones have ended and make room.
        for n in 0..max as u64 {
            blocks.block(&Key::from(n), 0, 10);
        }
        for n in 0..10 * max as u64 {
            let key = Key::from(format!("client-{n}").as_str());
            blocks.block(&key, 20, 1_000_000 + n);
            assert!(blocks.len() <= max, "{} blocks held", blocks.len());
            assert_eq!(
                blocks.until(&key, 20),
                Some(1_000_000 + n),
                "the newest is kept"
            );
        }
        // The blocks that end last are the ones kept.
        let last = Key::from(format!("client-{}", 10 * max - 1).as_str());
        assert!(blocks.until(&last, 30).is_some());
        let first = Key::from("client-0");
        assert_eq!(blocks.until(&first, 30), None);
    }
}
