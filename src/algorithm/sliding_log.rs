use std::time::Duration;

pub use self::state::SlidingLogState;
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
/// each. The work per check does not grow with the limit: each entry keeps the running total
/// of the cost logged up to it, so the cost in the window is one subtraction, an admission
/// drops the entries that have left the window from the front (each once) and appends, and a
/// denial finds the entry it must wait for by a search from the oldest (`O(log k)` for the
/// `k`-th entry: one step for a request of cost 1). A [refund](Algorithm::refund) rewrites
/// the totals on the shorter side of the refunded entry. Prefer it for small and moderate
/// limits (logins, password resets, expensive jobs; a shared store may bound the limit);
/// for large ones [`SlidingWindow`](super::SlidingWindow) estimates the same window in fixed
/// memory.
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
/// // Decides a request and keeps the state it leaves, as a store would.
/// let mut check = |now, cost| {
///     let outcome = log.check(&state, now, cost);
///     if let Some(next) = outcome.state {
///         state = next;
///     }
///     outcome.decision
/// };
/// assert!(check(10 * s, 1).allowed);
/// assert!(check(50 * s, 1).allowed);
/// let denied = check(60 * s, 1);
/// assert_eq!(denied.retry_after, Some(Duration::from_secs(10))); // when the 10 s entry leaves
/// assert!(check(70 * s, 1).allowed);
/// assert!(!check(109 * s, 1).allowed); // 50 s and 70 s are still in
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    pub(super) limit: u64,
    /// The window length in nanoseconds, at least 1.
    pub(super) period: u64,
}

impl SlidingLog {
    /// The algorithm for `quota`: `quota.limit()` in any window of `quota.period()`. The burst
    /// is not used.
    pub fn new(quota: &Quota) -> Self {
        Self {
            limit: quota.limit(),
            period: quota.period_ns(),
        }
    }

    /// Reads the log at `now`: the instant the window ends at (`now`, or the newest entry's
    /// time when the clock reads earlier than that: no time has passed since), the index of
    /// the oldest entry in the window `(at − period, at]`, and the cost in the window.
    /// `O(1)` while the oldest entry is in the window, and `O(log k)` when `k` entries have
    /// left it since the last admission.
    #[inline]
    fn read(&self, state: &SlidingLogState, now: u64) -> (u64, usize, u64) {
        let at = state.newest().map_or(now, |t| t.max(now));
        let first_live = state.first_live(at, self.period);
        (at, first_live, state.cost_from(first_live))
    }

    /// The wait from `now` until an entry at `t` leaves the window.
    #[inline]
    fn until_expiry(&self, t: u64, now: u64) -> Duration {
        super::until(u128::from(t) + u128::from(self.period), now)
    }

    /// The decision, and the instant to log the request at when it is admitted with a cost.
    #[inline]
    fn evaluate(&self, state: &SlidingLogState, now: u64, cost: u64) -> (Decision, Option<u64>) {
        let (at, first_live, used) = self.read(state, now);
        let remaining = self.limit.saturating_sub(used);
        let live = first_live < state.len();
        let reset_after = match state.newest() {
            Some(t) if live => self.until_expiry(t, now),
            _ => Duration::ZERO,
        };
        if cost > remaining {
            let retry_after = (cost <= self.limit)
                .then(|| {
                    // Wait until the oldest entries have freed `used + cost − limit`: at most
                    // `used`, as `cost` is at most `limit`.
                    let need = used - (self.limit - cost);
                    let index = state.covering(first_live, need);
                    state.time(index).map(|t| self.until_expiry(t, now))
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
    /// the window: amortised `O(1)`, as each entry is dropped once. Allocates only when the
    /// log outgrows its capacity. The receipt is the time the request was logged at.
    #[inline]
    fn admit(&self, state: &mut SlidingLogState, at: u64, cost: u64) -> u64 {
        state.drop_before(state.first_live(at, self.period));
        state.push(at, cost);
        at
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn check(&self, state: &SlidingLogState, now: u64, cost: u64) -> Outcome<SlidingLogState> {
        let evaluated = self.evaluate(state, now, cost);
        super::admitted(state, evaluated, |next, at| self.admit(next, at, cost))
    }

    /// Drops the entries that have left the window and logs the request in place, without
    /// allocating once the log has reached its working size.
    #[inline]
    fn check_mut(&self, state: &mut SlidingLogState, now: u64, cost: u64) -> Decision {
        match self.evaluate(state, now, cost) {
            (decision, Some(at)) => decision.with_receipt(self.admit(state, at, cost)),
            (decision, None) => decision,
        }
    }

    /// Takes up to `cost` back from the admission's entry (the entry logged at its receipt),
    /// while it is in the window; `None` when it has left the window, `cost` is zero or the
    /// decision was a denial. Admissions at one instant share an entry, so `cost` must be what
    /// the admission cost (as the layer passes it): more would take from the others.
    fn refund(
        &self,
        state: &SlidingLogState,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<SlidingLogState> {
        if cost == 0 || !admission.allowed {
            return None;
        }
        let (_, first_live, _) = self.read(state, now);
        let index = state.find(first_live, admission.receipt())?;
        let mut next = state.clone();
        next.drop_before(first_live);
        next.take(index - first_live, cost);
        Some(if next.is_empty() {
            SlidingLogState::default()
        } else {
            next
        })
    }

    const REFUNDS: bool = true;

    #[inline]
    fn is_fresh(&self, state: &SlidingLogState, now: u64) -> bool {
        state
            .newest()
            .is_none_or(|t| now.saturating_sub(t) >= self.period)
    }
}

mod state;
#[cfg(test)]
mod tests;
