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
/// The price is memory: the log holds one entry per distinct instant with an admitted request
/// still in the window (equal instants share an entry), so at most `limit` entries, 16 bytes
/// each. Prefer it for small limits (logins, password resets, expensive jobs); for large ones
/// [`SlidingWindow`](super::SlidingWindow) estimates the same window in fixed memory.
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
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn log(entries: &[(u64, u64)]) -> SlidingLogState {
        SlidingLogState {
            entries: entries.iter().map(|&(t, c)| (t * S, c)).collect(),
        }
    }

    #[test]
    fn hand_checked_table() {
        // 3 per 10 s.
        let algo = SlidingLog::new(&Quota::new(3, Duration::from_secs(10)));
        // (log (s, cost), now s, cost) -> (allowed, remaining, reset_after s, retry_after s, next)
        type Case<'a> = (
            (&'a [(u64, u64)], u64, u64),
            (bool, u64, u64, Option<u64>, Option<&'a [(u64, u64)]>),
        );
        let cases: [Case<'_>; 13] = [
            // fresh key
            ((&[], 100, 1), (true, 2, 10, None, Some(&[(100, 1)]))),
            ((&[], 100, 3), (true, 0, 10, None, Some(&[(100, 3)]))),
            // above the limit: never
            ((&[], 100, 4), (false, 3, 0, None, None)),
            // peeks
            ((&[], 100, 0), (true, 3, 0, None, None)),
            ((&[(100, 1), (104, 1)], 105, 0), (true, 1, 9, None, None)),
            // the same instant shares an entry
            (
                (&[(100, 1), (104, 1)], 104, 1),
                (true, 0, 10, None, Some(&[(100, 1), (104, 2)])),
            ),
            // full: retry when the oldest entry leaves, at 110 s
            (
                (&[(100, 1), (104, 2)], 105, 1),
                (false, 0, 9, Some(5), None),
            ),
            // cost 2 with 0 left needs both entries gone: 104 s + 10 s
            (
                (&[(100, 1), (104, 2)], 105, 2),
                (false, 0, 9, Some(9), None),
            ),
            // cost 2 with 1 left needs the oldest gone, whatever else came in
            (
                (&[(100, 1), (104, 1)], 105, 2),
                (false, 1, 9, Some(5), None),
            ),
            // the window is (now − 10 s, now]: the entry at 100 s is out at 110 s, and dropped
            (
                (&[(100, 1), (104, 2)], 110, 1),
                (true, 0, 10, None, Some(&[(104, 2), (110, 1)])),
            ),
            // ... and in 1 ns earlier
            (
                (&[(100, 1), (104, 2)], 109, 1),
                (false, 0, 5, Some(1), None),
            ),
            // a clock before the newest entry reads as that entry's time
            (
                (&[(100, 1), (104, 1)], 90, 1),
                (true, 0, 24, None, Some(&[(100, 1), (104, 2)])),
            ),
            // everything out of the window: fresh again, the old entries dropped
            (
                (&[(100, 1), (104, 2)], 200, 2),
                (true, 1, 10, None, Some(&[(200, 2)])),
            ),
        ];
        for ((entries, now, cost), (allowed, remaining, reset, retry, next)) in cases {
            let before = log(entries);
            let out = algo.check(&before, now * S, cost);
            let d = out.decision;
            let case = format!("log={entries:?} now={now} cost={cost}");
            assert_eq!(d.allowed, allowed, "{case}");
            assert_eq!(d.limit, 3, "{case}");
            assert_eq!(d.remaining, remaining, "{case}");
            assert_eq!(d.reset_after, Duration::from_secs(reset), "{case}");
            assert_eq!(d.retry_after, retry.map(Duration::from_secs), "{case}");
            assert_eq!(d.delay, Duration::ZERO, "{case}");
            assert_eq!(out.state, next.map(log), "{case}");
            let mut in_place = before.clone();
            assert_eq!(algo.check_mut(&mut in_place, now * S, cost), d, "{case}");
            assert_eq!(in_place, out.state.unwrap_or(before), "{case}");
        }
    }

    #[test]
    fn refunds_take_from_the_newest_entries() {
        let algo = SlidingLog::new(&Quota::new(5, Duration::from_secs(10)));
        let state = log(&[(95, 1), (100, 2), (104, 2)]);
        assert_eq!(
            algo.refund(&state, 105 * S, 1),
            Some(log(&[(100, 2), (104, 1)]))
        );
        assert_eq!(algo.refund(&state, 105 * S, 3), Some(log(&[(100, 1)])));
        assert_eq!(algo.refund(&state, 105 * S, 9), Some(log(&[])));
        assert_eq!(algo.refund(&state, 105 * S, 0), None);
        assert_eq!(algo.refund(&state, 114 * S, 1), None);
        assert_eq!(algo.refund(&log(&[]), 114 * S, 1), None);
    }

    #[test]
    fn freshness_follows_the_newest_entry() {
        let algo = SlidingLog::new(&Quota::new(3, Duration::from_secs(10)));
        assert!(algo.is_fresh(&log(&[]), 0));
        let state = log(&[(100, 1), (104, 1)]);
        assert!(!algo.is_fresh(&state, 50 * S));
        assert!(!algo.is_fresh(&state, 114 * S - 1));
        assert!(algo.is_fresh(&state, 114 * S));
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let algo = SlidingLog::new(&Quota::new(u64::MAX, Duration::from_nanos(u64::MAX)));
        let out = algo.check(&SlidingLogState::default(), u64::MAX, u64::MAX);
        assert!(out.decision.allowed);
        assert_eq!(out.decision.reset_after, Duration::from_nanos(u64::MAX));
        let full = out.state.unwrap_or_default();
        let out = algo.check(&full, u64::MAX, u64::MAX);
        assert!(!out.decision.allowed);
        assert_eq!(
            out.decision.retry_after,
            Some(Duration::from_nanos(u64::MAX))
        );
        let out = algo.check(&full, 0, 1);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.remaining, 0);
        let small = SlidingLog::new(&Quota::per_second(1));
        let out = small.check(&full, 0, 1);
        assert_eq!(
            out.decision.retry_after,
            Some(Duration::from_nanos(u64::MAX))
        );
        assert_eq!(small.check(&full, 0, 2).decision.retry_after, None);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn state_size() {
        assert_eq!(std::mem::size_of::<SlidingLogState>(), 32);
    }
}
