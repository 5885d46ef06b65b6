//! The middleware in a plain hyper 1 server (no axum), wired as in `examples/hyper.rs`: each
//! connection inserts its peer address as `PeerAddr` into every request. Called by a real HTTP
//! client over loopback. Time moves by a `ManualClock`, never by sleeping.

use crate::support::http as web;

use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use reqwest::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::key::PeerAddr;
use tollgate::{Quota, RateLimitLayer};
use tower::ServiceBuilder;

use web::{client_from, header};

async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

/// Serves `hello` behind a 2/s limit on a free local port; `peer_addr` decides whether each
/// connection records its peer address for the layer.
async fn serve(clock: &ManualClock, peer_addr: bool) -> String {
    let limited = ServiceBuilder::new()
        .layer(RateLimitLayer::gcra(Quota::per_second(2)).clock(clock.clone()))
        .service_fn(hello);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    if peer_addr {
                        req.extensions_mut().insert(PeerAddr(peer));
                    }
                    req
                })
                .service(limited.clone());
            let connection = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            tokio::spawn(connection);
        }
    });
    format!("http://{addr}/")
}

const POLICY: &str = r#""2/s";q=2;w=1"#;

#[tokio::test]
async fn the_third_request_within_a_second_is_429() {
    let clock = ManualClock::new();
    let url = serve(&clock, true).await;
    let localhost = Ipv4Addr::LOCALHOST;

    let first = client_from(localhost);
    for rate in [r#""2/s";r=1;t=1"#, r#""2/s";r=0;t=1"#] {
        let resp = first.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(header(&resp, "ratelimit-policy"), POLICY);
        assert_eq!(header(&resp, "ratelimit"), rate);
        assert!(resp.headers().get("retry-after").is_none());
        assert_eq!(resp.text().await.unwrap(), "hello");
    }

    // A new connection from the same IP shares the budget: every connection serves a clone
    // of one limited service.
    let resp = client_from(localhost).get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // T = 500 ms, rounded up to whole seconds.
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(header(&resp, "ratelimit-policy"), POLICY);
    assert_eq!(header(&resp, "ratelimit"), r#""2/s";r=0;t=1"#);
    assert!(!resp.text().await.unwrap().trim().is_empty());

    // Another client IP has its own budget.
    let other = client_from(Ipv4Addr::new(127, 0, 0, 2));
    let resp = other.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "ratelimit"), r#""2/s";r=1;t=1"#);

    // One emission interval later the first IP may send one more.
    clock.advance(Duration::from_millis(500));
    let resp = first.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(header(&resp, "ratelimit"), r#""2/s";r=0;t=1"#);
    let resp = first.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn without_peer_addr_requests_are_refused_with_a_500_not_let_through() {
    let clock = ManualClock::new();
    let url = serve(&clock, false).await;
    let resp = client_from(Ipv4Addr::LOCALHOST)
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = resp.text().await.unwrap();
    assert!(body.contains("PeerAddr"), "{body}");
}
