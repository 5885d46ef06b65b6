//! What denied clients get: a configurable status, a custom response, RFC 9457 problem details,
//! dry runs that only report, and gRPC answers only to gRPC clients (gRPC over HTTP/2, gRPC-Web)
//! in their own content type, with the gRPC code of a key error's status and a percent-encoded
//! message.

use crate::support::http as web;
use crate::support::logs;
use crate::support::request;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http::{Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use tollgate::clock::ManualClock;
use tollgate::key::PeerAddr;
use tollgate::layer::problem_details;
use tollgate::layer::ResponseBody;
use tollgate::{Decision, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use logs::Captured;
use request::Req;

/// A request from 192.0.2.1; with `grpc`, a gRPC one (over HTTP/2, as gRPC always is).
fn request(grpc: bool) -> Request<String> {
    let req = Req::new().path("/orders").from("192.0.2.1:1");
    if grpc {
        req.grpc("application/grpc")
    } else {
        req
    }
    .build()
}

/// A handler that counts its calls and echoes whether the decision it saw allowed it.
fn handler(
    calls: &Arc<AtomicUsize>,
) -> impl Service<Request<String>, Response = Response<String>, Error = Infallible, Future = impl Send>
       + Clone {
    let calls = calls.clone();
    tower::service_fn(move |req: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let decision = req.extensions().get::<Decision>().cloned();
        async move {
            Ok::<_, Infallible>(Response::new(format!(
                "{:?}",
                decision.map(|d| (d.allowed, d.remaining))
            )))
        }
    })
}

async fn send<S>(svc: &S, req: Request<String>) -> (Response<ResponseBody<String>>, String)
where
    S: Service<Request<String>, Response = Response<ResponseBody<String>>, Error = Infallible>
        + Clone,
{
    let response = svc.clone().oneshot(req).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    (Response::from_parts(parts, ResponseBody::full(bytes)), text)
}

fn header<'a, B>(response: &'a Response<B>, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

#[tokio::test]
async fn denials_can_use_another_status() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .layer(handler(&calls));
    assert_eq!(send(&svc, request(false)).await.0.status(), StatusCode::OK);
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&denied, "retry-after"), Some("60"));
    assert_eq!(header(&denied, "ratelimit"), Some("\"1/min\";r=0;t=60"));
    assert!(body.contains("retry in 60 seconds"), "{body}");
    // gRPC clients still get RESOURCE_EXHAUSTED, not a 503 they would read as UNAVAILABLE.
    let (grpc, _) = send(&svc, request(true)).await;
    assert_eq!(grpc.status(), StatusCode::OK);
    assert_eq!(header(&grpc, "grpc-status"), Some("8"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
#[should_panic(expected = "4xx or 5xx")]
fn a_success_status_for_denials_is_refused() {
    let _ = RateLimitLayer::gcra(Quota::per_minute(1)).status(StatusCode::OK);
}

#[tokio::test]
async fn on_limited_replaces_the_denial_and_keeps_the_headers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_second(2))
        .clock(ManualClock::new())
        .on_limited(
            |decision: &Decision, head: tollgate::key::RequestHead<'_>| {
                Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("content-type", "text/html")
                    .body(format!(
                        "<p>{} is busy; {} left</p>",
                        head.uri().path(),
                        decision.remaining
                    ))
                    .unwrap()
            },
        )
        .layer(handler(&calls));
    for _ in 0..2 {
        assert_eq!(send(&svc, request(false)).await.0.status(), StatusCode::OK);
    }
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body, "<p>/orders is busy; 0 left</p>");
    assert_eq!(header(&denied, "content-type"), Some("text/html"));
    assert_eq!(header(&denied, "retry-after"), Some("1"));
    assert_eq!(header(&denied, "ratelimit"), Some("\"2/s\";r=0;t=1"));
    let (grpc, grpc_body) = send(&svc, request(true)).await;
    assert_eq!(header(&grpc, "grpc-status"), Some("8"));
    assert_eq!(header(&grpc, "grpc-retry-pushback-ms"), Some("500"));
    assert_eq!(grpc_body, "");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn problem_details_are_rfc_9457_json() {
    let calls = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra(Quota::per_minute(2))
        .clock(clock.clone())
        .on_limited(problem_details)
        .layer(handler(&calls));
    send(&svc, request(false)).await;
    send(&svc, request(false)).await;
    clock.advance(std::time::Duration::from_millis(500));
    let (denied, body) = send(&svc, request(false)).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&denied, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&denied, "retry-after"), Some("30"));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "type": "about:blank",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Too many requests: retry in 30 seconds.",
            "retry_after": 30,
            "limit": 2,
            "remaining": 0,
        })
    );
}

#[tokio::test(flavor = "current_thread")]
async fn dry_run_refuses_nothing_and_reports_what_it_would_have_done() {
    let log = Captured::default();
    let subscriber = log.subscriber(tracing::Level::INFO);
    let _guard = tracing::subscriber::set_default(subscriber);

    let calls = Arc::new(AtomicUsize::new(0));
    let clock = ManualClock::new();
    let svc = RateLimitLayer::gcra(Quota::per_minute(2).named("orders"))
        .clock(clock.clone())
        .dry_run(true)
        .layer(handler(&calls));
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (response, body) = send(&svc, request(false)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("retry-after").is_none());
        seen.push((header(&response, "ratelimit").map(str::to_owned), body));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(
        seen,
        [
            (
                Some("\"orders\";r=1;t=30".to_owned()),
                "Some((true, 1))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((true, 0))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((false, 0))".to_owned()
            ),
            (
                Some("\"orders\";r=0;t=60".to_owned()),
                "Some((false, 0))".to_owned()
            ),
        ]
    );
    // Reported at info as denials are, at most once every 10 s: the first at once, the next
    // with the count since (a flood of would-be denials is not a flood of log lines).
    let would = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("dry run: requests would have been rate limited"))
            .map(str::to_owned)
            .collect()
    };
    let first = would(&log.text());
    assert_eq!(first.len(), 1, "{}", log.text());
    assert!(
        first[0].contains("policy=\"orders\"")
            && first[0].contains("denied=1")
            && first[0].contains("retry_after_ms=30000"),
        "{first:?}"
    );
    clock.advance(std::time::Duration::from_secs(10));
    let (response, _) = send(&svc, request(false)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let both = would(&log.text());
    assert_eq!(both.len(), 2, "{}", log.text());
    assert!(
        both[1].contains("denied=2") && both[1].contains("retry_after_ms=20000"),
        "{both:?}"
    );
}

/// A `POST` from 192.0.2.1 over `version` with `content_type`.
fn typed(version: Version, content_type: &str) -> Request<String> {
    let mut req = Request::builder()
        .method(http::Method::POST)
        .uri("/orders")
        .version(version)
        .header("content-type", content_type)
        .body(String::new())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse::<SocketAddr>().unwrap()));
    req
}

/// A layer that has already used up 192.0.2.1's one request a minute.
async fn spent(
    layer: RateLimitLayer,
) -> impl Service<Request<String>, Response = Response<ResponseBody<String>>, Error = Infallible> + Clone
{
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = layer.clock(ManualClock::new()).layer(handler(&calls));
    assert_eq!(send(&svc, request(false)).await.0.status(), StatusCode::OK);
    svc
}

#[tokio::test]
async fn only_grpc_over_http2_and_grpc_web_get_grpc_answers_in_their_own_content_type() {
    // gRPC-Web gets gRPC answers where the layer opts in (`tests/layer/grpc_detection.rs`: only there).
    let svc = spent(RateLimitLayer::gcra(Quota::per_minute(1)).grpc_web(true)).await;
    let grpc_answers = [
        (Version::HTTP_2, "application/grpc", "application/grpc"),
        (
            Version::HTTP_2,
            "application/grpc+proto",
            "application/grpc+proto",
        ),
        (
            Version::HTTP_2,
            "Application/GRPC+Proto",
            "application/grpc+proto",
        ),
        (
            Version::HTTP_2,
            "application/grpc+json",
            "application/grpc+json",
        ),
        (
            Version::HTTP_2,
            "application/grpc; charset=utf-8",
            "application/grpc",
        ),
        (
            Version::HTTP_11,
            "application/grpc-web",
            "application/grpc-web",
        ),
        (
            Version::HTTP_11,
            "application/grpc-web+proto",
            "application/grpc-web+proto",
        ),
        (
            Version::HTTP_2,
            "application/grpc-web+proto",
            "application/grpc-web+proto",
        ),
        (
            Version::HTTP_11,
            "application/grpc-web-text",
            "application/grpc-web-text",
        ),
        (
            Version::HTTP_11,
            "application/grpc-web-text+proto",
            "application/grpc-web-text+proto",
        ),
        (
            Version::HTTP_10,
            "application/grpc-web+json",
            "application/grpc-web+json",
        ),
    ];
    for (version, sent, answered) in grpc_answers {
        let (response, body) = send(&svc, typed(version, sent)).await;
        assert_eq!(response.status(), StatusCode::OK, "{version:?} {sent}");
        assert_eq!(header(&response, "grpc-status"), Some("8"), "{sent}");
        assert_eq!(header(&response, "content-type"), Some(answered), "{sent}");
        assert_eq!(header(&response, "grpc-retry-pushback-ms"), Some("60000"));
        assert!(response.headers().get("retry-after").is_none(), "{sent}");
        assert_eq!(body, "", "{sent}");
    }
    // gRPC runs over HTTP/2 only: anything else is plain HTTP, and so are look-alike types.
    let plain_answers = [
        (Version::HTTP_11, "application/grpc"),
        (Version::HTTP_10, "application/grpc+proto"),
        (Version::HTTP_2, "application/grpcx"),
        (Version::HTTP_2, "application/grpc+"),
        (Version::HTTP_2, "application/grpc-webby"),
        (Version::HTTP_11, "application/grpc-web+"),
        (Version::HTTP_2, "text/plain; x=application/grpc"),
    ];
    for (version, sent) in plain_answers {
        let (response, body) = send(&svc, typed(version, sent)).await;
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{version:?} {sent}"
        );
        assert!(response.headers().get("grpc-status").is_none(), "{sent}");
        assert_eq!(header(&response, "retry-after"), Some("60"), "{sent}");
        assert!(body.contains("retry in 60 seconds"), "{sent}: {body}");
    }
}

#[tokio::test]
async fn grpc_answers_can_be_turned_off() {
    let svc = spent(RateLimitLayer::gcra(Quota::per_minute(1)).grpc(false)).await;
    for (version, sent) in [
        (Version::HTTP_2, "application/grpc"),
        (Version::HTTP_11, "application/grpc-web+proto"),
    ] {
        let (response, _) = send(&svc, typed(version, sent)).await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{sent}");
        assert!(response.headers().get("grpc-status").is_none(), "{sent}");
        assert_eq!(
            header(&response, "content-type"),
            Some("text/plain; charset=utf-8")
        );
    }
}

/// The gRPC status a key error with `status` and `message` is answered with, and its
/// `grpc-message`.
async fn key_error_answer(status: StatusCode, message: String) -> (String, Option<String>) {
    let key = move |_: tollgate::key::RequestHead<'_>| {
        Err::<Option<tollgate::Key>, _>(tollgate::key::KeyError::new(status, message.clone()))
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .key(key)
        .layer(handler(&calls));
    let (response, body) = send(&svc, request(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body, "");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    (
        header(&response, "grpc-status").unwrap().to_owned(),
        header(&response, "grpc-message").map(str::to_owned),
    )
}

#[tokio::test]
async fn key_errors_map_to_the_grpc_code_of_their_http_status() {
    let codes = [
        (400, "3"),  // INVALID_ARGUMENT
        (401, "16"), // UNAUTHENTICATED
        (403, "7"),  // PERMISSION_DENIED
        (404, "5"),  // NOT_FOUND
        (409, "10"), // ABORTED
        (412, "9"),  // FAILED_PRECONDITION
        (416, "11"), // OUT_OF_RANGE
        (429, "8"),  // RESOURCE_EXHAUSTED
        (499, "1"),  // CANCELLED
        (500, "13"), // INTERNAL
        (501, "12"), // UNIMPLEMENTED
        (502, "14"), // UNAVAILABLE
        (503, "14"), // UNAVAILABLE
        (504, "4"),  // DEADLINE_EXCEEDED
        (418, "2"),  // UNKNOWN
        (507, "2"),  // UNKNOWN
    ];
    for (status, code) in codes {
        let status = StatusCode::from_u16(status).unwrap();
        let (answered, message) = key_error_answer(status, "no key".to_owned()).await;
        assert_eq!(answered, code, "{status}");
        assert_eq!(message.as_deref(), Some("no key"));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// `grpc-message` holds only printable ASCII other than '%' and `%XX` escapes (upper-case
    /// hex), and decodes back to the message exactly.
    #[test]
    fn grpc_messages_are_percent_encoded(message in "\\PC{0,40}|[ -~%\\t\\n\\r\\x00\\x7f]{0,40}") {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (_, encoded) = runtime.block_on(key_error_answer(StatusCode::BAD_REQUEST, message.clone()));
        let encoded = encoded.unwrap_or_default();
        let bytes = encoded.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = &bytes[i + 1..i + 3];
                proptest::prop_assert!(
                    hex.iter().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b)),
                    "{encoded}"
                );
                i += 3;
            } else {
                proptest::prop_assert!((0x20..=0x7E).contains(&bytes[i]), "{encoded}");
                i += 1;
            }
        }
        let decoded = percent_encoding::percent_decode_str(&encoded).decode_utf8().unwrap();
        proptest::prop_assert_eq!(decoded, message);
    }
}

/// The same over the wire: an axum server, a real HTTP/1.1 client.
#[tokio::test]
async fn over_http1_a_grpc_content_type_gets_a_429_and_grpc_web_its_own_answer() {
    use axum::routing::post;
    let app = axum::Router::new()
        .route("/orders", post(|| async { "ordered" }))
        .layer(
            RateLimitLayer::gcra(Quota::per_minute(1))
                .clock(ManualClock::new())
                .grpc_web(true),
        );
    let client = web::client();
    let url = format!("{}/orders", web::serve(app).await);
    let post = |content_type: &'static str| {
        client
            .post(&url)
            .header("content-type", content_type)
            .send()
    };

    let resp = post("application/json").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = post("application/grpc").await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_11);
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(resp.headers().get("grpc-status").is_none());
    assert_eq!(resp.headers()["retry-after"], "60");

    let resp = post("application/grpc-web+proto").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["grpc-status"], "8");
    assert_eq!(resp.headers()["content-type"], "application/grpc-web+proto");
    assert_eq!(resp.headers()["grpc-retry-pushback-ms"], "60000");
    assert_eq!(resp.text().await.unwrap(), "");
}
