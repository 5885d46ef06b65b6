//! Local leases: a server that sees a key often takes a slice of the key's budget from Redis in
//! the call that decides one of its requests, and admits the next requests from the slice
//! without a round trip while the slice lasts.
//!
//! A slice is an ordinary admission of a larger cost in Redis, so every unit of it is counted in
//! the key's shared state before it is spent here. It lives only as long as spending it later
//! changes no decision: to the end of the fixed window it was counted in, or of the sliding
//! window's sub-window, or a bucket's lease margin, during which the bucket is decided with that
//! margin less (see [`Leases`]); never longer than [`Leases::max_life`]. Unused units go back to
//! Redis with the key's next call once the slice ended or ran short.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use tokio::sync::watch;

use crate::{Decision, Key};

/// Local leases on a [`RedisStore`](super::RedisStore) ([`local_leases`](super::RedisStore::local_leases)):
/// how large a slice of a hot key's budget a server takes, how long it keeps it, and how many
/// keys it tracks.
///
/// A key is hot on a server from its second check there within [`max_life`](Self::max_life).
/// Its next call to Redis decides the request and takes, on top of the request's cost, a slice
/// of what is left: at most [`max_slice`](Self::max_slice) units and at most
/// `1 / share` of what the key has left after the request (one call admits at most
/// `left / share + cost`). The server admits the key's next requests from the slice, with no
/// round trip, until it is spent or its life ends; then the next call takes another.
///
/// Which algorithms lease, and why exactly:
///
/// - **Fixed window**: a slice lives to the end of the window it was counted in. Every request
///   in a window counts alike, so a unit counted at the slice's start and spent later in the
///   same window admits exactly what one request decided then would.
/// - **Sliding window**: a slice lives to the end of the sub-window it was counted in. Within a
///   sub-window the estimate only falls as time passes (the straddling counter weighs less),
///   and a unit counted in the sub-window counts exactly as one spent later in it.
/// - **GCRA and the token bucket** (without [`max_delay`](crate::RateLimiter::max_delay)): a
///   bucket drains with time, so a unit counted when the slice is taken and spent later may
///   find the bucket drained by what it would not have drained with the unit spent then (it
///   was empty meanwhile): the fleet could admit up to that much time's worth of units past
///   the burst. So a slice lives at most the key's **lease margin** M: a sixteenth of the
///   bucket's burst window (`burst × period / limit`), at most 1 s, rounded down to whole
///   units (a bucket whose margin is under one unit, a burst below 16, is decided exactly).
///   While slices may be out, the key is decided, **on every server, leasing or not**, with its
///   burst smaller by the margin's units (a sixteenth of the burst at most). The margin is
///   kept in the key's state in Redis; it lifts, and the whole burst is back, once the bucket
///   has stood empty for M after the last slice ended. Counting a unit at most M early lets
///   the bucket drain by at most M more than counting it when spent, which the margin covers:
///   every unit spent passes the algorithm too. A single request costing more than the burst
///   less the margin is denied while the margin holds.
///
///   A bucket's unused units go back only when nothing was admitted after the slice (its
///   receipt is still the bucket's last); otherwise they stay counted, which only denies more.
///   So a bucket's slices are sized to this server's pace on the key: fifteen sixteenths of a
///   slice's life at the pace of its last slice (or of the gap between the key's first two
///   checks here), and at most twice what the last one spent, so that a steady pace runs a
///   slice out just before it ends and a burst of checks grows slices step by step. A key
///   whose pace would spend less than one unit of a slice is decided exactly.
///
///   Leased bucket states carry a field that earlier versions of tollgate refuse as corrupt:
///   turn leases on once every server runs this version, and before going back to an earlier
///   version, turn them off and let the keys' states expire (at most the burst window and the
///   margin after their last request).
/// - **Tiers** of these: the slice is taken from every tier at once, and lives to the end of
///   the earliest tier's (sub-)window or margin.
/// - **The leaky bucket, shaped GCRA and token buckets (`max_delay`), the sliding log, the
///   hybrid**: decided exactly, one call per request, with or without leases. A request
///   taken from a slice would pass without the wait a shaped or queued request gets, and the
///   log keeps each request's own time; the hybrid has no lease module.
///
/// So with leases, **every request the fleet admits is one the algorithm admits** given every
/// admission before it, on every server: the fleet never admits more than the quota, whatever
/// the number of servers. What leases change is only who may be denied: a unit held in one
/// server's slice is not available to another until it is given back, so a key may be denied
/// on one server while another holds units (at most `1 / share` of what was left when each
/// slice was taken). Slices end with their (sub-)window or after `max_life`, whichever comes
/// first; their unused units go back to Redis with the key's next call on that server.
///
/// Two things take a key past what the shared state says, and the guarantee holds around them
/// as follows:
///
/// - **Refunds.** A refund that empties a key starts its window again at the key's next
///   admission; Redis cannot see that while slices are out (it counts their units). So a table
///   whose admissions are refunded does not lease, but for calendar-aligned fixed windows
///   ([`FixedWindow::aligned`](crate::algorithm::FixedWindow::aligned)), which no refund moves:
///   a layer with [`count_if`](crate::RateLimitLayer::count_if) tells its table where it is
///   built. A [`RateLimiter`](crate::RateLimiter) used without a layer tells it on its first
///   refund; call [`RedisTable::expect_refunds`](super::RedisTable::expect_refunds) before
///   its first check instead, on every server, or slices taken before the first refund may
///   outlive a window the refunds started again. Per-key plans of a layer with `count_if`
///   are told where they are made. Every table that shares a key's state (one policy name,
///   or equal unnamed quotas, on several layers or servers) must be told: one that leases
///   while another refunds the same state brings the problem back.
/// - **A reset through another server (or through this one while a call giving back units is
///   on its way), or the key's state lost in Redis** (evicted, a failover that lost writes,
///   deleted by hand). The slices other servers hold are spent until they
///   end (within `max_life`) on top of the fresh state; on a calendar window, whose start does
///   not change, their unused units may also go back to the fresh state later in the same
///   window. Either way the key gets at most the units those slices held beyond its quota,
///   once per reset.
///
/// What else a leased key sees:
///
/// - `remaining` in a decision served from a slice is what Redis had left after the slice was
///   taken plus what the slice still holds: other servers' admissions since may have lowered
///   the first part. `reset_after` counts down from the grant. A bucket's `remaining` counts
///   against its burst less the margin while the margin holds, on every server.
/// - A [block](crate::layer::Handle::block) or reset made through this server ends the key's
///   slice here, at once and again when Redis has it. One made through another server reaches
///   this server when the slice ends: within `max_life` (1 s by default, as a denial of a
///   denial remembered by [`deny_cache`](super::RedisStore::deny_cache)).
/// - A refund whose receipts are those of the key's live slice goes back into the slice, up to
///   what the slice has spent; otherwise to Redis, as for any request.
/// - Peeks ask Redis, which counts the slices as spent.
/// - A denial this server remembers ([`deny_cache`](super::RedisStore::deny_cache)) may
///   outlast what units another server gives back, by at most a second: it only denies longer
///   than Redis would.
/// - While a live layer carries usage over after
///   [`Handle::set_quotas`](crate::layer::Handle::set_quotas), its keys are decided exactly.
/// - When Redis fails, a slice already taken is still spent (its units are counted in Redis);
///   other requests get the [failure policy](super::OnFailure)'s answer. With
///   [`OnFailure::Local`](super::OnFailure::Local), a server may so admit what its slice held
///   on top of what its local table admits.
/// - A slice lives by the limiter's clock and, when time comes from Redis, by the monotonic
///   clock too: a wall clock set back (calendar windows read it) does not lengthen it. Redis's
///   clock jumping forward by J while a bucket's slices are out may let them be spent up to
///   J's worth of units past the burst, once.
/// - A layer's [ban](crate::layer::Ban) counters are not leased: a ban comes after the stated
///   number of denials, on every server.
/// - While one call takes a slice for a key, this server's other checks of the key wait for
///   it, at most the store's [`timeout`](super::RedisStore::timeout) (a call's future held
///   but not polled holds them that long).
/// - A server tracks at most [`keys`](Self::keys) keys; when its book is full, keys it does not
///   track are decided exactly. Clients cannot grow it beyond that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    max_slice: u64,
    share: u64,
    max_life: Duration,
    keys: usize,
}

impl Default for Leases {
    /// Slices of at most 1 000 units and an eighth of what is left, living at most 1 s;
    /// 10 000 keys tracked per policy.
    fn default() -> Self {
        Self {
            max_slice: 1_000,
            share: 8,
            max_life: Duration::from_secs(1),
            keys: 10_000,
        }
    }
}

impl Leases {
    /// The most units one slice holds (1 000 by default).
    ///
    /// # Panics
    ///
    /// When `units` is 0: leases would take nothing. Leave leases off instead.
    #[must_use]
    #[track_caller]
    pub fn max_slice(mut self, units: u64) -> Self {
        assert!(
            units > 0,
            "tollgate::Leases::max_slice: 0 units would lease nothing; give at least 1, or do \
             not call RedisStore::local_leases"
        );
        self.max_slice = units;
        self
    }

    /// A slice takes at most `1 / share` of what the key has left after the request (8 by
    /// default): the larger `share`, the less one server holds that others might need, and the
    /// more calls to Redis.
    ///
    /// # Panics
    ///
    /// When `share` is 0.
    #[must_use]
    #[track_caller]
    pub fn share(mut self, share: u64) -> Self {
        assert!(
            share > 0,
            "tollgate::Leases::share: 0 is not a share; give 1 (a slice may take all that is \
             left) or more (8 by default)"
        );
        self.share = share;
        self
    }

    /// The longest a slice lives (1 s by default), however long its window: the longest a
    /// block or reset made through another server takes to reach a key leased here, and the
    /// longest unused units stay out of other servers' reach.
    ///
    /// # Panics
    ///
    /// When `life` is zero.
    #[must_use]
    #[track_caller]
    pub fn max_life(mut self, life: Duration) -> Self {
        assert!(
            !life.is_zero(),
            "tollgate::Leases::max_life: a zero life would end every slice at once; give a \
             positive duration (1 s by default)"
        );
        self.max_life = life;
        self
    }

    /// How many keys one policy's book tracks on this server (10 000 by default); keys beyond
    /// it are decided exactly. Each takes a few hundred bytes while tracked. When the book is
    /// full, the keys not checked for `max_life` that hold no live slice make room for new ones.
    ///
    /// # Panics
    ///
    /// When `keys` is 0.
    #[must_use]
    #[track_caller]
    pub fn keys(mut self, keys: usize) -> Self {
        assert!(
            keys > 0,
            "tollgate::Leases::keys: a book of 0 keys would lease nothing; give at least 1, or \
             do not call RedisStore::local_leases"
        );
        self.keys = keys;
        self
    }

    pub(super) fn share_of_left(&self) -> u64 {
        self.share
    }

    pub(super) fn max_life_nanos(&self) -> u64 {
        u64::try_from(self.max_life.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// What a check of a key asks of Redis.
pub(super) enum Plan {
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
pub(super) struct GiveBack {
    pub(super) units: u64,
    pub(super) receipts: Arc<[u64]>,
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

impl Entry {
    fn new(seen: u64) -> Self {
        Self {
            seen,
            slice: None,
            leasing: None,
        }
    }
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
pub(super) struct LeaseBook {
    leases: Leases,
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
    pub(super) fn new(leases: &Leases, margin: u64) -> Self {
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

    pub(super) fn leases(&self) -> &Leases {
        &self.leases
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
        self.shards[at]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The decision for a request of `cost` admitted from the key's slice, when the slice
    /// lives at `now` and holds enough.
    pub(super) fn spend(&self, key: &Key, now: u64, cost: u64) -> Option<Decision> {
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
    pub(super) fn plan(&self, key: &Key, now: u64, waited: bool) -> Plan {
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
            shard.entries.insert(key.clone().stored(), Entry::new(now));
        }
        Plan::Exact
    }

    /// Ends the call of `ticket` for the key, whatever became of it: the checks waiting for it
    /// wake.
    pub(super) fn done(&self, key: &Key, ticket: u64) {
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
    pub(super) fn granted(
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
        let receipts: Arc<[u64]> = if !decision.is_tiered() {
            Arc::from([decision.receipt()])
        } else {
            decision.tiers().iter().map(Decision::receipt).collect()
        };
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
    pub(super) fn refund(
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
    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    /// Ends the key's slice here (a reset or block through this server); its units are not
    /// given back.
    pub(super) fn forget(&self, key: &Key) {
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

    fn refusal(f: impl FnOnce() -> Leases + std::panic::UnwindSafe) -> String {
        let panic = std::panic::catch_unwind(f).unwrap_err();
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    }

    #[test]
    fn a_lease_that_would_take_nothing_is_refused_naming_the_setting() {
        type Make = fn() -> Leases;
        let cases: [(Make, &str); 4] = [
            (|| Leases::default().max_slice(0), "max_slice"),
            (|| Leases::default().share(0), "share"),
            (|| Leases::default().max_life(Duration::ZERO), "max_life"),
            (|| Leases::default().keys(0), "keys"),
        ];
        for (make, setting) in cases {
            let message = refusal(make);
            assert!(message.contains(setting), "{setting}: {message}");
        }
    }

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
