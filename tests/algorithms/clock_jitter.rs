//! A clock whose readings on different cores may be out of order (the `SystemClock` on the
//! time-stamp counter): every algorithm, fed readings up to `J` earlier than the true time at
//! random, admits no more than the bound `SystemClock`'s docs state for it.
//!
//! The true times of the requests go up; each request's reading is its true time minus a
//! random jitter in `0..=J`, so consecutive readings go back by up to `J`. The admitted
//! requests' true times are then checked against each algorithm's bound on a perfect clock,
//! widened by `J`:
//!
//! - GCRA, the token bucket, the leaky bucket (and each tier of tiered GCRA): at most
//!   `burst + ⌊(D + J) / T⌋` admissions in any interval of true time of length `D`;
//! - the sliding log: at most `limit` in any interval of length `period − J`;
//! - the fixed window, the sliding window (two-window estimate) and the hybrid: at most
//!   `2 × limit` in any interval of length `period − J` (their bound on a perfect clock in an
//!   interval of `period`: a window's limit on each side of a boundary).
//!
//! With `J = 0` these are the perfect clock's bounds, so the properties also run without
//! jitter. Quotas are nanoseconds long so that the jitter is a sizeable part of a period, as a
//! microsecond of jitter is of a millisecond-scale limit.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::{
    FixedWindow, Gcra, Hybrid, LeakyBucket, SlidingLog, SlidingWindow, Tiered, TokenBucket,
};
use tollgate::store::MemoryAlgorithm;
use tollgate::Quota;

/// A run: the true times of the requests, and each one's jitter.
#[derive(Debug, Clone)]
struct Run {
    times: Vec<u64>,
    jitter: Vec<u64>,
}

impl Run {
    /// The readings: true time minus jitter.
    fn readings(&self) -> impl Iterator<Item = u64> + '_ {
        self.times.iter().zip(&self.jitter).map(|(t, j)| t - j)
    }
}

/// Up to 300 requests `0..=2 × gap` ns apart, starting well after 0, with jitters in `0..=j`.
fn run(gap: u64, j: u64) -> impl Strategy<Value = Run> {
    prop::collection::vec((0..=2 * gap, 0..=j), 1..300).prop_map(|steps| {
        let mut t = 1_000_000;
        let (times, jitter) = steps
            .into_iter()
            .map(|(step, jitter)| {
                t += step;
                (t, jitter)
            })
            .unzip();
        Run { times, jitter }
    })
}

/// The true times of the requests `algorithm` admits, in order, fed the run's readings (each
/// request of cost 1, decided in place as the memory store does).
fn admitted<A: MemoryAlgorithm>(algorithm: &A, run: &Run) -> Vec<u64> {
    let mut state = A::State::default();
    run.readings()
        .zip(&run.times)
        .filter(|&(now, _)| algorithm.check_mut(&mut state, now, 1).allowed)
        .map(|(_, &t)| t)
        .collect()
}

/// The most admissions whose true times lie within `window` ns of each other (an interval of
/// length `window`, both ends included).
pub(super) fn most_within(admitted: &[u64], window: u64) -> usize {
    let mut first = 0;
    let mut most = 0;
    for (last, &t) in admitted.iter().enumerate() {
        while t - admitted[first] > window {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

/// GCRA's bound: for every pair of admissions, the count from one to the other is at most
/// `burst + ⌊(t_k − t_i + J) / T⌋`.
pub(super) fn check_gcra_bound(
    admitted: &[u64],
    burst: u64,
    interval: u64,
    j: u64,
) -> Result<(), String> {
    for i in 0..admitted.len() {
        for k in i..admitted.len() {
            let count = (k - i + 1) as u64;
            let bound = burst + (admitted[k] - admitted[i] + j) / interval;
            if count > bound {
                return Err(format!(
                    "{count} admissions from {} to {} (bound {bound}, T {interval}, J {j})",
                    admitted[i], admitted[k]
                ));
            }
        }
    }
    Ok(())
}

/// A quota of `limit` per `limit × interval` ns, in bursts of `burst`.
pub(super) fn quota(limit: u64, interval: u64, burst: u64) -> Quota {
    Quota::new(limit, Duration::from_nanos(limit * interval)).with_burst(burst)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn buckets_admit_at_most_a_jitter_more(
        (interval, j, run) in (1..1_000u64, 0..3u64)
            .prop_flat_map(|(t, f)| (Just(t), Just(t * f + t / 2)))
            .prop_flat_map(|(t, j)| (Just(t), Just(j), run(t, j))),
        limit in 1..8u64,
        burst in 1..8u64,
    ) {
        let q = quota(limit, interval, burst);
        let gcra = Gcra::new(&q);
        let t = gcra.interval_nanos();
        check_gcra_bound(&admitted(&gcra, &run), burst, t, j).map_err(TestCaseError::fail)?;
        let bucket = TokenBucket::new(&q);
        check_gcra_bound(&admitted(&bucket, &run), burst, t, j).map_err(TestCaseError::fail)?;
        let leaky = LeakyBucket::new(&q);
        check_gcra_bound(&admitted(&leaky, &run), burst, t, j).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn each_gcra_tier_admits_at_most_a_jitter_more(
        (interval, j, run) in (1..1_000u64, 0..3u64)
            .prop_flat_map(|(t, f)| (Just(t), Just(t * f + t / 2)))
            .prop_flat_map(|(t, j)| (Just(t), Just(j), run(t, j))),
        burst in 1..6u64,
        outer in 2..6u64,
    ) {
        // A tight tier and one `outer` times longer with `outer` times the burst.
        let inner = quota(1, interval, burst);
        let wide = quota(1, interval * outer, burst * outer / 2 + 1);
        let tiers = Tiered::new([Gcra::new(&inner), Gcra::new(&wide)]);
        let admitted = admitted(&tiers, &run);
        for tier in tiers.tiers() {
            let burst = tier.tolerance_nanos() / tier.interval_nanos();
            check_gcra_bound(&admitted, burst, tier.interval_nanos(), j)
                .map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn windows_admit_at_most_their_bound_in_a_period_less_the_jitter(
        (period, j, run) in (20..5_000u64, 0..50u64)
            .prop_flat_map(|(p, percent)| (Just(p), Just(p * percent / 100)))
            .prop_flat_map(|(p, j)| (Just(p), Just(j), run(p / 8, j))),
        limit in 1..10u64,
        sub_windows in 1..5usize,
    ) {
        let q = Quota::new(limit, Duration::from_nanos(period));
        let within = period - j - 1;
        let limit = limit as usize;
        let log = admitted(&SlidingLog::new(&q), &run);
        prop_assert!(most_within(&log, within) <= limit, "sliding log: {log:?}");
        let fixed = admitted(&FixedWindow::new(&q), &run);
        prop_assert!(most_within(&fixed, within) <= 2 * limit, "fixed window: {fixed:?}");
        let sliding = SlidingWindow::new(&q).sub_windows(sub_windows);
        let sliding = admitted(&sliding, &run);
        prop_assert!(most_within(&sliding, within) <= 2 * limit, "sliding window: {sliding:?}");
        let hybrid = admitted(&Hybrid::new(&q), &run);
        prop_assert!(most_within(&hybrid, within) <= 2 * limit, "hybrid: {hybrid:?}");
    }
}

/// The properties can fail: an algorithm that let a backward reading open a new window (a
/// wrapping subtraction of the window's start) would admit a second limit within one period.
#[test]
fn a_window_that_reopened_on_a_backward_reading_would_be_caught() {
    // Reopening the window at every request: one admission per request, 3 within 2 ns.
    let reopened = [1_000, 1_001, 1_002];
    assert!(most_within(&reopened, 10) > 2);
    assert!(check_gcra_bound(&reopened, 1, 100, 5).is_err());
}

/// Feeds `run`'s readings (costs `costs`, cycled) to `algorithm` as the memory store does, and
/// at each denial that names a wait `r`, retries the request alone at its reading plus `r` (on
/// the state as the denial left it): it must pass. A reading earlier than the key's last write
/// (readings out of order by up to `J`) must not make the wait too short.
fn retry_at_retry_after_passes<A: MemoryAlgorithm>(
    name: &str,
    algorithm: &A,
    run: &Run,
    costs: &[u64],
) -> Result<(), TestCaseError> {
    let mut state = A::State::default();
    for (i, now) in run.readings().enumerate() {
        let cost = costs[i % costs.len()];
        let before = state.clone();
        let decision = algorithm.check_mut(&mut state, now, cost);
        if let (false, Some(wait)) = (decision.allowed, decision.retry_after) {
            let wait = u64::try_from(wait.as_nanos()).unwrap();
            let retry = algorithm.check(&before, now + wait, cost).decision;
            prop_assert!(
                retry.allowed,
                "{name}: request {i} (cost {cost}) denied at {now} with retry_after {wait} ns, \
                 denied again at {}: {retry:?}",
                now + wait
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Every algorithm and tiers: a denied request retried alone at `now + retry_after` passes,
    /// with readings out of order by up to a third of a period.
    #[test]
    fn a_request_retried_at_its_retry_after_passes(
        (period, _j, run) in (40..5_000u64, 0..34u64)
            .prop_flat_map(|(p, percent)| (Just(p), Just(p * percent / 100)))
            .prop_flat_map(|(p, j)| (Just(p), Just(j), run(p / 8, j))),
        limit in 1..8u64,
        burst in 1..8u64,
        sub_windows in 1..5usize,
        costs in prop::collection::vec(1..4u64, 1..4),
        outer in 2..6u64,
    ) {
        let q = Quota::new(limit, Duration::from_nanos(period)).with_burst(burst.max(limit));
        let costs: Vec<u64> = costs.into_iter().map(|c| c.min(limit)).collect();
        retry_at_retry_after_passes("gcra", &Gcra::new(&q), &run, &costs)?;
        retry_at_retry_after_passes("token bucket", &TokenBucket::new(&q), &run, &costs)?;
        retry_at_retry_after_passes("leaky bucket", &LeakyBucket::new(&q), &run, &costs)?;
        retry_at_retry_after_passes("fixed window", &FixedWindow::new(&q), &run, &costs)?;
        let sliding = SlidingWindow::new(&q).sub_windows(sub_windows);
        retry_at_retry_after_passes("sliding window", &sliding, &run, &costs)?;
        retry_at_retry_after_passes("sliding log", &SlidingLog::new(&q), &run, &costs)?;
        retry_at_retry_after_passes("hybrid", &Hybrid::new(&q), &run, &costs)?;
        // Tiers: a tight quota and one `outer` times longer.
        let wide = Quota::new(limit * outer / 2 + 1, Duration::from_nanos(period * outer));
        let gcra = Tiered::new([Gcra::new(&q), Gcra::new(&wide)]);
        retry_at_retry_after_passes("gcra tiers", &gcra, &run, &costs)?;
        let buckets = Tiered::new([TokenBucket::new(&q), TokenBucket::new(&wide)]);
        retry_at_retry_after_passes("token bucket tiers", &buckets, &run, &costs)?;
        let windows = Tiered::new([FixedWindow::new(&q), FixedWindow::new(&wide)]);
        retry_at_retry_after_passes("fixed window tiers", &windows, &run, &costs)?;
        let logs = Tiered::new([SlidingLog::new(&q), SlidingLog::new(&wide)]);
        retry_at_retry_after_passes("sliding log tiers", &logs, &run, &costs)?;
        let hybrids = Tiered::new([Hybrid::new(&q), Hybrid::new(&wide)]);
        retry_at_retry_after_passes("hybrid tiers", &hybrids, &run, &costs)?;
        let slidings = Tiered::new([sliding, SlidingWindow::new(&wide)]);
        retry_at_retry_after_passes("sliding window tiers", &slidings, &run, &costs)?;
    }
}
