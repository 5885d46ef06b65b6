//! Tiered quotas for every algorithm, on seed 004's example: 60 requests per hour, and at most
//! 10 in 5 seconds. A request passes only if both tiers allow it, a denied request consumes
//! from neither, and the reported decision is the most restrictive tier's.

use std::time::Duration;

use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Quota, RateLimiter};

fn tiers() -> [Quota; 2] {
    [
        Quota::per_hour(60).named("hour"),
        Quota::new(10, Duration::from_secs(5)).named("burst"),
    ]
}

fn seed_004<A>(name: &str, limiter: RateLimiter<A>)
where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    let clock = ManualClock::new();
    let limiter: RateLimiter<A, MemoryStore, ManualClock> = limiter.with_clock(clock.clone());
    let mut admitted = 0;
    // Rounds of 15 requests at once, 10 s apart: the short tier lets 10 of each through, until
    // the hour's 60 are spent. All within the first minute, before a linear limiter's hour
    // tier has earned back a request (one a minute).
    for (round, at) in [0, 10, 20, 30, 40, 50, 55, 59].into_iter().enumerate() {
        clock.set(Duration::from_secs(at));
        for i in 0..15 {
            let d = limiter.check_now("client");
            let what = format!("{name}: round {round}, request {i}");
            assert_eq!(d.tiers().len(), 2, "{what}");
            let [hour, burst] = [&d.tiers()[0], &d.tiers()[1]];
            assert_eq!((hour.limit, burst.limit), (60, 10), "{what}");
            if d.allowed {
                admitted += 1;
                assert!(hour.allowed && burst.allowed, "{what}");
                assert_eq!(hour.remaining, 60 - admitted, "{what}");
                assert_eq!(d.remaining, hour.remaining.min(burst.remaining), "{what}");
            } else {
                // Denied: neither tier took anything, and the tier that said no is reported.
                assert_eq!(hour.remaining, 60 - admitted, "{what}: all or nothing");
                let denying = if hour.allowed { burst } else { hour };
                assert_eq!(d.limit, denying.limit, "{what}");
                assert_eq!(d.retry_after, denying.retry_after, "{what}");
                assert!(d.retry_after.is_some(), "{what}");
            }
            let expected = round < 6 && i < 10;
            assert_eq!(d.allowed, expected, "{what}");
        }
    }
    assert_eq!(admitted, 60, "{name}");
    // The reported standing after the hour's quota is spent is the hour tier's.
    let d = limiter.check_n_now("client", 0);
    assert_eq!((d.limit, d.remaining), (60, 0), "{name}");
}

#[test]
fn gcra() {
    seed_004("gcra", RateLimiter::gcra(tiers()));
}

#[test]
fn token_bucket() {
    seed_004("token bucket", RateLimiter::token_bucket(tiers()));
}

#[test]
fn leaky_bucket() {
    seed_004("leaky bucket", RateLimiter::leaky_bucket(tiers()));
}

#[test]
fn fixed_window() {
    seed_004("fixed window", RateLimiter::fixed_window(tiers()));
}

#[test]
fn sliding_window() {
    seed_004("sliding window", RateLimiter::sliding_window(tiers()));
}

#[test]
fn sliding_log() {
    seed_004("sliding log", RateLimiter::sliding_log(tiers()));
}

#[test]
fn hybrid() {
    seed_004("hybrid", RateLimiter::hybrid(tiers()));
}

#[test]
fn tiers_with_names_share_state_and_name_the_policy() {
    let store = MemoryStore::new();
    let a = RateLimiter::gcra(tiers()).with_store(store.clone());
    let b = RateLimiter::gcra(tiers()).with_store(store);
    assert_eq!(a.policy(), "hour+burst");
    assert_eq!(a.quotas().len(), 2);
    for _ in 0..10 {
        assert!(a.check_now("k").allowed);
    }
    assert!(!b.check_now("k").allowed, "one budget under one name");
}
