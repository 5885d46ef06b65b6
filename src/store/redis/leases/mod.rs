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

use std::time::Duration;

pub(crate) use self::book::{GiveBack, LeaseBook, Plan};

mod book;

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
/// - A charge (a cost settled above its reservation, [`RateLimiter::settle`](crate::RateLimiter::settle))
///   ends the key's slice on the server it goes through (its unused units stay counted) and
///   stops that server's leases of the table, as a refund does: a key in debt is denied there
///   at once. Slices other servers took before the charge were counted in Redis before it and
///   are spent until they end (within the margin, and `max_life`): the fleet never admits more
///   than the quota and what was overspent, but those servers may admit the key from them
///   meanwhile.
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
    pub(super) share: u64,
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

    pub(super) fn max_life_nanos(&self) -> u64 {
        crate::clock::saturating_nanos(self.max_life)
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
}
