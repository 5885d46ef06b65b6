use std::collections::VecDeque;
use std::time::Duration;

use super::{Algorithm, Outcome};
use crate::{Decision, Quota};

/// A sliding log: the exact window, kept as the times of the requests a key was allowed.
///
/// A request of cost `n` at `now` is allowed iff the cost admitted in the half-open window
/// `(now − period, now]` plus `n` is at most `limit`. A request admitted at `t` so counts up to
/// and excluding `t + period`: its capacity comes back at exactly `t + period`. Over any span of
/// `period`, a key is never admitted more than `limit`, and never denied while it is below: no
/// boundary effects and no estimate. A denied request is not logged. The quota's burst is not
/// used.
///
/// The price is memory and time: the log holds one entry per distinct instant with an admitted
/// request still in the window (equal instants share an entry), so at most `limit` entries, 16
/// bytes each, and a decision reads the entries in the window. Prefer it for small limits
/// (logins, password resets, expensive jobs); for large ones
/// [`SlidingWindow`](super::SlidingWindow) estimates the same window in fixed memory and time.
///
/// The reported figures: `remaining = limit − cost in the window`; `reset_after` is the time
/// until the newest entry leaves the window; a denied request may retry once enough of the
/// oldest entries have left it, or never, when its cost is above `limit`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{Algorithm, SlidingLog, SlidingLogState};
/// use tollgate::Quota;
///
/// let log = SlidingLog::new(&Quota::per_minute(2));
/// let s = 1_000_000_000; // one second in nanoseconds
/// let mut state = SlidingLogState::default();
/// assert!(log.check_mut(&mut state, 10 * s, 1).allowed);
/// assert!(log.check_mut(&mut state, 50 * s, 1).allowed);
/// let denied = log.check_mut(&mut state, 60 * s, 1);
/// assert_eq!(denied.retry_after, Some(Duration::from_secs(10))); // when the 10 s entry leaves
/// assert!(log.check_mut(&mut state, 70 * s, 1).allowed);
/// assert!(!log.check_mut(&mut state, 109 * s, 1).allowed); // 50 s and 70 s are still in
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    limit: u64,
    /// The window length in nanoseconds, at least 1.
    period: u64,
}

/// A key's [`SlidingLog`] state: `(time, cost)` of its admitted requests, oldest first, one
/// entry per instant.
///
/// 32 bytes per key, plus 16 bytes per entry of the log's capacity on the heap: at most `limit`
/// entries are in use (every entry holds a cost of at least 1 and the window at most `limit`),
/// and the capacity grows by doubling. The default (an empty log) is the fresh state and holds
/// no heap memory. Entries that have left the window are dropped when the next request is
/// admitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    entries: VecDeque<(u64, u64)>,
}

impl SlidingLogState {
    /// The log's `(time in nanoseconds, cost)` entries, oldest first. Entries that have left the
    /// window may remain until the next admitted request.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// How many entries the log holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest entry's time.
    fn newest(&self) -> Option<u64> {
        self.entries.back().map(|&(t, _)| t)
    }
}

/// A log read at one instant.
struct Reading {
    /// The instant the window ends at: `now`, or the newest entry's time when the clock reads
    /// earlier than that (no time has passed since).
    at: u64,
    /// The index of the oldest entry in the window `(at − period, at]`.
    first_live: usize,
    /// The cost in the window.
    used: u128,
}

impl SlidingLog {
    /// The algorithm for `quota`: `quota.limit()` in any window of `quota.period()`. The burst
    /// is not used.
    pub fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            // `Quota` guarantees a period of at least 1 ns that fits in a u64.
            period: u64::try_from(quota.period().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        }
    }

    /// The limit and the period in nanoseconds, for the Redis script.
    #[cfg(feature = "redis")]
    pub(crate) fn parts(&self) -> [u64; 2] {
        [self.limit, self.period]
    }

    #[inline]
    fn read(&self, state: &SlidingLogState, now: u64) -> Reading {
        let at = state.newest().map_or(now, |t| t.max(now));
        // Entries are in time order, so those out of the window are a prefix.
        let first_live = state
            .entries
            .partition_point(|&(t, _)| at.saturating_sub(t) >= self.period);
        let used = state
            .entries
            .range(first_live..)
            .map(|&(_, c)| u128::from(c))
            .sum();
        Reading {
            at,
            first_live,
            used,
        }
    }

    /// The wait from `now` until an entry at `t` leaves the window.
    #[inline]
    fn until_expiry(&self, t: u64, now: u64) -> Duration {
        let wait = (u128::from(t) + u128::from(self.period)).saturating_sub(u128::from(now));
        Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// The decision, and the instant to log the request at when it is admitted with a cost.
    #[inline]
    fn evaluate(&self, state: &SlidingLogState, now: u64, cost: u64) -> (Decision, Option<u64>) {
        let Reading {
            at,
            first_live,
            used,
        } = self.read(state, now);
        let limit = u128::from(self.limit);
        // At most `limit`, so it fits.
        let remaining = u64::try_from(limit.saturating_sub(used)).unwrap_or(0);
        let live = state.entries.len() > first_live;
        let reset_after = match state.newest() {
            Some(t) if live => self.until_expiry(t, now),
            _ => Duration::ZERO,
        };
        if cost > remaining {
            let retry_after = (cost <= self.limit)
                .then(|| {
                    // Wait until the oldest entries have freed `used + cost − limit`.
                    let need = used + u128::from(cost) - limit;
                    let mut freed = 0u128;
                    state.entries.range(first_live..).find_map(|&(t, c)| {
                        freed += u128::from(c);
                        (freed >= need).then(|| self.until_expiry(t, now))
                    })
                })
                .flatten();
            let decision = Decision::deny(self.limit, remaining, reset_after, retry_after);
            return (decision, None);
        }
        if cost == 0 {
            return (Decision::allow(self.limit, remaining, reset_after), None);
        }
        let reset_after = self.until_expiry(at, now);
        let decision = Decision::allow(self.limit, remaining - cost, reset_after);
        (decision, Some(at))
    }

    /// Logs `cost` at `at` (not before the newest entry), dropping the entries that have left
    /// the window. Allocates only when the log outgrows its capacity.
    #[inline]
    fn admit(&self, state: &mut SlidingLogState, at: u64, cost: u64) {
        let entries = &mut state.entries;
        while entries
            .front()
            .is_some_and(|&(t, _)| at.saturating_sub(t) >= self.period)
        {
            entries.pop_front();
        }
        match entries.back_mut() {
            Some((t, c)) if *t == at => *c = c.saturating_add(cost),
            _ => entries.push_back((at, cost)),
        }
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn check(&self, state: &SlidingLogState, now: u64, cost: u64) -> Outcome<SlidingLogState> {
        let (decision, admit_at) = self.evaluate(state, now, cost);
        let next = admit_at.map(|at| {
            let mut next = state.clone();
            self.admit(&mut next, at, cost);
            next
        });
        Outcome::new(decision, next)
    }

    /// Updates the log in place: an admitted request drops the entries that have left the
    /// window and logs itself, without allocating once the log has reached its working size.
    #[inline]
    fn check_mut(&self, state: &mut SlidingLogState, now: u64, cost: u64) -> Decision {
        let (decision, admit_at) = self.evaluate(state, now, cost);
        if let Some(at) = admit_at {
            self.admit(state, at, cost);
        }
        decision
    }

    fn with_quota(&self, quota: &Quota) -> Self {
        Self::new(quota)
    }

    /// Takes `cost` back from the newest entries in the window (newest first, never below
    /// zero); `None` when the window is empty or `cost` is zero.
    fn refund(&self, state: &SlidingLogState, now: u64, cost: u64) -> Option<SlidingLogState> {
        let reading = self.read(state, now);
        if cost == 0 || reading.used == 0 {
            return None;
        }
        let mut next = state.clone();
        next.entries.drain(..reading.first_live);
        let mut left = cost;
        while left > 0 {
            let Some((_, c)) = next.entries.back_mut() else {
                break;
            };
            let take = left.min(*c);
            *c -= take;
            left -= take;
            if *c == 0 {
                next.entries.pop_back();
            }
        }
        Some(if next.entries.is_empty() {
            SlidingLogState::default()
        } else {
            next
        })
    }

    #[inline]
    fn is_fresh(&self, state: &SlidingLogState, now: u64) -> bool {
        state
            .newest()
            .is_none_or(|t| now.saturating_sub(t) >= self.period)
    }
}

#[cfg(test)]
mod tests;
