//! Audit: per-key plans (`quota_for`) combined with stores, `count_if` and plan eviction.

use crate::support::redis as server;
use crate::support::request;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::Header;
use tollgate::store::MemoryStore;
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use request::Req;

/// Answers 200, or 401 when the request asks for it (`x-fail`).
fn app() -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    tower::service_fn(|req: Request<String>| async move {
        let mut response = Response::new(String::new());
        if req.headers().contains_key("x-fail") {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, Infallible>(response)
    })
}

fn request(key: &str, fail: bool) -> Request<String> {
    let req = Req::new().header("x-api-key", key).from("192.0.2.1:1");
    if fail { req.header("x-fail", "1") } else { req }.build()
}

/// A plan stricter than the layer's quota, which the Redis store cannot keep (a sliding log
/// above 500 a period), must not give its clients the layer's more generous quota: the client
/// on the 600-a-day plan gets 400 an hour instead.
async fn a_strict_plan_the_store_refuses_must_not_fall_back_to_a_looser_quota() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let store = server::closed_on_caller_clock(&redis.url()).await;
    let base = Quota::per_hour(400).named("paid");
    let free = Quota::per_day(600).named("free");
    let svc = RateLimitLayer::sliding_log(base)
        .key(Header::new("x-api-key"))
        .store(store)
        .clock(clock.clone())
        .quota_for(move |key: &Key, _head| {
            let paid = key.as_bytes().is_some_and(|k| k.starts_with(b"paid_"));
            if paid {
                Quota::per_hour(400).named("paid")
            } else {
                free.clone()
            }
        })
        .layer(app());
    // A free client, 1000 requests over 3 hours: its plan allows 600.
    let mut passed = 0;
    for _ in 0..3 {
        for _ in 0..(1000 / 3) {
            let resp = svc.clone().oneshot(request("free_1", false)).await.unwrap();
            if resp.status() == StatusCode::OK {
                passed += 1;
            }
        }
        clock.advance(Duration::from_secs(3600));
    }
    assert!(
        passed <= 600,
        "a free client passed {passed} requests in 3 hours on a plan of 600 a day"
    );
}

/// The 256-plan LRU: a plan's limiter evicted between a request's check and its refund. The
/// refund must go to the state the check took from, and give back only that.
async fn a_refund_after_its_plans_limiter_was_evicted_gives_back_only_its_own() {
    let clock = ManualClock::new();
    let store = MemoryStore::new();
    let base = Quota::per_minute(1000);
    let svc = RateLimitLayer::gcra(base)
        .key(Header::new("x-api-key"))
        .store(store)
        .clock(clock.clone())
        .count_if(|r| r.status == StatusCode::UNAUTHORIZED)
        .quota_for(|key: &Key, _head| {
            // plan-<n>: n requests a minute (plans 1 to 400).
            let n = key
                .as_bytes()
                .and_then(|b| b.strip_prefix(b"plan-"))
                .and_then(|b| std::str::from_utf8(b).ok())
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(1000);
            Quota::per_minute(n).named(format!("p{n}"))
        })
        .layer(app());
    // plan-2: two failures a minute. Hold a successful request's future while 300 other plans
    // evict plan-2's limiter; then let it finish (a refund) and count what plan-2 allows.
    let mut held = svc.clone();
    let pending = held.ready().await.unwrap().call(request("plan-2", false));
    for n in 3..303 {
        let resp = svc
            .clone()
            .oneshot(request(&format!("plan-{n}"), false))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    assert_eq!(pending.await.unwrap().status(), StatusCode::OK);
    let mut failures = 0;
    for _ in 0..10 {
        let resp = svc.clone().oneshot(request("plan-2", true)).await.unwrap();
        if resp.status() == StatusCode::UNAUTHORIZED {
            failures += 1;
        }
    }
    assert_eq!(failures, 2, "plan-2 allows two failures a minute");
}

/// A dry run lets a would-be denial through; its response, not counting, must not refund what
/// other (counted) requests took.
async fn a_dry_run_denial_that_does_not_count_refunds_nothing() {
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .key(Header::new("x-api-key"))
        .clock(clock.clone())
        .dry_run(true)
        .count_if(|r| r.status == StatusCode::UNAUTHORIZED)
        .layer(app());
    let remaining = |resp: &Response<_>| -> String {
        resp.headers()
            .get("ratelimit")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    // Two failures take the quota.
    for _ in 0..2 {
        let resp = svc.clone().oneshot(request("k", true)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    // Successes while spent: each would be denied, passes, does not count.
    for _ in 0..5 {
        let resp = svc.clone().oneshot(request("k", false)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(remaining(&resp).contains("r=0"), "{}", remaining(&resp));
    }
    // Still spent: a failure now would be denied (reported r=0).
    let resp = svc.clone().oneshot(request("k", true)).await.unwrap();
    assert!(remaining(&resp).contains("r=0"), "{}", remaining(&resp));
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "a_strict_plan_the_store_refuses_must_not_fall_back_to_a_looser_quota",
            a_strict_plan_the_store_refuses_must_not_fall_back_to_a_looser_quota,
        ),
        server::plain_async(
            "a_refund_after_its_plans_limiter_was_evicted_gives_back_only_its_own",
            a_refund_after_its_plans_limiter_was_evicted_gives_back_only_its_own,
        ),
        server::plain_async(
            "a_dry_run_denial_that_does_not_count_refunds_nothing",
            a_dry_run_denial_that_does_not_count_refunds_nothing,
        ),
    ]
}
