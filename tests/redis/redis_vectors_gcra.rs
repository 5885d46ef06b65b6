//! GCRA, its shaping form and the leaky bucket in Redis decide exactly as in memory: random
//! quotas and random sequences of checks, peeks and refunds, every decision compared. Tiers of
//! them too (all or nothing, across the keys of one script).

use crate::support::parity;
use crate::support::redis as server;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimiter};

use parity::{fresh_key, ops, same_decisions, store, Op, EPOCH};
use server::runtime;

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, 1u64..120_000, 1u64..50).prop_map(|(limit, period_ms, burst)| {
        Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
    })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    }
}

fn clock() -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(EPOCH));
    clock
}

fn gcra_decides_in_redis_as_in_memory() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    proptest!(config(), |(q in quota(), max_delay_ms in prop_oneof![Just(0u64), 1u64..5_000], ops in ops(60, 1_000_000_000, 30_000_000_000, 12))| {
        let clock = clock();
        let memory = RateLimiter::gcra(q.clone()).max_delay(Duration::from_millis(max_delay_ms)).with_clock(clock.clone());
        let shared = RateLimiter::gcra(q).max_delay(Duration::from_millis(max_delay_ms)).with_clock(clock.clone()).with_store(redis.clone());
        rt.block_on(same_decisions(&memory, &shared, &clock, &fresh_key(), &ops))?;
    });
}

fn the_leaky_bucket_decides_in_redis_as_in_memory() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    proptest!(config(), |(q in quota(), ops in ops(60, 100_000_000, 10_000_000_000, 6))| {
        let clock = clock();
        let memory = RateLimiter::leaky_bucket(q.clone()).with_clock(clock.clone());
        let shared = RateLimiter::leaky_bucket(q).with_clock(clock.clone()).with_store(redis.clone());
        rt.block_on(same_decisions(&memory, &shared, &clock, &fresh_key(), &ops))?;
    });
}

fn gcra_tiers_decide_in_redis_as_in_memory() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    proptest!(config(), |(a in quota(), b in quota(), ops in ops(60, 1_000_000_000, 30_000_000_000, 12))| {
        let clock = clock();
        let memory = RateLimiter::gcra([a.clone(), b.clone()]).with_clock(clock.clone());
        let shared = RateLimiter::gcra([a, b]).with_clock(clock.clone()).with_store(redis.clone());
        rt.block_on(same_decisions(&memory, &shared, &clock, &fresh_key(), &ops))?;
    });
}

fn seed_003s_session_comes_out_the_same_in_redis() {
    // 3 per 60 s: ALLOW at 20, 40, 60 s... checked here at the figures the memory store gives.
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    let clock = clock();
    let q = Quota::per_minute(3);
    let memory = RateLimiter::gcra(q.clone()).with_clock(clock.clone());
    let shared = RateLimiter::gcra(q)
        .with_clock(clock.clone())
        .with_store(redis);
    let s = 1_000_000_000;
    let session: Vec<Op> = [0, 0, 0, 0, 19, 1, 20, 30, 10]
        .iter()
        .map(|&secs| Op {
            advance: secs * s,
            cost: 1,
            refund: false,
        })
        .collect();
    rt.block_on(same_decisions(
        &memory,
        &shared,
        &clock,
        &fresh_key(),
        &session,
    ))
    .unwrap();
}

fn gcra_decides_alike_at_the_edges_of_what_the_store_accepts() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    let step = |advance, cost| Op {
        advance,
        cost,
        refund: false,
    };
    let big = 1u64 << 52;
    // T = 1 ns and a burst of 2^52: the largest tolerance the store accepts, and costs around
    // it and around 2^53, where numbers in Lua stop being exact.
    let cases: Vec<(Quota, u64, Vec<Op>)> = vec![
        (
            Quota::per_second(1_000_000_000).with_burst(big),
            EPOCH,
            vec![
                step(0, (1 << 53) + 1),
                step(0, 1 << 53),
                step(0, big + 1),
                step(1, big - 1),
                step(0, 2),
                step(0, 1),
                step(0, u64::MAX),
                step(3, 0),
            ],
        ),
        // One request every 2^52 ns (52 days).
        (
            Quota::new(1, Duration::from_nanos(big)),
            EPOCH + 1,
            vec![
                step(0, 1),
                step(0, 1),
                step(big - 3, 0),
                step(3, 1),
                step(1, 1),
            ],
        ),
        // The end of the clock: nothing passes past 2^64 - 1 ns.
        (
            Quota::per_second(1).with_burst(3),
            u64::MAX - 2_500_000_000,
            vec![
                step(0, 1),
                step(0, 1),
                step(0, 1),
                step(0, 1),
                step(1_000_000_000, 1),
            ],
        ),
    ];
    for (quota, start, ops) in cases {
        let clock = ManualClock::new();
        clock.advance(Duration::from_nanos(start));
        let memory = RateLimiter::gcra(quota.clone()).with_clock(clock.clone());
        let shared = RateLimiter::gcra(quota)
            .with_clock(clock.clone())
            .with_store(redis.clone());
        rt.block_on(same_decisions(&memory, &shared, &clock, &fresh_key(), &ops))
            .unwrap();
    }
    // Just past what the store accepts: refused where the limiter gets the store, never a
    // decision (tests/redis/redis_bounds.rs checks the message).
    let too_big = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        RateLimiter::gcra(Quota::new(1, Duration::from_nanos(big + 1))).with_store(redis.clone())
    }));
    assert!(too_big.is_err(), "a quota past the bound was accepted");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "gcra_decides_in_redis_as_in_memory",
            gcra_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_leaky_bucket_decides_in_redis_as_in_memory",
            the_leaky_bucket_decides_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "gcra_tiers_decide_in_redis_as_in_memory",
            gcra_tiers_decide_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "seed_003s_session_comes_out_the_same_in_redis",
            seed_003s_session_comes_out_the_same_in_redis,
        ),
        server::needs_redis(
            "gcra_decides_alike_at_the_edges_of_what_the_store_accepts",
            gcra_decides_alike_at_the_edges_of_what_the_store_accepts,
        ),
    ]
}
