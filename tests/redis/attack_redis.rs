//! Audit: the Redis store's failure policies, deny cache and refunds, combined.

use crate::support::redis as server;

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Quota, RateLimiter};

/// Where the manual clock starts: a Unix time in ns, as Redis `TIME` would give.
const EPOCH: u64 = 1_750_000_000_123_456_789;

/// Checks on `limiter` until one reaches Redis (the server counts a script call), after a
/// restart: the connection comes back by itself on a later call.
async fn until_connected<F: std::future::Future>(
    redis: &server::RedisServer,
    check: impl Fn() -> F,
) {
    // The store answers from its failure policy until its probe (every 200 ms) finds Redis.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let before = redis.calls("evalsha") + redis.calls("eval");
        let _ = check().await;
        if redis.calls("evalsha") + redis.calls("eval") > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store never reconnected");
}

/// An admission decided by the local fallback while Redis was away carries a receipt in the
/// local table's terms. Refunded once Redis is back, it must give nothing back in Redis (which
/// never counted it): here it gives back another request's slot, and a third request passes
/// a burst of one.
async fn a_local_admission_refunded_into_redis_gives_back_nothing_there() {
    let Some(mut redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    let store = RedisStore::connect(&redis.url())
        .await
        .unwrap()
        .with_caller_clock()
        .deny_cache(0)
        .timeout(Duration::from_millis(500))
        .on_failure(OnFailure::Local(MemoryStore::new()));
    let limiter = RateLimiter::gcra(Quota::per_minute(1).named("local-then-redis"))
        .with_clock(clock.clone())
        .with_store(store);

    // Redis goes away: the local table admits A.
    redis.kill();
    let a = limiter.check("k").await.unwrap();
    assert!(a.allowed);
    // Redis comes back (empty, as after a failover to a fresh replica or a restart).
    redis.restart();
    until_connected(&redis, || limiter.check_n("probe", 0)).await;
    // B is counted in Redis; A's response does not count and is refunded.
    let b = limiter.check("k").await.unwrap();
    assert!(b.allowed, "Redis is fresh");
    let _ = limiter.refund("k", &a, 1).await.unwrap();
    // B counts: a burst of one is spent for a minute.
    let c = limiter.check("k").await.unwrap();
    assert!(
        !c.allowed,
        "a third request passed: B still counts, yet A's refund gave B's slot back in Redis"
    );
}

/// Failing open admits with an empty receipt; refunded once Redis is back, it gives nothing.
async fn an_open_admission_refunded_into_redis_gives_back_nothing() {
    let Some(mut redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    let store = RedisStore::connect(&redis.url())
        .await
        .unwrap()
        .with_caller_clock()
        .deny_cache(0)
        .timeout(Duration::from_millis(500))
        .on_failure(OnFailure::Open);
    for (name, fixed) in [("open-gcra", false), ("open-window", true)] {
        let quota = Quota::per_minute(1).named(name);
        redis.kill();
        if fixed {
            let limiter = RateLimiter::fixed_window(quota)
                .with_clock(clock.clone())
                .with_store(store.clone());
            let a = limiter.check("k").await.unwrap();
            assert!(a.allowed);
            redis.restart();
            until_connected(&redis, || limiter.check_n("probe", 0)).await;
            assert!(limiter.check("k").await.unwrap().allowed);
            let _ = limiter.refund("k", &a, 1).await.unwrap();
            assert!(!limiter.check("k").await.unwrap().allowed, "{name}");
        } else {
            let limiter = RateLimiter::gcra(quota)
                .with_clock(clock.clone())
                .with_store(store.clone());
            let a = limiter.check("k").await.unwrap();
            assert!(a.allowed);
            redis.restart();
            until_connected(&redis, || limiter.check_n("probe", 0)).await;
            assert!(limiter.check("k").await.unwrap().allowed);
            let _ = limiter.refund("k", &a, 1).await.unwrap();
            assert!(!limiter.check("k").await.unwrap().allowed, "{name}");
        }
    }
}

/// The deny cache answers a limited client locally; a refund on this server clears it, and a
/// client that keeps knocking never gets past its quota through the cache.
async fn the_deny_cache_never_admits_and_refunds_clear_it() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    let store = server::closed_on_caller_clock(&redis.url()).await;
    let limiter = RateLimiter::gcra([
        Quota::per_second(2).named("dc-s"),
        Quota::per_minute(3).named("dc-m"),
    ])
    .with_clock(clock.clone())
    .with_store(store);
    let first = limiter.check("k").await.unwrap();
    let second = limiter.check("k").await.unwrap();
    assert!(first.allowed && second.allowed);
    let mut admitted = 2;
    for step in 0..40 {
        clock.advance(Duration::from_millis(250));
        let d = limiter.check("k").await.unwrap();
        if d.allowed {
            admitted += 1;
        }
        // Give back the second admission once, mid-way: one more may pass, no more.
        if step == 10 {
            let _ = limiter.refund("k", &second, 1).await.unwrap();
        }
    }
    // 10 s: the minute tier allows 3; the refund may add back at most the one refunded.
    assert!(
        admitted <= 4,
        "{admitted} admitted in 10 s of a 3-a-minute tier"
    );
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "a_local_admission_settled_into_redis_gives_back_nothing_there",
            a_local_admission_settled_into_redis_gives_back_nothing_there,
        ),
        server::needs_redis_async(
            "an_in_flight_flood_does_not_open_a_rate_limit_on_the_same_store",
            an_in_flight_flood_does_not_open_a_rate_limit_on_the_same_store,
        ),
        server::needs_redis_async(
            "a_local_admission_refunded_into_redis_gives_back_nothing_there",
            a_local_admission_refunded_into_redis_gives_back_nothing_there,
        ),
        server::needs_redis_async(
            "an_open_admission_refunded_into_redis_gives_back_nothing",
            an_open_admission_refunded_into_redis_gives_back_nothing,
        ),
        server::needs_redis_async(
            "the_deny_cache_never_admits_and_refunds_clear_it",
            the_deny_cache_never_admits_and_refunds_clear_it,
        ),
    ]
}

/// A client floods an in-flight limit sharing a store with a rate limit that fails open: many
/// long keys, requests held, requests dropped while Redis decides (each drop a give-back
/// call). With a timeout the flood's queue fits in, none of its calls counts as Redis down,
/// and the rate limit on the same store keeps its quota. (Under the default 50 ms timeout the
/// same flood delays the victim's own calls past it three times in a row, which marks the
/// store down: any flood of calls on one connection does, in-flight or not.)
async fn an_in_flight_flood_does_not_open_a_rate_limit_on_the_same_store() {
    use tollgate::key::Header;
    use tollgate::InFlightLayer;
    use tower::{Layer, ServiceExt};

    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    let store = RedisStore::connect(&redis.url())
        .await
        .unwrap()
        .with_caller_clock()
        .deny_cache(0)
        .timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Open);
    let layer = InFlightLayer::new(1)
        .policy_name("flood")
        .key(Header::new("x-key"))
        .clock(clock.clone())
        .store(store.clone());
    let svc = layer.layer(tower::service_fn(|_req: http::Request<()>| {
        std::future::pending::<Result<http::Response<String>, std::convert::Infallible>>()
    }));
    let limiter = RateLimiter::gcra(Quota::per_hour(1).named("quota"))
        .with_clock(clock.clone())
        .with_store(store.clone());
    // The same store failing closed: its error tells whether the store's health is down.
    let closed = RateLimiter::gcra(Quota::per_hour(1).named("quota"))
        .with_clock(clock.clone())
        .with_store(store.on_failure(OnFailure::Closed));
    assert!(limiter.check("victim").await.unwrap().allowed);
    let long = "x".repeat(8_000);
    for round in 0..2 {
        let mut held = Vec::new();
        for n in 0..1_000 {
            let request = http::Request::builder()
                .header("x-key", format!("{long}{round}.{n}"))
                .body(())
                .unwrap();
            held.push(tokio::spawn(svc.clone().oneshot(request)));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Half are dropped while Redis decides, half once they hold their slot.
        for task in held.iter().step_by(2) {
            task.abort();
        }
        let mut tries = 0;
        for wait in [0, 60, 120] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            for _ in 0..20 {
                tries += 1;
                if let Err(error) = closed.check("victim").await {
                    panic!("round {round}, try {tries}: the flood failed the store: {error}");
                }
                let decision = limiter.check("victim").await;
                assert!(
                    matches!(&decision, Ok(d) if !d.allowed),
                    "round {round}, try {tries}: the rate limit admitted past its quota: \
                     {decision:?}"
                );
            }
        }
        held.iter().for_each(tokio::task::JoinHandle::abort);
    }
    let calls = redis.calls("evalsha") + redis.calls("eval");
    assert!(
        calls > 1_000,
        "the flood reached Redis: {calls} script calls"
    );
}

/// An admission the local fallback decided while Redis was away, settled below its
/// reservation once Redis is back: the refund belongs to the local table, and gives nothing
/// back in Redis, where another server filled the key meanwhile; its deny cache and the
/// other's agree the key is full.
async fn a_local_admission_settled_into_redis_gives_back_nothing_there() {
    let Some(mut redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    let quota = Quota::per_minute(10).named("settle-local-then-redis");
    let a = RateLimiter::gcra(quota.clone())
        .with_clock(clock.clone())
        .with_store(
            RedisStore::connect(&redis.url())
                .await
                .unwrap()
                .with_caller_clock()
                .timeout(Duration::from_millis(500))
                .on_failure(OnFailure::Local(MemoryStore::new())),
        );
    redis.kill();
    let local = a.check_n("k", 10).await.unwrap();
    assert!(
        local.allowed,
        "the local fallback admits a reservation of 10"
    );
    redis.restart();
    until_connected(&redis, || a.check_n("probe", 0)).await;
    let b = RateLimiter::gcra(quota)
        .with_clock(clock.clone())
        .with_store(server::closed_on_caller_clock(&redis.url()).await);
    assert!(
        b.check_n("k", 10).await.unwrap().allowed,
        "Redis, empty, fills"
    );
    let settled = a.settle("k", &local, 10, 0).await;
    assert!(settled.is_ok(), "{settled:?}");
    for (name, server) in [("a", &a), ("b", &b)] {
        let next = server.check("k").await.unwrap();
        assert!(
            !next.allowed,
            "{name}: a local refund freed Redis: {next:?}"
        );
    }
}
