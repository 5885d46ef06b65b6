//! Costs settled after the response decide in Redis exactly as in memory: random quotas and
//! random sequences of checks and settlements (below the reservation a refund, above it a
//! charge that may put the key in debt, up to `u64::MAX`), every decision compared, for GCRA
//! (with shaping), the token bucket (with shaping), the leaky bucket and tiers of each; debts
//! past what a double holds and the end of the clock; and the algorithms that carry no debt
//! (the windows, the hybrid), whose script refuses a charge without touching the state.

use crate::support::parity;
use crate::support::redis as server;

use std::time::Duration;

use proptest::prelude::*;
use tollgate::algorithm::FixedWindow;
use tollgate::clock::ManualClock;
use tollgate::store::redis::RedisAlgorithm;
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{Quota, RateLimiter};

use parity::{fresh_key, same_settled_decisions, same_settled_decisions_across, settled_ops};
use parity::{store, Settled, EPOCH};
use server::runtime;

const S: u64 = 1_000_000_000;

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, 1u64..120_000, 1u64..50).prop_map(|(limit, period_ms, burst)| {
        Quota::new(limit, Duration::from_millis(period_ms)).with_burst(burst)
    })
}

fn max_delay() -> impl Strategy<Value = Duration> {
    prop_oneof![Just(0u64), 1u64..5_000].prop_map(Duration::from_millis)
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn clock_at(nanos: u64) -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(nanos));
    clock
}

/// Runs `$proptest` cases of `$make(quotas)` (a limiter on the memory store) against the same
/// limiter on Redis, over settled steps.
macro_rules! settles_alike {
    ($cases:expr, $quotas:expr, |$q:pat_param| $make:expr) => {{
        let Some(server) = server::RedisServer::start() else {
            return;
        };
        let rt = runtime();
        let redis = rt.block_on(store(&server.url()));
        proptest!(config($cases), |($q in $quotas, steps in settled_ops(60, S, 30 * S, 12))| {
            let clock = clock_at(EPOCH);
            let memory = $make.with_clock(clock.clone());
            let shared = memory.clone().with_store(redis.clone());
            rt.block_on(same_settled_decisions(&memory, &shared, &clock, &fresh_key(), &steps))?;
        });
    }};
}

fn gcra_settles_in_redis_as_in_memory() {
    settles_alike!(48, (quota(), max_delay()), |(q, d)| RateLimiter::gcra(q)
        .max_delay(d));
}

fn the_token_bucket_settles_in_redis_as_in_memory() {
    settles_alike!(48, (quota(), max_delay()), |(q, d)| {
        RateLimiter::token_bucket(q).max_delay(d)
    });
}

fn the_leaky_bucket_settles_in_redis_as_in_memory() {
    settles_alike!(48, quota(), |q| RateLimiter::leaky_bucket(q));
}

fn gcra_tiers_settle_in_redis_as_in_memory() {
    settles_alike!(32, (quota(), quota()), |(a, b)| RateLimiter::gcra([a, b]));
}

fn token_bucket_tiers_settle_in_redis_as_in_memory() {
    settles_alike!(32, (quota(), quota(), max_delay()), |(a, b, d)| {
        RateLimiter::token_bucket([a, b]).max_delay(d)
    });
}

fn leaky_bucket_tiers_settle_in_redis_as_in_memory() {
    settles_alike!(32, (quota(), quota()), |(a, b)| RateLimiter::leaky_bucket(
        [a, b]
    ));
}

/// The windows and the hybrid carry no debt: a settlement above the reservation is not
/// charged, in Redis as in memory (the standing is answered), and one below it is a refund.
fn the_algorithms_without_debts_settle_in_redis_as_in_memory() {
    settles_alike!(24, quota(), |q| RateLimiter::fixed_window(q));
    settles_alike!(24, quota(), |q| RateLimiter::sliding_window(q));
    settles_alike!(24, quota(), |q| RateLimiter::sliding_log(q));
    settles_alike!(24, quota(), |q| RateLimiter::hybrid(q));
}

/// `template` (a named quota) on two servers whose clocks disagree, the second `behind` ns
/// behind the first: in memory (one store) and in Redis, the same decisions.
async fn across_clocks<A: RedisAlgorithm>(
    template: RateLimiter<A>,
    redis: &RedisStore,
    behind: u64,
    steps: &[Settled],
) -> Result<(), TestCaseError> {
    let (late, early) = (clock_at(EPOCH), clock_at(EPOCH - behind));
    let memory = MemoryStore::new();
    let on = |clock: &ManualClock| {
        let limiter = template.clone().with_clock(clock.clone());
        let on_memory = limiter.clone().with_store(memory.clone());
        (on_memory, limiter.with_store(redis.clone()))
    };
    let (a, b) = (on(&late), on(&early));
    let servers = [(&a.0, &a.1), (&b.0, &b.1)];
    same_settled_decisions_across(&servers, &[&late, &early], &fresh_key(), steps).await
}

/// Two servers whose clocks disagree (one behind by up to 200 days, as a clock set back): a
/// state read before its own time, a debt and an admission's receipt far ahead of the reading,
/// an admission settled through the other server: the same decisions in Redis as in memory.
fn settlements_on_clocks_that_disagree_decide_alike() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    // The late server admits, the early one (100 days behind) settles below the reservation
    // and above it: a receipt and a debt far ahead of the early one's reading. (Step `i` goes
    // to server `(i + advance) % 2`.)
    let steps = [
        check(0, 3),
        charge(0, 1),
        check(1, 2),
        charge(1, 9),
        check(1, 0),
        charge(0, 1 << 60),
        check(1, 1),
    ];
    for far in [100 * 86_400 * S, 5 * S] {
        let q = Quota::per_second(10).named("disagree");
        rt.block_on(across_clocks(
            RateLimiter::gcra(q.clone()),
            &redis,
            far,
            &steps,
        ))
        .unwrap();
        rt.block_on(across_clocks(
            RateLimiter::token_bucket(q),
            &redis,
            far,
            &steps,
        ))
        .unwrap();
    }
    // At random, GCRA and the leaky bucket, whose state is one time. (A token bucket full
    // again keeps when it was last refilled: a clock before that reads it as not yet full,
    // and the memory store may forget such a state, as Redis deletes it, or keep it.)
    let behind = prop_oneof![0..=30 * S, 0..=200 * 86_400 * S];
    proptest!(config(64), |(q in quota(), behind in behind, leaky: bool, steps in settled_ops(60, S, 30 * S, 12))| {
        let q = q.named("disagree");
        let (redis, steps) = (&redis, &steps[..]);
        if leaky {
            rt.block_on(across_clocks(RateLimiter::leaky_bucket(q), redis, behind, steps))?;
        } else {
            rt.block_on(across_clocks(RateLimiter::gcra(q), redis, behind, steps))?;
        }
    });
}

/// A blocked key is charged too, and answers its block while it lasts; the debt that outlasts
/// the block denies after it: in Redis as in memory, tiers included.
fn a_blocked_key_is_charged_as_in_memory() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    rt.block_on(async {
        let quotas = [Quota::per_second(2).with_burst(4), Quota::per_minute(30)];
        let clock = clock_at(EPOCH);
        let memory = RateLimiter::token_bucket(quotas).with_clock(clock.clone());
        let shared = memory.clone().with_store(redis.clone());
        let key = fresh_key();
        let admission = memory.check_n(key.clone(), 2).await.unwrap();
        assert_eq!(shared.check_n(key.clone(), 2).await.unwrap(), admission);
        let block = Duration::from_secs(10);
        memory.block(key.clone(), block).await.unwrap();
        shared.block(key.clone(), block).await.unwrap();
        let standing = memory.settle(key.clone(), &admission, 2, 60).await.unwrap();
        assert!(standing.is_blocked() && !standing.allowed);
        assert_eq!(
            shared.settle(key.clone(), &admission, 2, 60).await.unwrap(),
            standing
        );
        for advance in [0, 9, 1, 5, 20] {
            clock.advance(Duration::from_secs(advance));
            let expected = memory.check(key.clone()).await.unwrap();
            assert_eq!(
                shared.check(key.clone()).await.unwrap(),
                expected,
                "{advance}"
            );
            assert_eq!(
                shared.peek(key.clone()).await.unwrap(),
                memory.peek(key.clone()).await.unwrap()
            );
        }
    });
}

fn check(advance: u64, cost: u64) -> Settled {
    Settled {
        advance,
        cost,
        actual: None,
    }
}

/// A settlement at `actual` of an admission so far, or with none, a charge of `actual`.
fn charge(advance: u64, actual: u64) -> Settled {
    Settled {
        advance,
        cost: 0,
        actual: Some(actual),
    }
}

/// `steps` for a fresh key on `memory` and on it with `redis`'s store, from `start` ns: the same
/// decisions.
async fn alike<A: RedisAlgorithm>(
    memory: RateLimiter<A>,
    redis: &RedisStore,
    start: u64,
    steps: &[Settled],
) {
    let clock = clock_at(start);
    let memory = memory.with_clock(clock.clone());
    let shared = memory.clone().with_store(redis.clone());
    same_settled_decisions(&memory, &shared, &clock, &fresh_key(), steps)
        .await
        .unwrap();
}

/// Debts around what a double holds exactly (GCRA keeps a TAT up to 2^52 + 2^31 ns ahead as a
/// double, beyond it as a wide integer; the token bucket a deficit up to 2^53), costs whose
/// product with the interval passes `u64::MAX`, and the end of the clock: the same decisions.
fn debts_decide_alike_at_the_edges_of_a_double_and_of_the_clock() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    let redis = rt.block_on(store(&server.url()));
    let big = 1u64 << 52;
    let far = big + (1 << 31);
    // Where EPOCH stands in its second: the scripts' times are relative to the whole second.
    let into = EPOCH % S;
    let around = |x: u64| [x - 1, x, x + 1];
    let mut cases: Vec<(Quota, u64, Vec<Settled>)> = Vec::new();
    // T = 1 ns, a burst of 2^52: the TAT lands on either side of the wide form.
    for edge in around(far - into).into_iter().chain(around(1 << 53)) {
        let q = Quota::per_second(1_000_000_000).with_burst(big);
        let steps = vec![
            charge(0, edge),
            check(0, 0),
            check(0, 1),
            check(0, big),
            charge(0, 1),
            check(1, 0),
            check(S - into, 1),
            charge(0, edge),
            check(3, 2),
        ];
        cases.push((q, EPOCH, steps));
    }
    // One request every 2^52 ns: a cost whose intervals pass u64::MAX saturates.
    let slow = Quota::new(1, Duration::from_nanos(big));
    let most = (u64::MAX - EPOCH) / big;
    for c in most - 2..=most + 2 {
        let steps = vec![check(0, 1), charge(0, c), check(0, 0), check(big, 1)];
        cases.push((slow.clone(), EPOCH + 1, steps));
    }
    // Huge charges, twice, with admissions and refunds around them.
    let q = Quota::per_second(10).with_burst(5);
    let steps = vec![
        check(0, 2),
        charge(0, u64::MAX),
        check(0, 1),
        check(0, 0),
        charge(S, u64::MAX),
        charge(0, 0),
        check(30 * S, 1),
        charge(0, u64::MAX / 2),
        check(0, 0),
    ];
    cases.push((q.clone(), EPOCH, steps.clone()));
    // Near the end of the clock.
    cases.push((q.clone(), u64::MAX - 2_500_000_000, steps));
    for (quota, start, steps) in cases {
        // Shaping adds to GCRA's bound, which the store takes up to 2^52 ns.
        let shaped =
            quota.emission_interval().as_nanos() * u128::from(quota.burst()) + 7 <= u128::from(big);
        let mut limiters = vec![RateLimiter::gcra(quota.clone())];
        if shaped {
            limiters.push(RateLimiter::gcra(quota.clone()).max_delay(Duration::from_nanos(7)));
        }
        for memory in limiters {
            rt.block_on(alike(memory, &redis, start, &steps));
        }
        for memory in [
            RateLimiter::token_bucket(quota.clone()),
            RateLimiter::token_bucket(quota.clone()).max_delay(Duration::from_nanos(7)),
        ] {
            rt.block_on(alike(memory, &redis, start, &steps));
        }
    }
    // The token bucket's largest capacity, 2^53 ns: deficits on either side of it.
    let q = Quota::per_second(1_000_000_000).with_burst(1 << 53);
    for edge in around(1 << 53).into_iter().chain(around(1 << 54)) {
        let steps = vec![
            check(0, 5),
            charge(0, edge),
            check(0, 0),
            check(0, 1),
            check(1, 0),
            check(edge.saturating_sub(1 << 53), 1),
            check(2, 1),
            charge(0, 3),
        ];
        rt.block_on(alike(
            RateLimiter::token_bucket(q.clone()),
            &redis,
            EPOCH,
            &steps,
        ));
    }
}

/// A charge that reaches the script of an algorithm that carries no debt (called by hand: the
/// store itself answers such a settlement with the key's standing) is refused with an error
/// that says so, and the key's state and its TTL are as they were.
fn a_charge_reaching_a_window_script_is_refused_and_changes_nothing() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = store(&server.url()).await;
        let limiter = RateLimiter::fixed_window(Quota::per_minute(5).named("windowed"))
            .with_clock(clock_at(EPOCH))
            .with_store(store);
        let key = fresh_key();
        assert!(limiter.check(key.clone()).await.unwrap().allowed);
        let table = limiter.table();
        let state = table.redis_keys(&key).remove(0);
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&state)
            .arg(600_000)
            .query_async(&mut conn)
            .await
            .unwrap();
        let before: String = redis::cmd("GET")
            .arg(&state)
            .query_async(&mut conn)
            .await
            .unwrap();
        let error = redis::cmd("EVAL")
            .arg(RedisStore::script::<FixedWindow>())
            .arg(2)
            .arg(&state)
            .arg(table.block_key(&key))
            .arg(&["d", "5", "", ""])
            .query_async::<redis::Value>(&mut conn)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("tollgate"), "{error}");
        assert!(error.contains("fw states carry no debt"), "{error}");
        assert!(error.contains("charge"), "{error}");
        let after: String = redis::cmd("GET")
            .arg(&state)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(after, before);
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&state)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(ttl > 500_000, "the key keeps its TTL: {ttl}");
    });
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis(
            "gcra_settles_in_redis_as_in_memory",
            gcra_settles_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_token_bucket_settles_in_redis_as_in_memory",
            the_token_bucket_settles_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_leaky_bucket_settles_in_redis_as_in_memory",
            the_leaky_bucket_settles_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "gcra_tiers_settle_in_redis_as_in_memory",
            gcra_tiers_settle_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "token_bucket_tiers_settle_in_redis_as_in_memory",
            token_bucket_tiers_settle_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "leaky_bucket_tiers_settle_in_redis_as_in_memory",
            leaky_bucket_tiers_settle_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "the_algorithms_without_debts_settle_in_redis_as_in_memory",
            the_algorithms_without_debts_settle_in_redis_as_in_memory,
        ),
        server::needs_redis(
            "debts_decide_alike_at_the_edges_of_a_double_and_of_the_clock",
            debts_decide_alike_at_the_edges_of_a_double_and_of_the_clock,
        ),
        server::needs_redis(
            "settlements_on_clocks_that_disagree_decide_alike",
            settlements_on_clocks_that_disagree_decide_alike,
        ),
        server::needs_redis(
            "a_blocked_key_is_charged_as_in_memory",
            a_blocked_key_is_charged_as_in_memory,
        ),
        server::needs_redis(
            "a_charge_reaching_a_window_script_is_refused_and_changes_nothing",
            a_charge_reaching_a_window_script_is_refused_and_changes_nothing,
        ),
    ]
}
