//! The local cache of denials on a real `redis-server`: bounded however many clients are
//! denied, evicting to make room for the newest denials, answering them without a round trip,
//! and never letting a denied client through before its `retry_after`, evicted or not.

use crate::support::redis as server;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimiter};

fn a_full_cache_stays_bounded_and_never_admits_a_denied_client_early() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let store = server::closed_on_caller_clock(&server.url())
            .await
            .deny_cache(4);
        // One a minute, no burst: the second request waits 60 s.
        let limiter = RateLimiter::gcra(Quota::per_minute(1).named("dc"))
            .with_clock(clock.clone())
            .with_store(store);
        let clients: Vec<u64> = (0..20).collect();
        for &c in &clients {
            assert!(limiter.check(c).await.unwrap().allowed);
            let denied = limiter.check(c).await.unwrap();
            assert!(!denied.allowed);
            assert_eq!(denied.retry_after, Some(Duration::from_secs(60)));
            assert!(limiter.table().cached_denials() <= 4, "bounded");
        }
        assert_eq!(limiter.table().cached_denials(), 4, "full, and no more");
        // The newest denials are the ones kept: answered without a round trip.
        let before = server.calls("evalsha");
        for &c in &clients[16..] {
            assert!(!limiter.check(c).await.unwrap().allowed);
        }
        assert_eq!(server.calls("evalsha"), before, "answered from the cache");

        // Half-way and just before the end, every client is still denied, with the exact wait,
        // whether its denial was kept or evicted (then Redis answers).
        for (at, left) in [
            (Duration::from_secs(30), Duration::from_secs(30)),
            (
                Duration::from_nanos(29_999_999_999),
                Duration::from_nanos(1),
            ),
        ] {
            clock.advance(at);
            for _ in 0..3 {
                for &c in &clients {
                    let d = limiter.check(c).await.unwrap();
                    assert!(!d.allowed, "client {c} let through early");
                    assert_eq!(d.retry_after, Some(left), "client {c}");
                }
            }
            assert!(limiter.table().cached_denials() <= 4, "bounded");
        }
        // At the end, each client passes once again.
        clock.advance(Duration::from_nanos(1));
        for &c in &clients {
            assert!(limiter.check(c).await.unwrap().allowed, "client {c}");
            assert!(!limiter.check(c).await.unwrap().allowed, "client {c}");
        }
    });
}

fn a_large_cache_holds_exactly_its_capacity_across_its_shards() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        let clock = ManualClock::new();
        let store = server::closed_on_caller_clock(&server.url())
            .await
            .deny_cache(500);
        let limiter = RateLimiter::gcra(Quota::per_hour(1).named("big"))
            .with_clock(clock.clone())
            .with_store(store);
        for c in 0..1500u64 {
            assert!(limiter.check(c).await.unwrap().allowed);
            assert!(!limiter.check(c).await.unwrap().allowed);
        }
        assert_eq!(limiter.table().cached_denials(), 500);
        // Every client is still denied, from the cache or from Redis.
        for c in 0..1500u64 {
            assert!(!limiter.check(c).await.unwrap().allowed, "client {c}");
        }
        assert_eq!(limiter.table().cached_denials(), 500);
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "a_full_cache_stays_bounded_and_never_admits_a_denied_client_early",
            a_full_cache_stays_bounded_and_never_admits_a_denied_client_early,
        ),
        server::needs_redis(
            "a_large_cache_holds_exactly_its_capacity_across_its_shards",
            a_large_cache_holds_exactly_its_capacity_across_its_shards,
        ),
    ]
}
