//! How a Redis-backed limit fails: a failure policy per layer on one store, a Redis out of
//! memory that admits nothing whatever the policy, and a clock the store would ignore refused
//! where the limiter or layer is built. Real `redis-server` processes, real axum servers.

use crate::support::http as web;
use crate::support::redis as server;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use tollgate::clock::{ManualClock, OsClock, SystemClock};
use tollgate::store::{MemoryStore, OnFailure, RedisStore};
use tollgate::{ErrorKind, InFlightLayer, Quota, RateLimitLayer, RateLimiter};

use web::serve;

/// The three failure policies, with their names for messages.
fn policies() -> [(&'static str, OnFailure); 3] {
    [
        ("open", OnFailure::Open),
        ("closed", OnFailure::Closed),
        ("local", OnFailure::Local(MemoryStore::new())),
    ]
}

/// A server that refuses writes past 4 MiB.
const SMALL: &[&str] = &["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"];

/// Fills the server behind `url` with junk until it answers `OOM` (its `maxmemory` is set
/// with `noeviction`). Redis checks memory when a script starts, so the junk goes in batches.
async fn fill(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    for batch in 0..10_000 {
        let filled: redis::RedisResult<i64> = redis::cmd("EVAL")
            .arg(
                "for i = 1, 1000 do redis.call('set', 'junk:' .. ARGV[1] .. ':' .. i, \
                 string.rep('x', 256)) end return 0",
            )
            .arg(0)
            .arg(batch)
            .query_async(&mut connection)
            .await;
        if let Err(error) = filled {
            assert_eq!(error.code(), Some("OOM"), "{error}");
            return;
        }
    }
    panic!("Redis never ran out of memory");
}

/// A Redis at `maxmemory` under `noeviction` refuses every write: whatever the failure policy,
/// no request is admitted (an admission could not be recorded, so it would go past the quota),
/// and the error says the store is full. A client at its limit stays limited too.
async fn a_full_redis_admits_nothing_whatever_the_policy() {
    let Some(redis) = server::RedisServer::start_with(SMALL) else {
        return;
    };
    let mut limited = Vec::new();
    for (name, on_failure) in policies() {
        let store = RedisStore::connect(&redis.url())
            .await
            .unwrap()
            .on_failure(on_failure);
        let limiter = RateLimiter::fixed_window(Quota::per_hour(3).named(format!("login-{name}")))
            .with_store(store);
        // A client at its limit before Redis filled up.
        for _ in 0..3 {
            assert!(limiter.check("at-limit").await.unwrap().allowed);
        }
        limited.push((name, limiter));
    }
    fill(&redis.url()).await;
    for (name, limiter) in &limited {
        for key in ["at-limit", "fresh-1", "fresh-2"] {
            for _ in 0..5 {
                match limiter.check(key).await {
                    Ok(decision) => assert!(
                        !decision.allowed,
                        "{name}: {key} admitted while Redis is out of memory"
                    ),
                    Err(error) => {
                        assert_eq!(error.kind(), ErrorKind::Full, "{name}: {error}");
                        assert!(error.to_string().contains("out of memory"), "{error}");
                    }
                }
            }
        }
    }
}

/// Over HTTP: a layer failing open on a full Redis answers 503, not 200.
async fn a_full_redis_answers_503_through_an_open_layer() {
    let Some(redis) = server::RedisServer::start_with(SMALL) else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let layer = RateLimitLayer::gcra(Quota::per_hour(3).named("full"))
        .store(store)
        .on_failure(OnFailure::Open);
    let url = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    fill(&redis.url()).await;
    let client = web::client();
    for _ in 0..10 {
        let resp = client.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}

/// One store, two layers: the login limit fails closed (503) while the API limit falls back
/// to the store's local policy (200), with Redis gone.
async fn each_layer_fails_as_its_own_policy_says() {
    let Some(mut redis) = server::RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&redis.url())
        .await
        .unwrap()
        .timeout(Duration::from_millis(200));
    let login = RateLimitLayer::fixed_window(Quota::per_hour(5).named("login"))
        .store(store.clone())
        .on_failure(OnFailure::Closed);
    let api = RateLimitLayer::gcra(Quota::per_minute(60).named("api")).store(store);
    let app = Router::new()
        .route("/login", get(|| async { "welcome" }).layer(login))
        .route("/api", get(|| async { "data" }).layer(api));
    let url = serve(app).await;
    let client = web::client();
    for path in ["/login", "/api"] {
        let resp = client.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path} with Redis up");
    }
    redis.kill();
    let resp = client.get(format!("{url}/login")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let resp = client.get(format!("{url}/api")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}

/// A login limit of 5 that fails closed admits 5 in all, whatever Redis does meanwhile: with
/// Redis frozen under a burst of attempts, each is answered 503; once it answers again, 429.
/// (Falling back to a local budget would have admitted 5 more on this server alone.)
async fn a_closed_login_limit_admits_its_quota_through_a_stall() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&redis.url())
        .await
        .unwrap()
        .timeout(Duration::from_millis(50));
    let login = RateLimitLayer::fixed_window(Quota::per_hour(5).named("login"))
        .store(store)
        .key(tollgate::key::Global)
        .on_failure(OnFailure::Closed);
    let url = serve(
        Router::new()
            .route("/", get(|| async { "welcome" }))
            .layer(login),
    )
    .await;
    let client = web::client();
    let burst = |n: usize| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let answers = (0..n).map(|_| {
                let (client, url) = (client.clone(), url.clone());
                async move { client.get(&url).send().await.unwrap().status() }
            });
            futures_util::future::join_all(answers).await
        }
    };
    let mut admitted = 0;
    for status in burst(5).await {
        assert_eq!(status, StatusCode::OK);
        admitted += 1;
    }
    redis.pause();
    for status in burst(20).await {
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "while Redis is frozen"
        );
    }
    redis.resume();
    for status in burst(20).await {
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "once Redis answers again"
        );
    }
    assert_eq!(admitted, 5);
}

/// The message of the panic `build` ends in.
fn refusal<T>(build: impl FnOnce() -> T) -> String {
    let payload = catch_unwind(AssertUnwindSafe(build)).map(drop).unwrap_err();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `on_failure` on a layer whose store cannot fail is refused where it is set, naming the fix.
async fn on_failure_needs_a_redis_store() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let message =
        refusal(|| RateLimitLayer::gcra(Quota::per_minute(5)).on_failure(OnFailure::Closed));
    assert!(message.contains("on_failure(Closed)"), "{message}");
    assert!(message.contains(".store(redis)"), "{message}");
    let message = refusal(|| {
        RateLimitLayer::gcra(Quota::per_minute(5))
            .store(store.clone())
            .on_failure(OnFailure::Open)
            .store(MemoryStore::new())
    });
    assert!(message.contains("not a RedisStore"), "{message}");
    // Set after the store, it holds through a later store of Redis too.
    let layer = RateLimitLayer::gcra(Quota::per_minute(5))
        .store(store.clone())
        .on_failure(OnFailure::Closed)
        .store(store);
    let _ = layer;
}

/// A zero timeout would fail every call before Redis could answer: refused where it is set,
/// naming the value and the fix; a positive one is accepted.
async fn a_zero_timeout_is_refused_where_set() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let message = refusal(|| store.clone().timeout(Duration::ZERO));
    assert!(message.contains("timeout(0ns)"), "{message}");
    assert!(message.contains("positive duration"), "{message}");
    let limiter = RateLimiter::gcra(Quota::per_minute(5).named("short"))
        .with_store(store.timeout(Duration::from_secs(5)));
    assert!(limiter.check("k").await.unwrap().allowed);
}

/// A clock that does not read the system's time, on a store that decides on Redis `TIME`,
/// would be ignored: refused where the limiter or layer is built, naming `with_caller_clock`;
/// accepted with it, where it moves time (1 a minute: denied, then admitted 61 s later).
async fn a_clock_the_store_would_ignore_is_refused_where_built() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&redis.url()).await.unwrap();
    let quota = || Quota::per_minute(1).named("clock");
    let fix = "with_caller_clock";

    let refusals = [
        refusal(|| {
            RateLimitLayer::gcra(quota())
                .store(store.clone())
                .clock(ManualClock::new())
        }),
        refusal(|| {
            RateLimitLayer::gcra(quota())
                .clock(ManualClock::new())
                .store(store.clone())
        }),
        refusal(|| {
            RateLimiter::gcra(quota())
                .with_store(store.clone())
                .with_clock(ManualClock::new())
        }),
        // An in-flight limit's leases expire on Redis's clock: renewals timed by a manual
        // clock would let them lapse while their requests run.
        refusal(|| {
            InFlightLayer::new(2)
                .store(store.clone())
                .clock(ManualClock::new())
        }),
        refusal(|| {
            InFlightLayer::new(2)
                .clock(ManualClock::new())
                .store(store.clone())
        }),
    ];
    for message in refusals {
        assert!(message.contains(fix), "{message}");
    }
    let error = RateLimiter::gcra(quota())
        .with_clock(ManualClock::new())
        .try_with_store(store.clone())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Misconfigured);
    assert!(error.to_string().contains(fix), "{error}");
    assert!(
        error.to_string().contains("\"clock\""),
        "names the policy: {error}"
    );

    // The system's clocks are what Redis agrees with.
    let _ = RateLimitLayer::gcra(quota())
        .store(store.clone())
        .clock(SystemClock);
    let _ = RateLimiter::gcra(quota())
        .with_store(store.clone())
        .with_clock(OsClock);
    let _ = InFlightLayer::new(2)
        .store(store.clone())
        .clock(SystemClock);
    let _ = InFlightLayer::new(2)
        .store(store.clone().with_caller_clock())
        .clock(ManualClock::new());

    // With the caller's clock, the clock decides.
    let clock = ManualClock::new();
    let limiter = RateLimiter::gcra(quota())
        .with_store(store.with_caller_clock())
        .with_clock(clock.clone());
    assert!(limiter.check("k").await.unwrap().allowed);
    assert!(!limiter.check("k").await.unwrap().allowed);
    clock.advance(Duration::from_secs(61));
    assert!(limiter.check("k").await.unwrap().allowed);
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "a_full_redis_admits_nothing_whatever_the_policy",
            a_full_redis_admits_nothing_whatever_the_policy,
        ),
        server::needs_redis_async(
            "a_full_redis_answers_503_through_an_open_layer",
            a_full_redis_answers_503_through_an_open_layer,
        ),
        server::needs_redis_async(
            "each_layer_fails_as_its_own_policy_says",
            each_layer_fails_as_its_own_policy_says,
        ),
        server::needs_redis_async(
            "a_closed_login_limit_admits_its_quota_through_a_stall",
            a_closed_login_limit_admits_its_quota_through_a_stall,
        ),
        server::needs_redis_async(
            "on_failure_needs_a_redis_store",
            on_failure_needs_a_redis_store,
        ),
        server::needs_redis_async(
            "a_zero_timeout_is_refused_where_set",
            a_zero_timeout_is_refused_where_set,
        ),
        server::needs_redis_async(
            "a_clock_the_store_would_ignore_is_refused_where_built",
            a_clock_the_store_would_ignore_is_refused_where_built,
        ),
    ]
}
