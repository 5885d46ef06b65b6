//! A log that panics while `MockConnectInfo` is announced (a test harness that turns warnings
//! into failures) fails that one request: the announcement is still made at most once, and the
//! requests after it go on. (A file of its own: the announcement is once per process.)
#![cfg(all(feature = "axum", feature = "tracing"))]

use std::net::SocketAddr;

use axum::extract::connect_info::MockConnectInfo;
use axum::{body::Body, routing::get, Router};
use http::Request;
use tollgate::{Quota, RateLimitLayer};
use tower::ServiceExt;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// A subscriber that panics on every warning.
struct DenyWarnings;

impl Subscriber for DenyWarnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            panic!("a warning was logged");
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[tokio::test]
async fn a_log_that_panics_on_the_mock_peer_warning_fails_one_request_only() {
    let _guard = tracing::subscriber::set_default(DenyWarnings);
    let peer: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::gcra(Quota::per_minute(10)))
        .layer(MockConnectInfo(peer));
    // The current-thread runtime runs the task on this thread, under the subscriber.
    let first = tokio::spawn(app.clone().oneshot(Request::new(Body::empty()))).await;
    assert!(first.is_err_and(|e| e.is_panic()), "the warning's panic");
    for _ in 0..2 {
        let response = tokio::spawn(app.clone().oneshot(Request::new(Body::empty())))
            .await
            .expect("a request after the announcement does not panic")
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}
