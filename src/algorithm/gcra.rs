use std::time::Duration;

use super::divisor::Divisor;
use super::{Algorithm, Outcome};
use crate::{Decision, Quota};

/// The Generic Cell Rate Algorithm: a leaky bucket kept as one number per key.
///
/// The state is the key's *theoretical arrival time* (TAT): when the key would be back to
/// fresh if no more requests came. With emission interval `T = period / limit` and tolerance
/// `τ = T × burst`, a request of cost `n` at `now` gives `new_tat = max(tat, now) + n·T` and is
/// allowed iff `new_tat − now ≤ τ`. A denial leaves the state unchanged, so a client that keeps
/// knocking does not push its own reset further out.
///
/// The reported figures follow from the TAT after the decision: `reset_after = tat − now`,
/// `remaining = ⌊(τ − reset_after) / T⌋`; a denied request may retry after
/// `new_tat − τ − now`, or never, when `n·T > τ`.
///
/// `burst` here is the number of requests a fresh key may make at once (throttled's
/// `MaxBurst + 1`; the limit that `CL.THROTTLE` reports, `max_burst + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Emission interval `T`, in nanoseconds.
    interval: u64,
    /// Tolerance `τ = T × burst`, in nanoseconds: how far ahead of `now` the TAT may be for a
    /// request to pass at once.
    tolerance: u64,
    /// How much further ahead it may be for a request to pass after a wait (shaping).
    max_delay: u64,
    /// `tolerance + max_delay`: beyond it a request is denied.
    bound: u64,
    /// The capacity reported as `limit`.
    burst: u64,
    /// What `remaining` counts against: `tolerance` (requests that pass at once), or `bound`
    /// for the leaky bucket (free places in its queue).
    capacity: u64,
    /// Divides by `interval` without a hardware division.
    per_interval: Divisor,
}

impl Gcra {
    /// The algorithm for `quota`.
    pub fn new(quota: &Quota) -> Self {
        let interval = quota.emission_interval_ns();
        // `Quota` guarantees that `interval * burst` fits in a u64.
        let tolerance = interval.saturating_mul(quota.burst());
        Self {
            interval,
            tolerance,
            max_delay: 0,
            bound: tolerance,
            burst: quota.burst(),
            capacity: tolerance,
            per_interval: Divisor::new(interval),
        }
    }

    /// Shapes instead of rejecting (nginx's `burst` without `nodelay`): a request that would
    /// pass within `max_delay` is allowed, reserves its place, and reports the wait in
    /// [`Decision::delay`]; the layer holds it back that long before calling the service. Only
    /// requests that would wait longer are denied.
    ///
    /// `remaining` still counts the requests that would pass at once.
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = crate::clock::saturating_nanos(max_delay);
        self.bound = self.tolerance.saturating_add(self.max_delay);
        self
    }

    /// The leaky bucket's queue: one request passes at once and `burst - 1` more wait their
    /// turn, one every `T`; `remaining` counts the free places in the queue.
    pub(crate) fn queue(quota: &Quota) -> Self {
        let mut gcra = Self::new(quota);
        gcra.tolerance = gcra.interval;
        gcra.max_delay = gcra.interval.saturating_mul(quota.burst() - 1);
        gcra.bound = gcra.tolerance.saturating_add(gcra.max_delay);
        gcra.capacity = gcra.bound;
        gcra
    }

    /// The emission interval `T` in nanoseconds.
    #[doc(hidden)]
    pub fn interval_nanos(&self) -> u64 {
        self.interval
    }

    /// The tolerance `τ = T × burst` in nanoseconds.
    #[doc(hidden)]
    pub fn tolerance_nanos(&self) -> u64 {
        self.tolerance
    }

    /// The longest a request may wait to pass, in nanoseconds (0 unless shaping).
    #[doc(hidden)]
    pub fn max_delay_nanos(&self) -> u64 {
        self.max_delay
    }

    /// The bound: how far ahead of now the TAT may move, the tolerance plus the longest wait,
    /// in nanoseconds.
    #[doc(hidden)]
    pub fn bound_nanos(&self) -> u64 {
        self.bound
    }

    /// The capacity that [`Decision::remaining`] counts against, in nanoseconds: the
    /// tolerance, or for a queue ([`LeakyBucket`](super::LeakyBucket)) the whole queue.
    #[doc(hidden)]
    pub fn capacity_nanos(&self) -> u64 {
        self.capacity
    }

    /// `remaining` for a schedule `owed` ns from its end.
    #[inline]
    fn remaining(&self, owed: u64) -> u64 {
        self.per_interval.divide(self.capacity.saturating_sub(owed))
    }

    /// The decision for an allowed request that left the schedule `owed` ns from its end at
    /// `now`; every wait reported `skew` ns longer.
    #[inline]
    fn allowed(&self, owed: u64, now: u64, cost: u64, skew: u64) -> Decision {
        let after = |nanos: u64| Duration::from_nanos(nanos.saturating_add(skew));
        // The receipt is the TAT the request set: the end of its slot in the schedule.
        let decision = Decision::allow(self.burst, self.remaining(owed), after(owed))
            .with_receipt(if cost > 0 { now + owed } else { 0 });
        if owed > self.tolerance {
            decision.delayed(after(owed - self.tolerance))
        } else {
            decision
        }
    }

    /// The step both GCRA and the token bucket take: a request of `cost` at `now` against a
    /// schedule `owed` ns from its end (the TAT less `now`; the bucket's deficit). Every wait
    /// is reported `skew` ns longer (the token bucket's reading before its last refill).
    /// Returns the decision and, when the request changes the schedule, how far from its end
    /// it then is.
    #[inline]
    pub(super) fn step(
        &self,
        owed: u64,
        now: u64,
        cost: u64,
        skew: u64,
    ) -> (Decision, Option<u64>) {
        let after = |nanos: u64| Duration::from_nanos(nanos.saturating_add(skew));
        let deny = |retry_after| {
            let reset_after = after(owed);
            let decision =
                Decision::deny(self.burst, self.remaining(owed), reset_after, retry_after);
            (decision, None)
        };
        // A cost above the bound can never pass, however long the client waits.
        let Some(increment) = cost.checked_mul(self.interval).filter(|&i| i <= self.bound) else {
            return deny(None);
        };
        // Overflow is only possible some 584 years after the clock's origin; deny rather than wrap.
        if now
            .checked_add(owed)
            .and_then(|t| t.checked_add(increment))
            .is_none()
        {
            return deny(None);
        }
        let owed_after = owed + increment;
        if owed_after > self.bound {
            return deny(Some(after(owed_after - self.bound)));
        }
        let decision = self.allowed(owed_after, now, cost, skew);
        (decision, (cost > 0).then_some(owed_after))
    }
}

impl Algorithm for Gcra {
    /// The theoretical arrival time in nanoseconds; 0 is fresh.
    type State = u64;

    #[inline]
    fn check(&self, &tat: &u64, now: u64, cost: u64) -> Outcome<u64> {
        let (decision, owed) = self.step(tat.saturating_sub(now), now, cost, 0);
        Outcome::new(decision, owed.map(|owed| now + owed))
    }

    /// The next TAT alone, without the decision.
    #[inline]
    fn transition(&self, &tat: &u64, now: u64, cost: u64) -> Option<u64> {
        let increment = cost.checked_mul(self.interval)?;
        let new_tat = tat.max(now).checked_add(increment)?;
        (cost > 0 && new_tat - now <= self.bound).then_some(new_tat)
    }

    #[inline]
    fn decide(&self, &tat: &u64, next: Option<&u64>, now: u64, cost: u64) -> Decision {
        match next {
            // A new TAT means the request was allowed, so `now <= new_tat <= now + bound`.
            Some(&new_tat) => self.allowed(new_tat - now, now, cost, 0),
            None => self.check(&tat, now, cost).decision,
        }
    }

    /// Takes the admission's place in the schedule back, when nothing was admitted after it:
    /// the TAT moves back to where the admission found it (`receipt − cost·T`), but not
    /// before `now`, so what has drained since is not given back twice. While a later
    /// admission stands after it (responses finishing out of order), its place is kept: moving
    /// the later ones forward could let the counted requests exceed the burst.
    #[inline]
    fn refund(&self, &tat: &u64, admission: &Decision, now: u64, cost: u64) -> Option<u64> {
        let len = cost.saturating_mul(self.interval);
        let end = admission.receipt();
        if len == 0 || tat <= now || end != tat {
            return None;
        }
        Some(end.saturating_sub(len).max(now))
    }

    const REFUNDS: bool = true;

    /// The debt is the TAT past the bound: paid back one interval per interval, and denied
    /// until then (`retry_after` says when). The TAT saturates at the end of the clock.
    #[inline]
    fn charge(&self, &tat: &u64, now: u64, cost: u64) -> Option<u64> {
        let increment = cost.saturating_mul(self.interval);
        (increment > 0).then(|| tat.max(now).saturating_add(increment))
    }

    const SETTLES: bool = true;

    /// The TAT past the bound, in intervals rounded up.
    #[inline]
    fn debt(&self, &tat: &u64, now: u64) -> u64 {
        let past = tat.saturating_sub(now).saturating_sub(self.bound);
        past.div_ceil(self.interval)
    }

    #[inline]
    fn is_fresh(&self, &tat: &u64, now: u64) -> bool {
        tat <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refunds_give_back_only_the_last_slot_while_it_lasts() {
        // T = 100 ms, τ = 500 ms.
        let gcra = Gcra::new(&Quota::per_second(10).with_burst(5));
        let ms = 1_000_000;
        let admit = |tat: u64, now: u64| {
            let out = gcra.check(&tat, now, 1);
            assert!(out.decision.allowed);
            (out.state.unwrap(), out.decision)
        };
        // Admit one request and refund it at once: the key is back where it was.
        let (tat, first) = admit(1200 * ms, 1000 * ms);
        assert_eq!(tat, 1300 * ms);
        assert_eq!(gcra.refund(&tat, &first, 1000 * ms, 1), Some(1200 * ms));
        // Refunded later: what drained since is not given back twice.
        assert_eq!(gcra.refund(&tat, &first, 1250 * ms, 1), Some(1250 * ms));
        assert_eq!(gcra.refund(&tat, &first, 1300 * ms, 1), None);
        assert_eq!(gcra.refund(&tat, &first, 1000 * ms, 0), None);
        // A later admission stands after it: its place is kept.
        let (later, second) = admit(tat, 1010 * ms);
        assert_eq!(gcra.refund(&later, &first, 1020 * ms, 1), None);
        // The last one goes back; then the first is the last again.
        let back = gcra.refund(&later, &second, 1020 * ms, 1).unwrap();
        assert_eq!(back, 1300 * ms);
        assert_eq!(gcra.refund(&back, &first, 1020 * ms, 1), Some(1200 * ms));
    }

    #[test]
    fn a_refund_after_the_slot_drained_gives_nothing_to_a_later_request() {
        // The audit's case: 10/s, burst 1. A request that does not count is admitted at 0 and
        // answered at 500 ms; meanwhile a counted one took the slot at 450 ms.
        let gcra = Gcra::new(&Quota::per_second(10).with_burst(1));
        let ms = 1_000_000;
        let first = gcra.check(&0, 0, 1);
        let tat = first.state.unwrap();
        let counted = gcra.check(&tat, 450 * ms, 1);
        let tat = counted.state.unwrap();
        assert_eq!(gcra.refund(&tat, &first.decision, 500 * ms, 1), None);
        assert!(!gcra.check(&tat, 500 * ms, 1).decision.allowed);
    }

    #[test]
    fn hand_checked_table() {
        // 10 per second, burst 5: T = 100 ms, τ = 500 ms.
        let gcra = Gcra::new(&Quota::per_second(10).with_burst(5));
        let ms = 1_000_000;
        // (tat, now, cost) -> (allowed, remaining, reset_after ms, retry_after ms, new tat)
        type Case = ((u64, u64, u64), (bool, u64, u64, Option<u64>, Option<u64>));
        let cases: [Case; 9] = [
            // fresh key, one request
            ((0, 1000 * ms, 1), (true, 4, 100, None, Some(1100 * ms))),
            // fresh key, the whole burst at once
            ((0, 1000 * ms, 5), (true, 0, 500, None, Some(1500 * ms))),
            // cost above the burst: can never pass
            ((0, 1000 * ms, 6), (false, 5, 0, None, None)),
            // peek on a fresh key
            ((0, 1000 * ms, 0), (true, 5, 0, None, None)),
            // peek on a used key changes nothing
            ((1300 * ms, 1000 * ms, 0), (true, 2, 300, None, None)),
            // bucket full: denied, retry when one interval has drained
            ((1500 * ms, 1000 * ms, 1), (false, 0, 500, Some(100), None)),
            // cost 3 with 2 remaining: wait for one more
            ((1300 * ms, 1000 * ms, 3), (false, 2, 300, Some(100), None)),
            // a stale TAT counts as fresh
            (
                (200 * ms, 1000 * ms, 2),
                (true, 3, 200, None, Some(1200 * ms)),
            ),
            // the last slot exactly at the tolerance passes
            (
                (1400 * ms, 1000 * ms, 1),
                (true, 0, 500, None, Some(1500 * ms)),
            ),
        ];
        for ((tat, now, cost), (allowed, remaining, reset, retry, state)) in cases {
            let out = gcra.check(&tat, now, cost);
            let d = out.decision;
            let case = format!("tat={tat} now={now} cost={cost}");
            assert_eq!(d.allowed, allowed, "{case}");
            assert_eq!(d.limit, 5, "{case}");
            assert_eq!(d.remaining, remaining, "{case}");
            assert_eq!(d.reset_after, Duration::from_millis(reset), "{case}");
            assert_eq!(d.retry_after, retry.map(Duration::from_millis), "{case}");
            assert_eq!(d.delay, Duration::ZERO, "{case}");
            assert_eq!(out.state, state, "{case}");
            let next = gcra.transition(&tat, now, cost);
            assert_eq!(next, state, "{case}");
            assert_eq!(gcra.decide(&tat, next.as_ref(), now, cost), d, "{case}");
        }
    }

    #[test]
    fn max_delay_reserves_places_and_reports_the_wait() {
        // 10 per second, burst 2, shaping up to 300 ms: T = 100 ms, τ = 200 ms.
        let gcra =
            Gcra::new(&Quota::per_second(10).with_burst(2)).max_delay(Duration::from_millis(300));
        let ms = 1_000_000;
        let mut tat = 0;
        // (delay ms, remaining) for five requests at once.
        let expected = [(0, 1), (0, 0), (100, 0), (200, 0), (300, 0)];
        for (i, (delay, remaining)) in expected.into_iter().enumerate() {
            let out = gcra.check(&tat, 1000 * ms, 1);
            assert!(out.decision.allowed, "request {i}");
            assert_eq!(
                out.decision.delay,
                Duration::from_millis(delay),
                "request {i}"
            );
            assert_eq!(out.decision.remaining, remaining, "request {i}");
            assert_eq!(out.decision.limit, 2);
            tat = out.state.unwrap();
            assert_eq!(gcra.decide(&0, Some(&tat), 1000 * ms, 1), out.decision);
        }
        let denied = gcra.check(&tat, 1000 * ms, 1);
        assert!(!denied.decision.allowed);
        assert_eq!(
            denied.decision.retry_after,
            Some(Duration::from_millis(100))
        );
        // A cost that fits within τ + max_delay waits; one beyond it never passes.
        let big = gcra.check(&0, 0, 5);
        assert_eq!(big.decision.delay, Duration::from_millis(300));
        assert_eq!(gcra.check(&0, 0, 6).decision.retry_after, None);
    }

    #[test]
    fn a_charge_is_a_debt_paid_back_at_the_quota_rate() {
        // 10 per second, burst 5: T = 100 ms, τ = 500 ms.
        let gcra = Gcra::new(&Quota::per_second(10).with_burst(5));
        let ms = 1_000_000;
        // A fresh key charged 8 at once: 3 past what it may take at once.
        let tat = gcra.charge(&0, 1000 * ms, 8).unwrap();
        assert_eq!(tat, 1800 * ms);
        let peek = gcra.check(&tat, 1000 * ms, 0).decision;
        assert!(!peek.allowed, "in debt, even a peek is denied");
        assert_eq!(peek.remaining, 0);
        assert_eq!(peek.reset_after, Duration::from_millis(800));
        assert_eq!(peek.retry_after, Some(Duration::from_millis(300)));
        // A request of cost 2 waits for the debt and for its own 2 intervals.
        let denied = gcra.check(&tat, 1000 * ms, 2).decision;
        assert_eq!(denied.retry_after, Some(Duration::from_millis(500)));
        assert!(!gcra.check(&tat, 1500 * ms - 1, 2).decision.allowed);
        let paid = gcra.check(&tat, 1500 * ms, 2);
        assert!(paid.decision.allowed);
        assert_eq!(paid.state, Some(2000 * ms));
        // A charge adds to a schedule ahead of now, whatever it has left.
        assert_eq!(gcra.charge(&(1300 * ms), 1000 * ms, 3), Some(1600 * ms));
        assert_eq!(gcra.charge(&(1800 * ms), 1000 * ms, 1), Some(1900 * ms));
        // A charge on an expired state charges from now.
        assert_eq!(gcra.charge(&(200 * ms), 1000 * ms, 2), Some(1200 * ms));
        assert_eq!(gcra.charge(&(1000 * ms), 1000 * ms, 1), Some(1100 * ms));
        assert!(gcra.settles());
    }

    #[test]
    fn a_charge_of_nothing_changes_nothing() {
        let gcra = Gcra::new(&Quota::per_second(10).with_burst(5));
        for (tat, now) in [(0, 0), (0, 1_000), (1_800_000_000, 1_000_000_000), (5, 9)] {
            assert_eq!(gcra.charge(&tat, now, 0), None, "tat={tat} now={now}");
        }
        let shaped = gcra.max_delay(Duration::from_secs(1));
        assert_eq!(shaped.charge(&7, 3, 0), None);
    }

    #[test]
    fn new_quotas_keep_a_debt() {
        // 10 per second, burst 5: T = 100 ms. A key charged 8 at 1 s owes 3 past its burst.
        let old = Gcra::new(&Quota::per_second(10).with_burst(5));
        let ms = 1_000_000;
        let now = 1000 * ms;
        let owing = old.charge(&0, now, 8).unwrap();
        let standing = |gcra: &Gcra, tat: u64| gcra.check(&tat, now, 0).decision;
        // The same figures: the same debt.
        assert_eq!(old.carried(&old, &owing, now), owing);
        // A burst of 2: the 2 it may take at once used, and the 3 owed on top.
        let smaller = Gcra::new(&Quota::per_second(10).with_burst(2));
        let carried = smaller.carried(&old, &owing, now);
        assert_eq!(carried, now + 500 * ms);
        assert_eq!(
            standing(&smaller, carried).retry_after,
            Some(Duration::from_millis(300))
        );
        // One a second: the debt is paid back at the new rate, 3 s.
        let slower = Gcra::new(&Quota::per_second(1).with_burst(5));
        let carried = slower.carried(&old, &owing, now);
        assert_eq!(
            standing(&slower, carried).retry_after,
            Some(Duration::from_secs(3))
        );
        // A burst of 20: 8 of 20 used, 12 left (as a key that used 8 under it).
        let larger = Gcra::new(&Quota::per_second(10).with_burst(20));
        let carried = larger.carried(&old, &owing, now);
        assert_eq!(standing(&larger, carried).remaining, 12);
        // Half paid back: 1.5 units owed, counted whole.
        let later = now + 150 * ms;
        let carried = smaller.carried(&old, &owing, later);
        assert_eq!(carried, later + 400 * ms);
        // Paid back: nothing more than the burst used, as before.
        let paid = now + 300 * ms;
        assert_eq!(smaller.carried(&old, &owing, paid), paid + 200 * ms);
    }

    #[test]
    fn a_charge_past_the_end_of_the_clock_saturates_and_the_key_stays_denied() {
        let quotas = [
            Quota::per_second(10).with_burst(5),
            Quota::per_day(1).with_burst(u64::MAX / 86_400_000_000_000),
            Quota::new(u64::MAX, Duration::from_nanos(1)),
        ];
        for quota in quotas {
            for gcra in [Gcra::new(&quota), Gcra::queue(&quota)] {
                let t = gcra.interval_nanos();
                let bound = gcra.bound_nanos();
                let more = quota.burst().saturating_add(1);
                let costs = [1, 2, quota.burst(), more, u64::MAX / t, u64::MAX];
                for cost in costs {
                    for (tat, now) in [(0, 0), (u64::MAX - 1, 0), (u64::MAX - t, 1)] {
                        let charged = gcra.charge(&tat, now, cost).unwrap();
                        assert!(charged >= tat.max(now), "{quota:?} cost={cost}");
                        let want = u128::from(tat.max(now)) + u128::from(cost) * u128::from(t);
                        let expected = u64::try_from(want).unwrap_or(u64::MAX);
                        assert_eq!(charged, expected, "{quota:?} cost={cost} tat={tat}");
                        assert_eq!(gcra.charge(&u64::MAX, now, cost), Some(u64::MAX));
                    }
                }
                // Every step from a TAT near the end of the clock, at any time before it and
                // for any cost: no overflow, no panic, and denied while the debt lasts.
                let tats = [u64::MAX, u64::MAX - 1, u64::MAX - t, u64::MAX - bound];
                for tat in tats {
                    let before = tat.saturating_sub(bound.saturating_add(1));
                    let nows = [0, 1, tat / 2, before, tat.saturating_sub(1)];
                    for now in nows.into_iter().filter(|&now| now <= tat) {
                        for cost in [0, 1, 2, quota.burst(), u64::MAX / t, u64::MAX] {
                            let out = gcra.check(&tat, now, cost);
                            let case = format!("{quota:?} tat={tat} now={now} cost={cost}");
                            let next = gcra.transition(&tat, now, cost);
                            assert_eq!(next, out.state, "{case}");
                            let decided = gcra.decide(&tat, next.as_ref(), now, cost);
                            assert_eq!(decided, out.decision, "{case}");
                            if tat - now > bound {
                                assert!(!out.decision.allowed, "{case}");
                                assert_eq!(out.state, None, "{case}");
                            }
                            if let Some(next) = out.state {
                                assert!(next >= tat && next - now <= bound, "{case}");
                            }
                            let refund = gcra.refund(&tat, &out.decision, now, cost);
                            assert!(refund.is_none_or(|r| r <= tat), "{case}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn extreme_values_saturate_instead_of_overflowing() {
        let gcra = Gcra::new(&Quota::per_day(1).with_burst(u64::MAX / 86_400_000_000_000));
        let out = gcra.check(&u64::MAX, u64::MAX, u64::MAX);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.retry_after, None);
        let out = gcra.check(&0, u64::MAX - 1, 1);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.retry_after, None);
        let out = gcra.check(&u64::MAX, 0, 1);
        assert!(!out.decision.allowed);
        assert_eq!(out.decision.remaining, 0);
    }
}
