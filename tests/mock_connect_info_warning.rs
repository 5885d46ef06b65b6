//! A limit that reads its peer address from axum's `MockConnectInfo` says so once, at warn
//! level, and never names the address: the stand-in is for tests, and left in a server served
//! without connect info it would give every client the same key. (A file of its own: the
//! warning is once per process.)
#![cfg(all(feature = "axum", feature = "tracing"))]

mod support;

use support::logs;

use std::net::SocketAddr;

use axum::extract::connect_info::MockConnectInfo;
use axum::{body::Body, routing::get, Router};
use http::Request;
use logs::Captured;
use tollgate::{Quota, RateLimitLayer};
use tower::ServiceExt;

#[tokio::test]
async fn the_mock_peer_is_announced_once_without_the_address() {
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::WARN));
    let peer: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::gcra(Quota::per_minute(10)))
        .layer(MockConnectInfo(peer));
    for _ in 0..3 {
        let response = app
            .clone()
            .oneshot(Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let text = captured.text();
    assert_eq!(text.matches("MockConnectInfo").count(), 1, "{text}");
    assert!(text.contains("WARN"), "{text}");
    assert!(!text.contains("198.51.100.7"), "{text}");
}
