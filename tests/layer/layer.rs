//! The middleware on plain tower services: `oneshot` on `service_fn` handlers, time moved by a
//! `ManualClock`, exact header values.

use crate::support::drive;
use crate::support::request;
use crate::support::services;
use crate::support::stores;

use std::convert::Infallible;
use std::future::Ready;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tollgate::clock::ManualClock;
use tollgate::key::Global;
use tollgate::{Decision, Quota, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_layer::Layer;

use drive::poll_once;
use request::Req;
use services::Strict;
use stores::SlowStore;

type Body = Full<Bytes>;

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

/// A request from `peer`, recorded as a [`PeerAddr`].
fn from(peer: &str) -> Request<Body> {
    Req::new().from(peer).build()
}

/// A gRPC request from `peer` (over HTTP/2, as gRPC always is).
fn grpc_from(peer: &str, content_type: &str) -> Request<Body> {
    Req::new().from(peer).grpc(content_type).build()
}

/// A handler that counts its calls and answers with the `Decision` it found in the request:
/// `allowed limit remaining reset_after`, or `no decision`.
fn echo(
    calls: &Arc<AtomicUsize>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
       + Clone
       + Send
       + Sync
       + 'static {
    let calls = calls.clone();
    tower::service_fn(move |req: Request<Body>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let text = match req.extensions().get::<Decision>() {
            Some(d) => format!(
                "{} {} {} {:?}",
                d.allowed, d.limit, d.remaining, d.reset_after
            ),
            None => "no decision".to_owned(),
        };
        async move { Ok::<_, Infallible>(Response::new(Body::from(text))) }
    })
}

#[track_caller]
fn header<B>(resp: &Response<B>, name: &str) -> String {
    match resp.headers().get(name) {
        Some(value) => value.to_str().unwrap().to_owned(),
        None => panic!("no {name} header in {:?}", resp.headers()),
    }
}

#[track_caller]
fn assert_rate<B>(resp: &Response<B>, policy: &str, rate: &str) {
    assert_eq!(header(resp, "ratelimit-policy"), policy);
    assert_eq!(header(resp, "ratelimit"), rate);
}

async fn body_text<B>(resp: Response<B>) -> String
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Sends `req` through `svc`, which is kept (and so are the limiter and the handler).
async fn send<S, B>(svc: &mut S, req: Request<Body>) -> Response<B>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    svc.oneshot(req).await.unwrap()
}

#[tokio::test]
async fn headers_follow_a_per_minute_quota_exactly() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(3))
        .clock(clock.clone())
        .layer(echo(&calls));
    let policy = r#""3/min";q=3;w=60"#;

    // T = 20 s, burst 3: each request adds 20 s to the reset.
    for (remaining, reset) in [(2, 20), (1, 40), (0, 60)] {
        let resp = send(&mut svc, from("192.0.2.1:1000")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_rate(
            &resp,
            policy,
            &format!(r#""3/min";r={remaining};t={reset}"#),
        );
        assert!(resp.headers().get(RETRY_AFTER).is_none());
        let expected = format!("true 3 {remaining} {:?}", Duration::from_secs(reset));
        assert_eq!(body_text(resp).await, expected);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "20");
    assert_rate(&resp, policy, r#""3/min";r=0;t=60"#);

    // 19.5 s to wait and 59.5 s to reset: both round up.
    clock.advance(Duration::from_millis(500));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "20");
    assert_rate(&resp, policy, r#""3/min";r=0;t=60"#);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "denied requests reach the handler"
    );

    // At 20 s one request's worth is back.
    clock.advance(Duration::from_millis(19_500));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, policy, r#""3/min";r=0;t=60"#);

    // At 61.5 s the TAT is 80 s; this request moves it to 100 s: 38.5 s to reset, 1 left.
    clock.advance(Duration::from_millis(41_500));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, policy, r#""3/min";r=1;t=39"#);
    assert_eq!(
        body_text(resp).await,
        format!("true 3 1 {:?}", Duration::from_millis(38_500))
    );

    // Long after: fresh again.
    clock.advance(Duration::from_secs(3600));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_rate(&resp, policy, r#""3/min";r=2;t=20"#);
    assert_eq!(calls.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn named_quota_with_a_burst_below_the_limit() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let quota = Quota::per_second(10).with_burst(5).named("api");
    let mut svc = ServiceBuilder::new()
        .layer(RateLimitLayer::gcra(quota).clock(clock.clone()))
        .service(echo(&calls));
    let policy = r#""api";q=10;w=1"#;

    // T = 100 ms, burst 5.
    for remaining in (0..5).rev() {
        let resp = send(&mut svc, from("192.0.2.1:1000")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_rate(&resp, policy, &format!(r#""api";r={remaining};t=1"#));
        let reset = Duration::from_millis(100 * (5 - remaining));
        assert_eq!(
            body_text(resp).await,
            format!("true 5 {remaining} {reset:?}")
        );
    }

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_rate(&resp, policy, r#""api";r=0;t=1"#);
    assert_eq!(calls.load(Ordering::SeqCst), 5);

    clock.advance(Duration::from_millis(100));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, policy, r#""api";r=0;t=1"#);

    clock.advance(Duration::from_secs(1));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_rate(&resp, policy, r#""api";r=4;t=1"#);
    assert_eq!(calls.load(Ordering::SeqCst), 7);
}

#[tokio::test]
async fn denial_is_a_plain_429_that_never_says_retry_after_0() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
        .clock(clock.clone())
        .layer(echo(&calls));
    let policy = r#""10/s;burst=1";q=10;w=1"#;

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, policy, r#""10/s;burst=1";r=0;t=1"#);

    // 100 ms to wait.
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(header(&resp, "content-type"), "text/plain; charset=utf-8");
    assert_rate(&resp, policy, r#""10/s;burst=1";r=0;t=1"#);
    assert!(resp.headers().get("grpc-status").is_none());
    assert!(!body_text(resp).await.trim().is_empty());

    // 1 ms to wait: still 1 s, never 0.
    clock.advance(Duration::from_millis(99));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a denied request reached the handler"
    );

    clock.advance(Duration::from_millis(1));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn each_peer_ip_has_its_own_bucket() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(clock)
        .layer(echo(&calls));
    let mut status = async |peer: &str| send(&mut svc, from(peer)).await.status();

    assert_eq!(status("192.0.2.1:1000").await, StatusCode::OK);
    assert_eq!(
        status("192.0.2.1:1000").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another port of the same IP is the same client.
    assert_eq!(
        status("192.0.2.1:2000").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status("192.0.2.2:1000").await, StatusCode::OK);
    assert_eq!(
        status("192.0.2.2:1000").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // IPv6 peers are grouped by /64: another /64 is another client, another address in the
    // same /64 is the same one.
    assert_eq!(status("[2001:db8:0:1::1]:1000").await, StatusCode::OK);
    assert_eq!(status("[2001:db8:0:2::1]:1000").await, StatusCode::OK);
    assert_eq!(
        status("[2001:db8:0:1::ffff]:1000").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn ipv6_peers_can_be_keyed_per_address() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(tollgate::key::PeerIp.ipv6_prefix(128))
        .layer(echo(&calls));
    let mut status = async |peer: &str| send(&mut svc, from(peer)).await.status();
    assert_eq!(status("[2001:db8::1]:1000").await, StatusCode::OK);
    assert_eq!(status("[2001:db8::2]:1000").await, StatusCode::OK);
    assert_eq!(
        status("[2001:db8::1]:1000").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn ipv4_mapped_ipv6_peers_share_the_ipv4_bucket() {
    for (first, second) in [
        ("[::ffff:1.2.3.4]:5", "1.2.3.4:6"),
        ("1.2.3.4:6", "[::ffff:1.2.3.4]:5"),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
            .clock(ManualClock::new())
            .layer(echo(&calls));
        assert_eq!(send(&mut svc, from(first)).await.status(), StatusCode::OK);
        let resp = send(&mut svc, from(second)).await;
        assert_eq!(
            resp.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{second} after {first}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn axum_connect_info_is_the_peer() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .layer(echo(&calls));
    let req = |peer: &str| {
        let mut req = Request::new(Body::default());
        req.extensions_mut().insert(ConnectInfo(addr(peer)));
        req
    };

    let resp = send(&mut svc, req("198.51.100.7:40000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, r#""1/min";q=1;w=60"#, r#""1/min";r=0;t=60"#);
    let resp = send(&mut svc, req("198.51.100.7:40001")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "60");
    let resp = send(&mut svc, req("198.51.100.8:40000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    // The same client seen through `PeerAddr` is the same bucket.
    let resp = send(&mut svc, from("198.51.100.8:1")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_request_without_a_peer_address_is_a_500_that_says_how_to_fix_it() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(100))
        .clock(ManualClock::new())
        .layer(echo(&calls));

    for _ in 0..2 {
        let resp = send(&mut svc, Request::new(Body::default())).await;
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(header(&resp, "content-type"), "text/plain; charset=utf-8");
        let body = body_text(resp).await;
        assert!(
            body.contains("into_make_service_with_connect_info"),
            "body: {body}"
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "an unkeyed request reached the handler"
    );
}

#[tokio::test]
async fn grpc_denial_is_resource_exhausted_in_trailers_only_form() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
        .clock(clock.clone())
        .layer(echo(&calls));

    let resp = send(&mut svc, grpc_from("192.0.2.1:1000", "application/grpc")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("grpc-status").is_none());
    assert_rate(
        &resp,
        r#""10/s;burst=1";q=10;w=1"#,
        r#""10/s;burst=1";r=0;t=1"#,
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // (elapsed since the first request, content type, pushback in ms rounded up)
    for (advance_us, content_type, pushback) in [
        (0, "application/grpc", "100"),
        (40_000, "application/grpc+proto", "60"),
        (59_500, "application/grpc", "1"),
    ] {
        clock.advance(Duration::from_micros(advance_us));
        let resp = send(&mut svc, grpc_from("192.0.2.1:1000", content_type)).await;
        assert_eq!(
            resp.status(),
            StatusCode::OK,
            "gRPC clients read 429 as UNAVAILABLE"
        );
        assert_eq!(header(&resp, "grpc-status"), "8");
        assert!(!header(&resp, "grpc-message").is_empty());
        assert_eq!(header(&resp, "grpc-retry-pushback-ms"), pushback);
        // The answer speaks the request's own gRPC content type.
        assert_eq!(header(&resp, "content-type"), content_type);
        assert!(resp.headers().get(RETRY_AFTER).is_none());
        assert_eq!(body_text(resp).await, "");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a denied call reached the handler"
    );

    clock.advance(Duration::from_micros(500));
    let resp = send(&mut svc, grpc_from("192.0.2.1:1000", "application/grpc")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("grpc-status").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_global_key_is_one_bucket_for_everyone() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .key(Global)
        .clock(clock.clone())
        .layer(echo(&calls));

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=1;t=30"#);
    let resp = send(&mut svc, from("[2001:db8::1]:1000")).await;
    assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=0;t=60"#);
    let resp = send(&mut svc, from("198.51.100.9:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "30");
    // The global key needs no peer address.
    let resp = send(&mut svc, Request::new(Body::default())).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    clock.advance(Duration::from_secs(30));
    let resp = send(&mut svc, Request::new(Body::default())).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[derive(Debug, PartialEq, Eq)]
struct MyError(u32);

#[tokio::test]
async fn the_inner_error_passes_through_unchanged() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let failing = tower::service_fn(move |_req: Request<Body>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err::<Response<Body>, _>(MyError(7)) }
    });
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .layer(failing);

    let result: Result<_, MyError> = (&mut svc).oneshot(from("192.0.2.1:1000")).await;
    assert_eq!(result.unwrap_err(), MyError(7));
    // The failed call still used the quota; the denial is a response, not an error.
    let resp = (&mut svc).oneshot(from("192.0.2.1:1000")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A service that is never ready: its error must come out of the middleware's `poll_ready`.
#[derive(Clone)]
struct Broken;

impl Service<Request<Body>> for Broken {
    type Response = Response<Body>;
    type Error = MyError;
    type Future = Ready<Result<Response<Body>, MyError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), MyError>> {
        Poll::Ready(Err(MyError(3)))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        panic!("called although not ready");
    }
}

#[tokio::test]
async fn the_inner_readiness_error_passes_through_unchanged() {
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .layer(Broken);
    let result = svc.oneshot(from("192.0.2.1:1000")).await;
    assert_eq!(result.unwrap_err(), MyError(3));
}

#[tokio::test]
async fn clones_and_sibling_services_share_the_limit() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::gcra(Quota::per_minute(3)).clock(ManualClock::new());
    let svc = layer.layer(echo(&calls));
    let mut a = svc.clone();
    let mut b = svc.clone();
    let mut sibling = layer.clone().layer(echo(&calls));

    let resp = send(&mut a, from("192.0.2.1:1000")).await;
    assert_rate(&resp, r#""3/min";q=3;w=60"#, r#""3/min";r=2;t=20"#);
    let resp = send(&mut b, from("192.0.2.1:1000")).await;
    assert_rate(&resp, r#""3/min";q=3;w=60"#, r#""3/min";r=1;t=40"#);
    let resp = send(&mut sibling, from("192.0.2.1:1000")).await;
    assert_rate(&resp, r#""3/min";q=3;w=60"#, r#""3/min";r=0;t=60"#);
    for svc in [&mut a, &mut b] {
        let resp = send(svc, from("192.0.2.1:1000")).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    let resp = svc.oneshot(from("192.0.2.1:1000")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_asynchronous_store_calls_the_readied_inner_service() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let strict = Strict::new(&calls);
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .store(SlowStore::default())
        .clock(clock.clone())
        .layer(strict);

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=1;t=30"#);
    assert_eq!(body_text(resp).await, "Some(1)");
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=0;t=60"#);
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "30");
    assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=0;t=60"#);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    clock.advance(Duration::from_secs(30));
    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_memory_store_calls_the_readied_inner_service() {
    let calls = Arc::new(AtomicUsize::new(0));
    let strict = Strict::new(&calls);
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .clock(ManualClock::new())
        .layer(strict);
    for expected in ["Some(1)", "Some(0)"] {
        let resp = send(&mut svc, from("192.0.2.1:1000")).await;
        assert_eq!(body_text(resp).await, expected);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_failing_store_never_lets_requests_through() {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = SlowStore::failing();
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .store(store)
        .clock(ManualClock::new())
        .layer(echo(&calls));

    let resp = send(&mut svc, from("192.0.2.1:1000")).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!body_text(resp).await.trim().is_empty());
    let resp = send(&mut svc, grpc_from("192.0.2.1:1000", "application/grpc")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "grpc-status"), "14");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn count_if_gives_capacity_back_through_an_asynchronous_store() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    // Only non-2xx responses count; the echo handler always answers 200.
    let mut svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .store(SlowStore::default())
        .clock(clock.clone())
        .count_if(|response| !response.status.is_success())
        .layer(echo(&calls));
    for _ in 0..5 {
        let resp = send(&mut svc, from("192.0.2.1:1000")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        // The headers show the standing after the refund: the quota is untouched.
        assert_rate(&resp, r#""2/min";q=2;w=60"#, r#""2/min";r=2;t=0"#);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_leaky_bucket_holds_each_request_until_its_turn() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    // A queue of 3 drained at 10 per second: one request every 100 ms.
    let svc = RateLimitLayer::leaky_bucket(Quota::per_second(10).with_burst(3))
        .key(Global)
        .clock(clock.clone())
        .layer(echo(&calls));

    let mut first = Box::pin(svc.clone().oneshot(from("192.0.2.1:1")));
    let mut second = Box::pin(svc.clone().oneshot(from("192.0.2.2:1")));
    let mut third = Box::pin(svc.clone().oneshot(from("192.0.2.3:1")));
    let Poll::Ready(Ok(resp)) = poll_once(&mut first) else {
        panic!("the first request passes at once")
    };
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(poll_once(&mut second).is_pending());
    assert!(poll_once(&mut third).is_pending());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "queued requests wait in the layer"
    );

    // The queue is full: a fourth request is refused, to retry when a place frees up.
    let resp = svc.clone().oneshot(from("192.0.2.4:1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "retry-after"), "1");

    clock.advance(Duration::from_millis(99));
    assert!(poll_once(&mut second).is_pending());
    clock.advance(Duration::from_millis(1));
    let Poll::Ready(Ok(resp)) = poll_once(&mut second) else {
        panic!("the second request passes after 100 ms")
    };
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(poll_once(&mut third).is_pending());
    clock.advance(Duration::from_millis(100));
    assert!(matches!(poll_once(&mut third), Poll::Ready(Ok(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_request_whose_client_leaves_while_queued_never_reaches_the_service() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::leaky_bucket(Quota::per_second(10).with_burst(3))
        .key(Global)
        .clock(clock.clone())
        .layer(echo(&calls));
    let resp = svc.clone().oneshot(from("192.0.2.1:1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut queued = Box::pin(svc.clone().oneshot(from("192.0.2.2:1")));
    assert!(poll_once(&mut queued).is_pending());
    drop(queued);
    clock.advance(Duration::from_secs(1));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Its place was used: the queue drained on schedule and is fresh again.
    let resp = svc.clone().oneshot(from("192.0.2.3:1")).await.unwrap();
    assert_rate(
        &resp,
        r#""10/s;burst=3";q=10;w=1"#,
        r#""10/s;burst=3";r=2;t=1"#,
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn max_delay_shapes_through_an_asynchronous_store() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
        .max_delay(Duration::from_millis(200))
        .key(Global)
        .store(SlowStore::default())
        .clock(clock.clone())
        .layer(echo(&calls));
    let resp = svc.clone().oneshot(from("192.0.2.1:1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut delayed = Box::pin(svc.clone().oneshot(from("192.0.2.1:1")));
    let mut more = Box::pin(svc.clone().oneshot(from("192.0.2.1:1")));
    // The store answers on the second poll, then the requests wait 100 and 200 ms.
    for _ in 0..3 {
        assert!(poll_once(&mut delayed).is_pending());
        assert!(poll_once(&mut more).is_pending());
    }
    let resp = svc.clone().oneshot(from("192.0.2.1:1")).await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "past max_delay"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_millis(100));
    assert!(matches!(poll_once(&mut delayed), Poll::Ready(Ok(_))));
    assert!(poll_once(&mut more).is_pending());
    clock.advance(Duration::from_millis(100));
    assert!(matches!(poll_once(&mut more), Poll::Ready(Ok(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_dry_run_never_holds_requests_back() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::leaky_bucket(Quota::per_second(1).with_burst(2))
        .key(Global)
        .clock(ManualClock::new())
        .dry_run(true)
        .layer(echo(&calls));
    for _ in 0..4 {
        let mut fut = Box::pin(svc.clone().oneshot(from("192.0.2.1:1")));
        assert!(matches!(poll_once(&mut fut), Poll::Ready(Ok(_))));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

/// A request that a remote store's answer delays gives back the inner service's readiness
/// while it waits: behind a concurrency limit of 1, another client is served meanwhile.
#[tokio::test]
async fn a_request_delayed_after_an_asynchronous_check_holds_no_permit() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .layer(
            RateLimitLayer::gcra(Quota::per_second(10).with_burst(1))
                .max_delay(Duration::from_millis(200))
                .store(SlowStore::default())
                .clock(clock.clone()),
        )
        .layer(tower::limit::ConcurrencyLimitLayer::new(1))
        .service(echo(&calls));
    let resp = svc.clone().oneshot(from("192.0.2.1:1")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut delayed = Box::pin(svc.clone().oneshot(from("192.0.2.1:1")));
    // The store answers on the second poll; then the request waits 100 ms.
    for _ in 0..3 {
        assert!(poll_once(&mut delayed).is_pending());
    }
    let mut other = Box::pin(svc.clone().oneshot(from("192.0.2.2:1")));
    let mut answered = None;
    for _ in 0..3 {
        if let Poll::Ready(resp) = poll_once(&mut other) {
            answered = Some(resp.unwrap().status());
            break;
        }
    }
    assert_eq!(answered, Some(StatusCode::OK), "served during the delay");
    clock.advance(Duration::from_millis(100));
    assert!(matches!(poll_once(&mut delayed), Poll::Ready(Ok(_))));
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
