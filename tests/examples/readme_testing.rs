//! The guide's "Testing your limits", word for word (`tests/examples/readme.rs` checks it): a limited
//! router tested with `oneshot`, axum's `MockConnectInfo` and a `ManualClock`.
#![cfg(feature = "axum")]

use axum::extract::connect_info::MockConnectInfo;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use std::time::Duration;
use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};
use tower::ServiceExt; // oneshot

#[tokio::test]
async fn the_fourth_request_a_minute_is_refused_until_time_passes() {
    let clock = ManualClock::new();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::gcra(Quota::per_minute(3)).clock(clock.clone()))
        // The peer address a server would record; outside (after) the rate limit layer.
        .layer(MockConnectInfo(SocketAddr::from(([192, 0, 2, 1], 4000))));
    let get = || {
        axum::http::Request::get("/")
            .body(axum::body::Body::empty())
            .unwrap()
    };

    for remaining in [2, 1, 0] {
        let response = app.clone().oneshot(get()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let expected = format!("\"3/min\";r={remaining};t={}", 20 * (3 - remaining));
        assert_eq!(response.headers()["ratelimit"], expected.as_str());
    }
    let denied = app.clone().oneshot(get()).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "20");

    clock.advance(Duration::from_secs(20)); // one request comes back every 20 s
    assert_eq!(app.oneshot(get()).await.unwrap().status(), StatusCode::OK);
}
