//! `count_if` under attack: requests that do not count give their capacity back when their
//! responses finish, in any order and at any time. Whatever that order, the requests that count
//! never exceed the quota in any window or burst, for every algorithm that can refund, in
//! memory (here) and in Redis (`tests/redis/attack_costs.rs`, the same streams with costs).
//!
//! Each case is a random stream of requests for one key; each allowed request finishes after a
//! random time, and those that do not count are refunded then (so refunds arrive after new
//! windows opened, after later admissions, out of order). The requests that were admitted and
//! kept are then checked against the quota by an oracle that knows nothing of refunds.

use crate::support::count_if;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Quota, RateLimiter};

use count_if::{
    conform_to_gcra, fit_every_window, fit_fixed_windows, fit_the_sliding_estimate, on_memory, Req,
};

/// Requests of cost 1 (`tests/redis/attack_costs.rs` runs the same with costs of 1 to 3).
fn requests(max_gap: u64, max_takes: u64) -> impl Strategy<Value = Vec<Req>> {
    count_if::requests(max_gap, max_takes, 1)
}

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..=5, 1u64..=4).prop_map(|(limit, secs)| Quota::new(limit, Duration::from_secs(secs)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gcra_counts_never_exceed_the_burst(q in quota(), burst in 1u64..=4, reqs in requests(700, 3000), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::gcra(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn token_bucket_counts_never_exceed_the_burst(q in quota(), burst in 1u64..=4, reqs in requests(700, 3000), ff: bool) {
        let q = q.with_burst(burst);
        conform_to_gcra(&q, &on_memory(RateLimiter::token_bucket(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn shaped_gcra_counts_never_exceed_the_burst_when_they_run(q in quota(), reqs in requests(700, 3000), ff: bool) {
        // Shaped requests run after their delay: what runs and counts keeps to the quota.
        let limiter = RateLimiter::gcra(q.clone()).max_delay(Duration::from_secs(2));
        conform_to_gcra(&q, &on_memory(limiter, &reqs, ff))?;
    }

    #[test]
    fn tiered_gcra_counts_never_exceed_any_tier(q in quota(), reqs in requests(700, 3000), ff: bool) {
        let per_minute = Quota::per_minute(q.limit() * 3);
        let counted = on_memory(RateLimiter::gcra([q.clone(), per_minute.clone()]), &reqs, ff);
        conform_to_gcra(&q, &counted)?;
        conform_to_gcra(&per_minute, &counted)?;
    }

    #[test]
    fn fixed_window_counts_never_exceed_the_limit(q in quota(), reqs in requests(700, 3000), ff: bool) {
        fit_fixed_windows(&q, &on_memory(RateLimiter::fixed_window(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn sliding_log_counts_never_exceed_the_limit(q in quota(), reqs in requests(700, 3000), ff: bool) {
        fit_every_window(&q, &on_memory(RateLimiter::sliding_log(q.clone()), &reqs, ff))?;
    }

    #[test]
    fn sliding_window_counts_never_exceed_the_estimate(
        q in quota(),
        k in prop::sample::select(vec![1u64, 2, 4]),
        reqs in requests(700, 3000),
        ff: bool,
    ) {
        let limiter = RateLimiter::sliding_window(q.clone()).sub_windows(k as usize);
        fit_the_sliding_estimate(&q, k, &on_memory(limiter, &reqs, ff))?;
    }
}

// The same streams run against the Redis scripts in `tests/redis/attack_costs.rs`, costs included.

/// A layer refuses `count_if` for an algorithm that cannot give capacity back, where it is
/// built, instead of counting every request silently.
#[test]
#[should_panic(
    expected = "count_if: this layer's algorithm (the hybrid) cannot give capacity back"
)]
fn count_if_is_refused_for_the_hybrid() {
    let _ = tollgate::RateLimitLayer::hybrid(Quota::per_minute(5)).count_if(|_| true);
}

#[test]
fn count_if_is_refused_for_hybrid_tiers_too() {
    let refused = std::panic::catch_unwind(|| {
        tollgate::RateLimitLayer::hybrid([Quota::per_second(1), Quota::per_minute(5)])
            .count_if(|_| true)
    });
    assert!(refused.is_err());
    // Every other algorithm takes it.
    let _ = tollgate::RateLimitLayer::gcra(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::sliding_log(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::leaky_bucket(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::sliding_window(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::fixed_window(Quota::per_minute(5)).count_if(|_| true);
    let _ = tollgate::RateLimitLayer::token_bucket(Quota::per_minute(5)).count_if(|_| true);
}
