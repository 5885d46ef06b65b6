//! Two axum servers share one limit through the Redis store: real servers, a real HTTP client,
//! a real `redis-server`; time moves by a `ManualClock` the store decides on. New quotas set
//! live on both keep what each client used.

use crate::support::http as web;
use crate::support::redis as server;

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

/// New quotas on two servers sharing one Redis, over HTTP: the headers show them at once on
/// each, and the client keeps what it used (2 of 2 a minute, then 10 a minute: 8 more, on
/// either server), never a fresh budget.
async fn new_quotas_on_redis_keep_what_clients_used() {
    let Some(redis) = server::RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    let mut urls = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..2 {
        let store = server::closed_on_caller_clock(&redis.url()).await;
        let layer = RateLimitLayer::gcra(Quota::per_minute(2).named("live"))
            .store(store)
            .key(tollgate::key::Global)
            .clock(clock.clone());
        handles.push(layer.handle());
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer);
        urls.push(serve(app).await);
    }
    let client = reqwest::Client::new();
    for url in &urls {
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    for handle in &handles {
        handle
            .set_quotas(Quota::per_minute(10).named("live"))
            .unwrap();
    }
    let mut passed = 0;
    for i in 0..12 {
        let resp = client.get(&urls[i % 2]).send().await.unwrap();
        let policy = header(&resp, "ratelimit-policy");
        assert!(policy.contains("q=10;w=60"), "{policy}");
        if resp.status() == StatusCode::OK {
            passed += 1;
        }
    }
    assert_eq!(passed, 8);
}

pub(crate) fn trials() -> Vec<server::Trial> {
    vec![
        server::needs_redis_async(
            "two_servers_share_one_limit_per_client_ip",
            two_servers_share_one_limit_per_client_ip,
        ),
        server::needs_redis_async(
            "new_quotas_on_redis_keep_what_clients_used",
            new_quotas_on_redis_keep_what_clients_used,
        ),
    ]
}
