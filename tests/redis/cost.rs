//! `RateLimitLayer::cost`: requests that take more than one request's worth of the quota, or
//! none (a peek), with tiers, `count_if`, per-key quotas, shaping, and the memory and Redis
//! stores. Time moves by a `ManualClock`, never by sleeping.

use crate::support::drive;
use crate::support::http as web;
#[cfg(feature = "redis")]
use crate::support::redis as server;
use crate::support::request;

use std::convert::Infallible;
use std::task::Poll;
use std::time::Duration;

use axum::extract::Request as AxumRequest;
use axum::response::IntoResponse;
use axum::routing::{get, post, Route};
use axum::Router;
use http::{Method, Request, Response, StatusCode};
use proptest::prelude::*;
use tollgate::algorithm::Algorithm;
use tollgate::clock::ManualClock;
use tollgate::key::{Global, Header, RequestHead};
use tollgate::store::{MemoryAlgorithm, MemoryStore};
use tollgate::{Key, Quota, RateLimitLayer, RateLimiter};
use tower::{Layer, Service, ServiceExt};

use drive::poll_once;
use request::Req;
use web::{client, serve_without_peers};

/// What each route costs: `/export` 10, `/status` 0 (a peek), `/huge` 13 (more than the quota
/// of 12 ever allows), anything else 1. From the route, never from the client.
fn route_cost(_key: &Key, head: RequestHead<'_>) -> u64 {
    match (head.method(), head.uri().path()) {
        (&Method::POST, "/export") => 10,
        (_, "/status") => 0,
        (_, "/huge") => 13,
        _ => 1,
    }
}

fn app<L>(layer: L) -> Router
where
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<AxumRequest> + Clone + Send + Sync + 'static,
    <L::Service as Service<AxumRequest>>::Response: IntoResponse + 'static,
    <L::Service as Service<AxumRequest>>::Error: Into<Infallible> + 'static,
    <L::Service as Service<AxumRequest>>::Future: Send + 'static,
{
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/export", post(|| async { "exported" }))
        .route("/status", get(|| async { "status" }))
        .route("/huge", get(|| async { "huge" }))
        .layer(layer)
}

/// Status, `RateLimit` and `Retry-After` (empty when absent) of one request.
async fn send(client: &reqwest::Client, method: Method, url: &str) -> (StatusCode, String, String) {
    let resp = client
        .request(method, url)
        .header("x-client", "alice")
        .send()
        .await
        .unwrap();
    let get = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (rate, retry) = (get("ratelimit"), get("retry-after"));
    (resp.status(), rate, retry)
}

/// 12 a minute (one every 5 s): the costs of `route_cost`, over HTTP, against `base`.
async fn costs_by_route(base: &str, clock: &ManualClock) {
    let client = client();
    let at = |path: &str| format!("{base}{path}");
    let ok = StatusCode::OK;
    let limited = StatusCode::TOO_MANY_REQUESTS;
    let rate = |r: u64, t: u64| format!(r#""api";r={r};t={t}"#);

    assert_eq!(
        send(&client, Method::GET, &at("/")).await,
        (ok, rate(11, 5), String::new())
    );
    assert_eq!(
        send(&client, Method::POST, &at("/export")).await,
        (ok, rate(1, 55), String::new())
    );
    // A peek passes, takes nothing, and shows the standing.
    assert_eq!(
        send(&client, Method::GET, &at("/status")).await,
        (ok, rate(1, 55), String::new())
    );
    assert_eq!(
        send(&client, Method::GET, &at("/")).await,
        (ok, rate(0, 60), String::new())
    );
    // An export must wait for 10 requests' worth: 50 s. One request 5 s.
    assert_eq!(
        send(&client, Method::POST, &at("/export")).await,
        (limited, rate(0, 60), "50".to_owned())
    );
    assert_eq!(
        send(&client, Method::GET, &at("/")).await,
        (limited, rate(0, 60), "5".to_owned())
    );
    // A peek still passes with nothing left.
    assert_eq!(
        send(&client, Method::GET, &at("/status")).await,
        (ok, rate(0, 60), String::new())
    );
    // More than the quota ever allows: refused, with no Retry-After, however long one waits.
    let (status, _, retry) = send(&client, Method::GET, &at("/huge")).await;
    assert_eq!((status, retry), (limited, String::new()));
    clock.advance(Duration::from_secs(3600));
    let resp = client
        .get(at("/huge"))
        .header("x-client", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), limited);
    assert!(resp.headers().get("retry-after").is_none());
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("costs more than the rate limit ever allows"),
        "{body}"
    );
    // Nothing was taken by the refusals: the quota is whole again after the hour.
    assert_eq!(
        send(&client, Method::POST, &at("/export")).await,
        (ok, rate(2, 50), String::new())
    );
}

fn api_layer() -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(12).named("api"))
        .key(Header::new("x-client"))
        .cost(route_cost)
}

async fn each_route_costs_what_the_server_says_over_http() {
    let clock = ManualClock::new();
    let base = serve_without_peers(app(api_layer().clock(clock.clone()))).await;
    costs_by_route(&base, &clock).await;
}

#[cfg(feature = "redis")]
async fn each_route_costs_what_the_server_says_through_redis() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let store = server::closed_on_caller_clock(&redis.url()).await;
    let base = serve_without_peers(app(api_layer().store(store).clock(clock.clone()))).await;
    costs_by_route(&base, &clock).await;
}

fn ok_service(
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    tower::service_fn(|req: Request<String>| async move {
        // The handler says whether the request counts: `x-outcome: fail` does.
        let fail = req.headers().get("x-outcome").is_some_and(|v| v == "fail");
        let mut response = Response::new(String::new());
        if fail {
            *response.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, Infallible>(response)
    })
}

fn request(path: &str, outcome: &str) -> Request<String> {
    Req::new().path(path).header("x-outcome", outcome).build()
}

async fn status_and_rate<S>(svc: &S, req: Request<String>) -> (StatusCode, String)
where
    S: Service<Request<String>, Response = Response<tollgate::layer::ResponseBody<String>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let resp = svc.clone().oneshot(req).await.unwrap();
    let rate = resp
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (resp.status(), rate)
}

/// With `count_if`, a request that does not count gives back its whole cost, no more.
async fn count_if_gives_back_the_cost_it_took() {
    let svc = RateLimitLayer::gcra(Quota::per_minute(10).named("login"))
        .key(Global)
        .cost(|_key: &Key, _head: RequestHead<'_>| 5)
        .count_if(|response| response.status == StatusCode::UNAUTHORIZED)
        .clock(ManualClock::new())
        .layer(ok_service());
    for _ in 0..3 {
        assert_eq!(
            status_and_rate(&svc, request("/", "ok")).await,
            (StatusCode::OK, r#""login";r=10;t=0"#.to_owned())
        );
    }
    assert_eq!(
        status_and_rate(&svc, request("/", "fail")).await,
        (StatusCode::UNAUTHORIZED, r#""login";r=5;t=30"#.to_owned())
    );
    assert_eq!(
        status_and_rate(&svc, request("/", "fail")).await,
        (StatusCode::UNAUTHORIZED, r#""login";r=0;t=60"#.to_owned())
    );
    assert_eq!(
        status_and_rate(&svc, request("/", "ok")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Every tier is charged the cost; the most restrictive one refuses.
async fn every_tier_is_charged_the_cost() {
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra([
        Quota::per_second(10).named("s"),
        Quota::per_minute(12).named("m"),
    ])
    .key(Global)
    .cost(|_key: &Key, _head: RequestHead<'_>| 5)
    .clock(clock.clone())
    .layer(ok_service());
    let (status, rate) = status_and_rate(&svc, request("/", "ok")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        rate.contains(r#""s";r=5;"#) && rate.contains(r#""m";r=7;"#),
        "{rate}"
    );
    let (status, rate) = status_and_rate(&svc, request("/", "ok")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        rate.contains(r#""s";r=0;"#) && rate.contains(r#""m";r=2;"#),
        "{rate}"
    );
    // A second later the per-second tier has room; the per-minute one has 2 of the 5 needed.
    clock.advance(Duration::from_secs(1));
    let resp = svc.clone().oneshot(request("/", "ok")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // The per-minute tier's wait: 3 more requests' worth at one per 5 s, less the second gone.
    assert_eq!(resp.headers()["retry-after"], "14");
}

/// A per-key plan is charged the same cost.
async fn per_key_plans_are_charged_the_cost() {
    let pro = Quota::per_minute(20).named("pro");
    let svc = RateLimitLayer::gcra(Quota::per_minute(5).named("free"))
        .key(Global)
        .quota_for(move |_key: &Key, _head: RequestHead<'_>| pro.clone())
        .cost(|_key: &Key, _head: RequestHead<'_>| 10)
        .clock(ManualClock::new())
        .layer(ok_service());
    for remaining in [10, 0] {
        assert_eq!(
            status_and_rate(&svc, request("/", "ok")).await,
            (
                StatusCode::OK,
                format!(r#""pro";r={remaining};t={}"#, 60 - 3 * remaining)
            )
        );
    }
    assert_eq!(
        status_and_rate(&svc, request("/", "ok")).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Shaping: a request waits as long as its cost takes to come back; a peek never waits.
async fn shaping_delays_by_the_cost_and_peeks_never_wait() {
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra(Quota::per_second(10).with_burst(1).named("shaped"))
        .key(Global)
        .max_delay(Duration::from_secs(1))
        .cost(
            |_key: &Key, head: RequestHead<'_>| match head.uri().path() {
                "/peek" => 0,
                _ => 3,
            },
        )
        .clock(clock.clone())
        .layer(ok_service());
    // Cost 3 against a burst of 1: 300 ms of capacity, 100 ms of it at once, 200 ms waited.
    let mut first = Box::pin(svc.clone().oneshot(request("/", "ok")));
    assert!(poll_once(&mut first).is_pending());
    let mut peek = Box::pin(svc.clone().oneshot(request("/peek", "ok")));
    let Poll::Ready(Ok(resp)) = poll_once(&mut peek) else {
        panic!("a peek is answered at once, even behind a queue");
    };
    assert_eq!(resp.status(), StatusCode::OK);
    clock.advance(Duration::from_millis(199));
    assert!(poll_once(&mut first).is_pending());
    clock.advance(Duration::from_millis(1));
    assert!(matches!(poll_once(&mut first), Poll::Ready(Ok(_))));
}

/// One random step: advance the clock, then send a request of some cost.
#[derive(Debug, Clone)]
struct Step {
    advance_ms: u64,
    cost: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (prop_oneof![Just(0u64), 0u64..3_000], 0u64..=7)
            .prop_map(|(advance_ms, cost)| Step { advance_ms, cost }),
        1..60,
    )
}

/// The layer decides every request exactly as its limiter's `check_n` with the request's cost
/// (a twin on its own store), and a request of cost 0 always passes and changes nothing.
async fn agrees_with_check_n<A>(
    layer: RateLimitLayer,
    twin: RateLimiter<A>,
    steps: &[Step],
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A: MemoryAlgorithm,
{
    let clock = ManualClock::new();
    let twin = twin.with_clock(clock.clone());
    let svc = layer
        .key(Global)
        .cost(|_key: &Key, head: RequestHead<'_>| {
            head.headers()["x-cost"].to_str().unwrap().parse().unwrap()
        })
        .clock(clock.clone())
        .layer(ok_service());
    for step in steps {
        clock.advance(Duration::from_millis(step.advance_ms));
        let expected = twin.check_n("twin", step.cost).await.unwrap();
        let mut req = request("/", "ok");
        req.headers_mut()
            .insert("x-cost", step.cost.to_string().parse().unwrap());
        let resp = svc.clone().oneshot(req).await.unwrap();
        if step.cost == 0 {
            prop_assert_eq!(resp.status(), StatusCode::OK, "a peek passes");
        }
        let status = if expected.allowed {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        prop_assert_eq!(resp.status(), status, "{:?}", step);
        prop_assert_eq!(
            resp.headers().get("retry-after").is_some(),
            expected.retry_after.is_some(),
            "{:?}",
            step
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    fn the_layer_charges_the_cost_for_every_algorithm(steps in steps()) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let quota = Quota::new(5, Duration::from_secs(5));
        runtime.block_on(async {
            agrees_with_check_n(RateLimitLayer::gcra(quota.clone()), RateLimiter::gcra(quota.clone()), &steps).await?;
            agrees_with_check_n(RateLimitLayer::token_bucket(quota.clone()), RateLimiter::token_bucket(quota.clone()), &steps).await?;
            agrees_with_check_n(RateLimitLayer::fixed_window(quota.clone()), RateLimiter::fixed_window(quota.clone()), &steps).await?;
            agrees_with_check_n(RateLimitLayer::sliding_window(quota.clone()), RateLimiter::sliding_window(quota.clone()), &steps).await?;
            agrees_with_check_n(RateLimitLayer::sliding_log(quota.clone()), RateLimiter::sliding_log(quota.clone()), &steps).await?;
            agrees_with_check_n(RateLimitLayer::hybrid(quota.clone()), RateLimiter::hybrid(quota.clone()), &steps).await?;
            let tiers = [quota.clone(), Quota::per_minute(8)];
            agrees_with_check_n(RateLimitLayer::gcra(tiers.clone()), RateLimiter::gcra(tiers), &steps).await
        })?;
    }
}

/// The documented hazard: a cost read from the client is the client's choice, and 0 makes
/// requests free. Clamped to at least 1, as the docs say, it is not.
async fn a_cost_from_a_client_header_must_be_clamped() {
    let client_cost = |head: RequestHead<'_>| -> u64 {
        head.headers()
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    let with_cost = |cost: &str| {
        let mut req = request("/", "ok");
        req.headers_mut().insert("x-cost", cost.parse().unwrap());
        req
    };
    let trusting = RateLimitLayer::gcra(Quota::per_minute(1))
        .key(Global)
        .cost(move |_key: &Key, head: RequestHead<'_>| client_cost(head))
        .clock(ManualClock::new())
        .layer(ok_service());
    for _ in 0..5 {
        let resp = trusting.clone().oneshot(with_cost("0")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "cost 0 is free");
    }
    let clamped = RateLimitLayer::gcra(Quota::per_minute(1))
        .key(Global)
        .cost(move |_key: &Key, head: RequestHead<'_>| client_cost(head).clamp(1, 1))
        .clock(ManualClock::new())
        .layer(ok_service());
    let first = clamped.clone().oneshot(with_cost("0")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = clamped.clone().oneshot(with_cost("0")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// The memory store's layer also answers a cost above the quota the gRPC way: no retry.
async fn a_grpc_request_above_the_quota_is_told_not_to_retry() {
    let svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .key(Global)
        .cost(|_key: &Key, _head: RequestHead<'_>| 3)
        .store(MemoryStore::new())
        .clock(ManualClock::new())
        .layer(ok_service());
    let mut req = request("/", "ok");
    *req.method_mut() = http::Method::POST;
    *req.version_mut() = http::Version::HTTP_2;
    req.headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    let resp = svc.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["grpc-status"], "8");
    assert_eq!(resp.headers()["grpc-retry-pushback-ms"], "-1");
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::plain_async(
            "each_route_costs_what_the_server_says_over_http",
            each_route_costs_what_the_server_says_over_http,
        ),
        server::needs_redis_async(
            "each_route_costs_what_the_server_says_through_redis",
            each_route_costs_what_the_server_says_through_redis,
        ),
        server::plain_async(
            "count_if_gives_back_the_cost_it_took",
            count_if_gives_back_the_cost_it_took,
        ),
        server::plain_async(
            "every_tier_is_charged_the_cost",
            every_tier_is_charged_the_cost,
        ),
        server::plain_async(
            "per_key_plans_are_charged_the_cost",
            per_key_plans_are_charged_the_cost,
        ),
        server::plain_async(
            "shaping_delays_by_the_cost_and_peeks_never_wait",
            shaping_delays_by_the_cost_and_peeks_never_wait,
        ),
        server::plain(
            "the_layer_charges_the_cost_for_every_algorithm",
            the_layer_charges_the_cost_for_every_algorithm,
        ),
        server::plain_async(
            "a_cost_from_a_client_header_must_be_clamped",
            a_cost_from_a_client_header_must_be_clamped,
        ),
        server::plain_async(
            "a_grpc_request_above_the_quota_is_told_not_to_retry",
            a_grpc_request_above_the_quota_is_told_not_to_retry,
        ),
    ]
}
