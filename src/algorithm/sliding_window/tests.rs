use std::time::Duration;

use super::*;
use crate::Decision;

const S: u64 = 1_000_000_000;

fn state(base: u64, last: u64, counts: &[u64]) -> SlidingWindowState {
    SlidingWindowState {
        base: base * S,
        last: last * S,
        counts: counts.into(),
    }
}

/// (state, now s, cost) -> (allowed, remaining, reset_after s, retry_after s, next state)
type Case = (
    (SlidingWindowState, u64, u64),
    (bool, u64, u64, Option<u64>, Option<SlidingWindowState>),
);

fn run(algo: &SlidingWindow, limit: u64, cases: Vec<Case>) {
    for ((before, now, cost), (allowed, remaining, reset, retry, next)) in cases {
        let out = algo.check(&before, now * S, cost);
        let d = out.decision;
        let case = format!("{before:?} now={now} cost={cost}");
        assert_eq!(d.allowed, allowed, "{case}");
        assert_eq!(d.limit, limit, "{case}");
        assert_eq!(d.remaining, remaining, "{case}");
        assert_eq!(d.reset_after, Duration::from_secs(reset), "{case}");
        assert_eq!(d.retry_after, retry.map(Duration::from_secs), "{case}");
        assert_eq!(d.delay, Duration::ZERO, "{case}");
        assert_eq!(out.state, next, "{case}");
        let mut in_place = before.clone();
        assert_eq!(algo.check_mut(&mut in_place, now * S, cost), d, "{case}");
        assert_eq!(in_place, out.state.unwrap_or(before), "{case}");
    }
}

#[test]
fn hand_checked_two_windows() {
    // 10 per 60 s. The key's windows begin at 0 s; 6 were admitted by 10 s.
    let algo = SlidingWindow::new(&Quota::new(10, Duration::from_secs(60)));
    let a = || state(0, 10, &[0, 6]);
    let cases: Vec<Case> = vec![
        // the rest of the limit in the same window; the request weighs in until 120 s
        (
            (a(), 30, 4),
            (true, 0, 90, None, Some(state(0, 30, &[0, 10]))),
        ),
        // one too many: at 70 s the 6 weigh 6 × 50/60 = 5, and 5 + 5 = 10
        ((a(), 30, 5), (false, 4, 90, Some(40), None)),
        // above the limit: never
        ((a(), 30, 11), (false, 4, 90, None, None)),
        // halfway through the next window the 6 weigh 3
        ((a(), 90, 0), (true, 7, 30, None, None)),
        // 3 + 7 = 10 passes exactly; the windows move up to [60 s, 120 s)
        (
            (a(), 90, 7),
            (true, 0, 90, None, Some(state(60, 90, &[6, 7]))),
        ),
        // 3 + 8 waits until the 6 weigh 2, at 100 s
        ((a(), 90, 8), (false, 7, 30, Some(10), None)),
        // two windows on nothing weighs in: a new grid begins at the request
        (
            (a(), 120, 1),
            (true, 9, 120, None, Some(state(120, 120, &[0, 1]))),
        ),
        // a clock before the newest request reads as its time (10 s)
        (
            (a(), 5, 1),
            (true, 3, 115, None, Some(state(0, 10, &[0, 7]))),
        ),
        // fresh key
        (
            (SlidingWindowState::default(), 7, 2),
            (true, 8, 120, None, Some(state(7, 7, &[0, 2]))),
        ),
        (
            (SlidingWindowState::default(), 7, 0),
            (true, 10, 0, None, None),
        ),
        (
            (SlidingWindowState::default(), 7, 11),
            (false, 10, 0, None, None),
        ),
    ];
    run(&algo, 10, cases);
}

#[test]
fn hand_checked_sub_windows() {
    // 6 per 30 s in 3 sub-windows of 10 s: 1 in [0, 10), 2 in [10, 20), 3 in [20, 30).
    let algo = SlidingWindow::new(&Quota::new(6, Duration::from_secs(30))).sub_windows(3);
    let b = || state(0, 25, &[0, 1, 2, 3]);
    let cases: Vec<Case> = vec![
        // all 6 inside the window; the 3 weigh in until [20, 30) leaves, at 60 s
        ((b(), 28, 0), (true, 0, 32, None, None)),
        // at 30 s [0, 10) straddles the window's start and weighs in full; at 40 s it is out
        // and [10, 20) weighs in full: 2 + 3 + 1 = 6
        ((b(), 30, 1), (false, 0, 30, Some(10), None)),
        // [0, 10) weighs 1 × 5/10; rounded up, nothing remains
        ((b(), 35, 1), (false, 0, 25, Some(5), None)),
        // at 45 s [10, 20) weighs 2 × 5/10 = 1: 1 + 3 + 1 = 5; the base moves to 30 s
        (
            (b(), 45, 1),
            (true, 1, 35, None, Some(state(30, 45, &[2, 3, 0, 1]))),
        ),
        // 1 + 3 + 2 = 6 exactly
        (
            (b(), 45, 2),
            (true, 0, 35, None, Some(state(30, 45, &[2, 3, 0, 2]))),
        ),
        // 1 + 3 + 3 needs [10, 20) to weigh nothing: at 50 s it leaves and [20, 30)
        // straddles the window's start, weighing 3 in full: 3 + 3 = 6
        ((b(), 45, 3), (false, 2, 15, Some(5), None)),
        // the whole limit needs every counter gone: 60 s
        ((b(), 45, 6), (false, 2, 15, Some(15), None)),
    ];
    run(&algo, 6, cases);
}

#[test]
fn refunds_come_from_the_admissions_counter_while_it_is_live() {
    let at = |t: u64| Decision::allow(10, 0, Duration::ZERO).with_receipt(t);
    let algo = SlidingWindow::new(&Quota::new(10, Duration::from_secs(60)));
    let a = state(0, 10, &[0, 6]);
    assert_eq!(
        algo.refund(&a, &at(10 * S), 30 * S, 2),
        Some(state(0, 10, &[0, 4]))
    );
    assert_eq!(
        algo.refund(&a, &at(10 * S), 30 * S, 10),
        Some(SlidingWindowState::default())
    );
    assert_eq!(algo.refund(&a, &at(10 * S), 30 * S, 0), None);
    assert_eq!(algo.refund(&a, &at(10 * S), 120 * S, 1), None);
    // Counted in the previous window: taken from it, not from the current one.
    let prev = state(0, 70, &[3, 6]);
    assert_eq!(
        algo.refund(&prev, &at(10 * S), 80 * S, 1),
        Some(state(0, 70, &[2, 6]))
    );
    let sub = SlidingWindow::new(&Quota::new(6, Duration::from_secs(30))).sub_windows(3);
    // Base 0, newest request at 25 s: the counters are -10..0, 0..10, 10..20 and 20..30 s.
    let b = state(0, 25, &[5, 1, 2, 3]);
    assert_eq!(
        sub.refund(&b, &at(15 * S), 35 * S, 1),
        Some(state(0, 25, &[5, 1, 1, 3]))
    );
    assert_eq!(
        sub.refund(&b, &at(15 * S), 35 * S, 4),
        Some(state(0, 25, &[5, 1, 0, 3]))
    );
    // 0 s is in the counter of 0..10 s.
    assert_eq!(
        sub.refund(&b, &at(0), 35 * S, 1),
        Some(state(0, 25, &[5, 0, 2, 3]))
    );
    assert_eq!(sub.refund(&b, &at(u64::MAX), 35 * S, 1), None);
    // Base 30 s, newest at 55 s: 25 s (before the base) is in the counter of 20..30 s...
    let c = state(30, 55, &[5, 1, 2, 3]);
    assert_eq!(
        sub.refund(&c, &at(25 * S), 56 * S, 1),
        Some(state(30, 55, &[4, 1, 2, 3]))
    );
    // ... which is out of the window at 61 s: it is not refunded to a newer counter.
    assert_eq!(sub.refund(&c, &at(25 * S), 61 * S, 1), None);
}

#[test]
fn freshness_follows_the_newest_counter() {
    let algo = SlidingWindow::new(&Quota::new(10, Duration::from_secs(60)));
    assert!(algo.is_fresh(&SlidingWindowState::default(), 0));
    let a = state(0, 10, &[0, 6]);
    assert!(!algo.is_fresh(&a, 0));
    assert!(!algo.is_fresh(&a, 120 * S - 1));
    assert!(algo.is_fresh(&a, 120 * S));
    // Counters refunded to zero weigh nothing.
    assert!(algo.is_fresh(&state(0, 10, &[0, 0]), 10 * S));
    // Counters of another configuration are not read.
    assert!(algo.sub_windows(2).is_fresh(&a, 10 * S));
}

#[test]
fn sub_windows_need_not_divide_the_period() {
    // 2 per 10 ns in 3 sub-windows of 10/3 ns: [0, 3.33), [3.33, 6.67), [6.67, 10), ...
    let algo = SlidingWindow::new(&Quota::new(2, Duration::from_nanos(10))).sub_windows(3);
    let mut s = SlidingWindowState::default();
    assert!(algo.check_mut(&mut s, 0, 2).allowed);
    // Sub-window 0 leaves the estimate at 4 × 10/3 = 13.33 ns: 14 is the first nanosecond.
    let d = algo.check_mut(&mut s, 3, 1);
    assert_eq!(d.reset_after, Duration::from_nanos(11));
    // At 12 ns the window is (2, 12] and holds 0.4 of sub-window 0: 2 × 0.4 + 1 ≤ 2. At
    // 11 ns it holds 0.7: 2 × 0.7 + 1 > 2.
    assert_eq!(d.retry_after, Some(Duration::from_nanos(9)));
    assert!(algo.check(&s, 12, 1).decision.allowed);
    assert!(!algo.check(&s, 11, 1).decision.allowed);
    assert!(algo.check(&s, 14, 2).decision.allowed);
    assert!(!algo.check(&s, 13, 2).decision.allowed);
}

#[test]
#[should_panic(expected = "must be from 1 to 64")]
fn zero_sub_windows_panic() {
    let _ = SlidingWindow::new(&Quota::per_second(1)).sub_windows(0);
}

#[test]
#[should_panic(expected = "must be from 1 to 64")]
fn too_many_sub_windows_panic() {
    let _ = SlidingWindow::new(&Quota::per_second(1)).sub_windows(65);
}

#[test]
fn extreme_values_saturate_instead_of_overflowing() {
    let quotas = [
        Quota::new(u64::MAX, Duration::from_nanos(u64::MAX)),
        Quota::new(u64::MAX, Duration::from_nanos(1)),
        Quota::new(1, Duration::from_nanos(1)),
        Quota::new(1, Duration::from_nanos(u64::MAX)),
    ];
    let times = [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let costs = [0, 1, u64::MAX - 1, u64::MAX];
    for quota in &quotas {
        for k in [1, 2, 7, 64] {
            let algo = SlidingWindow::new(quota).sub_windows(k);
            let mut states = vec![SlidingWindowState::default()];
            for &t in &times {
                for &c in &costs {
                    let mut s = SlidingWindowState::default();
                    algo.check_mut(&mut s, t, c);
                    states.push(s);
                }
            }
            states.push(SlidingWindowState {
                base: u64::MAX,
                last: 0,
                counts: vec![u64::MAX; k + 1].into(),
            });
            for s in &states {
                for &t in &times {
                    for &c in &costs {
                        let out = algo.check(s, t, c);
                        for receipt in [0, t, s.last, u64::MAX] {
                            let admission =
                                Decision::allow(0, 0, Duration::ZERO).with_receipt(receipt);
                            let _ = algo.refund(s, &admission, t, c);
                        }
                        let _ = algo.is_fresh(s, t);
                        if let Some(next) = out.state {
                            let _ = algo.check(&next, t, c);
                            let _ = algo.check(&next, u64::MAX, c);
                        }
                    }
                }
            }
        }
    }
    let algo = SlidingWindow::new(&quotas[0]);
    let out = algo.check(&SlidingWindowState::default(), u64::MAX, u64::MAX);
    assert!(out.decision.allowed);
    assert_eq!(out.decision.reset_after, Duration::from_nanos(u64::MAX));
    let full = out.state.unwrap_or_default();
    let out = algo.check(&full, 0, 1);
    assert!(!out.decision.allowed);
    assert_eq!(
        out.decision.retry_after,
        Some(Duration::from_nanos(u64::MAX))
    );
}

#[cfg(target_pointer_width = "64")]
#[test]
fn state_size() {
    // The two-window estimate's counters inline: 40 bytes and no heap block, where a boxed
    // slice took 32 bytes and a 16-byte block (and a second memory access per check).
    assert_eq!(std::mem::size_of::<SlidingWindowState>(), 40);
    let window = SlidingWindow::new(&Quota::per_second(10));
    let mut state = SlidingWindowState::default();
    window.check_mut(&mut state, S, 1);
    assert!(matches!(state.counts, Few::Two([0, 1])));
    let eight = window.sub_windows(8);
    let mut state = SlidingWindowState::default();
    eight.check_mut(&mut state, S, 1);
    assert!(matches!(&state.counts, Few::Heap(c) if c.len() == 9));
}

proptest::proptest! {
    /// The division's shortcuts (a divisor of 1, a quotient of 0 or 1) and its 64-bit path
    /// answer as a 128-bit division does, around every boundary they test.
    #[test]
    fn div_rem_agrees_with_division(
        d in proptest::prop_oneof![
            proptest::strategy::Just(1u128), 2u128..=64, 1u128..=u128::from(u64::MAX),
            u128::from(u64::MAX)..=u128::MAX,
        ],
        pick in 0u8..6,
        n in proptest::num::u128::ANY,
    ) {
        let n = match pick {
            0 => n % d,                                  // a quotient of 0
            1 => d.saturating_add(n % d),                // of 1
            2 => d.saturating_mul(2).saturating_sub(1),  // the last of 1
            3 => d.saturating_mul(2),                    // the first of 2
            4 => n & u128::from(u64::MAX),               // fits in 64 bits
            _ => n,
        };
        proptest::prop_assert_eq!(frame::div_rem(n, d), (n / d, n % d));
        proptest::prop_assert_eq!(frame::checked_div(n, d), n.checked_div(d));
        proptest::prop_assert_eq!(frame::checked_div(n, 0), None);
    }
}
