//! No error and no log line above trace carries a client's key when the Redis store fails:
//! corrupt and foreign state under the key's Redis key, a key of the wrong type, through the
//! limiter (every failure policy) and through the layer (which logs the error). Alone in its
//! test binary, for the `tracing` subscriber (see `tests/logs.rs`).
#![cfg(all(feature = "redis", feature = "tracing"))]

mod support;

use support::logs;
use support::redis as server;

use std::error::Error as _;
use std::time::Duration;

use http::{Request, StatusCode};
use redis::AsyncCommands;
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{Key, Quota, RateLimitLayer, RateLimiter};
use tower::{Layer, ServiceExt};

use logs::Captured;

/// Every text an error shows: its message, its debug form, and its sources'.
fn texts(error: &tollgate::Error) -> String {
    let mut out = format!("{error}\n{error:?}\n");
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str(&format!("{s}\n{s:?}\n"));
        source = s.source();
    }
    out
}

/// The secret's forms that must not show: its bytes, and the bytes the store writes for it.
fn forms(secret: &str, redis_key: &[u8]) -> Vec<String> {
    let redis_key = String::from_utf8_lossy(redis_key).into_owned();
    let open = redis_key.find('{').unwrap();
    let close = redis_key.find('}').unwrap();
    let mut forms = vec![redis_key[open + 1..close].to_owned(), redis_key.clone()];
    if secret.len() <= Key::MAX_LEN {
        forms.push(secret.to_owned());
    } else {
        // A long key shows neither whole nor in part.
        forms.push(secret[..16].to_owned());
    }
    forms
}

fn store_failures_never_show_a_key_above_trace() {
    let Some(server) = server::RedisServer::start() else {
        return;
    };
    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::TRACE);
    let short = "sk_live_{SECRET}_4242".to_owned();
    let long = format!("Bearer LONGSECRET-{}", "x9".repeat(40));
    let mut errors = String::new();
    let mut must_not_show: Vec<String> = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let clock = ManualClock::new();
            let connect = |policy: OnFailure| {
                let url = server.url();
                async move {
                    RedisStore::connect(&url)
                        .await
                        .unwrap()
                        .on_failure(policy)
                        .deny_cache(0)
                        .with_caller_clock()
                }
            };
            let q = Quota::per_minute(5).named("p");
            let closed = RateLimiter::gcra(q.clone())
                .with_clock(clock.clone())
                .with_store(connect(OnFailure::Closed).await);
            let open = RateLimiter::gcra(q.clone())
                .with_clock(clock.clone())
                .with_store(connect(OnFailure::Open).await);
            let local = RateLimiter::gcra(q.clone())
                .with_clock(clock.clone())
                .with_store(connect(OnFailure::Local(MemoryStore::new())).await);
            let mut conn = redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            for secret in [&short, &long] {
                let key = Key::from(secret.as_str());
                let name = closed.table().redis_keys(&key).remove(0);
                must_not_show.extend(forms(secret, &name));
                for (what, corrupt) in [
                    ("corrupt", Some("gcra:not-a-time")),
                    ("foreign", Some("fw:1:2")),
                    ("wrong type", None),
                ] {
                    let _: () = conn.del(&name).await.unwrap();
                    match corrupt {
                        Some(text) => conn.set::<_, _, ()>(&name, text).await.unwrap(),
                        None => conn.rpush::<_, _, ()>(&name, "x").await.unwrap(),
                    }
                    let error = closed.check(key.clone()).await.unwrap_err();
                    let shown = texts(&error);
                    if what != "wrong type" {
                        assert!(shown.contains("gcra state"), "{what}: {shown}");
                    }
                    errors.push_str(&shown);
                    // Open and local answer, and log the failure (once per 10 s: move on).
                    assert!(open.check(key.clone()).await.unwrap().allowed);
                    assert!(local.check(key.clone()).await.unwrap().allowed);
                    clock.advance(Duration::from_secs(11));
                }
            }

            // Through the layer, which logs a failed check as an error.
            let key = Key::from(short.as_bytes());
            let layer = RateLimitLayer::gcra(Quota::per_minute(5).named("hdr"))
                .key(Header::new("x-api-key"))
                .store(connect(OnFailure::Closed).await)
                .clock(clock.clone());
            let name = RateLimiter::gcra(Quota::per_minute(5).named("hdr"))
                .with_store(connect(OnFailure::Closed).await)
                .table()
                .redis_keys(&key)
                .remove(0);
            let _: () = conn.set(&name, "gcra:garbage").await.unwrap();
            let svc = layer.layer(tower::service_fn(|_req: Request<String>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hi")))
            }));
            let req = Request::builder()
                .header("x-api-key", short.as_str())
                .body(String::new())
                .unwrap();
            let resp = svc.oneshot(req).await.unwrap();
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        });
    });
    for form in &must_not_show {
        assert!(
            !errors.contains(form.as_str()),
            "{form:?} in an error: {errors}"
        );
    }
    let text = log.text();
    let failures = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("Redis rate limit store failed"))
        .count();
    assert_eq!(
        failures, 19,
        "two keys x three states x three failure policies, and the layer's: {text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("gcra state")),
        "the layer logs its failed check: {text}"
    );
    for line in text.lines().filter(|l| !l.contains("TRACE")) {
        for form in &must_not_show {
            assert!(!line.contains(form.as_str()), "{form:?} shows: {line}");
        }
    }
}

/// Settled costs on Redis, with every failure policy, keep the client's key out of every log
/// line above trace: settlements that charge and refund, on corrupt state, and with Redis gone
/// (the settlement then fails, is logged, and the request keeps its reservation), beside an
/// in-flight limit whose leases are given back with Redis gone.
fn settlements_that_fail_never_show_a_key_above_trace() {
    type Settling = tower::util::BoxCloneService<
        Request<String>,
        http::Response<tollgate::layer::ResponseBody<tollgate::layer::ResponseBody<String>>>,
        std::convert::Infallible,
    >;
    let Some(mut server) = server::RedisServer::start() else {
        return;
    };
    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::TRACE);
    let secret = "sk_live_{SETTLE}_777".to_owned();
    let mut must_not_show: Vec<String> = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let clock = ManualClock::new();
            let key = Key::from(secret.as_str());
            let mut services = Vec::new();
            for (name, policy) in [
                ("open", OnFailure::Open),
                ("closed", OnFailure::Closed),
                ("local", OnFailure::Local(MemoryStore::new())),
            ] {
                let store = RedisStore::connect(&server.url())
                    .await
                    .unwrap()
                    .on_failure(policy)
                    .deny_cache(0)
                    .with_caller_clock();
                let quota = Quota::per_minute(100).named(name);
                let redis_key = RateLimiter::gcra(quota.clone())
                    .with_store(store.clone())
                    .table()
                    .redis_keys(&key)
                    .remove(0);
                must_not_show.extend(forms(&secret, &redis_key));
                let layer = RateLimitLayer::gcra(quota)
                    .key(Header::new("x-api-key"))
                    .cost(|_: &Key, _| 10)
                    .settle()
                    .store(store.clone())
                    .clock(clock.clone());
                let in_flight = tollgate::InFlightLayer::new(5)
                    .policy_name(name)
                    .key(Header::new("x-api-key"))
                    .clock(clock.clone())
                    .store(store);
                let svc = Settling::new(in_flight.layer(layer.layer(tower::service_fn(
                    |req: Request<String>| async move {
                        let set = req.headers().get("x-set").and_then(|v| v.to_str().ok());
                        if let (Some(usage), Some(set)) = (
                            req.extensions().get::<tollgate::Usage>(),
                            set.and_then(|s| s.parse().ok()),
                        ) {
                            usage.set(set);
                        }
                        Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
                    },
                ))));
                services.push((svc, redis_key));
            }
            let send = |svc: &Settling, set: &str| {
                let svc = svc.clone();
                let req = Request::builder()
                    .header("x-api-key", secret.as_str())
                    .header("x-set", set)
                    .body(String::new())
                    .unwrap();
                async move {
                    let Ok(resp) = svc.oneshot(req).await;
                    let _ = http_body_util::BodyExt::collect(resp.into_body()).await;
                    // The settlement runs on the runtime.
                    for _ in 0..20 {
                        tokio::task::yield_now().await;
                    }
                }
            };
            let mut conn = redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            for (svc, redis_key) in &services {
                send(svc, "30").await;
                send(svc, "2").await;
                // Corrupt state: the check fails, and so would a settlement.
                let _: () = conn.set(redis_key, "gcra:garbage").await.unwrap();
                send(svc, "40").await;
                let _: () = conn.del(redis_key).await.unwrap();
                clock.advance(Duration::from_secs(11));
            }
            // Redis gone mid-stream: checks, settlements and give-backs fail.
            server.kill();
            for (svc, _) in &services {
                send(svc, "50").await;
                send(svc, "1").await;
                clock.advance(Duration::from_secs(11));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
    });
    let text = log.text();
    for logged in [
        "settlement failed",
        "corrupt gcra state",
        "lease not given back",
    ] {
        assert!(text.contains(logged), "{logged:?} is logged: {text}");
    }
    for line in text.lines().filter(|l| !l.contains("TRACE")) {
        for form in &must_not_show {
            assert!(!line.contains(form.as_str()), "{form:?} shows: {line}");
        }
    }
}

/// The warnings a store logs when it connects to a server started with `options`.
fn connect_warnings(options: &[&str]) -> Vec<String> {
    let Some(server) = server::RedisServer::start_with(options) else {
        return Vec::new();
    };
    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::TRACE);
    tracing::subscriber::with_default(subscriber, || {
        server::runtime().block_on(async {
            let store = RedisStore::connect(&server.url()).await.unwrap();
            // Decisions go on whatever the policy.
            let limiter = RateLimiter::gcra(Quota::per_minute(5).named("evict")).with_store(store);
            assert!(limiter.check("tenant-7f3a").await.unwrap().allowed);
        });
    });
    log.take()
        .into_iter()
        .filter(|l| l.contains("WARN"))
        .collect()
}

/// A Redis with `maxmemory` under a policy that can evict a client at its limit is named once
/// at connect, with the fix; `volatile-ttl`, `noeviction`, no `maxmemory`, and a Redis that
/// refuses `CONFIG` (as managed services often do) give no warning.
fn an_evicting_policy_is_warned_of_once_at_connect() {
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "allkeys-random",
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
    ] {
        let warnings = connect_warnings(&["--maxmemory", "64mb", "--maxmemory-policy", policy]);
        assert_eq!(warnings.len(), 1, "{policy}: {warnings:?}");
        let line = &warnings[0];
        assert!(
            line.contains(&format!("maxmemory-policy {policy}")),
            "{line}"
        );
        assert!(line.contains("67108864 bytes"), "{line}");
        assert!(
            line.contains("CONFIG SET maxmemory-policy volatile-ttl")
                && line.contains("noeviction"),
            "{line}"
        );
        assert!(
            !line.contains("tenant-7f3a"),
            "no key in the warning: {line}"
        );
    }
    for quiet in [
        &["--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"][..],
        &["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"],
        &["--maxmemory-policy", "allkeys-lru"],
        &[
            "--maxmemory",
            "64mb",
            "--maxmemory-policy",
            "allkeys-lru",
            "--rename-command",
            "CONFIG",
            "",
        ],
    ] {
        let warnings = connect_warnings(quiet);
        assert!(warnings.is_empty(), "{quiet:?}: {warnings:?}");
    }
}

fn main() -> std::process::ExitCode {
    server::harness(vec![
        server::needs_redis(
            "store_failures_never_show_a_key_above_trace",
            store_failures_never_show_a_key_above_trace,
        ),
        server::needs_redis(
            "settlements_that_fail_never_show_a_key_above_trace",
            settlements_that_fail_never_show_a_key_above_trace,
        ),
        server::needs_redis(
            "an_evicting_policy_is_warned_of_once_at_connect",
            an_evicting_policy_is_warned_of_once_at_connect,
        ),
    ])
}
