use proptest::prelude::*;

use super::*;
use crate::Decision;

const S: u64 = 1_000_000_000;

fn log(entries: &[(u64, u64)]) -> SlidingLogState {
    SlidingLogState::from_entries(entries.iter().map(|&(t, c)| (t * S, c)))
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
fn refunds_take_back_the_admissions_entry_while_it_is_in_the_window() {
    let algo = SlidingLog::new(&Quota::new(5, Duration::from_secs(10)));
    let at = |t: u64| Decision::allow(5, 0, Duration::ZERO).with_receipt(t * S);
    let state = log(&[(95, 1), (100, 2), (104, 2)]);
    assert_eq!(
        algo.refund(&state, &at(104), 105 * S, 1),
        Some(log(&[(100, 2), (104, 1)]))
    );
    assert_eq!(
        algo.refund(&state, &at(100), 105 * S, 2),
        Some(log(&[(104, 2)]))
    );
    assert_eq!(
        algo.refund(&state, &at(104), 105 * S, 9),
        Some(log(&[(100, 2)]))
    );
    assert_eq!(algo.refund(&state, &at(104), 105 * S, 0), None);
    assert_eq!(algo.refund(&state, &at(104), 114 * S, 1), None);
    assert_eq!(algo.refund(&log(&[]), &at(104), 114 * S, 1), None);
    // The entry at 95 s has left the window at 105 s: a newer one is not refunded for it.
    assert_eq!(algo.refund(&state, &at(95), 105 * S, 1), None);
    // No entry at that time.
    assert_eq!(algo.refund(&state, &at(101), 105 * S, 1), None);
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
    assert_eq!(std::mem::size_of::<SlidingLogState>(), 40);
}

/// The log as the plain list the running totals stand for: every figure recomputed by
/// summing and scanning, as the algorithm did before it kept totals.
#[derive(Debug, Clone, Default, PartialEq)]
struct Plain(Vec<(u64, u64)>);

impl Plain {
    fn check(&mut self, limit: u64, period: u64, now: u64, cost: u64) -> Decision {
        let at = self.0.last().map_or(now, |&(t, _)| t.max(now));
        let live: Vec<(u64, u64)> = self
            .0
            .iter()
            .copied()
            .filter(|&(t, _)| at - t < period)
            .collect();
        let used: u128 = live.iter().map(|&(_, c)| u128::from(c)).sum();
        let remaining = u64::try_from(u128::from(limit).saturating_sub(used)).unwrap_or(0);
        let until = |t: u64| {
            let wait = (u128::from(t) + u128::from(period)).saturating_sub(u128::from(now));
            Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
        };
        let reset_after = match (live.is_empty(), self.0.last()) {
            (false, Some(&(t, _))) => until(t),
            _ => Duration::ZERO,
        };
        if cost > remaining {
            let mut retry = None;
            if cost <= limit {
                let need = used + u128::from(cost) - u128::from(limit);
                let mut freed = 0u128;
                for &(t, c) in &live {
                    freed += u128::from(c);
                    if freed >= need {
                        retry = Some(until(t));
                        break;
                    }
                }
            }
            return Decision::deny(limit, remaining, reset_after, retry);
        }
        if cost == 0 {
            return Decision::allow(limit, remaining, reset_after);
        }
        self.0 = live;
        match self.0.last_mut() {
            Some((t, c)) if *t == at => *c += cost,
            _ => self.0.push((at, cost)),
        }
        Decision::allow(limit, remaining - cost, until(at)).with_receipt(at)
    }

    fn refund(&mut self, period: u64, now: u64, at: u64, cost: u64) -> bool {
        let newest = self.0.last().map_or(now, |&(t, _)| t.max(now));
        let Some(i) = self.0.iter().position(|&(t, _)| t == at) else {
            return false;
        };
        if cost == 0 || newest - at >= period {
            return false;
        }
        self.0.retain(|&(t, _)| newest - t < period);
        let i = self.0.iter().position(|&(t, _)| t == at).unwrap_or(i);
        self.0[i].1 -= cost.min(self.0[i].1);
        if self.0[i].1 == 0 {
            self.0.remove(i);
        }
        true
    }
}

/// One step of a random run: a check at `now + step` of `cost`, or the refund of the `pick`-th
/// admission so far by `cost`.
#[derive(Debug, Clone)]
enum Step {
    Check { step: u64, back: bool, cost: u64 },
    Refund { step: u64, pick: usize, cost: u64 },
}

fn steps(limit: u64) -> impl Strategy<Value = Vec<Step>> {
    let time = prop_oneof![Just(0u64), 0u64..4, 0u64..40];
    let check = (time.clone(), prop::bool::weighted(0.1), 0..=limit + 1)
        .prop_map(|(step, back, cost)| Step::Check { step, back, cost });
    let refund = (time, any::<usize>(), 0..=limit + 1)
        .prop_map(|(step, pick, cost)| Step::Refund { step, pick, cost });
    prop::collection::vec(prop_oneof![3 => check, 1 => refund], 0..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The running totals decide exactly as the plain list, for checks (`check` and
    /// `check_mut`), peeks, hopeless costs, clocks that step back, and refunds of any earlier
    /// admission by any amount, in any order.
    #[test]
    fn running_totals_decide_as_the_plain_list(
        (limit, period, steps) in (1u64..8, 1u64..30)
            .prop_flat_map(|(limit, period)| (Just(limit), Just(period), steps(limit)))
    ) {
        let algo = SlidingLog::new(&Quota::new(limit, Duration::from_nanos(period)));
        let (mut state, mut plain) = (SlidingLogState::default(), Plain::default());
        let mut admissions: Vec<Decision> = Vec::new();
        let mut now = 1_000u64;
        for step in steps {
            match step {
                Step::Check { step, back, cost } => {
                    now = if back { now - step } else { now + step };
                    let expected = plain.check(limit, period, now, cost);
                    let out = algo.check(&state, now, cost);
                    let mut in_place = state.clone();
                    let decision = algo.check_mut(&mut in_place, now, cost);
                    prop_assert_eq!(&out.decision, &expected);
                    prop_assert_eq!(decision.receipt(), expected.receipt());
                    prop_assert_eq!(out.decision.receipt(), expected.receipt());
                    prop_assert_eq!(&decision, &expected);
                    prop_assert_eq!(&in_place, out.state.as_ref().unwrap_or(&state));
                    state = in_place;
                    prop_assert_eq!(state.entries().collect::<Vec<_>>(), plain.0.clone());
                    if expected.allowed && cost > 0 {
                        admissions.push(expected);
                    }
                }
                Step::Refund { step, pick, cost } => {
                    now += step;
                    let Some(admission) = admissions.get(pick % admissions.len().max(1)) else {
                        continue;
                    };
                    let refunded = plain.refund(period, now, admission.receipt(), cost);
                    let out = algo.refund(&state, admission, now, cost);
                    prop_assert_eq!(out.is_some(), refunded);
                    if let Some(next) = out {
                        state = next;
                    }
                    prop_assert_eq!(state.entries().collect::<Vec<_>>(), plain.0.clone());
                }
            }
        }
    }
}

#[test]
fn searches_find_the_first_match_at_any_distance() {
    let state = SlidingLogState::from_entries((0..100).map(|i| (i * 10, i % 3 + 1)));
    for from in [0, 1, 7, 50, 99, 100] {
        for t in 0..1_001 {
            let expected = (from..100)
                .find(|&i| i * 10 >= t)
                .map_or(100, |i| i as usize);
            assert_eq!(state.first_where(from as usize, |at, _| at >= t), expected);
        }
    }
    // The oldest entry within 25 ns before 500 ns is the one at 480 ns.
    assert_eq!(state.first_live(500, 25), 48);
    assert_eq!(state.first_live(10_000, 25), 100);
    // Entries 48.. cost 1, 2, 3, 1, ...: 6 is covered by the third.
    assert_eq!(state.covering(48, 6), 50);
    assert_eq!(state.covering(48, 7), 51);
    assert_eq!(state.cost_from(98), 3 + 1);
    assert_eq!(state.find(0, 470), Some(47));
    assert_eq!(state.find(48, 470), None);
    assert_eq!(state.find(0, 471), None);
}
