//! `count_if` on a clock whose readings may be out of order (`clock_jitter.rs`): requests that
//! do not count give their capacity back some time after they were admitted, and both the
//! check and the refund read the clock up to `J` early, at random. Whatever the order of
//! readings and refunds, the requests that count (admitted and not given back) stay within the
//! bound `clock_jitter.rs` states for the algorithm without refunds: for GCRA, the buckets and
//! each GCRA tier `burst + ⌊(D + J) / T⌋` in any interval of true time `D`; for the sliding log
//! `limit`, and for the fixed and sliding windows `2 × limit`, in any interval of
//! `period − J`. `count_if_props.rs` checks refunds on a clock that never goes back.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{
    FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, Tiered, TokenBucket,
};
use tollgate::store::MemoryAlgorithm;
use tollgate::Quota;

use super::clock_jitter::{check_gcra_bound, most_within, quota};

/// A request of cost 1: `gap` ns of true time after the one before, its check reading the
/// clock `jitter` early; one that does not count is refunded `takes` ns after its admission,
/// at a reading `refund_jitter` early.
#[derive(Debug, Clone)]
struct Step {
    gap: u64,
    jitter: u64,
    counts: bool,
    takes: u64,
    refund_jitter: u64,
}

fn steps(gap: u64, j: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            0..=2 * gap,
            0..=j,
            prop::bool::weighted(0.4),
            0..=8 * gap,
            0..=j,
        )
            .prop_map(|(gap, jitter, counts, takes, refund_jitter)| Step {
                gap,
                jitter,
                counts,
                takes,
                refund_jitter,
            }),
        1..150,
    )
}

/// The true times of the admissions that count, in order, as the memory store decides them: a
/// refund the algorithm declines (`None`) leaves its admission counted.
fn counted<A: MemoryAlgorithm>(algorithm: &A, steps: &[Step]) -> Vec<u64> {
    let mut events: BTreeMap<(u64, u8, usize), bool> = BTreeMap::new();
    let mut t = 1_000_000u64;
    for (i, s) in steps.iter().enumerate() {
        t += s.gap;
        events.insert((t, 1, i), false);
    }
    let mut state = A::State::default();
    let mut admitted = vec![None; steps.len()];
    let mut kept = Vec::new();
    while let Some(((t, _, i), finish)) = events.pop_first() {
        let s = &steps[i];
        if !finish {
            let d = algorithm.check_mut(&mut state, t - s.jitter, 1);
            if d.allowed {
                if s.counts {
                    kept.push(t);
                } else {
                    admitted[i] = Some((d, t));
                    events.insert((t + s.takes, 0, i), true);
                }
            }
        } else if let Some((d, at)) = admitted[i].take() {
            match algorithm.refund(&state, &d, t - s.refund_jitter, 1) {
                Some(next) => state = next,
                None => kept.push(at),
            }
        }
    }
    kept.sort_unstable();
    kept
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn buckets_keep_a_jitter_bound_through_refunds(
        (interval, j, steps) in (1..1_000u64, 0..3u64)
            .prop_flat_map(|(t, f)| (Just(t), Just(t * f + t / 2)))
            .prop_flat_map(|(t, j)| (Just(t), Just(j), steps(t, j))),
        limit in 1..8u64,
        burst in 1..8u64,
    ) {
        let q = quota(limit, interval, burst);
        let gcra = Gcra::new(&q);
        let t = gcra.interval_nanos();
        check_gcra_bound(&counted(&gcra, &steps), burst, t, j).map_err(TestCaseError::fail)?;
        let bucket = TokenBucket::new(&q);
        check_gcra_bound(&counted(&bucket, &steps), burst, t, j).map_err(TestCaseError::fail)?;
        let leaky = LeakyBucket::new(&q);
        check_gcra_bound(&counted(&leaky, &steps), burst, t, j).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn each_gcra_tier_keeps_a_jitter_bound_through_refunds(
        (interval, j, steps) in (1..1_000u64, 0..3u64)
            .prop_flat_map(|(t, f)| (Just(t), Just(t * f + t / 2)))
            .prop_flat_map(|(t, j)| (Just(t), Just(j), steps(t, j))),
        burst in 1..6u64,
        outer in 2..6u64,
    ) {
        // A tight tier and one `outer` times longer with `outer` times the burst.
        let inner = quota(1, interval, burst);
        let wide = quota(1, interval * outer, burst * outer / 2 + 1);
        let tiers = Tiered::new([Gcra::new(&inner), Gcra::new(&wide)]);
        let admitted = counted(&tiers, &steps);
        for tier in tiers.tiers() {
            let burst = tier.tolerance_nanos() / tier.interval_nanos();
            check_gcra_bound(&admitted, burst, tier.interval_nanos(), j).map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn windows_keep_their_bound_through_refunds(
        (period, j, steps) in (20..5_000u64, 0..50u64)
            .prop_flat_map(|(p, percent)| (Just(p), Just(p * percent / 100)))
            .prop_flat_map(|(p, j)| (Just(p), Just(j), steps(p / 8, j))),
        limit in 1..10u64,
        sub_windows in 1..5usize,
    ) {
        let q = Quota::new(limit, Duration::from_nanos(period));
        let within = period - j - 1;
        let limit = limit as usize;
        let log = counted(&SlidingLog::new(&q), &steps);
        prop_assert!(most_within(&log, within) <= limit, "sliding log: {log:?}");
        let fixed = counted(&FixedWindow::new(&q), &steps);
        prop_assert!(most_within(&fixed, within) <= 2 * limit, "fixed window: {fixed:?}");
        let sliding = counted(&SlidingWindow::new(&q).sub_windows(sub_windows), &steps);
        prop_assert!(most_within(&sliding, within) <= 2 * limit, "sliding window: {sliding:?}");
    }
}
