//! `Handle::set_quotas` on the Redis store, against a real `redis-server`: each key keeps what
//! it used, counted in requests, as in memory.
//!
//! - For every algorithm, one quota or tiers, a live layer in Redis decides exactly as a live
//!   layer in memory through any sequence of requests, peeks, resets, blocks, clock steps and
//!   changes of quotas (back to earlier ones included): the memory store carries every key
//!   over at the change, the Redis script on the key's next check as of the change.
//! - Servers on one Redis: a change holds on each (the states one wrote are read by the
//!   other, and by a server started with the new quotas); a server not yet changed reads the
//!   change before its first request; servers that change at different moments never forget
//!   what a key used.
//! - A policy carries over from at most 8 earlier quotas at once: a ninth change in that time
//!   is refused and changes nothing.

use crate::support::live;
use crate::support::redis as server;
use crate::support::services;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::layer::{Ban, Handle};
use tollgate::store::{Leases, MemoryStore, OnFailure, RedisStore};
use tollgate::{ErrorKind, Key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use live::{layer_of, pool, KINDS};
use server::{needs_redis, needs_redis_async, persist_all, runtime, RedisServer, Trial};

/// Where the clock starts: about the Unix time of 2025, so the scripts split times into whole
/// seconds and nanoseconds as with Redis `TIME`.
const EPOCH: Duration = Duration::from_nanos(1_750_000_000_123_456_789);

/// A store on `url` deciding on the caller's clock, with no deny cache (each check is a
/// script call), under a prefix of its own.
async fn store(url: &str) -> RedisStore {
    static N: AtomicU64 = AtomicU64::new(0);
    RedisStore::connect(url)
        .await
        .expect("redis connects")
        .with_caller_clock()
        .deny_cache(0)
        .on_failure(OnFailure::Closed)
        .timeout(Duration::from_secs(5))
        .prefix(format!("live{}", N.fetch_add(1, Ordering::Relaxed)))
}

type Svc = tower::util::BoxCloneService<
    Request<String>,
    Response<tollgate::layer::ResponseBody<String>>,
    std::convert::Infallible,
>;

/// `layer` around a handler that answers 200, keyed on `x-key`, on `clock`; and its handle.
fn serve(layer: RateLimitLayer, clock: &ManualClock) -> (Handle, Svc) {
    let layer = layer.key(Header::new("x-key")).clock(clock.clone());
    let handle = layer.handle();
    (
        handle,
        tower::util::BoxCloneService::new(layer.layer(services::ok())),
    )
}

/// A manual clock at [`EPOCH`].
fn at_epoch() -> ManualClock {
    let clock = ManualClock::new();
    clock.advance(EPOCH);
    clock
}

/// A server of unnamed quotas, 4 a minute (GCRA), on `store` and `clock`.
fn four_a_minute(store: &RedisStore, clock: &ManualClock) -> (Handle, Svc) {
    serve(
        RateLimitLayer::gcra(Quota::per_minute(4)).store(store.clone()),
        clock,
    )
}

/// The status and rate limit headers of `key`'s request to `svc`.
async fn ask(svc: &Svc, key: u8) -> String {
    let req = Request::builder()
        .header("x-key", format!("client-{key}"))
        .body(String::new())
        .unwrap();
    let resp = svc.clone().oneshot(req).await.unwrap();
    let mut seen = format!("{}", resp.status().as_u16());
    if resp.status().is_server_error() {
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        return format!("{seen} {}", String::from_utf8_lossy(&body));
    }
    for name in ["ratelimit", "ratelimit-policy", "retry-after"] {
        if let Some(value) = resp.headers().get(name) {
            seen.push_str(&format!(" {name}: {}", value.to_str().unwrap()));
        }
    }
    seen
}

fn key(k: u8) -> Key {
    Key::from(format!("client-{k}").as_bytes())
}

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Request(u8),
    Peek(u8),
    Reset(u8),
    Block(u8, u64),
    /// New quotas: indexes into the pool.
    Change(Vec<usize>),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let change = prop::collection::vec(0..6usize, 1..3).prop_map(Step::Change);
    let step = prop_oneof![
        3 => (0u64..1_500).prop_map(Step::Advance),
        8 => (0u8..2).prop_map(Step::Request),
        1 => (0u8..2).prop_map(Step::Peek),
        1 => (0u8..2).prop_map(Step::Reset),
        1 => ((0u8..2), 1u64..2_000).prop_map(|(k, ms)| Step::Block(k, ms)),
        2 => change,
    ];
    prop::collection::vec(step, 1..80)
}

/// Runs `steps` on a live layer in memory and one in Redis, on one clock, and fails at the
/// first answer that differs.
async fn same_answers(
    url: &str,
    kind: usize,
    tiered: bool,
    first: Vec<usize>,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    let pool = pool();
    let pick = |ix: &[usize]| -> Vec<Quota> {
        let mut q: Vec<Quota> = ix.iter().map(|&i| pool[i].clone()).collect();
        if !tiered {
            q.truncate(1);
        }
        q
    };
    let clock = at_epoch();
    let (memory, in_memory) = serve(layer_of(kind, pick(&first), tiered), &clock);
    let (redis, in_redis) = serve(
        layer_of(kind, pick(&first), tiered).store(store(url).await),
        &clock,
    );
    // Quotas in force before, which a step does not go back to: the memory store carries a
    // key over from the quotas of the moment only, the Redis store also from the states the
    // earlier quotas left (`a_change_back_keeps_what_was_used_in_between`).
    let mut earlier: Vec<Vec<Quota>> = Vec::new();
    let mut now = pick(&first);
    let mut raw = redis::Client::open(url)
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("a raw connection");
    let expired = persist_all(&mut raw, "*").await;
    for (n, step) in steps.into_iter().enumerate() {
        // Redis expires keys on its own clock, which runs while the manual clock stands still;
        // the script decides from the states alone. Keys keep no TTL here, so that only the
        // manual clock moves time; a key Redis expired before that (a TTL of a few ms) ends
        // the case, as nothing then compares like with like.
        if persist_all(&mut raw, "*").await > expired {
            return Ok(());
        }
        match step {
            Step::Advance(ms) => clock.advance(Duration::from_millis(ms)),
            Step::Request(k) => {
                let (m, r) = (ask(&in_memory, k).await, ask(&in_redis, k).await);
                prop_assert_eq!(m, r, "step {}: request of key {}", n, k);
            }
            Step::Peek(k) => {
                let m = memory.peek(key(k)).await.unwrap();
                let r = redis.peek(key(k)).await.unwrap();
                prop_assert_eq!(
                    (m.allowed, m.remaining, m.reset_after, m.retry_after),
                    (r.allowed, r.remaining, r.reset_after, r.retry_after),
                    "step {}: peek of key {}",
                    n,
                    k
                );
            }
            Step::Reset(k) => {
                memory.reset(key(k)).await.unwrap();
                redis.reset(key(k)).await.unwrap();
            }
            Step::Block(k, ms) => {
                memory
                    .block(key(k), Duration::from_millis(ms))
                    .await
                    .unwrap();
                redis
                    .block(key(k), Duration::from_millis(ms))
                    .await
                    .unwrap();
            }
            Step::Change(ix) => {
                let ix = if tiered { ix } else { ix[..1].to_vec() };
                let next = pick(&ix);
                // A policy carries over from at most 8 earlier quotas at once
                // (`a_ninth_change_in_a_row_is_refused`).
                if earlier.contains(&next) || (next != now && earlier.len() == 8) {
                    continue;
                }
                if next != now {
                    earlier.push(std::mem::replace(&mut now, next));
                }
                memory.set_quotas(pick(&ix)).unwrap();
                redis.set_quotas(pick(&ix)).unwrap();
                prop_assert_eq!(memory.quotas(), redis.quotas());
            }
        }
    }
    Ok(())
}

/// The parity of one algorithm, one quota and tiers.
fn parity(kind: usize) -> impl FnOnce() + Send + 'static {
    move || {
        let redis = RedisServer::start().expect("redis-server");
        let url = redis.url();
        let rt = runtime();
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 20,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let strategy = (
            any::<bool>(),
            prop::collection::vec(0..6usize, 1..3),
            steps(),
        );
        let outcome = runner.run(&strategy, |(tiered, first, steps)| {
            rt.block_on(same_answers(&url, kind, tiered, first, steps))
        });
        if let Err(failure) = outcome {
            panic!("{}: {failure}", KINDS[kind]);
        }
    }
}

/// How many of `n` requests of key 0 `svc` admits.
async fn admitted(svc: &Svc, n: usize) -> usize {
    let mut passed = 0;
    for _ in 0..n {
        passed += usize::from(ask(svc, 0).await.starts_with("200"));
    }
    passed
}

/// Two servers on one Redis change their quotas: what a key used on one is charged on the
/// other, and a server started afterwards with the new quotas reads the same states.
async fn a_change_holds_on_every_server() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let quota = |n| Quota::per_minute(n).named("api");
    let (a, on_a) = serve(RateLimitLayer::gcra(quota(4)).store(shared.clone()), &clock);
    let (b, on_b) = serve(RateLimitLayer::gcra(quota(4)).store(shared.clone()), &clock);
    assert_eq!(admitted(&on_a, 3).await, 3);
    // An upgrade to 10 a minute, on both servers: 3 were used, 7 are left, wherever asked.
    a.set_quotas(quota(10)).unwrap();
    b.set_quotas(quota(10)).unwrap();
    assert_eq!(admitted(&on_b, 4).await, 4);
    assert_eq!(admitted(&on_a, 5).await, 3);
    // A server started now with the new quotas sees the same budget: none left.
    let (_, on_c) = serve(
        RateLimitLayer::gcra(quota(10)).store(shared.clone()),
        &clock,
    );
    assert_eq!(admitted(&on_c, 2).await, 0);
    // A downgrade to 2 a minute: the key used 10, so nothing is left until the new quota
    // gives one back, 30 s on.
    a.set_quotas(quota(2)).unwrap();
    b.set_quotas(quota(2)).unwrap();
    assert_eq!(admitted(&on_b, 1).await, 0);
    assert_eq!(admitted(&on_a, 1).await, 0);
    clock.advance(Duration::from_secs(30));
    assert_eq!(admitted(&on_a, 2).await, 1);
    assert_eq!(admitted(&on_b, 1).await, 0);
}

/// A server still carrying usage over after a change replaces a key's state by what the key
/// used before it (when that is more); a bucket's lease margin, set there by a server started
/// with the new quotas that holds a slice, stays in the state: that slice may still be spent.
async fn a_carrying_server_keeps_a_buckets_lease_margin() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    // 320 a minute: a lease margin of 1 s rounded down to whole intervals (5 of 187.5 ms).
    let quota = |n| Quota::per_minute(n).named("api");
    let (y, on_y) = serve(
        RateLimitLayer::gcra(quota(160)).store(shared.clone()),
        &clock,
    );
    assert_eq!(admitted(&on_y, 100).await, 100);
    y.set_quotas(quota(320)).unwrap();
    // A server started with the new quotas, leasing: its second check takes a slice.
    let leasing = shared.clone().local_leases(Leases::default());
    let (_, on_x) = serve(RateLimitLayer::gcra(quota(320)).store(leasing), &clock);
    assert_eq!(admitted(&on_x, 3).await, 3);
    let mut raw = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let states = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*gcra*")
                .query_async(&mut raw)
                .await
                .unwrap();
            let mut values = Vec::new();
            for key in keys {
                let value: String = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                values.push(value);
            }
            values
        }
    };
    // The new quotas' state holds the margin: '<tat>:<end of the slice's life>'.
    let leased = |value: &str| value.split_once(':').is_some_and(|(_, v)| v.contains(':'));
    assert!(
        states(&mut raw).await.iter().any(|v| leased(v)),
        "leased: {:?}",
        states(&mut raw).await
    );
    // The carrying server's check charges what the key used before the change (100 of 160,
    // more than the leasing server's), stamping the state as its own: the margin stays.
    assert!(ask(&on_y, 0).await.starts_with("200"));
    let after = states(&mut raw).await;
    let carried: Vec<&String> = after.iter().filter(|v| v.starts_with("gcra@")).collect();
    assert_eq!(carried.len(), 1, "the carried state: {after:?}");
    assert!(leased(carried[0]), "the margin was dropped: {after:?}");
}

/// A change through A reaches B (polled every 10 ms for at most 2 s): from then on the key
/// gets on B what the new quota leaves it after what it used on A, never what the old quota
/// left it.
async fn a_server_not_yet_changed_gives_what_the_new_quota_leaves() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let quota = |n| Quota::per_minute(n).named("api");
    let (a, on_a) = serve(RateLimitLayer::gcra(quota(6)).store(shared.clone()), &clock);
    let (b, on_b) = serve(RateLimitLayer::gcra(quota(6)).store(shared.clone()), &clock);
    assert_eq!(admitted(&on_a, 2).await, 2);
    a.set_quotas(quota(3)).unwrap();
    // A has 1 of 3 left (2 used).
    assert_eq!(admitted(&on_a, 5).await, 1);
    let start = std::time::Instant::now();
    while b.quotas() != [quota(3)] && start.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(b.quotas(), [quota(3)], "B never saw the change");
    assert_eq!(admitted(&on_b, 10).await, 0);
    // B changes too: nothing changes, nothing is left on either.
    b.set_quotas(quota(3)).unwrap();
    assert_eq!(admitted(&on_b, 3).await, 0);
    assert_eq!(admitted(&on_a, 3).await, 0);
}

/// Servers that change at different moments: each finds the states the other wrote since the
/// change (stamped by another table) and takes whichever shows the key used more, so a key
/// that moves between them never gets a fresh budget. A key that only used the new quota on
/// one server is charged it on the other.
async fn servers_that_change_apart_never_forget_usage() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let quota = |n| Quota::per_minute(n).named("api");
    let (a, on_a) = serve(RateLimitLayer::gcra(quota(5)).store(shared.clone()), &clock);
    let (b, on_b) = serve(RateLimitLayer::gcra(quota(5)).store(shared.clone()), &clock);
    assert_eq!(admitted(&on_a, 1).await, 1);
    a.set_quotas(quota(8)).unwrap();
    // 1 used of 8 on A: 7 left; it takes 6.
    assert_eq!(admitted(&on_a, 6).await, 6);
    clock.advance(Duration::from_secs(1));
    b.set_quotas(quota(8)).unwrap();
    // B finds A's state (7 used of 8) and its own old one (1 used of 5): 1 left at most.
    assert_eq!(admitted(&on_b, 3).await, 1);
    assert_eq!(admitted(&on_a, 3).await, 0);
}

/// A change back to earlier quotas (whose old states are still in Redis) charges what the
/// key used under the quotas in between: the earlier states are never read as they are.
async fn a_change_back_keeps_what_was_used_in_between() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let (handle, svc) = serve(
        RateLimitLayer::fixed_window(Quota::per_minute(10).named("api"))
            .store(store(&redis.url()).await),
        &clock,
    );
    assert_eq!(admitted(&svc, 1).await, 1);
    handle
        .set_quotas(Quota::per_minute(20).named("api"))
        .unwrap();
    assert_eq!(admitted(&svc, 30).await, 19);
    // Back to 10 a minute: the key used 20 in this minute, the old window says 1.
    handle
        .set_quotas(Quota::per_minute(10).named("api"))
        .unwrap();
    assert_eq!(admitted(&svc, 5).await, 0);
    clock.advance(Duration::from_secs(61));
    assert_eq!(admitted(&svc, 12).await, 10);
}

/// A reset through the handle while a change is carried over makes the key fresh: the old
/// states go too.
async fn a_reset_during_a_change_forgets_the_old_states() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let (handle, svc) = serve(
        RateLimitLayer::sliding_window(Quota::per_minute(4).named("api"))
            .store(store(&redis.url()).await),
        &clock,
    );
    assert_eq!(admitted(&svc, 4).await, 4);
    handle
        .set_quotas(Quota::per_minute(6).named("api"))
        .unwrap();
    handle.reset(key(0)).await.unwrap();
    assert_eq!(admitted(&svc, 8).await, 6);
}

/// A block made on one server before a change of unnamed quotas (named by their figures, so
/// the policy's name changes with them) holds on a server that changed: the block under the
/// earlier name is read beside the new one's.
async fn a_block_holds_across_a_change_of_unnamed_quotas() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let (a, on_a) = four_a_minute(&shared, &clock);
    let (b, on_b) = four_a_minute(&shared, &clock);
    a.set_quotas(Quota::per_minute(10)).unwrap();
    assert_eq!(a.policy(), "10/min");
    b.block(key(0), Duration::from_secs(600)).await.unwrap();
    let denied = ask(&on_a, 0).await;
    assert!(
        denied.starts_with("429") && denied.contains("retry-after: 600"),
        "{denied}"
    );
    // B changes too: its own hold and the block under the old name both deny; a reset on A
    // lifts every one of them.
    b.set_quotas(Quota::per_minute(10)).unwrap();
    assert_eq!(admitted(&on_b, 1).await, 0);
    clock.advance(Duration::from_secs(100));
    let denied = ask(&on_a, 0).await;
    assert!(denied.contains("retry-after: 500"), "{denied}");
    a.reset(key(0)).await.unwrap();
    assert_eq!(admitted(&on_a, 12).await, 10);
}

/// Nine changes while the first one's states may still live: the ninth is refused, with a
/// message that says when to try again, and the quotas stay.
async fn a_ninth_change_in_a_row_is_refused() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let (handle, svc) = serve(
        RateLimitLayer::gcra(Quota::per_minute(100).named("api")).store(store(&redis.url()).await),
        &clock,
    );
    assert_eq!(admitted(&svc, 50).await, 50);
    for n in 1..=8 {
        handle
            .set_quotas(Quota::per_minute(100 + n).named("api"))
            .unwrap();
    }
    let error = handle
        .set_quotas(Quota::per_minute(200).named("api"))
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    let message = error.to_string();
    assert!(
        message.contains("\"api\"") && message.contains("again in"),
        "{message}"
    );
    assert_eq!(handle.quotas(), [Quota::per_minute(108).named("api")]);
    // What the key used went through all eight: 58 of 108 left.
    assert_eq!(admitted(&svc, 70).await, 58);
}

/// With a local fallback, the local table carries over too: while Redis is away the key
/// keeps what it used here.
async fn the_local_fallback_carries_over_too() {
    let mut redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let store = store(&redis.url())
        .await
        .on_failure(OnFailure::Local(MemoryStore::new()))
        .timeout(Duration::from_millis(300));
    let (handle, svc) = serve(
        RateLimitLayer::gcra(Quota::per_minute(4).named("api")).store(store),
        &clock,
    );
    redis.kill();
    // Decided locally: 4 of 4.
    assert_eq!(admitted(&svc, 6).await, 4);
    handle
        .set_quotas(Quota::per_minute(6).named("api"))
        .unwrap();
    assert_eq!(admitted(&svc, 6).await, 2);
}

/// Attack on the local fallback across changes: two tiers (4 a minute, 6 an hour), failed
/// logins counted (`count_if`: a success is refunded, which gives nothing back while Redis is
/// away), the quotas changed twice while Redis is gone. The fallback decides as the memory
/// store does through the same changes, and never lets through more failures than the hour
/// allows, whatever was spent before each change.
async fn the_local_fallback_keeps_usage_across_changes_of_tiers() {
    let mut redis = RedisServer::start().expect("redis-server");
    let store = store(&redis.url())
        .await
        .on_failure(OnFailure::Local(MemoryStore::new()))
        .timeout(Duration::from_millis(300));
    redis.kill();
    let on_fallback = changes_of_tiers(|layer| layer.store(store.clone())).await;
    let in_memory = changes_of_tiers(|layer| layer.store(MemoryStore::new())).await;
    assert_eq!(
        on_fallback, in_memory,
        "the fallback decides as the memory store"
    );
    assert_eq!(on_fallback[..2], [4, 1], "4 a minute, then 5 with 4 used");
    let counted: usize = on_fallback.iter().sum();
    assert!(
        counted <= 7,
        "{counted} failures in the hour: {on_fallback:?}"
    );
}

/// The failed logins let through in each step of the attack above, on the layer `store` makes.
async fn changes_of_tiers(store: impl Fn(RateLimitLayer) -> RateLimitLayer) -> Vec<usize> {
    let clock = at_epoch();
    let tiers = |minute: u64, hour: u64| {
        [
            Quota::per_minute(minute).named("login-minute"),
            Quota::per_hour(hour).named("login-hour"),
        ]
    };
    let (handle, svc) = serve_login(store(RateLimitLayer::fixed_window(tiers(4, 6))), &clock);
    let failures = |n: usize| {
        let svc = svc.clone();
        async move {
            let mut counted = 0;
            for _ in 0..n {
                counted += usize::from(login(&svc, false).await == StatusCode::UNAUTHORIZED);
            }
            counted
        }
    };
    let mut steps = vec![failures(6).await];
    // A success is answered (the minute is full) or refunded; neither frees a failure.
    let _ = login(&svc, true).await;
    handle.set_quotas(tiers(5, 6)).unwrap();
    steps.push(failures(3).await);
    clock.advance(Duration::from_secs(60));
    handle.set_quotas(tiers(5, 7)).unwrap();
    steps.push(failures(5).await);
    clock.advance(Duration::from_secs(60));
    steps.push(failures(3).await);
    steps
}

/// A login endpoint behind `layer`, keyed on `x-key`, on `clock`: 200 when the request
/// carries `x-ok`, 401 otherwise, and only failures count (`count_if`: a success is
/// refunded); and its handle.
fn serve_login(layer: RateLimitLayer, clock: &ManualClock) -> (Handle, Svc) {
    let layer = layer
        .key(Header::new("x-key"))
        .clock(clock.clone())
        .count_if(|r| r.status == StatusCode::UNAUTHORIZED);
    let handle = layer.handle();
    let login = tower::service_fn(|req: Request<String>| {
        let mut resp = Response::new(String::new());
        if !req.headers().contains_key("x-ok") {
            *resp.status_mut() = StatusCode::UNAUTHORIZED;
        }
        std::future::ready(Ok::<_, std::convert::Infallible>(resp))
    });
    (
        handle,
        tower::util::BoxCloneService::new(layer.layer(login)),
    )
}

/// The status of a login of key 0 to `svc`, successful when `ok`.
async fn login(svc: &Svc, ok: bool) -> StatusCode {
    let mut req = Request::builder().header("x-key", "client-0");
    if ok {
        req = req.header("x-ok", "1");
    }
    let req = req.body(String::new()).unwrap();
    svc.clone().oneshot(req).await.unwrap().status()
}

/// A refund (`count_if`) that empties a sliding log's or window's key while the table
/// carries over leaves a state the next check reads: with `OnFailure::Open` the failed logins
/// that follow get exactly the new quota, and with `Closed` the next one is decided (not a
/// 5xx).
async fn a_refund_that_empties_a_key_while_carrying_over_leaves_it_readable() {
    for (name, sliding_log) in [("sliding_log", true), ("sliding_window", false)] {
        for on_failure in [OnFailure::Open, OnFailure::Closed] {
            let redis = RedisServer::start().expect("redis-server");
            let clock = at_epoch();
            let layer = |n| {
                let quota = Quota::per_minute(n).named("login");
                if sliding_log {
                    RateLimitLayer::sliding_log(quota)
                } else {
                    RateLimitLayer::sliding_window(quota)
                }
            };
            let store = store(&redis.url()).await.on_failure(on_failure);
            let (handle, svc) = serve_login(layer(3).store(store), &clock);
            handle
                .set_quotas(Quota::per_minute(2).named("login"))
                .unwrap();
            // One success, refunded: the key's only entry is taken back.
            assert_eq!(login(&svc, true).await, StatusCode::OK, "{name}");
            let mut answers = Vec::new();
            for _ in 0..4 {
                answers.push(login(&svc, false).await.as_u16());
            }
            assert_eq!(answers, [401, 401, 429, 429], "{name}");
        }
    }
}

/// Unnamed quotas are named by their figures, and the name is in every Redis key: a server
/// changed live from 4/min to 10/min names its keys and blocks as one started with 10/min
/// does, so the two share what a key used and its blocks.
async fn unnamed_quotas_changed_live_share_keys_with_a_server_started_with_them() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let (a, on_a) = four_a_minute(&shared, &clock);
    a.set_quotas(Quota::per_minute(10)).unwrap();
    let (c, on_c) = serve(
        RateLimitLayer::gcra(Quota::per_minute(10)).store(shared.clone()),
        &clock,
    );
    assert_eq!(admitted(&on_a, 10).await, 10);
    assert_eq!(
        admitted(&on_c, 5).await,
        0,
        "the key used all of 10/min on A"
    );
    c.block(key(1), Duration::from_secs(600)).await.unwrap();
    let denied = ask(&on_a, 1).await;
    assert!(denied.contains("retry-after: 600"), "{denied}");
    a.block(key(2), Duration::from_secs(300)).await.unwrap();
    let denied = ask(&on_c, 2).await;
    assert!(denied.contains("retry-after: 300"), "{denied}");
}

/// Calendar windows carried over late: 10 a minute used in a calendar minute, the change to
/// 20 a minute, and the key's next check 30 s later in the same calendar minute: the carried
/// window is that minute, so 10 of 20 are left.
async fn a_calendar_window_carried_over_late_keeps_its_minute() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    // A second into a calendar minute (1_750_000_020 s is a whole minute).
    clock.set_wall_time(UNIX_EPOCH + Duration::from_secs(1_750_000_021));
    let quota = |n| Quota::per_minute(n).named("api");
    let (handle, svc) = serve(
        RateLimitLayer::fixed_window(quota(10))
            .aligned()
            .store(store(&redis.url()).await),
        &clock,
    );
    assert_eq!(admitted(&svc, 12).await, 10);
    handle.set_quotas(quota(20)).unwrap();
    clock.advance(Duration::from_secs(30));
    assert_eq!(admitted(&svc, 30).await, 10);
    // The next calendar minute starts fresh under 20 a minute.
    clock.advance(Duration::from_secs(29));
    assert_eq!(admitted(&svc, 30).await, 20);
}

/// The status and `Retry-After` of key `k`'s request to `svc`: "200", "429 retry-after: 600".
async fn retry(svc: &Svc, k: u8) -> String {
    let req = Request::builder()
        .header("x-key", format!("client-{k}"))
        .body(String::new())
        .unwrap();
    let resp = svc.clone().oneshot(req).await.unwrap();
    let mut seen = resp.status().as_u16().to_string();
    if let Some(retry) = resp.headers().get("retry-after") {
        seen.push_str(&format!(" retry-after: {}", retry.to_str().unwrap()));
    }
    seen
}

/// GCRA of unnamed `n` a minute that bans a key at its second denial within a minute, for
/// `ban`.
fn banning(n: u64, ban: Duration) -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(n)).ban(Ban::new(1, Duration::from_secs(60), ban))
}

/// A ban made before five changes of unnamed quotas (each one a new policy name) still holds
/// after them, in Redis as in memory: the block is read under the name the layer was built
/// with, whatever the number of changes.
async fn a_ban_survives_changes_of_unnamed_quotas_as_in_memory() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let hour = Duration::from_secs(3600);
    let (in_memory, on_memory) = serve(banning(2, hour), &clock);
    let (in_redis, on_redis) = serve(banning(2, hour).store(store(&redis.url()).await), &clock);
    for (name, svc) in [("memory", &on_memory), ("redis", &on_redis)] {
        assert_eq!(retry(svc, 0).await, "200", "{name}");
        assert_eq!(retry(svc, 0).await, "200", "{name}");
        assert_eq!(retry(svc, 0).await, "429 retry-after: 30", "{name}");
        assert_eq!(
            retry(svc, 0).await,
            "429 retry-after: 3600",
            "{name}: banned"
        );
    }
    for n in 3..=7 {
        in_memory.set_quotas(Quota::per_minute(n)).unwrap();
        in_redis.set_quotas(Quota::per_minute(n)).unwrap();
        assert_eq!(in_redis.policy(), format!("{n}/min"));
        assert_eq!(
            retry(&on_memory, 0).await,
            "429 retry-after: 3600",
            "{n}/min"
        );
        assert_eq!(
            retry(&on_redis, 0).await,
            "429 retry-after: 3600",
            "{n}/min"
        );
    }
}

/// A block made through one server's handle holds on another that changes its unnamed
/// quotas five times: it never saw the block itself, and reads it in Redis under the name it
/// was built with.
async fn a_block_from_another_server_survives_changes_of_unnamed_quotas() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let two = || RateLimitLayer::gcra(Quota::per_minute(2)).store(shared.clone());
    let (a, on_a) = serve(two(), &clock);
    let (b, _on_b) = serve(two(), &clock);
    b.block(key(0), Duration::from_secs(3600)).await.unwrap();
    for n in 3..=7 {
        a.set_quotas(Quota::per_minute(n)).unwrap();
        assert_eq!(retry(&on_a, 0).await, "429 retry-after: 3600", "{n}/min");
    }
}

/// While servers disagree on unnamed quotas, a ban or a handle's block made on the server
/// that changed holds on the one that has not: it is written under the earlier name too.
async fn blocks_on_a_changed_server_hold_on_a_server_not_yet_changed() {
    let redis = RedisServer::start().expect("redis-server");
    let clock = at_epoch();
    let shared = store(&redis.url()).await;
    let ten_minutes = Duration::from_secs(600);
    let (_a, on_a) = serve(banning(3, ten_minutes).store(shared.clone()), &clock);
    let (b, on_b) = serve(banning(3, ten_minutes).store(shared.clone()), &clock);
    b.set_quotas(Quota::per_minute(5)).unwrap();
    for _ in 0..5 {
        assert_eq!(retry(&on_b, 0).await, "200");
    }
    assert_eq!(retry(&on_b, 0).await, "429 retry-after: 12", "first denial");
    assert_eq!(retry(&on_b, 0).await, "429 retry-after: 600", "banned on B");
    assert_eq!(retry(&on_a, 0).await, "429 retry-after: 600", "banned on A");
    // A handle's block, on a key A has never seen.
    b.block(key(1), Duration::from_secs(300)).await.unwrap();
    assert_eq!(retry(&on_a, 1).await, "429 retry-after: 300");
    // Once A changes too, both read it under the new name as well.
    clock.advance(Duration::from_secs(100));
    let (_c, on_c) = serve(banning(5, ten_minutes).store(shared.clone()), &clock);
    assert_eq!(
        retry(&on_c, 1).await,
        "429 retry-after: 200",
        "a server started with 5/min"
    );
}

pub(crate) fn trials() -> Vec<server::Trial> {
    // The leaky bucket is GCRA's script behind a layer that makes requests wait (on the
    // manual clock, which only the test moves): its module is checked as GCRA's.
    let mut trials: Vec<Trial> = (0..KINDS.len())
        .filter(|&kind| KINDS[kind] != "leaky_bucket")
        .map(|kind| needs_redis(KINDS[kind], parity(kind)))
        .collect();
    trials.extend([
        needs_redis_async(
            "a_change_holds_on_every_server",
            a_change_holds_on_every_server,
        ),
        needs_redis_async(
            "a_carrying_server_keeps_a_buckets_lease_margin",
            a_carrying_server_keeps_a_buckets_lease_margin,
        ),
        needs_redis_async(
            "a_server_not_yet_changed_gives_what_the_new_quota_leaves",
            a_server_not_yet_changed_gives_what_the_new_quota_leaves,
        ),
        needs_redis_async(
            "servers_that_change_apart_never_forget_usage",
            servers_that_change_apart_never_forget_usage,
        ),
        needs_redis_async(
            "a_change_back_keeps_what_was_used_in_between",
            a_change_back_keeps_what_was_used_in_between,
        ),
        needs_redis_async(
            "a_reset_during_a_change_forgets_the_old_states",
            a_reset_during_a_change_forgets_the_old_states,
        ),
        needs_redis_async(
            "a_block_holds_across_a_change_of_unnamed_quotas",
            a_block_holds_across_a_change_of_unnamed_quotas,
        ),
        needs_redis_async(
            "a_ninth_change_in_a_row_is_refused",
            a_ninth_change_in_a_row_is_refused,
        ),
        needs_redis_async(
            "the_local_fallback_carries_over_too",
            the_local_fallback_carries_over_too,
        ),
        needs_redis_async(
            "the_local_fallback_keeps_usage_across_changes_of_tiers",
            the_local_fallback_keeps_usage_across_changes_of_tiers,
        ),
        needs_redis_async(
            "a_refund_that_empties_a_key_while_carrying_over_leaves_it_readable",
            a_refund_that_empties_a_key_while_carrying_over_leaves_it_readable,
        ),
        needs_redis_async(
            "unnamed_quotas_changed_live_share_keys_with_a_server_started_with_them",
            unnamed_quotas_changed_live_share_keys_with_a_server_started_with_them,
        ),
        needs_redis_async(
            "a_calendar_window_carried_over_late_keeps_its_minute",
            a_calendar_window_carried_over_late_keeps_its_minute,
        ),
        needs_redis_async(
            "a_ban_survives_changes_of_unnamed_quotas_as_in_memory",
            a_ban_survives_changes_of_unnamed_quotas_as_in_memory,
        ),
        needs_redis_async(
            "a_block_from_another_server_survives_changes_of_unnamed_quotas",
            a_block_from_another_server_survives_changes_of_unnamed_quotas,
        ),
        needs_redis_async(
            "blocks_on_a_changed_server_hold_on_a_server_not_yet_changed",
            blocks_on_a_changed_server_hold_on_a_server_not_yet_changed,
        ),
    ]);
    trials
}
