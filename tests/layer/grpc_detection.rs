//! Who gets a gRPC answer, and what every answer the layer writes itself carries.
//!
//! A request is gRPC only when it is a `POST` with `application/grpc[+subtype]` over HTTP/2;
//! gRPC-Web (`POST` with `application/grpc-web[-text][+subtype]`, any version) gets gRPC
//! answers only where the layer opts in with `.grpc_web(true)`. Anything else is plain HTTP
//! and gets the 429, `status()` or `on_limited`: a client cannot turn its denial into an empty
//! `200 OK` (which a cache keyed by URL could keep for everyone, and which defences watching
//! for 429s never see) by the content type it sends. Every answer the layer writes itself
//! carries `Cache-Control: no-store`; a 401 for a missing bearer token names its scheme in
//! `WWW-Authenticate`. `Decision::retry_after_secs` says what `Retry-After` says.
//!
//! Over a real axum server on TCP (HTTP/1.1, HTTP/1.0, and HTTP/2 by prior knowledge), and
//! through the service itself with the request's version set as a server sets it.

use crate::support::http as web;
use crate::support::stores;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::routing::any;
use axum::Router;
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::clock::ManualClock;
use tollgate::key::{BearerToken, Global, Header, PeerAddr};
use tollgate::{Decision, InFlightLayer, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

use stores::SlowStore;
use web::{client, header, serve, serve_without_peers};

/// 1 request a minute per client, on a clock that never moves.
fn one_per_minute() -> RateLimitLayer {
    RateLimitLayer::gcra(Quota::per_minute(1)).clock(ManualClock::new())
}

/// Serves `/orders` (any method) behind `layer` and returns its URL, with the one request a
/// minute of this client already used.
async fn spent(layer: RateLimitLayer) -> String {
    let app = Router::new()
        .route("/orders", any(|| async { "ordered" }))
        .layer(layer);
    let url = format!("{}/orders", serve(app).await);
    let resp = client().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("cache-control").is_none());
    url
}

async fn send(url: &str, method: &str, content_type: &str) -> reqwest::Response {
    client()
        .request(reqwest::Method::from_bytes(method.as_bytes()).unwrap(), url)
        .header("content-type", content_type)
        .send()
        .await
        .unwrap()
}

/// The content types of gRPC-Web, and look-alikes of gRPC's, in the spellings a client may use.
const GRPC_TYPES: &[&str] = &[
    "application/grpc-web",
    "APPLICATION/GRPC-WEB",
    "Application/Grpc-Web+Proto",
    "application/grpc-web+proto",
    "application/grpc-web+json",
    "application/grpc-web; charset=utf-8",
    " application/grpc-web ; x=1",
    "application/grpc-web-text",
    "application/grpc-web-text+proto",
    "application/grpc",
    "application/grpc+proto",
];

/// What a denied plain HTTP request must get: the layer's status, `Retry-After`, no gRPC
/// status, and `Cache-Control: no-store`.
#[track_caller]
fn assert_plain_denial(resp: &reqwest::Response, status: StatusCode, what: &str) {
    assert_eq!(resp.status(), status, "{what}");
    assert_eq!(header(resp, "retry-after"), "60", "{what}");
    assert_eq!(header(resp, "cache-control"), "no-store", "{what}");
    assert!(resp.headers().get("grpc-status").is_none(), "{what}");
}

#[tokio::test]
async fn a_get_with_a_grpc_web_content_type_gets_the_429() {
    let url = spent(one_per_minute()).await;
    let resp = send(&url, "GET", "application/grpc-web").await;
    assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, "GET grpc-web");
    assert_eq!(header(&resp, "content-type"), "text/plain; charset=utf-8");
    let body = resp.text().await.unwrap();
    assert!(body.contains("retry in 60 seconds"), "{body}");
}

#[tokio::test]
async fn a_get_with_a_grpc_web_content_type_gets_the_layers_status() {
    let url = spent(one_per_minute().status(StatusCode::SERVICE_UNAVAILABLE)).await;
    for content_type in GRPC_TYPES {
        let resp = send(&url, "GET", content_type).await;
        assert_plain_denial(&resp, StatusCode::SERVICE_UNAVAILABLE, content_type);
    }
}

#[tokio::test]
async fn a_get_with_a_grpc_web_content_type_gets_on_limited() {
    let layer = one_per_minute().on_limited(|decision: &Decision, _head| {
        let mut resp = Response::new(format!("custom, policy {:?}", decision.policy()));
        *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        resp
    });
    let url = spent(layer).await;
    for content_type in GRPC_TYPES {
        let resp = send(&url, "GET", content_type).await;
        assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, content_type);
        assert_eq!(resp.text().await.unwrap(), "custom, policy Some(\"1/min\")");
    }
}

/// Without the opt-in, no method, spelling or version gets a gRPC answer over HTTP/1.x: not
/// even a well-formed gRPC-Web `POST`.
#[tokio::test]
async fn without_the_opt_in_no_request_over_http1_gets_a_grpc_answer() {
    let url = spent(one_per_minute()).await;
    for method in ["GET", "POST", "post", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        for content_type in GRPC_TYPES {
            let resp = send(&url, method, content_type).await;
            let what = format!("{method} {content_type}");
            assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, &what);
            assert!(!resp.text().await.unwrap().is_empty(), "{what}");
        }
    }
    // HEAD: the same status and fields, no body.
    let resp = client()
        .head(&url)
        .header("content-type", "application/grpc-web")
        .send()
        .await
        .unwrap();
    assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, "HEAD grpc-web");
}

/// Sends `request` (an HTTP/1.0 request's text) to `url`'s server and reads the whole answer.
async fn raw(url: &str, request: &str) -> String {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/orders");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text.to_ascii_lowercase()
}

const GET_10: &str = "GET /orders HTTP/1.0\r\ncontent-type: application/grpc-web\r\n\r\n";
const POST_10: &str =
    "POST /orders HTTP/1.0\r\ncontent-type: application/grpc-web\r\ncontent-length: 0\r\n\r\n";

#[tokio::test]
async fn over_http1_0_a_grpc_web_content_type_gets_the_429() {
    let url = spent(one_per_minute()).await;
    for request in [GET_10, POST_10] {
        let text = raw(&url, request).await;
        assert!(text.starts_with("http/1.0 429"), "{text}");
        assert!(text.contains("\r\ncache-control: no-store\r\n"), "{text}");
        assert!(text.contains("\r\nretry-after: 60\r\n"), "{text}");
        assert!(!text.contains("grpc-status"), "{text}");
    }
}

/// A request through `layer` as a server hands it on: from 192.0.2.1, over `version`.
fn request(method: &str, version: Version, content_type: &str) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri("/orders")
        .version(version)
        .header("content-type", content_type)
        .body(Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr("192.0.2.1:1".parse::<SocketAddr>().unwrap()));
    req
}

type Svc = tollgate::RateLimit<
    tower::util::ServiceFn<
        fn(Request<Body>) -> std::future::Ready<Result<Response<Body>, Infallible>>,
    >,
>;

fn ok(_: Request<Body>) -> std::future::Ready<Result<Response<Body>, Infallible>> {
    std::future::ready(Ok(Response::new(Body::from("ordered"))))
}

/// The service behind `layer`, with 192.0.2.1's one request a minute used.
async fn spent_service(layer: RateLimitLayer) -> Svc {
    let f: fn(Request<Body>) -> _ = ok;
    let svc = layer.layer(tower::service_fn(f));
    let resp = svc
        .clone()
        .oneshot(request("GET", Version::HTTP_11, "text/plain"))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    svc
}

async fn call(svc: &Svc, req: Request<Body>) -> (http::response::Parts, String) {
    let (parts, body) = svc.clone().oneshot(req).await.unwrap().into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts, String::from_utf8(bytes.to_vec()).unwrap())
}

fn field<'a>(parts: &'a http::response::Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).map(|v| v.to_str().unwrap())
}

/// Over HTTP/2 only a `POST` is gRPC: any other method with `application/grpc` is plain HTTP.
#[tokio::test]
async fn over_http2_only_a_post_is_grpc() {
    let svc =
        spent_service(RateLimitLayer::gcra(Quota::per_minute(1)).clock(ManualClock::new())).await;
    for method in ["GET", "HEAD", "PUT", "post", "Post", "PATCH", "DELETE"] {
        for content_type in ["application/grpc", "application/grpc+proto"] {
            let what = format!("HTTP/2 {method} {content_type}");
            let (parts, body) = call(&svc, request(method, Version::HTTP_2, content_type)).await;
            assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS, "{what}");
            assert_eq!(field(&parts, "retry-after"), Some("60"), "{what}");
            assert_eq!(field(&parts, "cache-control"), Some("no-store"), "{what}");
            assert!(field(&parts, "grpc-status").is_none(), "{what}");
            assert!(body.contains("retry in 60 seconds"), "{what}: {body}");
        }
    }
    // gRPC itself still gets its answer, and it is not to be stored either.
    for (sent, answered) in [
        ("application/grpc", "application/grpc"),
        ("Application/GRPC+Proto", "application/grpc+proto"),
        ("application/grpc; charset=utf-8", "application/grpc"),
    ] {
        let (parts, body) = call(&svc, request("POST", Version::HTTP_2, sent)).await;
        assert_eq!(parts.status, StatusCode::OK, "{sent}");
        assert_eq!(field(&parts, "grpc-status"), Some("8"), "{sent}");
        assert_eq!(field(&parts, "content-type"), Some(answered), "{sent}");
        assert_eq!(field(&parts, "grpc-retry-pushback-ms"), Some("60000"));
        assert_eq!(field(&parts, "cache-control"), Some("no-store"), "{sent}");
        assert!(field(&parts, "retry-after").is_none(), "{sent}");
        assert_eq!(body, "", "{sent}");
    }
    // Over HTTP/1.1 `application/grpc` is not gRPC, `POST` or not.
    let (parts, _) = call(&svc, request("POST", Version::HTTP_11, "application/grpc")).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS);
}

/// The same over a real HTTP/2 connection (h2c, prior knowledge) to an axum server: hyper's
/// HTTP/2 client, and the HTTP/2 server side of `axum::serve`, are there because tonic's
/// `channel` feature (a dev-dependency) turns on hyper's `client` and `http2` and
/// hyper-util's `http2`; an app needs axum's `http2` feature for the same.
#[tokio::test]
async fn over_a_real_http2_connection_only_a_post_is_grpc() {
    use http_body_util::Empty;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let url = spent(one_per_minute()).await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/orders")
        .to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut send = |method: &str, content_type: &str| {
        let req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("http://{addr}/orders"))
            .header("content-type", content_type)
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        sender.send_request(req)
    };
    for (method, content_type) in [
        ("GET", "application/grpc"),
        ("HEAD", "application/grpc"),
        ("PUT", "application/grpc+proto"),
        ("post", "application/grpc"),
        ("GET", "application/grpc-web"),
        ("POST", "application/grpc-web+proto"),
        ("POST", "application/grpc-web-text"),
    ] {
        let what = format!("HTTP/2 {method} {content_type}");
        let resp = send(method, content_type).await.unwrap();
        assert_eq!(resp.version(), Version::HTTP_2, "{what}");
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
        assert_eq!(resp.headers()["retry-after"], "60", "{what}");
        assert_eq!(resp.headers()["cache-control"], "no-store", "{what}");
        assert!(resp.headers().get("grpc-status").is_none(), "{what}");
    }
    let resp = send("POST", "application/grpc").await.unwrap();
    assert_eq!(resp.version(), Version::HTTP_2);
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["grpc-status"], "8");
    assert_eq!(resp.headers()["cache-control"], "no-store");
}

/// With `.grpc_web(true)` a gRPC-Web `POST` gets the gRPC answer over any version; any other
/// method, or a look-alike type, still gets the 429.
#[tokio::test]
async fn grpc_web_gets_grpc_answers_only_with_the_opt_in() {
    let url = spent(one_per_minute().grpc_web(true)).await;
    for (sent, answered) in [
        ("application/grpc-web", "application/grpc-web"),
        ("Application/Grpc-Web+Proto", "application/grpc-web+proto"),
        ("application/grpc-web+json", "application/grpc-web+json"),
        (
            "application/grpc-web; charset=utf-8",
            "application/grpc-web",
        ),
        ("application/grpc-web-text", "application/grpc-web-text"),
        (
            "application/grpc-web-text+proto",
            "application/grpc-web-text+proto",
        ),
    ] {
        let resp = send(&url, "POST", sent).await;
        assert_eq!(resp.status(), StatusCode::OK, "{sent}");
        assert_eq!(header(&resp, "grpc-status"), "8", "{sent}");
        assert_eq!(header(&resp, "content-type"), answered, "{sent}");
        assert_eq!(header(&resp, "grpc-retry-pushback-ms"), "60000", "{sent}");
        assert_eq!(header(&resp, "cache-control"), "no-store", "{sent}");
        assert!(resp.headers().get("retry-after").is_none(), "{sent}");
        assert_eq!(resp.text().await.unwrap(), "", "{sent}");
    }
    for method in ["GET", "post", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        for content_type in GRPC_TYPES {
            let resp = send(&url, method, content_type).await;
            let what = format!("{method} {content_type}");
            assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, &what);
        }
    }
    for (method, content_type) in [
        ("POST", "application/grpc"),
        ("POST", "application/grpc-webby"),
        ("POST", "application/grpc-web+"),
        ("POST", "text/plain; x=application/grpc-web"),
    ] {
        let resp = send(&url, method, content_type).await;
        let what = format!("{method} {content_type}");
        assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, &what);
    }
    let resp = client()
        .head(&url)
        .header("content-type", "application/grpc-web")
        .send()
        .await
        .unwrap();
    assert_plain_denial(&resp, StatusCode::TOO_MANY_REQUESTS, "HEAD grpc-web");
    // HTTP/1.0: a `POST` is gRPC-Web, a `GET` is not.
    let text = raw(&url, GET_10).await;
    assert!(text.starts_with("http/1.0 429"), "{text}");
    let text = raw(&url, POST_10).await;
    assert!(text.starts_with("http/1.0 200"), "{text}");
    assert!(text.contains("\r\ngrpc-status: 8\r\n"), "{text}");
    assert!(text.contains("\r\ncache-control: no-store\r\n"), "{text}");
}

/// `.grpc(false)` turns gRPC-Web answers off too, even where the layer opted in.
#[tokio::test]
async fn grpc_false_answers_every_request_the_http_way() {
    let layer = RateLimitLayer::gcra(Quota::per_minute(1))
        .clock(ManualClock::new())
        .grpc_web(true)
        .grpc(false);
    let svc = spent_service(layer).await;
    for (version, content_type) in [
        (Version::HTTP_2, "application/grpc"),
        (Version::HTTP_11, "application/grpc-web"),
        (Version::HTTP_2, "application/grpc-web+proto"),
    ] {
        let (parts, _) = call(&svc, request("POST", version, content_type)).await;
        assert_eq!(
            parts.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{content_type}"
        );
        assert!(field(&parts, "grpc-status").is_none(), "{content_type}");
    }
}

/// Every answer the layer writes: denials, key errors (400, 401, 500), store errors (503),
/// plain and gRPC; and none of the inner service's responses.
#[tokio::test]
async fn every_answer_the_layer_writes_itself_is_not_to_be_stored() {
    let http = client();

    // A missing header: 400.
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(one_per_minute().key(Header::new("x-api-key")));
    let base = serve(app).await;
    let resp = http.get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&resp, "cache-control"), "no-store");

    // No peer address recorded: 500.
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(one_per_minute());
    let base = serve_without_peers(app).await;
    let resp = http.get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(header(&resp, "cache-control"), "no-store");

    // A store that fails: 503.
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(one_per_minute().store(SlowStore::failing()));
    let base = serve(app).await;
    let resp = http.get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&resp, "cache-control"), "no-store");

    // The same over gRPC: its key errors and store errors.
    let f: fn(Request<Body>) -> _ = ok;
    let failing = one_per_minute()
        .store(SlowStore::failing())
        .layer(tower::service_fn(f));
    let (parts, _) = call(
        &failing,
        request("POST", Version::HTTP_2, "application/grpc"),
    )
    .await;
    assert_eq!(field(&parts, "grpc-status"), Some("14"));
    assert_eq!(field(&parts, "cache-control"), Some("no-store"));
    let unkeyed = one_per_minute()
        .key(BearerToken)
        .layer(tower::service_fn(f));
    let (parts, _) = call(
        &unkeyed,
        request("POST", Version::HTTP_2, "application/grpc"),
    )
    .await;
    assert_eq!(field(&parts, "grpc-status"), Some("16"));
    assert_eq!(field(&parts, "cache-control"), Some("no-store"));
    // A gRPC answer is no HTTP 401: it names no HTTP authentication scheme.
    assert!(field(&parts, "www-authenticate").is_none());

    // An in-flight limit's refusal (a request above its slots: no wait would let it pass).
    let too_large = InFlightLayer::new(1)
        .cost(|_key: &tollgate::Key, _head| 2)
        .layer(tower::service_fn(f));
    let (parts, body) = call(&too_large, request("GET", Version::HTTP_11, "text/plain")).await;
    assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(field(&parts, "cache-control"), Some("no-store"));
}

#[tokio::test]
async fn the_inner_services_responses_keep_their_own_caching() {
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .route(
            "/cached",
            any(|| async { ([("cache-control", "max-age=60")], "cached") }),
        )
        .layer(RateLimitLayer::gcra(Quota::per_minute(5)).clock(ManualClock::new()));
    let base = serve(app).await;
    let resp = client().get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("cache-control").is_none());
    let resp = client().get(format!("{base}/cached")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "cache-control"), "max-age=60");
}

/// `on_limited` and `on_key_error` responses get `no-store` too, unless they chose their own
/// caching.
#[tokio::test]
async fn custom_answers_are_not_stored_unless_they_say_so() {
    let layer = one_per_minute()
        .key(Header::new("x-api-key"))
        .on_key_error(|error, _head| {
            let mut resp = Response::new(error.message().to_owned());
            *resp.status_mut() = error.status();
            resp
        });
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(layer);
    let base = serve(app).await;
    let resp = client().get(&base).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&resp, "cache-control"), "no-store");

    let layer = one_per_minute().on_limited(|_decision, _head| {
        Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header("cache-control", "private, max-age=5")
            .body(String::from("slow down"))
            .unwrap()
    });
    let url = spent(layer).await;
    let resp = client().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&resp, "cache-control"), "private, max-age=5");
    assert_eq!(header(&resp, "retry-after"), "60");
}

/// RFC 9110 §15.5.2: a 401 carries a challenge. RFC 6750 §3: the bearer scheme's is `Bearer`.
#[tokio::test]
async fn a_missing_bearer_token_gets_a_401_that_names_the_scheme() {
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(one_per_minute().key(BearerToken));
    let base = serve(app).await;
    let http = client();
    let missing = http.get(&base).send().await.unwrap();
    let basic = http
        .get(&base)
        .header("authorization", "Basic YWxhZGRpbjpvcGVuc2VzYW1l")
        .send()
        .await
        .unwrap();
    let empty = http
        .get(&base)
        .header("authorization", "Bearer ")
        .send()
        .await
        .unwrap();
    for resp in [missing, basic, empty] {
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(header(&resp, "www-authenticate"), "Bearer");
        assert_eq!(header(&resp, "cache-control"), "no-store");
    }
    let resp = http
        .get(&base)
        .header("authorization", "Bearer t-1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("www-authenticate").is_none());
}

/// An `on_key_error` answer that keeps the 401 gets the challenge too, unless it wrote one.
#[tokio::test]
async fn an_on_key_error_401_names_the_scheme_too() {
    let layer = one_per_minute()
        .key(BearerToken)
        .on_key_error(|error, _head| {
            let mut resp = Response::new(format!("{{\"error\":\"{}\"}}", error.message()));
            *resp.status_mut() = error.status();
            resp
        });
    let app = Router::new()
        .route("/", any(|| async { "hello" }))
        .layer(layer);
    let resp = client().get(serve(app).await).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&resp, "www-authenticate"), "Bearer");
    assert_eq!(header(&resp, "cache-control"), "no-store");
}

/// The ceiling of `d` in whole seconds, computed apart from the crate.
fn ceil_secs(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000_000)).unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// `retry_after_secs` is `retry_after` in whole seconds rounded up, as `Retry-After` says
    /// it: both read from the same denial, on random quotas and times.
    #[test]
    fn retry_after_secs_agrees_with_the_retry_after_header(
        limit in 1u64..5,
        period_ms in 1u64..7_200_000,
        extra_ns in 0u64..1_000_000,
        elapsed_ns in 0u64..7_200_000_000_000,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let period = Duration::from_millis(period_ms) + Duration::from_nanos(extra_ns);
        let clock = ManualClock::new();
        let layer = RateLimitLayer::gcra(Quota::new(limit, period))
            .key(Global)
            .clock(clock.clone())
            .on_limited(|decision: &Decision, _head| {
                let secs = decision.retry_after_secs();
                assert_eq!(secs, decision.retry_after.map(ceil_secs));
                let mut resp = Response::new(format!("{secs:?}"));
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                resp
            });
        let f: fn(Request<Body>) -> _ = ok;
        let svc = layer.layer(tower::service_fn(f));
        let (parts, body) = runtime.block_on(async {
            for _ in 0..limit {
                call(&svc, request("GET", Version::HTTP_11, "text/plain")).await;
            }
            clock.advance(Duration::from_nanos(elapsed_ns % period.as_nanos().max(1) as u64));
            call(&svc, request("GET", Version::HTTP_11, "text/plain")).await
        });
        proptest::prop_assume!(parts.status == StatusCode::TOO_MANY_REQUESTS);
        let header = field(&parts, "retry-after").unwrap();
        proptest::prop_assert_eq!(body, format!("Some({header})"));
    }

    /// The same on decisions made by hand, from a nanosecond to u64::MAX seconds.
    #[test]
    fn retry_after_secs_is_the_wait_rounded_up(
        secs in proptest::num::u64::ANY,
        nanos in 0u32..1_000_000_000,
    ) {
        let wait = Duration::new(secs, nanos);
        let denied = Decision::deny(1, 0, wait, Some(wait));
        // Rounded up, and at most u64::MAX: never wrapped round to 0.
        let expected = secs.saturating_add(u64::from(nanos > 0));
        proptest::prop_assert_eq!(denied.retry_after_secs(), Some(expected));
        proptest::prop_assert_eq!(Decision::deny(1, 0, wait, None).retry_after_secs(), None);
        proptest::prop_assert_eq!(Decision::allow(1, 1, wait).retry_after_secs(), None);
    }
}
