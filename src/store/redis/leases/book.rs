//! A policy's book of leases on this server: the keys it tracks, the slice each holds, and
//! what the next call for a key asks of Redis.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::store::redis::connection::lock;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use tokio::sync::watch;

use super::Leases;
use crate::{Decision, Key};

/// What a check of a key asks of Redis.
pub(crate) enum Plan {
    /// A check of the request alone.
    Exact,
    /// A check that takes a slice of up to `want` units on top, giving back what an ended
    /// slice left unused; the ticket names this call to [`LeaseBook::granted`] and
    /// [`LeaseBook::done`].
    Lease {
        back: Option<GiveBack>,
        ticket: u64,
        want: u64,
    },
    /// Another call of this server is taking a slice for the key: wait for it (the receiver
    /// wakes when it ends), then spend from its slice.
    Wait(watch::Receiver<()>),
}

/// Units of an ended slice and the receipts (one per tier) they were counted under.
pub(crate) struct GiveBack {
    pub(crate) units: u64,
    pub(crate) receipts: Arc<[u64]>,
}

/// A slice being spent: what is left, until when (limiter time, ns, exclusive), and the
/// decision of the request that took it (its `remaining` what Redis had left after it).
struct Slice {
    units: u64,
    /// Units spent from the slice and not refunded into it: what a refund may put back.
    spent: u64,
    granted: u64,
    until: u64,
    /// The same end on the monotonic clock, when time comes from Redis: a slice never outlives
    /// its life in real time, whatever the limiter's clock does (a calendar window reads the
    /// wall clock, which may be set back).
    deadline: Option<Instant>,
    grant: Decision,
    receipts: Arc<[u64]>,
}

struct Entry {
    /// When the key was last checked here (limiter time, ns).
    seen: u64,
    slice: Option<Slice>,
    /// The call taking a slice for the key, if one is under way: its ticket, and the sender
    /// whose drop wakes the checks that wait for it.
    leasing: Option<(u64, watch::Sender<()>)>,
}

struct Shard {
    entries: HashMap<Key, Entry, std::hash::RandomState>,
    capacity: usize,
    /// When the shard last forgot stale entries.
    swept: u64,
}

/// How many shards a book has at most.
const MAX_SHARDS: usize = 16;

/// One policy's leases on this server.
pub(crate) struct LeaseBook {
    pub(crate) leases: Leases,
    /// The life of a bucket's slices (its lease margin, at most `max_life`), in ns; 0 for
    /// windows. A bucket's unused units go back only when nothing was admitted after the
    /// slice, so its slices are sized to what this server spent of the last one in that long.
    paced: u64,
    hasher: std::hash::RandomState,
    shards: Box<[Mutex<Shard>]>,
    tickets: AtomicU64,
}

impl LeaseBook {
    /// The book of a policy whose slices live at most `margin` ns (0: as their windows).
    pub(crate) fn new(leases: &Leases, margin: u64) -> Self {
        let count = leases.keys.clamp(1, MAX_SHARDS);
        let shards = (0..count)
            .map(|i| {
                let capacity = leases.keys / count + usize::from(i < leases.keys % count);
                Mutex::new(Shard {
                    entries: HashMap::with_hasher(std::hash::RandomState::new()),
                    capacity,
                    swept: 0,
                })
            })
            .collect();
        Self {
            leases: leases.clone(),
            paced: margin.min(leases.max_life_nanos()),
            hasher: std::hash::RandomState::new(),
            shards,
            tickets: AtomicU64::new(1),
        }
    }

    /// How many units a slice should hold, having spent `units` in `span` ns before: the whole
    /// `max_slice` for windows, whose unused units always go back; for buckets, what this
    /// server spends in fifteen sixteenths of a slice's life at that pace, so that a slice
    /// at a steady pace runs out just before it ends rather than leaving units unused, and at
    /// most twice `units`, so that a burst of checks grows slices step by step rather than
    /// stranding a large one. 0 when that is less than one unit: the key is then decided
    /// exactly.
    fn want(&self, units: u64, span: u64) -> u64 {
        let max = self.leases.max_slice;
        if self.paced == 0 {
            return max;
        }
        let most = units.saturating_mul(2).min(max);
        if span == 0 {
            return most;
        }
        let paced = u128::from(units) * u128::from(self.paced) * 15 / (u128::from(span) * 16);
        u64::try_from(paced).unwrap_or(u64::MAX).min(most)
    }

    fn shard(&self, key: &Key) -> std::sync::MutexGuard<'_, Shard> {
        let hash = self.hasher.hash_one(key);
        let at = usize::try_from(hash % self.shards.len() as u64).unwrap_or(0);
        lock(&self.shards[at])
    }

    /// The decision for a request of `cost` admitted from the key's slice, when the slice
    /// lives at `now` and holds enough.
    pub(crate) fn spend(&self, key: &Key, now: u64, cost: u64) -> Option<Decision> {
        let mut shard = self.shard(key);
        let entry = shard.entries.get_mut(key)?;
        entry.seen = entry.seen.max(now);
        let slice = entry.slice.as_mut()?;
        if !slice.lives(now) || slice.units < cost {
            return None;
        }
        slice.units -= cost;
        slice.spent += cost;
        Some(slice.standing(now))
    }

    /// What the next call for a key should ask, noting that it was checked at `now`: a lease
    /// when the key was checked here within `max_life` before (taking back an ended or short
    /// slice's units), a wait when another call is taking one (unless `waited` already), else
    /// the request alone.
    pub(crate) fn plan(&self, key: &Key, now: u64, waited: bool) -> Plan {
        let life = self.leases.max_life_nanos();
        let mut shard = self.shard(key);
        if let Some(entry) = shard.entries.get_mut(key) {
            let hot = now.saturating_sub(entry.seen) < life;
            // The pace of this server's checks of the key: one since the last, or what the
            // last slice spent (and the request that took it) since it was granted.
            let mut pace = (1, now.saturating_sub(entry.seen));
            entry.seen = entry.seen.max(now);
            if let Some((_, sender)) = &entry.leasing {
                return if waited {
                    Plan::Exact
                } else {
                    Plan::Wait(sender.subscribe())
                };
            }
            let back = entry.slice.take().and_then(|slice| {
                pace = (
                    slice.spent.saturating_add(1),
                    now.saturating_sub(slice.granted),
                );
                (slice.units > 0).then_some(GiveBack {
                    units: slice.units,
                    receipts: slice.receipts,
                })
            });
            let want = if hot { self.want(pace.0, pace.1) } else { 0 };
            if want == 0 && back.is_none() {
                return Plan::Exact;
            }
            let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
            entry.leasing = Some((ticket, watch::channel(()).0));
            return Plan::Lease { back, ticket, want };
        }
        if shard.entries.len() >= shard.capacity {
            shard.sweep(now, life);
        }
        if shard.entries.len() < shard.capacity {
            // A long key by its digest: a book holds at most Key::MAX_LEN bytes per key.
            let entry = Entry {
                seen: now,
                slice: None,
                leasing: None,
            };
            shard.entries.insert(key.clone().stored(), entry);
        }
        Plan::Exact
    }

    /// Ends the call of `ticket` for the key, whatever became of it: the checks waiting for it
    /// wake.
    pub(crate) fn done(&self, key: &Key, ticket: u64) {
        let mut shard = self.shard(key);
        if let Some(entry) = shard.entries.get_mut(key) {
            if entry.leasing.as_ref().is_some_and(|(t, _)| *t == ticket) {
                entry.leasing = None;
            }
        }
    }

    /// Keeps the slice of `units` that the call of `ticket` made at `now` took with `decision`
    /// (whose `remaining` is what Redis had left after it), living `life` ns, unless the key
    /// was reset or blocked here since the call began; returns the request's decision,
    /// counting the slice in its `remaining`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn granted(
        &self,
        key: &Key,
        ticket: u64,
        now: u64,
        deadline: Option<Instant>,
        decision: Decision,
        units: u64,
        life: u64,
    ) -> Decision {
        if units == 0 || life == 0 || !decision.allowed {
            return decision;
        }
        let life = life.min(self.leases.max_life_nanos());
        let receipts: Arc<[u64]> = decision.tiers().iter().map(Decision::receipt).collect();
        let slice = Slice {
            units,
            spent: 0,
            granted: now,
            until: now.saturating_add(life),
            deadline,
            grant: decision,
            receipts,
        };
        let standing = slice.standing(now);
        let mut shard = self.shard(key);
        let entry = shard
            .entries
            .get_mut(key)
            .filter(|entry| entry.leasing.as_ref().is_some_and(|(t, _)| *t == ticket));
        // Without the entry of this call (the key was reset or blocked here, or forgotten), the
        // slice is dropped: its units are counted in Redis, so the fleet only admits less.
        // The call's entry holds no other slice: the call took it (to give it back) when it was
        // planned, and only the call of the entry's ticket grants.
        if let Some(entry) = entry {
            entry.slice = Some(slice);
        }
        standing
    }

    /// Gives a refunded request of `cost` back to the key's slice, when the slice that admitted
    /// it (`receipts`) still lives at `now` and has spent at least `cost`; its standing then.
    pub(crate) fn refund(
        &self,
        key: &Key,
        receipts: &[u64],
        now: u64,
        cost: u64,
    ) -> Option<Decision> {
        let mut shard = self.shard(key);
        let slice = shard.entries.get_mut(key)?.slice.as_mut()?;
        if !slice.lives(now) || *slice.receipts != *receipts || slice.spent < cost {
            return None;
        }
        slice.units += cost;
        slice.spent -= cost;
        Some(slice.standing(now))
    }

    /// How many keys the book tracks.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).entries.len()).sum()
    }

    /// Ends the key's slice here (a reset or block through this server); its units are not
    /// given back.
    pub(crate) fn forget(&self, key: &Key) {
        self.shard(key).entries.remove(key);
    }
}

impl Shard {
    /// Forgets the keys not checked for `life` that hold no live slice; at most once per
    /// `life / 4`, so that a full book of live keys costs no sweep per check.
    fn sweep(&mut self, now: u64, life: u64) {
        if now.saturating_sub(self.swept) < life / 4 && self.swept != 0 {
            return;
        }
        self.swept = now.max(1);
        self.entries.retain(|_, entry| {
            let live = entry.slice.as_ref().is_some_and(|s| s.lives(now));
            live || now.saturating_sub(entry.seen) < life
        });
    }
}

impl Slice {
    /// Whether the slice may still be spent at `now`.
    fn lives(&self, now: u64) -> bool {
        now < self.until
            && self
                .deadline
                .is_none_or(|deadline| Instant::now() < deadline)
    }

    /// The decision of a request admitted from the slice at `now`: the grant's, with what the
    /// slice still holds added to `remaining` and `reset_after` counted down.
    fn standing(&self, now: u64) -> Decision {
        let passed = Duration::from_nanos(now.saturating_sub(self.granted));
        let tier = |d: &Decision| {
            Decision::allow(
                d.limit,
                d.remaining.saturating_add(self.units),
                d.reset_after.saturating_sub(passed),
            )
            .with_receipt(d.receipt())
        };
        if !self.grant.is_tiered() {
            return tier(&self.grant);
        }
        // The thread's tier list, reused once no decision holds it (as the memory store's tiers).
        let grants = self.grant.tiers();
        let tiers = Decision::tier_list(grants.len(), |list| {
            for (slot, grant) in list.iter_mut().zip(grants) {
                *slot = tier(grant);
            }
        });
        Decision::from_tiers(tiers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sprayed_book_stays_within_its_keys() {
        let book = LeaseBook::new(&Leases::default().keys(40), 0);
        for k in 0..10_000u64 {
            let key = Key::from(k);
            let _ = book.plan(&key, 1, false);
            let _ = book.plan(&key, 2, false);
            assert!(book.len() <= 40);
        }
        assert_eq!(book.len(), 40);
    }

    #[test]
    fn a_slice_lives_no_longer_than_max_life_and_only_for_its_call() {
        let book = LeaseBook::new(&Leases::default().max_life(Duration::from_nanos(100)), 0);
        let key = Key::from("hot");
        assert!(
            matches!(book.plan(&key, 5, false), Plan::Exact),
            "first seen"
        );
        let Plan::Lease {
            back: None, ticket, ..
        } = book.plan(&key, 6, false)
        else {
            panic!("leased at its second check")
        };
        assert!(
            matches!(book.plan(&key, 6, false), Plan::Wait(_)),
            "a check meanwhile waits for the call"
        );
        assert!(
            matches!(book.plan(&key, 6, true), Plan::Exact),
            "or, having waited, goes alone"
        );
        // Granted to a call that is not the key's (another ticket): dropped.
        let grant = || Decision::allow(10, 0, Duration::from_secs(1)).with_receipt(7);
        let _ = book.granted(&key, ticket + 1, 6, None, grant(), 3, 1_000);
        assert!(book.spend(&key, 6, 1).is_none());
        // A life of 1 000 ns is cut to max_life: spent before 106, not at it.
        let standing = book.granted(&key, ticket, 6, None, grant(), 3, 1_000);
        assert_eq!(standing.remaining, 3, "the slice counts in remaining");
        book.done(&key, ticket);
        assert_eq!(book.spend(&key, 105, 1).map(|d| d.remaining), Some(2));
        assert!(book.spend(&key, 106, 1).is_none(), "ended");
        // Its 2 unused units go back with the next call.
        let Plan::Lease {
            back: Some(back), ..
        } = book.plan(&key, 106, false)
        else {
            panic!("a lease giving back the ended slice")
        };
        assert_eq!((back.units, &back.receipts[..]), (2, &[7][..]));
    }

    #[test]
    fn a_buckets_slices_follow_the_servers_pace_and_a_slow_key_is_decided_exactly() {
        // Slices living 1 000 ns (the margin, under max_life).
        let book = LeaseBook::new(&Leases::default().max_slice(50), 1_000);
        let key = Key::from("paced");
        let _ = book.plan(&key, 0, false);
        // A check every 100 ns: 15/16 of 1 000 ns at that pace is 9 units, but a slice grows
        // at most twice what was spent: 2.
        let Plan::Lease {
            back: None,
            ticket,
            want,
        } = book.plan(&key, 100, false)
        else {
            panic!("leased at its second check")
        };
        assert_eq!(want, 2);
        let grant = Decision::allow(100, 50, Duration::from_secs(1)).with_receipt(7);
        let _ = book.granted(&key, ticket, 100, None, grant, 2, 1_000);
        book.done(&key, ticket);
        // Both spent by 400: 3 units (the request that took the slice too) in 300 ns, 9 at
        // that pace, at most 6; the slice ran out: nothing to give back.
        assert!(book.spend(&key, 110, 1).is_some());
        assert!(book.spend(&key, 140, 1).is_some());
        assert!(book.spend(&key, 400, 1).is_none(), "spent out");
        let Plan::Lease {
            back: None,
            ticket,
            want,
        } = book.plan(&key, 400, false)
        else {
            panic!("a new slice")
        };
        assert_eq!(want, 6);
        book.done(&key, ticket);
        // Two checks at one instant: twice what is known to be spent.
        let burst = Key::from("burst");
        let _ = book.plan(&burst, 500, false);
        assert!(matches!(
            book.plan(&burst, 500, false),
            Plan::Lease { want: 2, .. }
        ));
        // A key checked 960 ns apart would spend less than a unit of a slice: decided exactly.
        let slow = Key::from("slow");
        let _ = book.plan(&slow, 0, false);
        assert!(matches!(book.plan(&slow, 960, false), Plan::Exact));
        // Windows (no margin) always ask for max_slice.
        let windows = LeaseBook::new(&Leases::default().max_slice(50), 0);
        let _ = windows.plan(&slow, 0, false);
        assert!(matches!(
            windows.plan(&slow, 960, false),
            Plan::Lease { want: 50, .. }
        ));
    }

    #[test]
    fn a_long_key_is_kept_by_its_digest() {
        let book = LeaseBook::new(&Leases::default(), 0);
        let long = Key::from(&[7u8; 8_192][..]);
        let _ = book.plan(&long, 1, false);
        let kept: Vec<Key> = book
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .unwrap()
                    .entries
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(
            kept,
            std::slice::from_ref(&long),
            "tracked, and equal to the key"
        );
        assert!(kept[0].as_bytes().is_none(), "kept without its 8 KiB");
        assert!(matches!(book.plan(&long, 2, false), Plan::Lease { .. }));
    }

    #[test]
    fn a_refund_goes_back_into_a_slice_only_up_to_what_it_spent() {
        let book = LeaseBook::new(&Leases::default(), 0);
        let key = Key::from("hot");
        let _ = book.plan(&key, 1, false);
        let Plan::Lease {
            back: None, ticket, ..
        } = book.plan(&key, 2, false)
        else {
            panic!("leased at its second check")
        };
        let grant = Decision::allow(10, 0, Duration::from_secs(1)).with_receipt(7);
        let _ = book.granted(&key, ticket, 2, None, grant, 3, 1_000);
        book.done(&key, ticket);
        assert!(book.spend(&key, 3, 1).is_some());
        // One unit spent: a refund of 2 (or of another receipt) is Redis's to take.
        assert!(book.refund(&key, &[7], 3, 2).is_none());
        assert!(book.refund(&key, &[8], 3, 1).is_none());
        assert_eq!(book.refund(&key, &[7], 3, 1).map(|d| d.remaining), Some(3));
        assert!(book.refund(&key, &[7], 3, 1).is_none(), "refunded once");
    }
}
