//! One name in one memory store: limiters share a named policy's state only when they decide it
//! the same way. A name reused with another quota, algorithm or option keeps its own state, so
//! one limiter never resets or reads another's.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::MemoryStore;
use tollgate::{Quota, RateLimiter};

#[test]
fn a_per_second_limit_does_not_reset_a_per_hour_one_of_the_same_name() {
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let hourly = RateLimiter::fixed_window(Quota::per_hour(5).named("login"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    let burst = RateLimiter::fixed_window(Quota::per_second(100).named("login"))
        .with_clock(clock.clone())
        .with_store(store);
    for _ in 0..5 {
        assert!(hourly.check_now("alice").allowed);
    }
    // The per-second limiter sees its own fresh window, and writes nothing the hourly one reads.
    for _ in 0..3 {
        clock.advance(Duration::from_secs(2));
        assert!(burst.check_now("alice").allowed);
        assert_eq!(burst.check_now("alice").remaining, 98);
    }
    assert!(
        !hourly.check_now("alice").allowed,
        "a sixth login within the hour"
    );
}

#[test]
fn gcra_and_the_leaky_bucket_of_one_name_keep_apart() {
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let quota = Quota::per_minute(2).named("api");
    let gcra = RateLimiter::gcra(quota.clone())
        .with_clock(clock.clone())
        .with_store(store.clone());
    let queue = RateLimiter::leaky_bucket(quota)
        .with_clock(clock.clone())
        .with_store(store);
    assert!(gcra.check_now("k").allowed);
    assert!(gcra.check_now("k").allowed);
    assert!(!gcra.check_now("k").allowed);
    // Both keep a TAT; the queue's is its own.
    let first = queue.check_now("k");
    assert!(first.allowed);
    assert_eq!(first.delay, Duration::ZERO);
    assert!(!gcra.check_now("k").allowed);
}

#[test]
fn sliding_windows_with_other_sub_windows_keep_apart() {
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let quota = Quota::per_minute(3).named("search");
    let coarse = RateLimiter::sliding_window(quota.clone())
        .sub_windows(2)
        .with_clock(clock.clone())
        .with_store(store.clone());
    let fine = RateLimiter::sliding_window(quota)
        .sub_windows(4)
        .with_clock(clock.clone())
        .with_store(store);
    for _ in 0..3 {
        assert!(coarse.check_now("k").allowed);
    }
    // A state of another shape would read as fresh and be overwritten: it is not shared.
    assert!(fine.check_now("k").allowed);
    assert!(!coarse.check_now("k").allowed);
}

#[test]
fn the_same_name_quota_and_algorithm_share_one_budget() {
    let store = MemoryStore::new();
    let quota = Quota::per_minute(2).named("shared");
    let a = RateLimiter::gcra(quota.clone()).with_store(store.clone());
    let b = RateLimiter::gcra(quota).with_store(store);
    assert!(a.check_now("k").allowed);
    assert!(b.check_now("k").allowed);
    assert!(!a.check_now("k").allowed);
    assert!(!b.check_now("k").allowed);
}
