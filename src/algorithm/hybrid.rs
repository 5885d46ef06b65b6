use std::time::Duration;

use super::divisor::Divisor;
use super::{Algorithm, Outcome};
use crate::{Decision, Quota};

/// The hybrid quota-linear algorithm: whole-quota windows for light clients, a smooth rate for
/// heavy ones.
///
/// Linear limiters (GCRA, the token bucket) are slow to stop a client that is only somewhat
/// over its rate: one sending at `a` times the rate gets about `limit × a / (a − 1)` requests
/// before the first denial, because its full bucket refills while it drains. This algorithm
/// admits exactly `limit` requests in the key's first window, and still smooths heavy clients
/// rather than letting them burst at every window's start. It has two modes:
///
/// - **Bursty.** A key's first request opens a fixed window of one `period` holding `limit`
///   tokens (windows start at each key's own first request, not on the clock). Requests take
///   tokens freely; when the window ends, the next request opens a new one with a full quota.
/// - **Smooth.** The request that takes a bursty window's last token switches the key to a
///   bucket that refills continuously at `limit / period`, starting with a penalty: it is
///   negative by the tokens the rest of the window would have brought, plus one, so that the
///   next request passes exactly when the window would have ended and no earlier. The bucket
///   refills with time whether requests are allowed or denied; when it holds a whole quota again
///   the key is back to fresh, and its next request opens a bursty window.
///
/// This is the pseudocode of Tony Finch's "hybrid quota-linear" rate limiter, step for step,
/// for requests of cost 1. A request of cost `n`:
///
/// - opening a window takes `n` of its `limit` tokens (the pseudocode's `quota − 1` for cost
///   1), and never switches modes, even when it takes them all: then the key waits for the next
///   window, as a quota of 1 always does;
/// - in a bursty window, passes if the window has `n` tokens left, and switches to smooth mode
///   if those were the last ones; otherwise it waits for the window to end;
/// - in smooth mode, passes if the bucket holds `n` tokens;
/// - costs of more than `limit` never pass (`retry_after` is `None`); cost 0 peeks.
///
/// The decision reports `limit` as the quota's limit (the burst option is not used), and
/// `reset_after` as the end of the bursty window, or the time until the smooth bucket holds a
/// whole quota.
///
/// All arithmetic is in integer nanoseconds: one smooth-mode token is the emission interval
/// `T = period / limit`, rounded up (see [`Quota::emission_interval`]). The bucket then refills
/// by one nanosecond per nanosecond, never faster than the quota; the penalty
/// `−(time left in the window) + T` still leaves exactly one token at the window's end; and the
/// return to bursty mode waits for `limit × T ≥ period` nanoseconds of tokens. Rounding can
/// delay a request by a few nanoseconds, never admit one the exact algorithm would deny.
///
/// ```
/// use tollgate::algorithm::{Algorithm, Hybrid, HybridState};
/// use tollgate::Quota;
///
/// const S: u64 = 1_000_000_000;
/// let hybrid = Hybrid::new(&Quota::per_minute(3));
/// let mut state = HybridState::default();
/// for _ in 0..3 {
///     state = hybrid.check(&state, 0, 1).state.unwrap(); // the whole quota at once
/// }
/// assert!(!hybrid.check(&state, 59 * S, 1).decision.allowed); // not before the window ends
/// state = hybrid.check(&state, 60 * S, 1).state.unwrap(); // then one...
/// assert!(!hybrid.check(&state, 61 * S, 1).decision.allowed); // ...and one every 20 s
/// assert!(hybrid.check(&state, 80 * S, 1).decision.allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hybrid {
    pub(super) limit: u64,
    /// The window, in nanoseconds.
    pub(super) period: u64,
    /// Emission interval `T`: nanoseconds per smooth-mode token.
    interval: u64,
    /// A whole quota of smooth-mode tokens, `limit × T` ns (up to 2^65).
    quota: i128,
    /// Divides by `interval` without a hardware division.
    per_interval: Divisor,
}

/// A key's state under [`Hybrid`]. 24 bytes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HybridState {
    /// A key never seen, or forgotten.
    #[default]
    Fresh,
    /// In a fixed window.
    Bursty {
        /// When the window opened, in nanoseconds since the clock's origin.
        start: u64,
        /// Tokens left in the window.
        tokens: u64,
    },
    /// Refilling continuously.
    Smooth {
        /// The key's last admitted request, in nanoseconds since the clock's origin.
        time: u64,
        /// When the bucket was (or will be) empty: at `now` it holds `now − empty_at` ns of
        /// tokens, one token per emission interval, and less than nothing before `empty_at`.
        empty_at: u64,
    },
}

fn nanos(ns: i128) -> Duration {
    Duration::from_nanos(u64::try_from(ns.max(0)).unwrap_or(u64::MAX))
}

impl Hybrid {
    /// The hybrid algorithm for `quota` (its `burst` is not used).
    pub fn new(quota: &Quota) -> Self {
        let interval = quota.emission_interval_ns();
        Self {
            limit: quota.limit(),
            period: quota.period_ns(),
            interval,
            quota: i128::from(quota.limit()) * i128::from(interval),
            per_interval: Divisor::new(interval),
        }
    }

    /// Nanoseconds per smooth-mode token: the emission interval `T`.
    #[doc(hidden)]
    pub fn interval_nanos(&self) -> u64 {
        self.interval
    }

    /// Reads `state` at `now`: the time it was read at (`now`, or the state's own time when
    /// `now` is earlier: no time elapsed), and the state, or `Fresh` once it is back to fresh
    /// (a window over, a full smooth bucket).
    fn read(&self, state: &HybridState, now: u64) -> (u64, HybridState) {
        let (at, fresh) = match *state {
            HybridState::Fresh => (now, true),
            HybridState::Bursty { start, .. } => {
                let at = now.max(start);
                (at, at - start >= self.period)
            }
            HybridState::Smooth { time, empty_at } => {
                let at = now.max(time);
                (at, in_bucket(empty_at, at) >= self.quota)
            }
        };
        (at, if fresh { HybridState::Fresh } else { *state })
    }

    /// `(remaining, reset_after)` for a state [`read`](Self::read) at `at`.
    fn report(&self, state: HybridState, at: u64) -> (u64, Duration) {
        match state {
            HybridState::Fresh => (self.limit, Duration::ZERO),
            HybridState::Bursty { start, tokens } => (tokens, self.window_left(start, at)),
            HybridState::Smooth { empty_at, .. } => {
                let tokens = in_bucket(empty_at, at);
                // 0 <= tokens < at <= u64::MAX when it is positive.
                let whole = u64::try_from(tokens).map_or(0, |t| self.per_interval.divide(t));
                (whole, nanos(self.quota - tokens))
            }
        }
    }

    /// The time from `at` until the window opened at `start` ends (at least 1 ns while it is
    /// open).
    fn window_left(&self, start: u64, at: u64) -> Duration {
        Duration::from_nanos(self.period - (at - start))
    }

    /// The state after a request of `cost` on `state` [`read`](Self::read) at `now` (`None`
    /// for a peek), or its denial's `retry_after`, measured from `now`.
    fn next(
        &self,
        state: HybridState,
        now: u64,
        cost: u64,
    ) -> Result<Option<HybridState>, Option<Duration>> {
        if cost > self.limit {
            return Err(None);
        }
        if cost == 0 {
            return Ok(None);
        }
        let next = match state {
            // A new window, with this request's tokens taken.
            HybridState::Fresh => HybridState::Bursty {
                start: now,
                tokens: self.limit - cost,
            },
            // The window's last tokens: switch to smooth mode with one token at the window's
            // end, `start + period`.
            HybridState::Bursty { start, tokens } if tokens == cost => {
                let window_end = u128::from(start) + u128::from(self.period);
                // Past the clock's range the bucket stays empty: later is the safe side.
                let empty_at =
                    u64::try_from(window_end - u128::from(self.interval)).unwrap_or(u64::MAX);
                HybridState::Smooth {
                    time: now,
                    empty_at,
                }
            }
            HybridState::Bursty { start, tokens } if tokens > cost => HybridState::Bursty {
                start,
                tokens: tokens - cost,
            },
            // Too few tokens in the window: the next one opens with a full quota.
            HybridState::Bursty { start, .. } => return Err(Some(self.window_left(start, now))),
            HybridState::Smooth { empty_at, .. } => {
                let tokens = in_bucket(empty_at, now);
                // `cost <= limit`, so `take <= quota`.
                let take = i128::from(cost) * i128::from(self.interval);
                if tokens < take {
                    // `take - tokens` is sooner than the bucket's return to a whole quota.
                    return Err(Some(nanos(take - tokens)));
                }
                // `empty_at + take <= now`: it fits.
                let empty_at = u64::try_from(i128::from(empty_at) + take).unwrap_or(now);
                HybridState::Smooth {
                    time: now,
                    empty_at,
                }
            }
        };
        Ok(Some(next))
    }
}

/// The smooth bucket's tokens at `at`, in nanoseconds (negative before `empty_at`).
fn in_bucket(empty_at: u64, at: u64) -> i128 {
    i128::from(at) - i128::from(empty_at)
}

impl Algorithm for Hybrid {
    type State = HybridState;

    fn check(&self, state: &HybridState, now: u64, cost: u64) -> Outcome<HybridState> {
        let (at, read) = self.read(state, now);
        let mut outcome = match self.next(read, at, cost) {
            Err(retry_after) => {
                let (remaining, reset_after) = self.report(read, at);
                let decision = Decision::deny(self.limit, remaining, reset_after, retry_after);
                Outcome::new(decision, None)
            }
            Ok(next) => {
                // The state after the request, read at the same time: it has taken the
                // request's tokens, so it is never fresh.
                let after = next.map_or(read, |next| self.read(&next, at).1);
                let (remaining, reset_after) = self.report(after, at);
                Outcome::new(Decision::allow(self.limit, remaining, reset_after), next)
            }
        };
        // A reading before the state's own time (readings out of order across threads) is
        // decided at the state's time; the waits it reports are measured from the reading, so
        // that a client told to retry then is not early.
        let skew = Duration::from_nanos(at - now);
        if !skew.is_zero() {
            let decision = &mut outcome.decision;
            decision.reset_after = decision.reset_after.saturating_add(skew);
            decision.retry_after = decision.retry_after.map(|r| r.saturating_add(skew));
        }
        outcome
    }

    fn is_fresh(&self, state: &HybridState, now: u64) -> bool {
        matches!(self.read(state, now).1, HybridState::Fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn bursty(start_ms: u64, tokens: u64) -> HybridState {
        HybridState::Bursty {
            start: start_ms * MS,
            tokens,
        }
    }

    fn smooth(time_ms: u64, empty_at_ms: u64) -> HybridState {
        HybridState::Smooth {
            time: time_ms * MS,
            empty_at: empty_at_ms * MS,
        }
    }

    #[test]
    fn state_is_three_words() {
        assert_eq!(std::mem::size_of::<HybridState>(), 24);
    }

    #[test]
    fn hand_checked_table() {
        // 4 per second: windows of 1 s, smooth tokens of T = 250 ms, a whole quota is 1000 ms.
        let hybrid = Hybrid::new(&Quota::per_second(4));
        let fresh = HybridState::Fresh;
        // (state, now ms, cost) -> (allowed, remaining, reset_after ms, retry_after ms, next)
        type Case = (
            (HybridState, u64, u64),
            (bool, u64, u64, Option<u64>, Option<HybridState>),
        );
        #[rustfmt::skip]
        let cases: [Case; 21] = [
            // A bursty window: the first request opens it at 1000 ms with 3 tokens left...
            ((fresh, 1000, 1), (true, 3, 1000, None, Some(bursty(1000, 3)))),
            ((bursty(1000, 3), 1100, 1), (true, 2, 900, None, Some(bursty(1000, 2)))),
            ((bursty(1000, 2), 1200, 1), (true, 1, 800, None, Some(bursty(1000, 1)))),
            // ...the last token switches to smooth: 700 ms left in the window, so the bucket
            // holds 250 - 700 = -450 ms and is empty at 1750 ms, one token at 2000 ms (the
            // window's end) and a whole quota at 2750 ms.
            ((bursty(1000, 1), 1300, 1), (true, 0, 1450, None, Some(smooth(1300, 1750)))),
            // Smooth: 150 ms of tokens at 1900 ms, the next token at 2000 ms.
            ((smooth(1300, 1750), 1900, 1), (false, 0, 850, Some(100), None)),
            ((smooth(1300, 1750), 1999, 1), (false, 0, 751, Some(1), None)),
            ((smooth(1300, 1750), 2000, 1), (true, 0, 1000, None, Some(smooth(2000, 2000)))),
            // 600 ms of tokens (2.4) at 2600 ms: take one, 1.4 left.
            ((smooth(2000, 2000), 2600, 1), (true, 1, 650, None, Some(smooth(2600, 2250)))),
            // 750 ms (3 tokens) at 3000 ms: cost 2 leaves one; cost 4 waits for the quota.
            ((smooth(2600, 2250), 3000, 2), (true, 1, 750, None, Some(smooth(3000, 2750)))),
            ((smooth(2600, 2250), 3000, 4), (false, 3, 250, Some(250), None)),
            // 999 ms of tokens: still smooth, 3.996 tokens, one taken.
            ((smooth(2600, 2250), 3249, 1), (true, 2, 251, None, Some(smooth(3249, 2500)))),
            // A whole quota at 3250 ms: back to bursty, a new window.
            ((smooth(2600, 2250), 3250, 1), (true, 3, 1000, None, Some(bursty(3250, 3)))),
            // A window that has ended opens a new one.
            ((bursty(1000, 1), 2000, 1), (true, 3, 1000, None, Some(bursty(2000, 3)))),
            // Cost n: too few tokens waits for the window's end; exactly enough switches modes.
            ((bursty(1000, 2), 1500, 3), (false, 2, 500, Some(500), None)),
            ((bursty(1000, 2), 1500, 2), (true, 0, 1250, None, Some(smooth(1500, 1750)))),
            // A whole quota at once opens a window and empties it; the key stays bursty.
            ((fresh, 1000, 4), (true, 0, 1000, None, Some(bursty(1000, 0)))),
            ((bursty(1000, 0), 1999, 1), (false, 0, 1, Some(1), None)),
            // More than the quota never passes.
            ((fresh, 1000, 5), (false, 4, 0, None, None)),
            ((bursty(1000, 2), 1500, 5), (false, 2, 500, None, None)),
            // Peeks, even during the penalty, change nothing.
            ((smooth(1300, 1750), 1500, 0), (true, 0, 1250, None, None)),
            ((smooth(1300, 1750), 5000, 0), (true, 4, 0, None, None)),
        ];
        for ((state, now, cost), (allowed, remaining, reset, retry, next)) in cases {
            let out = hybrid.check(&state, now * MS, cost);
            let d = out.decision;
            let case = format!("{state:?} now={now} cost={cost}");
            assert_eq!(d.allowed, allowed, "{case}");
            assert_eq!(d.limit, 4, "{case}");
            assert_eq!(d.remaining, remaining, "{case}");
            assert_eq!(d.reset_after, Duration::from_millis(reset), "{case}");
            assert_eq!(d.retry_after, retry.map(Duration::from_millis), "{case}");
            assert_eq!(d.delay, Duration::ZERO, "{case}");
            assert_eq!(out.state, next, "{case}");
            let before = hybrid.check(&state, now * MS, 0).decision.reset_after;
            assert_eq!(
                hybrid.is_fresh(&state, now * MS),
                before.is_zero(),
                "{case}"
            );
        }
    }

    #[test]
    fn a_quota_of_one_is_fixed_windows() {
        let hybrid = Hybrid::new(&Quota::per_second(1));
        let s = 1_000 * MS;
        let state = hybrid.check(&HybridState::Fresh, 0, 1).state.unwrap();
        assert_eq!(state, bursty(0, 0));
        let denied = hybrid.check(&state, s - 1, 1);
        assert_eq!(denied.decision.retry_after, Some(Duration::from_nanos(1)));
        assert_eq!(hybrid.check(&state, s, 1).state, Some(bursty(1000, 0)));
    }

    #[test]
    fn time_before_the_state_counts_as_no_time_elapsed() {
        let hybrid = Hybrid::new(&Quota::per_second(4));
        // Read at its own time, 1300 ms, whatever `now` says.
        let out = hybrid.check(&bursty(1000, 1), 900 * MS, 1);
        assert_eq!(out.state, Some(smooth(1000, 1750)));
        let out = hybrid.check(&smooth(2600, 2250), 2000 * MS, 1);
        assert_eq!(out.state, Some(smooth(2600, 2500)));
        assert!(!hybrid.is_fresh(&smooth(2600, 2250), 0));
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let quotas = [
            Quota::new(1, Duration::from_nanos(u64::MAX)),
            Quota::new(u64::MAX, Duration::from_nanos(u64::MAX)),
            // `limit × T` is above u64::MAX; only the text form builds such a quota.
            format!("{}/{}ns;burst=1", u64::MAX / 2, u64::MAX)
                .parse()
                .unwrap(),
            Quota::new(u64::MAX, Duration::from_nanos(1)),
        ];
        let states = [
            HybridState::Fresh,
            HybridState::Bursty {
                start: u64::MAX,
                tokens: u64::MAX,
            },
            HybridState::Bursty {
                start: u64::MAX,
                tokens: 1,
            },
            HybridState::Smooth {
                time: u64::MAX,
                empty_at: 0,
            },
            HybridState::Smooth {
                time: 0,
                empty_at: u64::MAX,
            },
        ];
        for quota in &quotas {
            let hybrid = Hybrid::new(quota);
            for state in &states {
                for now in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
                    for cost in [0, 1, 2, u64::MAX / 2, u64::MAX] {
                        let out = hybrid.check(state, now, cost);
                        let d = out.decision;
                        assert!(d.allowed || out.state.is_none());
                        assert!(!d.allowed || d.retry_after.is_none());
                        let _ = hybrid.is_fresh(state, now);
                    }
                }
            }
        }
        // The window ending past the clock's range leaves the smooth bucket empty at its end.
        let hybrid = Hybrid::new(&quotas[1]);
        let state = HybridState::Bursty {
            start: u64::MAX,
            tokens: 1,
        };
        let out = hybrid.check(&state, u64::MAX, 1);
        assert_eq!(
            out.state,
            Some(HybridState::Smooth {
                time: u64::MAX,
                empty_at: u64::MAX,
            })
        );
    }
}
