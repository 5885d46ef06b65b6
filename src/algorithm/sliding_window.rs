use self::frame::Frame;
use super::few::Few;
use super::{Algorithm, Outcome};
use crate::{Decision, Quota};

mod frame;

/// A sliding window, estimated from per-window counters in fixed memory.
///
/// Each key's time is cut into windows of `period`, counted from the key's first request (no
/// grid is shared across keys). The cost admitted in the window `(now − period, now]` is
/// estimated from the current window's count and the previous one's, weighted by how much of
/// the previous window is still inside:
///
/// `estimate = previous × (period − elapsed) / period + current`,
///
/// where `elapsed` is the time since the current window began. A request of cost `n` is allowed
/// iff `estimate + n ≤ limit`; a denied request does not count. The comparison is exact: it is
/// multiplied out in 128-bit integers, never rounded. After a sustained overload a client gets
/// requests at the allowed rate rather than a whole limit at each window's start, as with a
/// [`FixedWindow`](super::FixedWindow); the estimate assumes the previous window's requests were
/// spread evenly over it. The quota's burst is not used.
///
/// [`sub_windows(k)`](Self::sub_windows) cuts each period into `k` sub-windows of `period / k`
/// (exactly, whatever the division leaves over) and keeps a counter for each of the last
/// `k + 1`. The `k` newest (the current sub-window and the `k − 1` before it) lie wholly inside
/// the window and count in full; the oldest straddles the window's start and counts for the
/// fraction of it still inside, `(period/k − elapsed) / (period/k)`, with `elapsed` the time
/// since the current sub-window began. `k = 1` is the two-window estimate above; a larger `k`
/// gets closer to the exact [`SlidingLog`](super::SlidingLog), as only the oldest counter, a
/// `k`-th of the window, is estimated.
///
/// The reported figures: `remaining` is the largest number of requests of cost 1 that would pass
/// now, `⌊limit − estimate⌋`; `reset_after` is the time until every admitted request is out of
/// the estimate (up to `period × (k + 1) / k` after the newest); a denied request may retry at
/// the first instant the estimate lets it through, or never, when its cost is above `limit`.
/// The estimate only falls as time passes, so that instant is exact.
///
/// A clock reading before the key's newest admitted request reads as that request's time: no
/// time has passed.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{Algorithm, SlidingWindow, SlidingWindowState};
/// use tollgate::Quota;
///
/// let window = SlidingWindow::new(&Quota::per_minute(10));
/// let s = 1_000_000_000; // one second in nanoseconds
/// let mut state = SlidingWindowState::default();
/// // Decides a request and keeps the state it leaves, as a store would.
/// let check = |state: &mut SlidingWindowState, now, cost| {
///     let outcome = window.check(state, now, cost);
///     if let Some(next) = outcome.state {
///         *state = next;
///     }
///     outcome.decision
/// };
/// // The key's first request opens its first window, [0 s, 60 s): 10 there.
/// assert!(check(&mut state, 0, 10).allowed);
/// // 15 s into the next window, 3/4 of the previous one is still inside: 10 × 3/4 = 7.5.
/// let d = check(&mut state, 75 * s, 2);
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 0); // 7.5 + 2 = 9.5
/// // One more passes once 7.5 + 2 + 1 ≤ 10, that is when the previous window weighs 7.
/// assert_eq!(window.check(&state, 75 * s, 1).decision.retry_after, Some(Duration::from_secs(3)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    pub(super) limit: u64,
    /// The window length in nanoseconds, at least 1.
    pub(super) period: u64,
    /// Sub-windows per period, `1..=MAX_SUB_WINDOWS`.
    sub_windows: usize,
}

/// A key's [`SlidingWindow`] state: where its windows begin, its newest admitted request's
/// time and its counters.
///
/// 40 bytes per key, the two-window estimate's two counters included; with `k > 1`
/// sub-windows, `8 × (k + 1)` bytes more on the heap for the counters. The default is the
/// fresh state and holds no heap memory. A state kept with another number of sub-windows reads as fresh.
#[doc(hidden)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    /// A sub-window boundary: the start of the period that holds the newest counter.
    base: u64,
    /// The newest admitted request's time.
    last: u64,
    /// The counts of the last `k + 1` sub-windows, oldest first, the newest being the
    /// sub-window of `last`. Empty in the default state.
    counts: Few<u64>,
}

impl SlidingWindowState {
    /// The cost admitted in each of the last `k + 1` sub-windows, oldest first, up to the
    /// sub-window of the newest admitted request. Empty for the default state.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

impl SlidingWindow {
    /// The most sub-windows per period: 64, which keeps a key's counters to 520 bytes.
    pub const MAX_SUB_WINDOWS: usize = 64;

    /// The two-window estimate for `quota`: `quota.limit()` per `quota.period()`. The burst is
    /// not used.
    pub fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            period: quota.period_ns(),
            sub_windows: 1,
        }
    }

    /// Keeps `k` counters per period instead of one, for a closer estimate of the window (see
    /// the type's documentation); `k = 1` is the default two-window estimate. Each key holds
    /// `k + 1` counters.
    ///
    /// # Panics
    ///
    /// When `k` is zero or above [`MAX_SUB_WINDOWS`](Self::MAX_SUB_WINDOWS).
    #[must_use]
    #[track_caller]
    pub fn sub_windows(mut self, k: usize) -> Self {
        assert!(
            (1..=Self::MAX_SUB_WINDOWS).contains(&k),
            "tollgate::SlidingWindow::sub_windows: {k} must be from 1 to {}",
            Self::MAX_SUB_WINDOWS
        );
        self.sub_windows = k;
        self
    }

    /// The number of sub-windows per period.
    pub fn sub_window_count(&self) -> usize {
        self.sub_windows
    }

    /// The decision, and where an admitted request of a positive cost goes (`None`: the
    /// state stays as it is): how many counters were live (0 for a fresh key, whose windows
    /// begin now), and the current sub-window's index.
    #[inline]
    fn evaluate(
        &self,
        state: &SlidingWindowState,
        now: u64,
        cost: u64,
    ) -> (Decision, Option<(usize, u128)>) {
        let (base, frame) = match self.frame(state, now) {
            Some(frame) => (state.base, frame),
            // Fresh: nothing weighs in; a first request opens the key's windows at `now`.
            None => (now, Frame::FRESH),
        };
        let (partial, full) = self.split(&frame, 0);
        let weight = u128::from(self.period) - frame.offset;
        if !self.fits(partial, weight, full, cost) {
            let remaining = self.remaining(&frame, 0);
            let reset_after = self.reset_after(base, &frame, 0, now);
            let retry_after =
                (cost <= self.limit).then(|| self.retry_after(base, &frame, cost, now));
            let decision = Decision::deny(self.limit, remaining, reset_after, retry_after);
            return (decision, None);
        }
        let remaining = self.remaining(&frame, cost);
        let reset_after = self.reset_after(base, &frame, cost, now);
        let place = (frame.live.len(), frame.index);
        (
            Decision::allow(self.limit, remaining, reset_after),
            (cost > 0).then_some(place),
        )
    }

    /// Counts an admitted `cost` at `now` where [`evaluate`](Self::evaluate) placed it: moves
    /// the counters up to the current sub-window and adds to it. Allocates only for a key that
    /// had no counters.
    ///
    /// The receipt is a time in the sub-window the request was counted in.
    #[inline]
    fn admit(
        &self,
        state: &mut SlidingWindowState,
        place: (usize, u128),
        now: u64,
        cost: u64,
    ) -> u64 {
        let k = self.sub_windows;
        let (live, index) = place;
        if live == 0 {
            // A new grid of windows, beginning now.
            if state.counts.len() == k + 1 {
                state.counts.fill(0);
            } else {
                state.counts = Few::filled(k + 1, 0);
            }
            state.base = now;
            state.last = now;
            state.counts[k] = cost;
            return now;
        }
        let passed = k + 1 - live;
        state.counts.copy_within(passed.., 0);
        state.counts[k + 1 - passed..].fill(0);
        state.counts[k] = state.counts[k].saturating_add(cost);
        // Move the base up by whole periods, so the newest sub-window's index stays below `k`
        // and every product above stays small.
        let periods = frame::div_rem(index, self.k()).0;
        let shift = periods * u128::from(self.period);
        state.base = state
            .base
            .saturating_add(u64::try_from(shift).unwrap_or(u64::MAX));
        state.last = now.max(state.last);
        state.last
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn check(
        &self,
        state: &SlidingWindowState,
        now: u64,
        cost: u64,
    ) -> Outcome<SlidingWindowState> {
        let evaluated = self.evaluate(state, now, cost);
        super::admitted(state, evaluated, |next, place| {
            self.admit(next, place, now, cost)
        })
    }

    /// Updates the counters in place, without allocating once the key has them.
    #[inline]
    fn check_mut(&self, state: &mut SlidingWindowState, now: u64, cost: u64) -> Decision {
        match self.evaluate(state, now, cost) {
            (decision, Some(place)) => decision.with_receipt(self.admit(state, place, now, cost)),
            (decision, None) => decision,
        }
    }

    /// Takes the admission back from the counter it was added to, while that counter still
    /// weighs in: a request counted in a sub-window that has left the window is not given
    /// back to a newer one.
    fn refund(
        &self,
        state: &SlidingWindowState,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<SlidingWindowState> {
        let frame = self.frame(state, now)?;
        if cost == 0 {
            return None;
        }
        let counter = self.counter_of(state, &frame, admission.receipt())?;
        let mut next = state.clone();
        let slot = next.counts.get_mut(counter)?;
        if *slot == 0 {
            return None;
        }
        *slot -= cost.min(*slot);
        let first_live = state.counts.len() - frame.live.len();
        let any = next.counts.get(first_live..)?.iter().any(|&c| c > 0);
        Some(if any {
            next
        } else {
            SlidingWindowState::default()
        })
    }

    const REFUNDS: bool = true;

    #[inline]
    fn is_fresh(&self, state: &SlidingWindowState, now: u64) -> bool {
        self.frame(state, now).is_none()
    }
}

#[cfg(test)]
mod tests;
