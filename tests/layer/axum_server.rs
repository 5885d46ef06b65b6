//! The middleware in a real axum server on a local port, called by a real HTTP client. Time moves
//! by a `ManualClock`, never by sleeping.

use crate::support::http as web;

use std::time::Duration;

use axum::routing::get;
use axum::{Extension, Router};
use reqwest::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::{Decision, Quota, RateLimitLayer};

use web::{client, header, serve, serve_without_peers};

const POLICY: &str = r#""2/min";q=2;w=60"#;

/// Two requests pass, the third waits 30 s (T = 60 s / 2), and passes once the clock moved.
async fn check_two_per_minute(client: &reqwest::Client, url: &str, clock: &ManualClock) {
    for rate in [r#""2/min";r=1;t=30"#, r#""2/min";r=0;t=60"#] {
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "ratelimit-policy"), POLICY);
        assert_eq!(header(&resp, "ratelimit"), rate);
        assert!(resp.headers().get("retry-after").is_none());
        assert_eq!(resp.text().await.unwrap(), "hello");
    }

    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "30");
    assert_eq!(header(&resp, "content-type"), "text/plain; charset=utf-8");
    assert_eq!(header(&resp, "ratelimit-policy"), POLICY);
    assert_eq!(header(&resp, "ratelimit"), r#""2/min";r=0;t=60"#);
    assert!(!resp.text().await.unwrap().trim().is_empty());

    clock.advance(Duration::from_secs(30));
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "ratelimit"), r#""2/min";r=0;t=60"#);
    assert_eq!(resp.text().await.unwrap(), "hello");
}

#[tokio::test]
async fn router_layer_limits_each_client_over_http() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone()));
    let base = serve(app).await;
    let client = client();

    check_two_per_minute(&client, &format!("{base}/"), &clock).await;

    // `Router::layer` also wraps the fallback: a 404 counts and is denied like the rest.
    let resp = client.get(format!("{base}/missing")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "30");
}

#[tokio::test]
async fn route_layer_limits_only_matched_routes() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route_layer(RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone()));
    let base = serve(app).await;
    let client = client();

    // Unmatched paths are not limited and use none of the quota.
    for _ in 0..3 {
        let resp = client.get(format!("{base}/missing")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert!(resp.headers().get("ratelimit").is_none());
    }
    check_two_per_minute(&client, &format!("{base}/"), &clock).await;
}

#[tokio::test]
async fn serving_without_connect_info_is_a_500_that_says_how_to_fix_it() {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::gcra(Quota::per_minute(2)).clock(ManualClock::new()));
    let base = serve_without_peers(app).await;
    let client = client();

    for _ in 0..3 {
        let resp = client.get(format!("{base}/")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = resp.text().await.unwrap();
        assert!(
            body.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "body: {body}"
        );
    }
}

#[tokio::test]
async fn handlers_extract_the_decision() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route(
            "/",
            get(|Extension(d): Extension<Decision>| async move {
                format!(
                    "allowed={} limit={} remaining={} reset={:?}",
                    d.allowed, d.limit, d.remaining, d.reset_after
                )
            }),
        )
        .layer(RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone()));
    let base = serve(app).await;
    let client = client();
    let url = format!("{base}/");

    let text = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(text, "allowed=true limit=2 remaining=1 reset=30s");
    clock.advance(Duration::from_millis(12_500));
    let text = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!(text, "allowed=true limit=2 remaining=0 reset=47.5s");
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "18");
}

#[tokio::test]
async fn a_leaky_bucket_holds_a_request_over_http_until_its_turn() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let clock = ManualClock::new();
    let served = Arc::new(AtomicUsize::new(0));
    // A queue of 3 drained at 10 per second: one request every 100 ms.
    let limiter = tollgate::RateLimiter::leaky_bucket(Quota::per_second(10).with_burst(3))
        .with_clock(clock.clone());
    let layer = RateLimitLayer::from_limiter(limiter.clone());
    let app = Router::new()
        .route(
            "/",
            get({
                let served = served.clone();
                move || async move {
                    served.fetch_add(1, Ordering::SeqCst);
                    "hello"
                }
            }),
        )
        .layer(layer);
    let base = serve(app).await;
    let client = client();
    let peer = tollgate::Key::from(std::net::IpAddr::from([127, 0, 0, 1]));

    let resp = client.get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let held = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move { client.get(&base).send().await.unwrap() }
    });
    // Wait until the layer has decided the second request (its place in the queue is taken).
    while limiter.check_n_now(peer.clone(), 0).remaining != 1 {
        tokio::task::yield_now().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "held in the layer, not served"
    );
    assert!(!held.is_finished());

    clock.advance(Duration::from_millis(100));
    let resp = held.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        header(&resp, "ratelimit"),
        r#""10/s;burst=3";r=1;t=1"#,
        "the decision made when it was queued"
    );
    assert_eq!(served.load(Ordering::SeqCst), 2);
}
