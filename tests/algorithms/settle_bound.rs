//! Costs settled after the response, under attack: the bound they keep, checked by brute force.
//!
//! Each case is a random stream of requests for one key. Each request reserves an estimate
//! (`check_n`), and once admitted stays in flight for a random time (so many are in flight at
//! once, and they finish in any order), then settles its true cost (`RateLimiter::settle`): below
//! the reservation the rest is given back while it still counts, above it the key is charged
//! the difference and may go into debt. Time moves by a manual clock; events at the same
//! instant come in a random order.
//!
//! The bound, for a quota of burst `b` and interval `T` (GCRA, the token bucket, the leaky
//! bucket's queue of `b`, and each tier of tiers on its own figures): for any two admissions
//! `i` and `j` (`i` admitted first, at `tᵢ ≤ tⱼ`), the true costs of the admissions from `i` to
//! `j` sum to at most
//!
//! `b + ⌊(tⱼ − tᵢ) / T⌋ + Σ (aₖ − rₖ)⁺` over the admissions `k` from `i` to `j` not settled yet
//! when `j` was admitted (`j` included),
//!
//! where `rₖ` is what `k` reserved and `aₖ` its true cost. So what a request overspent counts
//! against every later admission once it has settled, and only what requests still in flight
//! overspent can pass the quota; when no request costs more than it reserved, the true costs
//! never exceed the quota's allowance in any window. The allowance is GCRA's exactly: a key
//! that takes its burst at `tᵢ` earns one unit every `T` after it.
//!
//! Why it holds: the key's schedule (GCRA's TAT) never runs behind `tᵢ` plus what the admissions
//! since `i` reserved, plus what was charged since, less what was given back of them; a refund
//! gives back only an admission's own place while it is the last one (never what a later one
//! stands on, never what time has already given back), and `j` was admitted only if the
//! schedule then ended within `b·T` of `tⱼ`. A deliberately broken refund (giving back even
//! when the admission is not the key's last) fails this test within a few hundred cases.
//!
//! The leaky bucket is checked at the times its requests were admitted (entered the queue):
//! it shapes, so they run later, one interval apart.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::Algorithm;
use tollgate::clock::{Clock, ManualClock};
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Decision, Quota, RateLimiter};

const MS: u64 = 1_000_000;

/// One request: the time since the previous one, what it reserves, its true cost, how long it
/// stays in flight, and where it falls among the events of its instant.
#[derive(Debug, Clone, Copy)]
struct Req {
    gap: u64,
    reserved: u64,
    actual: u64,
    takes: u64,
    order: u8,
    settle_order: u8,
}

/// An admitted request, as the oracle sees it.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    /// When it was admitted (ns).
    at: u64,
    reserved: u64,
    actual: u64,
    /// The place of its admission among all events.
    admitted: usize,
    /// The place of its settlement among all events.
    settled: usize,
}

fn requests(
    max_gap: u64,
    max_reserved: u64,
    max_over: u64,
    max_takes: u64,
) -> impl Strategy<Value = Vec<Req>> {
    let req = (
        0..=max_gap,
        0..=max_reserved,
        0..=max_reserved + max_over,
        0..=max_takes,
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(
            move |(gap, reserved, actual, takes, order, settle_order)| Req {
                gap,
                reserved,
                // Without room to overspend, the true cost is at most the reservation.
                actual: if max_over == 0 {
                    actual.min(reserved)
                } else {
                    actual
                },
                takes,
                order,
                settle_order,
            },
        );
    prop::collection::vec(req, 1..80)
}

/// Runs `reqs` through `limiter` (memory store, manual clock): each admitted request settles
/// its true cost after it ran and its time in flight passed.
fn run<A>(limiter: RateLimiter<A>, reqs: &[Req]) -> Vec<Admitted>
where
    A: Algorithm + MemoryAlgorithm,
{
    let clock = ManualClock::new();
    let limiter: RateLimiter<A, MemoryStore, ManualClock> = limiter.with_clock(clock.clone());
    let start = clock.now_nanos();
    // (ms, order among the instant's events, request) -> the admission to settle, if any.
    let mut events: BTreeMap<(u64, u8, usize), Option<Decision>> = BTreeMap::new();
    let mut at = 0;
    for (i, r) in reqs.iter().enumerate() {
        at += r.gap;
        events.insert((at, r.order, i), None);
    }
    let mut admitted: Vec<Admitted> = Vec::new();
    let mut index = vec![None; reqs.len()];
    let mut seq = 0;
    while let Some(((ms, _, i), settle)) = events.pop_first() {
        let now = start + ms * MS;
        clock.advance(Duration::from_nanos(now - clock.now_nanos()));
        seq += 1;
        let r = &reqs[i];
        match settle {
            None => {
                let decision = limiter.check_n("k", r.reserved).into_inner().unwrap();
                if decision.allowed {
                    let done = ms + decision.delay.as_millis() as u64 + r.takes;
                    events.insert((done, r.settle_order, i), Some(decision));
                    index[i] = Some(admitted.len());
                    admitted.push(Admitted {
                        at: now,
                        reserved: r.reserved,
                        actual: r.actual,
                        admitted: seq,
                        settled: usize::MAX,
                    });
                }
            }
            Some(admission) => {
                limiter
                    .settle("k", &admission, r.reserved, r.actual)
                    .into_inner()
                    .unwrap();
                admitted[index[i].unwrap()].settled = seq;
            }
        }
    }
    admitted
}

/// The bound of this file's docs, checked over every window from one admission to another,
/// for a quota of `burst` and interval `t` (ns).
fn within_the_bound(burst: u64, t: u64, admitted: &[Admitted]) -> Result<(), TestCaseError> {
    for (j, last) in admitted.iter().enumerate() {
        let (mut cost, mut overspent) = (0, 0);
        for (i, first) in admitted[..=j].iter().enumerate().rev() {
            cost += first.actual;
            if first.settled > last.admitted {
                overspent += first.actual.saturating_sub(first.reserved);
            }
            let allowance = burst + (last.at - first.at) / t;
            prop_assert!(
                cost <= allowance + overspent,
                "admissions {}..={} ({} ns apart) cost {} > {} allowed + {} overspent in flight: {:?}",
                i,
                j,
                last.at - first.at,
                cost,
                allowance,
                overspent,
                admitted
            );
        }
    }
    Ok(())
}

fn figures(quota: &Quota) -> (u64, u64) {
    (quota.burst(), quota.emission_interval().as_nanos() as u64)
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=5, 1u64..=4, 1u64..=6).prop_map(|(limit, secs, burst)| {
        Quota::new(limit, Duration::from_secs(secs)).with_burst(burst)
    })
}

/// Per minute and per day, as an LLM API's tokens: the day tier binds after a few minutes.
fn llm_tiers() -> impl Strategy<Value = [Quota; 2]> {
    (10u64..=120, 3u64..=12, 100u64..=3000, 5u64..=30).prop_map(|(minute, mb, day, db)| {
        [
            Quota::per_minute(minute).with_burst(mb).named("tpm"),
            Quota::per_day(day).with_burst(db).named("tpd"),
        ]
    })
}

fn check_every_tier(quotas: &[Quota], admitted: &[Admitted]) -> Result<(), TestCaseError> {
    for q in quotas {
        let (b, t) = figures(q);
        within_the_bound(b, t, admitted)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gcra_keeps_the_bound(q in quota(), reqs in requests(700, 4, 6, 3000)) {
        let (b, t) = figures(&q);
        within_the_bound(b, t, &run(RateLimiter::gcra(q), &reqs))?;
    }

    #[test]
    fn token_bucket_keeps_the_bound(q in quota(), reqs in requests(700, 4, 6, 3000)) {
        let (b, t) = figures(&q);
        within_the_bound(b, t, &run(RateLimiter::token_bucket(q), &reqs))?;
    }

    #[test]
    fn leaky_bucket_keeps_the_bound_where_requests_queue(q in quota(), reqs in requests(700, 4, 6, 3000)) {
        let (b, t) = figures(&q);
        within_the_bound(b, t, &run(RateLimiter::leaky_bucket(q), &reqs))?;
    }

    #[test]
    fn tiers_keep_the_bound_on_every_tier(quotas in llm_tiers(), reqs in requests(3000, 8, 20, 20_000)) {
        check_every_tier(&quotas, &run(RateLimiter::gcra(quotas.clone()), &reqs))?;
        check_every_tier(&quotas, &run(RateLimiter::token_bucket(quotas.clone()), &reqs))?;
    }

    #[test]
    fn reservations_never_below_the_cost_keep_the_quota(q in quota(), reqs in requests(700, 4, 0, 3000)) {
        prop_assert!(reqs.iter().all(|r| r.actual <= r.reserved));
        let (b, t) = figures(&q);
        for admitted in [
            run(RateLimiter::gcra(q.clone()), &reqs),
            run(RateLimiter::token_bucket(q.clone()), &reqs),
            run(RateLimiter::leaky_bucket(q.clone()), &reqs),
        ] {
            // Nothing overspent: the quota's allowance alone.
            prop_assert!(admitted.iter().all(|a| a.actual <= a.reserved));
            within_the_bound(b, t, &admitted)?;
        }
    }

    #[test]
    fn tiers_with_reservations_never_below_the_cost_keep_every_quota(
        quotas in llm_tiers(),
        reqs in requests(3000, 8, 0, 20_000),
    ) {
        check_every_tier(&quotas, &run(RateLimiter::gcra(quotas.clone()), &reqs))?;
    }
}

/// The bound is tight: a stream can reach it, so the oracle is not vacuous. Burst 3, one a
/// second: 3 at once, each reserving 1 and costing 2, all in flight when the third is admitted.
#[test]
fn the_bound_is_reached_by_overspending_requests_in_flight() {
    let q = Quota::per_second(1).with_burst(3);
    let req = |gap| Req {
        gap,
        reserved: 1,
        actual: 2,
        takes: 5000,
        order: 0,
        settle_order: 0,
    };
    let admitted = run(
        RateLimiter::gcra(q.clone()),
        &[req(0), req(0), req(0), req(0)],
    );
    assert_eq!(admitted.len(), 3, "the fourth is denied");
    let (b, t) = figures(&q);
    // 6 of true cost at one instant: 3 allowed + 3 overspent in flight.
    within_the_bound(b, t, &admitted).unwrap();
    let total: u64 = admitted.iter().map(|a| a.actual).sum();
    assert_eq!(total, b + 3);
    // They settle at 5 s, when their places have come back: the key is charged 3 more from
    // then, its whole burst. The next unit comes back a second later, not a nanosecond sooner.
    let late = |gap| Req {
        takes: 0,
        ..req(gap)
    };
    let after = run(
        RateLimiter::gcra(q),
        &[req(0), req(0), req(0), late(5999), late(1)],
    );
    let times: Vec<u64> = after.iter().map(|a| a.at / MS).collect();
    assert_eq!(times, [0, 0, 0, 6000]);
}
