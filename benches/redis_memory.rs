//! Redis memory per client key, for each algorithm: what to set `maxmemory` from.
//!
//! A plain `main` (no criterion) against a Redis of your own, which it flushes (`FLUSHALL`):
//!
//! ```text
//! redis-server --port 6390 --save '' --appendonly no &
//! cargo bench --features redis --bench redis_memory -- redis://127.0.0.1:6390/
//! ```
//!
//! For each algorithm, one quota of 100 a minute, and two tiers (100 a minute and 500 an
//! hour), it checks `KEYS` clients (string keys of 12 bytes, `client-00042`) once each, then
//! again until each is at its limit. After each round it prints the mean `MEMORY USAGE` of a
//! client's Redis keys (all its tiers; `SAMPLES 0`), and the growth of `used_memory` per
//! client, which adds Redis's own bookkeeping (the key tables and the expiry table).

use redis::aio::MultiplexedConnection;
use tollgate::algorithm::Algorithm;
use tollgate::clock::SystemClock;
use tollgate::store::redis::{RedisAlgorithm, RedisTable};
use tollgate::store::{OnFailure, RedisStore, Store};
use tollgate::{Key, Quota, RateLimiter};

/// Clients per measurement.
const KEYS: usize = 1_000;

/// Checks in flight at once.
const BATCH: usize = 200;

fn quota() -> Quota {
    Quota::per_minute(100).named("m")
}

fn tiers() -> [Quota; 2] {
    [
        Quota::per_minute(100).named("m"),
        Quota::per_hour(500).named("h"),
    ]
}

fn client(i: usize) -> Key {
    Key::from(format!("client-{i:05}"))
}

async fn used_memory(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

/// The mean `MEMORY USAGE` of a client's keys, over every client.
async fn usage<A: RedisAlgorithm>(conn: &mut MultiplexedConnection, table: &RedisTable<A>) -> f64 {
    let mut total = 0u64;
    for i in 0..KEYS {
        for name in table.redis_keys(&client(i)) {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&name)
                .arg("SAMPLES")
                .arg(0)
                .query_async(conn)
                .await
                .expect("MEMORY USAGE");
            total += bytes.expect("every client's key is stored");
        }
    }
    total as f64 / KEYS as f64
}

/// Checks every client `times` times, `BATCH` at once; returns how many were admitted.
async fn round<A>(limiter: &RateLimiter<A, RedisStore, SystemClock>, times: usize) -> usize
where
    A: Algorithm,
    RedisStore: Store<A>,
{
    let mut admitted = 0;
    for _ in 0..times {
        for start in (0..KEYS).step_by(BATCH) {
            let checks = (start..start + BATCH).map(|i| limiter.check(client(i)));
            for d in futures_util::future::join_all(checks).await {
                admitted += usize::from(d.expect("a decision").allowed);
            }
        }
    }
    admitted
}

async fn measure<A>(
    url: &str,
    name: &str,
    limiter: impl FnOnce(RedisStore) -> RateLimiter<A, RedisStore, SystemClock>,
) where
    A: Algorithm + RedisAlgorithm,
    RedisStore: Store<A, Table = RedisTable<A>>,
{
    let client_ = redis::Client::open(url).expect("a Redis URL");
    let mut conn = client_
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis-server");
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    let store = RedisStore::connect(url)
        .await
        .expect("connect to redis-server")
        .on_failure(OnFailure::Closed)
        .deny_cache(0);
    let limiter = limiter(store);
    // The script is loaded by the first check: measure from after it.
    let _ = limiter.check("warm-up").await.expect("a decision");
    let before = used_memory(&mut conn).await;
    round(&limiter, 1).await;
    let once = usage(&mut conn, limiter.table()).await;
    let grown_once = (used_memory(&mut conn).await - before) as f64 / KEYS as f64;
    // At the limit: 100 requests each (the rest are denied, and write nothing).
    round(&limiter, 110).await;
    let full = usage(&mut conn, limiter.table()).await;
    let grown_full = (used_memory(&mut conn).await.saturating_sub(before)) as f64 / KEYS as f64;
    println!(
        "{name:<22} used once: MEMORY USAGE {once:>6.0} B, used_memory {grown_once:>6.0} B | \
         at its limit: MEMORY USAGE {full:>6.0} B, used_memory {grown_full:>6.0} B"
    );
}

fn main() {
    let url = std::env::args()
        .nth(1)
        .filter(|a| a.starts_with("redis"))
        .unwrap_or_else(|| {
            eprintln!("usage: redis_memory <redis://host:port/> (the server is flushed)");
            std::process::exit(2)
        });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let url = url.as_str();
        measure(url, "gcra", |s| RateLimiter::gcra(quota()).with_store(s)).await;
        measure(url, "token_bucket", |s| {
            RateLimiter::token_bucket(quota()).with_store(s)
        })
        .await;
        measure(url, "leaky_bucket", |s| {
            RateLimiter::leaky_bucket(quota()).with_store(s)
        })
        .await;
        measure(url, "fixed_window", |s| {
            RateLimiter::fixed_window(quota()).with_store(s)
        })
        .await;
        measure(url, "sliding_window", |s| {
            RateLimiter::sliding_window(quota()).with_store(s)
        })
        .await;
        measure(url, "sliding_log", |s| {
            RateLimiter::sliding_log(quota()).with_store(s)
        })
        .await;
        measure(url, "hybrid", |s| {
            RateLimiter::hybrid(quota()).with_store(s)
        })
        .await;
        measure(url, "gcra, 2 tiers", |s| {
            RateLimiter::gcra(tiers()).with_store(s)
        })
        .await;
        measure(url, "fixed_window, 2 tiers", |s| {
            RateLimiter::fixed_window(tiers()).with_store(s)
        })
        .await;
        measure(url, "sliding_log, 2 tiers", |s| {
            RateLimiter::sliding_log(tiers()).with_store(s)
        })
        .await;
    });
}
