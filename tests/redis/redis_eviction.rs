//! A Redis at its `maxmemory` never frees a limited client. A client at its limit, then a
//! flood of keys a client mints (each used once) until Redis has evicted many keys: under
//! `volatile-ttl` the limited client's state outlives the flood's, and under `noeviction`
//! nothing is admitted past the quota (the flood's writes are refused). Every algorithm, one
//! quota and two tiers, against real `redis-server` processes.

use crate::support::redis as server;

use std::time::Duration;

use futures_util::future::join_all;
use tollgate::algorithm::Algorithm;
use tollgate::clock::SystemClock;
use tollgate::store::{OnFailure, RedisStore, Store};
use tollgate::{ErrorKind, Quota, RateLimiter};

use server::{needs_redis, RedisServer, Trial};

/// The login limit the limited client is held to.
const LIMIT: u64 = 5;

/// Room above what an empty Redis uses: some 10 000 of the flood's keys.
const ROOM: u64 = 2 << 20;

/// Keys checked at once during the flood (on one multiplexed connection).
const BATCH: usize = 256;

/// The flood stops once Redis has evicted this many keys, or after this many keys.
const EVICTED: u64 = 20_000;
const MOST_KEYS: usize = 400_000;

/// Under `noeviction`, the flood stops once Redis has refused this many of its keys.
const REFUSED: usize = 4 * BATCH;

/// A field of `INFO <section>`, as a number.
fn stat(server: &RedisServer, section: &str, field: &str) -> u64 {
    let info = server.info(section);
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
}

/// Runs `CONFIG SET <name> <value>` on the test's own server.
fn config_set(server: &RedisServer, name: &str, value: &str) {
    let reply = server::command(server.port, &format!("CONFIG SET {name} {value}"));
    assert!(
        reply.as_deref().is_some_and(|r| r.starts_with("+OK")),
        "CONFIG SET {name} {value}: {reply:?}"
    );
}

/// What the flood saw: its keys, those admitted, and those refused as `Full`.
#[derive(Debug, Default)]
struct Flooded {
    keys: usize,
    admitted: usize,
    full: usize,
}

/// Checks new keys once each, `BATCH` at a time, until Redis has evicted `EVICTED` keys
/// (under an evicting policy) or refused `REFUSED` of them as full (under `noeviction`).
/// Between batches, the limited client `victim` is checked: it must never be admitted.
async fn flood<A>(
    server: &RedisServer,
    limiter: &RateLimiter<A, RedisStore, SystemClock>,
    victim: &str,
    what: &str,
) -> Flooded
where
    A: Algorithm,
    RedisStore: Store<A>,
{
    let mut seen = Flooded::default();
    while seen.keys < MOST_KEYS {
        let checks = (seen.keys..seen.keys + BATCH).map(|i| limiter.check(format!("mint-{i}")));
        for decision in join_all(checks).await {
            match decision {
                Ok(d) if d.allowed => seen.admitted += 1,
                Ok(d) => panic!("{what}: a minted key used once was denied: {d:?}"),
                Err(e) if e.kind() == ErrorKind::Full => seen.full += 1,
                Err(e) => panic!("{what}: the store failed during the flood: {e}"),
            }
        }
        seen.keys += BATCH;
        assert_denied(limiter, victim, what, &seen).await;
        let evicted = stat(server, "stats", "evicted_keys");
        if evicted >= EVICTED || seen.full >= REFUSED {
            return seen;
        }
    }
    panic!("{what}: Redis neither evicted nor refused keys after {MOST_KEYS}: {seen:?}");
}

/// The limited client is denied (or refused as `Full`), never admitted.
async fn assert_denied<A>(
    limiter: &RateLimiter<A, RedisStore, SystemClock>,
    victim: &str,
    what: &str,
    seen: &Flooded,
) where
    A: Algorithm,
    RedisStore: Store<A>,
{
    match limiter.check(victim).await {
        Ok(d) => assert!(
            !d.allowed,
            "{what}: the limited client was admitted past its quota after {seen:?}"
        ),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Full, "{what}: {e}"),
    }
}

/// A client driven to its limit, then a flood of minted keys on a Redis of `ROOM` bytes
/// more than it uses, under `policy`.
fn survives<A>(
    what: &'static str,
    policy: &'static str,
    limiter: impl FnOnce(RedisStore) -> RateLimiter<A, RedisStore, SystemClock>,
) where
    A: Algorithm,
    RedisStore: Store<A>,
{
    let Some(server) = RedisServer::start() else {
        return;
    };
    server::runtime().block_on(async {
        // Every check reaches Redis (no deny cache), and a failure is seen (fails closed);
        // a batch of checks may take a while on a loaded machine.
        let store = RedisStore::connect(&server.url())
            .await
            .unwrap()
            .on_failure(OnFailure::Closed)
            .timeout(Duration::from_secs(5))
            .deny_cache(0);
        let limiter = limiter(store);
        let what = format!("{what} under {policy}");
        let mut admitted = 0;
        for _ in 0..2 * LIMIT {
            if limiter.check("victim").await.unwrap().allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, LIMIT, "{what}: the limit before the flood");
        let used = stat(&server, "memory", "used_memory");
        config_set(&server, "maxmemory-policy", policy);
        config_set(&server, "maxmemory", &(used + ROOM).to_string());
        let seen = flood(&server, &limiter, "victim", &what).await;
        let evicted = stat(&server, "stats", "evicted_keys");
        if policy == "noeviction" {
            assert_eq!(evicted, 0, "{what}");
            assert!(seen.full > 0, "{what}: nothing refused: {seen:?}");
        } else {
            assert!(evicted >= EVICTED, "{what}: {evicted} evicted, {seen:?}");
        }
        for _ in 0..3 {
            assert_denied(&limiter, "victim", &what, &seen).await;
        }
    });
}

/// One quota, and two tiers whose second holds the client (5 an hour, under 60 a minute).
fn one() -> Quota {
    Quota::per_hour(LIMIT).named("login")
}

fn tiers() -> [Quota; 2] {
    [
        Quota::per_minute(60).named("minute"),
        Quota::per_hour(LIMIT).named("hour"),
    ]
}

/// The trials: each algorithm, one quota and tiers, under each policy.
pub fn trials() -> Vec<Trial> {
    macro_rules! every {
        ($($name:literal => $make:expr),* $(,)?) => {
            vec![$(
                needs_redis(concat!($name, "_survives_a_flood_under_volatile_ttl"), || {
                    survives($name, "volatile-ttl", $make)
                }),
                needs_redis(concat!($name, "_admits_nothing_past_its_quota_under_noeviction"), || {
                    survives($name, "noeviction", $make)
                }),
            )*]
        };
    }
    every![
        "gcra" => |s| RateLimiter::gcra(one()).with_store(s),
        "token_bucket" => |s| RateLimiter::token_bucket(one()).with_store(s),
        "leaky_bucket" => |s| RateLimiter::leaky_bucket(one()).with_store(s),
        "fixed_window" => |s| RateLimiter::fixed_window(one()).with_store(s),
        "sliding_window" => |s| RateLimiter::sliding_window(one()).with_store(s),
        "sliding_log" => |s| RateLimiter::sliding_log(one()).with_store(s),
        "hybrid" => |s| RateLimiter::hybrid(one()).with_store(s),
        "gcra_tiers" => |s| RateLimiter::gcra(tiers()).with_store(s),
        "token_bucket_tiers" => |s| RateLimiter::token_bucket(tiers()).with_store(s),
        "fixed_window_tiers" => |s| RateLimiter::fixed_window(tiers()).with_store(s),
        "sliding_window_tiers" => |s| RateLimiter::sliding_window(tiers()).with_store(s),
        "sliding_log_tiers" => |s| RateLimiter::sliding_log(tiers()).with_store(s),
        "hybrid_tiers" => |s| RateLimiter::hybrid(tiers()).with_store(s),
    ]
}
