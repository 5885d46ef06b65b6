//! What the layer allocates per request on the memory store, for a key that exists: a denial
//! (the 429 with its headers and body) and an allowance (the decision in the request's
//! extensions and the rate limit headers on the inner response).
//!
//! The counting allocator (`support/counting_alloc.rs`) counts per thread, only while the layer
//! is called and its future polled to the end; requests are made before.

use crate::support::counting_alloc;
use crate::support::services;

use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use http::{Request, StatusCode};
use tollgate::clock::ManualClock;
use tollgate::key::PeerAddr;
use tollgate::{Quota, RateLimitLayer};
use tower::{Layer, Service};

use counting_alloc::allocations_in;
use services::ok;

/// With the `metrics` feature, each decision also builds the labels of a counter and of the
/// store latency histogram, recorder or not: two more allocations.
const METRICS: u64 = if cfg!(feature = "metrics") { 2 } else { 0 };

/// A request from 192.0.2.1, as a server records its peer.
fn request() -> Request<String> {
    let mut req = Request::new(String::new());
    let peer: SocketAddr = ([192, 0, 2, 1], 4000).into();
    req.extensions_mut().insert(PeerAddr(peer));
    req
}

/// Calls `svc` and polls its future, which must be ready at once (a memory store and a ready
/// inner service), to the response.
fn respond<S>(svc: &mut S, req: Request<String>) -> S::Response
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    let mut future = pin!(svc.call(req));
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(response) => response.expect("the service failed"),
        Poll::Pending => panic!("the response was not ready at once"),
    }
}

/// The most allocations over `rounds` requests, each counted on its own, after as many
/// uncounted ones (the first time a code path logs, `tracing` registers its callsite).
fn most_allocations<S>(svc: &mut S, rounds: usize) -> (u64, S::Response)
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    most_allocations_of(svc, rounds, request)
}

/// [`most_allocations`] for the requests `make` makes.
fn most_allocations_of<S>(
    svc: &mut S,
    rounds: usize,
    make: fn() -> Request<String>,
) -> (u64, S::Response)
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..rounds {
        black_box(respond(svc, make()));
    }
    let mut most = None;
    for _ in 0..rounds {
        let req = make();
        let (n, response) = allocations_in(|| respond(svc, req));
        let response = black_box(response);
        if most.as_ref().is_none_or(|(m, _)| n > *m) {
            most = Some((n, response));
        }
    }
    most.expect("at least one round")
}

#[test]
fn a_denial_allocates_its_header_map_and_one_block_per_formatted_text() {
    let clock = ManualClock::new();
    let mut svc = RateLimitLayer::gcra(Quota::per_hour(1))
        .clock(clock.clone())
        .layer(ok());
    assert_eq!(respond(&mut svc, request()).status(), StatusCode::OK);

    let (n, response) = most_allocations(&mut svc, 100);
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers();
    assert_eq!(headers["retry-after"], "3600");
    assert_eq!(headers["ratelimit"], r#""1/h";r=0;t=3600"#);
    assert_eq!(headers["ratelimit-policy"], r#""1/h";q=1;w=3600"#);
    // The header map (its index and its entries), the body, `Retry-After` and `RateLimit`;
    // the content type and `RateLimit-Policy` are shared, not copied.
    assert!(
        n <= 5 + METRICS,
        "a denial made {n} allocations, expected at most {}",
        5 + METRICS
    );
}

#[test]
fn an_allowance_allocates_the_decision_and_one_block_per_formatted_header() {
    let clock = ManualClock::new();
    let mut bare = ok();
    let (bare_n, _) = most_allocations(&mut bare, 10);
    assert_eq!(bare_n, 0, "the inner service allocates");

    let mut svc = RateLimitLayer::gcra(Quota::per_second(1_000_000_000))
        .clock(clock.clone())
        .layer(ok());
    assert_eq!(respond(&mut svc, request()).status(), StatusCode::OK);

    let (n, response) = most_allocations(&mut svc, 100);
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("ratelimit"));
    assert!(response.headers().contains_key("ratelimit-policy"));
    // The decision in the request's extensions, the header map the inner response had not yet
    // allocated (index and entries), and `RateLimit`.
    assert!(
        n <= 4 + METRICS,
        "an allowance made {n} allocations, expected at most {}",
        4 + METRICS
    );
}

/// A gRPC call from 192.0.2.1.
fn grpc_request() -> Request<String> {
    let mut req = request();
    *req.method_mut() = http::Method::POST;
    *req.version_mut() = http::Version::HTTP_2;
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    req
}

#[test]
fn a_grpc_denial_allocates_its_header_map_and_one_block_per_formatted_text() {
    let clock = ManualClock::new();
    let mut svc = RateLimitLayer::gcra(Quota::per_hour(1))
        .clock(clock.clone())
        .layer(ok());
    assert_eq!(respond(&mut svc, grpc_request()).status(), StatusCode::OK);

    let (n, response) = most_allocations_of(&mut svc, 100, grpc_request);
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers();
    assert_eq!(headers["grpc-status"], "8");
    assert!(!headers["grpc-message"].is_empty());
    assert_eq!(headers["grpc-retry-pushback-ms"], "3600000");
    // The header map (its index and its entries, grown as fields are added), `grpc-message`
    // (encoded on the stack, copied once), `grpc-retry-pushback-ms` and `RateLimit`; the
    // content type, `grpc-status` and `RateLimit-Policy` are shared, not copied.
    assert!(
        n <= 7 + METRICS,
        "a gRPC denial made {n} allocations, expected at most {}",
        7 + METRICS
    );
}

/// An inner service that reports each request's true cost as `actual` (a settling layer).
fn reporting(
    actual: Option<u64>,
) -> impl Service<
    Request<String>,
    Response = http::Response<String>,
    Error = std::convert::Infallible,
    Future = std::future::Ready<Result<http::Response<String>, std::convert::Infallible>>,
> + Clone {
    tower::service_fn(move |req: Request<String>| {
        if let (Some(actual), Some(usage)) = (actual, req.extensions().get::<tollgate::Usage>()) {
            usage.set(actual);
        }
        std::future::ready(Ok(http::Response::new(String::new())))
    })
}

/// The most allocations of a request to `svc` and of dropping its response (where a
/// settlement is made), over 100 rounds.
fn most_allocations_settled<S>(svc: &mut S) -> u64
where
    S: Service<Request<String>>,
    S::Error: std::fmt::Debug,
{
    (0..200)
        .map(|_| {
            let req = request();
            allocations_in(|| drop(black_box(respond(svc, req)))).0
        })
        .skip(100)
        .max()
        .unwrap_or(0)
}

#[test]
fn a_settled_request_allocates_its_usage_and_its_settlement_and_nothing_to_settle() {
    let open = || RateLimitLayer::gcra(Quota::per_second(1_000_000_000)).clock(ManualClock::new());
    let plain = most_allocations_settled(&mut open().layer(reporting(Some(0))));
    let unreported = most_allocations_settled(&mut open().settle().layer(reporting(None)));
    let refunded = most_allocations_settled(&mut open().settle().layer(reporting(Some(0))));
    let charged = most_allocations_settled(&mut open().settle().layer(reporting(Some(2))));
    // The `Usage` (one block), its place in the request's extensions (one box) and the
    // settlement the body carries (one box); the memory store settles in place.
    assert_eq!(
        unreported,
        plain + 3,
        "a settling layer's request: {unreported} against {plain}"
    );
    assert_eq!(refunded, unreported, "a refund allocates nothing more");
    assert_eq!(charged, unreported, "a charge allocates nothing more");
}
