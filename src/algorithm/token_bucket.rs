use std::time::Duration;

use super::{Algorithm, Gcra, Outcome};
use crate::{Decision, Quota};

/// The token bucket: `burst` tokens, refilled continuously at `limit / period`, starting full.
///
/// A request of cost `n` takes `n` tokens, or is denied when the bucket holds fewer; a denial
/// takes nothing. Tokens are counted in nanoseconds of the emission interval
/// `T = period / limit` (rounded up, see [`Quota::emission_interval`]): one token is `T` ns, and
/// the bucket refills by one nanosecond per nanosecond, so every step is exact integer
/// arithmetic. The bucket holds at most `T × burst` ns.
///
/// Its decisions are exactly [`Gcra`](super::Gcra)'s for the same quota, field by field: GCRA
/// keeps the instant the bucket will be full again, the token bucket keeps how far from full it
/// was at its last refill. Use whichever reads better; the token bucket's state is twice the
/// size (16 bytes instead of 8).
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{Algorithm, TokenBucket, TokenBucketState};
/// use tollgate::Quota;
///
/// let bucket = TokenBucket::new(&Quota::per_second(2)); // 2 tokens, one back every 500 ms
/// let mut state = TokenBucketState::default(); // full
/// for _ in 0..2 {
///     state = bucket.check(&state, 0, 1).state.unwrap();
/// }
/// let denied = bucket.check(&state, 100_000_000, 1); // 100 ms later: 0.2 tokens
/// assert!(!denied.decision.allowed);
/// assert_eq!(denied.decision.retry_after, Some(Duration::from_millis(400)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    /// The same schedule, kept as the instant the bucket is full again: the deficit is how
    /// far that instant is from the last refill.
    gcra: Gcra,
}

/// A key's bucket: how many tokens it lacked at its last refill, and when that was.
///
/// Tokens are measured in nanoseconds of the emission interval (one token = `T` ns). Keeping
/// the shortfall rather than the level makes `Default` the full bucket of a key never seen.
/// 16 bytes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TokenBucketState {
    /// Nanoseconds of tokens missing from a full bucket at `refilled_at`; 0 is full.
    pub deficit: u64,
    /// When the bucket was last refilled, in nanoseconds since the clock's origin.
    pub refilled_at: u64,
}

impl TokenBucket {
    /// The token bucket for `quota`.
    pub fn new(quota: &Quota) -> Self {
        Self {
            gcra: Gcra::new(quota),
        }
    }

    /// Shapes instead of rejecting: a request that finds too few tokens borrows the missing
    /// ones, up to `max_delay` worth of refill, and is allowed with [`Decision::delay`] until
    /// they have come in; the layer holds it back that long. `remaining` still counts the
    /// requests that would pass at once.
    #[must_use]
    pub fn max_delay(self, max_delay: Duration) -> Self {
        Self {
            gcra: self.gcra.max_delay(max_delay),
        }
    }

    to_gcra! {
        /// Nanoseconds per token: the emission interval `T`.
        #[doc(hidden)]
        pub interval_nanos() -> u64;
        /// The bucket's capacity `T × burst`, in nanoseconds.
        #[doc(hidden)]
        pub capacity_nanos() -> u64;
        /// The most the bucket may lack, in nanoseconds: its capacity plus the longest wait
        /// ([`max_delay`](Self::max_delay)).
        #[doc(hidden)]
        pub bound_nanos() -> u64;
    }

    /// Refills `state` up to `now`: the time to read it at (a `now` before the last refill
    /// counts as no time elapsed) and the deficit then.
    #[inline]
    fn refill(state: &TokenBucketState, now: u64) -> (u64, u64) {
        let now = now.max(state.refilled_at);
        (now, state.deficit.saturating_sub(now - state.refilled_at))
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    /// GCRA's step on the deficit. A reading before the last refill (readings out of order
    /// across threads) is decided at the refill's time; the waits it reports are measured
    /// from the reading, so that a client told to retry then is not early.
    #[inline]
    fn check(&self, state: &TokenBucketState, now: u64, cost: u64) -> Outcome<TokenBucketState> {
        let (at, deficit) = Self::refill(state, now);
        let (decision, deficit) = self.gcra.step(deficit, at, cost, at - now);
        let next = deficit.map(|deficit| TokenBucketState {
            deficit,
            refilled_at: at,
        });
        Outcome::new(decision, next)
    }

    /// Puts the admission's tokens back while nothing was taken after it, up to a full bucket:
    /// the tokens that have come back with time since are not given back twice, and tokens a
    /// later request took after it are not given back at all (as GCRA).
    #[inline]
    fn refund(
        &self,
        state: &TokenBucketState,
        admission: &Decision,
        now: u64,
        cost: u64,
    ) -> Option<TokenBucketState> {
        let (at, deficit) = Self::refill(state, now);
        let full_at = self
            .gcra
            .refund(&at.checked_add(deficit)?, admission, at, cost)?;
        Some(TokenBucketState {
            deficit: full_at - at,
            refilled_at: at,
        })
    }

    const REFUNDS: bool = true;

    /// GCRA's charge, on the deficit refilled to `now`.
    #[inline]
    fn charge(&self, state: &TokenBucketState, now: u64, cost: u64) -> Option<TokenBucketState> {
        let (at, deficit) = Self::refill(state, now);
        let full_at = self.gcra.charge(&at.saturating_add(deficit), at, cost)?;
        Some(TokenBucketState {
            deficit: full_at - at,
            refilled_at: at,
        })
    }

    const SETTLES: bool = true;

    /// GCRA's debt, on the deficit refilled to `now`.
    #[inline]
    fn debt(&self, state: &TokenBucketState, now: u64) -> u64 {
        let (_, deficit) = Self::refill(state, now);
        self.gcra.debt(&deficit, 0)
    }

    #[inline]
    fn is_fresh(&self, state: &TokenBucketState, now: u64) -> bool {
        Self::refill(state, now).1 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Gcra;

    const MS: u64 = 1_000_000;

    fn at(deficit_ms: u64, refilled_ms: u64) -> TokenBucketState {
        TokenBucketState {
            deficit: deficit_ms * MS,
            refilled_at: refilled_ms * MS,
        }
    }

    #[test]
    fn state_is_two_words() {
        assert_eq!(std::mem::size_of::<TokenBucketState>(), 16);
    }

    #[test]
    fn hand_checked_table() {
        // 10 per second, burst 5: one token = T = 100 ms, capacity 500 ms.
        let bucket = TokenBucket::new(&Quota::per_second(10).with_burst(5));
        // (deficit ms, refilled ms, now ms, cost)
        //   -> (allowed, remaining, reset_after ms, retry_after ms, next (deficit ms, refilled ms))
        type Case = (
            (u64, u64, u64, u64),
            (bool, u64, u64, Option<u64>, Option<(u64, u64)>),
        );
        let cases: [Case; 12] = [
            // a full bucket gives one token
            ((0, 0, 1000, 1), (true, 4, 100, None, Some((100, 1000)))),
            // ... or all five at once
            ((0, 0, 1000, 5), (true, 0, 500, None, Some((500, 1000)))),
            // six never fit
            ((0, 0, 1000, 6), (false, 5, 0, None, None)),
            // a peek on a full bucket
            ((0, 0, 1000, 0), (true, 5, 0, None, None)),
            // a peek on a used bucket: 300 ms short, 2 whole tokens
            ((300, 1000, 1000, 0), (true, 2, 300, None, None)),
            // empty: the next token is 100 ms away
            ((500, 1000, 1000, 1), (false, 0, 500, Some(100), None)),
            // 250 ms of refill brings 2.5 tokens: cost 3 waits 50 ms more
            ((500, 1000, 1250, 3), (false, 2, 250, Some(50), None)),
            // ... and cost 2 passes
            (
                (500, 1000, 1250, 2),
                (true, 0, 450, None, Some((450, 1250))),
            ),
            // refill stops at full
            ((200, 0, 1000, 2), (true, 3, 200, None, Some((200, 1000)))),
            // the last token exactly fills the capacity
            (
                (400, 1000, 1000, 1),
                (true, 0, 500, None, Some((500, 1000))),
            ),
            // a time before the last refill counts as no time elapsed, and the waits are
            // measured from it (GCRA's: a TAT of 1300 ms read at 900 ms)
            ((300, 1000, 900, 1), (true, 1, 500, None, Some((400, 1000)))),
            ((500, 1000, 900, 1), (false, 0, 600, Some(200), None)),
        ];
        for ((deficit, refilled, now, cost), (allowed, remaining, reset, retry, next)) in cases {
            let state = at(deficit, refilled);
            let out = bucket.check(&state, now * MS, cost);
            let d = out.decision;
            let case = format!("deficit={deficit} refilled={refilled} now={now} cost={cost}");
            assert_eq!(d.allowed, allowed, "{case}");
            assert_eq!(d.limit, 5, "{case}");
            assert_eq!(d.remaining, remaining, "{case}");
            assert_eq!(d.reset_after, Duration::from_millis(reset), "{case}");
            assert_eq!(d.retry_after, retry.map(Duration::from_millis), "{case}");
            assert_eq!(d.delay, Duration::ZERO, "{case}");
            assert_eq!(out.state, next.map(|(d, r)| at(d, r)), "{case}");
        }
    }

    #[test]
    fn refunds_match_gcra() {
        let quota = Quota::per_second(10).with_burst(5);
        let (bucket, gcra) = (TokenBucket::new(&quota), Gcra::new(&quota));
        // A bucket 200 ms short at 1000 ms is a TAT of 1200 ms; one more request makes 1300.
        let state = at(200, 1000);
        let taken = bucket.check(&state, 1000 * MS, 1);
        let tat = gcra.check(&(1200 * MS), 1000 * MS, 1);
        assert_eq!(taken.decision.receipt(), tat.decision.receipt());
        let (taken_state, tat_state) = (taken.state.unwrap(), tat.state.unwrap());
        for (now, cost) in [(1000, 1), (1000, 5), (1250, 1), (1400, 1), (1000, 0)] {
            let got = bucket.refund(&taken_state, &taken.decision, now * MS, cost);
            let want = gcra.refund(&tat_state, &tat.decision, now * MS, cost);
            assert_eq!(
                got.map(|s| s.refilled_at + s.deficit),
                want,
                "now={now} cost={cost}"
            );
        }
        // Taking one token and refunding it leaves the bucket where it was.
        assert_eq!(
            bucket.refund(&taken_state, &taken.decision, 1000 * MS, 1),
            Some(state)
        );
        assert_eq!(
            bucket.refund(&taken_state, &taken.decision, 1250 * MS, 1),
            Some(at(0, 1250))
        );
        // A later request took tokens after it: nothing is given back.
        let later = bucket.check(&taken_state, 1010 * MS, 1).state.unwrap();
        assert_eq!(bucket.refund(&later, &taken.decision, 1020 * MS, 1), None);
    }

    #[test]
    fn charges_agree_with_gcra() {
        let quota = Quota::per_second(10).with_burst(5);
        let (bucket, gcra) = (TokenBucket::new(&quota), Gcra::new(&quota));
        // (deficit ms, refilled ms, now ms, cost): full, used, in debt, expired, a reading
        // before the last refill.
        let cases = [
            (0, 0, 1000, 3),
            (0, 0, 1000, 8),
            (300, 1000, 1000, 4),
            (800, 1000, 1000, 1),
            (800, 1000, 1200, 2),
            (200, 0, 1000, 2),
            (300, 1000, 900, 3),
            (0, 0, 1000, 0),
            (800, 1000, 1000, 0),
        ];
        for (deficit, refilled, now, cost) in cases {
            let case = format!("deficit={deficit} refilled={refilled} now={now} cost={cost}");
            let state = at(deficit, refilled);
            let tat = (deficit + refilled) * MS;
            let charged = bucket.charge(&state, now * MS, cost);
            let want = gcra.charge(&tat, now * MS, cost);
            assert_eq!(charged.map(|s| s.refilled_at + s.deficit), want, "{case}");
            let (Some(charged), Some(want)) = (charged, want) else {
                assert_eq!(cost, 0, "{case}");
                continue;
            };
            // From then on the two decide alike: the debt is paid back at the same rate.
            for later in [now, now + 100, now + 400, now + 700, now + 1000, now + 1300] {
                for cost in [0, 1, 2, 5] {
                    let got = bucket.check(&charged, later * MS, cost).decision;
                    let expected = gcra.check(&want, later * MS, cost).decision;
                    assert_eq!(got, expected, "{case}, then cost {cost} at {later} ms");
                }
            }
        }
        // A fresh bucket charged 8 owes 3 tokens past its 5: a peek waits 300 ms.
        let owing = bucket.charge(&at(0, 0), 1000 * MS, 8).unwrap();
        assert_eq!(owing, at(800, 1000));
        let peek = bucket.check(&owing, 1000 * MS, 0).decision;
        assert!(!peek.allowed);
        assert_eq!(peek.retry_after, Some(Duration::from_millis(300)));
        assert!(bucket.settles());
    }

    #[test]
    fn new_quotas_keep_a_debt_as_gcra() {
        let quota = Quota::per_second(10).with_burst(5);
        let (bucket, gcra) = (TokenBucket::new(&quota), Gcra::new(&quota));
        let owing = bucket.charge(&at(0, 0), 1000 * MS, 8).unwrap();
        let tat = gcra.charge(&0, 1000 * MS, 8).unwrap();
        for (limit, burst) in [(10, 5), (10, 2), (1, 5), (10, 20), (100, 1)] {
            let new = Quota::per_second(limit).with_burst(burst);
            for now in [1000, 1150, 1300, 1900] {
                let carried = TokenBucket::new(&new).carried(&bucket, &owing, now * MS);
                let want = Gcra::new(&new).carried(&gcra, &tat, now * MS);
                let case = format!("{limit}/s burst {burst} at {now} ms");
                assert_eq!(carried.refilled_at + carried.deficit, want, "{case}");
                assert_eq!(bucket.debt(&owing, now * MS), gcra.debt(&tat, now * MS));
            }
        }
        // The leaky bucket's queue keeps its debt too: 2 past a queue of 4, then of 3.
        let queue = super::super::LeakyBucket::new(&Quota::per_second(10).with_burst(4));
        let full = queue.charge(&0, 0, 6).unwrap();
        assert_eq!(queue.debt(&full, 0), 2);
        let shorter = super::super::LeakyBucket::new(&Quota::per_second(10).with_burst(3));
        let carried = shorter.carried(&queue, &full, 0);
        assert_eq!(shorter.debt(&carried, 0), 2);
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let bucket = TokenBucket::new(&Quota::per_day(1).with_burst(u64::MAX / 86_400_000_000_000));
        let full = TokenBucketState::default();
        let worst = TokenBucketState {
            deficit: u64::MAX,
            refilled_at: u64::MAX,
        };
        let out = bucket.check(&worst, u64::MAX, u64::MAX);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.retry_after, None);
        let out = bucket.check(&full, u64::MAX - 1, 1);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.retry_after, None);
        let out = bucket.check(&worst, 0, 1);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.remaining, 0);
        for receipt in [0, u64::MAX] {
            let admission = Decision::allow(0, 0, Duration::ZERO).with_receipt(receipt);
            assert_eq!(bucket.refund(&worst, &admission, 0, u64::MAX), None);
        }
        assert!(!bucket.is_fresh(&worst, 0));
        assert!(bucket.is_fresh(&full, u64::MAX));
        // A charge saturates at the end of the clock, and the key stays denied until then.
        for (state, now) in [
            (full, 0),
            (full, u64::MAX - 1),
            (worst, 0),
            (worst, u64::MAX),
        ] {
            for cost in [1, u64::MAX / bucket.interval_nanos(), u64::MAX] {
                let charged = bucket.charge(&state, now, cost).unwrap();
                let end = u128::from(charged.refilled_at) + u128::from(charged.deficit);
                assert!(end <= u128::from(u64::MAX), "cost {cost} at {now}");
                assert_eq!(bucket.charge(&charged, now, 0), None);
                let read = charged.refilled_at;
                for at_most in [read, read.saturating_add(1)] {
                    for cost in [0, 1, u64::MAX] {
                        let out = bucket.check(&charged, at_most, cost);
                        let bound = u128::from(at_most) + u128::from(bucket.bound_nanos());
                        if end > bound {
                            assert!(
                                !out.decision.allowed,
                                "{charged:?} cost {cost} at {at_most}"
                            );
                        }
                    }
                }
            }
        }
    }
}
