use std::time::Duration;

use super::{until, Algorithm, Outcome};
use crate::{Decision, Quota};

/// A fixed window: `limit` requests per window of `period`, counted from the key's own first
/// request.
///
/// A key's window opens at its first admitted request and lasts `period`, as the half-open
/// interval `[start, start + period)`; the first request admitted after a window has ended
/// opens the next one. Windows are per key, so keys do not all reset at the same instant. A
/// request of cost `n` is allowed iff the window's count plus `n` is at most `limit`; a denied
/// request does not count.
///
/// This is the cheapest window algorithm, and the coarsest: a client may spend a whole limit at
/// the end of one window and another at the start of the next, `2 × limit` in a short time.
/// [`SlidingWindow`](super::SlidingWindow) and [`SlidingLog`](super::SlidingLog) close that gap.
/// The quota's burst is not used.
///
/// [`aligned`](Self::aligned) makes the windows calendar windows: every key's windows start
/// at whole multiples of `period` since the UNIX epoch in UTC, so "1000 a day" resets for
/// everyone at midnight UTC and "100 an hour" on the hour.
///
/// The reported figures: `remaining = limit − count`; `reset_after` is the time until the
/// window ends (zero for a key without a window); a denied request may retry when the window
/// ends, or never, when its cost is above `limit`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{Algorithm, FixedWindow, FixedWindowState};
/// use tollgate::Quota;
///
/// let window = FixedWindow::new(&Quota::per_minute(2));
/// let s = 1_000_000_000; // one second in nanoseconds
/// let mut state = FixedWindowState::default();
/// // Decides a request and keeps the state it leaves, as a store would.
/// let mut check = |now, cost| {
///     let outcome = window.check(&state, now, cost);
///     if let Some(next) = outcome.state {
///         state = next;
///     }
///     outcome.decision
/// };
/// assert!(check(10 * s, 1).allowed); // opens [10 s, 70 s)
/// assert!(check(30 * s, 1).allowed);
/// let denied = check(40 * s, 1);
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, Some(Duration::from_secs(30)));
/// assert!(check(70 * s, 1).allowed); // opens [70 s, 130 s)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    pub(super) limit: u64,
    /// The window length in nanoseconds, at least 1.
    pub(super) period: u64,
    /// Windows start at multiples of `period` since the UNIX epoch, on the wall clock.
    aligned: bool,
}

/// A key's [`FixedWindow`] state: its window's start and count. 16 bytes per key.
///
/// The default (count 0) is a key without a window: the fresh state. A window is over once
/// `period` has passed since `start`, whatever the count.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    /// When the window opened, in nanoseconds.
    pub start: u64,
    /// The cost admitted in the window.
    pub count: u64,
}

impl FixedWindow {
    /// The algorithm for `quota`: `quota.limit()` per `quota.period()`. The burst is not used.
    pub fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            period: quota.period_ns(),
            aligned: false,
        }
    }

    /// The shortest period [`aligned`](Self::aligned) takes: one millisecond.
    pub const MIN_ALIGNED_PERIOD: Duration = Duration::from_millis(1);

    /// Calendar windows: each window is `[n × period, (n + 1) × period)` in nanoseconds since
    /// the UNIX epoch in UTC, the same for every key, instead of starting at the key's first
    /// request. A day's quota resets at midnight UTC, an hour's on the hour; the headers' `t`
    /// and `Retry-After` count down to that instant.
    ///
    /// Time is then the wall clock ([`Clock::wall_nanos`](crate::clock::Clock::wall_nanos)): the
    /// system's time in memory, the server's `TIME` in Redis (or the limiter's clock with
    /// [`RedisStore::with_caller_clock`](crate::store::RedisStore)). The wall clock may be set
    /// back or forward. Set back, a key's window reads as just opened (no time has passed since
    /// its start), so nothing more passes and the wait grows by the step; set forward past the
    /// window's end, the next window opens early, as if that time had passed. Whole seconds
    /// count from the epoch as UTC counts them (leap seconds are not counted), as `SystemTime`
    /// and Redis `TIME` do.
    ///
    /// All keys reset at the same instant, so clients that wait for it come back together:
    /// prefer per-key windows (the default) or a sliding window unless the calendar is the
    /// contract.
    ///
    /// # Panics
    ///
    /// When the period is shorter than [`MIN_ALIGNED_PERIOD`](Self::MIN_ALIGNED_PERIOD).
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use tollgate::clock::ManualClock;
    /// use tollgate::{Quota, RateLimiter};
    ///
    /// let clock = ManualClock::new();
    /// // 2026-11-24, 23:00 UTC
    /// clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_795_561_200));
    /// let limiter = RateLimiter::fixed_window(Quota::per_day(1000)).aligned().with_clock(clock.clone());
    /// let first = limiter.check_now("user-1");
    /// assert_eq!(first.reset_after, Duration::from_secs(3600)); // at midnight UTC
    /// ```
    #[must_use]
    #[track_caller]
    pub fn aligned(self) -> Self {
        assert!(
            self.period >= Self::MIN_ALIGNED_PERIOD.as_nanos() as u64,
            "FixedWindow::aligned: a period of {} ns is too short for calendar windows; use a \
             period of at least 1 ms",
            self.period
        );
        Self {
            aligned: true,
            ..self
        }
    }

    /// Whether the windows are calendar windows ([`aligned`](Self::aligned)).
    pub fn is_aligned(&self) -> bool {
        self.aligned
    }

    /// The window's count at `now`, and the window's end (exclusive, in nanoseconds), or
    /// `None` when the key has no open window. A `now` before the window's start reads as its
    /// start: no time has passed.
    #[inline]
    fn open_window(&self, state: &FixedWindowState, now: u64) -> Option<(u64, u128)> {
        let open = state.count > 0 && now.saturating_sub(state.start) < self.period;
        open.then(|| {
            let end = u128::from(state.start) + u128::from(self.period);
            (state.count, end)
        })
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn check(&self, state: &FixedWindowState, now: u64, cost: u64) -> Outcome<FixedWindowState> {
        let window = self.open_window(state, now);
        let (count, reset_after) =
            window.map_or((0, Duration::ZERO), |(count, end)| (count, until(end, now)));
        let remaining = self.limit.saturating_sub(count);
        if cost > remaining {
            // A cost above the limit never passes; any other passes once the window is over.
            let retry_after = (cost <= self.limit).then_some(reset_after);
            let decision = Decision::deny(self.limit, remaining, reset_after, retry_after);
            return Outcome::new(decision, None);
        }
        if cost == 0 {
            return Outcome::new(Decision::allow(self.limit, remaining, reset_after), None);
        }
        // A new window opens now; a calendar window began at the last multiple of the period.
        let start = match window {
            Some(_) => state.start,
            None if self.aligned => now - now % self.period,
            None => now,
        };
        let reset_after = until(u128::from(start) + u128::from(self.period), now);
        // The receipt is the window the request was counted in.
        let decision =
            Decision::allow(self.limit, remaining - cost, reset_after).with_receipt(start);
        let next = FixedWindowState {
            start,
            count: count + cost,
        };
        Outcome::new(decision, Some(next))
    }

    /// Takes `cost` back from the open window's count (never below zero); `None` when the key
    /// has no open window or `cost` is zero.
    /// Takes the admission back from its window's count, while that window is open: a request
    /// counted in a window that has closed is not given back to the next one.
    fn refund(
        &self,
        state: &FixedWindowState,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<FixedWindowState> {
        let (count, _) = self.open_window(state, now)?;
        if cost == 0 || state.start != admission.receipt() {
            return None;
        }
        Some(match count.saturating_sub(cost) {
            0 => FixedWindowState::default(),
            count => FixedWindowState { count, ..*state },
        })
    }

    const REFUNDS: bool = true;

    #[inline]
    fn is_fresh(&self, state: &FixedWindowState, now: u64) -> bool {
        self.open_window(state, now).is_none()
    }

    #[inline]
    fn wall_clock(&self) -> bool {
        self.aligned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn state(start: u64, count: u64) -> FixedWindowState {
        FixedWindowState { start, count }
    }

    #[test]
    fn hand_checked_table() {
        // 3 per 10 s.
        let window = FixedWindow::new(&Quota::new(3, Duration::from_secs(10)));
        // (start s, count, now s, cost) -> (allowed, remaining, reset_after s, retry_after s, next)
        type Case = (
            (u64, u64, u64, u64),
            (bool, u64, u64, Option<u64>, Option<(u64, u64)>),
        );
        let cases: [Case; 12] = [
            // fresh key: the request opens a window at its own time
            ((0, 0, 100, 1), (true, 2, 10, None, Some((100, 1)))),
            // the whole limit at once
            ((0, 0, 100, 3), (true, 0, 10, None, Some((100, 3)))),
            // above the limit: never
            ((0, 0, 100, 4), (false, 3, 0, None, None)),
            // peek on a fresh key
            ((0, 0, 100, 0), (true, 3, 0, None, None)),
            // peek into an open window
            ((100, 2, 104, 0), (true, 1, 6, None, None)),
            // the last request of a window
            ((100, 2, 104, 1), (true, 0, 6, None, Some((100, 3)))),
            // window full: retry when it ends
            ((100, 3, 104, 1), (false, 0, 6, Some(6), None)),
            // cost 2 with 1 left: the window must end first
            ((100, 2, 109, 2), (false, 1, 1, Some(1), None)),
            // the window's end is its first instant over: a new window opens
            ((100, 3, 110, 1), (true, 2, 10, None, Some((110, 1)))),
            // a clock before the window's start reads as the start
            ((100, 3, 95, 1), (false, 0, 15, Some(15), None)),
            ((100, 1, 95, 1), (true, 1, 15, None, Some((100, 2)))),
            // a count above the limit (a smaller quota now) reports nothing remaining
            ((100, 7, 101, 0), (true, 0, 9, None, None)),
        ];
        for ((start, count, now, cost), (allowed, remaining, reset, retry, next)) in cases {
            let before = state(start * S, count);
            let out = window.check(&before, now * S, cost);
            let d = out.decision;
            let case = format!("start={start} count={count} now={now} cost={cost}");
            assert_eq!(d.allowed, allowed, "{case}");
            assert_eq!(d.limit, 3, "{case}");
            assert_eq!(d.remaining, remaining, "{case}");
            assert_eq!(d.reset_after, Duration::from_secs(reset), "{case}");
            assert_eq!(d.retry_after, retry.map(Duration::from_secs), "{case}");
            assert_eq!(d.delay, Duration::ZERO, "{case}");
            assert_eq!(out.state, next.map(|(s, c)| state(s * S, c)), "{case}");
            let mut in_place = before;
            assert_eq!(window.check_mut(&mut in_place, now * S, cost), d, "{case}");
            assert_eq!(in_place, out.state.unwrap_or(before), "{case}");
        }
    }

    #[test]
    fn refunds_come_from_the_admissions_window_only() {
        let window = FixedWindow::new(&Quota::new(3, Duration::from_secs(10)));
        let in_window = |start| Decision::allow(3, 0, Duration::ZERO).with_receipt(start);
        let this = in_window(100 * S);
        assert_eq!(
            window.refund(&state(100 * S, 3), &this, 105 * S, 1),
            Some(state(100 * S, 2))
        );
        // Never below zero; an empty window is the fresh state.
        assert_eq!(
            window.refund(&state(100 * S, 2), &this, 105 * S, 5),
            Some(state(0, 0))
        );
        // The window is over: nothing to give back.
        assert_eq!(window.refund(&state(100 * S, 3), &this, 110 * S, 1), None);
        assert_eq!(window.refund(&state(0, 0), &this, 105 * S, 1), None);
        assert_eq!(window.refund(&state(100 * S, 3), &this, 105 * S, 0), None);
        // Counted in a window that has closed: the next window keeps its count.
        let earlier = in_window(90 * S);
        assert_eq!(
            window.refund(&state(100 * S, 3), &earlier, 105 * S, 1),
            None
        );
    }

    #[test]
    fn the_audits_window_edge() {
        // 5 a minute: four requests that do not count are admitted at 59.9 s, a new window
        // opens at 60 s and takes its 5; the four refunds land after that.
        let window = FixedWindow::new(&Quota::per_minute(5));
        let mut st = state(0, 0);
        let first = window.check(&st, 0, 1);
        st = first.state.unwrap();
        let late: Vec<Decision> = (0..4)
            .map(|_| {
                let out = window.check(&st, 59_900_000_000, 1);
                st = out.state.unwrap();
                out.decision
            })
            .collect();
        for _ in 0..5 {
            let out = window.check(&st, 60 * S, 1);
            assert!(out.decision.allowed);
            st = out.state.unwrap();
        }
        for admission in &late {
            if let Some(next) = window.refund(&st, admission, 60 * S + 1, 1) {
                st = next;
            }
        }
        assert!(!window.check(&st, 60 * S + 2, 1).decision.allowed);
    }

    #[test]
    fn freshness_follows_the_window() {
        let window = FixedWindow::new(&Quota::new(3, Duration::from_secs(10)));
        assert!(window.is_fresh(&state(0, 0), 0));
        assert!(window.is_fresh(&state(100 * S, 0), 105 * S));
        assert!(!window.is_fresh(&state(100 * S, 1), 105 * S));
        assert!(!window.is_fresh(&state(100 * S, 1), 110 * S - 1));
        assert!(window.is_fresh(&state(100 * S, 1), 110 * S));
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let window = FixedWindow::new(&Quota::new(u64::MAX, Duration::from_nanos(u64::MAX)));
        let full = state(u64::MAX, u64::MAX);
        let out = window.check(&full, u64::MAX, u64::MAX);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.reset_after, Duration::from_nanos(u64::MAX));
        assert_eq!(
            out.decision.retry_after,
            Some(Duration::from_nanos(u64::MAX))
        );
        let out = window.check(&full, 0, 1);
        assert!(!out.decision.allowed);
        let out = window.check(&state(0, 0), u64::MAX, u64::MAX);
        assert!(out.decision.allowed);
        assert_eq!(out.state, Some(state(u64::MAX, u64::MAX)));
        let small = FixedWindow::new(&Quota::per_second(1));
        let out = small.check(&state(u64::MAX, 1), u64::MAX, u64::MAX);
        assert_eq!(out.decision.retry_after, None);
        assert_eq!(out.decision.reset_after, Duration::from_secs(1));
    }
}
