//! What the guide's "Testing your limits" (`src/guide/testing.md`) shows, and the answers an app shapes itself: a
//! limited axum router tested with `oneshot` and axum's `MockConnectInfo`, time moved by a
//! `ManualClock`, `on_limited` and `on_key_error` returning axum responses, and `quota_for`
//! reading what a middleware put in the request.
#![cfg(feature = "axum")]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tollgate::clock::ManualClock;
use tollgate::key::{ClientIp, Header, KeyError, RequestHead};
use tollgate::{Key, Quota, RateLimitLayer};
use tower::ServiceExt;

fn peer(last: u8) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, last], 40_000))
}

fn get_request(path: &str) -> Request {
    Request::get(path).body(Body::empty()).unwrap()
}

async fn body_text(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response.headers()[name].to_str().unwrap()
}

fn hello() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

#[tokio::test]
async fn a_oneshot_test_keys_by_the_mock_peer_and_time_moves_by_hand() {
    let clock = ManualClock::new();
    let limit = RateLimitLayer::gcra(Quota::per_minute(2)).clock(clock.clone());
    let app = |last: u8| {
        hello()
            .layer(limit.clone())
            .layer(MockConnectInfo(peer(last)))
    };

    let first = app(1).oneshot(get_request("/")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit-policy"), "\"2/min\";q=2;w=60");
    assert_eq!(header(&first, "ratelimit"), "\"2/min\";r=1;t=30");
    assert_eq!(
        app(1).oneshot(get_request("/")).await.unwrap().status(),
        StatusCode::OK
    );
    let denied = app(1).oneshot(get_request("/")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "30");
    assert_eq!(header(&denied, "ratelimit"), "\"2/min\";r=0;t=60");
    // Another peer is another client.
    assert_eq!(
        app(2).oneshot(get_request("/")).await.unwrap().status(),
        StatusCode::OK
    );
    // Half a minute later one request has come back.
    clock.advance(Duration::from_secs(30));
    let back = app(1).oneshot(get_request("/")).await.unwrap();
    assert_eq!(back.status(), StatusCode::OK);
    assert_eq!(header(&back, "ratelimit"), "\"2/min\";r=0;t=60");
}

#[tokio::test]
async fn a_real_peer_address_wins_over_the_mock() {
    let limit = RateLimitLayer::gcra(Quota::per_minute(1));
    let app = hello().layer(limit).layer(MockConnectInfo(peer(1)));
    let from = |last: u8| {
        let mut req = get_request("/");
        req.extensions_mut().insert(ConnectInfo(peer(last)));
        req
    };
    assert_eq!(
        app.clone().oneshot(from(7)).await.unwrap().status(),
        StatusCode::OK
    );
    // Peer 8's connection is its own client, though the mock says 1 for both.
    assert_eq!(
        app.clone().oneshot(from(8)).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        app.oneshot(from(7)).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn the_mock_peer_is_the_proxy_that_client_ip_trusts() {
    let key = ClientIp::trusting(["192.0.2.1"]).unwrap();
    let limit = RateLimitLayer::gcra(Quota::per_minute(1)).key(key);
    let behind = |proxy: u8, client: &str| {
        let app = hello()
            .layer(limit.clone())
            .layer(MockConnectInfo(peer(proxy)));
        let mut req = get_request("/");
        req.headers_mut()
            .insert("x-forwarded-for", HeaderValue::from_str(client).unwrap());
        app.oneshot(req)
    };
    assert_eq!(
        behind(1, "203.0.113.1").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        behind(1, "203.0.113.2").await.unwrap().status(),
        StatusCode::OK
    );
    let again = behind(1, "203.0.113.1").await.unwrap();
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
    // From a peer that is not the trusted proxy, the header is ignored: the key is the peer.
    assert_eq!(
        behind(9, "203.0.113.3").await.unwrap().status(),
        StatusCode::OK
    );
    let spoofed = behind(9, "203.0.113.4").await.unwrap();
    assert_eq!(spoofed.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn without_any_peer_the_answer_says_how_to_test_with_a_mock() {
    // The mock inside the limit, where the limit never sees it: a 500 that says where it goes.
    let app = hello()
        .layer(MockConnectInfo(peer(1)))
        .layer(RateLimitLayer::gcra(Quota::per_minute(1)));
    let response = app.oneshot(get_request("/")).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let text = body_text(response).await;
    assert!(text.contains("MockConnectInfo"), "{text}");
    assert!(
        text.contains("into_make_service_with_connect_info"),
        "{text}"
    );
}

fn json_denial(decision: &tollgate::Decision, head: RequestHead<'_>) -> Response {
    let body = json!({
        "error": "rate_limited",
        "path": head.uri().path(),
        "policy": decision.policy(),
        "remaining": decision.remaining,
    });
    (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
}

#[tokio::test]
async fn on_limited_takes_an_axum_json_response_and_keeps_the_headers() {
    let limit = RateLimitLayer::gcra(Quota::per_second(1).named("api")).on_limited(json_denial);
    let app = hello().layer(limit).layer(MockConnectInfo(peer(1)));
    assert_eq!(
        app.clone()
            .oneshot(get_request("/"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let denied = app.clone().oneshot(get_request("/")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "content-type"), "application/json");
    assert_eq!(header(&denied, "retry-after"), "1");
    assert_eq!(header(&denied, "ratelimit"), "\"api\";r=0;t=1");
    assert_eq!(
        body_text(denied).await,
        r#"{"error":"rate_limited","path":"/","policy":"api","remaining":0}"#
    );

    // gRPC clients keep their own answer: a custom body is no gRPC status.
    let mut grpc = get_request("/");
    *grpc.method_mut() = axum::http::Method::POST;
    *grpc.version_mut() = axum::http::Version::HTTP_2;
    grpc.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    let denied = app.oneshot(grpc).await.unwrap();
    assert_eq!(denied.status(), StatusCode::OK);
    assert_eq!(header(&denied, "grpc-status"), "8");
    assert_eq!(header(&denied, "content-type"), "application/grpc");
    assert_eq!(body_text(denied).await, "");
}

#[tokio::test]
async fn on_limited_may_set_its_own_retry_after_and_stream_its_body() {
    use http_body_util::BodyExt;
    let limit = RateLimitLayer::gcra(Quota::per_minute(1)).on_limited(|_decision, _head| {
        // A streaming body, as `boxed_unsync` makes of any `http_body::Body`.
        let chunks = ["slow ", "down"].map(|chunk| {
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(axum::body::Bytes::from(
                chunk,
            )))
        });
        let body = http_body_util::StreamBody::new(tokio_stream::iter(chunks)).boxed_unsync();
        axum::http::Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("retry-after", "3600")
            .body(body)
            .unwrap()
    });
    let app = hello().layer(limit).layer(MockConnectInfo(peer(1)));
    assert_eq!(
        app.clone()
            .oneshot(get_request("/"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let denied = app.oneshot(get_request("/")).await.unwrap();
    assert_eq!(denied.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&denied, "retry-after"), "3600");
    assert_eq!(header(&denied, "ratelimit"), "\"1/min\";r=0;t=60");
    assert_eq!(body_text(denied).await, "slow down");
}

#[tokio::test]
async fn key_errors_are_shaped_by_on_key_error_for_http_and_stay_grpc_for_grpc() {
    let limit = RateLimitLayer::gcra(Quota::per_minute(10))
        .key(Header::new("x-api-key"))
        .on_key_error(|error: &KeyError, _head| {
            let body = json!({ "error": "no_api_key", "message": error.message() });
            (StatusCode::UNAUTHORIZED, Json(body)).into_response()
        });
    let app = hello().layer(limit);
    let missing = app.clone().oneshot(get_request("/")).await.unwrap();
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&missing, "content-type"), "application/json");
    let text = body_text(missing).await;
    assert!(
        text.starts_with(r#"{"error":"no_api_key","message":""#),
        "{text}"
    );

    let mut grpc = get_request("/");
    *grpc.method_mut() = axum::http::Method::POST;
    *grpc.version_mut() = axum::http::Version::HTTP_2;
    grpc.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/grpc+proto"),
    );
    let answered = app.clone().oneshot(grpc).await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    // INVALID_ARGUMENT: the extractor's 400, not the 401 `on_key_error` would have made.
    assert_eq!(header(&answered, "grpc-status"), "3");

    let mut keyed = get_request("/");
    keyed
        .headers_mut()
        .insert("x-api-key", HeaderValue::from_static("k1"));
    assert_eq!(app.oneshot(keyed).await.unwrap().status(), StatusCode::OK);
}

/// A customer's plan, as an authentication middleware finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Free,
    Pro,
}

#[tokio::test]
async fn quota_for_reads_the_plan_a_middleware_put_in_the_extensions() {
    async fn authenticate(mut req: Request, next: Next) -> Response {
        let plan = match req.headers().get("x-api-key").map(HeaderValue::as_bytes) {
            Some(b"pro-key") => Plan::Pro,
            _ => Plan::Free,
        };
        req.extensions_mut().insert(plan);
        next.run(req).await
    }
    let free = Quota::per_minute(1).named("free");
    let pro = Quota::per_minute(3).named("pro");
    let limit = RateLimitLayer::gcra(free.clone())
        .key(Header::new("x-api-key"))
        .quota_for(move |_key: &Key, head: RequestHead<'_>| {
            match head.extensions().get::<Plan>() {
                Some(Plan::Pro) => pro.clone(),
                _ => free.clone(),
            }
        });
    let app = hello()
        .layer(limit)
        .layer(middleware::from_fn(authenticate));
    let send = |key: &'static str| {
        let mut req = get_request("/");
        req.headers_mut()
            .insert("x-api-key", HeaderValue::from_static(key));
        app.clone().oneshot(req)
    };
    for _ in 0..3 {
        let response = send("pro-key").await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "ratelimit-policy"), "\"pro\";q=3;w=60");
    }
    assert_eq!(
        send("pro-key").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(send("free-key").await.unwrap().status(), StatusCode::OK);
    let denied = send("free-key").await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "ratelimit-policy"), "\"free\";q=1;w=60");
}

#[tokio::test]
async fn quota_for_reads_plans_from_a_map_captured_in_an_arc() {
    let plans: Arc<HashMap<&'static str, Quota>> = Arc::new(HashMap::from([
        ("k-pro", Quota::per_minute(3).named("pro")),
        ("k-team", Quota::per_minute(2).named("team")),
    ]));
    let free = Quota::per_minute(1).named("free");
    let limit = RateLimitLayer::gcra(free.clone())
        .key(Header::new("x-api-key"))
        .quota_for(move |key: &Key, _head: RequestHead<'_>| {
            let plan = key
                .as_bytes()
                .and_then(|bytes| std::str::from_utf8(bytes).ok())
                .and_then(|name| plans.get(name));
            plan.cloned().unwrap_or_else(|| free.clone())
        });
    let app = hello().layer(limit);
    for (key, allowed) in [("k-pro", 3), ("k-team", 2), ("k-unknown", 1)] {
        for n in 0..=allowed {
            let mut req = get_request("/");
            req.headers_mut()
                .insert("x-api-key", HeaderValue::from_static(key));
            let status = app.clone().oneshot(req).await.unwrap().status();
            let expected = if n < allowed {
                StatusCode::OK
            } else {
                StatusCode::TOO_MANY_REQUESTS
            };
            assert_eq!(status, expected, "{key} request {n}");
        }
    }
}

#[test]
fn a_response_body_stays_send_and_sync_with_custom_answers() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<tollgate::layer::ResponseBody<String>>();
    send_sync::<tollgate::layer::ResponseBody<http_body_util::Full<axum::body::Bytes>>>();
}
