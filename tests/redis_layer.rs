//! Two axum servers share one limit through the Redis store: real servers, a real HTTP client,
//! a real `redis-server`; time moves by a `ManualClock` the store decides on.

#[path = "support/redis.rs"]
mod server;
#[path = "support/http.rs"]
mod web;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use tollgate::clock::ManualClock;
use tollgate::{Quota, RateLimitLayer};

use web::{header, serve};

async fn two_servers_share_one_limit_per_client_ip() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let mut urls = Vec::new();
    for _ in 0..2 {
        let store = server::closed_on_caller_clock(&redis.url()).await;
        let layer = RateLimitLayer::gcra(Quota::per_minute(3).named("shared"))
            .store(store)
            .clock(clock.clone());
        urls.push(
            serve(
                Router::new()
                    .route("/", get(|| async { "hello" }))
                    .layer(layer),
            )
            .await,
        );
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    // Three requests, whichever server answers them, then a denial from both.
    for (i, remaining) in [2, 1, 0].into_iter().enumerate() {
        let resp = client.get(&urls[i % 2]).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let expected = format!(r#""shared";r={remaining};t={}"#, 20 * (3 - remaining));
        assert_eq!(header(&resp, "ratelimit"), expected);
    }
    for url in &urls {
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&resp, "retry-after"), "20");
    }
    // 20 s later one more request passes, on either server, and only one.
    clock.advance(Duration::from_secs(20));
    let resp = client.get(&urls[1]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = client.get(&urls[0]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// The Redis store cannot carry each key's usage over to new quotas: `Handle::set_quotas`
/// refuses, and the old quotas stay in force (never a fresh budget for every client).
async fn new_quotas_on_redis_are_refused_and_change_nothing() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let store = server::closed_on_caller_clock(&redis.url()).await;
    let layer = RateLimitLayer::gcra(Quota::per_minute(1).named("live"))
        .store(store)
        .key(tollgate::key::Global)
        .clock(ManualClock::new());
    let handle = layer.handle();
    let url = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    let client = reqwest::Client::new();
    assert_eq!(
        client.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    let refused = handle
        .set_quotas(Quota::per_minute(100).named("live"))
        .unwrap_err();
    assert_eq!(refused.kind(), tollgate::ErrorKind::Misconfigured);
    assert!(
        refused
            .to_string()
            .contains("cannot change a limiter's quotas"),
        "{refused}"
    );
    assert_eq!(handle.quotas(), [Quota::per_minute(1).named("live")]);
    let denied = client.get(&url).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
}

fn main() -> std::process::ExitCode {
    server::harness(vec![
        server::needs_redis_async(
            "two_servers_share_one_limit_per_client_ip",
            two_servers_share_one_limit_per_client_ip,
        ),
        server::needs_redis_async(
            "new_quotas_on_redis_are_refused_and_change_nothing",
            new_quotas_on_redis_are_refused_and_change_nothing,
        ),
    ])
}
