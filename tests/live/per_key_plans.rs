//! Per-key quotas (`quota_for`): plans with tiers, more plans than the layer keeps limiters for,
//! and limiters dropped and made again without giving clients a fresh budget. Time moves by a
//! `ManualClock`, never by sleeping.

use crate::support::http as web;
use crate::support::request;
use crate::support::services;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tollgate::clock::ManualClock;
use tollgate::key::{Header, RequestHead};
use tollgate::store::MemoryStore;
use tollgate::{Key, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use request::Req;
use services::ok;
use web::{client, header, serve};

/// A request with API key `key`.
fn request(key: &str) -> Request<String> {
    Req::new()
        .header("x-api-key", key)
        .from("192.0.2.1:1")
        .build()
}

/// The plan number an API key `plan-<n>-...` asks for.
fn plan_number(key: &Key) -> Option<u64> {
    let text = std::str::from_utf8(key.as_bytes()?).ok()?;
    text.strip_prefix("plan-")?.split('-').next()?.parse().ok()
}

/// Plan `n`: a burst of 2 out of `1000 + n` an hour, named `plan-<n>` when `named`.
fn plan(n: u64, named: bool) -> Quota {
    let quota = Quota::per_hour(1000 + n).with_burst(2);
    if named {
        quota.named(format!("plan-{n}"))
    } else {
        quota
    }
}

/// A plan of `limit` requests per `3600 + n` s, `n` from the request's `x-plan` header (0
/// without): every `n` a plan of its own.
fn plan_from_header(limit: u64) -> impl Fn(&Key, RequestHead<'_>) -> Quota + Send + Sync {
    move |_key, head| {
        let plan = head.headers().get("x-plan");
        let n: u64 = plan
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        Quota::new(limit, Duration::from_secs(3600 + n))
    }
}

/// A layer whose keys `plan-<n>-<client>` get plan `n`; anything else the base quota.
fn layer(named: bool, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_hour(1).named("base"))
        .key(Header::new("x-api-key"))
        .quota_for(
            move |key: &Key, _head: RequestHead<'_>| match plan_number(key) {
                Some(n) => plan(n, named),
                None => Quota::per_hour(1).named("base"),
            },
        )
        .store(MemoryStore::new())
        .clock(clock.clone())
}

async fn status<S>(svc: &S, key: &str) -> (StatusCode, String)
where
    S: Service<Request<String>, Response = Response<tollgate::layer::ResponseBody<String>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let resp = svc.clone().oneshot(request(key)).await.unwrap();
    let policy = resp
        .headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (resp.status(), policy)
}

/// 300 plans, more than the 256 a layer keeps limiters for: every one is honoured, the 300th
/// included, and the first ones, whose limiters were dropped to make room, still hold the
/// budget their clients spent, named or not.
#[tokio::test]
async fn the_300th_plan_is_honoured_and_evicted_plans_keep_their_state() {
    for named in [true, false] {
        let clock = ManualClock::new();
        let svc = layer(named, &clock).layer(ok());
        // Each plan's client spends its burst of 2.
        for n in 0..300 {
            let key = format!("plan-{n}-a");
            let name = if named {
                format!("plan-{n}")
            } else {
                format!("{}/h;burst=2", 1000 + n)
            };
            let policy = format!("\"{name}\";q={};w=3600", 1000 + n);
            for _ in 0..2 {
                assert_eq!(
                    status(&svc, &key).await,
                    (StatusCode::OK, policy.clone()),
                    "plan {n}, named: {named}"
                );
            }
        }
        // Plans 0 to 43 were dropped to make room; made again, they find their clients' state.
        for n in 0..300 {
            let key = format!("plan-{n}-a");
            assert_eq!(
                status(&svc, &key).await.0,
                StatusCode::TOO_MANY_REQUESTS,
                "plan {n}'s client got a fresh budget (named: {named})"
            );
        }
        // Other clients of the same plans have their own budgets.
        assert_eq!(status(&svc, "plan-0-b").await.0, StatusCode::OK);
        assert_eq!(status(&svc, "plan-299-b").await.0, StatusCode::OK);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the order in which 300 plans (named and unnamed) and their clients come, each
    /// client gets exactly its plan's burst of 2 before any time passes: as if every plan had
    /// kept its limiter forever.
    #[test]
    fn eviction_never_changes_a_decision(
        picks in proptest::collection::vec((0u64..300, 0u8..2, any::<bool>()), 1..700),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let clock = ManualClock::new();
            let svc = RateLimitLayer::gcra(Quota::per_hour(1).named("base"))
                .key(Header::new("x-api-key"))
                .quota_for(move |key: &Key, _head: RequestHead<'_>| {
                    let text = std::str::from_utf8(key.as_bytes().unwrap_or_default()).unwrap_or("");
                    let mut parts = text.split('-');
                    let n: u64 = parts.nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
                    plan(n, parts.nth(1) == Some("named"))
                })
                .clock(clock.clone())
                .layer(ok());
            let mut used = std::collections::HashMap::new();
            for (n, client, named) in picks {
                let kind = if named { "named" } else { "unnamed" };
                let key = format!("plan-{n}-{client}-{kind}");
                let count = used.entry(key.clone()).or_insert(0u32);
                *count += 1;
                let expected = if *count <= 2 { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
                prop_assert_eq!(status(&svc, &key).await.0, expected, "{} request {}", key, count);
            }
            Ok(())
        })?;
    }
}

/// A plan of 3 a second and 4 a day, on a layer with tiers: both tiers are in the headers,
/// and both are enforced. Over HTTP.
#[tokio::test]
async fn a_plan_with_tiers_reports_and_enforces_every_tier_over_http() {
    let clock = ManualClock::new();
    let free = vec![
        Quota::per_second(1).named("free-s"),
        Quota::per_day(10).named("free-d"),
    ];
    let pro: Arc<[Quota]> = Arc::new([
        Quota::per_second(3).named("pro-s"),
        Quota::per_day(4).named("pro-d"),
    ]);
    let layer = RateLimitLayer::gcra(free.clone())
        .key(Header::new("x-api-key"))
        .quota_for(move |key: &Key, _head: RequestHead<'_>| {
            if key.as_bytes().is_some_and(|k| k.starts_with(b"pro_")) {
                pro.clone()
            } else {
                Arc::from(free.clone())
            }
        })
        .clock(clock.clone());
    let url = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    let client = client();
    let send = || client.get(&url).header("x-api-key", "pro_1").send();

    let policy = r#""pro-s";q=3;w=1, "pro-d";q=4;w=86400"#;
    // Three at once: the per-second tier's burst.
    for (s, d) in [(2, 3), (1, 2), (0, 1)] {
        let resp = send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "ratelimit-policy"), policy);
        let rate = header(&resp, "ratelimit");
        assert!(rate.starts_with(&format!(r#""pro-s";r={s};"#)), "{rate}");
        assert!(rate.contains(&format!(r#""pro-d";r={d};"#)), "{rate}");
    }
    // The per-second tier refuses the fourth.
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1");
    // A second later, the day's fourth and last request.
    clock.advance(Duration::from_secs(1));
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    // Then the day tier refuses, though the per-second tier has room again.
    clock.advance(Duration::from_secs(1));
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = header(&resp, "retry-after").parse().unwrap();
    assert!(wait > 3600, "the day tier's wait, not the second's: {wait}");
    assert_eq!(header(&resp, "ratelimit-policy"), policy);

    // A free client is on the layer's own tiers.
    let resp = client
        .get(&url)
        .header("x-api-key", "free_1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit-policy"),
        r#""free-s";q=1;w=1, "free-d";q=10;w=86400"#
    );
}

/// A plan's tiers are decided with the layer's options: with `max_delay`, a request past the
/// plan's burst waits its turn instead of being refused.
#[tokio::test]
async fn a_plans_tiers_shape_with_the_layers_max_delay() {
    let clock = ManualClock::new();
    let pro = vec![
        Quota::per_second(10).with_burst(1).named("pro-s"),
        Quota::per_day(100).named("pro-d"),
    ];
    let svc = RateLimitLayer::gcra([Quota::per_second(1).named("free")])
        .key(Header::new("x-api-key"))
        .quota_for(move |_key: &Key, _head: RequestHead<'_>| pro.clone())
        .max_delay(Duration::from_millis(150))
        .clock(clock.clone())
        .layer(ok());
    assert_eq!(status(&svc, "k").await.0, StatusCode::OK);
    let mut delayed = Box::pin(svc.clone().oneshot(request("k")));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(delayed.as_mut().poll(&mut cx).is_pending(), "waits 100 ms");
    // A third would wait 200 ms, past the 150 allowed.
    assert_eq!(status(&svc, "k").await.0, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(100));
    match delayed.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(Ok(resp)) => assert_eq!(resp.status(), StatusCode::OK),
        _ => panic!("the delayed request goes on after 100 ms"),
    }
}

/// A plan with no quota gets the layer's own quota, never an unlimited pass.
#[tokio::test]
async fn an_empty_plan_gets_the_layers_quota() {
    let svc = RateLimitLayer::gcra(vec![Quota::per_hour(1).named("base")])
        .key(Header::new("x-api-key"))
        .quota_for(|_key: &Key, _head: RequestHead<'_>| Vec::new())
        .clock(ManualClock::new())
        .layer(ok());
    assert_eq!(
        status(&svc, "k").await,
        (StatusCode::OK, r#""base";q=1;w=3600"#.to_owned())
    );
    assert_eq!(status(&svc, "k").await.0, StatusCode::TOO_MANY_REQUESTS);
}

/// A handle's reset and block reach every plan the layer has made, those whose limiters were
/// dropped from its 256 to make room included: a reset frees the client on an evicted plan,
/// and a block holds there, named plans or not.
#[tokio::test]
async fn reset_and_block_reach_plans_evicted_from_the_layer() {
    for named in [true, false] {
        let clock = ManualClock::new();
        let layer = layer(named, &clock);
        let handle = layer.handle();
        let svc = layer.layer(ok());
        for n in 0..300 {
            let key = format!("plan-{n}-a");
            for _ in 0..2 {
                assert_eq!(status(&svc, &key).await.0, StatusCode::OK);
            }
        }
        // Plan 0's limiter was dropped to make room for the later ones: its client, limited,
        // is reset through the handle, as are clients of plans still held.
        for n in [0, 1, 150, 299] {
            let key = format!("plan-{n}-a");
            assert_eq!(status(&svc, &key).await.0, StatusCode::TOO_MANY_REQUESTS);
            handle.reset(key.as_str()).await.unwrap();
            for i in 0..2 {
                assert_eq!(
                    status(&svc, &key).await.0,
                    StatusCode::OK,
                    "request {i} of plan {n}'s client after its reset (named: {named})"
                );
            }
            assert_eq!(status(&svc, &key).await.0, StatusCode::TOO_MANY_REQUESTS);
        }
        // Evict plans 2 to 99 again, then reset every client: every one is fresh.
        for n in 300..400 {
            assert_eq!(status(&svc, &format!("plan-{n}-a")).await.0, StatusCode::OK);
        }
        for n in 0..400 {
            handle.reset(format!("plan-{n}-a").as_str()).await.unwrap();
        }
        for n in 0..400 {
            let key = format!("plan-{n}-a");
            assert_eq!(
                status(&svc, &key).await.0,
                StatusCode::OK,
                "plan {n} (named: {named})"
            );
        }
        // A block through the handle holds on an evicted plan, and a reset lifts it.
        handle
            .block("plan-5-b", Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            status(&svc, "plan-5-b").await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        handle.reset("plan-5-b").await.unwrap();
        assert_eq!(status(&svc, "plan-5-b").await.0, StatusCode::OK);
    }
}

/// The layer keeps the limiters of 256 plans in use and 4 096 dropped to make room, in one
/// map: with 4 352 plans made (one of them dropped and picked again between, which adds
/// none), a handle's reset reaches every client and says so; past them the layer forgets
/// plans, and a reset says that it may not reach every plan.
#[tokio::test]
async fn plans_up_to_4352_are_all_reached_and_the_next_is_reported() {
    let layer = RateLimitLayer::gcra(Quota::per_hour(1))
        .key(Header::new("x-api-key"))
        .quota_for(|key: &Key, _head: RequestHead<'_>| {
            let n = plan_number(key).unwrap_or(0);
            Quota::new(1, Duration::from_secs(3601 + n))
        })
        .store(MemoryStore::new())
        .clock(ManualClock::new());
    let handle = layer.handle();
    let svc = layer.layer(ok());
    let call = |n: u64| {
        let svc = svc.clone();
        async move {
            let request = Req::new()
                .header("x-api-key", &format!("plan-{n}"))
                .from("192.0.2.1:1")
                .build();
            svc.oneshot(request).await.unwrap().status()
        }
    };
    for n in 0..300 {
        assert_eq!(call(n).await, StatusCode::OK);
    }
    // Plan 0 was dropped to make room: picked again, it is the same plan, its client limited.
    assert_eq!(call(0).await, StatusCode::TOO_MANY_REQUESTS);
    for n in 300..4352 {
        assert_eq!(call(n).await, StatusCode::OK);
    }
    let sample: Vec<u64> = (0..4352).step_by(97).chain([4351]).collect();
    for &n in &sample {
        let reset = handle.reset(format!("plan-{n}").as_str()).await;
        assert!(reset.is_ok(), "a reset with 4352 plans made: {reset:?}");
    }
    for &n in &sample {
        assert_eq!(call(n).await, StatusCode::OK, "plan {n} after its reset");
        assert_eq!(call(n).await, StatusCode::TOO_MANY_REQUESTS, "plan {n}");
    }
    assert_eq!(call(4352).await, StatusCode::OK);
    match handle.reset("plan-4352").await {
        Ok(()) => panic!("a reset that may miss a forgotten plan answered Ok"),
        Err(error) => assert_eq!(error.kind(), tollgate::ErrorKind::Misconfigured, "{error}"),
    }
    assert_eq!(
        call(4352).await,
        StatusCode::OK,
        "plan 4352 after its reset"
    );
}

/// A client's plan dropped past the 4 352 plans the layer keeps, by a flood of plans made up
/// from another header, is made again with what its key used and owes: the client in debt on
/// its plan stays denied, with settled costs too.
#[tokio::test]
async fn a_plan_forgotten_past_4352_plans_comes_back_with_its_debt() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_hour(1))
        .key(Header::new("x-api-key"))
        .quota_for(plan_from_header(10))
        .settle()
        .store(MemoryStore::new())
        .clock(clock.clone());
    let svc = layer.layer(tower::service_fn(|req: Request<String>| async move {
        if let Some(usage) = req.extensions().get::<tollgate::Usage>() {
            usage.set(100);
        }
        Ok::<_, std::convert::Infallible>(Response::new(String::new()))
    }));
    let call = |key: &str, plan: u64| {
        let svc = svc.clone();
        let request = Req::new()
            .header("x-api-key", key)
            .header("x-plan", &plan.to_string())
            .from("192.0.2.1:1")
            .build();
        async move {
            let response = svc.oneshot(request).await.unwrap();
            let status = response.status();
            http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap();
            status
        }
    };
    // 100 of 10: 90 past the burst, owed for hours.
    assert_eq!(call("victim", 0).await, StatusCode::OK);
    assert_eq!(call("victim", 0).await, StatusCode::TOO_MANY_REQUESTS);
    for plan in 1..4500 {
        assert_eq!(call("flood", plan).await, StatusCode::OK, "plan {plan}");
    }
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        call("victim", 0).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the plan made again must keep the key's debt"
    );
}

/// A plan whose quotas were cut through the handle, dropped past the 4 352 plans the layer
/// keeps by a flood of plans made up from another header, comes back under its cut quotas:
/// its client does not get the plan's first, looser quotas back.
#[tokio::test]
async fn a_cut_plan_forgotten_past_4352_plans_comes_back_cut() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::gcra(Quota::per_hour(1))
        .key(Header::new("x-api-key"))
        .quota_for(plan_from_header(100))
        .store(MemoryStore::new())
        .clock(clock.clone());
    let handle = layer.handle();
    let svc = layer.layer(ok());
    let call = |key: &str, plan: u64| {
        let request = Req::new()
            .header("x-api-key", key)
            .header("x-plan", &plan.to_string())
            .from("192.0.2.1:1")
            .build();
        let svc = svc.clone();
        async move { svc.oneshot(request).await.unwrap().status() }
    };
    assert_eq!(call("victim", 0).await, StatusCode::OK);
    handle
        .set_plan_quotas(
            Quota::new(100, Duration::from_secs(3600)),
            Quota::per_hour(2),
        )
        .unwrap();
    assert_eq!(call("victim", 0).await, StatusCode::OK);
    assert_eq!(call("victim", 0).await, StatusCode::TOO_MANY_REQUESTS);
    for plan in 1..4500 {
        assert_eq!(call("flood", plan).await, StatusCode::OK, "plan {plan}");
    }
    assert_eq!(
        call("victim", 0).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the plan made again must keep its cut quotas"
    );
}
