//! Live layers on Redis decided on a `ManualClock` (`with_caller_clock`), while Redis's own
//! clock runs: what the parity of a layer in memory and one in Redis
//! (`redis_live_quotas`) can trust.
//!
//! - Redis expires a state on its own clock: a window written with a few ms left is gone a
//!   few ms later in real time, though the manual clock stands still. Taking the TTLs off
//!   between steps ([`persist_all`]) counts such a state as expired even before Redis has
//!   reclaimed it, so the case ends there instead of comparing a fresh Redis key with the
//!   memory store's open window.
//! - A block made through a handle holds on its own server after Redis expired its record:
//!   the handle holds it in memory too.

use crate::support::live;
use crate::support::redis as server;
use crate::support::services;

use std::time::Duration;

use http::{Request, Response};
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::layer::Handle;
use tollgate::store::{OnFailure, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use server::{needs_redis_async, persist_all, RedisServer};

/// Where the clock starts: about the Unix time of 2025.
const EPOCH: Duration = Duration::from_nanos(1_750_000_000_123_456_789);

type Svc = tower::util::BoxCloneService<
    Request<String>,
    Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

/// A Redis server whose expired keys are reclaimed only when a command reads them (no
/// background sweep), and a raw connection to it.
async fn lazy_redis() -> (RedisServer, redis::aio::MultiplexedConnection) {
    let redis = RedisServer::start_with(&["--enable-debug-command", "yes"]).expect("redis-server");
    let mut raw = redis::Client::open(redis.url())
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a raw connection");
    let () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query_async(&mut raw)
        .await
        .expect("DEBUG SET-ACTIVE-EXPIRE");
    (redis, raw)
}

/// `layer` around a handler that answers 200, keyed on `x-key`, on `clock`; and its handle.
fn serve(layer: RateLimitLayer, clock: &ManualClock) -> (Handle, Svc) {
    let layer = layer.key(Header::new("x-key")).clock(clock.clone());
    let handle = layer.handle();
    (
        handle,
        tower::util::BoxCloneService::new(layer.layer(services::ok())),
    )
}

/// A live layer of fixed windows of `quotas` (tiers) in memory, and one on Redis at `url`
/// deciding on the caller's clock without a deny cache, both on `clock`.
async fn pair(url: &str, quotas: Vec<Quota>, clock: &ManualClock) -> [(Handle, Svc); 2] {
    let store = RedisStore::connect(url)
        .await
        .expect("redis connects")
        .with_caller_clock()
        .deny_cache(0)
        .on_failure(OnFailure::Closed)
        .timeout(Duration::from_secs(5));
    [
        serve(live::layer_of(3, quotas.clone(), true), clock),
        serve(live::layer_of(3, quotas, true).store(store), clock),
    ]
}

/// The status, rate limit headers and `Retry-After` of `key`'s request to `svc`.
async fn ask(svc: &Svc, key: &str) -> String {
    let req = Request::builder()
        .header("x-key", key)
        .body(String::new())
        .unwrap();
    let resp = svc.clone().oneshot(req).await.unwrap();
    let mut seen = resp.status().as_u16().to_string();
    for name in ["ratelimit", "retry-after"] {
        if let Some(value) = resp.headers().get(name) {
            seen.push_str(&format!(" {name}: {}", value.to_str().unwrap()));
        }
    }
    seen
}

/// Both layers' answers to `key`'s request: memory's, then Redis's.
async fn both(pair: &[(Handle, Svc); 2], key: &str) -> [String; 2] {
    [ask(&pair[0].1, key).await, ask(&pair[1].1, key).await]
}

/// Every key in Redis, and each one's TTL in ms (-1: none).
async fn ttls(raw: &mut redis::aio::MultiplexedConnection) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(raw).await.unwrap();
    let mut all = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(raw).await.unwrap();
        all.push((key, ttl));
    }
    all
}

/// Leaves each of `names` `ms` more on Redis's clock.
async fn expire_in(raw: &mut redis::aio::MultiplexedConnection, names: &[String], ms: u64) {
    for name in names {
        let () = redis::cmd("PEXPIRE")
            .arg(name)
            .arg(ms)
            .query_async(raw)
            .await
            .unwrap();
    }
}

/// Two requests in a window of 2 per 500 ms, the second 3 ms before the window ends, and the
/// window's keys left 3 ms on Redis's clock. Once that has passed in real time, with the
/// manual clock where it was, the state is gone from Redis but not yet reclaimed, and
/// `persist_all` counts it: the memory store's window is still open (429), Redis would
/// answer as for a fresh key (200).
async fn a_state_redis_expired_between_steps_is_counted() {
    let (redis, mut raw) = lazy_redis().await;
    let clock = ManualClock::new();
    clock.advance(EPOCH);
    let quota = live::pool()[4].clone();
    assert_eq!(
        quota,
        Quota::new(2, Duration::from_millis(500)).with_burst(4)
    );
    let pair = pair(&redis.url(), vec![quota.clone(), quota], &clock).await;
    let expired = persist_all(&mut raw, "*").await;
    let [m, r] = both(&pair, "client-1").await;
    assert!(m.starts_with("200"), "{m}");
    assert_eq!(m, r);
    assert_eq!(persist_all(&mut raw, "*").await, expired);
    let kept = ttls(&mut raw).await;
    assert!(
        !kept.is_empty() && kept.iter().all(|(_, ttl)| *ttl == -1),
        "{kept:?}"
    );
    clock.advance(Duration::from_millis(497));
    let [m, r] = both(&pair, "client-1").await;
    assert!(m.starts_with("200"), "{m}");
    assert_eq!(m, r);
    // Each tier's window lives a few ms more on Redis's clock (as a state does when its TTL
    // is reached in real time while the manual clock stands: the layer's list of its plans
    // has no TTL).
    let windows: Vec<String> = ttls(&mut raw)
        .await
        .into_iter()
        .filter(|(name, _)| name.contains(":fixed_window."))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(windows.len(), 2, "{windows:?}");
    expire_in(&mut raw, &windows, 3).await;
    // Redis's clock runs on (a loaded machine between two steps); the manual one stands.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        persist_all(&mut raw, "*").await > expired,
        "a state Redis expired between steps is counted"
    );
    // What a parity case would have compared had it gone on.
    let [m, r] = both(&pair, "client-1").await;
    assert!(m.starts_with("429") && m.contains("retry-after: 1"), "{m}");
    assert!(r.starts_with("200"), "{r}");
}

/// A block of 50 ms through each layer's handle, its record then expired on Redis's clock
/// with the manual clock standing still: both layers still deny, alike (the handle holds the
/// block in memory on its server).
async fn a_handle_block_outlives_its_record_in_redis() {
    let (redis, mut raw) = lazy_redis().await;
    let clock = ManualClock::new();
    clock.advance(EPOCH);
    let quota = live::pool()[4].clone();
    let pair = pair(&redis.url(), vec![quota.clone(), quota], &clock).await;
    for (handle, _) in &pair {
        handle
            .block(Key::from("client-1"), Duration::from_millis(50))
            .await
            .unwrap();
    }
    // The record lives past the block on Redis's clock; ended there (a loaded machine, or a
    // record written near its end), with the manual clock where it was.
    let records: Vec<String> = redis::cmd("KEYS")
        .arg("*block*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!records.is_empty());
    expire_in(&mut raw, &records, 1).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let blocks: Vec<String> = redis::cmd("KEYS")
        .arg("*block*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(blocks, Vec::<String>::new(), "Redis expired the record");
    let [m, r] = both(&pair, "client-1").await;
    assert!(m.starts_with("429") && m.contains("retry-after: 1"), "{m}");
    assert_eq!(m, r);
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        needs_redis_async(
            "a_state_redis_expired_between_steps_is_counted",
            a_state_redis_expired_between_steps_is_counted,
        ),
        needs_redis_async(
            "a_handle_block_outlives_its_record_in_redis",
            a_handle_block_outlives_its_record_in_redis,
        ),
    ]
}
