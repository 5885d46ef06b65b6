//! Every algorithm under two threads racing on one key in the memory store: with the clock
//! frozen, exactly the capacity passes (no over-admission, no lost update), and the allowed
//! decisions' `remaining` figures tile the capacity without a gap or an overlap, so each
//! decision saw the state it changed.

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Quota, RateLimiter};

const THREADS: usize = 2;
const CHECKS: usize = 5_000;

/// Two threads each make `CHECKS` requests for one key, thread `i` with costs cycling through
/// `costs` from offset `i`; returns the allowed `(remaining, cost)` pairs.
fn hammer<A>(limiter: &RateLimiter<A, MemoryStore, ManualClock>, costs: &[u64]) -> Vec<(u64, u64)>
where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    let barrier = Barrier::new(THREADS);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (limiter, barrier) = (limiter.clone(), &barrier);
                scope.spawn(move || {
                    let mut allowed = Vec::new();
                    barrier.wait();
                    for j in 0..CHECKS {
                        let cost = costs[(i + j) % costs.len()];
                        let d = limiter.check_n_now("hot", cost);
                        if d.allowed {
                            assert_eq!(d.retry_after, None);
                            allowed.push((d.remaining, cost));
                        } else {
                            assert!(d.retry_after.is_some(), "cost {cost} fits the capacity");
                        }
                    }
                    allowed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

/// Runs the race for the limiter `make` builds on a frozen clock and checks that exactly
/// `capacity` passed, each allowed decision taking `[remaining, remaining + cost)`.
fn exactly<A>(name: &str, capacity: u64, make: impl Fn() -> RateLimiter<A>)
where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    for costs in [&[1][..], &[1, 2, 3]] {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(1000));
        let limiter = make().with_clock(clock);
        let allowed = hammer(&limiter, costs);
        let what = format!("{name}, costs {costs:?}");
        let total: u64 = allowed.iter().map(|&(_, cost)| cost).sum();
        // With costs above 1 the last place or two may stay free: nothing that fits them comes.
        let slack = costs.iter().max().unwrap() - 1;
        assert!(
            total <= capacity && total + slack >= capacity,
            "{what}: admitted {total} of {capacity}"
        );
        let mut spans: Vec<(u64, u64)> = allowed.iter().map(|&(r, c)| (r, r + c)).collect();
        spans.sort_unstable();
        let mut next = capacity - total;
        for (lo, hi) in spans {
            assert_eq!(lo, next, "{what}: remaining figures overlap or leave a gap");
            next = hi;
        }
        assert_eq!(next, capacity, "{what}");
        let after = limiter.check_n_now("hot", 0);
        assert_eq!(after.remaining, capacity - total, "{what}");
    }
}

#[test]
fn gcra() {
    exactly("gcra", 50, || {
        RateLimiter::gcra(Quota::per_second(10).with_burst(50))
    });
}

#[test]
fn gcra_shaping() {
    // Immediate passes count in `remaining`; shaped ones wait. 20 pass at once, then 10 more
    // within one second, so `remaining` tiles only the first 20: check the total instead.
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(Quota::per_second(10).with_burst(20))
        .max_delay(Duration::from_secs(1))
        .with_clock(clock);
    let allowed = hammer(&limiter, &[1]);
    assert_eq!(allowed.len(), 30);
}

#[test]
fn leaky_bucket() {
    exactly("leaky bucket", 40, || {
        RateLimiter::leaky_bucket(Quota::per_second(10).with_burst(40))
    });
}

#[test]
fn tiered_gcra() {
    exactly("tiered gcra", 30, || {
        RateLimiter::gcra([Quota::per_second(100), Quota::per_minute(30)])
    });
}

#[test]
fn token_bucket() {
    exactly("token bucket", 50, || {
        RateLimiter::token_bucket(Quota::per_second(10).with_burst(50))
    });
}

#[test]
fn fixed_window() {
    exactly("fixed window", 60, || {
        RateLimiter::fixed_window(Quota::per_minute(60))
    });
}

#[test]
fn sliding_window() {
    exactly("sliding window", 60, || {
        RateLimiter::sliding_window(Quota::per_minute(60))
    });
    exactly("sliding window, 8 counters", 60, || {
        RateLimiter::sliding_window(Quota::per_minute(60)).sub_windows(8)
    });
}

#[test]
fn sliding_log() {
    exactly("sliding log", 60, || {
        RateLimiter::sliding_log(Quota::per_minute(60))
    });
}

#[test]
fn hybrid() {
    exactly("hybrid", 60, || RateLimiter::hybrid(Quota::per_minute(60)));
}

#[test]
fn tiered_windows() {
    exactly("tiered fixed window", 20, || {
        RateLimiter::fixed_window([Quota::per_second(20), Quota::per_hour(1000)])
    });
    exactly("tiered sliding log", 25, || {
        RateLimiter::sliding_log([Quota::per_minute(25), Quota::per_second(50)])
    });
}
